//! The README's shell walkthroughs, read as a newcomer would run them (shared by the API tests
//! and the container test).

use std::time::{Duration, Instant};

/// The README, as the tests were built with it.
pub const README: &str = include_str!("../../README.md");
/// How the README runs the command line; the tests run the binary they were built with.
pub const CARGO_RUN: &str = "cargo run --release -- ";

/// The README's text under `heading`, up to the next heading of level 2 or 3 (`# …` lines
/// inside the blocks are comments).
pub fn section(heading: &str) -> &'static str {
    let start = README
        .find(heading)
        .unwrap_or_else(|| panic!("the README has the section {heading:?}"));
    let section = &README[start + heading.len()..];
    let end = section
        .match_indices("\n#")
        .map(|(i, _)| i)
        .find(|&i| section[i + 1..].starts_with("## ") || section[i + 1..].starts_with("### "))
        .unwrap_or(section.len());
    &section[..end]
}

/// The shell commands of the section under `heading`'s `sh` blocks, one per `curl` or `cargo
/// run` (continuation lines and multi-line quoted arguments joined back).
pub fn walkthrough(heading: &str) -> Vec<String> {
    let section = section(heading);
    let mut commands: Vec<String> = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        match line.trim_end() {
            "```sh" => in_block = true,
            "```" => in_block = false,
            line if !in_block || line.is_empty() || line.starts_with('#') => {}
            line if line.starts_with("curl ") || line.starts_with(CARGO_RUN) => {
                commands.push(line.to_owned())
            }
            line => {
                let last = commands
                    .last_mut()
                    .expect("a continuation follows a curl line");
                last.push('\n');
                last.push_str(line);
            }
        }
    }
    commands
}

/// Runs a README `curl` line against the service at `host` with `options` added (say, a key):
/// an HTTP error status fails it. A batch folds in the background, so "check that it folded"
/// is asked again for a while, as a person would; every other command must succeed the first
/// time. Its standard output.
pub async fn run_curl(command: &str, host: &str, options: &str) -> String {
    assert!(command.contains("localhost:8080"), "{command}");
    let runnable = command
        .replacen(
            "curl ",
            &format!("curl --fail-with-body --max-time 30 {options} "),
            1,
        )
        .replace("localhost:8080", host);
    let waits_for_fold = command.contains("/batches/");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = tokio::process::Command::new("bash")
            .args(["-c", &runnable])
            .output()
            .await
            .expect("bash runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() && (!waits_for_fold || stdout.contains("\"status\":\"folded\""))
        {
            return stdout;
        }
        assert!(
            waits_for_fold && Instant::now() < deadline,
            "README command failed against {host}:\n{command}\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
