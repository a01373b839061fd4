//! `service-worker`: the session worker as an executable of its own.
//!
//! The supervisor starts one per session, so it carries only the worker: no server, store, providers, registry
//! or TUI. That keeps its start and its private memory (the relocated data of its binary) small; the figures are
//! in BENCHMARKS.md. Its command line is the one `service-rs worker` takes, so either can serve a session:
//! `service-worker worker --ipc-fd N [--label L] [--enter-cgroups]`. Only the supervisor runs it, so the line is
//! read by hand rather than with clap, which would be most of what it links for nothing.

use std::process::ExitCode;

fn main() -> ExitCode {
    service_worker::hardening::pre_main();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(line) = parse(&args) else {
        eprintln!(
            "usage: service-worker worker --ipc-fd N [--label L] [--enter-cgroups]\n\
             service-worker is started by service-rs for each session; it is not run by hand"
        );
        return ExitCode::from(2);
    };
    match service_worker::main(line.ipc_fd, line.enter_cgroups) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("service-worker: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the supervisor's command line asks.
#[derive(Debug, PartialEq, Eq)]
struct Line {
    ipc_fd: i32,
    enter_cgroups: bool,
}

/// `worker --ipc-fd N`, then `--label L` and `--enter-cgroups` in any order; None for any other line.
fn parse(args: &[String]) -> Option<Line> {
    let [worker, flag, fd, rest @ ..] = args else {
        return None;
    };
    let mut rest: &[String] = rest;
    if worker != "worker" || flag != "--ipc-fd" {
        return None;
    }
    let mut line = Line {
        ipc_fd: fd.parse().ok()?,
        enter_cgroups: false,
    };
    loop {
        rest = match rest {
            [] => return Some(line),
            [flag, rest @ ..] if flag == service_ipc::ENTER_CGROUPS_FLAG && !line.enter_cgroups => {
                line.enter_cgroups = true;
                rest
            }
            [flag, _label, rest @ ..] if flag == "--label" => rest,
            _ => return None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Line};

    fn line(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_supervisors_command_line_is_accepted() {
        let fd = |ipc_fd, enter_cgroups| {
            Some(Line {
                ipc_fd,
                enter_cgroups,
            })
        };
        assert_eq!(
            parse(&line("worker --ipc-fd 12 --label abc")),
            fd(12, false)
        );
        assert_eq!(parse(&line("worker --ipc-fd 3")), fd(3, false));
        assert_eq!(
            parse(&line("worker --ipc-fd 3 --label abc --enter-cgroups")),
            fd(3, true)
        );
        assert_eq!(
            parse(&line("worker --ipc-fd 3 --enter-cgroups --label abc")),
            fd(3, true)
        );
    }

    #[test]
    fn any_other_command_line_is_refused() {
        for bad in [
            "",
            "worker",
            "worker --ipc-fd x",
            "serve --ipc-fd 3",
            "worker --ipc-fd 3 --label",
            "worker --ipc-fd 3 --other x",
            "worker --ipc-fd 3 --enter-cgroups --enter-cgroups",
        ] {
            assert_eq!(parse(&line(bad)), None, "{bad}");
        }
    }
}
