//! What an API key may do (stored with each key, checked on every request).

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a key may do. `admin` may do everything.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Create and delete models, restore, refit, manage keys (and everything below).
    Admin,
    /// Post batches, read models and batches.
    Ingest,
    /// Predict, read models.
    Predict,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Admin, Scope::Ingest, Scope::Predict];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Ingest => "ingest",
            Self::Predict => "predict",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|scope| scope.as_str() == s)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
