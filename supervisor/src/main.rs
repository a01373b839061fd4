//! `service-rs`: parses the command line and hands it to [`cli::run`].

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    service_supervisor::hardening::pre_main();
    cli::run(cli::Cli::parse())
}
