//! The network between a simulated machine and the boot service when the machine has the
//! `report-lost` fault: a TCP relay on loopback that carries the ramdisk's first connection
//! (its join with the one-time token) and cuts every later one as it opens (the mutual-TLS
//! connection its signed reports go over), so the reports never arrive. TLS runs end to end
//! through it: the relay sees bytes, never a request.

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A relay to one address, for one boot.
#[derive(Debug)]
pub struct LossyRelay {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
}

/// Copies `from` to `to` until either ends.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buffer) {
        if n == 0 || to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl LossyRelay {
    /// Relays to `target` from a free loopback port.
    pub fn start(target: SocketAddr) -> std::io::Result<LossyRelay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::spawn(move || {
            let mut carried = false;
            for client in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                if carried {
                    // Lost: the connection is cut before a byte of it goes anywhere.
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                // A connection that could not be relayed (the boot service away) is not the join.
                let Ok(server) = TcpStream::connect(target) else { continue };
                let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else { continue };
                carried = true;
                std::thread::spawn(move || pipe(client_in, server));
                std::thread::spawn(move || pipe(server_in, client));
            }
        });
        Ok(LossyRelay { address, stop })
    }

    /// Where the machine connects instead of the target.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the stop.
        let _ = TcpStream::connect(self.address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_connection_is_carried_both_ways_and_later_ones_are_cut() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = echo.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in echo.incoming().flatten() {
                let mut reader = stream.try_clone().unwrap();
                let mut writer = stream;
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 64];
                    while let Ok(n) = reader.read(&mut buffer) {
                        if n == 0 || writer.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let relay = LossyRelay::start(target).unwrap();
        let mut first = TcpStream::connect(relay.address()).unwrap();
        first.write_all(b"join").unwrap();
        let mut answer = [0u8; 4];
        first.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"join");

        let mut second = TcpStream::connect(relay.address()).unwrap();
        let _ = second.write_all(b"report");
        let mut rest = Vec::new();
        let read = second.read_to_end(&mut rest);
        assert!(read.is_err() || rest.is_empty(), "nothing comes back: {read:?} {rest:?}");
    }
}
