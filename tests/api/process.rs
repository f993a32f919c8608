//! The real `mordant` binary as a child process, for tests that kill it or run several.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// A free TCP port on 127.0.0.1 (free when asked; the service binds it right after).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.local_addr().expect("local address").port()
}

/// `mordant serve` on a fixed port, so that clients find it again after a restart.
pub struct ServiceProcess {
    child: Child,
    pub address: String,
    database_url: String,
    port: u16,
    env: Vec<(String, String)>,
}

impl ServiceProcess {
    /// Starts the service and waits until `/healthz` answers.
    pub async fn start(database_url: &str, port: u16, env: &[(&str, &str)]) -> Self {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let child = spawn(database_url, port, &env);
        let mut process = Self {
            child,
            address: format!("http://127.0.0.1:{port}"),
            database_url: database_url.to_owned(),
            port,
            env,
        };
        process.wait_healthy().await;
        process
    }

    async fn wait_healthy(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("child status") {
                panic!("mordant exited during start-up: {status}");
            }
            let healthy = client
                .get(format!("{}/healthz", self.address))
                .timeout(Duration::from_secs(1))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if healthy {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "mordant did not start within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The peak resident memory of the process so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let pid = self.child.id().expect("a running process");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status");
        kib * 1024
    }

    /// Whether the process is still running (`Err` with its exit status when not).
    pub fn running(&mut self) -> Result<(), std::process::ExitStatus> {
        match self.child.try_wait().expect("child status") {
            None => Ok(()),
            Some(status) => Err(status),
        }
    }

    /// SIGKILL: no shutdown code runs.
    pub async fn kill(&mut self) {
        self.child.start_kill().expect("SIGKILL");
        self.child.wait().await.expect("reap");
    }

    /// Kills the process and starts a new one on the same port.
    pub async fn restart_after_kill(&mut self) {
        self.kill().await;
        self.child = spawn(&self.database_url, self.port, &self.env);
        self.wait_healthy().await;
    }
}

fn spawn(database_url: &str, port: u16, env: &[(String, String)]) -> Child {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    Command::new(env!("CARGO_BIN_EXE_mordant"))
        .arg("serve")
        .env("DATABASE_URL", database_url)
        .env("MORDANT_ADDR", format!("127.0.0.1:{port}"))
        .env("MORDANT_CONFIG_DIR", config)
        .env("MORDANT__LOG__FILTER", "error")
        .env("MORDANT__FOLDER__POLL_INTERVAL_MS", "200")
        .env("MORDANT__CACHE__POLL_INTERVAL_MS", "200")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the mordant binary")
}
