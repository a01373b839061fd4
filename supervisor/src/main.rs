//! `service-rs`: parses the command line and hands it to [`cli::run`].

mod cli;

fn main() -> std::process::ExitCode {
    service_supervisor::hardening::pre_main();
    cli::run(cli::Cli::parse_args())
}
