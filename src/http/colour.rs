//! `POST /v1/colour/compare`: two reflectance spectra compared as a dye house judges a dyeing
//! against its standard (see [`crate::domain::colour`]).

use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::auth::PREDICT;
use super::error::{ApiError, ErrorBody};
use super::extract::JsonBody;
use super::routes::Routes;
use crate::domain::colour::{CompareRequest, Seen};
use crate::domain::{Detail, Details, Invalid};

/// The route of compare, with the access it needs.
pub fn routes(routes: Routes) -> Routes {
    routes.add(PREDICT, routes!(compare))
}

/// One reflectance spectrum on its own regular grid, which must cover 400–700 nm.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"start_nm": 400, "interval_nm": 10, "values": [41.2, 40.8, 40.1]}))]
pub struct MeasuredSpectrum {
    /// Wavelength of the first value (nm).
    pub start_nm: f64,
    /// Distance between values (nm).
    #[schema(exclusive_minimum = 0.0)]
    pub interval_nm: f64,
    /// Reflectances on the request's `scale`, at least 2, at most 4,096.
    #[schema(min_items = 2, max_items = 4096)]
    pub values: Vec<f64>,
}

/// The colour difference a verdict is judged on, under D65: exactly one of `de00` and `cmc`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"de00": 1.0}), min_properties = 1, max_properties = 1)]
pub struct ToleranceSpec {
    /// CIEDE2000 at most this.
    #[schema(exclusive_minimum = 0.0, nullable = false)]
    pub de00: Option<f64>,
    /// CMC(l:c), with the request's weights, at most this.
    #[schema(exclusive_minimum = 0.0, nullable = false)]
    pub cmc: Option<f64>,
}

/// The weights of CMC(l:c): 2:1 (acceptability, the default) or 1:1 (perceptibility).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CmcSpec {
    /// Lightness weight `l` (default 2).
    #[schema(exclusive_minimum = 0.0, example = 2.0, nullable = false)]
    pub l: Option<f64>,
    /// Chroma weight `c` (default 1).
    #[schema(exclusive_minimum = 0.0, example = 1.0, nullable = false)]
    pub c: Option<f64>,
}

/// How a compared spectrum's reflectances are written.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReflectanceScaleName {
    /// 0 to 1.
    Fraction,
    /// 0 to 100.
    Percent,
}

/// Body of `POST /v1/colour/compare`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CompareBody {
    /// The standard (the target shade).
    pub reference: MeasuredSpectrum,
    /// The batch or lab dip judged against it.
    pub sample: MeasuredSpectrum,
    /// How both spectra's reflectances are written: `fraction` (0–1) or `percent` (0–100).
    pub scale: ReflectanceScaleName,
    /// Default `{"de00": 1.0}`.
    pub tolerance: Option<ToleranceSpec>,
    /// Default `{"l": 2, "c": 1}`.
    pub cmc: Option<CmcSpec>,
}

/// A CIELAB colour (CIE 1964 10°, relative to the illuminant's white).
#[derive(Clone, Debug, Serialize, ToSchema)]
#[schema(example = json!({"l": 62.1, "a": 38.4, "b": 21.7}))]
pub struct Lab {
    pub l: f64,
    pub a: f64,
    pub b: f64,
}

impl From<&mordant_colour::CieLab> for Lab {
    fn from(lab: &mordant_colour::CieLab) -> Self {
        let [l, a, b] = lab.to_array();
        Self { l, a, b }
    }
}

/// The sample against the reference under one illuminant.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ColourDifference {
    /// `D65` (daylight), `A` (tungsten) or `F11` (three-band fluorescent shop light).
    #[schema(example = "D65")]
    pub illuminant: &'static str,
    pub reference: Lab,
    pub sample: Lab,
    /// CIEDE2000 (`k_L = k_C = k_H = 1`).
    #[schema(example = 0.62)]
    pub de00: f64,
    /// CMC(l:c) with the request's weights.
    #[schema(example = 0.71)]
    pub cmc: f64,
    /// ΔL*: positive when the sample is lighter.
    #[schema(example = -0.4)]
    pub dl: f64,
    /// ΔC*ab: positive when the sample is more saturated.
    #[schema(example = 0.3)]
    pub dc: f64,
    /// ΔH*ab, `2√(C*₁C*₂) sin(Δh/2)`: positive when the sample's hue angle is larger.
    #[schema(example = 0.2)]
    pub dh: f64,
}

impl From<&Seen> for ColourDifference {
    fn from(seen: &Seen) -> Self {
        let d = &seen.difference;
        Self {
            illuminant: seen.illuminant.name(),
            reference: Lab::from(&seen.reference),
            sample: Lab::from(&seen.sample),
            de00: d.de00,
            cmc: d.cmc,
            dl: d.components.lightness,
            dc: d.components.chroma,
            dh: d.components.hue,
        }
    }
}

/// `pass` or `fail`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
}

impl Verdict {
    pub fn of(pass: bool) -> Self {
        if pass { Verdict::Pass } else { Verdict::Fail }
    }
}

/// The tolerance the verdict was judged against.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToleranceUsed {
    /// `de00` or `cmc`.
    #[schema(example = "de00")]
    pub metric: &'static str,
    #[schema(example = 1.0)]
    pub limit: f64,
    /// Always `D65`.
    #[schema(example = "D65")]
    pub illuminant: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CompareResponse {
    /// `pass` when the difference under D65 is within the tolerance.
    pub verdict: Verdict,
    pub tolerance: ToleranceUsed,
    /// The CMC weights used, `{"l", "c"}`.
    pub cmc: CmcWeightsUsed,
    /// D65, then A and F11: a sample that passes under D65 and not under A or F11 is a
    /// metameric match.
    pub illuminants: Vec<ColourDifference>,
    /// What was accepted but looks wrong (reflectance above full scale, read as full, or below 0,
    /// read as 0); left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Detail>,
}

/// The weights of CMC(l:c) the differences were computed with.
#[derive(Debug, Serialize, ToSchema)]
pub struct CmcWeightsUsed {
    #[schema(example = 2.0)]
    pub l: f64,
    #[schema(example = 1.0)]
    pub c: f64,
}

/// Why an answer's CMC difference is refused when it overflows (compare and match alike).
pub(super) const CMC_OVERFLOW: &str = "the CMC difference with these weights overflows: they \
                                       are far outside any CMC(l:c) in use (2:1 and 1:1)";

/// Compare two reflectance spectra.
///
/// CIELAB of each under D65, A and F11 (CIE 1964 10° observer, integrated every 1 nm over
/// 380–780 nm; each spectrum interpolated linearly on its own grid and held at its end values
/// beyond it), CIEDE2000 and CMC(l:c) of the sample from the reference with ΔL*, ΔC*, ΔH*, and
/// a verdict against the tolerance under D65. Nothing is stored.
#[utoipa::path(post, operation_id = "compare_colours", path = "/v1/colour/compare", tag = "predict",
    request_body = CompareBody,
    responses(
        (status = 200, description = "The colour difference under each illuminant, and the verdict",
            body = CompareResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 413, description = "Body over the limit", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid spectra, scale, tolerance or weights", body = ErrorBody),
    ))]
pub async fn compare(JsonBody(body): JsonBody) -> Result<Json<CompareResponse>, ApiError> {
    let mut warnings = Details::default();
    let request = CompareRequest::parse(&body, &mut warnings)?;
    let found = request.compare().map_err(|e| {
        ApiError::Internal(anyhow::Error::new(e).context("colour of a validated spectrum"))
    })?;
    if found.seen.iter().any(|d| !d.difference.cmc.is_finite()) {
        return Err(ApiError::Invalid(Invalid::one("/cmc", CMC_OVERFLOW)));
    }
    let (metric, limit) = request.tolerance.parts();
    Ok(Json(CompareResponse {
        verdict: Verdict::of(found.pass),
        tolerance: ToleranceUsed {
            metric,
            limit,
            illuminant: "D65",
        },
        cmc: CmcWeightsUsed {
            l: request.cmc.lightness,
            c: request.cmc.chroma,
        },
        illuminants: found.seen.iter().map(ColourDifference::from).collect(),
        warnings: warnings.into_list(),
    }))
}
