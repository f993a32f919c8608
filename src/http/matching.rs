//! `POST /v1/models/{name}/match`: the non-negative recipe whose colour best fits a target's
//! spectrum, from the forward map learnt with the model (see [`crate::estimator::recipe`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::PREDICT;
use super::colour::{CmcSpec, ColourDifference, ToleranceSpec, Verdict};
use super::error::{ApiError, ErrorBody};
use super::extract::{RawJson, check_malformed};
use super::models::not_trained;
use super::predict::{Spectra, parse_request_with};
use super::routes::Routes;
use crate::cache::CachedModel;
use crate::domain::colour::{self, Comparison, Reflectance, read_judgement};
use crate::domain::{Detail, Invalid};
use crate::estimator::EstimatorError;
use crate::estimator::recipe::{ForwardMap, RecipeMatch};
/// The route of match, with the access it needs.
pub fn routes(routes: Routes) -> Routes {
    routes.add(PREDICT, routes!(match_recipes))
}

/// The recipe matched to one target: per output (in the model's order), a concentration ≥ 0 and
/// its variance.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "concentration": [0.12, 0.0, 1.04],
    "variance": [0.00002, 0.0000004, 0.0003],
    "reflectance_rms": 0.0004
}))]
pub struct Recipe {
    /// Concentrations, 0 for the dyes the target does not need.
    pub concentration: Vec<f64>,
    /// `s² (J_FᵀWJ_F)⁻¹` on the dyes in the recipe, `s² / (JᵀWJ)_ii` for a dye at 0; `null` for
    /// a dye the model has never seen used.
    pub variance: Vec<Option<f64>>,
    /// Root mean square of the difference between the target's reflectance and the recipe's, as
    /// the forward map predicts it (a fraction; 0.001 is 0.1 percentage points).
    pub reflectance_rms: f64,
    /// The recipe's colour, as the forward map predicts it, against the target's, both on the
    /// model's bands: under D65, A and F11, and the verdict under D65. Left out for a model
    /// whose bands do not cover 400–700 nm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub colour: Option<RecipeColour>,
}

/// How the colour a recipe is predicted to dye differs from the target's.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecipeColour {
    /// `pass` when the difference under D65 is within the request's tolerance.
    pub verdict: Verdict,
    /// D65, then A and F11 (reference: the target; sample: the recipe's predicted colour).
    pub illuminants: Vec<ColourDifference>,
}

/// Body of `POST /v1/models/{name}/match`: a predict body, and how to judge the recipes.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct MatchRequest {
    /// The model's named features other than the spectrum, one row per target.
    #[schema(min_items = 1)]
    pub x: Option<Vec<Vec<f64>>>,
    /// The target spectra, one per row.
    pub spectra: Spectra,
    /// The colour difference a recipe's verdict is judged on (default `{"de00": 1.0}`).
    pub tolerance: Option<ToleranceSpec>,
    /// The weights of CMC(l:c) (default `{"l": 2, "c": 1}`).
    pub cmc: Option<CmcSpec>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MatchResponse {
    #[schema(example = "lab-dips")]
    pub model: String,
    /// The version the forward map comes from.
    #[schema(example = 13)]
    pub version: i64,
    /// One recipe per target row.
    pub recipes: Vec<Recipe>,
    /// What was accepted but looks wrong (reflectance above full scale); left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Detail>,
}

/// Match recipes to target spectra.
///
/// For a model that declares a spectrum under `kubelka_munk`: the recipe `c ≥ 0` minimising
/// `Σ_λ w_λ (K/S_target(λ) − K/S(λ; c, x))²`, with `K/S(λ; c, x)` the forward map (K/S of each
/// band as a regression on the concentrations and the other features, learnt from the same
/// batches) and `w_λ = (dR/d(K/S))²` at the target's reflectance, so that every band counts as
/// a spectrophotometer's reading does. The body is a predict body: `spectra` and, for the
/// model's other features, `x`.
#[utoipa::path(post, operation_id = "match_recipes", path = "/v1/models/{name}/match", tag = "predict",
    params(("name" = String, Path, description = "Model name")),
    request_body = MatchRequest,
    responses(
        (status = 200, description = "One recipe per target", body = MatchResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained yet, or the model cannot match recipes: no \
            spectrum under kubelka_munk, no intercept, or statistics folded before recipe \
            matching (no YᵀY)", body = ErrorBody),
        (status = 413, description = "Body or row count over the limit", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid rows", body = ErrorBody),
    ))]
pub async fn match_recipes(
    State(app): State<AppState>,
    Path(name): Path<String>,
    RawJson(bytes): RawJson,
) -> Result<Json<MatchResponse>, ApiError> {
    let Some(model) = app.cache.get_or_load(&app.store, &name).await? else {
        check_malformed(&bytes)?;
        return Err(ApiError::not_found_model(&name));
    };
    let limit = app.limits.max_rows_per_request;
    let (recipes, warnings, version) = {
        let name = name.clone();
        app.cpu_bound(move || {
            let (x, warnings, judgement) = parse_request_with(
                &bytes,
                &model.spec,
                limit,
                &["tolerance", "cmc"],
                read_judgement,
            )?;
            let (tolerance, cmc) =
                judgement.ok_or_else(|| Invalid::one("", "invalid match request"))?;
            let map = forward_map(&model, &name)?;
            // A model with a forward map declares its spectrum; the check keeps it so.
            let grid = model.spec.spectrum.map(|s| s.grid()).ok_or_else(|| {
                ApiError::Conflict(format!("model {name:?} declares no spectrum to match"))
            })?;
            let x = x.as_mat();
            let recipes = (0..x.nrows())
                .map(|i| {
                    let row: Vec<f64> = x.row(i).iter().copied().collect();
                    let (target, others) = map.split_inputs(&row);
                    let matched = map
                        .match_recipe(&target, others)
                        .map_err(|e| match_error(&name, i, e))?;
                    // Colour needs the visible range: a model on other bands gets none.
                    let found = colour::can_judge(&grid)
                        .then(|| {
                            let dyed = map.reflectance(&matched.concentration, others);
                            colour::judge(
                                &Reflectance::new(grid, target),
                                &Reflectance::new(grid, dyed),
                                tolerance,
                                cmc,
                            )
                        })
                        .transpose()
                        .map_err(|e| {
                            ApiError::Internal(
                                anyhow::Error::new(e)
                                    .context(format!("colour of row {i}'s recipe")),
                            )
                        })?;
                    Ok(recipe(matched, found.as_ref()))
                })
                .collect::<Result<Vec<_>, ApiError>>()?;
            Ok::<_, ApiError>((recipes, warnings, model.version))
        })
        .await??
    };
    Ok(Json(MatchResponse {
        model: name,
        version,
        recipes,
        warnings,
    }))
}

/// The version's forward map, fitted at its first match.
fn forward_map(model: &CachedModel, name: &str) -> Result<Arc<ForwardMap>, ApiError> {
    let state = model.state.as_deref().ok_or_else(|| not_trained(name))?;
    match model
        .forward
        .get_or_init(|| state.forward_map().map(Arc::new))
    {
        Ok(map) => Ok(Arc::clone(map)),
        Err(e) => Err(ApiError::Conflict(format!("model {name:?}: {e}"))),
    }
}

/// A row whose numbers cannot be matched (absurd values overflow) is the client's to fix; a
/// forward map that cannot be solved on this row is the model's state, not the request's.
fn match_error(name: &str, row: usize, e: EstimatorError) -> ApiError {
    match e {
        EstimatorError::NonFinite(_) => ApiError::Invalid(Invalid::one(
            format!("/spectra/values/{row}"),
            format!("{e}: the values are out of any reflectance's range"),
        )),
        other => ApiError::Conflict(format!("model {name:?} cannot match row {row}: {other}")),
    }
}

fn recipe(m: RecipeMatch, found: Option<&Comparison>) -> Recipe {
    Recipe {
        concentration: m.concentration,
        variance: m
            .variance
            .into_iter()
            .map(|v| v.is_finite().then_some(v))
            .collect(),
        reflectance_rms: m.residual_rms,
        colour: found.map(|found| RecipeColour {
            verdict: Verdict::of(found.pass),
            illuminants: found.seen.iter().map(ColourDifference::from).collect(),
        }),
    }
}
