//! The serial console bridge: the client on one side (a WebSocket, or a channel of the SSH
//! gateway: `ClientEnd`), `ipmitool sol activate` on the other. Bytes from the client go to
//! the machine's serial line, bytes from the line go back to the client; when either side ends, the SOL session is ended (`~.`), the
//! process reaped, and the audit record closed with its byte counts. The record's heartbeat
//! (`alive_at`) is renewed while the bridge runs, so one writer at a time holds even across
//! a crash. A lessee's session ends when its lease no longer reaches the node (the lease
//! ended, the teardown began), with a last line that says so.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Child;

use crate::app::AppState;
use metal_store as store;

fn as_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How often a bridge re-checks a lessee's lease.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Whose lease a lessee's console session lives under.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The lessee's tenant.
    pub tenant: String,
    /// The node.
    pub node: String,
}

/// Why a lessee's session must end now, if it must: its lease no longer reaches the node.
async fn lease_gone(app: &AppState, scope: &Scope) -> Option<String> {
    let (tenant, node, now) = (scope.tenant.clone(), scope.node.clone(), app.clock.now());
    let action = metal_types::model::lessee::LesseeAction::Console;
    app.store
        .read(move |conn| store::lessee::leased(conn, &tenant, &node, now, action))
        .await
        .err()
        .map(|e| e.to_string())
}

/// The client's end of a console bridge: a WebSocket, or a channel of the SSH gateway.
pub trait ClientEnd: Send {
    /// The next bytes the client typed; `None` once it went away.
    fn recv(&mut self) -> impl Future<Output = Option<Vec<u8>>> + Send;
    /// Sends the machine's bytes; false once the client is gone.
    fn send(&mut self, bytes: Vec<u8>) -> impl Future<Output = bool> + Send;
    /// Closes the client's end.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// Bridges the client and the console process until either ends (or, for a lessee's
/// session, `scope`'s lease no longer reaches the node).
pub async fn bridge(
    app: AppState,
    mut client: impl ClientEnd,
    mut child: Child,
    session: String,
    scope: Option<Scope>,
) {
    let (Some(mut line_in), Some(mut line_out)) = (child.stdin.take(), child.stdout.take()) else {
        tracing::error!(%session, "console process without pipes");
        return;
    };
    let (mut bytes_in, mut bytes_out) = (0i64, 0i64);
    let mut buffer = vec![0u8; 4096];
    let mut check = tokio::time::interval(CHECK_EVERY);
    let mut heartbeat = tokio::time::interval(store::bmcs::CONSOLE_HEARTBEAT);
    loop {
        tokio::select! {
            _ = check.tick(), if scope.is_some() => {
                if let Some(scope) = &scope && let Some(reason) = lease_gone(&app, scope).await {
                    tracing::info!(%session, node = %scope.node, %reason, "closing a lessee's console");
                    client.send(format!("\r\n[metal: console closed: {reason}]\r\n").into_bytes()).await;
                    break;
                }
            }
            _ = heartbeat.tick() => {
                let (id, now) = (session.clone(), app.clock.now());
                if let Err(e) = app.store.write(move |tx| store::bmcs::console_alive(tx, &id, now)).await {
                    tracing::warn!(%session, error = %e, "could not renew a console session's heartbeat");
                }
            }
            typed = client.recv() => {
                let Some(data) = typed else { break };
                bytes_in += as_i64(data.len());
                if line_in.write_all(&data).await.is_err() {
                    break;
                }
            }
            read = line_out.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    bytes_out += as_i64(n);
                    if !client.send(buffer[..n].to_vec()).await {
                        break;
                    }
                }
            },
        }
    }
    // End the SOL session properly so the BMC frees it, then make sure the process is gone.
    let _ = line_in.write_all(b"\r~.").await;
    drop(line_in);
    if tokio::time::timeout(Duration::from_secs(3), child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
    client.close().await;
    let now = app.clock.now();
    let id = session.clone();
    if let Err(e) =
        app.store.change(move |tx| Ok(store::bmcs::close_console(tx, &id, (bytes_in, bytes_out), now)?)).await
    {
        tracing::warn!(%session, error = %e, "could not record the end of a console session");
    }
    tracing::info!(%session, bytes_in, bytes_out, "console session ended");
}
