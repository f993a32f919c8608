//! Configuration layers: compiled-in defaults < config/<env>.toml < MORDANT__SECTION__KEY <
//! DATABASE_URL and MORDANT_ADDR. One test in its own binary: it sets process environment.

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
    }
    let development = Settings::load_from(&dir, Environment::Development).unwrap();
    assert_eq!(development.server.addr, "127.0.0.1:8080");
    assert_eq!(development.log.format, LogFormat::Pretty);
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

    unsafe { std::env::set_var("MORDANT__LIMITS__MAX_ROWS_PER_REQUEST", "many") };
    let error = Settings::load_from(&dir, Environment::Production).unwrap_err();
    assert!(
        format!("{error:#}").contains("max_rows_per_request"),
        "{error:#}"
    );
}
