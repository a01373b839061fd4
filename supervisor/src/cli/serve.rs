//! `service-rs serve`.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use service_supervisor::server;
use service_supervisor::ServiceHome;

pub fn serve(
    home: ServiceHome,
    bind: &str,
    token: Option<String>,
    dangerous: bool,
) -> anyhow::Result<ExitCode> {
    let addr: SocketAddr = bind.parse().with_context(|| {
        format!(
            "--bind takes host:port with a numeric host, e.g. {}; got \"{bind}\"",
            server::DEFAULT_BIND
        )
    })?;
    if dangerous {
        eprintln!("warning: --dangerous-sandbox-mode: every session worker runs on the host without confinement");
    }
    let rt = super::runtime(home, dangerous, true)?;
    let token = token.filter(|t| !t.is_empty());
    super::tokio()?.block_on(async move {
        server::serve(
            rt,
            addr,
            token,
            |bound| println!("service-rs listening on http://{bound}"),
            stop_signal(),
        )
        .await
    })?;
    eprintln!("service-rs stopped");
    Ok(ExitCode::SUCCESS)
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
