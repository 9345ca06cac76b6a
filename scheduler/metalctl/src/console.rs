//! `metalctl lease console`: the serial console of a leased machine in this terminal, over
//! the scheduler's console WebSocket (`GET /v1/nodes/{id}/console`, the same session the web
//! console opens, with the same token; one writer at a time, audited). On a terminal, the
//! keys go to the machine as typed (raw mode) and `Ctrl-]` leaves; from a pipe, its input is
//! sent and the session ends once the input is over and the machine has been quiet for the
//! linger time.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tungstenite::client::IntoClientRequest as _;
use tungstenite::{Message, WebSocket};

use crate::client::{Client, ClientError};

/// The key that leaves the console on a terminal (`Ctrl-]`, as telnet's).
pub const ESCAPE: u8 = 0x1d;

/// How long a read waits before the input is looked at again.
const POLL: Duration = Duration::from_millis(50);

/// A TCP or TLS stream under the WebSocket.
trait Stream: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> Stream for T {}

/// What the input thread hands over.
enum Input {
    Bytes(Vec<u8>),
    /// The input is over (end of a pipe), or the escape key was typed.
    End {
        escaped: bool,
    },
}

/// Opens node `node`'s console and copies it both ways until the server closes it, the
/// escape key, or the end of piped input plus `linger` of quiet. Returns why it ended.
pub fn run(client: &Client, node: &str, linger: Duration) -> Result<String, ClientError> {
    let mut socket = connect(client, node)?;
    let tty = Terminal::raw_if_tty();
    let (sender, input) = mpsc::channel();
    let on_terminal = tty.is_some();
    std::thread::spawn(move || read_input(&sender, on_terminal));
    let mut stdout = std::io::stdout();
    let mut input_over: Option<Instant> = None;
    let mut last_output = Instant::now();
    let ended = loop {
        match input.try_recv() {
            Ok(Input::Bytes(bytes)) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                socket.send(Message::Text(text.into())).map_err(|e| transport("sending to the console", &e))?;
            }
            Ok(Input::End { escaped: true }) => break "left with Ctrl-]".to_owned(),
            Ok(Input::End { escaped: false }) => input_over = Some(Instant::now()),
            Err(_) => {}
        }
        if input_over.is_some() && last_output.elapsed() >= linger {
            break "the input is over".to_owned();
        }
        match socket.read() {
            Ok(Message::Text(text)) => {
                write_out(&mut stdout, text.as_bytes());
                last_output = Instant::now();
            }
            Ok(Message::Binary(bytes)) => {
                write_out(&mut stdout, &bytes);
                last_output = Instant::now();
            }
            Ok(Message::Close(frame)) => {
                break frame.map_or_else(|| "the scheduler closed the console".to_owned(), |f| f.reason.to_string());
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                break "the scheduler closed the console".to_owned();
            }
            Err(e) => return Err(transport("reading the console", &e)),
        }
    };
    let _ = socket.close(None);
    drop(tty);
    Ok(ended)
}

fn write_out(stdout: &mut std::io::Stdout, bytes: &[u8]) {
    let _ = stdout.write_all(bytes);
    let _ = stdout.flush();
}

fn transport(what: &str, e: &tungstenite::Error) -> ClientError {
    ClientError::Transport(format!("{what}: {e}"))
}

/// The WebSocket to `node`'s console, its reads bounded by [`POLL`]. A refusal (another
/// writer, a lease that is over, no such node) is the API's error.
fn connect(client: &Client, node: &str) -> Result<WebSocket<Box<dyn Stream>>, ClientError> {
    let url = reqwest::Url::parse(&format!("{}/v1/nodes/{node}/console", client.url()))
        .map_err(|e| ClientError::Config(format!("console URL: {e}")))?;
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']).to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let tcp = TcpStream::connect((host.as_str(), port))
        .map_err(|e| ClientError::Transport(format!("cannot reach {}: {e}", client.url())))?;
    tcp.set_read_timeout(Some(POLL)).map_err(|e| ClientError::Transport(e.to_string()))?;
    let (stream, scheme): (Box<dyn Stream>, &str) = match client.tls() {
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| ClientError::Config(format!("server name {host}: {e}")))?;
            let connection = rustls::ClientConnection::new(config, name)
                .map_err(|e| ClientError::Transport(format!("TLS to {host}: {e}")))?;
            (Box::new(rustls::StreamOwned::new(connection, tcp)), "wss")
        }
        None => (Box::new(tcp), "ws"),
    };
    let mut ws_url = url.clone();
    ws_url.set_scheme(scheme).map_err(|()| ClientError::Config("console URL scheme".into()))?;
    let mut request =
        ws_url.as_str().into_client_request().map_err(|e| ClientError::Config(format!("console request: {e}")))?;
    let bearer = format!("Bearer {}", client.token())
        .parse()
        .map_err(|_| ClientError::Config("the token is not a valid header value".into()))?;
    request.headers_mut().insert("authorization", bearer);
    let mut handshake = tungstenite::client(request, stream);
    loop {
        match handshake {
            Ok((socket, _)) => return Ok(socket),
            Err(tungstenite::HandshakeError::Interrupted(mid)) => handshake = mid.handshake(),
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
                return Err(refusal(&response));
            }
            Err(tungstenite::HandshakeError::Failure(e)) => return Err(transport("opening the console", &e)),
        }
    }
}

/// The API's error in a refused upgrade.
fn refusal(response: &tungstenite::http::Response<Option<Vec<u8>>>) -> ClientError {
    let body: serde_json::Value =
        response.body().as_deref().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or(serde_json::Value::Null);
    let error = &body["error"];
    ClientError::Api {
        status: response.status().as_u16(),
        code: error["code"].as_str().unwrap_or("HTTP").to_owned(),
        message: error["message"].as_str().map_or_else(|| response.status().to_string(), str::to_owned),
        field: None,
    }
}

/// Reads stdin in a thread of its own: the bytes as they come, then its end (on a
/// terminal, the escape key ends it).
fn read_input(sender: &mpsc::Sender<Input>, tty: bool) {
    let mut stdin = std::io::stdin();
    let mut buffer = [0u8; 1024];
    loop {
        match stdin.read(&mut buffer) {
            Ok(0) | Err(_) => {
                let _ = sender.send(Input::End { escaped: false });
                return;
            }
            Ok(n) => {
                let chunk = &buffer[..n];
                if tty && let Some(at) = chunk.iter().position(|b| *b == ESCAPE) {
                    let _ = sender.send(Input::Bytes(chunk[..at].to_vec()));
                    let _ = sender.send(Input::End { escaped: true });
                    return;
                }
                if sender.send(Input::Bytes(chunk.to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}

/// The terminal in raw mode while the console is open, restored when dropped.
struct Terminal(libc::termios);

impl Terminal {
    /// Raw mode on stdin when it is a terminal; `None` otherwise.
    fn raw_if_tty() -> Option<Terminal> {
        // SAFETY: isatty only inspects the file descriptor.
        if unsafe { libc::isatty(libc::STDIN_FILENO) } != 1 {
            return None;
        }
        // SAFETY: an all-zero termios is a valid value for tcgetattr to overwrite.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `saved` is a valid termios to write into; stdin is a terminal.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &raw mut saved) } != 0 {
            return None;
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw only edits the struct it is given.
        unsafe { libc::cfmakeraw(&raw mut raw) };
        // SAFETY: `raw` is a valid termios derived from the terminal's own.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw const raw) } != 0 {
            return None;
        }
        Some(Terminal(saved))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // SAFETY: restores the attributes tcgetattr read from this terminal.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw const self.0) };
    }
}
