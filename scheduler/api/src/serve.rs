//! Serving: the API's router on its listener (HTTPS when configured), the boot service's TLS
//! listener, the plain-HTTP firmware routes and the console SSH gateway, with the periodic passes and the workflow
//! engine running beside them, until SIGINT or SIGTERM.

use std::sync::Arc;

use tracing::info;

use crate::AppState;

/// Serves the API on `listener` (and the boot service's TLS listener on `boot`) until SIGINT
/// or SIGTERM, then finishes in-flight requests.
pub async fn serve(app: AppState, listeners: Listeners) -> std::io::Result<()> {
    crate::passes::spawn(app.clone());
    metal_machines::metal::workflow::spawn(app.machines.clone(), app.config.workflow_interval);
    let stop = Arc::new(tokio::sync::watch::channel(false).0);
    let stopped = |stop: &Arc<tokio::sync::watch::Sender<bool>>| {
        let mut seen = stop.subscribe();
        async move {
            let _ = seen.wait_for(|stopped| *stopped).await;
        }
    };
    let mut tasks = Vec::new();
    if let Some(boot) = listeners.boot {
        let (app, stopped) = (app.clone(), stopped(&stop));
        tasks.push(tokio::spawn(async move { crate::boot_service::serve(app.machines, boot, stopped).await }));
    }
    if let Some(firmware) = listeners.firmware {
        info!(address = %firmware.local_addr()?, "firmware routes (plain HTTP) up");
        let (router, stopped) = (crate::firmware_router(app.clone()), stopped(&stop));
        tasks.push(tokio::spawn(async move {
            crate::http_server::serve(firmware, router, stopped).await;
            Ok(())
        }));
    }
    if let Some(gateway) = listeners.console_ssh {
        let (app, stopped) = (app.clone(), stopped(&stop));
        tasks.push(tokio::spawn(
            async move { metal_machines::console_ssh::serve(app.machines, gateway, stopped).await },
        ));
    }
    let shutdown = shutdown_signal();
    let tls = app.api_tls.clone();
    let router = crate::router(app);
    let address = listeners.api.local_addr()?;
    match tls {
        Some(config) => {
            info!(%address, scheme = "https", "metal-scheduler listening");
            crate::http_server::serve_tls(listeners.api, config, shutdown, move |_| router.clone()).await;
        }
        None => {
            info!(%address, scheme = "http", "metal-scheduler listening");
            crate::http_server::serve(listeners.api, router, shutdown).await;
        }
    }
    stop.send_replace(true);
    for task in tasks {
        task.await.map_err(std::io::Error::other)??;
    }
    info!("shut down cleanly");
    Ok(())
}

/// The sockets [`serve`] serves, bound before the service starts.
#[derive(Debug)]
pub struct Listeners {
    /// The API (HTTPS when `tls-*` is set).
    pub api: tokio::net::TcpListener,
    /// The boot service's TLS listener (`boot-listen`).
    pub boot: Option<tokio::net::TcpListener>,
    /// The firmware routes in plain HTTP (`boot-http-listen`).
    pub firmware: Option<tokio::net::TcpListener>,
    /// The lessee's console SSH gateway (`console-ssh-listen`).
    pub console_ssh: Option<tokio::net::TcpListener>,
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, not when
/// it is first polled: a signal that arrives once the service says it listens is never the
/// default action (death without a clean shutdown).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        let wait = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
            match s {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = wait(term) => {},
            () = wait(interrupt) => {},
        }
        info!("shutdown requested");
    }
}
