//! A client generated from the committed OpenAPI document by a maintained generator
//! (`openapi-python-client`, PyPI) runs the README's service flow, CSV included
//! (`tests/client/flow.py`). CI installs the generator and sets
//! `MORDANT_REQUIRE_CLIENT_GENERATOR=1`; elsewhere the test runs when it is on the PATH.

use std::process::Command;

use crate::helpers::{spawn_configured, tool_runs};

const ADMIN_KEY: &str = "generated-client-admin-key-0123456789";

#[tokio::test]
async fn a_generated_client_runs_the_readme_flow() {
    if !tool_runs("openapi-python-client", "MORDANT_REQUIRE_CLIENT_GENERATOR") {
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("generated-client");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let generated = Command::new("openapi-python-client")
        .current_dir(&dir)
        .args(["generate", "--meta", "none", "--output-path", "client"])
        .arg("--path")
        .arg(format!("{root}/openapi/openapi.json"))
        .arg("--config")
        .arg(format!("{root}/tests/client/config.yaml"))
        .output()
        .expect("openapi-python-client runs");
    let report = String::from_utf8_lossy(&generated.stdout).into_owned()
        + &String::from_utf8_lossy(&generated.stderr);
    assert!(generated.status.success(), "generation failed:\n{report}");
    // A warning means part of the API was left out of the client.
    assert!(
        !report.contains("Warning"),
        "the generator left something out:\n{report}"
    );

    let app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    let flow = tokio::process::Command::new("python3")
        .arg(format!("{root}/tests/client/flow.py"))
        .args([&app.address, ADMIN_KEY])
        .arg(&dir)
        .output()
        .await
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&flow.stdout);
    assert!(
        flow.status.success() && stdout.contains("ran through the generated client"),
        "the flow failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&flow.stderr)
    );
}
