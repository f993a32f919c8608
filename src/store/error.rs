//! The store's errors, classified as the HTTP layer and the background tasks need them.

/// Errors of the store, as the HTTP layer needs to tell them apart.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The database cannot be reached (or no connection is free): retry later.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// A version's stored state does not decode; restoring an earlier version repairs it.
    #[error("the stored state of model {model:?} version {version} is corrupt: {reason}")]
    CorruptState {
        model: String,
        version: i64,
        reason: String,
    },
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
}

impl StoreError {
    /// The same error for another waiter (one failed commit answers every batch of its group):
    /// the same kind and message; a database error's source is carried as its message.
    pub fn duplicate(&self) -> Self {
        let source = |e: &sqlx::Error| sqlx::Error::Io(std::io::Error::other(e.to_string()));
        match self {
            Self::NotFound(m) => Self::NotFound(m.clone()),
            Self::Conflict(m) => Self::Conflict(m.clone()),
            Self::Unavailable(e) => Self::Unavailable(source(e)),
            Self::Corrupt(m) => Self::Corrupt(m.clone()),
            Self::CorruptState {
                model,
                version,
                reason,
            } => Self::CorruptState {
                model: model.clone(),
                version: *version,
                reason: reason.clone(),
            },
            Self::Database(e) => Self::Database(source(e)),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        // A column that does not decode (a spec that is not a model spec, say) is corrupt data,
        // not a failing database.
        if let sqlx::Error::ColumnDecode { index, source } = &e {
            return Self::Corrupt(format!("column {index}: {source}"));
        }
        let unavailable = match &e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::Io(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_)
            | sqlx::Error::Tls(_) => true,
            sqlx::Error::Database(db) => {
                if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                    postgres_unavailable(pg.code()) || closed_to_sessions(pg.code(), pg.severity())
                } else if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                    sqlite_unavailable(db.code().as_deref())
                } else {
                    false
                }
            }
            _ => false,
        };
        if unavailable {
            Self::Unavailable(e)
        } else {
            Self::Database(e)
        }
    }
}

/// SQLSTATEs that mean "try again later": classes 08 (connection exception), 53
/// (insufficient resources, e.g. too many connections) and 57P (shutdown), serialization
/// failures and deadlocks (40001, 40P01), a read-only server after a failover (25006), a
/// lock timeout (55P03).
fn postgres_unavailable(code: &str) -> bool {
    Some(code).is_some_and(|c| {
        c.starts_with("08")
            || c.starts_with("53")
            || c.starts_with("57P")
            || matches!(c, "40001" | "40P01" | "25006" | "55P03")
    })
}

/// A new session refused by a database closed to new sessions (`ALLOW_CONNECTIONS false`, a
/// maintenance window): SQLSTATE 55000 at severity FATAL, which ends the session. 55000 is
/// also a statement's error in a live session (an object not in the state it needs), which no
/// retry mends: that one stays a database error.
fn closed_to_sessions(code: &str, severity: sqlx::postgres::PgSeverity) -> bool {
    code == "55000" && severity == sqlx::postgres::PgSeverity::Fatal
}

/// SQLite result codes that mean "try again later" (the primary code, the low byte of the
/// extended one): busy (5), locked (6), I/O error (10), disk full (13), cannot open (14).
fn sqlite_unavailable(code: Option<&str>) -> bool {
    code.and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| matches!(c & 0xff, 5 | 6 | 10 | 13 | 14))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 55000 says "try again later" only when it refuses a session (FATAL), not when a
    /// statement in a live session meets an object in the wrong state (ERROR).
    #[test]
    fn a_database_closed_to_sessions_is_unavailable_and_a_statement_s_55000_is_not() {
        use sqlx::postgres::PgSeverity;
        assert!(closed_to_sessions("55000", PgSeverity::Fatal));
        assert!(!closed_to_sessions("55000", PgSeverity::Error));
        assert!(!closed_to_sessions("55P03", PgSeverity::Fatal));
        assert!(!postgres_unavailable("55000"));
        assert!(postgres_unavailable("55P03") && postgres_unavailable("57P03"));
    }

    #[test]
    fn a_column_that_does_not_decode_is_corrupt_data() {
        let source = serde_json::from_str::<crate::domain::ModelSpec>("{}").unwrap_err();
        let error = StoreError::from(sqlx::Error::ColumnDecode {
            index: "\"spec\"".into(),
            source: Box::new(source),
        });
        assert!(
            matches!(&error, StoreError::Corrupt(m) if m.contains("spec")),
            "{error:?}"
        );
        assert!(matches!(
            StoreError::from(sqlx::Error::PoolTimedOut),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            StoreError::from(sqlx::Error::RowNotFound),
            StoreError::Database(_)
        ));
    }
}
