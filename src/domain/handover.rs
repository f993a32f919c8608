//! A batch's readings by the model's successor instrument (declared by
//! `POST /v1/models/{name}/successor`): in JSON, the object `successor`
//! (`{"start_nm", "interval_nm", "values"}`); in CSV, columns named `successor:<λ>nm`. Either
//! way they are read on the successor's scale, resampled onto its grid and put on the model's
//! scale, so that the successor's own model reads them as the model reads its spectra.

use super::body::Body;
use super::header::CsvError;
use super::spectrum::{
    Grid, Instrument, SpectrumSpec, band_wavelength, nm_name, onto_spec_grid, parse_spectra,
};
use super::{Details, Invalid, ModelSpec, Rows, quote_cell};

/// The prefix of a CSV column holding a successor's reading.
pub const CSV_PREFIX: &str = "successor:";

/// Reads a JSON batch's `successor` (values read apart from `body` as `/successor/values`).
pub(super) fn parse_json(
    body: &mut Body,
    spec: &ModelSpec,
    details: &mut Details,
    warnings: &mut Details,
) -> Option<Rows> {
    let values = body.take_rows("/successor/values");
    let Some(successor) = &spec.successor else {
        details.push(
            "/successor",
            "the model declares no successor instrument (POST /v1/models/{name}/successor)",
        );
        return None;
    };
    let rows = parse_spectra(
        body.value().get("successor"),
        values,
        "/successor",
        successor,
        Instrument::Successor,
        details,
        warnings,
    )?;
    Some(to_model_scale(rows, successor, spec))
}

/// `rows` of spectra read on `from`'s scale, on the scale of `spec`'s spectrum (percent and
/// fraction differ by their full scale; absorbance is read as it is).
pub fn to_model_scale(rows: Rows, from: &SpectrumSpec, spec: &ModelSpec) -> Rows {
    match spec.spectrum.map(|to| scale_factor(from, &to)) {
        Some(factor) if factor != 1.0 => {
            let values = rows.values().iter().map(|v| v * factor).collect();
            Rows::from_row_major(rows.rows(), rows.width(), values)
        }
        _ => rows,
    }
}

/// What a reading on `from`'s scale is multiplied by to be on `to`'s: the ratio of their full
/// scales (1 between equal scales, and for absorbance, which has none).
pub fn scale_factor(from: &SpectrumSpec, to: &SpectrumSpec) -> f64 {
    match (from.full_scale(), to.full_scale()) {
        (Some(a), Some(b)) => b / a,
        _ => 1.0,
    }
}

/// A CSV batch split in two: the CSV of every other column, as a batch without a successor is
/// read, and the successor's readings.
pub(super) struct CsvSplit {
    pub rest: Vec<u8>,
    pub readings: Rows,
    /// Whether the rest holds the model's own instrument's bands (`<λ>nm`).
    pub old_read: bool,
}

/// Whether a CSV's header names a successor column.
pub(super) fn has_csv_columns(body: &[u8]) -> bool {
    // The header's line without quotes holds the whole header: without the prefix in it, no
    // column can start with it, and no reader need be built for every batch. The reader skips
    // blank lines before it.
    let first = body
        .split(|&b| b == b'\n')
        .find(|line| !line.iter().all(u8::is_ascii_whitespace))
        .unwrap_or(body);
    if !first.contains(&b'"')
        && !first
            .windows(CSV_PREFIX.len())
            .any(|w| w == CSV_PREFIX.as_bytes())
    {
        return false;
    }
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::Headers)
        .from_reader(body);
    reader
        .headers()
        .is_ok_and(|h| h.iter().any(|c| c.starts_with(CSV_PREFIX)))
}

/// Splits a CSV batch whose header names `successor:<λ>nm` columns for a model that declares a
/// successor: the readings are checked (numbers, a regular grid that covers the successor's),
/// resampled and put on the model's scale; reflectance above full scale is flagged in
/// `warnings`. Rows whose every cell is empty are left out, as the rest's reader leaves them.
pub(super) fn split_csv(
    body: &[u8],
    spec: &ModelSpec,
    max_rows: usize,
    warnings: &mut Details,
) -> Result<CsvSplit, CsvError> {
    let Some(successor) = &spec.successor else {
        return Err(Invalid::one(
            "/header",
            "the model declares no successor instrument (POST /v1/models/{name}/successor): \
             drop the successor: columns",
        )
        .into());
    };
    let malformed = |e: csv::Error| CsvError::Malformed(format!("unreadable CSV: {e}"));
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::Headers)
        .flexible(true)
        .from_reader(body);
    let header = reader.headers().map_err(malformed)?.clone();
    let mut bands: Vec<(usize, f64)> = Vec::new();
    let mut others = Vec::new();
    let mut details = Details::default();
    for (i, name) in header.iter().enumerate() {
        match name.strip_prefix(CSV_PREFIX) {
            Some(band) => match band_wavelength(band) {
                Some(nm) => bands.push((i, nm)),
                None => details.push(
                    "/header",
                    format!("{name:?}: a successor column is named successor:<λ>nm"),
                ),
            },
            None => others.push(i),
        }
    }
    bands.sort_by(|a, b| a.1.total_cmp(&b.1));
    let grid = grid_of(&bands.iter().map(|b| b.1).collect::<Vec<_>>())
        .map_err(|e| Invalid::one("/header", format!("the successor's columns: {e}")))?;
    if !grid.covers(&successor.grid()) {
        details.push(
            "/header",
            format!(
                "the successor's columns cover {} but it reads {}: mordant never extrapolates",
                grid.describe(),
                successor.grid().describe()
            ),
        );
    }
    let old_read = others
        .iter()
        .any(|&i| band_wavelength(&header[i]).is_some());
    let mut rest = csv::Writer::from_writer(Vec::new());
    let write = |e: csv::Error| CsvError::Malformed(format!("CSV: {e}"));
    rest.write_record(others.iter().map(|&i| &header[i]))
        .map_err(write)?;
    let mut values = Vec::new();
    let mut rows = 0usize;
    for record in reader.records() {
        let record = record.map_err(malformed)?;
        if record.iter().all(|c| c.trim().is_empty()) {
            continue;
        }
        if rows == max_rows {
            return Err(CsvError::TooManyRows(max_rows));
        }
        // As a batch without a successor is read: a cell too many or too few has shifted the
        // row (a decimal comma, say), so no cell of it can be trusted to its column.
        if record.len() != header.len() {
            details.push(
                format!("/rows/{rows}"),
                format!(
                    "has {} values, the header has {}",
                    record.len(),
                    header.len()
                ),
            );
            rows += 1;
            continue;
        }
        for &(i, _) in &bands {
            let cell = record.get(i).unwrap_or("").trim();
            match cell.parse::<f64>() {
                Ok(v) if v.is_finite() => values.push(v),
                _ => {
                    details.push_with(|| {
                        (
                            format!("/rows/{rows}/{}", &header[i]),
                            format!("must be a finite number, found {}", quote_cell(cell)),
                        )
                    });
                    values.push(0.0);
                }
            }
        }
        rest.write_record(others.iter().map(|&i| record.get(i).unwrap_or("")))
            .map_err(write)?;
        rows += 1;
    }
    details.finish("invalid batch")?;
    let rest = rest
        .into_inner()
        .map_err(|e| CsvError::Malformed(format!("CSV: {e}")))?;
    let read = Rows::from_row_major(rows, grid.count, values);
    let readings = to_model_scale(
        onto_spec_grid(&read, &grid, successor, warnings, |i, j| {
            format!("/rows/{i}/{CSV_PREFIX}{}", grid.band_name(j))
        }),
        successor,
        spec,
    );
    Ok(CsvSplit {
        rest,
        readings,
        old_read,
    })
}

/// The regular grid of sorted `wavelengths`, its step as a request would state it; a band named
/// twice (`400nm`, `400.0nm`) is said to be.
pub(super) fn grid_of(wavelengths: &[f64]) -> Result<Grid, String> {
    let (Some(&first), Some(&last)) = (wavelengths.first(), wavelengths.last()) else {
        return Err("no band".to_owned());
    };
    if wavelengths.len() < 2 {
        return Err("a spectrum needs at least 2 bands".to_owned());
    }
    if let Some(twice) = wavelengths.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("the band {} appears twice", nm_name(twice[0])));
    }
    let interval = (last - first) / (wavelengths.len() - 1) as f64;
    let interval = (interval * 1e6).round() / 1e6;
    let regular = wavelengths
        .windows(2)
        .all(|w| ((w[1] - w[0]) - interval).abs() <= 1e-6 * interval.max(1.0));
    if !regular {
        return Err("the columns (<λ>nm) must form a regular wavelength grid".to_owned());
    }
    Grid::new(first, interval, wavelengths.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_successor_column_is_found_in_any_header_the_csv_reader_reads() {
        let found = [
            "500nm,successor:500nm,red\n0.1,0.2,1\n",
            " successor:500nm ,red\r\n0.1,1\r\n",
            "\"successor:500nm\",red\n0.1,1\n",
            "\"a\nb\",successor:500nm\n1,2\n",
            "\u{feff}successor:500nm\n1\n",
            // The reader skips blank lines before the header.
            "\nsuccessor:500nm,red\n0.1,1\n",
            "\r\n\r\nsuccessor:500nm,red\n0.1,1\n",
        ];
        for body in found {
            assert!(has_csv_columns(body.as_bytes()), "{body:?}");
        }
        let not_found = [
            "500nm,red\n0.1,1\n",
            "500nm,red\n0.1,successor:500nm\n",
            "\"500nm\",red\n0.1,1\n",
            "a,xsuccessor:500nm\n1,2\n",
            "",
            "\n\n500nm,red\nsuccessor:500nm,1\n",
        ];
        for body in not_found {
            assert!(!has_csv_columns(body.as_bytes()), "{body:?}");
        }
    }
}
