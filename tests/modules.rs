//! No module depends, through its `use`s, on a module that depends back on it, in any crate of
//! the workspace. `cargo-modules` (crates.io) draws each library's module graph and Graphviz's
//! `acyclic` checks it. CI installs both and sets `MORDANT_REQUIRE_MODULE_CHECK=1`; elsewhere
//! the test runs when they are on the PATH.

use std::io::Write;
use std::process::{Command, Stdio};

/// Every crate with modules (mordant-colour is one module: it has no edge to check).
const CRATES: [&str; 4] = [
    "mordant",
    "mordant-estimator",
    "mordant-kitchen",
    "mordant-lab",
];

/// The library's graph of modules and their `use` edges, in Graphviz's language.
fn module_graph(package: &str) -> Option<Vec<u8>> {
    let output = Command::new("cargo")
        .args(["modules", "dependencies", "--lib", "-p", package])
        // Modules only, and only the edges of `use`: a parent that declares a child does not
        // depend on it.
        .args([
            "--no-externs",
            "--no-sysroot",
            "--no-fns",
            "--no-types",
            "--no-traits",
        ])
        .args(["--no-owns", "--layout", "dot"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    assert!(
        output.status.success(),
        "cargo modules failed for {package}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(output.stdout)
}

/// Pipes `input` through a Graphviz tool; its exit status and output.
fn graphviz(tool: &str, args: &[&str], input: &[u8]) -> Option<(bool, String)> {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(input).ok()?;
    let output = child.wait_with_output().ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Some((output.status.success(), text))
}

#[test]
fn no_crate_has_a_module_cycle() {
    let required = std::env::var("MORDANT_REQUIRE_MODULE_CHECK").is_ok_and(|v| v == "1");
    let tools = Command::new("cargo")
        .args(["modules", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
        && graphviz("acyclic", &["-?"], b"").is_some();
    if !tools {
        assert!(
            !required,
            "MORDANT_REQUIRE_MODULE_CHECK=1 but cargo-modules or Graphviz's acyclic does not run"
        );
        eprintln!("cargo-modules or Graphviz not found: skipped here; CI runs it");
        return;
    }
    for package in CRATES {
        let graph = module_graph(package).expect("cargo modules runs");
        assert!(
            graph.windows(2).any(|w| w == b"->"),
            "{package}: the module graph has no edges; did cargo-modules read the crate?"
        );
        let (acyclic, verdict) = graphviz("acyclic", &["-n", "-v"], &graph).expect("acyclic runs");
        if !acyclic {
            // The strongly connected components name the modules of each cycle.
            let cycles = graphviz("sccmap", &["-S"], &graph).map_or_else(String::new, |(_, t)| t);
            panic!("{package} has module cycles: {verdict}\n{cycles}");
        }
    }
}
