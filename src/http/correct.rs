//! `POST /v1/models/{name}/correct`: the recipe to dye next after a dip came out off-shade,
//! from the learnt forward map and the dip's measured deviation (see
//! `mordant_kitchen::correction`), and, when asked, the dip learnt as an observation.

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::PREDICT;
use super::batches::{BatchAccepted, accept};
use super::colour::{CmcSpec, ToleranceSpec};
use super::error::{ApiError, ErrorBody};
use super::extract::Path;
use super::extract::{BatchBody, BodyBytes, RawJson, check_malformed};
use super::matching::{
    CandidateRecipe, DyeBoundsSpec, NonNegative, RecipeColour, candidate, check_finite,
    judging_fields, matching, recipe_colour, unjudged,
};
use super::predict::{Spectra, parse_request_with};
use super::routes::Routes;
use crate::auth::Principal;
use crate::domain::colour::read_judgement;
use crate::domain::kitchen::{CORRECTION_FIELDS, CorrectionRequest, read_correction};
use crate::domain::reach;
use crate::domain::{BatchId, Detail, Instrument, Invalid, ModelSpec, Scope};
use crate::estimator::EstimatorError;
use mordant_kitchen::candidates::KitchenError;
use sha2::{Digest, Sha256};

/// The route of correct, with the access it needs (learning the dip needs `ingest` too, checked
/// by the handler: it depends on the body).
pub fn routes(routes: Routes) -> Routes {
    routes.add(PREDICT, routes!(correct_recipe))
}

/// Body of `POST /v1/models/{name}/correct`: a predict body of one target, the recipe dyed and
/// the dip's measurement.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CorrectRequest {
    /// The target's spectrum: one row.
    pub spectra: Spectra,
    /// The model's named features other than the spectrum (the fabric), one row.
    #[schema(min_items = 1, max_items = 1)]
    pub x: Option<Vec<Vec<f64>>>,
    /// The amounts dyed, by dye (output name); a dye left out was not used. From 1 to 4 dyes
    /// above 0: the correction adjusts their amounts.
    pub recipe: std::collections::BTreeMap<String, NonNegative>,
    /// The dip's measured reflectance.
    pub measured: DipSpectrum,
    /// Per dye: the corrected amount's bounds, as in match.
    pub bounds: Option<std::collections::BTreeMap<String, DyeBoundsSpec>>,
    /// Per dye: its price per unit of concentration (every dye of the recipe), for the
    /// corrected recipe's cost.
    pub prices: Option<std::collections::BTreeMap<String, NonNegative>>,
    /// The colour difference the verdicts are judged on (default `{"de00": 1.0}`). Ignored,
    /// with a warning, by a model whose bands do not cover 400–700 nm (no colour to judge).
    pub tolerance: Option<ToleranceSpec>,
    /// The weights of CMC(l:c) (default `{"l": 2, "c": 1}`).
    pub cmc: Option<CmcSpec>,
    /// Also store the dip (its measurement, fabric and the recipe dyed) as an observation of
    /// the model, as a batch of one row would be (needs a key with the `ingest` scope).
    pub learn: Option<bool>,
    /// The batch id the learnt dip is stored under. Only with `"learn": true`. By default it is
    /// derived from the dip (measurement, fabric, recipe), so a retry stores it once; two
    /// genuine dips that read exactly alike would be stored once too, so a lab that repeats
    /// dips names them.
    // `BATCH_ID_PATTERN`: the attribute takes only a literal; tests/openapi.rs holds the two equal.
    #[schema(
        pattern = "^([A-Za-z0-9_:-][A-Za-z0-9._:-]*|[.][A-Za-z0-9_:-][A-Za-z0-9._:-]*|[.][.][A-Za-z0-9._:-]+)$",
        min_length = 1,
        max_length = 128
    )]
    pub batch_id: Option<String>,
}

/// The one-row batch a learnt dip was stored in.
#[derive(Debug, Serialize, ToSchema)]
pub struct LearntDip {
    /// The batch, as `POST …/batches` answers it (its warnings point into that batch).
    #[serde(flatten)]
    pub batch: BatchAccepted,
    /// `true` when this dip was stored before under the same id and content (a retried
    /// correction): nothing was added.
    pub replayed: bool,
}

/// A dip's measured reflectance on its instrument's regular grid, on the model's scale,
/// covering the model's bands.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"start_nm": 400, "interval_nm": 10, "values": [41.2, 40.8, 40.1]}))]
pub struct DipSpectrum {
    /// Wavelength of the first value (nm).
    pub start_nm: f64,
    /// Distance between values (nm).
    #[schema(exclusive_minimum = 0.0)]
    pub interval_nm: f64,
    /// Reflectances on the model's scale, at least 2, at most 4,096.
    #[schema(min_items = 2, max_items = 4096)]
    pub values: Vec<f64>,
}

/// A correction.
#[derive(Debug, Serialize, ToSchema)]
pub struct CorrectResponse {
    #[schema(example = "lab-dips")]
    pub model: String,
    /// The version the forward map comes from.
    #[schema(example = 13)]
    pub version: i64,
    /// How the dip came out: its measured colour against the target's under D65, A and F11,
    /// and the verdict. Left out for a model whose bands do not cover 400–700 nm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dip: Option<RecipeColour>,
    /// The recipe to dye next: the dyes of the recipe dyed, their corrected amounts, and the
    /// colour the map, shifted by the dip's deviation, predicts for it.
    pub recipe: CandidateRecipe,
    /// The batch the dip was learnt in, when `learn` was true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learnt: Option<LearntDip>,
    /// What was accepted but looks wrong (reflectance above full scale or below 0); left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Detail>,
}

/// Correct a dip that came out off-shade.
///
/// The dip, dyed with `recipe` on the fabric `x` and measured as `measured`, shows where the
/// forward map is wrong near that recipe: `Δ(λ) = K/S(measured) − K/S(λ; recipe, x)`. Assuming
/// that error persists for recipes near it (the dye house's conditions, a lot of dye or fabric),
/// the corrected recipe is the match of the target `spectra` against the map shifted by `Δ`,
/// with the dyes of the recipe dyed, each within its `bounds`; where the model's bands cover
/// 400–700 nm that match is then polished on its colour under D65, from the better of it and
/// the recipe as dyed, so within bounds the dyed recipe keeps to, the correction is never
/// predicted worse under D65 than the dip. The answer gives
/// the dip's colour against the target's, and the corrected recipe with its predicted colour
/// and verdict. With `"learn": true` the dip is also stored as an observation of the model (a
/// batch of one row, idempotent under its `batch_id`), so the map learns what the dip showed.
#[utoipa::path(post, operation_id = "correct_recipe", path = "/v1/models/{name}/correct", tag = "predict",
    params(("name" = String, Path, description = "Model name")),
    request_body = CorrectRequest,
    responses(
        (status = 200, description = "The corrected recipe", body = CorrectResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 403, description = "`learn` with a key without the ingest scope", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained yet, the model cannot match recipes, the \
            recipe's dyes cannot be solved for within their bounds, or the batch id is taken by \
            another batch", body = ErrorBody),
        (status = 413, description = "Body over the limit", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid target, recipe, measurement or options", body = ErrorBody),
        (status = 503, description = "Database unavailable (learning the dip)", body = ErrorBody),
    ))]
pub async fn correct_recipe(
    State(app): State<AppState>,
    Path(name): Path<String>,
    principal: Option<Extension<Principal>>,
    RawJson(bytes): RawJson,
) -> Result<Json<CorrectResponse>, ApiError> {
    let Some(model) = app.cache.serving(&app.store, &name).await? else {
        check_malformed(&bytes)?;
        return Err(ApiError::not_found_model(&name));
    };
    let limit = app.limits.max_rows_per_request;
    let spec = model.spec.clone();
    let (correction, request, target_row, warnings, version) = {
        let name = name.clone();
        app.cpu_bound(move || {
            let Some(spectrum) = model.spec.spectrum else {
                check_malformed(&bytes)?;
                return Err(ApiError::Conflict(format!(
                    "model {name:?} declares no spectrum to correct"
                )));
            };
            let mut fields = vec!["tolerance", "cmc"];
            fields.extend(CORRECTION_FIELDS);
            let mut judging = Vec::new();
            let (x, mut warnings, request) = parse_request_with(
                &bytes,
                &model.spec,
                Instrument::Model,
                limit,
                "correction",
                &fields,
                |fields, details, warnings| {
                    judging = judging_fields(fields);
                    let judgement = read_judgement(fields, details);
                    let outputs = &model.spec.outputs;
                    read_correction(fields, &spectrum, outputs, judgement, details, warnings)
                },
            )?;
            let request = request.ok_or_else(|| Invalid::one("", "invalid correction"))?;
            if x.rows() != 1 {
                return Err(Invalid::one(
                    "/spectra/values",
                    format!("a correction is of one target, found {}", x.rows()),
                )
                .into());
            }
            let row: Vec<f64> = x.values().to_vec();
            let matching = matching(&model, &name)?;
            let (target, others) = matching.map.split_inputs(&row);
            let fraction = spectrum
                .scale
                .reflectance()
                .map_or(1.0, |s| s.to_fraction());
            let measured: Vec<f64> = request.measured.iter().map(|v| v * fraction).collect();
            let problem = matching
                .map
                .correction(&target, others, &request.dyed, &measured)
                .map_err(|e| correct_error(&name, e))?;
            reach::check_target(&matching.map, &target, others, 0)?;
            let outputs = &model.spec.outputs;
            let bounds = &request.search.bounds;
            reach::check_bounds(&matching.map, bounds, &request.dyes, outputs)?;
            reach::check_dip(
                &matching.map,
                &target,
                others,
                &request.dyed,
                &measured,
                outputs,
            )?;
            let colorimeter = matching.colorimeter.as_ref();
            if colorimeter.is_none() {
                unjudged(&judging, &mut warnings);
            }
            let colour = colorimeter
                .map(|c| c.labs(&target).map(|labs| (c, labs)))
                .transpose()
                .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("target colour")))?;
            let found = mordant_kitchen::correct(
                &problem,
                colour.as_ref().map(|(c, labs)| (*c, labs)),
                &request.dyes,
                &measured,
                &request.search,
            )
            .map_err(|e| match e {
                KitchenError::Estimator(e) => correct_error(&name, e),
                KitchenError::Colour(e) => {
                    ApiError::Internal(anyhow::Error::new(e).context("colour of the correction"))
                }
            })?;
            Ok::<_, ApiError>((found, request, row, warnings, model.version))
        })
        .await??
    };
    let Some(corrected) = correction.recipe else {
        return Err(ApiError::Conflict(format!(
            "model {name:?} cannot correct the recipe: its dyes cannot be solved for within \
             their bounds (a dye the model has never seen used, a dye that absorbs only in \
             bands where the target reads at or above full scale, which do not count, or \
             bounds no recipe meets)"
        )));
    };
    let recipe = candidate(corrected, &spec.outputs);
    let dip = correction.dip.as_ref().map(recipe_colour);
    check_finite(recipe.cost, recipe.colour.iter().chain(&dip))?;
    let learnt = if request.learn {
        // Keys enforced, the middleware names the caller; a request without one never gets here.
        let allowed =
            !app.keys.is_enforced() || principal.as_ref().is_some_and(|p| p.may(&[Scope::Ingest]));
        if !allowed {
            return Err(ApiError::Forbidden(
                "learning the dip stores a batch: it needs a key with the ingest scope".into(),
            ));
        }
        Some(learn(&app, &spec, &request, &target_row).await?)
    } else {
        None
    };
    Ok(Json(CorrectResponse {
        model: name,
        version,
        dip,
        recipe,
        learnt,
        warnings,
    }))
}

/// Stores the dip as a batch of one row: its measurement (on the model's grid and scale), its
/// fabric and the recipe dyed, under the request's batch id or one derived from that content
/// (so the same dip posted twice is stored once).
async fn learn(
    app: &AppState,
    spec: &ModelSpec,
    request: &CorrectionRequest,
    target_row: &[f64],
) -> Result<LearntDip, ApiError> {
    let grid = spec
        .spectrum
        .map(|s| s.grid())
        .ok_or_else(|| ApiError::Conflict("the model declares no spectrum".into()))?;
    let fabric = &target_row[grid.count..];
    let mut batch = json!({
        "spectra": {"start_nm": grid.start_nm, "interval_nm": grid.interval_nm,
                    "values": [request.measured]},
        "x": [fabric],
        "y": [request.dyed],
    });
    let id = match &request.batch_id {
        Some(id) => id.clone(),
        None => {
            let digest = Sha256::digest(batch.to_string().as_bytes());
            let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
            BatchId::parse(&format!("dip-{hex}"))
                .map_err(|e| ApiError::internal(anyhow::anyhow!(e)))?
        }
    };
    batch["batch_id"] = json!(id.as_str());
    let body = serde_json::to_vec(&batch).map_err(ApiError::internal)?;
    let (batch, replayed) = accept(
        app,
        &spec.name,
        BatchBody::Json(BodyBytes::made(body)),
        None,
    )
    .await?;
    Ok(LearntDip { batch, replayed })
}

/// A target or dip whose numbers cannot be read as reflectance is the client's to fix; a map
/// that cannot be solved is the model's state.
fn correct_error(name: &str, e: EstimatorError) -> ApiError {
    match e {
        EstimatorError::NonFinite(_) => ApiError::Invalid(Invalid::one(
            "",
            format!("{e}: the values are out of any reflectance's range"),
        )),
        other => ApiError::Conflict(format!("model {name:?} cannot correct the recipe: {other}")),
    }
}
