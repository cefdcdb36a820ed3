//! The loopback callback server of the browser sign-ins (MCP servers, Sign in with ChatGPT,
//! OpenRouter): binds a local port, serves the given paths, and hands the first request that
//! settles the sign-in to the waiting flow; each flow judges the request's query itself. Also
//! the query-string helpers those flows share.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::oauth::form_decode;

/// What a flow says to one callback request.
pub enum Verdict<T> {
    /// Answer with this status and text; the sign-in goes on waiting.
    Reply(u16, String),
    /// Answer, and the sign-in ends with this result.
    Settle(u16, String, T),
}

/// A listening callback server; it stops when dropped.
pub struct Callback<T> {
    pub port: u16,
    pub results: crossbeam_channel::Receiver<T>,
    stop: Arc<AtomicBool>,
}

impl<T: Send + 'static> Callback<T> {
    /// Listens on `bind`:`port` (0: any free port) for GETs of `paths`; `judge` gets each such
    /// request's target (path and query).
    pub fn listen(
        bind: &str,
        port: u16,
        paths: Vec<String>,
        judge: impl Fn(&str) -> Verdict<T> + Send + 'static,
    ) -> Result<Callback<T>, String> {
        let listener = std::net::TcpListener::bind((bind, port)).map_err(|e| {
            format!("cannot listen on {bind} port {port} for the OAuth callback: {e}")
        })?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let (tx, results) = crossbeam_channel::bounded(1);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("oauth-callback".into())
            .spawn(move || {
                while !stopped.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            if let Some(result) = serve(stream, &paths, &judge) {
                                let _ = tx.send(result);
                                return;
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Callback {
            port,
            results,
            stop,
        })
    }
}

impl<T> Drop for Callback<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One request; Some when it settles the sign-in.
fn serve<T>(
    mut stream: std::net::TcpStream,
    paths: &[String],
    judge: &impl Fn(&str) -> Verdict<T>,
) -> Option<T> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let mut reader = std::io::BufReader::new(stream.try_clone().ok()?);
    reader.read_line(&mut line).ok()?;
    let mut words = line.split(' ');
    let method = words.next().unwrap_or("");
    let target = words.next().unwrap_or("/").to_string();
    let mut reply = |status: u16, text: &str| {
        let _ = write!(
            stream,
            "HTTP/1.1 {status} OK\r\nContent-Type: text/plain; charset=utf-8\r\nCache-Control: no-store\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
    };
    if method != "GET" || !paths.iter().any(|p| p == without_query(&target)) {
        reply(404, "Not found");
        return None;
    }
    match judge(&target) {
        Verdict::Reply(status, text) => {
            reply(status, &text);
            None
        }
        Verdict::Settle(status, text, result) => {
            reply(status, &text);
            Some(result)
        }
    }
}

/// What ended the wait for a browser sign-in.
pub enum Arrived<T> {
    Callback(T),
    /// A line the user pasted (the code or the redirect URL).
    Pasted(String),
}

/// Waits for the callback or a pasted line, whichever comes first, for at most `timeout`
/// (`None`). When the paste channel closes (no terminal), only the callback is waited for.
pub fn wait<T>(
    callback: &Callback<T>,
    pasted: &crossbeam_channel::Receiver<String>,
    timeout: Duration,
) -> Option<Arrived<T>> {
    let deadline = std::time::Instant::now() + timeout;
    let mut paste_open = true;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        if !paste_open {
            return callback
                .results
                .recv_timeout(left)
                .ok()
                .map(Arrived::Callback);
        }
        crossbeam_channel::select! {
            recv(callback.results) -> r => return r.ok().map(Arrived::Callback),
            recv(pasted) -> line => match line {
                Ok(line) if line.trim().is_empty() => {}
                Ok(line) => return Some(Arrived::Pasted(line)),
                Err(_) => paste_open = false,
            },
            default(left) => return None,
        }
    }
}

/// A URL or request target without its query and fragment.
pub fn without_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

/// The decoded query parameters of a URL or request target.
pub fn query_params(url: &str) -> Vec<(String, String)> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = query.split('#').next().unwrap_or("");
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (form_decode(k), form_decode(v))
        })
        .collect()
}

/// A parameter's first value, when not empty.
pub fn param(params: &[(String, String)], name: &str) -> Option<String> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn get(port: u16, target: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(stream, "GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        text
    }

    #[test]
    fn the_first_settling_request_ends_the_wait() {
        let callback = Callback::listen("127.0.0.1", 0, vec!["/cb".into()], |target| {
            let params = query_params(target);
            match param(&params, "code") {
                Some(code) => Verdict::Settle(200, "done".into(), code),
                None => Verdict::Reply(400, "Missing authorization code".into()),
            }
        })
        .unwrap();
        assert!(get(callback.port, "/other?code=x").starts_with("HTTP/1.1 404"));
        assert!(get(callback.port, "/cb").starts_with("HTTP/1.1 400"));
        assert!(get(callback.port, "/cb?code=a%2Bb+c").starts_with("HTTP/1.1 200"));
        assert_eq!(
            callback.results.recv_timeout(Duration::from_secs(10)),
            Ok("a+b c".to_string())
        );
    }
}
