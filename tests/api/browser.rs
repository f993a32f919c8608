//! Debian's headless Chromium for the tests of the service's pages, driven over WebDriver by
//! Debian's ChromeDriver. CI installs both and sets `MORDANT_REQUIRE_CHROMIUM=1`; elsewhere the
//! browser checks run when both are on the PATH and are skipped with a note otherwise.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::wd::{Capabilities, WebDriverCompatibleCommand};
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// Chromium's flags for a test: quiet (none of its own background traffic), and with every host
/// but loopback unresolvable, so that a page that asks another host gets nothing. With
/// `--headless` (or `--headless=new`).
pub const QUIET_LOOPBACK: [&str; 9] = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
];

/// A program on the PATH, or `None` (with a note) where it is absent and not required.
pub fn required_program(name: &str) -> Option<PathBuf> {
    let required = std::env::var("MORDANT_REQUIRE_CHROMIUM").is_ok_and(|v| v == "1");
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    match found {
        Some(path) => Some(path),
        None if required => panic!("MORDANT_REQUIRE_CHROMIUM=1 but {name} is not on the PATH"),
        None => {
            eprintln!("{name} not found: the browser check is skipped here; CI runs it");
            None
        }
    }
}

/// A headless Chromium session behind its own ChromeDriver, both stopped on drop.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempdir::Dir,
}

impl Browser {
    /// The process group of ChromeDriver and its Chromium.
    pub fn process_group(&self) -> Option<u32> {
        self.driver.id()
    }
}

/// How many processes of group `group` are alive (exited ones awaiting their reaping are not).
pub fn alive_in_group(group: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            // `pid (comm) state ppid pgrp …`: the fields after the command's closing parenthesis.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
            fields.len() > 2 && fields[0] != "Z" && fields[2] == group.to_string()
        })
        .count()
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Chromium outlives a killed ChromeDriver (it was left running after the tests): the
        // driver leads a process group of its own, which its Chromium processes join.
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Browser {
    /// `None` where Chromium or ChromeDriver is missing and not required.
    pub async fn start(width: u32, height: u32) -> Option<Self> {
        let chromium = required_program("chromium")?;
        let chromedriver = required_program("chromedriver")?;
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let ready = crate::helpers::wait_until(Duration::from_secs(30), || async {
            let status: Value = reqwest::get(format!("{url}/status"))
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (status["value"]["ready"] == true).then_some(())
        })
        .await;
        assert!(ready.is_some(), "chromedriver did not answer on {url}");
        let profile = tempdir::Dir::new("mordant-browser");
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": QUIET_LOOPBACK
                    .iter()
                    .map(|a| (*a).to_owned())
                    .chain([
                        "--headless=new".to_owned(),
                        format!("--window-size={width},{height}"),
                        format!("--user-data-dir={}", profile.path().display()),
                    ])
                    .collect::<Vec<_>>(),
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object literal")
        };
        let capabilities: Capabilities = capabilities;
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&url)
            .await
            .expect("a Chromium session");
        Some(Self {
            client,
            driver,
            _profile: profile,
        })
    }

    /// What the page wrote to its console (and the browser logged for it, such as a failed
    /// request) since the last call: `(level, message)`.
    pub async fn console_log(&self) -> Vec<(String, String)> {
        let entries = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("the browser's log");
        entries
            .as_array()
            .expect("log entries")
            .iter()
            .map(|e| {
                (
                    e["level"].as_str().unwrap_or_default().to_owned(),
                    e["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Every URL the page has loaded or fetched since it was opened.
    pub async fn requests(&self) -> Vec<String> {
        let urls = self
            .client
            .execute(
                "return [location.href].concat(performance.getEntriesByType('resource')\
                 .map((e) => e.name));",
                vec![],
            )
            .await
            .expect("the page's resources");
        urls.as_array()
            .expect("a list")
            .iter()
            .map(|u| u.as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// A PNG of the window, written to `path`; returns its size in bytes.
    pub async fn screenshot(&self, path: &std::path::Path) -> usize {
        let png = self.client.screenshot().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        std::fs::write(path, &png).expect("screenshot written");
        eprintln!("screenshot: {}", path.display());
        png.len()
    }
}

/// ChromeDriver's log of the browser (its extension of WebDriver).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// A directory removed on drop.
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new(prefix: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "{prefix}-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4()
            ));
            std::fs::create_dir_all(&path).expect("a temporary directory");
            Self(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
