//! `mordant simulate`: a synthetic dye house, for demos, load and measured accuracy.
//!
//! * [`forward`] — the Kubelka–Munk forward model, the dye range and the fabrics, every constant
//!   documented;
//! * [`generate`] — lab dips with instrument and process noise and the drift scenarios
//!   (`instrument_swap`, `dye_lot`, `new_substrate`), deterministic for a seed;
//! * [`colour`] — CIELAB and CIEDE2000, `mordant-colour` re-exported;
//! * [`evaluate`](mod@evaluate) — predicted recipes scored in ΔE00, and the forgetting study across an
//!   instrument swap;
//! * [`post`] — posting simulated batches to a running service.
//!
//! Everything but [`post`] is pure.

pub use mordant_colour as colour;
mod error;
pub mod evaluate;
pub mod forward;
pub mod generate;
pub mod kitchen;
pub mod post;
pub mod targets;
pub mod transfer;

pub use evaluate::{
    EvaluationOptions, EvaluationReport, ForgettingOptions, ForgettingReport, evaluate,
    forgetting_study,
};
pub use generate::{
    Grid, INSTRUMENT_GRID, Instrument, LabDip, MODEL_GRID, NoiseModel, Scenario, SimulationConfig,
    Simulator, World,
};

pub use error::SimulateError;
use mordant_estimator::ReflectanceScale;

/// The CSV header: one 0/1 column per fabric with an indicator (named after the fabric, see
/// [`Simulator::fabric_features`]), the grid's `<wavelength>nm` columns, then one column per dye.
pub fn csv_header(fabrics: &[&str], grid: &Grid, dyes: &[&str]) -> Vec<String> {
    let mut header: Vec<String> = fabrics.iter().map(|f| (*f).to_owned()).collect();
    header.extend(grid.band_names());
    header.extend(dyes.iter().map(|d| (*d).to_owned()));
    header
}

/// A recipe written `name=amount,…` (% owf by dye name; the dyes left out are 0), as
/// `simulate --dye` reads it.
pub fn parse_recipe(sim: &Simulator, text: &str) -> Result<Vec<f64>, SimulateError> {
    let names = sim.dye_names();
    let mut recipe = vec![0.0; names.len()];
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, amount) = part
            .split_once('=')
            .ok_or_else(|| SimulateError::Options(format!("{part:?} is not name=amount")))?;
        let index = names
            .iter()
            .position(|n| *n == name.trim())
            .ok_or_else(|| {
                SimulateError::Options(format!(
                    "{name:?} is not a dye of the simulation ({})",
                    names.join(", ")
                ))
            })?;
        recipe[index] = amount
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|c| c.is_finite() && *c >= 0.0)
            .ok_or_else(|| {
                SimulateError::Options(format!("{amount:?} is not an amount (% owf, ≥ 0)"))
            })?;
    }
    Ok(recipe)
}

/// The code of the fabric named `name`.
pub fn fabric_code(sim: &Simulator, name: &str) -> Result<u32, SimulateError> {
    sim.substrates()
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.code)
        .ok_or_else(|| {
            let names: Vec<&str> = sim.substrates().iter().map(|s| s.name).collect();
            SimulateError::Options(format!(
                "{name:?} is not a fabric of the simulation ({})",
                names.join(", ")
            ))
        })
}

/// The names of the fabric indicator features of `sim`.
pub fn fabric_names(sim: &Simulator) -> Vec<&'static str> {
    sim.fabric_features().iter().map(|s| s.name).collect()
}

/// Writes rows `0..rows` of `sim` as CSV (header first): the fabric indicators, the reflectance on
/// `scale` (4 decimals in percent, 6 as a fraction), the recipe (% owf, 5 decimals; 0 for
/// unused dyes).
pub fn write_csv(
    sim: &Simulator,
    rows: usize,
    scale: ReflectanceScale,
    out: impl std::io::Write,
) -> Result<(), SimulateError> {
    write_dips(sim, (0..rows).map(|row| sim.lab_dip(row)), scale, out)
}

/// Writes `dips` of `sim` as [`write_csv`] writes its rows.
pub fn write_dips(
    sim: &Simulator,
    dips: impl Iterator<Item = LabDip>,
    scale: ReflectanceScale,
    out: impl std::io::Write,
) -> Result<(), SimulateError> {
    let mut writer = csv::Writer::from_writer(out);
    writer.write_record(csv_header(
        &fabric_names(sim),
        &sim.config().grid,
        &sim.dye_names(),
    ))?;
    let factor = 0.01 / scale.to_fraction();
    let mut record = Vec::new();
    for dip in dips {
        record.clear();
        record.extend(
            sim.fabric_indicators(dip.sample.substrate)
                .iter()
                .map(|v| v.to_string()),
        );
        record.extend(dip.reflectance.iter().map(|r| match scale {
            ReflectanceScale::Percent => format!("{:.4}", r * factor),
            ReflectanceScale::Fraction => format!("{:.6}", r * factor),
        }));
        record.extend(dip.sample.recipe.iter().map(|c| format!("{c:.5}")));
        writer.write_record(&record)?;
    }
    writer.flush().map_err(csv::Error::from)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipe_and_a_fabric_are_read_by_name() {
        let sim = Simulator::new(SimulationConfig::new(4));
        let recipe = parse_recipe(&sim, "red_1=1.02, yellow_1=0.12,navy_1=0").unwrap();
        let names = sim.dye_names();
        assert_eq!(recipe.len(), names.len());
        assert_eq!(
            recipe[names.iter().position(|n| *n == "red_1").unwrap()],
            1.02
        );
        assert_eq!(recipe.iter().filter(|c| **c > 0.0).count(), 2);
        for bad in ["green_1=1", "red_1", "red_1=-1", "red_1=x"] {
            assert!(parse_recipe(&sim, bad).is_err(), "{bad}");
        }
        assert_eq!(fabric_code(&sim, "greige_cotton").unwrap(), 1);
        assert!(fabric_code(&sim, "silk").is_err());
        // One dyeing written as a row of the CSV.
        let dip = sim.dye(1, 0, &recipe, 0, false);
        let mut out = Vec::new();
        write_dips(
            &sim,
            std::iter::once(dip),
            ReflectanceScale::Percent,
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let row: Vec<&str> = text.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(&row[..2], ["1", "0"]);
        assert_eq!(
            row[row.len() - names.len()..]
                .iter()
                .filter(|c| **c != "0.00000")
                .count(),
            2
        );
    }

    #[test]
    fn csv_has_the_documented_header_and_one_row_per_lab_dip() {
        let sim = Simulator::new(SimulationConfig::new(4));
        let mut out = Vec::new();
        write_csv(&sim, 5, ReflectanceScale::Percent, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6);
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(&header[..2], ["greige_cotton", "polyester_cotton"]);
        assert_eq!(header[2], "360nm");
        assert_eq!(header[3], "370nm");
        assert_eq!(header[44], "780nm");
        assert_eq!(&header[45..], sim.dye_names().as_slice());
        for (row, line) in lines[1..].iter().enumerate() {
            let cells: Vec<f64> = line.split(',').map(|c| c.parse().unwrap()).collect();
            assert_eq!(cells.len(), header.len());
            let dip = sim.lab_dip(row);
            let code = dip.sample.substrate;
            assert_eq!(cells[0], f64::from(u8::from(code == 1)));
            assert_eq!(cells[1], f64::from(u8::from(code == 2)));
            assert!((cells[2] - dip.reflectance[0]).abs() < 1e-4);
            assert_eq!(cells[45..].iter().filter(|c| **c > 0.0).count(), 3);
        }
        // As fractions, the same numbers a hundred times smaller.
        let mut fraction = Vec::new();
        write_csv(&sim, 1, ReflectanceScale::Fraction, &mut fraction).unwrap();
        let text = String::from_utf8(fraction).unwrap();
        let first: f64 = text
            .lines()
            .nth(1)
            .unwrap()
            .split(',')
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        assert!((first - sim.lab_dip(0).reflectance[0] / 100.0).abs() < 1e-6);
    }

    #[test]
    fn any_grid_names_its_columns() {
        let grid = Grid {
            start_nm: 400.0,
            interval_nm: 2.5,
            count: 3,
        };
        let header = csv_header(&["f"], &grid, &["a"]);
        assert_eq!(header, ["f", "400nm", "402.5nm", "405nm", "a"]);
    }
}
