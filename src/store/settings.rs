//! What the store is configured with (`[database]` in the configuration files).

use std::fmt;

use serde::Deserialize;

/// Where the data lives and how the connections to it are managed.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// A PostgreSQL URL; empty for the embedded SQLite store at `path`.
    pub url: String,
    /// The embedded store's file, used when `url` is empty.
    pub path: String,
    pub max_connections: u32,
    pub acquire_timeout_secs: u64,
    pub startup_timeout_secs: u64,
    /// Every how many versions a fold's full state is kept; the folds in between are kept as
    /// the batches they folded and replayed from the last full state when restored (1 keeps
    /// every state).
    pub full_state_every: u32,
}

impl fmt::Debug for DatabaseSettings {
    // The URL may carry a password: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &"<redacted>")
            .field("path", &self.path)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout_secs", &self.acquire_timeout_secs)
            .field("startup_timeout_secs", &self.startup_timeout_secs)
            .field("full_state_every", &self.full_state_every)
            .finish()
    }
}

/// The default of [`DatabaseSettings::full_state_every`].
pub const DEFAULT_FULL_STATE_EVERY: u32 = 10;
