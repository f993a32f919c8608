//! Layered configuration: `config/default.toml` (compiled in), the overlay for `MORDANT_ENV`,
//! `MORDANT__SECTION__KEY` environment variables, and finally the plain variables deployment
//! tools expect: `DATABASE_URL` and `MORDANT_ADDR`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

const DEFAULTS: &str = include_str!("../config/default.toml");

/// Which environment the service runs in (`MORDANT_ENV`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Environment {
    Development,
    Production,
}

impl Environment {
    pub fn from_env() -> anyhow::Result<Self> {
        match std::env::var("MORDANT_ENV") {
            Err(_) => Ok(Self::Development),
            Ok(v) => match v.as_str() {
                "development" | "" => Ok(Self::Development),
                "production" => Ok(Self::Production),
                other => anyhow::bail!(
                    "MORDANT_ENV must be \"development\" or \"production\", found {other:?}"
                ),
            },
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Development => "development",
            Self::Production => "production",
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub limits: Limits,
    pub folder: FolderSettings,
    pub cache: CacheSettings,
    pub log: LogSettings,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ServerSettings {
    pub addr: String,
}

#[derive(Clone, Deserialize)]
pub struct DatabaseSettings {
    pub url: String,
    pub max_connections: u32,
    pub acquire_timeout_secs: u64,
    pub startup_timeout_secs: u64,
}

impl fmt::Debug for DatabaseSettings {
    // The URL may carry a password: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &"<redacted>")
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout_secs", &self.acquire_timeout_secs)
            .field("startup_timeout_secs", &self.startup_timeout_secs)
            .finish()
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_rows_per_request: usize,
}

#[derive(Clone, Debug, Deserialize)]
pub struct FolderSettings {
    pub enabled: bool,
    pub poll_interval_ms: u64,
    pub max_backoff_secs: u64,
}

impl FolderSettings {
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms.max(1))
    }

    pub fn max_backoff(&self) -> Duration {
        Duration::from_secs(self.max_backoff_secs.max(1))
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct CacheSettings {
    pub poll_interval_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LogSettings {
    pub format: LogFormat,
    pub filter: String,
}

impl Settings {
    /// Loads the settings for `MORDANT_ENV` from the configuration directory (`MORDANT_CONFIG_DIR`,
    /// default `./config`; a missing directory leaves the compiled-in defaults).
    pub fn load() -> anyhow::Result<(Environment, Self)> {
        let environment = Environment::from_env()?;
        let dir = std::env::var_os("MORDANT_CONFIG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("config"));
        let settings = Self::load_from(&dir, environment)?;
        Ok((environment, settings))
    }

    pub fn load_from(dir: &Path, environment: Environment) -> anyhow::Result<Self> {
        let overlay = dir.join(format!("{}.toml", environment.as_str()));
        let mut builder = config::Config::builder()
            .add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml))
            .add_source(config::File::from(dir.join("default.toml")).required(false))
            .add_source(config::File::from(overlay).required(false))
            .add_source(
                config::Environment::with_prefix("MORDANT")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true),
            );
        if let Ok(url) = std::env::var("DATABASE_URL") {
            builder = builder.set_override("database.url", url)?;
        }
        if let Ok(addr) = std::env::var("MORDANT_ADDR") {
            builder = builder.set_override("server.addr", addr)?;
        }
        builder
            .build()
            .and_then(|c| c.try_deserialize())
            .with_context(|| format!("invalid configuration (directory {})", dir.display()))
    }
}
