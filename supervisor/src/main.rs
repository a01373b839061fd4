//! `service-rs`: parses the command line and hands it to [`cli::run`].

mod cli;

fn main() -> std::process::ExitCode {
    service_supervisor::hardening::pre_main();
    // The session worker's own line (`service-rs worker --ipc-fd N`), which only the supervisor writes.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(code) = service_worker::entry::run(&args) {
        return code;
    }
    cli::complete::answer_if_asked();
    // Still one thread: the environment may change.
    if let Err(e) = cli::secret_files::load() {
        eprintln!("error: {e}");
        return std::process::ExitCode::FAILURE;
    }
    cli::run(cli::Cli::parse_args())
}
