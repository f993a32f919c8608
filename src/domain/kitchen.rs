//! What a match request asks of its candidate recipes: which dyes, how many at most, their
//! bounds and prices, the order and how many to answer (see `mordant_kitchen::candidates`).
//! Read from the body's fields against the model's outputs, every problem reported with its
//! path.

use mordant_colour::CmcWeights;
use mordant_kitchen::{Ranking, Search, Tolerance};
use serde_json::{Map, Value};

use super::colour::single_spectrum;
use super::spectrum::{OutOfScale, flag_out_of_scale};
use super::{BatchId, Details, Rows, SpectrumSpec, describe, pointer_token, quote};
use crate::estimator::grid::resample;
use crate::estimator::recipe::{DyeBounds, MAX_BOUNDED_DYES};

/// The body fields this module reads.
pub const FIELDS: [&str; 7] = [
    "candidates",
    "dyes",
    "max_dyes",
    "bounds",
    "prices",
    "sort",
    "max_candidates",
];

/// The fields that shape the candidate list, which `"candidates": false` leaves out.
const LISTING: [&str; 4] = ["max_dyes", "bounds", "sort", "max_candidates"];

/// `candidates`: `true` (the default) lists candidate recipes; `false` answers only the
/// non-negative recipe over every allowed dye (what match answered before candidates), and
/// the options that shape a list are refused.
pub fn read_listing(fields: &Map<String, Value>, details: &mut Details) -> Option<bool> {
    let listing = match fields.get("candidates") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            details.push(
                "/candidates",
                format!("must be true or false, found {}", describe(other)),
            );
            return None;
        }
    };
    if !listing {
        let mut clash = false;
        for key in LISTING.iter().filter(|k| fields.contains_key(**k)) {
            details.push(
                format!("/{key}"),
                "shapes the candidate list, which \"candidates\": false leaves out",
            );
            clash = true;
        }
        if clash {
            return None;
        }
    }
    Some(listing)
}

pub use mordant_kitchen::candidates::{DEFAULT_MAX_CANDIDATES, DEFAULT_MAX_DYES};
/// The most candidates a request may ask for per target.
pub const MAX_CANDIDATES: usize = 100;

/// The candidate search of a match request for a model with `outputs` (the dyes), judged by
/// `tolerance` and `cmc`; `None` with the problems in `details`.
pub fn read_search(
    fields: &Map<String, Value>,
    outputs: &[String],
    only: Option<&[usize]>,
    judgement: Option<(Tolerance, CmcWeights)>,
    details: &mut Details,
) -> Option<Search> {
    // A correction's dyes are the recipe's: they replace the allow-list.
    let allowed = match only {
        Some(dyes) => Some(dyes.to_vec()),
        None => allowed(fields.get("dyes"), outputs, details),
    };
    let max_dyes = count(
        fields.get("max_dyes"),
        "/max_dyes",
        DEFAULT_MAX_DYES,
        MAX_BOUNDED_DYES,
        details,
    );
    let max_candidates = count(
        fields.get("max_candidates"),
        "/max_candidates",
        DEFAULT_MAX_CANDIDATES,
        MAX_CANDIDATES,
        details,
    );
    let bounds = bounds(fields.get("bounds"), outputs, details);
    let prices = prices(fields.get("prices"), outputs, details);
    let ranking = ranking(fields.get("sort"), details);
    let (allowed, prices, ranking, (tolerance, cmc)) = (allowed?, prices?, ranking?, judgement?);
    if let Some(prices) = &prices {
        let missing: Vec<&str> = allowed
            .iter()
            .filter(|&&i| prices[i].is_none())
            .map(|&i| outputs[i].as_str())
            .collect();
        if !missing.is_empty() {
            details.push(
                "/prices",
                format!(
                    "has no price for {} (every dye a candidate may use needs one)",
                    missing.join(", ")
                ),
            );
            return None;
        }
    } else if ranking == Ranking::Cost {
        details.push("/sort", "\"cost\" needs \"prices\"");
        return None;
    }
    Some(Search {
        allowed,
        max_dyes: max_dyes?,
        bounds: bounds?,
        prices: prices.map(|p| p.into_iter().map(|v| v.unwrap_or(0.0)).collect()),
        ranking,
        max_candidates: max_candidates?,
        tolerance,
        cmc,
    })
}

/// The body fields of a correction, besides a predict body's and `tolerance` and `cmc`.
pub const CORRECTION_FIELDS: [&str; 6] = [
    "measured", "recipe", "bounds", "prices", "learn", "batch_id",
];

/// What a correction request asks, read against the model.
#[derive(Clone, Debug)]
pub struct CorrectionRequest {
    /// The recipe dyed, one amount per output.
    pub dyed: Vec<f64>,
    /// The outputs it used (amount > 0), ascending.
    pub dyes: Vec<usize>,
    /// The dip's measured reflectance, on the model's grid and scale.
    pub measured: Vec<f64>,
    pub search: Search,
    /// Whether to learn the dip as an observation.
    pub learn: bool,
    /// The batch id the learnt dip is stored under, when the request names one.
    pub batch_id: Option<BatchId>,
}

/// A correction's fields for a model with a declared `spectrum` and `outputs`; `None` with the
/// problems in `details` (a measured reflectance above full scale goes to `warnings`).
pub fn read_correction(
    fields: &Map<String, Value>,
    spectrum: &SpectrumSpec,
    outputs: &[String],
    judgement: Option<(Tolerance, CmcWeights)>,
    details: &mut Details,
    warnings: &mut Details,
) -> Option<CorrectionRequest> {
    let dyed = recipe(fields.get("recipe"), outputs, details);
    let measured = measured(fields.get("measured"), spectrum, details, warnings);
    let learn = match fields.get("learn") {
        None | Some(Value::Null) => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            details.push(
                "/learn",
                format!("must be true or false, found {}", describe(other)),
            );
            None
        }
    };
    let batch_id = match fields.get("batch_id") {
        None | Some(Value::Null) => Some(None),
        Some(Value::String(id)) => match BatchId::parse(id) {
            Ok(id) => Some(Some(id)),
            Err(e) => {
                details.push("/batch_id", e);
                None
            }
        },
        Some(other) => {
            details.push(
                "/batch_id",
                format!("must be a string, found {}", describe(other)),
            );
            None
        }
    };
    // Without a valid recipe there are no dyes to price or bound; the rest is still checked.
    let dyes: Vec<usize> = dyed.as_ref().map_or_else(Vec::new, |d| {
        (0..outputs.len()).filter(|&i| d[i] > 0.0).collect()
    });
    let search = read_search(fields, outputs, Some(&dyes), judgement, details);
    let (learn, batch_id) = (learn?, batch_id?);
    if batch_id.is_some() && !learn {
        details.push(
            "/batch_id",
            "names the batch a learnt dip is stored in: it needs \"learn\": true",
        );
        return None;
    }
    Some(CorrectionRequest {
        dyed: dyed?,
        dyes,
        measured: measured?,
        search: search?,
        learn,
        batch_id,
    })
}

/// `recipe`: the amounts dyed by output name (an output left out was not used); at least one
/// dye, at most [`MAX_BOUNDED_DYES`].
fn recipe(value: Option<&Value>, outputs: &[String], details: &mut Details) -> Option<Vec<f64>> {
    if value.is_none() {
        details.push("/recipe", "is required: the amounts dyed, by dye");
        return None;
    }
    let found = per_output(
        value,
        "/recipe",
        "amounts",
        outputs,
        details,
        |v, at, details| number(v, at, false, details),
    )?;
    let dyed: Vec<f64> = found.into_iter().map(|v| v.unwrap_or(0.0)).collect();
    let used = dyed.iter().filter(|&&c| c > 0.0).count();
    if used == 0 || used > MAX_BOUNDED_DYES {
        details.push(
            "/recipe",
            format!(
                "a correction adjusts the amounts of the dyes dyed: from 1 to \
                 {MAX_BOUNDED_DYES} dyes above 0, found {used}"
            ),
        );
        return None;
    }
    Some(dyed)
}

/// `measured`: the dip's reflectance `{"start_nm", "interval_nm", "values": […]}` on the
/// model's scale, covering the model's grid, resampled onto it.
fn measured(
    value: Option<&Value>,
    spectrum: &SpectrumSpec,
    details: &mut Details,
    warnings: &mut Details,
) -> Option<Vec<f64>> {
    let model = spectrum.grid();
    let (grid, values) = single_spectrum(value, "/measured", &model, "the model reads", details)?;
    let rows = Rows::from_row_major(1, values.len(), values);
    flag_out_of_scale(
        &rows,
        &grid,
        spectrum,
        OutOfScale::Kept,
        warnings,
        |_, j| format!("/measured/values/{j}"),
    );
    let mut on_model = vec![0.0; model.count];
    resample(&grid, rows.values(), &model, &mut on_model);
    Some(on_model)
}

/// The index of the output named `key`, or a problem at `path`.
fn output(key: &str, outputs: &[String], path: &str, details: &mut Details) -> Option<usize> {
    let found = outputs.iter().position(|o| o == key);
    if found.is_none() {
        details.push(
            path,
            format!(
                "{key:?} is not an output of the model ({})",
                outputs.join(", ")
            ),
        );
    }
    found
}

/// `dyes`: distinct output names, at least one; every output when left out.
fn allowed(value: Option<&Value>, outputs: &[String], details: &mut Details) -> Option<Vec<usize>> {
    let items = match value {
        None | Some(Value::Null) => return Some((0..outputs.len()).collect()),
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(other) => {
            details.push(
                "/dyes",
                format!(
                    "must be a non-empty array of the model's outputs, found {}",
                    describe(other)
                ),
            );
            return None;
        }
    };
    let mut chosen = vec![false; outputs.len()];
    let mut ok = true;
    for (j, item) in items.iter().enumerate() {
        let path = format!("/dyes/{j}");
        match item.as_str() {
            Some(name) => match output(name, outputs, &path, details) {
                Some(i) if chosen[i] => {
                    details.push(path, format!("{name:?} is listed twice"));
                    ok = false;
                }
                Some(i) => chosen[i] = true,
                None => ok = false,
            },
            None => {
                details.push(
                    path,
                    format!("must be an output's name, found {}", describe(item)),
                );
                ok = false;
            }
        }
    }
    ok.then(|| (0..outputs.len()).filter(|&i| chosen[i]).collect())
}

/// A whole number in `1..=max`, `default` when left out; written as an integer or, as JSON
/// Schema counts it, a number without a fraction (`3.0`).
fn count(
    value: Option<&Value>,
    path: &str,
    default: usize,
    max: usize,
    details: &mut Details,
) -> Option<usize> {
    let whole = |v: &Value| {
        v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && (1.0..=max as f64).contains(f))
                .map(|f| f as u64)
        })
    };
    match value {
        None | Some(Value::Null) => Some(default),
        Some(v) => match whole(v).and_then(|n| usize::try_from(n).ok()) {
            Some(n) if (1..=max).contains(&n) => Some(n),
            _ => {
                details.push(
                    path,
                    format!(
                        "must be a whole number from 1 to {max}, found {}",
                        describe(v)
                    ),
                );
                None
            }
        },
    }
}

/// An object keyed by output names, each value read by `read` at its path.
fn per_output<T>(
    value: Option<&Value>,
    path: &str,
    what: &str,
    outputs: &[String],
    details: &mut Details,
    mut read: impl FnMut(&Value, &str, &mut Details) -> Option<T>,
) -> Option<Vec<Option<T>>> {
    let fields = match value {
        None | Some(Value::Null) => return Some((0..outputs.len()).map(|_| None).collect()),
        Some(Value::Object(fields)) => fields,
        Some(other) => {
            details.push(
                path,
                format!(
                    "must be an object of {what} by dye, found {}",
                    describe(other)
                ),
            );
            return None;
        }
    };
    let mut found: Vec<Option<T>> = (0..outputs.len()).map(|_| None).collect();
    let mut ok = true;
    for (key, value) in fields {
        let at = format!("{path}/{}", pointer_token(key));
        let index = output(key, outputs, &at, details);
        match (index, read(value, &at, details)) {
            (Some(i), Some(v)) => found[i] = Some(v),
            _ => ok = false,
        }
    }
    ok.then_some(found)
}

/// A finite number `≥ 0` (or `> 0` when `positive`) at `path`.
fn number(value: &Value, path: &str, positive: bool, details: &mut Details) -> Option<f64> {
    match value.as_f64() {
        Some(v) if v.is_finite() && (v > 0.0 || (!positive && v == 0.0)) => Some(v),
        _ => {
            let least = if positive { "positive" } else { "non-negative" };
            details.push(
                path,
                format!("must be a {least} number, found {}", describe(value)),
            );
            None
        }
    }
}

/// `bounds`: `{"<dye>": {"min": ≥ 0, "max": > 0}}`, `min ≤ max`; a dye left out is bounded
/// below by 0 only.
fn bounds(
    value: Option<&Value>,
    outputs: &[String],
    details: &mut Details,
) -> Option<Vec<DyeBounds>> {
    let found = per_output(
        value,
        "/bounds",
        "bounds",
        outputs,
        details,
        |v, at, details| {
            let Value::Object(fields) = v else {
                details.push(
                    at,
                    format!("must be {{\"min\": …, \"max\": …}}, found {}", describe(v)),
                );
                return None;
            };
            for key in fields
                .keys()
                .filter(|k| !matches!(k.as_str(), "min" | "max"))
            {
                details.push(format!("{at}/{}", pointer_token(key)), "unknown field");
            }
            let default = DyeBounds::default();
            let min = match fields.get("min") {
                None | Some(Value::Null) => Some(default.min),
                Some(v) => number(v, &format!("{at}/min"), false, details),
            };
            let max = match fields.get("max") {
                None | Some(Value::Null) => Some(default.max),
                Some(v) => number(v, &format!("{at}/max"), true, details),
            };
            let (min, max) = (min?, max?);
            if min > max {
                details.push(
                    at,
                    format!("min {} is above max {}", quote(min), quote(max)),
                );
                return None;
            }
            Some(DyeBounds { min, max })
        },
    )?;
    Some(found.into_iter().map(Option::unwrap_or_default).collect())
}

/// `prices`: `{"<dye>": ≥ 0}`, per unit of concentration.
fn prices(
    value: Option<&Value>,
    outputs: &[String],
    details: &mut Details,
) -> Option<Option<Vec<Option<f64>>>> {
    if matches!(value, None | Some(Value::Null)) {
        return Some(None);
    }
    per_output(
        value,
        "/prices",
        "prices",
        outputs,
        details,
        |v, at, details| number(v, at, false, details),
    )
    .map(Some)
}

/// `sort`: `"de00"` (the default), `"cost"` or `"metamerism"`.
fn ranking(value: Option<&Value>, details: &mut Details) -> Option<Ranking> {
    match value.map(|v| (v, v.as_str())) {
        None | Some((Value::Null, _)) | Some((_, Some("de00"))) => Some(Ranking::ColourDifference),
        Some((_, Some("cost"))) => Some(Ranking::Cost),
        Some((_, Some("metamerism"))) => Some(Ranking::Metamerism),
        Some((v, _)) => {
            details.push(
                "/sort",
                format!(
                    "must be \"de00\", \"cost\" or \"metamerism\", found {}",
                    describe(v)
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::colour::DEFAULT_TOLERANCE;

    fn outputs() -> Vec<String> {
        ["yellow", "red", "blue", "navy"].map(String::from).to_vec()
    }

    fn read(body: Value) -> Result<Search, Vec<String>> {
        let Value::Object(fields) = body else {
            unreachable!()
        };
        let mut details = Details::default();
        let found = read_search(
            &fields,
            &outputs(),
            None,
            Some((DEFAULT_TOLERANCE, CmcWeights::default())),
            &mut details,
        );
        let mut paths: Vec<String> = details.into_list().into_iter().map(|d| d.path).collect();
        paths.sort_unstable();
        found.ok_or(paths)
    }

    #[test]
    fn defaults_allow_every_dye_three_at_a_time_ten_answers_by_colour() {
        let search = read(json!({})).unwrap();
        assert_eq!(search.allowed, [0, 1, 2, 3]);
        assert_eq!(
            (search.max_dyes, search.max_candidates),
            (DEFAULT_MAX_DYES, DEFAULT_MAX_CANDIDATES)
        );
        assert_eq!(search.ranking, Ranking::ColourDifference);
        assert!(search.prices.is_none());
        assert!(search.bounds.iter().all(|b| *b == DyeBounds::default()));
    }

    #[test]
    fn a_full_request_is_read_by_name() {
        let search = read(json!({
            "dyes": ["navy", "yellow", "red"],
            "max_dyes": 2,
            "bounds": {"red": {"max": 1.5}, "navy": {"min": 0.05, "max": 0.05}},
            "prices": {"yellow": 3.2, "red": 4, "navy": 0, "blue": 9},
            "sort": "cost",
            "max_candidates": 5
        }))
        .unwrap();
        assert_eq!(search.allowed, [0, 1, 3]);
        assert_eq!((search.max_dyes, search.max_candidates), (2, 5));
        assert_eq!(search.bounds[1], DyeBounds { min: 0.0, max: 1.5 });
        assert_eq!(
            search.bounds[3],
            DyeBounds {
                min: 0.05,
                max: 0.05
            }
        );
        assert_eq!(search.prices, Some(vec![3.2, 4.0, 9.0, 0.0]));
        assert_eq!(search.ranking, Ranking::Cost);
        // A count without a fraction is a whole number however it is written; with one, or
        // out of range, it is not.
        let search = read(json!({"max_dyes": 2.0, "max_candidates": 5e0})).unwrap();
        assert_eq!((search.max_dyes, search.max_candidates), (2, 5));
        for (dyes, answers) in [(2.5, 5.5), (0.0, 101.0), (-1.0, 1e300)] {
            let refused = read(json!({"max_dyes": dyes, "max_candidates": answers}));
            assert_eq!(
                refused.unwrap_err(),
                ["/max_candidates", "/max_dyes"],
                "{dyes} {answers}"
            );
        }
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let paths = read(json!({
            "dyes": ["red", "green", "red", 3],
            "max_dyes": 9,
            "bounds": {"blue": {"min": 2, "max": 1}, "teal": {"max": 1}, "navy": {"min": -1, "lo": 0}},
            "prices": {"red": -2},
            "sort": "price",
            "max_candidates": 0
        }))
        .unwrap_err();
        assert_eq!(
            paths,
            [
                "/bounds/blue",
                "/bounds/navy/lo",
                "/bounds/navy/min",
                "/bounds/teal",
                "/dyes/1",
                "/dyes/2",
                "/dyes/3",
                "/max_candidates",
                "/max_dyes",
                "/prices/red",
                "/sort"
            ]
        );
        // Prices must cover every dye a candidate may use; sorting by cost needs them.
        assert_eq!(
            read(json!({"dyes": ["red", "blue"], "prices": {"red": 1}})).unwrap_err(),
            ["/prices"]
        );
        assert!(read(json!({"dyes": ["red"], "prices": {"red": 1}})).is_ok());
        assert_eq!(read(json!({"sort": "cost"})).unwrap_err(), ["/sort"]);
        assert_eq!(read(json!({"dyes": []})).unwrap_err(), ["/dyes"]);
    }
}
