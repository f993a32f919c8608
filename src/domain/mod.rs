//! Validated domain types: parsed once at the boundary, trusted everywhere after.
//!
//! Every parser collects *all* the problems of its input as [`Invalid`] details, each with the
//! JSON pointer of the offending value, so a client fixes a request in one round trip.

mod batch;
mod body;
pub mod colour;
mod details;
mod extension;
mod fast;
mod handover;
mod header;
pub mod kitchen;
pub mod model;
pub mod reach;
mod rows;
mod scope;
pub mod spectrum;

pub use batch::{
    BATCH_ID_PATTERN, BatchId, ContentHash, EncodedBatch, MAX_BATCH_ID_LEN, NewBatch, Successor,
    fast_inputs, parse_inputs, row_fields,
};
pub use body::{Body, BodyError, RowArray, RowField, Width, check_json};
pub use details::{Detail, Details, Invalid, MAX_DETAILS, pointer_token};
pub(crate) use details::{describe, quote, quote_cell};
pub use extension::{Extension, Growth, extend};
pub use fast::{FastObject, FastSpectra, fast_rows_object, fast_spectra_object};
pub use handover::{scale_factor, to_model_scale};
pub use header::CsvError;
pub use model::{ModelName, ModelSpec, SaundersonSpec, Shape, TransformName, UpdateName};
pub use rows::{Rows, parse_rows};
pub use scope::Scope;
pub use spectrum::{Grid, Instrument, ScaleName, SpectrumSpec};
