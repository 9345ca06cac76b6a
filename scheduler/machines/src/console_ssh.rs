//! The lessee's serial console over SSH, in the manner of Equinix Metal's SOS:
//! `ssh RESERVATION@GATEWAY` (or `RESERVATION+NODE@` for a lease of several machines) with a
//! key of the lease's deployed profile lands on the machine's serial console. The key is
//! the only credential: no password, no keyboard-interactive, no other channel than one
//! shell (no exec, no forwarding). A user that is no live lease, or a key that is not the
//! lease's, is refused the same way, in the same time. The session is the console bridge's
//! (`metal::console`): audited with the key's fingerprint, one writer at a time, closed when
//! the lease ends. The host key is made on first start in `DATA_DIR/console/`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use russh::keys::{HashAlg, PrivateKey, PublicKey};
use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Server as _, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId, ChannelMsg, MethodKind, MethodSet};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::app::AppState;
use crate::lessee::Lessee;
use crate::metal::console::ClientEnd;
use metal_types::error::{ApiError, ApiResult};

/// Where the gateway's host key lives, under the data directory.
pub const HOST_KEY: &str = "console/ssh_host_ed25519_key";

/// The gateway's host key: read from `DATA_DIR/console/`, or made there (mode 0600) on first
/// start.
pub fn host_key(data_dir: &Path) -> std::io::Result<PrivateKey> {
    let path = data_dir.join(HOST_KEY);
    if path.exists() {
        let text = std::fs::read_to_string(&path)?;
        return PrivateKey::from_openssh(text).map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())));
    }
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, seed.as_mut());
    let key = PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed));
    let text = key.to_openssh(russh::keys::ssh_key::LineEnding::LF).map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::app::write_secret(&path, text.trim_end())?;
    info!(path = %path.display(), fingerprint = %key.public_key().fingerprint(HashAlg::Sha256), "made the console gateway's host key");
    Ok(key)
}

/// Serves the gateway on `listener` until `stopped` resolves.
pub async fn serve(
    app: AppState,
    listener: TcpListener,
    stopped: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let key = host_key(&app.config.data_dir)?;
    info!(address = %listener.local_addr()?, fingerprint = %key.public_key().fingerprint(HashAlg::Sha256), "console SSH gateway up");
    let config = Arc::new(russh::server::Config {
        methods: MethodSet::from(&[MethodKind::PublicKey][..]),
        auth_rejection_time: Duration::from_secs(1),
        auth_rejection_time_initial: Some(Duration::ZERO),
        inactivity_timeout: Some(Duration::from_secs(3600)),
        keepalive_interval: Some(Duration::from_secs(30)),
        keys: vec![key],
        nodelay: true,
        ..Default::default()
    });
    let mut gateway = Gateway { app };
    tokio::select! {
        served = gateway.run_on_socket(config, &listener) => served,
        () = stopped => Ok(()),
    }
}

#[derive(Clone)]
struct Gateway {
    app: AppState,
}

impl russh::server::Server for Gateway {
    type Handler = Connection;

    fn new_client(&mut self, peer: Option<std::net::SocketAddr>) -> Connection {
        Connection { app: self.app.clone(), peer, lessee: None, channel: None }
    }
}

/// One client's connection: who it authenticated as, and its one session channel.
struct Connection {
    app: AppState,
    peer: Option<std::net::SocketAddr>,
    /// The lessee and the node, once a key of the lease authenticated.
    lessee: Option<(Lessee, String)>,
    channel: Option<Channel<Msg>>,
}

/// The lease and node a gateway user names: `RESERVATION` or `RESERVATION+NODE`.
fn parse_user(user: &str) -> (&str, Option<&str>) {
    match user.split_once('+') {
        Some((reservation, node)) => (reservation, Some(node)),
        None => (user, None),
    }
}

impl Connection {
    /// The lessee and node `user` names, if `key` is one of the lease's keys and the lease
    /// reaches its node now; `None` for anything else, whatever the reason.
    async fn authorise(&self, user: &str, key: &PublicKey) -> Option<(Lessee, String)> {
        let (reservation, node) = parse_user(user);
        let (reservation, node) = (reservation.to_owned(), node.map(str::to_owned));
        let now = self.app.clock.now();
        let found = self
            .app
            .store
            .read(move |conn| -> ApiResult<(String, String, Vec<String>)> {
                let lease = metal_store::capacity::get_reservation(conn, &reservation)?
                    .ok_or_else(|| ApiError::NotFound(format!("reservation {reservation}")))?;
                let node = match (node, lease.nodes.as_slice()) {
                    (Some(node), _) => node,
                    (None, [only]) => only.clone(),
                    (None, _) => return Err(ApiError::invalid("user", "name the node: RESERVATION+NODE")),
                };
                let action = metal_types::model::lessee::LesseeAction::Console;
                let (_, lease) = metal_store::lessee::leased(conn, &lease.tenant_id, &node, now, action)?;
                let keys = metal_store::lessee::console_keys(conn, &node, &lease)?;
                Ok((lease.tenant_id, node, keys))
            })
            .await;
        let (tenant, node, keys) = match found {
            Ok(found) => found,
            Err(e) => {
                info!(peer = ?self.peer, %user, reason = %e, "console gateway refused a user");
                return None;
            }
        };
        let known =
            keys.iter().filter_map(|line| PublicKey::from_openssh(line).ok()).any(|k| k.key_data() == key.key_data());
        if !known {
            info!(peer = ?self.peer, %user, key = %key.fingerprint(HashAlg::Sha256), "console gateway refused a key");
            return None;
        }
        let credential = format!("ssh-key {}", key.fingerprint(HashAlg::Sha256));
        Some((Lessee { credential, tenant }, node))
    }
}

impl russh::server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_publickey_offered(&mut self, user: &str, offer: PublicKeyOffer<'_>) -> Result<Auth, Self::Error> {
        Ok(match self.authorise(user, offer.public_key).await {
            Some(_) => Auth::Accept,
            None => Auth::reject(),
        })
    }

    async fn auth_publickey(&mut self, user: &str, key: VerifiedPublicKey<'_>) -> Result<Auth, Self::Error> {
        self.lessee = self.authorise(user, key.public_key).await;
        Ok(if self.lessee.is_some() { Auth::Accept } else { Auth::reject() })
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _: &mut Session,
    ) -> Result<(), Self::Error> {
        if self.channel.is_none() && self.lessee.is_some() {
            self.channel = Some(channel);
            reply.accept().await;
        }
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _: &str,
        _: u32,
        _: u32,
        _: u32,
        _: u32,
        _: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn shell_request(&mut self, id: ChannelId, session: &mut Session) -> Result<(), Self::Error> {
        let (Some(channel), Some((lessee, node))) = (self.channel.take(), self.lessee.clone()) else {
            return session.channel_failure(id);
        };
        session.channel_success(id)?;
        let app = self.app.clone();
        tokio::spawn(async move {
            match lessee.open_console(&app, &node).await {
                Ok((child, console, scope)) => {
                    info!(%node, credential = %lessee.credential, session = %console, "console session opened over SSH");
                    crate::metal::console::bridge(app, SshEnd(channel), child, console, Some(scope)).await;
                }
                Err(e) => {
                    warn!(%node, credential = %lessee.credential, error = %e, "console over SSH refused");
                    let _ = channel.data_bytes(format!("metal: {e}\r\n").into_bytes()).await;
                    SshEnd(channel).close().await;
                }
            }
        });
        Ok(())
    }

    async fn exec_request(&mut self, id: ChannelId, _: &[u8], session: &mut Session) -> Result<(), Self::Error> {
        session.channel_failure(id)
    }
}

/// The console bridge's client end on an SSH session channel.
struct SshEnd(Channel<Msg>);

impl ClientEnd for SshEnd {
    async fn recv(&mut self) -> Option<Vec<u8>> {
        loop {
            match self.0.wait().await? {
                ChannelMsg::Data { data } => return Some(data.to_vec()),
                ChannelMsg::Eof | ChannelMsg::Close => return None,
                _ => {}
            }
        }
    }

    async fn send(&mut self, bytes: Vec<u8>) -> bool {
        self.0.data_bytes(bytes).await.is_ok()
    }

    async fn close(self) {
        let _ = self.0.exit_status(0).await;
        let _ = self.0.eof().await;
        let _ = self.0.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_names_the_lease_and_optionally_its_node() {
        assert_eq!(parse_user("r-1"), ("r-1", None));
        assert_eq!(parse_user("r-1+n7"), ("r-1", Some("n7")));
    }

    #[test]
    fn the_host_key_is_made_once_private_and_kept() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let made = host_key(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(HOST_KEY)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = host_key(dir.path()).unwrap();
        assert_eq!(made.public_key(), again.public_key());
    }
}
