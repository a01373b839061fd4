//! `service-worker`: the session worker as an executable of its own.
//!
//! The supervisor starts one per session, so it carries only the worker: no server, store, providers, registry
//! or TUI. That keeps its start and its private memory (the relocated data of its binary) small; the figures are
//! in BENCHMARKS.md. Its command line is the one `service-rs worker` takes, so either can serve a session:
//! `service-worker worker --ipc-fd N [--label L]`. Only the supervisor runs it, so the line is read by hand
//! rather than with clap, which would be most of what it links for nothing.

use std::process::ExitCode;

fn main() -> ExitCode {
    service_worker::hardening::pre_main();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(ipc_fd) = ipc_fd(&args) else {
        eprintln!(
            "usage: service-worker worker --ipc-fd N [--label L]\n\
             service-worker is started by service-rs for each session; it is not run by hand"
        );
        return ExitCode::from(2);
    };
    match service_worker::main(ipc_fd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("service-worker: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The descriptor of `worker --ipc-fd N [--label L]`; None for any other line.
fn ipc_fd(args: &[String]) -> Option<i32> {
    match args {
        [worker, flag, fd, rest @ ..] if worker == "worker" && flag == "--ipc-fd" => {
            let label_ok =
                matches!(rest, [] | [_, _] if rest.first().is_none_or(|f| f == "--label"));
            fd.parse().ok().filter(|_| label_ok)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::ipc_fd;

    fn line(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_supervisors_command_line_is_accepted() {
        assert_eq!(ipc_fd(&line("worker --ipc-fd 12 --label abc")), Some(12));
        assert_eq!(ipc_fd(&line("worker --ipc-fd 3")), Some(3));
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
        ] {
            assert_eq!(ipc_fd(&line(bad)), None, "{bad}");
        }
    }
}
