//! Growing a live model: a new output (a dye joins the range) or a named feature whose value
//! in every row learnt so far is known (a new fabric indicator, 0 for every dyeing before it).
//! The bodies of `POST /v1/models/{name}/outputs` and `POST /v1/models/{name}/features`.
//!
//! Both are exact: the estimator's statistics of the past rows with the new column are those
//! rows' statistics with exact zeros inserted (see `crates/estimator/src/statistics.rs`), the
//! statistics a model given the column from the start would hold. A feature whose past values
//! are unknown (a new sensor) has no such statistics and is refused.

use std::collections::HashSet;

use serde_json::Value;

use super::model::{
    MAX_FEATURES, MAX_OUTPUTS, MAX_STATE_ENTRIES, TransformName, column_names, intercept_name,
    reserved_column,
};
use super::{Details, Invalid, ModelSpec, describe, pointer_token};

/// What a request adds to a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// Outputs, appended after the others.
    Outputs,
    /// Named features, appended after the others (before the intercept).
    Features,
}

impl Growth {
    /// The body's list field, and what one of its names is called in messages.
    fn field(self) -> (&'static str, &'static str) {
        match self {
            Self::Outputs => ("outputs", "output"),
            Self::Features => ("features", "feature"),
        }
    }
}

/// A validated request to grow a model.
#[derive(Clone, Debug, PartialEq)]
pub struct Extension {
    /// The model's specification with the names added.
    pub spec: ModelSpec,
    /// The names added, in order; empty when every name was there already (a retry).
    pub added: Vec<String>,
}

const PAST_VALUE_UNKNOWN: &str = "is required: the value this feature had in every row the \
     model has learnt (0 for a new fabric indicator). A feature whose past values are unknown \
     (a new sensor) cannot be added to a live model: it needs a calibration transfer, learnt \
     from an overlap in which the old and the new instrument measure the same samples; a new \
     spectrophotometer is declared with POST /v1/models/{name}/successor, another sensor needs \
     a new model";

/// Parses the body of `POST /v1/models/{name}/outputs` (`{"outputs": [names]}`) or
/// `POST /v1/models/{name}/features` (`{"features": [names], "past_value": 0}`) against `model`
/// (its specification), reporting every problem. Names already added in that order at the end of
/// the list are a retry: nothing is added.
pub fn extend(model: &ModelSpec, growth: Growth, body: &Value) -> Result<Extension, Invalid> {
    let (field, one) = growth.field();
    let Value::Object(fields) = body else {
        return Err(Invalid::one(
            "",
            format!("the body must be a JSON object, found {}", describe(body)),
        ));
    };
    let mut details = Details::default();
    let known: &[&str] = match growth {
        Growth::Outputs => &["outputs"],
        Growth::Features => &["features", "past_value"],
    };
    for key in fields.keys().filter(|k| !known.contains(&k.as_str())) {
        details.push(format!("/{}", pointer_token(key)), "unknown field");
    }
    let path = format!("/{field}");
    let names = column_names(
        fields.get(field),
        &path,
        MAX_OUTPUTS.max(MAX_FEATURES),
        &mut details,
    );
    if names.as_ref().is_some_and(Vec::is_empty) {
        details.push(&path, format!("must name at least one {one}"));
    }
    if growth == Growth::Features {
        check_past_value(fields.get("past_value"), &mut details);
        if model.spectrum.is_none() && model.transform != TransformName::None {
            details.push(
                "/features",
                "this model reads every feature as a reflectance (a Kubelka–Munk transform \
                 without a declared spectrum): a new feature would be read so too, and its \
                 past value would not be a K/S of 0",
            );
        }
    }
    let names = names.unwrap_or_default();
    let current = match growth {
        Growth::Outputs => &model.outputs,
        Growth::Features => &model.features,
    };
    // A retry of this very request: the names are the list's last ones already.
    let retry = !names.is_empty() && current.ends_with(&names);
    let bands: HashSet<String> = model
        .spectrum
        .map(|s| s.band_names())
        .unwrap_or_default()
        .into_iter()
        .collect();
    if !retry {
        for (i, name) in names.iter().enumerate() {
            let taken = if model.outputs.contains(name) {
                Some("an output")
            } else if model.features.contains(name) {
                Some("a feature")
            } else if bands.contains(name) {
                Some("a band of the spectrum")
            } else {
                None
            };
            if let Some(taken) = taken {
                details.push(
                    format!("{path}/{i}"),
                    format!("{name:?} is already the name of {taken}"),
                );
            } else if let Some(why) =
                reserved_column(name, model.spectrum.is_some()).or_else(|| {
                    (growth == Growth::Features)
                        .then(|| intercept_name(name, model.intercept))
                        .flatten()
                })
            {
                details.push(format!("{path}/{i}"), format!("{name:?} {why}"));
            }
        }
    }
    let added = if retry { Vec::new() } else { names };
    let mut spec = model.clone();
    if !added.is_empty() {
        spec.earlier.push(model.shape());
    }
    match growth {
        Growth::Outputs => spec.outputs.extend(added.iter().cloned()),
        Growth::Features => spec.features.extend(added.iter().cloned()),
    }
    check_size(&spec, &path, &mut details);
    details.finish(&format!("the {one}s cannot be added"))?;
    Ok(Extension { spec, added })
}

/// `past_value` of a feature request: required, and 0.
fn check_past_value(value: Option<&Value>, details: &mut Details) {
    match value {
        None | Some(Value::Null) => details.push("/past_value", PAST_VALUE_UNKNOWN),
        Some(v) if v.as_f64() == Some(0.0) => {}
        Some(v) if v.is_number() => details.push(
            "/past_value",
            format!(
                "must be 0, found {}: a feature is added with the value 0 in every past row \
                 (code a new fabric or process as an indicator that was 0 before it)",
                describe(v)
            ),
        ),
        Some(v) => details.push(
            "/past_value",
            format!("must be the number 0, found {}", describe(v)),
        ),
    }
}

/// The bounds [`ModelSpec::parse`] puts on a model's size, on this one.
fn check_size(spec: &ModelSpec, path: &str, details: &mut Details) {
    if spec.outputs.len() > MAX_OUTPUTS {
        details.push(
            path,
            format!(
                "a model has at most {MAX_OUTPUTS} outputs; this would have {}",
                spec.outputs.len()
            ),
        );
    }
    let inputs = spec.input_width();
    if inputs > MAX_FEATURES {
        details.push(
            path,
            format!("a model has at most {MAX_FEATURES} inputs; this would have {inputs}"),
        );
    }
    let p = inputs + usize::from(spec.intercept);
    let entries = p.saturating_mul(p).saturating_mul(spec.outputs.len());
    if entries > MAX_STATE_ENTRIES {
        details.push(
            path,
            format!(
                "the model would be too large: (inputs + intercept)² × outputs = {entries} \
                 exceeds {MAX_STATE_ENTRIES}"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// [`extend`] as a method, for the tests' chains.
    trait Extended {
        fn extended(&self, growth: Growth, body: &Value) -> Result<Extension, Invalid>;
    }

    impl Extended for ModelSpec {
        fn extended(&self, growth: Growth, body: &Value) -> Result<Extension, Invalid> {
            extend(self, growth, body)
        }
    }

    fn spec(body: Value) -> ModelSpec {
        ModelSpec::parse(&body).expect("a valid specification")
    }

    fn dyes() -> ModelSpec {
        spec(
            json!({"name": "lab", "features": ["fabric_cotton", "r400"], "outputs": ["red", "blue"]}),
        )
    }

    fn paths(error: Invalid) -> Vec<String> {
        error.details.into_iter().map(|d| d.path).collect()
    }

    #[test]
    fn outputs_and_features_are_appended_in_order() {
        let grown = dyes()
            .extended(Growth::Outputs, &json!({"outputs": ["yellow", "navy"]}))
            .unwrap();
        assert_eq!(grown.spec.outputs, ["red", "blue", "yellow", "navy"]);
        assert_eq!(grown.added, ["yellow", "navy"]);
        assert_eq!(grown.spec.features, dyes().features);
        let grown = dyes()
            .extended(
                Growth::Features,
                &json!({"features": ["fabric_wool"], "past_value": 0}),
            )
            .unwrap();
        assert_eq!(
            grown.spec.features,
            ["fabric_cotton", "r400", "fabric_wool"]
        );
        assert_eq!(grown.spec.basis_names().last().unwrap(), "intercept");
        assert_eq!(grown.spec.config().basis.features, 3);
    }

    #[test]
    fn the_same_request_again_adds_nothing() {
        let once = dyes()
            .extended(Growth::Outputs, &json!({"outputs": ["yellow"]}))
            .unwrap();
        let twice = once
            .spec
            .extended(Growth::Outputs, &json!({"outputs": ["yellow"]}))
            .unwrap();
        assert!(twice.added.is_empty());
        assert_eq!(twice.spec, once.spec);
        // Not the last names: a conflict, not a retry.
        let error = once
            .spec
            .extended(Growth::Outputs, &json!({"outputs": ["red", "green"]}))
            .unwrap_err();
        assert_eq!(paths(error), ["/outputs/0"]);
    }

    #[test]
    fn every_problem_is_named() {
        let error = dyes()
            .extended(
                Growth::Outputs,
                &json!({"outputs": ["r400", "", "red"], "colour": 1}),
            )
            .unwrap_err();
        let mut found = paths(error);
        found.sort();
        assert_eq!(found, ["/colour", "/outputs/1"]);
        let error = dyes()
            .extended(Growth::Outputs, &json!({"outputs": ["r400", "red"]}))
            .unwrap_err();
        assert_eq!(paths(error), ["/outputs/0", "/outputs/1"]);
        let error = dyes()
            .extended(Growth::Features, &json!({"features": [], "past_value": 0}))
            .unwrap_err();
        assert_eq!(paths(error), ["/features"]);
        assert!(dyes().extended(Growth::Outputs, &json!([])).is_err());
    }

    /// A live model grows no column that would break its CSV batches: beside a spectrum no
    /// `<λ>nm`, anywhere no successor's column.
    #[test]
    fn a_name_a_csv_header_would_read_otherwise_is_refused() {
        let dips = spec(json!({
            "name": "dips",
            "spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "percent"},
            "outputs": ["red"],
        }));
        let error = dips
            .extended(
                Growth::Features,
                &json!({"features": ["fabric", "555nm"], "past_value": 0}),
            )
            .unwrap_err();
        assert_eq!(paths(error), ["/features/1"]);
        let error = dyes()
            .extended(Growth::Outputs, &json!({"outputs": ["successor:400nm"]}))
            .unwrap_err();
        assert_eq!(paths(error), ["/outputs/0"]);
        assert!(
            dyes()
                .extended(Growth::Outputs, &json!({"outputs": ["555nm"]}))
                .is_ok()
        );
    }

    #[test]
    fn a_feature_named_as_the_intercept_is_refused_beside_it() {
        let body = json!({"features": ["wool", "intercept"], "past_value": 0});
        let error = dyes().extended(Growth::Features, &body).unwrap_err();
        assert_eq!(paths(error), ["/features/1"]);
        let mut own = dyes();
        own.intercept = false;
        assert!(own.extended(Growth::Features, &body).is_ok());
        let outputs = json!({"outputs": ["intercept"]});
        assert!(dyes().extended(Growth::Outputs, &outputs).is_ok());
    }

    #[test]
    fn a_feature_of_unknown_past_is_refused_naming_the_transfer() {
        for body in [
            json!({"features": ["nir_1000"]}),
            json!({"features": ["nir_1000"], "past_value": null}),
        ] {
            let error = dyes().extended(Growth::Features, &body).unwrap_err();
            assert_eq!(error.details.len(), 1);
            assert_eq!(error.details[0].path, "/past_value");
            assert!(error.details[0].message.contains("calibration transfer"));
        }
        let error = dyes()
            .extended(
                Growth::Features,
                &json!({"features": ["lot"], "past_value": 1}),
            )
            .unwrap_err();
        assert!(error.details[0].message.contains("must be 0"), "{error:?}");
        let error = dyes()
            .extended(
                Growth::Features,
                &json!({"features": ["lot"], "past_value": "0"}),
            )
            .unwrap_err();
        assert_eq!(paths(error), ["/past_value"]);
    }

    #[test]
    fn a_model_that_reads_every_feature_as_reflectance_takes_no_feature() {
        let km = spec(
            json!({"name": "km", "features": ["r400", "r500"], "outputs": ["red"],
                            "transform": "kubelka_munk"}),
        );
        let error = km
            .extended(
                Growth::Features,
                &json!({"features": ["fabric"], "past_value": 0}),
            )
            .unwrap_err();
        assert_eq!(paths(error), ["/features"]);
        assert!(
            km.extended(Growth::Outputs, &json!({"outputs": ["blue"]}))
                .is_ok()
        );
    }

    #[test]
    fn the_size_bounds_hold_after_growing() {
        let wide = spec(json!({"name": "wide",
            "features": (0..2000).map(|i| format!("f{i}")).collect::<Vec<_>>(),
            "outputs": ["a", "b", "c", "d", "e", "f", "g", "h"]}));
        let error = wide
            .extended(Growth::Outputs, &json!({"outputs": ["i"]}))
            .unwrap_err();
        assert!(error.details[0].message.contains("too large"), "{error:?}");
        let names: Vec<String> = (0..60).map(|i| format!("g{i}")).collect();
        let error = wide
            .extended(
                Growth::Features,
                &json!({"features": names, "past_value": 0}),
            )
            .unwrap_err();
        assert!(
            error
                .details
                .iter()
                .any(|d| d.message.contains("at most 2048 inputs")),
            "{error:?}"
        );
    }
}
