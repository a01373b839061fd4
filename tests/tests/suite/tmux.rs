//! A terminal for tests: the real binary in tmux, driven with send-keys and read with capture-pane.

use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of its own (its own socket), killed when dropped.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn start(command: &str) -> Tmux {
        // Unique per test: tests run in parallel in one process, and two on one server would clash on "main".
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let socket = format!(
            "service-rs-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let t = Tmux { socket };
        let ok = t
            .cmd(&[
                "new-session",
                "-d",
                "-s",
                "main",
                "-x",
                "120",
                "-y",
                "40",
                command,
            ])
            .status()
            .unwrap()
            .success();
        assert!(
            ok,
            "tmux could not start (is tmux installed? `.ci/deps` installs it)"
        );
        t
    }

    /// `service-rs <line>` run by a shell in `env`'s work directory and store (the line may go on with `; ...`).
    pub fn service_rs(env: &super::support::Env, line: &str) -> Tmux {
        Tmux::start(&format!(
            "cd {} && env SERVICE_HOME={} {} {line}",
            env.work.path().display(),
            env.home.path().display(),
            super::support::binary().display()
        ))
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]).args(args);
        c
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "main"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status().unwrap().success());
    }

    pub fn type_line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    pub fn screen(&self) -> String {
        let out = self
            .cmd(&["capture-pane", "-p", "-t", "main"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[track_caller]
    pub fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{text:?} never appeared; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `text` is no longer on the screen (a key's effect, before the next keys land on it).
    #[track_caller]
    pub fn wait_gone(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.screen().contains(text) {
            assert!(
                Instant::now() < deadline,
                "{text:?} never went; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn running(&self) -> bool {
        self.cmd(&["has-session", "-t", "main"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).output();
    }
}
