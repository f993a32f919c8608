//! Where the data lives: a PostgreSQL URL or the embedded file.

use std::fmt;
use std::path::PathBuf;

use super::DatabaseSettings;

/// Where the data lives, from `database.url` and `database.path`.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// A PostgreSQL URL (`postgres://` or `postgresql://`).
    Postgres(String),
    /// An embedded SQLite file: `database.path` when the URL is empty, or a `sqlite:` URL.
    Sqlite(PathBuf),
}

impl fmt::Debug for Location {
    // A PostgreSQL URL may carry a password: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Postgres(_) => f.write_str("Postgres(<redacted>)"),
            Self::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
        }
    }
}

impl Location {
    pub fn of(settings: &DatabaseSettings) -> anyhow::Result<Self> {
        let url = settings.url.trim();
        if url.is_empty() {
            anyhow::ensure!(
                !settings.path.trim().is_empty(),
                "database.path is empty: set it to the embedded database's file, or set \
                 DATABASE_URL to a PostgreSQL URL"
            );
            return Self::file(settings.path.trim(), "database.path");
        }
        Self::of_url(
            url,
            "DATABASE_URL",
            "DATABASE_URL (database.url) must be a PostgreSQL URL (postgres://…), a sqlite: URL, \
             or empty for the embedded database at database.path",
        )
    }

    /// The store a URL given as `what` names (`DATABASE_URL`, or `--from` of `mordant copy`);
    /// `expected` says what else it may be.
    pub fn of_url(url: &str, what: &str, expected: &str) -> anyhow::Result<Self> {
        let url = url.trim();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            anyhow::ensure!(
                !path.is_empty() && !path.contains('?'),
                "{what} {url:?}: a sqlite URL names a file, as in sqlite://data/mordant.db \
                 (no options)"
            );
            return Self::file(path, what);
        }
        let scheme = match url.split_once(':') {
            Some((scheme, _)) => format!("found scheme {scheme:?}"),
            None => "found no scheme".to_owned(),
        };
        anyhow::bail!("{expected}; {scheme}")
    }
}

impl Location {
    /// The embedded store at `path`, given by `what`; SQLite's in-memory database is refused:
    /// each connection of the pool would open one of its own, empty, and nothing outlives the
    /// process.
    fn file(path: &str, what: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            path != ":memory:",
            "{what} names SQLite's in-memory database, which each connection opens empty and \
             nothing outlives: name a file, as in sqlite://data/mordant.db"
        );
        Ok(Self::Sqlite(PathBuf::from(path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str, path: &str) -> DatabaseSettings {
        DatabaseSettings {
            url: url.to_owned(),
            path: path.to_owned(),
            max_connections: 4,
            acquire_timeout_secs: 1,
            startup_timeout_secs: 1,
            full_state_every: 10,
        }
    }

    #[test]
    fn no_url_means_the_embedded_file_and_urls_choose_their_backend() {
        let at = |url: &str, path: &str| Location::of(&settings(url, path));
        assert_eq!(
            at("", "data/mordant.db").unwrap(),
            Location::Sqlite("data/mordant.db".into())
        );
        assert_eq!(
            at("postgres://u:pw@db/plant", "x").unwrap(),
            Location::Postgres("postgres://u:pw@db/plant".into())
        );
        assert!(matches!(
            at("postgresql://db/plant", "").unwrap(),
            Location::Postgres(_)
        ));
        assert_eq!(
            at("sqlite:///var/lib/mordant/m.db", "x").unwrap(),
            Location::Sqlite("/var/lib/mordant/m.db".into())
        );
        assert_eq!(
            at("sqlite:m.db", "x").unwrap(),
            Location::Sqlite("m.db".into())
        );
        let error = at("mysql://db/plant", "x").unwrap_err().to_string();
        assert!(
            error.contains("DATABASE_URL") && error.contains("mysql"),
            "{error}"
        );
        assert!(at("", " ").is_err(), "no URL and no path");
        // `mordant copy` names its own flags, and a path without a scheme says it has none.
        let error = Location::of_url("data/mordant.db", "--from", "--from must be a URL")
            .unwrap_err()
            .to_string();
        assert_eq!(error, "--from must be a URL; found no scheme");
        let error = Location::of_url("sqlite://", "--to", "--to must be a URL")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("--to \"sqlite://\""), "{error}");
        assert!(at("sqlite://m.db?mode=ro", "").is_err());
        for (url, path) in [
            ("sqlite::memory:", ""),
            ("sqlite://:memory:", ""),
            ("", ":memory:"),
        ] {
            let error = at(url, path).unwrap_err().to_string();
            assert!(error.contains("in-memory"), "{url:?} {path:?}: {error}");
        }
        assert!(
            !format!("{:?}", at("postgres://u:pw@db/plant", "").unwrap()).contains("pw"),
            "a URL's password never reaches the logs"
        );
    }
}
