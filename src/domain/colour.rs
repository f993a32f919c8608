//! Two reflectance spectra compared as a dye house judges a dyeing against its standard: CIELAB
//! under D65, A and F11 (CIE 1964 10°), CIEDE2000 and CMC(l:c) with ΔL*, ΔC*, ΔH*, and a
//! verdict against a tolerance under D65. The colour science is `mordant-colour`'s and
//! `mordant-kitchen`'s; this module reads the request.
//!
//! A spectrum must cover 400–700 nm, the range every textile spectrophotometer measures; the
//! colour is integrated over 380–780 nm every 1 nm, each spectrum interpolated linearly on its
//! own grid and, beyond its ends, extended with its end values (the practice of ASTM E308 for
//! data that stop short of the colour-matching functions' range, where they weigh little).

use mordant_colour::CmcWeights;
pub use mordant_kitchen::judge::DEFAULT_TOLERANCE;
pub use mordant_kitchen::{Colorimeter, Comparison, Seen, Tolerance, can_judge};
use serde_json::Value;

use super::spectrum::{
    MAX_REQUEST_BANDS, OutOfScale, SpectrumObject, Uncovered, covering_grid, flag_out_of_scale,
    spectrum_object,
};
use super::{Details, Grid, Invalid, Rows, ScaleName, SpectrumSpec, describe, pointer_token};

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

    /// CIELAB under D65, A and F11.
    fn labs(&self) -> Result<[mordant_colour::CieLab; 3], mordant_colour::ColourError> {
        Colorimeter::new(&self.grid)?.labs(&self.values)
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

const FIELDS: [&str; 5] = ["reference", "sample", "scale", "tolerance", "cmc"];

impl CompareRequest {
    /// Parses the body, reporting every invalid field with its path; reflectances above full
    /// scale (a brightener) or below 0 are reported in `warnings`, and colour reads them as
    /// full scale or 0.
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
            flag_out_of_scale(
                &rows,
                &grid,
                &spec,
                OutOfScale::Clamped,
                warnings,
                |_, j| format!("{path}/values/{j}"),
            );
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
        mordant_kitchen::judge(
            &self.reference.labs()?,
            &self.sample.labs()?,
            self.tolerance,
            self.cmc,
        )
    }
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
    single_spectrum(
        value,
        path,
        &mordant_kitchen::colorimeter::REQUIRED,
        "colour needs at least",
        details,
    )
}

/// One spectrum `{"start_nm", "interval_nm", "values": […]}` at `path` (one reading, not rows
/// of them), covering `required` (`why` says what needs it).
pub fn single_spectrum(
    value: Option<&Value>,
    path: &str,
    required: &Grid,
    why: &str,
    details: &mut Details,
) -> Option<(Grid, Vec<f64>)> {
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
    match covering_grid(start, interval, values.len(), required) {
        Ok(grid) => Some((grid, values)),
        Err(Uncovered::Short(grid)) => {
            details.push(
                path,
                // Any interval serves (the spectrum is resampled): only the range is needed.
                format!(
                    "the spectrum covers {} but {why} {}–{} nm",
                    grid.describe(),
                    required.start_nm,
                    required.end_nm()
                ),
            );
            None
        }
        Err(Uncovered::Invalid(e)) => {
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
        Some(Value::Object(fields)) => {
            details.push(
                "/tolerance",
                format!(
                    "must give one limit, {{\"de00\": limit}} or {{\"cmc\": limit}}, found {}",
                    fields.len()
                ),
            );
            return None;
        }
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
            details.push(
                &path,
                format!("unknown metric {metric:?}: \"de00\" or \"cmc\""),
            );
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
        assert!(
            reference
                .message
                .ends_with("colour needs at least 400–700 nm"),
            "{reference:?}"
        );
        let metric = err
            .details
            .iter()
            .find(|d| d.path == "/tolerance/de76")
            .unwrap();
        assert_eq!(metric.message, r#"unknown metric "de76": "de00" or "cmc""#);
        // Two limits at once: which one judges would be a guess.
        let mut both = body.clone();
        both["tolerance"] = json!({"de00": 1, "cmc": 1});
        let err = CompareRequest::parse(&both, &mut Details::default()).unwrap_err();
        let tolerance = err.details.iter().find(|d| d.path == "/tolerance").unwrap();
        assert!(tolerance.message.ends_with("found 2"), "{tolerance:?}");
    }

    /// A brightener's reading above full scale is read as full scale, a reading below 0 as 0,
    /// and each warning says so.
    #[test]
    fn a_reading_beyond_the_scale_is_read_as_its_end_and_flagged() {
        for (sent, read, says) in [(104.0, 100.0, "read as 100 %"), (-3.0, 0.0, "read as 0")] {
            let mut odd = on_grid(400.0, 10.0, 31, orange);
            odd["values"][2] = json!(sent);
            let body = json!({"reference": on_grid(400.0, 10.0, 31, orange), "sample": odd, "scale": "percent"});
            let mut warnings = Details::default();
            let request = CompareRequest::parse(&body, &mut warnings).unwrap();
            let warnings = warnings.into_list();
            assert_eq!(warnings.len(), 1, "{sent}");
            assert_eq!(warnings[0].path, "/sample/values/2");
            assert!(warnings[0].message.ends_with(says), "{warnings:?}");
            // The same as a sample that read exactly that end of the scale there.
            let mut end = body.clone();
            end["sample"]["values"][2] = json!(read);
            let end = CompareRequest::parse(&end, &mut Details::default()).unwrap();
            let (odd, end) = (request.compare().unwrap(), end.compare().unwrap());
            for (o, e) in odd.seen.iter().zip(&end.seen) {
                assert!(o.difference.de00 > 0.0);
                assert_eq!(o.difference, e.difference, "{sent}");
            }
        }
    }
}
