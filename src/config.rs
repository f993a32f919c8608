//! Layered configuration: `config/default.toml` (compiled in), the overlay for `MORDANT_ENV`,
//! `MORDANT__SECTION__KEY` environment variables, and finally the plain variables deployment
//! tools expect: `DATABASE_URL` and `MORDANT_ADDR`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

pub use crate::store::DatabaseSettings;

const DEFAULTS: &str = include_str!("../config/default.toml");

/// What settings are loaded for: only a process that serves the API needs the admin key
/// production requires (`migrate` and `healthcheck` never read it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Serve,
    Maintain,
}

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
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Set from `MORDANT_ENV` by [`Settings::load`], not from the files.
    #[serde(skip, default = "development")]
    pub environment: Environment,
    pub server: ServerSettings,
    pub auth: AuthSettings,
    pub database: DatabaseSettings,
    pub limits: Limits,
    pub folder: FolderSettings,
    pub retention: RetentionSettings,
    pub cache: CacheSettings,
    pub log: LogSettings,
}

fn development() -> Environment {
    Environment::Development
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub addr: String,
    /// Where `/metrics` is served when not on `addr` (empty: on `addr`).
    pub metrics_addr: String,
    /// Origins allowed by CORS; `*` for any.
    pub cors_origins: Vec<String>,
    /// Threads serving HTTP, each with a runtime of its own; 0: one per core.
    pub http_threads: usize,
}

/// Most threads `server.http_threads` may ask for.
const MAX_HTTP_THREADS: usize = 1024;

impl ServerSettings {
    /// How many threads serve HTTP.
    pub fn http_threads(&self) -> usize {
        match self.http_threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// The bootstrap admin key; empty for none.
    pub admin_key: String,
}

impl AuthSettings {
    pub fn admin_key(&self) -> Option<&str> {
        Some(self.admin_key.as_str()).filter(|k| !k.is_empty())
    }
}

impl fmt::Debug for AuthSettings {
    // A key is a secret: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.admin_key.is_empty() {
            "<none>"
        } else {
            "<redacted>"
        };
        f.debug_struct("AuthSettings")
            .field("admin_key", &key)
            .finish()
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_body_bytes_in_flight: usize,
    pub max_rows_per_request: usize,
    pub request_timeout_secs: u64,
    pub header_read_timeout_secs: u64,
    pub max_header_bytes: usize,
    pub max_headers: usize,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FolderSettings {
    pub enabled: bool,
    pub poll_interval_ms: u64,
    pub max_backoff_secs: u64,
    pub max_concurrent_folds: usize,
    /// A fold reads the queued batches that start within these bytes of stored statistics (raw
    /// rows where a batch was stored without them), counted from the queue's head, and a first
    /// fit's batches and one batch whatever their size: a backlog is folded a bounded piece at a
    /// time, each committed as its own version.
    pub max_fold_bytes: u64,
    /// How long a stopping service lets a fold in progress finish before it abandons it (its
    /// transaction rolls back, and its batches stay queued for the next start).
    pub shutdown_grace_secs: u64,
}

impl FolderSettings {
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    pub fn max_backoff(&self) -> Duration {
        Duration::from_secs(self.max_backoff_secs.max(1))
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }
}

/// What the store keeps, and for how long.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Days a batch's raw rows are kept after it arrived; 0 keeps them forever. The
    /// statistics, the versions and the batch's record stay (refit, restore and drift keep
    /// working); only the rows of batches folded or rejected go.
    pub raw_rows_days: u32,
    /// How often the purge looks for rows past their time.
    pub purge_interval_secs: u64,
    /// Batches purged per transaction (small transactions keep ingestion flowing).
    pub purge_batch_size: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    pub filter: String,
}

/// `MORDANT_ADMIN_KEY`, the bootstrap admin key under the plain name deployment tools set
/// (empty counts as unset). It wins over the files, like `DATABASE_URL` and `MORDANT_ADDR`;
/// set beside the layered `MORDANT__AUTH__ADMIN_KEY` with another value, it is refused: which
/// of the two the operator meant cannot be told.
fn plain_admin_key() -> anyhow::Result<Option<String>> {
    let read = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let plain = read("MORDANT_ADMIN_KEY");
    if let (Some(plain), Some(layered)) = (&plain, read("MORDANT__AUTH__ADMIN_KEY")) {
        anyhow::ensure!(
            *plain == layered,
            "MORDANT_ADMIN_KEY and MORDANT__AUTH__ADMIN_KEY are both set, to different keys: \
             set only one"
        );
    }
    Ok(plain)
}

/// The `MORDANT__SECTION__KEY` variables of text settings (those whose default is text), as
/// `(section.key, value)`.
fn text_variables(defaults: &config::Config) -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            // The environment source matches its prefix in any case.
            let name = name.to_str()?;
            let prefix = name.get(..9)?;
            if !prefix.eq_ignore_ascii_case("MORDANT__") {
                return None;
            }
            let key = name[9..].to_lowercase().replace("__", ".");
            let default = defaults.get::<config::Value>(&key).ok()?;
            let text = matches!(default.kind, config::ValueKind::String(_));
            text.then(|| Some((key, value.into_string().ok()?)))?
        })
        .collect()
}

/// Refuses a setting whose value is not of its default's kind where the configuration crate
/// would convert it silently: a whole-number setting given `1.5` (rounded), `true` (read as 1)
/// or a number past `i64::MAX` (read as a float, then clamped); a switch given anything but
/// `true` or `false`.
fn check_kinds(defaults: &config::Config, loaded: &config::Config) -> anyhow::Result<()> {
    use config::ValueKind as K;
    type Sections = std::collections::BTreeMap<String, config::Map<String, config::Value>>;
    for (section, keys) in defaults.clone().try_deserialize::<Sections>()? {
        for (key, default) in keys {
            let name = format!("{section}.{key}");
            let Ok(value) = loaded.get::<config::Value>(&name) else {
                continue;
            };
            let whole = match &value.kind {
                K::I64(n) => *n >= 0,
                K::I128(n) => (0..=i128::from(i64::MAX)).contains(n),
                K::U64(n) => i64::try_from(*n).is_ok(),
                K::U128(n) => i64::try_from(*n).is_ok(),
                K::String(s) => s.parse::<i64>().is_ok_and(|n| n >= 0),
                _ => false,
            };
            let switch = match &value.kind {
                K::Boolean(_) => true,
                K::String(s) => s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false"),
                _ => false,
            };
            let found = value.kind.to_string();
            match default.kind {
                // The setting's own type may bound it further (a u32 says so when it is read).
                K::I64(_) | K::I128(_) | K::U64(_) | K::U128(_) => {
                    let digits = !found.is_empty() && found.bytes().all(|b| b.is_ascii_digit());
                    anyhow::ensure!(
                        whole || !digits,
                        "{name} is too large: at most {}, found {found:?}",
                        i64::MAX
                    );
                    anyhow::ensure!(
                        whole,
                        "{name} must be a whole number, 0 or more, found {found:?}"
                    );
                }
                K::Boolean(_) => {
                    anyhow::ensure!(switch, "{name} must be true or false, found {found:?}")
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Seconds in a day: the longest timeout, backoff or poll a setting may ask for.
const DAY_SECS: u64 = 86_400;

/// Most header fields `limits.max_headers` may allow.
const MAX_HEADERS: usize = 1000;

/// The shortest poll of the folder and the cache follower, in milliseconds.
const MIN_POLL_MS: u64 = 10;

/// The configuration directory: `MORDANT_CONFIG_DIR`, default `./config`.
fn config_dir() -> PathBuf {
    std::env::var_os("MORDANT_CONFIG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("config"))
}

impl Settings {
    /// Loads the settings for `MORDANT_ENV` from the configuration directory (`MORDANT_CONFIG_DIR`,
    /// default `./config`; a missing directory leaves the compiled-in defaults).
    pub fn load() -> anyhow::Result<(Environment, Self)> {
        Self::load_for(Purpose::Serve)
    }

    /// [`Self::load`] for `purpose`.
    pub fn load_for(purpose: Purpose) -> anyhow::Result<(Environment, Self)> {
        let environment = Environment::from_env()?;
        let settings = Self::read(&config_dir(), environment)?;
        settings.validate_for(purpose)?;
        Ok((environment, settings))
    }

    /// The overlay `environment` names when it is not found (other than development's, which
    /// the compiled-in defaults are): a service started away from its `config` directory runs
    /// on the defaults, which an operator should hear of.
    pub fn missing_overlay(environment: Environment) -> Option<PathBuf> {
        let overlay = config_dir().join(format!("{}.toml", environment.as_str()));
        (environment != Environment::Development && !overlay.is_file()).then_some(overlay)
    }

    /// The settings to serve with from the directory `dir` for `environment`, checked.
    pub fn load_from(dir: &Path, environment: Environment) -> anyhow::Result<Self> {
        let settings = Self::read(dir, environment)?;
        settings.validate()?;
        Ok(settings)
    }

    fn read(dir: &Path, environment: Environment) -> anyhow::Result<Self> {
        let overlay = dir.join(format!("{}.toml", environment.as_str()));
        let defaults = config::Config::builder()
            .add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml))
            .build()
            .context("the compiled-in defaults")?;
        let mut builder = config::Config::builder()
            .add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml))
            .add_source(config::File::from(dir.join("default.toml")).required(false))
            .add_source(config::File::from(overlay).required(false))
            .add_source(
                config::Environment::with_prefix("MORDANT")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .list_separator(",")
                    .with_list_parse_key("server.cors_origins"),
            );
        // The environment source reads a variable that looks like a number as one: a text
        // setting (a key of digits, a path such as `007`) keeps the text as set.
        for (key, value) in text_variables(&defaults) {
            builder = builder.set_override(key, value)?;
        }
        if let Ok(url) = std::env::var("DATABASE_URL") {
            builder = builder.set_override("database.url", url)?;
        }
        if let Ok(addr) = std::env::var("MORDANT_ADDR") {
            builder = builder.set_override("server.addr", addr)?;
        }
        if let Some(key) = plain_admin_key()? {
            builder = builder.set_override("auth.admin_key", key)?;
        }
        let invalid = || format!("invalid configuration (directory {})", dir.display());
        let loaded = builder.build().with_context(invalid)?;
        check_kinds(&defaults, &loaded).with_context(invalid)?;
        let mut settings: Self = loaded.try_deserialize().with_context(invalid)?;
        settings.environment = environment;
        Ok(settings)
    }

    /// Refuses settings the service cannot run with, naming the setting.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.validate_for(Purpose::Serve)
    }

    /// Refuses settings that cannot serve `purpose`, naming the setting.
    pub fn validate_for(&self, purpose: Purpose) -> anyhow::Result<()> {
        let serves = purpose == Purpose::Serve;
        match self.auth.admin_key() {
            None if serves && self.environment == Environment::Production => anyhow::bail!(
                "MORDANT_ENV=production needs a bootstrap admin key: set MORDANT_ADMIN_KEY (or \
                 auth.admin_key; at least {} characters, e.g. from `openssl rand -hex 32`)",
                crate::auth::MIN_CONFIGURED_KEY_LEN
            ),
            Some(key) if key.chars().count() < crate::auth::MIN_CONFIGURED_KEY_LEN => {
                anyhow::bail!(
                    "auth.admin_key is too short: at least {} characters",
                    crate::auth::MIN_CONFIGURED_KEY_LEN
                )
            }
            Some(key) if !key.bytes().all(|b| b.is_ascii_graphic()) => {
                anyhow::bail!(
                    "auth.admin_key must be printable ASCII without spaces (it travels in an \
                     HTTP header)"
                )
            }
            _ => {}
        }
        // Each fold worker holds a listening connection and, while folding, one more; leave
        // the API at least two.
        let connections = self.folder.max_concurrent_folds.checked_mul(2);
        anyhow::ensure!(
            self.folder.max_concurrent_folds >= 1
                && connections
                    .and_then(|c| c.checked_add(2))
                    .is_some_and(|c| c <= self.database.max_connections as usize),
            "folder.max_concurrent_folds must be at least 1 and at most \
             (database.max_connections - 2) / 2 = {}",
            (self.database.max_connections as usize).saturating_sub(2) / 2
        );
        crate::store::Location::of(&self.database)?;
        anyhow::ensure!(
            self.retention.purge_batch_size >= 1 && self.retention.purge_interval_secs >= 1,
            "retention.purge_batch_size and retention.purge_interval_secs must be at least 1"
        );
        anyhow::ensure!(
            self.retention.raw_rows_days <= 36_500,
            "retention.raw_rows_days must be at most 36500 (a century); 0 keeps rows forever"
        );
        anyhow::ensure!(
            self.folder.poll_interval_ms >= MIN_POLL_MS
                && self.cache.poll_interval_ms >= MIN_POLL_MS,
            "folder.poll_interval_ms and cache.poll_interval_ms must be at least {MIN_POLL_MS}: \
             a poll every few milliseconds spins a core while the service is idle (notifications \
             wake the folder and the cache at once; the polls are their fallback)"
        );
        anyhow::ensure!(
            self.folder.max_fold_bytes >= 1,
            "folder.max_fold_bytes must be at least 1 (a fold reads one batch at least)"
        );
        anyhow::ensure!(
            self.folder.shutdown_grace_secs <= 3600,
            "folder.shutdown_grace_secs must be at most 3600 (an hour)"
        );
        anyhow::ensure!(
            self.database.full_state_every >= 1,
            "database.full_state_every must be at least 1 (1 keeps every version's full state)"
        );
        for origin in &self.server.cors_origins {
            let plain = origin == "*"
                || ((origin.starts_with("http://") || origin.starts_with("https://"))
                    && origin.bytes().all(|b| b.is_ascii_graphic()));
            anyhow::ensure!(
                plain,
                "server.cors_origins: {origin:?} is not an origin such as \
                 \"https://colour.plant.example\" (or \"*\")"
            );
        }
        anyhow::ensure!(
            self.server.http_threads <= MAX_HTTP_THREADS,
            "server.http_threads must be at most {MAX_HTTP_THREADS} (0: one per core)"
        );
        anyhow::ensure!(
            self.limits.request_timeout_secs >= 1,
            "limits.request_timeout_secs must be at least 1"
        );
        // A deadline is an instant plus the setting: past the clock's range it cannot be formed.
        let (day, month) = ((DAY_SECS, "a day"), (30 * DAY_SECS, "30 days"));
        let in_ms = |(secs, said)| (secs * 1000, said);
        for (name, value, (most, said)) in [
            (
                "limits.request_timeout_secs",
                self.limits.request_timeout_secs,
                day,
            ),
            (
                "limits.header_read_timeout_secs",
                self.limits.header_read_timeout_secs,
                day,
            ),
            (
                "database.acquire_timeout_secs",
                self.database.acquire_timeout_secs,
                day,
            ),
            (
                "database.startup_timeout_secs",
                self.database.startup_timeout_secs,
                day,
            ),
            ("folder.max_backoff_secs", self.folder.max_backoff_secs, day),
            (
                "folder.poll_interval_ms",
                self.folder.poll_interval_ms,
                in_ms(day),
            ),
            (
                "cache.poll_interval_ms",
                self.cache.poll_interval_ms,
                in_ms(day),
            ),
            (
                "retention.purge_interval_secs",
                self.retention.purge_interval_secs,
                month,
            ),
        ] {
            anyhow::ensure!(value <= most, "{name} must be at most {most} ({said})");
        }
        tracing_subscriber::EnvFilter::try_new(&self.log.filter).map_err(|e| {
            anyhow::anyhow!(
                "log.filter {:?} is not a filter such as \"info,sqlx=warn\": {e}",
                self.log.filter
            )
        })?;
        anyhow::ensure!(
            self.limits.max_headers <= MAX_HEADERS,
            "limits.max_headers must be at most {MAX_HEADERS}: each request reserves room for \
             twice as many fields"
        );
        anyhow::ensure!(
            self.limits.max_rows_per_request >= 1 && self.limits.max_body_bytes >= 1,
            "limits.max_rows_per_request and limits.max_body_bytes must be at least 1"
        );
        anyhow::ensure!(
            self.limits.header_read_timeout_secs >= 1,
            "limits.header_read_timeout_secs must be at least 1"
        );
        anyhow::ensure!(
            self.limits.max_headers >= 8 && self.limits.max_header_bytes >= 1024,
            "limits.max_headers must be at least 8 and limits.max_header_bytes at least 1024: \
             fewer refuses ordinary requests"
        );
        anyhow::ensure!(
            self.limits.max_body_bytes_in_flight >= self.limits.max_body_bytes,
            "limits.max_body_bytes_in_flight must be at least limits.max_body_bytes ({}): a \
             request of the largest size must fit",
            self.limits.max_body_bytes
        );
        Ok(())
    }
}
