//! The worker's command line, as the supervisor writes it: `worker --ipc-fd N [--label L] [--enter-cgroups]`. Both
//! `service-worker` and `service-rs` read it here, before anything else: only the supervisor runs it, so it is
//! read by hand rather than with clap (which the lean binary would link for nothing), and `service-rs` keeps it out
//! of its clap commands, its help and its shell completions.

use std::process::ExitCode;

/// Runs the worker when `args` (without the program name) are a worker's command line; None for any other, which
/// is not a worker's to handle.
pub fn run(args: &[String]) -> Option<ExitCode> {
    if args.first().map(String::as_str) != Some("worker") {
        return None;
    }
    let Some(line) = parse(args) else {
        eprintln!(
            "usage: worker --ipc-fd N [--label L] [--enter-cgroups]\n\
             the session worker is started by service-rs for each session; it is not run by hand"
        );
        return Some(ExitCode::from(2));
    };
    Some(match crate::main(line.ipc_fd, line.enter_cgroups) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker: {e}");
            ExitCode::FAILURE
        }
    })
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
