//! Reflectance spectra: the wavelength grid a model declares, and spectra sent on any grid that
//! covers it, resampled linearly onto the model's.
//!
//! Instruments differ: one spectrophotometer reads 360–780 nm every 5 nm, another 400–700 nm
//! every 10 nm. A model is fitted on one grid; a request may send any regular grid whose range
//! covers the model's, and each spectrum is interpolated linearly at the model's wavelengths.
//! Nothing is ever extrapolated: a spectrum that stops short of the model's range is refused.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::body::RowArray;
use super::{Details, Rows, describe, parse_rows, pointer_token, quote};
use crate::estimator::ReflectanceScale;
pub use crate::estimator::grid::{Grid, MIN_INTERVAL_NM, band_wavelength, nm_name, resample};

/// Most bands in a spectrum a request may send (a fine grid, 0.5 nm over 380–780 nm, is 801).
pub(crate) const MAX_REQUEST_BANDS: usize = 4096;

/// How a spectrum's values are written, as the API names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScaleName {
    /// Reflectance, 0 to 1.
    Fraction,
    /// Reflectance, 0 to 100.
    Percent,
    /// Absorbance `log₁₀(1/R)`, as near-infrared instruments write it: no full scale, and the
    /// values enter the model as they are (Beer–Lambert makes them additive already).
    Absorbance,
}

impl ScaleName {
    /// The name as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ScaleName::Fraction => "fraction",
            ScaleName::Percent => "percent",
            ScaleName::Absorbance => "absorbance",
        }
    }

    /// The reflectance scale, `None` for absorbance.
    pub fn reflectance(self) -> Option<ReflectanceScale> {
        match self {
            ScaleName::Fraction => Some(ReflectanceScale::Fraction),
            ScaleName::Percent => Some(ReflectanceScale::Percent),
            ScaleName::Absorbance => None,
        }
    }
}

/// The spectrum a model declares: its grid and how its reflectances are written. Stored with
/// the model; its bands are the model's first inputs, named by [`Grid::band_name`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpectrumSpec {
    /// First wavelength (nm).
    #[schema(example = 400.0)]
    pub start_nm: f64,
    /// Distance between bands (nm).
    #[schema(example = 10.0)]
    pub interval_nm: f64,
    /// Number of bands (at least 2).
    #[schema(example = 31, minimum = 2)]
    pub count: usize,
    /// Reflectance as a `fraction` (0–1) or in `percent` (0–100), or `absorbance`
    /// (`log₁₀(1/R)`, near-infrared; only with `"transform": "none"`).
    pub scale: ScaleName,
}

const SPECTRUM_FIELDS: [&str; 4] = ["start_nm", "interval_nm", "count", "scale"];

impl SpectrumSpec {
    /// Parses the `spectrum` field of a model specification at `path`.
    pub fn parse(
        value: &Value,
        path: &str,
        max_bands: usize,
        details: &mut Details,
    ) -> Option<Self> {
        let Value::Object(fields) = value else {
            details.push(
                path,
                format!(
                    "must be {{\"start_nm\", \"interval_nm\", \"count\", \"scale\"}}, found {}",
                    describe(value)
                ),
            );
            return None;
        };
        let (start_nm, interval_nm) = grid_fields(fields, &SPECTRUM_FIELDS, path, details);
        let count = match fields.get("count") {
            Some(v) => match v.as_u64() {
                Some(n) if n >= 2 && n <= max_bands as u64 => Some(n as usize),
                _ => {
                    details.push(
                        format!("{path}/count"),
                        format!(
                            "must be an integer from 2 to {max_bands}, found {}",
                            describe(v)
                        ),
                    );
                    None
                }
            },
            None => {
                details.push(format!("{path}/count"), "is required");
                None
            }
        };
        let scale = match fields.get("scale") {
            Some(v) => match serde_json::from_value::<ScaleName>(v.clone()) {
                Ok(scale) => Some(scale),
                Err(_) => {
                    details.push(
                        format!("{path}/scale"),
                        format!(
                            "must be one of \"fraction\", \"percent\", \"absorbance\", \
                             found {}",
                            describe(v)
                        ),
                    );
                    None
                }
            },
            None => {
                details.push(format!("{path}/scale"), "is required");
                None
            }
        };
        let (start_nm, interval_nm, count, scale) = (start_nm?, interval_nm?, count?, scale?);
        match Grid::new(start_nm, interval_nm, count) {
            Ok(_) => Some(Self {
                start_nm,
                interval_nm,
                count,
                scale,
            }),
            Err(e) => {
                details.push(path, e);
                None
            }
        }
    }

    /// The model's grid. Validated when the spec was parsed; a stored spec is trusted.
    pub fn grid(&self) -> Grid {
        Grid {
            start_nm: self.start_nm,
            interval_nm: self.interval_nm,
            count: self.count,
        }
    }

    /// The same spectrum read on another grid.
    pub fn on_grid(&self, grid: Grid) -> Self {
        Self {
            start_nm: grid.start_nm,
            interval_nm: grid.interval_nm,
            count: grid.count,
            scale: self.scale,
        }
    }

    /// The names of the bands, in order.
    pub fn band_names(&self) -> Vec<String> {
        let grid = self.grid();
        (0..self.count).map(|i| grid.band_name(i)).collect()
    }

    /// Full reflectance on this spectrum's scale (1 or 100); absorbance has none.
    pub fn full_scale(&self) -> Option<f64> {
        self.scale.reflectance().map(ReflectanceScale::full)
    }
}

/// A spectrum object's fields, and its grid's where they are numbers.
pub(super) struct SpectrumObject<'v> {
    pub fields: &'v serde_json::Map<String, Value>,
    pub start_nm: Option<f64>,
    pub interval_nm: Option<f64>,
}

/// A spectrum object `{"start_nm", "interval_nm", "values"}` at `path`; `None` (and the problem
/// in `details`) when `value` is not an object.
pub(super) fn spectrum_object<'v>(
    value: &'v Value,
    path: &str,
    details: &mut Details,
) -> Option<SpectrumObject<'v>> {
    let Value::Object(fields) = value else {
        details.push(
            path,
            format!(
                "must be {{\"start_nm\", \"interval_nm\", \"values\"}}, found {}",
                describe(value)
            ),
        );
        return None;
    };
    let (start_nm, interval_nm) = grid_fields(
        fields,
        &["start_nm", "interval_nm", "values"],
        path,
        details,
    );
    Some(SpectrumObject {
        fields,
        start_nm,
        interval_nm,
    })
}

/// The `start_nm` and `interval_nm` of an object at `path` whose fields must be among
/// `allowed`.
fn grid_fields(
    fields: &serde_json::Map<String, Value>,
    allowed: &[&str],
    path: &str,
    details: &mut Details,
) -> (Option<f64>, Option<f64>) {
    for key in fields.keys() {
        if !allowed.contains(&key.as_str()) {
            details.push(format!("{path}/{}", pointer_token(key)), "unknown field");
        }
    }
    let start_nm = number(fields.get("start_nm"), &format!("{path}/start_nm"), details);
    let interval_nm = number(
        fields.get("interval_nm"),
        &format!("{path}/interval_nm"),
        details,
    );
    (start_nm, interval_nm)
}

fn number(value: Option<&Value>, path: &str, details: &mut Details) -> Option<f64> {
    match value {
        Some(v) if v.is_number() => v.as_f64(),
        Some(v) => {
            details.push(
                path,
                format!("must be a number of nm, found {}", describe(v)),
            );
            None
        }
        None => {
            details.push(path, "is required");
            None
        }
    }
}

/// The instrument that read a request's spectra: the model's own (`model`), or the successor
/// declared by `POST /v1/models/{name}/successor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Instrument {
    Model,
    Successor,
}

/// Parses a request's `spectra` (`{"start_nm", "interval_nm", "values": [[…], …]}`, every row
/// one spectrum on that grid, on the model's scale; `values` read apart, as [`RowArray`]) and
/// resamples every row onto `spec`'s grid. Problems go to `details`; reflectances above full
/// scale (optical brighteners) are kept, and reported in `warnings`.
pub fn parse_spectra(
    value: Option<&Value>,
    values: Option<RowArray>,
    path: &str,
    spec: &SpectrumSpec,
    instrument: Instrument,
    details: &mut Details,
    warnings: &mut Details,
) -> Option<Rows> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        details.push(path, "is required: the model reads a reflectance spectrum");
        return None;
    };
    let SpectrumObject {
        start_nm,
        interval_nm,
        ..
    } = spectrum_object(value, path, details)?;
    let values_path = format!("{path}/values");
    if matches!(&values, Some(RowArray::Rows(rows)) if rows.rows == 0) {
        details.push(&values_path, "needs at least one spectrum");
        return None;
    }
    // The grid's length is the first row's; every other row must match it.
    let (width, too_wide) = match &values {
        Some(RowArray::Rows(rows)) => (rows.width, rows.too_wide),
        _ => (0, false),
    };
    let rows = parse_rows(values, &values_path, details);
    if too_wide {
        return None;
    }
    let model = spec.grid();
    let grid = match (start_nm, interval_nm) {
        (Some(start), Some(interval)) => match covering_grid(start, interval, width, &model) {
            Ok(grid) => Some(grid),
            Err(Uncovered::Short(grid)) => {
                // A successor's readings are held to the grid its declaration gave.
                let (reads, range) = match instrument {
                    Instrument::Successor => (
                        "the successor instrument is declared on",
                        "its declared range",
                    ),
                    Instrument::Model => ("the model reads", "the model's range"),
                };
                details.push(
                    path,
                    format!(
                        "the spectra cover {} but {reads} {}: mordant never extrapolates, \
                         send a spectrum that covers {range}",
                        grid.describe(),
                        model.describe()
                    ),
                );
                None
            }
            Err(Uncovered::Invalid(e)) => {
                details.push(path, e);
                None
            }
        },
        _ => None,
    };
    let (rows, grid) = (rows?, grid?);
    Some(onto_spec_grid(&rows, &grid, spec, warnings, |i, j| {
        format!("{values_path}/{i}/{j}")
    }))
}

/// Why a spectrum's grid as sent cannot be read onto the grid it must cover.
#[derive(Debug)]
pub enum Uncovered {
    /// `start_nm`, `interval_nm` and the count form no grid (the reason).
    Invalid(String),
    /// A grid, but one that stops short of the required range.
    Short(Grid),
}

/// The grid of a spectrum sent with `start_nm`, `interval_nm` and `count` bands, where it is a
/// valid grid whose range covers `required`'s: a spectrum is read on the grid it needs by
/// resampling, never by extrapolation.
pub fn covering_grid(
    start_nm: f64,
    interval_nm: f64,
    count: usize,
    required: &Grid,
) -> Result<Grid, Uncovered> {
    match Grid::new(start_nm, interval_nm, count) {
        Ok(grid) if grid.covers(required) => Ok(grid),
        Ok(grid) => Err(Uncovered::Short(grid)),
        Err(e) => Err(Uncovered::Invalid(e)),
    }
}

/// Rows that open with a spectrum on `read` (a grid that covers `spec`'s), resampled onto
/// `spec`'s grid, with every reflectance above full scale or below 0 flagged in `warnings` at
/// `path(row, band)` ([`flag_out_of_scale`]).
pub fn onto_spec_grid(
    rows: &Rows,
    read: &Grid,
    spec: &SpectrumSpec,
    warnings: &mut Details,
    path: impl Fn(usize, usize) -> String,
) -> Rows {
    flag_out_of_scale(rows, read, spec, OutOfScale::Kept, warnings, path);
    resample_rows(rows, read, &spec.grid())
}

/// What becomes of a reflectance above full scale or below 0, for its warning to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutOfScale {
    /// Kept as sent: a model's inputs, which its transform reads as it reads any other.
    Kept,
    /// Read as full scale or as 0: colour, for which a surface reflects between none and all
    /// of the light.
    Clamped,
}

/// Warns of every reflectance above full scale (an optical brightener fluoresces) or below 0
/// (no surface reflects less than nothing) in the spectrum that opens each row of `rows`, a
/// spectrum on `grid` read on `spec`'s scale, saying what becomes of it (`fate`); the warning
/// for row `i`, band `j` is at `path(i, j)`.
pub fn flag_out_of_scale(
    rows: &Rows,
    grid: &Grid,
    spec: &SpectrumSpec,
    fate: OutOfScale,
    warnings: &mut Details,
    path: impl Fn(usize, usize) -> String,
) {
    let Some(full) = spec.full_scale() else {
        return;
    };
    let unit = match spec.scale {
        ScaleName::Percent => " %",
        ScaleName::Fraction | ScaleName::Absorbance => "",
    };
    let (above, below) = match fate {
        OutOfScale::Kept => ("kept as sent".to_owned(), "kept as sent"),
        OutOfScale::Clamped => (format!("read as {full}{unit}"), "read as 0"),
    };
    for (i, row) in rows.values().chunks_exact(rows.width().max(1)).enumerate() {
        for (j, &r) in row[..grid.count].iter().enumerate() {
            if r > full {
                warnings.push(
                    path(i, j),
                    format!(
                        "reflectance {}{unit} at {} is above full scale ({full}{unit}): an \
                         optical brightener? {above}",
                        quote(r),
                        grid.band_name(j)
                    ),
                );
            } else if r < 0.0 {
                warnings.push(
                    path(i, j),
                    format!(
                        "reflectance {}{unit} at {} is below 0, which no surface reflects: a \
                         dark reading subtracted, or a wrong scale? {below}",
                        quote(r),
                        grid.band_name(j)
                    ),
                );
            }
        }
    }
}

/// Rows that open with a spectrum on `from` (then possibly named features), with the spectrum
/// resampled onto `to` and the rest kept.
fn resample_rows(rows: &Rows, from: &Grid, to: &Grid) -> Rows {
    if from == to {
        return rows.clone();
    }
    let width = to.count + rows.width() - from.count;
    let mut values = vec![0.0; rows.rows() * width];
    for (src, dst) in rows
        .values()
        .chunks_exact(rows.width())
        .zip(values.chunks_exact_mut(width))
    {
        let (spectrum, features) = src.split_at(from.count);
        resample(from, spectrum, to, &mut dst[..to.count]);
        dst[to.count..].copy_from_slice(features);
    }
    Rows::from_row_major(rows.rows(), width, values)
}

/// The model's input rows: each row's spectrum (on the model's grid), then its named features.
pub fn join_inputs(spectra: &Rows, features: &Rows) -> Rows {
    debug_assert_eq!(spectra.rows(), features.rows());
    let width = spectra.width() + features.width();
    let mut values = Vec::with_capacity(spectra.rows() * width);
    for r in 0..spectra.rows() {
        values.extend_from_slice(&spectra.values()[r * spectra.width()..(r + 1) * spectra.width()]);
        values.extend_from_slice(
            &features.values()[r * features.width()..(r + 1) * features.width()],
        );
    }
    Rows::from_row_major(spectra.rows(), width, values)
}

/// The tests' model of a spectrum: 4 bands from 400 nm, 10 nm apart, on `scale`, then the named
/// features `features`, and two outputs.
#[cfg(test)]
pub(crate) fn test_spec(scale: &str, features: &[&str]) -> super::ModelSpec {
    super::ModelSpec::parse(&serde_json::json!({
        "name": "dips",
        "spectrum": {"start_nm": 400, "interval_nm": 10, "count": 4, "scale": scale},
        "features": features, "outputs": ["red", "blue"]
    }))
    .expect("a valid spec")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::domain::{Body, RowField, Width};

    #[test]
    fn a_grid_is_read_only_where_it_is_valid_and_covers_the_required_range() {
        let model = Grid::new(400.0, 10.0, 31).unwrap();
        // Finer, and wider on both ends, or exactly the model's: read.
        assert_eq!(
            covering_grid(360.0, 5.0, 85, &model).unwrap(),
            Grid::new(360.0, 5.0, 85).unwrap()
        );
        assert_eq!(covering_grid(400.0, 10.0, 31, &model).unwrap(), model);
        // A band short at either end: the grid, to say how far it reaches.
        for (start, count) in [(410.0, 30), (400.0, 30)] {
            match covering_grid(start, 10.0, count, &model) {
                Err(Uncovered::Short(grid)) => {
                    assert_eq!(grid, Grid::new(start, 10.0, count).unwrap())
                }
                other => panic!("{start} nm, {count} bands: {other:?}"),
            }
        }
        // No grid at all: Grid::new's reason.
        let reason = Grid::new(400.0, 0.0, 31).unwrap_err();
        match covering_grid(400.0, 0.0, 31, &model) {
            Err(Uncovered::Invalid(e)) => assert_eq!(e, reason),
            other => panic!("{other:?}"),
        }
    }

    /// The `values` of a `spectra` object, read as a request body reads them.
    fn values(spectra: &Value) -> Option<RowArray> {
        let field = RowField {
            pointer: "/spectra/values",
            width: Width::FirstRow {
                max: MAX_REQUEST_BANDS,
            },
        };
        let body = serde_json::json!({ "spectra": spectra }).to_string();
        Body::parse(body.as_bytes(), &[field], usize::MAX)
            .expect("JSON")
            .take_rows("/spectra/values")
    }

    fn percent_model() -> SpectrumSpec {
        SpectrumSpec {
            start_nm: 400.0,
            interval_nm: 10.0,
            count: 31,
            scale: ScaleName::Percent,
        }
    }

    #[test]
    fn a_finer_wider_grid_resamples_onto_the_model_grid() {
        // 360–780 nm every 5 nm, a straight line in λ: interpolation is exact on it.
        let from = Grid::new(360.0, 5.0, 85).unwrap();
        let line: Vec<f64> = (0..85).map(|i| 10.0 + 0.1 * from.wavelength(i)).collect();
        let to = percent_model().grid();
        let mut out = vec![0.0; 31];
        resample(&from, &line, &to, &mut out);
        for (k, v) in out.iter().enumerate() {
            assert!(
                (v - (10.0 + 0.1 * to.wavelength(k))).abs() < 1e-12,
                "band {k}: {v}"
            );
        }
    }

    #[test]
    fn band_names_are_rounded_and_headers_read_in_any_spelling() {
        assert_eq!(nm_name(400.0 + 7.0 * 0.1), "400.7nm");
        assert_eq!(Grid::new(400.0, 0.1, 10).unwrap().band_name(7), "400.7nm");
        for header in ["400nm", "400.0nm", "400 nm"] {
            assert_eq!(band_wavelength(header), Some(400.0), "{header}");
        }
        assert_eq!(band_wavelength("R400"), None);
        assert!(Grid::new(400.0, 1e-300, 2).is_err());
    }

    #[test]
    fn between_bands_is_the_weighted_mean_of_its_neighbours() {
        let from = Grid::new(400.0, 20.0, 3).unwrap();
        let to = Grid::new(410.0, 15.0, 2).unwrap();
        let mut out = vec![0.0; 2];
        resample(&from, &[0.0, 1.0, 5.0], &to, &mut out);
        assert_eq!(out, vec![0.5, 2.0]);
    }

    #[test]
    fn a_spectrum_short_of_the_model_range_is_refused_not_extrapolated() {
        let body = json!({"start_nm": 410, "interval_nm": 10, "values": [vec![50.0; 30]]});
        let (mut details, mut warnings) = (Details::default(), Details::default());
        let rows = parse_spectra(
            Some(&body),
            values(&body),
            "/spectra",
            &percent_model(),
            Instrument::Model,
            &mut details,
            &mut warnings,
        );
        assert!(rows.is_none());
        let err = details.finish("invalid").unwrap_err();
        assert_eq!(err.details[0].path, "/spectra");
        assert!(
            err.details[0].message.contains("never extrapolates"),
            "{err:?}"
        );
    }

    #[test]
    fn reflectance_above_full_scale_is_flagged_and_kept() {
        let mut row = vec![50.0; 31];
        row[3] = 104.5;
        let body = json!({"start_nm": 400, "interval_nm": 10, "values": [row]});
        let (mut details, mut warnings) = (Details::default(), Details::default());
        let rows = parse_spectra(
            Some(&body),
            values(&body),
            "/spectra",
            &percent_model(),
            Instrument::Model,
            &mut details,
            &mut warnings,
        )
        .expect("valid");
        assert_eq!(rows.values()[3], 104.5);
        let warnings = warnings.into_list();
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].path, "/spectra/values/0/3");
        assert!(warnings[0].message.contains("430nm"), "{warnings:?}");
    }

    #[test]
    fn absorbance_has_no_full_scale_to_flag() {
        let row: Vec<f64> = (0..31).map(|i| 2.0 + 0.1 * f64::from(i)).collect();
        let body = json!({"start_nm": 400, "interval_nm": 10, "values": [row]});
        let absorbance = SpectrumSpec {
            scale: ScaleName::Absorbance,
            ..percent_model()
        };
        let (mut details, mut warnings) = (Details::default(), Details::default());
        let rows = parse_spectra(
            Some(&body),
            values(&body),
            "/spectra",
            &absorbance,
            Instrument::Model,
            &mut details,
            &mut warnings,
        )
        .expect("valid");
        assert_eq!(rows.values()[30], 5.0);
        assert!(warnings.is_empty(), "{:?}", warnings.into_list());
        // The same values read as reflectance fractions are 31 brighteners.
        let (mut details, mut warnings) = (Details::default(), Details::default());
        let fraction = SpectrumSpec {
            scale: ScaleName::Fraction,
            ..percent_model()
        };
        parse_spectra(
            Some(&body),
            values(&body),
            "/spectra",
            &fraction,
            Instrument::Model,
            &mut details,
            &mut warnings,
        )
        .expect("valid");
        assert_eq!(warnings.into_list().len(), 31);
    }

    #[test]
    fn rows_of_another_length_are_reported_by_row() {
        let body =
            json!({"start_nm": 400, "interval_nm": 10, "values": [vec![50.0; 31], vec![50.0; 30]]});
        let (mut details, mut warnings) = (Details::default(), Details::default());
        assert!(
            parse_spectra(
                Some(&body),
                values(&body),
                "/spectra",
                &percent_model(),
                Instrument::Model,
                &mut details,
                &mut warnings
            )
            .is_none()
        );
        let err = details.finish("invalid").unwrap_err();
        assert_eq!(err.details[0].path, "/spectra/values/1");
    }

    #[test]
    fn spec_parse_reports_each_bad_field() {
        let mut details = Details::default();
        let spec = SpectrumSpec::parse(
            &json!({"start_nm": "400", "interval_nm": -5, "count": 1, "scale": "ratio", "x": 1}),
            "/spectrum",
            2048,
            &mut details,
        );
        assert!(spec.is_none());
        let paths: Vec<String> = details
            .finish("invalid")
            .unwrap_err()
            .details
            .into_iter()
            .map(|d| d.path)
            .collect();
        for path in [
            "/spectrum/x",
            "/spectrum/start_nm",
            "/spectrum/count",
            "/spectrum/scale",
        ] {
            assert!(
                paths.iter().any(|p| p == path),
                "{path} missing from {paths:?}"
            );
        }
    }

    proptest! {
        /// Resampling onto the source grid itself returns the spectrum unchanged, and onto any
        /// covered grid stays within the range of the source values (no extrapolation).
        #[test]
        fn resampling_never_leaves_the_source_range(
            values in prop::collection::vec(0.0f64..120.0, 2..60),
            start_offset in 0.0f64..1.0,
            span in 0.0f64..1.0,
            count in 2usize..50,
        ) {
            let from = Grid::new(380.0, 5.0, values.len()).unwrap();
            let mut same = vec![0.0; values.len()];
            resample(&from, &values, &from, &mut same);
            prop_assert_eq!(&same, &values);
            let width = from.end_nm() - from.start_nm;
            let start = from.start_nm + start_offset * width * 0.5;
            let end = start + span * (from.end_nm() - start);
            let interval = ((end - start) / (count - 1) as f64).max(MIN_INTERVAL_NM);
            let to = Grid::new(start, interval, count).unwrap();
            prop_assume!(from.covers(&to));
            let mut out = vec![0.0; count];
            resample(&from, &values, &to, &mut out);
            let (lo, hi) = values.iter().fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
            for v in out {
                prop_assert!(v >= lo - 1e-9 && v <= hi + 1e-9);
            }
        }
    }
}
