//! HTTP for the tests: a one-shot HTTP/1.1 client ([`http_get`]) and a counting upstream
//! ([`Upstream`]).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::IO_TIMEOUT;

/// An HTTP answer: its status, its headers (names in lower case) and its body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers in order, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body (decoded from chunks), as text (lossy).
    pub body: String,
}

impl HttpResponse {
    /// The first value of the header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A GET of `path` on `127.0.0.1:port` over HTTP/1.1, one connection per request
/// (`connection: close`), with `headers`.
///
/// # Errors
/// When the connection or the exchange fails, or the answer is not HTTP.
pub fn http_get(port: u16, path: &str, headers: &[(&str, &str)]) -> Result<HttpResponse, String> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect to {port}: {e}"))?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut request =
        format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n");
    for (name, value) in headers {
        let _ = write!(request, "{name}: {value}\r\n");
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("send the request: {e}"))?;
    let mut reader = BufReader::new(stream);
    let (start, headers) = read_head(&mut reader)?.ok_or("the connection closed at once")?;
    let status = start
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {start:?}"))?;
    let body = read_body(&mut reader, &headers, true)?;
    Ok(HttpResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A message's headers in order, names in lower case.
type Headers = Vec<(String, String)>;

/// The start line and the headers (names in lower case) of a message; `None` at the end of
/// the stream before any.
fn read_head(reader: &mut impl BufRead) -> Result<Option<(String, Headers)>, String> {
    let mut start = String::new();
    if reader
        .read_line(&mut start)
        .map_err(|e| format!("read: {e}"))?
        == 0
    {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader
            .read_line(&mut line)
            .map_err(|e| format!("read: {e}"))?
            == 0
        {
            return Err("the connection closed in the headers".to_owned());
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("not a header: {line:?}"))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    Ok(Some((start.trim_end().to_owned(), headers)))
}

/// A message's body: by `content-length`, chunked, or (`to_eof`, an answer on a connection
/// that closes) up to the end of the stream; none for a request with neither header.
pub(super) fn read_body(
    reader: &mut impl BufRead,
    headers: &[(String, String)],
    to_eof: bool,
) -> Result<Vec<u8>, String> {
    let value = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let mut body = Vec::new();
    if value("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader
                .read_line(&mut size)
                .map_err(|e| format!("read a chunk's size: {e}"))?;
            let size = size.trim();
            let size = size.split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16)
                .map_err(|e| format!("a chunk's size {size:?}: {e}"))?;
            let mut chunk = vec![0; size + 2];
            reader
                .read_exact(&mut chunk)
                .map_err(|e| format!("read a chunk: {e}"))?;
            if size == 0 {
                // The trailers, if any, up to their empty line.
                if chunk != b"\r\n" {
                    let mut line = String::new();
                    while reader.read_line(&mut line).map_err(|e| e.to_string())? > 2 {
                        line.clear();
                    }
                }
                return Ok(body);
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    if let Some(length) = value("content-length") {
        let length: usize = length
            .parse()
            .map_err(|e| format!("content-length {length:?}: {e}"))?;
        body.resize(length, 0);
        reader
            .read_exact(&mut body)
            .map_err(|e| format!("read the body: {e}"))?;
    } else if to_eof {
        reader
            .read_to_end(&mut body)
            .map_err(|e| format!("read the body: {e}"))?;
    }
    Ok(body)
}

/// A minimal HTTP/1.1 server on a free loopback port, for Envoy to route to: it answers every
/// request `200 OK` with the body `ok`, counts the requests it served, and adds to its
/// answers the headers set with [`set_response_header`](Upstream::set_response_header). A
/// request may also ask for a header of its own: `x-upstream-respond-<name>: <value>` is
/// answered with `<name>: <value>` (`x-upstream-respond-x-tokens-used: 7` with
/// `x-tokens-used: 7`). Stopped when dropped.
#[derive(Debug)]
pub struct Upstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    served: AtomicU64,
    headers: Mutex<Vec<(String, String)>>,
    stop: AtomicBool,
    /// A handle on each open connection, shut down on drop to end its thread.
    connections: Mutex<Vec<TcpStream>>,
}

/// The request header prefix by which a request asks the upstream for a response header.
pub const RESPOND_PREFIX: &str = "x-upstream-respond-";

impl Upstream {
    /// Starts it on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When it cannot bind.
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared::default());
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("upstream-accept".to_owned())
                .spawn(move || accept_loop(&listener, &shared))
                .expect("spawn the upstream's thread")
        };
        Upstream {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// Its address (127.0.0.1 and its port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The requests it has answered so far (counted before the answer is sent: a client that
    /// has its answer sees it counted).
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::SeqCst)
    }

    /// Every later answer carries the header `name: value` (in place of a value set before).
    pub fn set_response_header(&self, name: &str, value: &str) {
        let mut headers = self.shared.headers.lock().expect("the upstream's headers");
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push((name.to_owned(), value.to_owned()));
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for connection in self
            .shared
            .connections
            .lock()
            .expect("connections")
            .drain(..)
        {
            let _ = connection.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if let Ok(handle) = stream.try_clone() {
            shared.connections.lock().expect("connections").push(handle);
        }
        let shared = Arc::clone(shared);
        let _ = std::thread::Builder::new()
            .name("upstream-connection".to_owned())
            .spawn(move || {
                let _ = serve(stream, &shared);
            });
    }
}

/// Answers the requests of one connection until it closes (or asks to).
fn serve(stream: TcpStream, shared: &Shared) -> Result<(), String> {
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    while let Some((_, headers)) = read_head(&mut reader)? {
        read_body(&mut reader, &headers, false)?;
        let close = headers
            .iter()
            .any(|(n, v)| n == "connection" && v.eq_ignore_ascii_case("close"));
        let body = "ok";
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (name, value) in shared.headers.lock().expect("headers").iter() {
            let _ = write!(answer, "{name}: {value}\r\n");
        }
        for (name, value) in &headers {
            if let Some(asked) = name.strip_prefix(RESPOND_PREFIX) {
                let _ = write!(answer, "{asked}: {value}\r\n");
            }
        }
        if close {
            answer.push_str("connection: close\r\n");
        }
        answer.push_str("\r\n");
        answer.push_str(body);
        shared.served.fetch_add(1, Ordering::SeqCst);
        writer
            .write_all(answer.as_bytes())
            .map_err(|e| e.to_string())?;
        if close {
            break;
        }
    }
    Ok(())
}
