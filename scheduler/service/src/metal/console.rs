//! The serial console bridge: a WebSocket on one side, `ipmitool sol activate` on the
//! other. Bytes from the socket go to the machine's serial line, bytes from the line come
//! back as binary messages; when either side ends, the SOL session is ended (`~.`), the
//! process reaped, and the audit record closed with its byte counts.

use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use futures::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Child;

use crate::app::AppState;
use metal_store as store;

fn as_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Bridges `socket` and the console process until either ends.
pub async fn bridge(app: AppState, socket: WebSocket, mut child: Child, session: String) {
    let (mut to_client, mut from_client) = socket.split();
    let (Some(mut line_in), Some(mut line_out)) = (child.stdin.take(), child.stdout.take()) else {
        tracing::error!(%session, "console process without pipes");
        return;
    };
    let (mut bytes_in, mut bytes_out) = (0i64, 0i64);
    let mut buffer = vec![0u8; 4096];
    loop {
        tokio::select! {
            message = from_client.next() => {
                let data = match message {
                    Some(Ok(Message::Text(text))) => text.as_bytes().to_vec(),
                    Some(Ok(Message::Binary(bytes))) => bytes.to_vec(),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                };
                bytes_in += as_i64(data.len());
                if line_in.write_all(&data).await.is_err() {
                    break;
                }
            }
            read = line_out.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    bytes_out += as_i64(n);
                    if to_client.send(Message::Binary(buffer[..n].to_vec().into())).await.is_err() {
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
    let _ = to_client.send(Message::Close(None)).await;
    let now = app.clock.now();
    let id = session.clone();
    if let Err(e) = app.change(move |tx| Ok(store::bmcs::close_console(tx, &id, (bytes_in, bytes_out), now)?)).await {
        tracing::warn!(%session, error = %e, "could not record the end of a console session");
    }
    tracing::info!(%session, bytes_in, bytes_out, "console session ended");
}
