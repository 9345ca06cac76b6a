//! The HTTP server both listeners use: hyper with its automatic HTTP/1 and HTTP/2 builder
//! (and upgrades, for the console's WebSocket) rather than `axum::serve`, for one setting:
//! HTTP/1 response header names go out in Title-Case, because GRUB's HTTP client (the UEFI
//! virtual-media boot fetches its script, kernel and initrd with it) only recognises
//! `Content-Length` spelled that way. Each request carries the client's address as
//! `ConnectInfo<SocketAddr>`; shutdown stops accepting and lets open requests finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::{info, warn};

/// Open connections, served with the shared settings and watched for shutdown.
#[derive(Debug)]
pub struct Connections {
    builder: auto::Builder<TokioExecutor>,
    graceful: GracefulShutdown,
}

impl Default for Connections {
    fn default() -> Self {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder.http1().title_case_headers(true);
        Self { builder, graceful: GracefulShutdown::new() }
    }
}

impl Connections {
    /// Serves `router` on `io` (a TCP or TLS stream) from `client` in a task of its own.
    pub fn serve<I>(&self, io: I, client: SocketAddr, router: Router)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = TowerToHyperService::new(router.layer(axum::Extension(ConnectInfo(client))));
        let connection = self.builder.serve_connection_with_upgrades(TokioIo::new(io), service).into_owned();
        let connection = self.graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }

    /// Waits for the open connections to finish their requests (at most `limit`).
    pub async fn shutdown(self, limit: Duration) {
        if tokio::time::timeout(limit, self.graceful.shutdown()).await.is_err() {
            warn!("connections still open after {limit:?}; closing them");
        }
    }
}

/// Accepts on `listener` until it fails for good or `shutdown` resolves, handing each TCP
/// connection to `accept`.
pub async fn accept_loop(
    listener: &tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
    mut accept: impl FnMut(tokio::net::TcpStream, SocketAddr),
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, client)) => accept(tcp, client),
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            () = &mut shutdown => return,
        }
    }
}

/// Serves `router` over plain HTTP on `listener` until `shutdown` resolves, then lets open
/// requests finish.
pub async fn serve(listener: tokio::net::TcpListener, router: Router, shutdown: impl std::future::Future<Output = ()>) {
    let connections = Connections::default();
    accept_loop(&listener, shutdown, |tcp, client| connections.serve(tcp, client, router.clone())).await;
    connections.shutdown(Duration::from_secs(30)).await;
}

/// Serves HTTPS on `listener` until `shutdown` resolves, then lets open requests finish.
/// Each connection is served by the router `router` makes from its TLS session (the boot
/// listener hands its handlers the client certificate); a failed handshake is logged.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    shutdown: impl std::future::Future<Output = ()>,
    router: impl Fn(&rustls::ServerConnection) -> Router + Send + Sync + 'static,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let (connections, router) = (Arc::new(Connections::default()), Arc::new(router));
    accept_loop(&listener, shutdown, |tcp, client| {
        let (acceptor, router, connections) = (acceptor.clone(), router.clone(), connections.clone());
        tokio::spawn(async move {
            match acceptor.accept(tcp).await {
                Ok(tls) => {
                    let router = router(tls.get_ref().1);
                    connections.serve(tls, client, router);
                }
                Err(e) => info!(%client, error = %e, "TLS handshake failed"),
            }
        });
    })
    .await;
    // Connections still handshaking hold a reference; those are dropped with the runtime.
    if let Some(connections) = Arc::into_inner(connections) {
        connections.shutdown(Duration::from_secs(30)).await;
    }
}
