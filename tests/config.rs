//! Configuration layers: compiled-in defaults < config/<env>.toml < MORDANT__SECTION__KEY <
//! DATABASE_URL, MORDANT_ADDR and MORDANT_ADMIN_KEY. One test in its own binary: it sets process environment.

use std::path::Path;

use mordant::config::{Environment, LogFormat, Settings};

#[test]
fn layers_apply_in_order() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    // SAFETY: this binary runs this one test only, so no other thread reads the environment.
    unsafe {
        std::env::remove_var("DATABASE_URL");
        std::env::remove_var("MORDANT_ADDR");
        std::env::remove_var("MORDANT__LIMITS__MAX_ROWS_PER_REQUEST");
        std::env::remove_var("MORDANT__AUTH__ADMIN_KEY");
        std::env::remove_var("MORDANT_ADMIN_KEY");
    }
    let development = Settings::load_from(&dir, Environment::Development).unwrap();
    assert_eq!(development.server.addr, "127.0.0.1:8080");
    assert_eq!(development.log.format, LogFormat::Pretty);
    assert_eq!(
        development.auth.admin_key(),
        None,
        "development may run open"
    );

    // Production refuses to start without a bootstrap admin key, and says how to set one.
    let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
    assert!(
        format!("{error:#}").contains("MORDANT_ADMIN_KEY"),
        "{error:#}"
    );

    // The plain name sets the key; beside the layered one it must say the same.
    let plain = "plain-k3y-that-is-long-enough-0123456789";
    unsafe { std::env::set_var("MORDANT_ADMIN_KEY", plain) };
    let settings = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(settings.auth.admin_key(), Some(plain));
    unsafe { std::env::set_var("MORDANT__AUTH__ADMIN_KEY", plain) };
    let settings = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(settings.auth.admin_key(), Some(plain));
    unsafe {
        std::env::set_var(
            "MORDANT__AUTH__ADMIN_KEY",
            "another-k3y-long-enough-0123456789ab",
        )
    };
    let error = format!(
        "{:#}",
        Settings::load_from(&dir, Environment::Production).unwrap_err()
    );
    assert!(
        error.contains("MORDANT_ADMIN_KEY") && error.contains("MORDANT__AUTH__ADMIN_KEY"),
        "{error}"
    );
    assert!(!error.contains("k3y"), "the keys never appear: {error}");
    unsafe { std::env::set_var("MORDANT_ADMIN_KEY", "") };
    let settings = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(
        settings.auth.admin_key(),
        Some("another-k3y-long-enough-0123456789ab"),
        "an empty plain variable is unset"
    );
    unsafe { std::env::remove_var("MORDANT_ADMIN_KEY") };

    unsafe { std::env::set_var("MORDANT__AUTH__ADMIN_KEY", "short") };
    let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
    assert!(format!("{error:#}").contains("too short"), "{error:#}");
    unsafe {
        std::env::set_var(
            "MORDANT__AUTH__ADMIN_KEY",
            "k3y-material-that-is-long-enough-0123456789",
        );
        std::env::set_var(
            "MORDANT__SERVER__CORS_ORIGINS",
            "https://colour.plant.example,https://lab.plant.example",
        );
    }
    let production = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(
        production.server.addr, "0.0.0.0:8080",
        "the production overlay"
    );
    assert_eq!(production.log.format, LogFormat::Json);

    unsafe {
        std::env::set_var("MORDANT__LIMITS__MAX_ROWS_PER_REQUEST", "77");
        std::env::set_var("MORDANT__SERVER__ADDR", "127.0.0.1:9000");
        std::env::set_var("MORDANT_ADDR", "127.0.0.1:9100");
        std::env::set_var("DATABASE_URL", "postgres://u:secret@db:5432/plant");
    }
    let settings = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(settings.limits.max_rows_per_request, 77);
    assert_eq!(settings.server.addr, "127.0.0.1:9100", "MORDANT_ADDR wins");
    assert_eq!(settings.database.url, "postgres://u:secret@db:5432/plant");
    assert!(
        !format!("{settings:?}").contains("secret"),
        "the database password never appears in logs"
    );
    assert!(
        !format!("{settings:?}").contains("k3y-material"),
        "the admin key never appears in logs"
    );
    assert_eq!(
        settings.server.cors_origins,
        ["https://colour.plant.example", "https://lab.plant.example"]
    );

    assert_eq!(settings.server.http_threads, 0, "one per core by default");
    assert!(settings.server.http_threads() >= 1);
    unsafe { std::env::set_var("MORDANT__SERVER__HTTP_THREADS", "3") };
    let settings = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(settings.server.http_threads(), 3);
    unsafe { std::env::set_var("MORDANT__SERVER__HTTP_THREADS", "100000") };
    let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
    assert!(
        format!("{error:#}").contains("server.http_threads"),
        "{error:#}"
    );
    unsafe { std::env::remove_var("MORDANT__SERVER__HTTP_THREADS") };

    unsafe { std::env::set_var("MORDANT__LIMITS__MAX_ROWS_PER_REQUEST", "many") };
    let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
    assert!(
        format!("{error:#}").contains("max_rows_per_request"),
        "{error:#}"
    );
    unsafe { std::env::remove_var("MORDANT__LIMITS__MAX_ROWS_PER_REQUEST") };

    // A poll every few milliseconds would spin a core while the service is idle.
    for (variable, setting) in [
        (
            "MORDANT__FOLDER__POLL_INTERVAL_MS",
            "folder.poll_interval_ms",
        ),
        ("MORDANT__CACHE__POLL_INTERVAL_MS", "cache.poll_interval_ms"),
    ] {
        unsafe { std::env::set_var(variable, "0") };
        let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
        assert!(format!("{error:#}").contains(setting), "{error:#}");
        unsafe { std::env::set_var(variable, "10") };
        Settings::load_from(&dir, Environment::Production).unwrap();
        unsafe { std::env::remove_var(variable) };
    }

    // A grace longer than an hour is a mistake (and `u64::MAX` would overflow the deadline).
    unsafe { std::env::set_var("MORDANT__FOLDER__SHUTDOWN_GRACE_SECS", "100000") };
    let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
    assert!(
        format!("{error:#}").contains("folder.shutdown_grace_secs"),
        "{error:#}"
    );
    unsafe { std::env::remove_var("MORDANT__FOLDER__SHUTDOWN_GRACE_SECS") };

    // A fold that may read no bytes of the queue would fold nothing, over and over.
    unsafe { std::env::set_var("MORDANT__FOLDER__MAX_FOLD_BYTES", "0") };
    let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
    assert!(
        format!("{error:#}").contains("folder.max_fold_bytes"),
        "{error:#}"
    );
    unsafe { std::env::set_var("MORDANT__FOLDER__MAX_FOLD_BYTES", "1") };
    let settings = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(settings.folder.max_fold_bytes, 1);
    unsafe { std::env::remove_var("MORDANT__FOLDER__MAX_FOLD_BYTES") };

    // A misspelt setting is refused and named, whether it comes from the environment (key or
    // section) or from a file; before, it was ignored and its default used in silence.
    for (variable, misspelt) in [
        ("MORDANT__SERVER__ADRR", "adrr"),
        ("MORDANT__SERVR__ADDR", "servr"),
        ("MORDANT__DATABASE__MAX_CONECTIONS", "max_conections"),
    ] {
        unsafe { std::env::set_var(variable, "127.0.0.1:9200") };
        let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
        assert!(format!("{error:#}").contains(misspelt), "{error:#}");
        unsafe { std::env::remove_var(variable) };
    }
    let overlay = Path::new(env!("CARGO_TARGET_TMPDIR")).join("config-misspelt");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("production.toml"),
        "[folder]\nmax_concurent_folds = 4\n",
    )
    .unwrap();
    let error = Settings::load_from(&overlay, Environment::Production).unwrap_err();
    assert!(
        format!("{error:#}").contains("max_concurent_folds"),
        "{error:#}"
    );
    std::fs::write(
        overlay.join("production.toml"),
        "[folder]\nmax_concurrent_folds = 4\n",
    )
    .unwrap();
    let settings = Settings::load_from(&overlay, Environment::Production).unwrap();
    assert_eq!(settings.folder.max_concurrent_folds, 4);

    // A value of the wrong kind is refused and named, where the configuration crate would
    // round it (1.5), read it as 1 (`true`), or clamp a number past `i64::MAX`: a retention of
    // `true` days purged rows after one day.
    for (variable, value, says) in [
        (
            "MORDANT__LIMITS__MAX_ROWS_PER_REQUEST",
            "1.5",
            "limits.max_rows_per_request must be a whole number",
        ),
        (
            "MORDANT__RETENTION__RAW_ROWS_DAYS",
            "true",
            "retention.raw_rows_days must be a whole number",
        ),
        ("MORDANT__RETENTION__RAW_ROWS_DAYS", "0.4", "found \"0.4\""),
        // Not "from 0 to i64::MAX": the setting is a u32 of at least 1.
        (
            "MORDANT__DATABASE__FULL_STATE_EVERY",
            "-1",
            "database.full_state_every must be a whole number, 0 or more, found \"-1\"",
        ),
        (
            "MORDANT__FOLDER__ENABLED",
            "1",
            "folder.enabled must be true or false",
        ),
        (
            "MORDANT__LIMITS__HEADER_READ_TIMEOUT_SECS",
            "18446744073709551615",
            "limits.header_read_timeout_secs",
        ),
        // Past what a deadline can be formed with, or what a request may reserve.
        (
            "MORDANT__LIMITS__HEADER_READ_TIMEOUT_SECS",
            "10000000",
            "limits.header_read_timeout_secs must be at most 86400",
        ),
        (
            "MORDANT__DATABASE__ACQUIRE_TIMEOUT_SECS",
            "9223372036854775807",
            "database.acquire_timeout_secs",
        ),
        (
            "MORDANT__FOLDER__MAX_CONCURRENT_FOLDS",
            "9223372036854775807",
            "folder.max_concurrent_folds",
        ),
        (
            "MORDANT__LIMITS__MAX_HEADERS",
            "100000000",
            "limits.max_headers must be at most",
        ),
        (
            "MORDANT__LOG__FILTER",
            "info,sqlx=loud",
            "log.filter \"info,sqlx=loud\" is not a filter",
        ),
    ] {
        unsafe { std::env::set_var(variable, value) };
        let error = format!(
            "{:#}",
            Settings::load_from(&dir, Environment::Production).unwrap_err()
        );
        assert!(error.contains(says), "{variable}={value}: {error}");
        unsafe { std::env::remove_var(variable) };
    }
    std::fs::write(
        overlay.join("production.toml"),
        "[limits]\nmax_rows_per_request = 2.5\n",
    )
    .unwrap();
    let error = format!(
        "{:#}",
        Settings::load_from(&overlay, Environment::Production).unwrap_err()
    );
    assert!(
        error.contains("limits.max_rows_per_request must be a whole number"),
        "{error}"
    );
    std::fs::remove_file(overlay.join("production.toml")).unwrap();
    // A text setting keeps the text set, though it looks like a number.
    let digits = "1234567890123456789012345678901234567890";
    unsafe {
        std::env::set_var("MORDANT__AUTH__ADMIN_KEY", digits);
        std::env::set_var("MORDANT__DATABASE__PATH", "007");
    }
    let settings = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(settings.auth.admin_key(), Some(digits));
    assert_eq!(settings.database.path, "007");
    unsafe { std::env::remove_var("MORDANT__DATABASE__PATH") };
    // The environment source takes its prefix in any case, and so does the text.
    unsafe {
        std::env::remove_var("MORDANT__AUTH__ADMIN_KEY");
        std::env::set_var("mordant__auth__admin_key", digits);
    }
    let settings = Settings::load_from(&dir, Environment::Production).unwrap();
    assert_eq!(settings.auth.admin_key(), Some(digits));
    unsafe {
        std::env::remove_var("mordant__auth__admin_key");
        std::env::set_var("MORDANT__AUTH__ADMIN_KEY", digits);
    }

    // The binary itself refuses to serve in production without a key, before touching the
    // database, and names the setting.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
        .arg("serve")
        .env_clear()
        .env("MORDANT_ENV", "production")
        .env("MORDANT_CONFIG_DIR", &dir)
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("MORDANT_ADMIN_KEY"), "{stderr}");

    // Migrating needs no key: a migration job runs without the service's secret.
    let store = Path::new(env!("CARGO_TARGET_TMPDIR")).join("config-migrate");
    let _ = std::fs::remove_dir_all(&store);
    std::fs::create_dir_all(&store).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
        .arg("migrate")
        .env_clear()
        .env("MORDANT_ENV", "production")
        .env("MORDANT_CONFIG_DIR", &dir)
        .env("DATABASE_URL", format!("sqlite://{}/m.db", store.display()))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(store.join("m.db").is_file());
}
