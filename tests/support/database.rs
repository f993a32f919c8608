//! An empty database of its own for each test, on PostgreSQL or in an embedded SQLite file,
//! removed when the guard drops: the one helper of the store suite (`tests/store.rs`) and the
//! API tests (`tests/api`, `tests/api_sqlite`).
#![allow(dead_code)]

use sqlx::Connection;

/// The server tests create their databases on: `DATABASE_URL` (pointing at any database
/// there), else the local default.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// `url` with its database name replaced by `database`.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(i) => &base[..authority_start + i],
        None => base,
    };
    format!("{base}/{database}{query}")
}

/// An empty database of its own for one test, dropped (with any connections left) when the
/// guard is.
pub struct TestDatabase {
    pub name: String,
    /// `postgres://…` or `sqlite://<file>`.
    pub url: String,
    /// The embedded store's directory (removed on drop); `None` on PostgreSQL.
    dir: Option<std::path::PathBuf>,
}

/// A directory of its own, where the application creates its SQLite file.
pub fn fresh_sqlite_database() -> TestDatabase {
    let name = format!("mordant_test_{}", uuid::Uuid::new_v4().simple());
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).expect("create the test database's directory");
    TestDatabase {
        url: format!("sqlite://{}", dir.join("mordant.db").display()),
        name,
        dir: Some(dir),
    }
}

/// An empty PostgreSQL database.
pub async fn fresh_postgres_database() -> TestDatabase {
    let name = format!("mordant_test_{}", uuid::Uuid::new_v4().simple());
    let admin = server_url();
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .expect("PostgreSQL must answer at DATABASE_URL (or 127.0.0.1:5432)");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create test database");
    TestDatabase {
        url: with_database(&admin, &name),
        name,
        dir: None,
    }
}

/// A PostgreSQL database's name and URL on the test server, not created (the code under test
/// creates it); dropped with the guard if it was.
pub fn unmade_postgres_database() -> TestDatabase {
    let name = format!("mordant_test_{}", uuid::Uuid::new_v4().simple());
    TestDatabase {
        url: with_database(&server_url(), &name),
        name,
        dir: None,
    }
}

impl TestDatabase {
    /// Runs a statement on the database behind the application's back (to corrupt it, say);
    /// the rows it changed.
    pub async fn execute(&self, postgres: &str, sqlite: &str) -> u64 {
        if self.dir.is_some() {
            let pool = sqlx::SqlitePool::connect(&self.url).await.expect("open");
            let done = sqlx::query(sqlite).execute(&pool).await.expect(sqlite);
            pool.close().await;
            done.rows_affected()
        } else {
            let pool = sqlx::PgPool::connect(&self.url).await.expect("connect");
            let done = sqlx::query(postgres).execute(&pool).await.expect(postgres);
            pool.close().await;
            done.rows_affected()
        }
    }

    /// Records a migration this release does not know, as a newer release would have applied
    /// it (version 99991231000000).
    pub async fn mark_migrated_by_a_later_release(&self) {
        let row = |checksum: &str| {
            format!(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
                 execution_time) VALUES (99991231000000, 'a later release', TRUE, {checksum}, 0)"
            )
        };
        self.execute(&row("'\\x00'::bytea"), &row("X'00'")).await;
    }

    /// The first column of a query's rows, as text (the same SQL on both backends).
    pub async fn strings(&self, sql: &str) -> Vec<String> {
        self.strings_each(sql, sql).await
    }

    /// The first column of a query's rows, as text, where the backends' schemas differ.
    pub async fn strings_each(&self, postgres: &str, sqlite: &str) -> Vec<String> {
        if self.dir.is_some() {
            let sql = sqlite;
            let pool = sqlx::SqlitePool::connect(&self.url).await.expect("open");
            let rows = sqlx::query_scalar(sql).fetch_all(&pool).await.expect(sql);
            pool.close().await;
            rows
        } else {
            let sql = postgres;
            let pool = sqlx::PgPool::connect(&self.url).await.expect("connect");
            let rows = sqlx::query_scalar(sql).fetch_all(&pool).await.expect(sql);
            pool.close().await;
            rows
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
        let name = self.name.clone();
        // Drop runs inside the test's runtime: do the async work on a thread of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&server_url()).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}
