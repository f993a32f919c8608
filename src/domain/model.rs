//! Model names and specifications.

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::handover::CSV_PREFIX;
use super::spectrum::{ScaleName, SpectrumSpec, band_wavelength};
use super::{Details, Invalid, describe, quote};
use crate::estimator::{
    Basis, Forgetting, ModelConfig, PriorFamily, Saunderson, Transform, UpdateMethod,
};

/// Longest model name.
pub const MAX_NAME_LEN: usize = 63;

/// What a model name is, as a regular expression (for the API's document).
pub const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9_-]*$";
/// Longest feature or output name.
const MAX_COLUMN_NAME_LEN: usize = 200;
/// Bounds on a model's size: the state holds p² numbers per output.
pub const MAX_FEATURES: usize = 2048;
pub const MAX_OUTPUTS: usize = 1024;
/// Bound on `p² · m`: each output keeps two p × p matrices, so this caps a model's state near
/// 512 MiB (the dyeing data's model, p = 127 and m = 82, is 1.3 M).
pub const MAX_STATE_ENTRIES: usize = 1 << 25;
/// Bound on `first_fit_rows`.
pub const MAX_FIRST_FIT_ROWS: u64 = 1 << 40;
/// Rows the first fit waits for by default, when the model has more basis functions: Bayesian
/// regression needs no `N ≥ p`, and the evidence approximation estimates its hyperparameters
/// (a prior scale, a length scale, σ²) from the residual degrees of freedom of this many rows
/// (each output still waits for its own informative rows).
pub const DEFAULT_FIRST_FIT_ROWS: u64 = 10;

/// A model's name: a slug (`[a-z0-9][a-z0-9_-]*`, at most 63 characters), safe in a URL path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ModelName(String);

impl ModelName {
    pub fn parse(name: &str) -> Result<Self, String> {
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok =
            chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if name.len() > MAX_NAME_LEN || !first_ok || !rest_ok {
            return Err(format!(
                "must be a slug: 1 to {MAX_NAME_LEN} characters from a-z, 0-9, '-' and '_', \
                 starting with a letter or digit, found {name:?}"
            ));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ModelName {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<ModelName> for String {
    fn from(value: ModelName) -> Self {
        value.0
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The basis transform, as the API names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransformName {
    None,
    KubelkaMunk,
    /// Kubelka–Munk of the body's reflectance behind Saunderson's surface correction, with the
    /// model's `saunderson` coefficients.
    Saunderson,
}

/// Saunderson's surface coefficients of a `"saunderson"` model (see
/// `crates/estimator/src/basis.rs`): `R_i = (R_m − k₁) / (1 − k₁ − k₂ + k₂ R_m)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SaundersonSpec {
    /// External surface reflectance, in [0, 1) (default 0.04: Fresnel at n = 1.5).
    #[schema(minimum = 0.0, exclusive_maximum = 1.0, example = 0.04)]
    pub k1: f64,
    /// Internal reflectance of diffuse light at the surface, in [0, 1) (default 0.6).
    #[schema(minimum = 0.0, exclusive_maximum = 1.0, example = 0.6)]
    pub k2: f64,
}

impl SaundersonSpec {
    fn surface(self) -> Saunderson {
        Saunderson {
            k1: self.k1,
            k2: self.k2,
        }
    }
}

/// The update method, as the API names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpdateName {
    OneStep,
    Refit,
}

/// The prior family of the weights, as the API names it (see `crates/estimator/src/prior.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PriorName {
    /// One prior variance per basis function (the paper's ARD).
    Ard,
    /// One shared prior variance of the basis functions, in their own units.
    Ridge,
    /// A Gaussian-process prior along the declared spectrum's wavelengths.
    Smooth,
    /// Chosen per output by the evidence: among ridge, smooth (with a declared spectrum) and
    /// ARD (unless the inputs are a spectrum alone).
    #[default]
    Auto,
}

impl PriorName {
    pub fn family(self) -> PriorFamily {
        match self {
            PriorName::Ard => PriorFamily::Ard,
            PriorName::Ridge => PriorFamily::Ridge,
            PriorName::Smooth => PriorFamily::Smooth,
            PriorName::Auto => PriorFamily::Auto,
        }
    }

    fn is_auto(&self) -> bool {
        *self == PriorName::Auto
    }
}

/// Forgetting by half-life, as the API names it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ForgettingSpec {
    /// A row's weight halves after this many further rows (at least 1).
    #[schema(example = 5000.0, minimum = 1)]
    pub half_life_rows: f64,
}

/// A validated model specification, stored as JSON with the model. Once created it only grows:
/// outputs and named features may be appended (`POST /v1/models/{name}/outputs` and `/features`);
/// of its settings, `drift_threshold` and `first_fit_rows` may change (`PATCH
/// /v1/models/{name}`, [`ModelSpec::amend`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub name: ModelName,
    /// A reflectance spectrum read before the named features: its bands are the model's first
    /// inputs. Specs stored before spectra existed have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spectrum: Option<SpectrumSpec>,
    /// Named features, after the spectrum's bands.
    pub features: Vec<String>,
    pub outputs: Vec<String>,
    pub intercept: bool,
    pub transform: TransformName,
    /// The surface coefficients of a `saunderson` transform (always set with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saunderson: Option<SaundersonSpec>,
    pub update: UpdateName,
    pub forgetting: Option<ForgettingSpec>,
    pub prior_variance: f64,
    /// The prior family. Specs stored before prior families existed read as `auto`: their
    /// stored versions keep predicting as they did, and a refit moves them to it.
    #[serde(default, skip_serializing_if = "PriorName::is_auto")]
    pub prior: PriorName,
    /// Rows that must be queued before the first fit runs (default: the number of basis
    /// functions `p`, at most [`DEFAULT_FIRST_FIT_ROWS`]).
    pub first_fit_rows: u64,
    /// A batch whose surprise to the posterior (largest over the outputs) exceeds this is held
    /// for review instead of folded. Off (`None`) by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_threshold: Option<f64>,
    /// The shapes the model had before each time it grew, oldest first: a batch stored in one
    /// of them is read in it and widened (see `crates::history`), and only then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<Shape>,
    /// The instrument that is to replace the spectrum's (`POST /v1/models/{name}/successor`):
    /// its grid and scale. Declared once, never removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<SpectrumSpec>,
}

/// A shape a model had: the width of its rows' inputs (bands and named features) and outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub inputs: usize,
    pub outputs: usize,
}

/// The settings of a model that `PATCH /v1/models/{name}` may change ([`ModelSpec::amend`]).
pub const AMENDABLE: [&str; 2] = ["drift_threshold", "first_fit_rows"];

const SPEC_FIELDS: [&str; 13] = [
    "saunderson",
    "prior",
    "drift_threshold",
    "name",
    "spectrum",
    "features",
    "outputs",
    "intercept",
    "transform",
    "update",
    "forgetting",
    "prior_variance",
    "first_fit_rows",
];

impl ModelSpec {
    /// Parses the body of `POST /v1/models`, reporting every invalid field.
    pub fn parse(body: &Value) -> Result<Self, Invalid> {
        let Value::Object(fields) = body else {
            return Err(Invalid::one(
                "",
                format!("the body must be a JSON object, found {}", describe(body)),
            ));
        };
        let mut details = Details::default();
        for key in fields.keys() {
            if !SPEC_FIELDS.contains(&key.as_str()) {
                details.push(format!("/{}", super::pointer_token(key)), "unknown field");
            }
        }
        let name = match fields.get("name") {
            Some(Value::String(s)) => ModelName::parse(s)
                .map_err(|e| details.push("/name", e))
                .ok(),
            Some(other) => {
                details.push(
                    "/name",
                    format!("must be a string, found {}", describe(other)),
                );
                None
            }
            None => {
                details.push("/name", "is required");
                None
            }
        };
        let spectrum = match fields.get("spectrum") {
            None | Some(Value::Null) => None,
            Some(value) => SpectrumSpec::parse(value, "/spectrum", MAX_FEATURES, &mut details),
        };
        let bands = spectrum.map(|s| s.band_names()).unwrap_or_default();
        // With a spectrum, named features are optional (also beside one that is invalid, which
        // is reported at its own path).
        let spectrum_sent = fields.get("spectrum").is_some_and(|v| !v.is_null());
        let features = match fields.get("features") {
            None | Some(Value::Null) if spectrum_sent => Some(Vec::new()),
            value => column_names(value, "/features", MAX_FEATURES, &mut details),
        };
        let band_set: HashSet<&str> = bands.iter().map(String::as_str).collect();
        if let Some(features) = &features {
            for (j, name) in features.iter().enumerate() {
                if band_set.contains(name.as_str()) {
                    details.push(
                        format!("/features/{j}"),
                        format!("{name:?} is also the name of a band of the spectrum"),
                    );
                }
            }
            if bands.len() + features.len() > MAX_FEATURES {
                details.push(
                    "/features",
                    format!(
                        "at most {MAX_FEATURES} inputs are allowed, found {} bands and {} \
                         features",
                        bands.len(),
                        features.len()
                    ),
                );
            }
        }
        let outputs = column_names(fields.get("outputs"), "/outputs", MAX_OUTPUTS, &mut details);
        // Checked on the raw names, so the overlap is reported even beside other problems.
        let strings = |key: &str| -> Vec<Option<&str>> {
            fields
                .get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Value::as_str).collect())
                .unwrap_or_default()
        };
        let feature_set: HashSet<&str> = strings("features").into_iter().flatten().collect();
        for (k, name) in strings("outputs").into_iter().enumerate() {
            if let Some(name) = name.filter(|n| feature_set.contains(n)) {
                details.push(
                    format!("/outputs/{k}"),
                    format!("{name:?} is also a feature name"),
                );
            } else if let Some(name) = name.filter(|n| band_set.contains(n)) {
                details.push(
                    format!("/outputs/{k}"),
                    format!("{name:?} is also the name of a band of the spectrum"),
                );
            }
        }
        for (key, names) in [("features", &features), ("outputs", &outputs)] {
            for (j, name) in names.iter().flatten().enumerate() {
                // A band's own name is reported as such above.
                if band_set.contains(name.as_str()) {
                    continue;
                }
                if let Some(why) = reserved_column(name, spectrum.is_some()) {
                    details.push(format!("/{key}/{j}"), format!("{name:?} {why}"));
                }
            }
        }
        let intercept = match fields.get("intercept") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                details.push(
                    "/intercept",
                    format!("must be true or false, found {}", describe(other)),
                );
                true
            }
        };
        for (j, name) in features.iter().flatten().enumerate() {
            if let Some(why) = intercept_name(name, intercept) {
                details.push(format!("/features/{j}"), format!("{name:?} {why}"));
            }
        }
        let transform = enum_field(
            fields.get("transform"),
            "/transform",
            TransformName::None,
            "\"none\", \"kubelka_munk\", \"saunderson\"",
            &mut details,
        );
        if transform != TransformName::None
            && spectrum.is_some_and(|s| s.scale == ScaleName::Absorbance)
        {
            details.push(
                "/transform",
                "\"kubelka_munk\" and \"saunderson\" read reflectance; an \"absorbance\" \
                 spectrum enters as it is (use \"none\")",
            );
        }
        if transform == TransformName::Saunderson && spectrum.is_none() {
            details.push(
                "/transform",
                "\"saunderson\" reads a declared spectrum: give \"spectrum\"",
            );
        }
        let saunderson = saunderson_field(fields.get("saunderson"), transform, &mut details);
        let update = enum_field(
            fields.get("update"),
            "/update",
            UpdateName::OneStep,
            "\"one_step\", \"refit\"",
            &mut details,
        );
        let forgetting = match fields.get("forgetting") {
            None | Some(Value::Null) => None,
            Some(Value::Object(f)) => {
                for key in f.keys().filter(|k| k.as_str() != "half_life_rows") {
                    details.push(
                        format!("/forgetting/{}", super::pointer_token(key)),
                        "unknown field",
                    );
                }
                let path = "/forgetting/half_life_rows";
                match positive(f.get("half_life_rows"), path, &mut details) {
                    Some(h) if h < 1.0 => {
                        details.push(
                            path,
                            format!(
                                "must be at least 1 row, found {}: a shorter half-life forgets \
                                 each row before the next arrives, so the model could never \
                                 learn",
                                quote(h)
                            ),
                        );
                        None
                    }
                    h => h.map(|half_life_rows| ForgettingSpec { half_life_rows }),
                }
            }
            Some(other) => {
                details.push(
                    "/forgetting",
                    format!(
                        "must be null or {{\"half_life_rows\": h}}, found {}",
                        describe(other)
                    ),
                );
                None
            }
        };
        let prior_variance = match fields.get("prior_variance") {
            None | Some(Value::Null) => Some(1.0),
            value => positive(value, "/prior_variance", &mut details).filter(|v| {
                let usable = (MIN_PRIOR_VARIANCE..=MAX_PRIOR_VARIANCE).contains(v);
                if !usable {
                    details.push(
                        "/prior_variance",
                        format!(
                            "must be between {MIN_PRIOR_VARIANCE:e} and {MAX_PRIOR_VARIANCE:e} \
                             (the first fit's starting point, which it moves from), found {v:e}"
                        ),
                    );
                }
                usable
            }),
        };
        let prior = enum_field(
            fields.get("prior"),
            "/prior",
            PriorName::Auto,
            "\"ard\", \"ridge\", \"smooth\", \"auto\"",
            &mut details,
        );
        if prior == PriorName::Smooth && spectrum.is_none() {
            details.push(
                "/prior",
                "\"smooth\" correlates the coefficients of neighbouring wavelengths: it needs a \
                 declared \"spectrum\" (use \"ridge\", \"ard\" or \"auto\" for named features)",
            );
        }
        let drift_threshold = drift_threshold(fields.get("drift_threshold"), &mut details);
        let inputs = bands.len() + features.as_ref().map_or(0, |f| f.len());
        let p = inputs + usize::from(intercept);
        let first_fit_rows = match fields.get("first_fit_rows") {
            None | Some(Value::Null) => Some((p.max(1) as u64).min(DEFAULT_FIRST_FIT_ROWS)),
            Some(value) => first_fit_rows(value, &mut details),
        };
        if let (Some(_), Some(outputs)) = (&features, &outputs) {
            let entries = p.saturating_mul(p).saturating_mul(outputs.len());
            if entries > MAX_STATE_ENTRIES && inputs > 0 {
                details.push(
                    "/features",
                    format!(
                        "the model is too large: (features + intercept)² × outputs = {entries} \
                         exceeds {MAX_STATE_ENTRIES}"
                    ),
                );
            }
        }
        if features.is_some() && inputs == 0 && !intercept {
            details.push(
                "/features",
                "a model without intercept needs at least one feature",
            );
        }
        details.finish("invalid model specification")?;
        match (
            name,
            features,
            outputs,
            prior_variance,
            first_fit_rows,
            drift_threshold,
        ) {
            (
                Some(name),
                Some(features),
                Some(outputs),
                Some(prior_variance),
                Some(first_fit_rows),
                Some(drift_threshold),
            ) => Ok(Self {
                name,
                spectrum,
                features,
                outputs,
                intercept,
                transform,
                saunderson,
                update,
                forgetting,
                prior_variance,
                prior,
                first_fit_rows,
                drift_threshold,
                earlier: Vec::new(),
                successor: None,
            }),
            _ => Err(Invalid::one("", "invalid model specification")),
        }
    }

    /// This specification with the settings of a `PATCH /v1/models/{name}` body changed: a JSON
    /// object holding any of [`AMENDABLE`] (validated as [`Self::parse`] validates them; a
    /// `drift_threshold` of `null` turns holding off). Every other field of the specification is
    /// fixed once the model exists, and said to be; any other key is unknown.
    pub fn amend(&self, body: &Value) -> Result<Self, Invalid> {
        let Value::Object(fields) = body else {
            return Err(Invalid::one(
                "",
                format!("the body must be a JSON object, found {}", describe(body)),
            ));
        };
        let mut details = Details::default();
        for key in fields.keys().filter(|k| !AMENDABLE.contains(&k.as_str())) {
            let path = format!("/{}", super::pointer_token(key));
            if SPEC_FIELDS.contains(&key.as_str()) {
                details.push(
                    path,
                    format!(
                        "is fixed once the model exists: only {} may change (outputs and \
                         features grow with POST …/outputs and …/features)",
                        AMENDABLE.join(" and ")
                    ),
                );
            } else {
                details.push(path, "unknown field");
            }
        }
        let mut amended = self.clone();
        if fields.contains_key("drift_threshold")
            && let Some(threshold) = drift_threshold(fields.get("drift_threshold"), &mut details)
        {
            amended.drift_threshold = threshold;
        }
        // `null` is no number of rows: refused as any other value that is not one.
        if let Some(rows) = fields
            .get("first_fit_rows")
            .and_then(|value| first_fit_rows(value, &mut details))
        {
            amended.first_fit_rows = rows;
        }
        details.finish("invalid model settings")?;
        Ok(amended)
    }

    /// The estimator's configuration for this model.
    pub fn config(&self) -> ModelConfig {
        let transform = match self.transform {
            TransformName::None => Transform::Identity,
            TransformName::KubelkaMunk => Transform::KubelkaMunk,
            TransformName::Saunderson => Transform::Saunderson(
                self.saunderson
                    .map_or(Saunderson::TEXTILE, SaundersonSpec::surface),
            ),
        };
        let basis = match &self.spectrum {
            // Only Kubelka–Munk reads the scale, and an absorbance spectrum refuses it.
            Some(spectrum) => Basis::spectral(
                spectrum.count,
                spectrum.scale.reflectance().unwrap_or_default(),
                self.input_width(),
                self.intercept,
                transform,
            ),
            // Without a declared spectrum, Kubelka–Munk reads every feature as a reflectance
            // fraction (the meaning of models created before spectra were declared).
            None => Basis::new(self.features.len(), self.intercept, transform),
        };
        let mut config = ModelConfig::new(basis, self.outputs.len());
        config.update = match self.update {
            UpdateName::OneStep => UpdateMethod::OneStep,
            UpdateName::Refit => UpdateMethod::Refit,
        };
        config.forgetting = self.forgetting.map(|f| Forgetting {
            half_life_rows: f.half_life_rows,
        });
        config.prior_variance = self.prior_variance;
        config.prior = self.prior.family();
        config
    }

    /// Number of raw inputs of a row: the spectrum's bands, then the named features.
    pub fn input_width(&self) -> usize {
        self.spectrum.map_or(0, |s| s.count) + self.features.len()
    }

    /// The model's shape now.
    pub fn shape(&self) -> Shape {
        Shape {
            inputs: self.input_width(),
            outputs: self.outputs.len(),
        }
    }

    /// The specification when the model had `shape` (one of [`Self::earlier`]): the first of
    /// its named features and outputs, as a model grows only by appending them. `None` when
    /// `shape` is not a prefix of the model's shape now.
    pub fn in_shape(&self, shape: Shape) -> Option<ModelSpec> {
        let bands = self.spectrum.map_or(0, |s| s.count);
        let features = shape.inputs.checked_sub(bands)?;
        if features > self.features.len() || shape.outputs > self.outputs.len() {
            return None;
        }
        Some(ModelSpec {
            features: self.features[..features].to_vec(),
            outputs: self.outputs[..shape.outputs].to_vec(),
            ..self.clone()
        })
    }

    /// Names of the raw inputs: the spectrum's bands (`400nm`, …), then the named features.
    pub fn input_names(&self) -> Vec<String> {
        let mut names = self.spectrum.map(|s| s.band_names()).unwrap_or_default();
        names.extend(self.features.iter().cloned());
        names
    }

    /// Names of the basis functions: the inputs, then `"intercept"` if there is one. A model
    /// stored before a feature could no longer be named so beside the intercept
    /// (`intercept_name`) calls its own `"(intercept)"`, so that no two share a name.
    pub fn basis_names(&self) -> Vec<String> {
        let mut names = self.input_names();
        if self.intercept {
            let own = if self.features.iter().any(|f| f == INTERCEPT) {
                LEGACY_INTERCEPT
            } else {
                INTERCEPT
            };
            names.push(own.to_owned());
        }
        names
    }
}

/// A non-empty list of distinct, non-blank names without control characters.
pub(super) fn column_names(
    value: Option<&Value>,
    path: &str,
    max: usize,
    details: &mut Details,
) -> Option<Vec<String>> {
    let Some(value) = value else {
        details.push(path, "is required");
        return None;
    };
    let Value::Array(items) = value else {
        details.push(
            path,
            format!("must be an array of names, found {}", describe(value)),
        );
        return None;
    };
    if items.is_empty() && path == "/outputs" {
        details.push(path, "must name at least one output");
        return None;
    }
    if items.len() > max {
        details.push(
            path,
            format!("at most {max} names are allowed, found {}", items.len()),
        );
        return None;
    }
    let mut seen = HashSet::new();
    let mut names = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}/{i}");
        match item {
            Value::String(s) if s.trim().is_empty() => {
                details.push(at, "must not be blank");
                ok = false;
            }
            // CSV headers are trimmed: a name with edge spaces could never be matched.
            Value::String(s) if s.trim() != s => {
                details.push(at, format!("must not start or end with spaces: {s:?}"));
                ok = false;
            }
            Value::String(s)
                if s.chars().count() > MAX_COLUMN_NAME_LEN || s.chars().any(char::is_control) =>
            {
                details.push(at, format!("must be at most {MAX_COLUMN_NAME_LEN} characters without control characters"));
                ok = false;
            }
            Value::String(s) => {
                if !seen.insert(s.as_str()) {
                    details.push(at, format!("duplicate name {s:?}"));
                    ok = false;
                }
                names.push(s.clone());
            }
            other => {
                details.push(at, format!("must be a string, found {}", describe(other)));
                ok = false;
            }
        }
    }
    ok.then_some(names)
}

/// Why `name` cannot be a feature or an output of a model (with a spectrum where `spectral`):
/// a CSV header would read it as another kind of column. `successor:<λ>nm` columns are a
/// successor instrument's readings, and beside a spectrum every `<λ>nm` column (`555nm`,
/// `400.0 nm`) is one of its bands: such a name would make every CSV batch of the model a
/// spectrum on a grid it is not.
pub(super) fn reserved_column(name: &str, spectral: bool) -> Option<&'static str> {
    if name.starts_with(CSV_PREFIX) {
        Some(
            "starts with \"successor:\", which in a CSV header marks a successor instrument's band",
        )
    } else if spectral && band_wavelength(name).is_some() {
        Some(
            "reads as a wavelength (`<λ>nm`), which in a CSV header names a band of the \
             model's spectrum: name it otherwise",
        )
    } else {
        None
    }
}

/// The name of the intercept among the basis functions (the posterior's coefficients, the
/// relevance of inputs).
const INTERCEPT: &str = "intercept";

/// The intercept's name in a stored model that has a feature named [`INTERCEPT`].
const LEGACY_INTERCEPT: &str = "(intercept)";

/// Why a named feature may not be called `name` in a model with an intercept (or `None`): the
/// intercept is named so among the basis functions, and two of one name could not be told
/// apart. Without one, a feature may be the client's own column of ones by that name.
pub(super) fn intercept_name(name: &str, intercept: bool) -> Option<&'static str> {
    (intercept && name == INTERCEPT).then_some(
        "is the name of the model's intercept (`\"intercept\": true`): name the feature \
         otherwise, or leave the intercept out",
    )
}

fn enum_field<T: serde::de::DeserializeOwned>(
    value: Option<&Value>,
    path: &str,
    default: T,
    allowed: &str,
    details: &mut Details,
) -> T {
    match value {
        None | Some(Value::Null) => default,
        Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|_| {
            details.push(
                path,
                format!("must be one of {allowed}, found {}", describe(v)),
            );
            default
        }),
    }
}

/// The `saunderson` field: only with `"transform": "saunderson"`, whose coefficients it sets
/// (each in [0, 1); missing ones take [`Saunderson::TEXTILE`]'s).
fn saunderson_field(
    value: Option<&Value>,
    transform: TransformName,
    details: &mut Details,
) -> Option<SaundersonSpec> {
    let defaults = SaundersonSpec {
        k1: Saunderson::TEXTILE.k1,
        k2: Saunderson::TEXTILE.k2,
    };
    match value {
        None | Some(Value::Null) => (transform == TransformName::Saunderson).then_some(defaults),
        Some(_) if transform != TransformName::Saunderson => {
            details.push("/saunderson", "only with \"transform\": \"saunderson\"");
            None
        }
        Some(Value::Object(f)) => {
            let mut spec = defaults;
            for (key, v) in f {
                let slot = match key.as_str() {
                    "k1" => &mut spec.k1,
                    "k2" => &mut spec.k2,
                    _ => {
                        details.push(
                            format!("/saunderson/{}", super::pointer_token(key)),
                            "unknown field",
                        );
                        continue;
                    }
                };
                match v.as_f64() {
                    Some(x) if (0.0..1.0).contains(&x) => *slot = x,
                    _ => details.push(
                        format!("/saunderson/{key}"),
                        format!("must be a number in [0, 1), found {}", describe(v)),
                    ),
                }
            }
            Some(spec)
        }
        Some(other) => {
            details.push(
                "/saunderson",
                format!(
                    "must be {{\"k1\": k₁, \"k2\": k₂}}, found {}",
                    describe(other)
                ),
            );
            None
        }
    }
}

/// The range of a starting prior variance: beyond it, its products with the rows' sums of
/// squares in the first fit's first iteration can overflow or underflow a double.
const MIN_PRIOR_VARIANCE: f64 = 1e-100;
const MAX_PRIOR_VARIANCE: f64 = 1e100;

/// `drift_threshold` as sent: a positive number, or nothing (`None` or `null`) for no holding.
fn drift_threshold(value: Option<&Value>, details: &mut Details) -> Option<Option<f64>> {
    match value {
        None | Some(Value::Null) => Some(None),
        value => positive(value, "/drift_threshold", details).map(Some),
    }
}

/// `first_fit_rows` as sent: an integer from 1 to [`MAX_FIRST_FIT_ROWS`].
fn first_fit_rows(value: &Value, details: &mut Details) -> Option<u64> {
    match value.as_u64() {
        Some(n) if n > 0 && n <= MAX_FIRST_FIT_ROWS => Some(n),
        _ => {
            details.push(
                "/first_fit_rows",
                format!(
                    "must be an integer from 1 to {MAX_FIRST_FIT_ROWS}, found {}",
                    describe(value)
                ),
            );
            None
        }
    }
}

fn positive(value: Option<&Value>, path: &str, details: &mut Details) -> Option<f64> {
    match value.and_then(Value::as_f64) {
        Some(v) if v.is_finite() && v > 0.0 => Some(v),
        _ => {
            let found = value.map_or("nothing".to_owned(), describe);
            details.push(path, format!("must be a positive number, found {found}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spectral(extra: Value) -> Result<ModelSpec, Invalid> {
        let mut body = json!({
            "name": "dips",
            "spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "percent"},
            "outputs": ["red"],
            "transform": "kubelka_munk",
        });
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
            body.extend(extra);
        }
        ModelSpec::parse(&body)
    }

    /// A half-life under one row would forget every row before the next: refused at its path.
    #[test]
    fn a_half_life_is_at_least_one_row() {
        for h in [1e-300, 0.5, 0.999] {
            let refused = spectral(json!({"forgetting": {"half_life_rows": h}})).unwrap_err();
            assert_eq!(refused.details[0].path, "/forgetting/half_life_rows");
            assert!(
                refused.details[0]
                    .message
                    .starts_with("must be at least 1 row"),
                "{refused:?}"
            );
        }
        let kept = spectral(json!({"forgetting": {"half_life_rows": 1}})).unwrap();
        assert_eq!(
            kept.forgetting,
            Some(ForgettingSpec {
                half_life_rows: 1.0
            })
        );
    }

    /// A change of settings changes those it names and nothing else; a field fixed at creation
    /// is refused at its path, whatever its value.
    #[test]
    fn settings_change_alone() {
        let spec = spectral(json!({"drift_threshold": 25, "first_fit_rows": 40})).unwrap();
        let lowered = spec.amend(&json!({"first_fit_rows": 12})).unwrap();
        assert_eq!(lowered.first_fit_rows, 12);
        assert_eq!(lowered.drift_threshold, Some(25.0));
        let off = spec.amend(&json!({"drift_threshold": null})).unwrap();
        assert_eq!(off.drift_threshold, None);
        assert_eq!(
            ModelSpec {
                drift_threshold: spec.drift_threshold,
                ..off
            },
            spec
        );
        assert_eq!(spec.amend(&json!({})).unwrap(), spec);
        let refused = spec
            .amend(&json!({"transform": spec.transform, "drift_threshold": -1}))
            .unwrap_err();
        let paths: Vec<&str> = refused.details.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/transform", "/drift_threshold"], "{refused:?}");
    }

    #[test]
    fn a_spec_in_an_earlier_shape_keeps_the_first_features_and_outputs() {
        let mut spec =
            spectral(json!({"features": ["cotton", "wool"], "outputs": ["red", "blue"]}))
                .expect("valid");
        spec.earlier = vec![Shape {
            inputs: 32,
            outputs: 1,
        }];
        let then = spec.in_shape(spec.earlier[0]).expect("a prefix");
        assert_eq!(
            (then.features, then.outputs),
            (vec!["cotton".to_owned()], vec!["red".to_owned()])
        );
        assert_eq!(then.spectrum, spec.spectrum);
        assert_eq!(spec.in_shape(spec.shape()).as_ref(), Some(&spec));
        for shape in [(30, 1), (34, 1), (32, 3)] {
            let (inputs, outputs) = shape;
            assert_eq!(spec.in_shape(Shape { inputs, outputs }), None, "{shape:?}");
        }
    }

    #[test]
    fn a_spectrum_comes_first_and_named_features_are_optional() {
        let spec = spectral(json!({})).unwrap();
        assert_eq!(spec.input_width(), 31);
        assert_eq!(spectral(json!({"features": null})).unwrap(), spec);
        assert_eq!(spec.first_fit_rows, DEFAULT_FIRST_FIT_ROWS);
        let spec = spectral(json!({"features": ["fabric"]})).unwrap();
        let names = spec.basis_names();
        assert_eq!((names[0].as_str(), names[30].as_str()), ("400nm", "700nm"));
        assert_eq!(&names[31..], ["fabric", "intercept"]);
        let basis = spec.config().basis;
        assert_eq!((basis.spectral, basis.features), (31, 32));
        assert_eq!(basis.scale, crate::estimator::ReflectanceScale::Percent);
        // An invalid spectrum is reported at its path alone: the features it spares stay
        // optional.
        let err = ModelSpec::parse(&json!({
            "name": "dips", "outputs": ["red"],
            "spectrum": {"start_nm": 400, "interval_nm": -10, "count": 31, "scale": "percent"}
        }))
        .unwrap_err();
        let paths: Vec<&str> = err.details.iter().map(|d| d.path.as_str()).collect();
        assert!(!paths.is_empty(), "{err:?}");
        assert!(paths.iter().all(|p| p.starts_with("/spectrum")), "{err:?}");
        // Without one, features are required.
        let err = ModelSpec::parse(&json!({"name": "lab", "outputs": ["red"]})).unwrap_err();
        assert_eq!(err.details[0].path, "/features", "{err:?}");
    }

    #[test]
    fn saunderson_takes_its_coefficients_or_the_textbook_ones_and_nothing_else() {
        let spec = spectral(json!({"transform": "saunderson"})).unwrap();
        let textile = SaundersonSpec { k1: 0.04, k2: 0.6 };
        assert_eq!(spec.saunderson, Some(textile));
        assert_eq!(
            spec.config().basis.transform,
            Transform::Saunderson(Saunderson::TEXTILE)
        );
        let spec =
            spectral(json!({"transform": "saunderson", "saunderson": {"k2": 0.45}})).unwrap();
        assert_eq!(spec.saunderson, Some(SaundersonSpec { k1: 0.04, k2: 0.45 }));
        assert!(spec.config().basis.can_match());
        // The stored spec reads back the same.
        let stored: ModelSpec =
            serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
        assert_eq!(stored, spec);
        // Kubelka–Munk models store no coefficients, and specs stored before read as they did.
        let plain = spectral(json!({})).unwrap();
        assert_eq!(plain.saunderson, None);
        assert!(
            !serde_json::to_value(&plain)
                .unwrap()
                .as_object()
                .unwrap()
                .contains_key("saunderson")
        );

        let paths = |extra| {
            let err = spectral(extra).unwrap_err();
            err.details.into_iter().map(|d| d.path).collect::<Vec<_>>()
        };
        assert_eq!(paths(json!({"saunderson": {"k1": 0.04}})), ["/saunderson"]);
        assert_eq!(
            paths(
                json!({"transform": "saunderson", "saunderson": {"k1": 1.0, "k2": -0.1, "k3": 0}})
            ),
            ["/saunderson/k1", "/saunderson/k2", "/saunderson/k3"]
        );
        assert_eq!(
            paths(json!({"transform": "saunderson", "saunderson": [0.04, 0.6]})),
            ["/saunderson"]
        );
        let nir = json!({"start_nm": 1100, "interval_nm": 2, "count": 7, "scale": "absorbance"});
        assert_eq!(
            paths(json!({"spectrum": nir, "transform": "saunderson"})),
            ["/transform"]
        );
        let err = ModelSpec::parse(&json!({"name": "named", "features": ["r400"],
            "outputs": ["red"], "transform": "saunderson"}))
        .unwrap_err();
        let paths: Vec<_> = err.details.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/transform"], "{err:?}");
    }

    #[test]
    fn an_absorbance_spectrum_enters_as_it_is_and_refuses_kubelka_munk() {
        let nir = json!({"start_nm": 1100, "interval_nm": 2, "count": 700, "scale": "absorbance"});
        let err = spectral(json!({"spectrum": nir})).unwrap_err();
        let paths: Vec<_> = err.details.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/transform"], "{err:?}");
        assert!(err.details[0].message.contains("\"none\""), "{err:?}");
        let spec = spectral(json!({"spectrum": nir, "transform": "none"})).unwrap();
        assert_eq!(spec.spectrum.map(|s| s.scale), Some(ScaleName::Absorbance));
        let basis = spec.config().basis;
        assert_eq!(
            (basis.spectral, basis.transform),
            (700, Transform::Identity)
        );
        assert!(!basis.can_match());
        // Stored and read back as the API names it.
        let stored = serde_json::to_value(&spec).unwrap();
        assert_eq!(stored["spectrum"]["scale"], "absorbance");
        assert_eq!(serde_json::from_value::<ModelSpec>(stored).unwrap(), spec);
    }

    #[test]
    fn band_names_cannot_be_features_or_outputs() {
        let err = spectral(json!({"features": ["550nm"], "outputs": ["450nm"]})).unwrap_err();
        let paths: Vec<_> = err.details.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/features/0", "/outputs/0"], "{err:?}");
    }

    /// Names a CSV header would read as another kind of column: beside a spectrum any `<λ>nm`
    /// (a band of it, once the header is read), anywhere a successor instrument's column.
    #[test]
    fn names_a_csv_header_would_read_otherwise_are_refused() {
        let err = spectral(json!({
            "features": ["555nm", "400.0 nm", "fabric"],
            "outputs": ["1000nm", "successor:400nm"]
        }))
        .unwrap_err();
        let paths: Vec<_> = err.details.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            ["/features/0", "/features/1", "/outputs/0", "/outputs/1"],
            "{err:?}"
        );
        assert!(err.details[0].message.contains("wavelength"), "{err:?}");
        assert!(err.details[3].message.contains("successor"), "{err:?}");
        // Without a spectrum a wavelength is a name like any other; a successor's is not.
        let named = |features: Value| {
            ModelSpec::parse(&json!({"name": "named", "features": features, "outputs": ["red"]}))
        };
        assert!(named(json!(["555nm", "600nm"])).is_ok());
        let err = named(json!(["555nm", "successor:600nm"])).unwrap_err();
        assert_eq!(err.details.len(), 1, "{err:?}");
        assert_eq!(err.details[0].path, "/features/1");
    }

    #[test]
    fn a_feature_is_not_named_as_the_intercept_beside_it() {
        let spec = |features: Value, intercept: bool| {
            ModelSpec::parse(&json!({
                "name": "lab", "features": features, "outputs": ["red", "dye"],
                "intercept": intercept
            }))
        };
        let err = spec(json!(["a", "intercept"]), true).unwrap_err();
        assert_eq!(err.details.len(), 1, "{err:?}");
        assert_eq!(err.details[0].path, "/features/1");
        assert!(err.details[0].message.contains("intercept"), "{err:?}");
        // The client's own column of ones, and an output of that name, are theirs to name.
        let own = spec(json!(["a", "intercept"]), false).expect("no intercept of the model's");
        assert_eq!(own.basis_names(), ["a", "intercept"]);
        let output =
            ModelSpec::parse(&json!({"name": "lab", "features": ["a"], "outputs": ["intercept"]}));
        assert!(output.is_ok(), "{output:?}");
        // A model stored before the rule keeps its feature's name; its own intercept is told
        // apart.
        let mut stored = serde_json::to_value(&own).unwrap();
        stored["intercept"] = json!(true);
        let legacy: ModelSpec = serde_json::from_value(stored).unwrap();
        assert_eq!(legacy.basis_names(), ["a", "intercept", "(intercept)"]);
    }

    /// A starting prior variance whose products with the rows' squares could overflow (or
    /// underflow) is refused at creation, where it used to reject the model's first batch.
    #[test]
    fn a_prior_variance_is_refused_beyond_what_a_double_can_start_from() {
        let spec = |value: Value| {
            ModelSpec::parse(&json!({
                "name": "lab", "features": ["a"], "outputs": ["dye"], "prior_variance": value
            }))
        };
        for usable in [1e-100, 1e-6, 1.0, 1e100] {
            let parsed = spec(json!(usable)).expect("usable");
            assert_eq!(parsed.prior_variance, usable);
        }
        for refused in [1e308, 1e101, 1e-101, 5e-324] {
            let err = spec(json!(refused)).unwrap_err();
            assert_eq!(err.details.len(), 1, "{err:?}");
            assert_eq!(err.details[0].path, "/prior_variance");
            assert!(err.details[0].message.contains("between"), "{err:?}");
        }
        for not_positive in [json!(0.0), json!(-1.0), json!("1")] {
            let err = spec(not_positive).unwrap_err();
            assert!(err.details[0].message.contains("positive"), "{err:?}");
        }
    }

    #[test]
    fn a_spec_stored_before_spectra_reads_as_none() {
        let stored = json!({
            "name": "old", "features": ["a"], "outputs": ["b"], "intercept": true,
            "transform": "kubelka_munk", "update": "one_step", "forgetting": null,
            "prior_variance": 1.0, "first_fit_rows": 2
        });
        let spec: ModelSpec = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(spec.spectrum, None);
        // Written back unchanged: the stored JSON of existing models keeps its shape.
        assert_eq!(serde_json::to_value(&spec).unwrap(), stored);
        assert_eq!(spec.config().basis.spectral, 1);
    }
}
