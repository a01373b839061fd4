//! Headless Chromium driven over WebDriver: Debian's `chromedriver` on a free loopback port, in its own process
//! group so that it and every browser process it started are killed together when the test ends.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile, `width` px wide.
    pub async fn start(width: u32) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver runs (.ci/deps installs chromium-driver)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let mut options = serde_json::json!({
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new",
                    // CI runs as root, where Chromium's own sandbox cannot start.
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    format!("--window-size={width},900"),
                    format!("--user-data-dir={}", profile.path().display()),
                ],
        });
        // A window cannot be narrower than 500 px; a phone's width is emulated instead.
        if width < 500 {
            options["mobileEmulation"] = serde_json::json!({"deviceMetrics": {"width": width, "height": 780, "pixelRatio": 1}});
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), options);
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// Waits up to 20 s for `css` to match an element whose text (shown or folded away) contains `text`; returns
    /// that text.
    pub async fn wait_text(&self, css: &str, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let js = format!(
            "return [...document.querySelectorAll({})].map(e => e.textContent)",
            serde_json::json!(css)
        );
        loop {
            let texts = self.js(&js).await;
            let found = texts
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str())
                .find(|t| t.contains(text));
            if let Some(t) = found {
                return t.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no {css} with text {text:?}; the page shows: {}",
                self.body_text().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits up to 20 s for the script `js` (a function body returning a value) to return true.
    pub async fn wait_js(&self, js: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.js(js).await == serde_json::Value::Bool(true) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the page shows: {}",
                self.body_text().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs `js` (a function body) in the page; its return value.
    pub async fn js(&self, js: &str) -> serde_json::Value {
        self.client
            .execute(js, Vec::new())
            .await
            .unwrap_or(serde_json::Value::Null)
    }

    /// Clicks the first element `css` matches, once it exists (again if the page replaced it meanwhile).
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let clicked = match self.client.find(Locator::Css(css)).await {
                Ok(e) => e.click().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match clicked {
                Ok(()) => return,
                Err(e) => assert!(Instant::now() < deadline, "click {css}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let field = self
            .client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    pub async fn body_text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(e) => format!("(no body: {e})"),
        }
    }

    /// Saves a PNG of the page under `target/` for people to look at; returns its path.
    pub async fn screenshot(&self, name: &str) -> std::path::PathBuf {
        let png = self.client.screenshot().await.unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        // Absent when CARGO_TARGET_DIR puts the build elsewhere.
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, png).unwrap();
        path
    }

    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.driver.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}
