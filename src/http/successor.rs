//! `POST /v1/models/{name}/successor`: a trained spectral model is given the instrument that is
//! to replace its spectrophotometer (see [`crate::successor`]).
//!
//! The specification with the successor and the version that carries the new, empty succession
//! are written in one transaction, under the model's lock (origin `extend`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::routes;

use super::AppState;
use super::auth::ADMIN;
use super::error::{ApiError, ErrorBody};
use super::extract::Path;
use super::extract::{JsonBody, model_name};
use super::models::ModelView;
use super::routes::Routes;
use crate::cache::Serving;
use crate::domain::model::{MAX_FEATURES, MAX_STATE_ENTRIES};
use crate::domain::{Details, Invalid, ModelSpec, SpectrumSpec, describe, pointer_token};
use crate::estimator::succession::Succession;
use crate::folder::{Current, current_state};
use crate::history::{self, NextVersion, PredictorTask};
use crate::store::{StateBlob, VersionOrigin};
use crate::successor::encode_version;

/// The route that declares a successor, with the access it needs.
pub fn routes(routes: Routes) -> Routes {
    routes.add(ADMIN, routes!(declare))
}

/// Body of `POST /v1/models/{name}/successor`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({"spectrum": {"start_nm": 360, "interval_nm": 5, "count": 85, "scale": "fraction"}}))]
pub struct DeclareSuccessor {
    /// The successor's grid and scale: its readings are sent on any grid that covers this one,
    /// on this scale. A reflectance model's successor reads reflectance (as a fraction or in
    /// percent), an absorbance model's absorbance.
    pub spectrum: SpectrumSpec,
}

/// Give a model the instrument that is to replace its spectrophotometer.
///
/// From then on batches may carry the successor's readings (`successor`) beside the old
/// instrument's (`spectra`, the overlap) or alone, and predict answers successor readings
/// (`"instrument": "successor"`): through the map to the old instrument's bands learnt from the
/// overlap, and by the successor's own model, mixed by how well each predicted the rows it had
/// not yet learnt, until the own model stands on its own and the old instrument retires
/// (`successor` in the model's view says how far it has come). The model must be trained (its
/// first fit is the old instrument's), and gets a new version (origin `extend`). Declaring the
/// same successor again changes nothing; the model's outputs and features are fixed from then
/// on.
#[utoipa::path(post, operation_id = "declare_successor", path = "/v1/models/{name}/successor", tag = "models",
    params(("name" = String, Path, description = "Model name")),
    request_body = DeclareSuccessor,
    responses(
        (status = 200, description = "The model with its successor", body = ModelView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "Not trained, no spectrum, or another successor declared", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "Invalid spectrum, or a scale the model's cannot be read from", body = ErrorBody),
    ))]
#[tracing::instrument(skip(app, body))]
pub async fn declare(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<ModelView>, ApiError> {
    let name = model_name(&name)?;
    let mut lock = super::models::lock(&app, &name).await?;
    let Some(old) = lock.spec.spectrum else {
        return Err(ApiError::Conflict(format!(
            "model {name} reads no spectrum: a successor replaces a model's spectrophotometer"
        )));
    };
    let spectrum = parse(&body, &old, &lock.spec)?;
    match lock.spec.successor {
        Some(declared) if declared == spectrum => {
            drop(lock);
        }
        Some(declared) => {
            return Err(ApiError::Conflict(format!(
                "model {name} has a successor already, reading {}",
                declared.grid().describe()
            )));
        }
        None => {
            let Some(Current { state, .. }) = current_state(&mut lock, &app.cache).await? else {
                return Err(ApiError::NotTrained(format!(
                    "model {name:?} has no posterior yet: a successor is declared on a trained \
                     model, whose first fit the old instrument's readings make (the transfer \
                     is learnt from samples read by both)"
                )));
            };
            let succession = Succession::new(spectrum.grid(), old.count);
            let (state, successor, blob) = app
                .cpu_bound(move || {
                    let blob = StateBlob::new(encode_version(&state, Some(&succession)));
                    (state, Arc::new(Serving::new(succession)), blob)
                })
                .await?;
            let mut spec = lock.spec.clone();
            spec.successor = Some(spectrum);
            lock.respecify(spec).await?;
            let next = NextVersion {
                origin: VersionOrigin::Extend,
                restored_from: None,
                predictor: PredictorTask::start(&state),
                state,
                successor: Some(successor),
                blob: &blob,
                folds: &[],
                replayable: true,
            };
            history::commit_version(lock, &app.cache, next).await?;
            tracing::info!(model = %name, grid = %spectrum.grid().describe(), "successor declared");
        }
    }
    super::models::view(&app, &name).await
}

/// The body's spectrum, checked against the model's own (`old`): the scales must be both
/// reflectance or both absorbance, and its own model (its bands, `model`'s named features and
/// intercept, `model`'s outputs) no larger than a model may be.
fn parse(body: &Value, old: &SpectrumSpec, model: &ModelSpec) -> Result<SpectrumSpec, Invalid> {
    let Value::Object(fields) = body else {
        return Err(Invalid::one(
            "",
            format!("the body must be a JSON object, found {}", describe(body)),
        ));
    };
    let mut details = Details::default();
    for key in fields.keys().filter(|k| *k != "spectrum") {
        details.push(format!("/{}", pointer_token(key)), "unknown field");
    }
    let spectrum = match fields.get("spectrum") {
        Some(value) => SpectrumSpec::parse(value, "/spectrum", MAX_FEATURES, &mut details),
        None => {
            details.push("/spectrum", "is required");
            None
        }
    };
    if let Some(spectrum) = &spectrum {
        // The successor's own model: its bands, the named features and the intercept.
        let p = spectrum.count + model.features.len() + usize::from(model.intercept);
        let entries = p.saturating_mul(p).saturating_mul(model.outputs.len());
        if spectrum.count + model.features.len() > MAX_FEATURES {
            details.push(
                "/spectrum/count",
                format!(
                    "with the model's {} named features, at most {} bands",
                    model.features.len(),
                    MAX_FEATURES.saturating_sub(model.features.len())
                ),
            );
        } else if entries > MAX_STATE_ENTRIES {
            details.push(
                "/spectrum/count",
                format!(
                    "the successor's own model is too large: (bands + features + intercept)² × \
                     outputs = {entries} exceeds {MAX_STATE_ENTRIES}"
                ),
            );
        }
    }
    if let Some(spectrum) = &spectrum
        && spectrum.full_scale().is_some() != old.full_scale().is_some()
    {
        details.push(
            "/spectrum/scale",
            format!(
                "the model reads {:?}: its successor must read reflectance where it does, and \
                 absorbance where it does",
                old.scale.as_str()
            ),
        );
    }
    details.finish("invalid successor")?;
    spectrum.ok_or_else(|| Invalid::one("/spectrum", "is required"))
}
