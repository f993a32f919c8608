//! `POST /v1/models/{name}/match`: the non-negative recipe whose colour best fits a target's
//! spectrum, from the forward map learnt with the model (see [`crate::estimator::recipe`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::PREDICT;
use super::colour::{CmcSpec, ColourDifference, ToleranceSpec, Verdict};
use super::error::{ApiError, ErrorBody};
use super::extract::Path;
use super::extract::{RawJson, check_malformed};
use super::models::not_trained;
use super::predict::{Spectra, SuccessorRead, own_instrument, parse_request_with};
use super::routes::Routes;
use crate::cache::{CachedModel, Matching};
use crate::domain::colour::{self, Comparison, read_judgement};
use crate::domain::kitchen::{self, read_listing, read_search};
use crate::domain::reach;
use crate::domain::{Detail, Instrument, Invalid, Rows};
use crate::estimator::grid::Grid;
use crate::estimator::recipe::RecipeMatch;
use crate::estimator::transfer::MIN_TRANSFER_ROWS;
use crate::estimator::{EstimatorError, ModelState};
use mordant_kitchen::candidates::KitchenError;
use mordant_kitchen::{
    Candidate, Colorimeter, Ranking, combination_count, combinations, unrestricted,
};

/// The route of match, with the access it needs.
pub fn routes(routes: Routes) -> Routes {
    routes.add(PREDICT, routes!(match_recipes))
}

/// The recipes matched to one target: the best candidate's fields (what a front end that reads
/// one recipe uses), and every candidate answered, best first (the first is the same recipe).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "dyes": ["yellow", "blue"],
    "concentration": [0.12, 0.0, 1.04],
    "variance": [0.00002, 0.0000004, 0.0003],
    "reflectance_rms": 0.0004,
    "candidates": [{
        "dyes": ["yellow", "blue"],
        "concentration": [0.12, 0.0, 1.04],
        "variance": [0.00002, 0.0000004, 0.0003],
        "reflectance_rms": 0.0004
    }]
}))]
pub struct Recipe {
    /// The best candidate.
    #[serde(flatten)]
    pub best: CandidateRecipe,
    /// Every candidate answered (at most `max_candidates`), in the order asked for; empty
    /// with `"candidates": false`.
    pub candidates: Vec<CandidateRecipe>,
}

/// One candidate recipe: a combination of at most `max_dyes` of the allowed dyes, solved within
/// its bounds.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "dyes": ["yellow", "blue"],
    "concentration": [0.12, 0.0, 1.04],
    "variance": [0.00002, 0.0000004, 0.0003],
    "reflectance_rms": 0.0004,
    "cost": 3.7
}))]
pub struct CandidateRecipe {
    /// The dyes it uses, in the model's order. Empty only for the undyed fabric, answered when
    /// no combination uses any dye.
    pub dyes: Vec<String>,
    /// Concentrations ≥ 0, one per output in the model's order: within their bounds for the
    /// dyes used, 0 for the others.
    pub concentration: Vec<f64>,
    /// `s² (J_FᵀWJ_F)⁻¹` on the dyes the fit set (strictly between their bounds); `s² /
    /// (JᵀWJ)_ii` for a dye at a bound or not used (how much of it the fit could take), with
    /// `s²` the residual over the bands below full scale less the dyes the fit set; `null` for a
    /// dye the model has never seen used or that absorbs only where the target is at or above
    /// full scale (the bands that count do not see it), and for every dye when those bands are
    /// no more than the dyes the fit set (it reproduces them exactly, so its residual says
    /// nothing of the noise).
    pub variance: Vec<Option<f64>>,
    /// Root mean square of the difference between the target's reflectance and the recipe's, as
    /// the forward map predicts it, over the bands below full scale (in a correction, in the dip
    /// too) (a fraction; 0.001 is 0.1 percentage points).
    pub reflectance_rms: f64,
    /// `Σ price × concentration` over its dyes, when the request gives prices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// The recipe's colour, as the forward map predicts it, against the target's, both on the
    /// model's bands: under D65, A and F11, and the verdict under D65. Left out for a model
    /// whose bands do not cover 400–700 nm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub colour: Option<RecipeColour>,
}

/// How the colour a recipe is predicted to dye differs from the target's.
#[derive(Clone, Debug, Serialize, ToSchema)]
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
    /// Which instrument read `spectra` (default `model`). A successor's reading is matched
    /// through the map to the model's instrument while it serves (each target's old reading as
    /// the map reconstructs it; the reconstruction's own uncertainty is not in the recipe's
    /// variances), else by the successor's own model.
    pub instrument: Option<Instrument>,
    /// The colour difference a recipe's verdict is judged on (default `{"de00": 1.0}`). Ignored,
    /// with a warning, by a model whose bands do not cover 400–700 nm (no colour to judge).
    pub tolerance: Option<ToleranceSpec>,
    /// The weights of CMC(l:c) (default `{"l": 2, "c": 1}`).
    pub cmc: Option<CmcSpec>,
    /// `false`: no candidate list; the recipe is the non-negative fit over every allowed dye,
    /// any number of them (what match answered before candidates; `max_dyes`, `bounds`, `sort`
    /// and `max_candidates` do not apply). Default `true`.
    pub candidates: Option<bool>,
    /// The dyes a candidate may use (output names; default every output).
    #[schema(min_items = 1)]
    pub dyes: Option<Vec<String>>,
    /// At most this many dyes in a candidate (default 3).
    #[schema(minimum = 1, maximum = 4)]
    pub max_dyes: Option<u32>,
    /// Per dye (output name): its concentration when used, at least `min` (default 0) and at
    /// most `max` (default none).
    pub bounds: Option<std::collections::BTreeMap<String, DyeBoundsSpec>>,
    /// Per dye (output name): its price per unit of concentration. When given, every dye a
    /// candidate may use needs one, and each candidate carries its cost.
    pub prices: Option<std::collections::BTreeMap<String, NonNegative>>,
    /// How candidates are ordered (default `de00`).
    pub sort: Option<SortSpec>,
    /// At most this many candidates per target (default 10).
    #[schema(minimum = 1, maximum = 100)]
    pub max_candidates: Option<u32>,
}

/// The bounds of one dye's concentration when a candidate uses it.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DyeBoundsSpec {
    #[schema(minimum = 0)]
    pub min: Option<f64>,
    #[schema(exclusive_minimum = 0)]
    pub max: Option<f64>,
}

/// How candidates are ordered: `de00`, ΔE00 under D65, smallest first; `cost`, those within
/// tolerance cheapest first, then the rest by ΔE00; `metamerism`, those within tolerance by the
/// larger of their ΔE00 under A and F11, then the rest by ΔE00. A model whose bands do not
/// cover 400–700 nm has no colour: its candidates are ordered by `reflectance_rms`, and only
/// `de00` is accepted.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SortSpec {
    De00,
    Cost,
    Metamerism,
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
    /// What was accepted but looks wrong (reflectance above full scale or below 0), and targets
    /// deeper than the dyes reach (a recipe holding a dye at the most a match uses); left out
    /// when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Detail>,
}

/// The most recipe solves (targets × combinations of dyes) one request may ask for: about a
/// second of one core.
pub const MAX_SOLVES: usize = 200_000;

/// Match recipes to target spectra.
///
/// For a model that declares a spectrum under `kubelka_munk` or `saunderson`, per target, candidate recipes:
/// every combination of at most `max_dyes` of the allowed `dyes`, each the recipe `c` within
/// its `bounds` minimising `Σ_λ w_λ (K/S_target(λ) − K/S(λ; c, x))²`, with `K/S(λ; c, x)` the
/// forward map (K/S of each band as a regression on the concentrations and the other
/// features, learnt from the same batches) and `w_λ = (dR/d(K/S))²` at the target's
/// reflectance, so that every band counts as a spectrophotometer's reading does. Each
/// candidate's colour is judged under D65, A and F11 against the target's, it is priced when
/// `prices` are given, and the candidates are ordered by `sort`; the best one's fields are
/// also the target's recipe. The body is a predict body (`spectra` and, for the model's other
/// features, `x`) with those options.
#[utoipa::path(post, operation_id = "match_recipes", path = "/v1/models/{name}/match", tag = "predict",
    params(("name" = String, Path, description = "Model name")),
    request_body = MatchRequest,
    responses(
        (status = 200, description = "The candidate recipes of each target", body = MatchResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained yet, or the model cannot match recipes: no \
            spectrum under kubelka_munk or saunderson, no intercept, or statistics folded before recipe \
            matching (no YᵀY), or the successor named as the instrument cannot answer yet", body = ErrorBody),
        (status = 413, description = "Body or row count over the limit, or more recipe solves \
            (targets × combinations) than one request may ask", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid rows or options", body = ErrorBody),
    ))]
pub async fn match_recipes(
    State(app): State<AppState>,
    Path(name): Path<String>,
    RawJson(bytes): RawJson,
) -> Result<Json<MatchResponse>, ApiError> {
    let Some(model) = app.cache.serving(&app.store, &name).await? else {
        check_malformed(&bytes)?;
        return Err(ApiError::not_found_model(&name));
    };
    let limit = app.limits.max_rows_per_request;
    let (recipes, warnings, version) = {
        let name = name.clone();
        app.cpu_bound(move || {
            let outputs = &model.spec.outputs;
            let mut fields = vec!["tolerance", "cmc", "instrument"];
            fields.extend(kitchen::FIELDS);
            let read = SuccessorRead::of(&bytes, &model.spec, &name)?;
            let (spec, instrument) = read.as_ref().map_or((&model.spec, Instrument::Model), |r| {
                (&r.spec, Instrument::Successor)
            });
            let mut judging = Vec::new();
            let (x, mut warnings, options) = parse_request_with(
                &bytes,
                spec,
                instrument,
                limit,
                "match",
                &fields,
                |fields, details, warnings| {
                    if read.is_none() {
                        own_instrument(fields, details, warnings);
                    }
                    judging = judging_fields(fields);
                    let listing = read_listing(fields, details);
                    let judgement = read_judgement(fields, details);
                    let search = read_search(fields, outputs, None, judgement, details);
                    Some((listing?, search?))
                },
            )?;
            let (listing, search) =
                options.ok_or_else(|| Invalid::one("", "invalid match request"))?;
            let (x, matching) = match &read {
                None => (x, matching(&model, &name)?),
                Some(read) => successor_targets(&model, read, &x, &name)?,
            };
            reach::check_bounds(&matching.map, &search.bounds, &search.allowed, outputs)?;
            let colorimeter = matching.colorimeter.as_ref();
            if colorimeter.is_none() {
                unjudged(&judging, &mut warnings);
            }
            if colorimeter.is_none() && search.ranking != Ranking::ColourDifference {
                return Err(Invalid::one(
                    "/sort",
                    "the bands the targets are matched on do not cover 400–700 nm, so the \
                     candidates have no colour to pass or fail: only \"de00\" (by reflectance \
                     residual) applies",
                )
                .into());
            }
            let x = x.as_mat();
            // Counted before any is formed: the combinations of many dyes outgrow memory.
            let per_target = if listing {
                combination_count(search.allowed.len(), search.max_dyes)
            } else {
                Some(1)
            };
            let solves = per_target.and_then(|n| n.checked_mul(x.nrows()));
            if solves.is_none_or(|n| n > MAX_SOLVES) {
                return Err(ApiError::PayloadTooLarge(format!(
                    "{} targets × {} combinations of dyes is more recipe solves than the \
                     {MAX_SOLVES} one request may ask: send fewer targets, allow fewer dyes or \
                     lower max_dyes",
                    x.nrows(),
                    per_target.map_or_else(|| "too many".to_owned(), |n| n.to_string()),
                )));
            }
            let tried = if listing {
                combinations(&search.allowed, search.max_dyes)
            } else {
                Vec::new()
            };
            let recipes = (0..x.nrows())
                .map(|i| {
                    let row: Vec<f64> = x.row(i).iter().copied().collect();
                    let (target, others) = matching.map.split_inputs(&row);
                    let problem = matching
                        .map
                        .problem(&target, others)
                        .map_err(|e| match_error(&name, i, e))?;
                    reach::check_target(&matching.map, &target, others, i)?;
                    let colour = colorimeter
                        .map(|c| c.labs(&target).map(|labs| (c, labs)))
                        .transpose()
                        .map_err(|e| {
                            ApiError::Internal(
                                anyhow::Error::new(e).context(format!("colour of target {i}")),
                            )
                        })?;
                    let colour = colour.as_ref().map(|(c, labs)| (*c, labs));
                    let found = if listing {
                        mordant_kitchen::candidates(&problem, colour, &tried, &search)
                    } else {
                        unrestricted(&problem, colour, &search).map(|c| vec![c])
                    }
                    .map_err(|e| match e {
                        KitchenError::Estimator(e) => match_error(&name, i, e),
                        KitchenError::Colour(e) => ApiError::Internal(
                            anyhow::Error::new(e).context(format!("colour of row {i}'s recipes")),
                        ),
                    })?;
                    recipe(found, listing, outputs, &name, i)
                })
                .collect::<Result<Vec<_>, ApiError>>()?;
            warnings.extend(recipes.iter().enumerate().filter_map(|(i, r)| {
                reach::at_the_most(&matching.map, &r.best.concentration, outputs, i)
            }));
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

/// The fields of a body that say how a recipe's colour is judged, where it gave them (`null`
/// asks for the default).
pub(super) fn judging_fields(
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Vec<&'static str> {
    ["tolerance", "cmc"]
        .into_iter()
        .filter(|f| fields.get(*f).is_some_and(|v| !v.is_null()))
        .collect()
}

/// A warning for each judging field given where the bands the targets are matched on (the
/// model's, or a successor's that answers on its own) do not cover 400–700 nm: the recipes have
/// no colour, so the field changes nothing.
pub(super) fn unjudged(given: &[&str], warnings: &mut Vec<Detail>) {
    warnings.extend(given.iter().map(|field| {
        Detail::new(
            format!("/{field}"),
            "ignored: the bands the targets are matched on do not cover 400–700 nm, so the \
             recipes have no colour to judge",
        )
    }));
}

/// The version's forward map and colorimeter, formed at its first match.
pub(super) fn matching(model: &CachedModel, name: &str) -> Result<Arc<Matching>, ApiError> {
    let state = model.state.as_deref().ok_or_else(|| not_trained(name))?;
    let grid = model.spec.spectrum.map(|s| s.grid());
    let formed = model.forward.get_or_init(|| form_matching(state, grid));
    match formed {
        Ok(matching) => Ok(Arc::clone(matching)),
        Err(e) => Err(ApiError::Conflict(format!("model {name:?}: {e}"))),
    }
}

/// `state`'s forward map, and the colour of spectra on its bands (`grid`) when they cover the
/// visible range.
fn form_matching(state: &ModelState, grid: Option<Grid>) -> Result<Arc<Matching>, String> {
    let map = state.forward_map().map_err(|e| e.to_string())?;
    // Colour needs the visible range: a model on other bands gets none.
    let colorimeter = grid
        .filter(colour::can_judge)
        .map(|grid| Colorimeter::new(&grid))
        .transpose()
        .map_err(|e| format!("the colour of the model's bands: {e}"))?;
    Ok(Arc::new(Matching { map, colorimeter }))
}

/// Targets read by the successor (`x`, read with [`SuccessorRead::spec`]) as the rows a forward
/// map matches, with that map: while the map to the old instrument serves, each target's old
/// reading as the map reconstructs it, matched by the model's forward map; once the old
/// instrument retired (or before the map's first pairs), the targets as read, matched by the
/// successor's own model's.
fn successor_targets(
    model: &CachedModel,
    read: &SuccessorRead,
    x: &Rows,
    name: &str,
) -> Result<(Rows, Arc<Matching>), ApiError> {
    let (new, features) = read.split(x);
    let serving = SuccessorRead::serving(model, name)?;
    let n = new.nrows();
    let row = |m: &faer::Mat<f64>, i: usize| -> Vec<f64> { m.row(i).iter().copied().collect() };
    if let Some(map) = serving.map(&read.own.grid()).map_err(ApiError::Conflict)? {
        let width = read.own.count + features.ncols();
        let mut values = Vec::with_capacity(n * width);
        for i in 0..n {
            let old = map.reconstruct(&row(&new, i)).map_err(|e| {
                ApiError::Invalid(Invalid::one(format!("/spectra/values/{i}"), e.to_string()))
            })?;
            values.extend(old.mean);
            values.extend(row(&features, i));
        }
        return Ok((
            Rows::from_row_major(n, width, values),
            matching(model, name)?,
        ));
    }
    let own = serving.succession.own().ok_or_else(|| {
        ApiError::Conflict(format!(
            "model {name}'s successor cannot match yet: it needs {MIN_TRANSFER_ROWS} samples \
             read by both instruments, or a batch of its readings with outputs"
        ))
    })?;
    let formed = serving
        .forward
        .get_or_init(|| form_matching(own, Some(read.successor.grid())));
    let matching = match formed {
        Ok(matching) => Arc::clone(matching),
        Err(e) => {
            return Err(ApiError::Conflict(format!(
                "model {name:?}'s successor: {e}"
            )));
        }
    };
    // The readings on the model's scale, as the own model learnt them.
    let width = new.ncols() + features.ncols();
    let mut values = Vec::with_capacity(n * width);
    for i in 0..n {
        values.extend(row(&new, i));
        values.extend(row(&features, i));
    }
    Ok((Rows::from_row_major(n, width, values), matching))
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

/// The answer for one target: its candidates, the best one's fields first.
fn recipe(
    found: Vec<Candidate>,
    listing: bool,
    outputs: &[String],
    name: &str,
    row: usize,
) -> Result<Recipe, ApiError> {
    let mut candidates: Vec<CandidateRecipe> =
        found.into_iter().map(|c| candidate(c, outputs)).collect();
    for c in &candidates {
        check_finite(c.cost, c.colour.as_ref())?;
    }
    let best = candidates.first().cloned();
    if !listing {
        candidates.clear();
    }
    let Some(best) = best else {
        return Err(ApiError::Conflict(format!(
            "model {name:?} cannot match row {row}: no combination of the allowed dyes has a \
             solution (dyes the model has never seen used, dyes that absorb only in bands \
             where the target reads at or above full scale, which do not count, or bounds no \
             recipe meets)"
        )));
    };
    Ok(Recipe { best, candidates })
}

/// Refuses an answer whose cost or CMC difference overflowed: JSON has no infinity, and what
/// made it so (far-out prices or CMC weights) is the client's to fix.
pub(super) fn check_finite<'c>(
    cost: Option<f64>,
    colours: impl IntoIterator<Item = &'c RecipeColour>,
) -> Result<(), Invalid> {
    if cost.is_some_and(|c| !c.is_finite()) {
        return Err(Invalid::one(
            "/prices",
            "a recipe's cost at these prices overflows: they are far outside any price",
        ));
    }
    let mut differences = colours.into_iter().flat_map(|c| &c.illuminants);
    if differences.any(|d| !d.cmc.is_finite()) {
        return Err(Invalid::one("/cmc", super::colour::CMC_OVERFLOW));
    }
    Ok(())
}

pub(super) fn candidate(c: Candidate, outputs: &[String]) -> CandidateRecipe {
    let RecipeMatch {
        concentration,
        variance,
        residual_rms,
    } = c.recipe;
    CandidateRecipe {
        dyes: c.dyes.iter().map(|&i| outputs[i].clone()).collect(),
        concentration,
        variance: variance
            .into_iter()
            .map(|v| v.is_finite().then_some(v))
            .collect(),
        reflectance_rms: residual_rms,
        cost: c.cost,
        colour: c.colour.as_ref().map(recipe_colour),
    }
}

pub(super) fn recipe_colour(found: &Comparison) -> RecipeColour {
    RecipeColour {
        verdict: Verdict::of(found.pass),
        illuminants: found.seen.iter().map(ColourDifference::from).collect(),
    }
}

/// An amount of dye, or a price per unit of it: never negative.
#[derive(Debug, Deserialize, Serialize)]
pub struct NonNegative(pub f64);

impl utoipa::PartialSchema for NonNegative {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::Number)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
            .minimum(Some(0.0))
            .into()
    }
}

impl ToSchema for NonNegative {}
