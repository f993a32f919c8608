//! The image, run for real: `docker/Dockerfile`'s runtime stage (target `prebuilt`) around the
//! binary cargo built for these tests, on a Debian base made here with debootstrap (no registry
//! can be reached), then the README's four calls against containers on the embedded store with a
//! volume (which must outlive `docker rm`) and on the host's PostgreSQL. The image's wiring does
//! not depend on the build profile, and a release build would double CI's compile.
//!
//! Needs a Docker engine, debootstrap and root. CI sets `MORDANT_REQUIRE_DOCKER=1` (`.ci/run`
//! installs `docker.io` and `debootstrap` and starts the daemon); elsewhere the test is skipped,
//! saying so, where `docker info` fails.
//!
//! The containers use the host's network: the service listens on a loopback port of its own
//! (`MORDANT_ADDR`, which the `HEALTHCHECK` follows) and reaches PostgreSQL at the address the
//! other tests use, so no traffic leaves loopback.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::process::Command;

use crate::helpers::fresh_postgres_database;
use crate::process::free_port;
use crate::readme_walkthrough::{run_curl, walkthrough};

/// The Debian base, kept between runs (made once per machine; the test's images are removed).
const BASE_IMAGE: &str = "mordant-test-base:bookworm";
const MIRROR: &str = "http://deb.debian.org/debian";
/// The runtime user's id in the Dockerfile.
const USER_ID: &str = "10001";
/// `docker stop`'s grace period: the service must be gone well within it.
const GRACE: Duration = Duration::from_secs(10);
const ADMIN_KEY: &str = "mdk_container_test_bootstrap_key_0123456789";

/// Runs `program` with `args`; its stdout, or a panic with both streams.
async fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

async fn docker(args: &[&str]) -> String {
    run("docker", args).await
}

/// Whether a Docker engine answers; with `MORDANT_REQUIRE_DOCKER=1` it must.
async fn docker_runs() -> bool {
    let answers = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    if !answers {
        let required = std::env::var("MORDANT_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "MORDANT_REQUIRE_DOCKER=1 but no Docker engine answers"
        );
        eprintln!(
            "no Docker engine answers (`docker info`): the container test is skipped here; CI runs it"
        );
    }
    answers
}

/// A minimal Debian bookworm image from Debian's own packages (`debootstrap` + `docker import`).
async fn base_image() {
    let present = Command::new("docker")
        .args(["image", "inspect", BASE_IMAGE])
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    if present {
        return;
    }
    let root = scratch_dir("rootfs");
    let rootfs = root.to_str().expect("a UTF-8 path");
    run(
        "debootstrap",
        &["--variant=minbase", "bookworm", rootfs, MIRROR],
    )
    .await;
    let status = Command::new("bash")
        .args([
            "-c",
            &format!("tar -C '{rootfs}' -c . | docker import - {BASE_IMAGE}"),
        ])
        .status()
        .await
        .expect("tar and docker import run");
    let _ = std::fs::remove_dir_all(&root);
    assert!(status.success(), "docker import of the debootstrapped base");
}

/// A new directory under the system's temporary directory.
fn scratch_dir(what: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("mordant-{what}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Containers, volumes, images and directories this test made, removed however it ends.
#[derive(Default)]
struct Made {
    containers: Vec<String>,
    volumes: Vec<String>,
    images: Vec<String>,
    dirs: Vec<PathBuf>,
}

impl Drop for Made {
    fn drop(&mut self) {
        let remove = |args: &[&str], names: &[String]| {
            if !names.is_empty() {
                let _ = std::process::Command::new("docker")
                    .args(args)
                    .args(names)
                    .output();
            }
        };
        remove(&["rm", "-f", "-v"], &self.containers);
        remove(&["volume", "rm", "-f"], &self.volumes);
        remove(&["rmi", "-f"], &self.images);
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A running container of the image: its name and the service's address.
struct Service {
    name: String,
    host: String,
}

async fn start(
    made: &mut Made,
    image: &str,
    env: &[(&str, &str)],
    volume: Option<&str>,
) -> Service {
    let name = format!("mordant-test-{}", uuid::Uuid::new_v4().simple());
    let host = format!("127.0.0.1:{}", free_port());
    let mut args: Vec<String> = ["run", "-d", "--name", &name, "--network", "host"]
        .map(str::to_owned)
        .to_vec();
    let env = [
        ("MORDANT_ADDR", host.as_str()),
        ("MORDANT_ADMIN_KEY", ADMIN_KEY),
    ]
    .into_iter()
    .chain(env.iter().copied());
    for (key, value) in env {
        args.extend(["-e".to_owned(), format!("{key}={value}")]);
    }
    if let Some(volume) = volume {
        args.extend(["-v".to_owned(), format!("{volume}:/app/data")]);
    }
    args.push(image.to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&args).await;
    made.containers.push(name.clone());
    let service = Service { name, host };
    service.wait_healthy().await;
    service
}

impl Service {
    async fn inspect(&self, format: &str) -> String {
        docker(&["inspect", "--format", format, &self.name]).await
    }

    /// Until Docker's `HEALTHCHECK` reports the container healthy.
    async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let health = self.inspect("{{.State.Health.Status}}").await;
            if health == "healthy" {
                return;
            }
            let running = self.inspect("{{.State.Running}}").await;
            if health == "unhealthy" || running != "true" || Instant::now() > deadline {
                let logs = Command::new("docker")
                    .args(["logs", &self.name])
                    .output()
                    .await
                    .expect("docker logs");
                panic!(
                    "container {} is {health} (running: {running}):\n{}{}",
                    self.name,
                    String::from_utf8_lossy(&logs.stdout),
                    String::from_utf8_lossy(&logs.stderr)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `docker stop` with the grace period: how long it took, and the exit code.
    async fn stop(&self) -> (Duration, i64) {
        let started = Instant::now();
        docker(&["stop", "--time", &GRACE.as_secs().to_string(), &self.name]).await;
        let took = started.elapsed();
        let code = self.inspect("{{.State.ExitCode}}").await;
        (took, code.parse().expect("an exit code"))
    }

    /// The README's four calls (create, post a batch, wait until it folded, predict) as the
    /// README gives them, with the admin key the production image asks for; their outputs.
    async fn readme_calls(&self) -> Vec<String> {
        let mut outputs = Vec::new();
        for command in &walkthrough("## The service, step by step")[..4] {
            outputs.push(self.curl(command).await);
        }
        outputs
    }

    /// A README `curl` line against this container, with the admin key.
    async fn curl(&self, command: &str) -> String {
        let key = format!("-H 'Authorization: Bearer {ADMIN_KEY}'");
        run_curl(command, &self.host, &key).await
    }

    /// Stops the container and checks it went within the grace period, with exit code 0.
    async fn stop_cleanly(&self) {
        let (took, code) = self.stop().await;
        assert_eq!(code, 0, "docker stop: the service exits 0 on SIGTERM");
        assert!(
            took < GRACE,
            "docker stop took {took:?}: the service did not stop before the grace period ({GRACE:?})"
        );
    }
}

/// The four calls' answers say what the README says: a model, a batch folded into version 1, a
/// prediction with a finite mean and a positive variance per dye.
fn check_walkthrough(outputs: &[String]) {
    let json = |text: &str| -> serde_json::Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    assert_eq!(
        json(&outputs[0])["name"],
        "cotton-reactive",
        "{}",
        outputs[0]
    );
    let batch = json(&outputs[2]);
    assert_eq!(batch["status"], "folded");
    assert_eq!(batch["version"], 1);
    let prediction = json(&outputs[3]);
    let first = &prediction["predictions"][0];
    let means = first["mean"].as_array().expect("means");
    let variances = first["variance"].as_array().expect("variances");
    assert_eq!(means.len(), 2, "{prediction}");
    assert_eq!(variances.len(), 2, "{prediction}");
    assert!(means.iter().all(|m| m.as_f64().is_some_and(f64::is_finite)));
    assert!(
        variances
            .iter()
            .all(|v| v.as_f64().is_some_and(|v| v > 0.0))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_as_documented_on_both_stores() {
    if !docker_runs().await {
        return;
    }
    let mut made = Made::default();
    base_image().await;

    // The build context holds just what the `prebuilt` stage copies, the binary where a
    // release build puts it.
    let context = scratch_dir("context");
    made.dirs.push(context.clone());
    let release = context.join("target/release");
    std::fs::create_dir_all(&release).expect("target/release in the context");
    std::fs::copy(env!("CARGO_BIN_EXE_mordant"), release.join("mordant")).expect("the binary");
    run(
        "cp",
        &[
            "-r",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
            context.to_str().expect("a UTF-8 path"),
        ],
    )
    .await;
    let image = format!("mordant-test:{}", uuid::Uuid::new_v4().simple());
    made.images.push(image.clone());
    docker(&[
        "build",
        "--network",
        "host",
        "--file",
        concat!(env!("CARGO_MANIFEST_DIR"), "/docker/Dockerfile"),
        "--target",
        "prebuilt",
        "--build-arg",
        &format!("BASE={BASE_IMAGE}"),
        "--tag",
        &image,
        context.to_str().expect("a UTF-8 path"),
    ])
    .await;

    // The embedded store, on a volume.
    let volume = format!("mordant-test-{}", uuid::Uuid::new_v4().simple());
    docker(&["volume", "create", &volume]).await;
    made.volumes.push(volume.clone());
    let first = start(&mut made, &image, &[], Some(&volume)).await;

    // The service runs as the image's user, not root.
    let pid = first.inspect("{{.State.Pid}}").await;
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process's status");
    let uids = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("a Uid line");
    assert!(
        uids.split_whitespace().all(|uid| uid == USER_ID),
        "the service runs as uid {USER_ID}: {uids}"
    );
    assert_eq!(docker(&["exec", &first.name, "id", "-un"]).await, "mordant");

    let outputs = first.readme_calls().await;
    check_walkthrough(&outputs);
    first.stop_cleanly().await;
    docker(&["rm", &first.name]).await;

    // A new container on the same volume has the model, its folded batch and its answers.
    let second = start(&mut made, &image, &[], Some(&volume)).await;
    let commands = walkthrough("## The service, step by step");
    assert_eq!(
        second.curl(&commands[2]).await,
        outputs[2],
        "the batch survives docker rm"
    );
    assert_eq!(
        second.curl(&commands[3]).await,
        outputs[3],
        "the same prediction from the same volume"
    );
    second.stop_cleanly().await;

    // The host's PostgreSQL.
    let database = fresh_postgres_database().await;
    let on_postgres = start(&mut made, &image, &[("DATABASE_URL", &database.url)], None).await;
    let outputs = on_postgres.readme_calls().await;
    check_walkthrough(&outputs);
    on_postgres.stop_cleanly().await;
}
