//! Two reflectance spectra compared as a dye house judges a dyeing against its standard: CIELAB
//! under D65, A and F11 (CIE 1964 10°), CIEDE2000 and CMC(l:c) with ΔL*, ΔC*, ΔH*, and a
//! verdict against a tolerance under D65. The colour science is `mordant-colour`'s; this module
//! reads the request and samples the spectra.
//!
//! A spectrum must cover 400–700 nm, the range every textile spectrophotometer measures; the
//! colour is integrated over 380–780 nm every 1 nm, each spectrum interpolated linearly on its
//! own grid and, beyond its ends, extended with its end values (the practice of ASTM E308 for
//! data that stop short of the colour-matching functions' range, where they weigh little).

use mordant_colour::{CieLab, CmcWeights, Difference, Illuminant};
use serde_json::Value;

use super::spectrum::{MAX_REQUEST_BANDS, SpectrumObject, flag_above_full, spectrum_object};
use super::{Details, Grid, Invalid, Rows, ScaleName, SpectrumSpec, describe, pointer_token};
use crate::estimator::grid::resample;

/// The range a compared spectrum must cover.
const REQUIRED: Grid = Grid {
    start_nm: 400.0,
    interval_nm: 10.0,
    count: 31,
};

/// Whether spectra on `grid` cover the range colour needs (400–700 nm).
pub fn can_judge(grid: &Grid) -> bool {
    grid.covers(&REQUIRED)
}

/// The 1 nm grid the colour is integrated over.
const COLOUR_GRID: Grid = Grid {
    start_nm: mordant_colour::COLOUR_RANGE_NM.0 as f64,
    interval_nm: 1.0,
    count: mordant_colour::COLOUR_RANGE_NM.1 - mordant_colour::COLOUR_RANGE_NM.0 + 1,
};

/// Default tolerance: ΔE00 1.0 under D65, a common commercial pass/fail for textiles.
pub const DEFAULT_TOLERANCE: Tolerance = Tolerance::De00(1.0);

/// The colour difference a verdict is judged on, and its limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// CIEDE2000 at most this.
    De00(f64),
    /// CMC(l:c), with the request's weights, at most this.
    Cmc(f64),
}

impl Tolerance {
    /// The metric's name in the API, and the limit.
    pub fn parts(self) -> (&'static str, f64) {
        match self {
            Tolerance::De00(v) => ("de00", v),
            Tolerance::Cmc(v) => ("cmc", v),
        }
    }

    /// Whether `d` is within the tolerance.
    pub fn passes(self, d: &Difference) -> bool {
        match self {
            Tolerance::De00(v) => d.de00 <= v,
            Tolerance::Cmc(v) => d.cmc <= v,
        }
    }
}

/// A reflectance spectrum as a fraction, on its own grid.
#[derive(Clone, Debug, PartialEq)]
pub struct Reflectance {
    grid: Grid,
    values: Vec<f64>,
}

impl Reflectance {
    /// `values` (fractions, one per band of `grid`).
    pub fn new(grid: Grid, values: Vec<f64>) -> Self {
        debug_assert_eq!(grid.count, values.len());
        Self { grid, values }
    }

    /// CIELAB under `illuminant`.
    fn lab(&self, illuminant: Illuminant) -> Result<CieLab, mordant_colour::ColourError> {
        // A surface reflects at most all the light and no less than none: each band is read so
        // before interpolation, so a brightener's excess does not leak into its neighbours.
        let bands: Vec<f64> = self.values.iter().map(|r| r.clamp(0.0, 1.0)).collect();
        // `resample` holds the end value beyond the grid's ends: the extension described above.
        let mut sampled = vec![0.0; COLOUR_GRID.count];
        resample(&self.grid, &bands, &COLOUR_GRID, &mut sampled);
        let start = COLOUR_GRID.start_nm;
        mordant_colour::lab(|nm| sampled[(nm - start) as usize], illuminant)
    }
}

/// A validated body of `POST /v1/colour/compare`.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareRequest {
    reference: Reflectance,
    sample: Reflectance,
    pub tolerance: Tolerance,
    pub cmc: CmcWeights,
}

/// The sample against the reference under one illuminant.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub illuminant: Illuminant,
    pub reference: CieLab,
    pub sample: CieLab,
    pub difference: Difference,
}

/// What a comparison found: D65 first, then A and F11.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub seen: Vec<Seen>,
    /// Whether the difference under D65 is within the tolerance.
    pub pass: bool,
}

const FIELDS: [&str; 5] = ["reference", "sample", "scale", "tolerance", "cmc"];

impl CompareRequest {
    /// Parses the body, reporting every invalid field with its path; reflectances above full
    /// scale (a brightener) are kept and reported in `warnings`.
    pub fn parse(body: &Value, warnings: &mut Details) -> Result<Self, Invalid> {
        let Value::Object(fields) = body else {
            return Err(Invalid::one(
                "",
                format!("the body must be a JSON object, found {}", describe(body)),
            ));
        };
        let mut details = Details::default();
        for key in fields.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
            details.push(format!("/{}", pointer_token(key)), "unknown field");
        }
        let scale = match fields.get("scale") {
            None => {
                details.push("/scale", "is required: \"fraction\" or \"percent\"");
                None
            }
            Some(v) => match serde_json::from_value::<ScaleName>(v.clone())
                .ok()
                .and_then(|name| Some((name, name.reflectance()?)))
            {
                Some(scale) => Some(scale),
                None => {
                    details.push(
                        "/scale",
                        format!(
                            "must be \"fraction\" or \"percent\" (colour is computed from \
                             reflectance), found {}",
                            describe(v)
                        ),
                    );
                    None
                }
            },
        };
        let reference = spectrum(fields.get("reference"), "/reference", &mut details);
        let sample = spectrum(fields.get("sample"), "/sample", &mut details);
        let judgement = read_judgement(fields, &mut details);
        details.finish("invalid comparison")?;
        let (Some((scale_name, scale)), Some(reference), Some(sample), Some((tolerance, cmc))) =
            (scale, reference, sample, judgement)
        else {
            return Err(Invalid::one("", "invalid comparison"));
        };
        let mut to_fraction = |(grid, values): (Grid, Vec<f64>), path: &str| {
            let spec = SpectrumSpec {
                start_nm: grid.start_nm,
                interval_nm: grid.interval_nm,
                count: grid.count,
                scale: scale_name,
            };
            let rows = Rows::from_row_major(1, values.len(), values);
            flag_above_full(&rows, &grid, &spec, warnings, |_, j| {
                format!("{path}/values/{j}")
            });
            let fraction = scale.to_fraction();
            Reflectance::new(grid, rows.values().iter().map(|r| r * fraction).collect())
        };
        Ok(Self {
            reference: to_fraction(reference, "/reference"),
            sample: to_fraction(sample, "/sample"),
            tolerance,
            cmc,
        })
    }

    /// The sample against the reference under D65, A and F11.
    pub fn compare(&self) -> Result<Comparison, mordant_colour::ColourError> {
        judge(&self.reference, &self.sample, self.tolerance, self.cmc)
    }
}

/// `sample` against `reference` under D65, A and F11, and the verdict under D65.
pub fn judge(
    reference: &Reflectance,
    sample: &Reflectance,
    tolerance: Tolerance,
    cmc: CmcWeights,
) -> Result<Comparison, mordant_colour::ColourError> {
    let seen = Illuminant::ALL
        .into_iter()
        .map(|illuminant| {
            let reference = reference.lab(illuminant)?;
            let sample = sample.lab(illuminant)?;
            let difference = Difference::between(&reference, &sample, cmc)?;
            Ok(Seen {
                illuminant,
                reference,
                sample,
                difference,
            })
        })
        .collect::<Result<Vec<_>, mordant_colour::ColourError>>()?;
    let pass = tolerance.passes(&seen[0].difference);
    Ok(Comparison { seen, pass })
}

/// The `tolerance` and `cmc` fields of a body (defaults where left out), problems to `details`.
pub fn read_judgement(
    fields: &serde_json::Map<String, Value>,
    details: &mut Details,
) -> Option<(Tolerance, CmcWeights)> {
    let tolerance = tolerance(fields.get("tolerance"), details);
    let cmc = weights(fields.get("cmc"), details);
    Some((tolerance?, cmc?))
}

/// One spectrum `{"start_nm", "interval_nm", "values": […]}` at `path`, covering 400–700 nm.
fn spectrum(value: Option<&Value>, path: &str, details: &mut Details) -> Option<(Grid, Vec<f64>)> {
    let Some(value) = value else {
        details.push(
            path,
            "is required: {\"start_nm\", \"interval_nm\", \"values\"}",
        );
        return None;
    };
    let SpectrumObject {
        fields,
        start_nm,
        interval_nm,
    } = spectrum_object(value, path, details)?;
    let values_path = format!("{path}/values");
    let values = match fields.get("values") {
        Some(Value::Array(items)) if items.len() > MAX_REQUEST_BANDS => {
            details.push(
                &values_path,
                format!("at most {MAX_REQUEST_BANDS} values, found {}", items.len()),
            );
            None
        }
        Some(Value::Array(items)) => {
            let mut values = Vec::with_capacity(items.len());
            for (j, item) in items.iter().enumerate() {
                match item.as_f64().filter(|v| v.is_finite()) {
                    Some(v) => values.push(v),
                    None => details.push(
                        format!("{values_path}/{j}"),
                        format!("must be a finite number, found {}", describe(item)),
                    ),
                }
            }
            (values.len() == items.len()).then_some(values)
        }
        other => {
            let found = other.map_or("nothing".to_owned(), describe);
            details.push(
                &values_path,
                format!("must be an array of reflectances, found {found}"),
            );
            None
        }
    };
    let (start, interval, values) = (start_nm?, interval_nm?, values?);
    match Grid::new(start, interval, values.len()) {
        Ok(grid) if can_judge(&grid) => Some((grid, values)),
        Ok(grid) => {
            details.push(
                path,
                format!(
                    "the spectrum covers {} but colour needs at least {}",
                    grid.describe(),
                    REQUIRED.describe()
                ),
            );
            None
        }
        Err(e) => {
            details.push(path, e);
            None
        }
    }
}

/// `{"de00": v}` or `{"cmc": v}`, `v > 0`; ΔE00 1.0 when left out (or `{}`).
fn tolerance(value: Option<&Value>, details: &mut Details) -> Option<Tolerance> {
    let fields = match value {
        None | Some(Value::Null) => return Some(DEFAULT_TOLERANCE),
        Some(Value::Object(fields)) if fields.is_empty() => return Some(DEFAULT_TOLERANCE),
        Some(Value::Object(fields)) if fields.len() == 1 => fields,
        Some(other) => {
            details.push(
                "/tolerance",
                format!(
                    "must be {{\"de00\": limit}} or {{\"cmc\": limit}}, found {}",
                    describe(other)
                ),
            );
            return None;
        }
    };
    let (metric, limit) = fields.iter().next()?;
    let path = format!("/tolerance/{}", pointer_token(metric));
    let limit = match limit.as_f64() {
        Some(v) if v.is_finite() && v > 0.0 => v,
        _ => {
            details.push(
                &path,
                format!("must be a positive number, found {}", describe(limit)),
            );
            return None;
        }
    };
    match metric.as_str() {
        "de00" => Some(Tolerance::De00(limit)),
        "cmc" => Some(Tolerance::Cmc(limit)),
        _ => {
            details.push(&path, "unknown metric: \"de00\" or \"cmc\"");
            None
        }
    }
}

/// `{"l": 2, "c": 1}` (the default), each weight positive.
fn weights(value: Option<&Value>, details: &mut Details) -> Option<CmcWeights> {
    let fields = match value {
        None | Some(Value::Null) => return Some(CmcWeights::default()),
        Some(Value::Object(fields)) => fields,
        Some(other) => {
            details.push(
                "/cmc",
                format!("must be {{\"l\": 2, \"c\": 1}}, found {}", describe(other)),
            );
            return None;
        }
    };
    for key in fields.keys().filter(|k| !matches!(k.as_str(), "l" | "c")) {
        details.push(format!("/cmc/{}", pointer_token(key)), "unknown field");
    }
    let mut weight = |key: &str, default: f64| match fields.get(key) {
        None => Some(default),
        Some(v) => match v.as_f64() {
            Some(w) if w.is_finite() && w > 0.0 => Some(w),
            _ => {
                details.push(
                    format!("/cmc/{key}"),
                    format!("must be a positive number, found {}", describe(v)),
                );
                None
            }
        },
    };
    let defaults = CmcWeights::default();
    let lightness = weight("l", defaults.lightness);
    let chroma = weight("c", defaults.chroma);
    Some(CmcWeights {
        lightness: lightness?,
        chroma: chroma?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn orange(nm: f64) -> f64 {
        20.0 + 60.0 / (1.0 + (-(nm - 550.0) / 20.0).exp())
    }

    fn on_grid(start: f64, interval: f64, count: usize, r: impl Fn(f64) -> f64) -> Value {
        let values: Vec<f64> = (0..count).map(|i| r(start + i as f64 * interval)).collect();
        json!({"start_nm": start, "interval_nm": interval, "values": values})
    }

    #[test]
    fn a_spectrum_against_itself_on_another_grid_passes_with_no_difference() {
        let body = json!({
            "reference": on_grid(400.0, 10.0, 31, orange),
            "sample": on_grid(360.0, 5.0, 85, orange),
            "scale": "percent",
        });
        let mut warnings = Details::default();
        let request = CompareRequest::parse(&body, &mut warnings).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(request.tolerance, DEFAULT_TOLERANCE);
        assert_eq!(request.cmc, CmcWeights::default());
        let found = request.compare().unwrap();
        assert!(found.pass);
        let names: Vec<_> = found.seen.iter().map(|s| s.illuminant.name()).collect();
        assert_eq!(names, ["D65", "A", "F11"]);
        // The two grids sample the same smooth curve; linear interpolation differs a little
        // between them, far below a visible difference.
        for seen in &found.seen {
            assert!(seen.difference.de00 < 0.1, "{seen:?}");
        }
    }

    #[test]
    fn a_darker_sample_fails_and_says_how() {
        let body = json!({
            "reference": on_grid(400.0, 10.0, 31, orange),
            "sample": on_grid(400.0, 10.0, 31, |nm| 0.9 * orange(nm)),
            "scale": "percent",
            "tolerance": {"cmc": 0.8},
            "cmc": {"l": 1},
        });
        let request = CompareRequest::parse(&body, &mut Details::default()).unwrap();
        assert_eq!(request.tolerance, Tolerance::Cmc(0.8));
        assert_eq!(
            request.cmc,
            CmcWeights {
                lightness: 1.0,
                chroma: 1.0
            }
        );
        let found = request.compare().unwrap();
        let d65 = &found.seen[0].difference;
        assert!(!found.pass, "{d65:?}");
        assert!(d65.components.lightness < -1.0, "{d65:?}");
        assert!(d65.cmc > 0.8 && d65.de00 > 0.8, "{d65:?}");
        // Judged against ΔE00 with a wide limit instead, it passes.
        let lenient = CompareRequest {
            tolerance: Tolerance::De00(d65.de00 + 0.01),
            ..request
        };
        assert!(lenient.compare().unwrap().pass);
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let body = json!({
            "reference": on_grid(420.0, 10.0, 29, orange),
            "sample": {"start_nm": 400, "interval_nm": 10, "values": [50, "x", 50]},
            "scale": "absorbance",
            "tolerance": {"de76": 1},
            "cmc": {"l": 0, "k": 1},
            "extra": true,
        });
        let err = CompareRequest::parse(&body, &mut Details::default()).unwrap_err();
        let mut paths: Vec<_> = err.details.iter().map(|d| d.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "/cmc/k",
                "/cmc/l",
                "/extra",
                "/reference",
                "/sample/values/1",
                "/scale",
                "/tolerance/de76"
            ],
            "{err:?}"
        );
        let reference = err.details.iter().find(|d| d.path == "/reference").unwrap();
        assert!(reference.message.contains("400–700 nm"), "{reference:?}");
    }

    #[test]
    fn a_brightener_is_read_as_full_reflectance_and_flagged() {
        let mut bright = on_grid(400.0, 10.0, 31, orange);
        bright["values"][2] = json!(104.0);
        let body = json!({"reference": on_grid(400.0, 10.0, 31, orange), "sample": bright, "scale": "percent"});
        let mut warnings = Details::default();
        let request = CompareRequest::parse(&body, &mut warnings).unwrap();
        let warnings = warnings.into_list();
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].path, "/sample/values/2");
        // The same as a sample that read exactly full scale there.
        let mut full = body.clone();
        full["sample"]["values"][2] = json!(100.0);
        let full = CompareRequest::parse(&full, &mut Details::default()).unwrap();
        let (bright, full) = (request.compare().unwrap(), full.compare().unwrap());
        for (b, f) in bright.seen.iter().zip(&full.seen) {
            assert!(b.difference.de00 > 0.0);
            assert_eq!(b.difference, f.difference);
        }
    }
}
