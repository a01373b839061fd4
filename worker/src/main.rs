//! `service-worker`: the session worker as an executable of its own.
//!
//! The supervisor starts one per session, so it carries only the worker: no server, store, providers, registry
//! or TUI. That keeps its start and its private memory (the relocated data of its binary) small; the figures are
//! in docs/src/benchmarks.md. Its command line is the one `service-rs worker` takes, so either can serve a session:
//! `service-worker worker --ipc-fd N [--label L] [--enter-cgroups]`. Only the supervisor runs it, so the line is
//! read by hand rather than with clap, which would be most of what it links for nothing.

use std::process::ExitCode;

fn main() -> ExitCode {
    service_worker::hardening::pre_main();
    let args: Vec<String> = std::env::args().skip(1).collect();
    service_worker::entry::run(&args).unwrap_or_else(|| {
        eprintln!(
            "usage: service-worker worker --ipc-fd N [--label L] [--enter-cgroups]\n\
             service-worker is started by service-rs for each session; it is not run by hand"
        );
        ExitCode::from(2)
    })
}
