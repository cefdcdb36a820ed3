//! Corporate networks through the real binary: a provider behind TLS whose certificate is signed
//! by a CA made here with the `openssl` CLI (trusted only through `SSL_CERT_FILE`,
//! `NODE_EXTRA_CA_CERTS` or `SSL_CERT_DIR`), and provider traffic through a real CONNECT proxy
//! (`tinyproxy`, installed by `tests/install_proxy.sh`) whose log shows what went through it.
//!
//! A missing `openssl` or `tinyproxy` fails the test under `CI=true` and skips it (with a printed
//! reason) elsewhere.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_provider::fixture;
use crate::support::{Pi, Setup, TempDir, is_reference, openssl, require, which};

const MODELS: &str = r#"{
  "providers": {
    "corp-openai": {
      "baseUrl": "__BASE_URL__/v1",
      "apiKey": "test-key",
      "api": "openai-completions",
      "models": [{"id": "corp-gpt", "name": "Corp GPT", "reasoning": false, "input": ["text"],
                  "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
                  "contextWindow": 100000, "maxTokens": 4096}]
    }
  }
}"#;

/// A CA and a server certificate for 127.0.0.1/localhost signed by it: (ca.pem, server.pem,
/// server.key).
fn make_ca(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=pi-rs test corporate CA",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

/// An HTTPS provider on 127.0.0.1 answering every request with one SSE body; it records the
/// request heads it got.
struct TlsProvider {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl TlsProvider {
    fn start(cert: &Path, key: &Path, sse: String) -> TlsProvider {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&heads);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let config = Arc::clone(&config);
                let recorded = Arc::clone(&recorded);
                let sse = sse.clone();
                std::thread::spawn(move || serve_tls(stream, config, &recorded, &sse));
            }
        });
        TlsProvider { port, heads }
    }

    fn base_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> usize {
        self.heads.lock().unwrap().len()
    }
}

fn serve_tls(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    recorded: &Mutex<Vec<String>>,
    sse: &str,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(connection) = rustls::ServerConnection::new(config) else {
        return;
    };
    // A client that rejects the certificate ends the handshake here; that is the point.
    let mut tls = rustls::StreamOwned::new(connection, stream);
    let mut reader = BufReader::new(&mut tls);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => head.push_str(&line),
        }
    }
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    recorded.lock().unwrap().push(head);
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{sse}",
        sse.len()
    );
    let _ = tls.write_all(response.as_bytes());
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

fn setup(base_url: &str) -> Setup {
    Setup::at(base_url, "corp-openai", "corp-gpt")
        .models_json(MODELS)
        .settings(json!({"retry": {"enabled": false}}))
}

/// One prompt; the assistant's final message.
fn turn(setup: &Setup) -> Value {
    let mut pi = Pi::spawn(setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "hello"}));
    let records = pi.records_until_event("agent_end");
    records
        .iter()
        .rev()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .map(|r| r["message"].clone())
        .expect("an assistant message")
}

fn text_of(message: &Value) -> String {
    message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

#[test]
fn a_provider_behind_a_private_ca_is_trusted_only_with_the_extra_ca() {
    if is_reference() || !require("openssl", which("openssl").is_some()) {
        return;
    }
    let dir = TempDir::new("private-ca");
    let (ca, cert, key) = make_ca(dir.path());
    let sse = fixture("openai/text.sse");
    let provider = TlsProvider::start(&cert, &key, sse);

    // Without the CA the handshake fails: a connection error, nothing reaches the provider.
    let refused = turn(&setup(&provider.base_url()));
    assert_eq!(refused["stopReason"], "error", "{refused}");
    assert_eq!(refused["errorMessage"], "Connection error.");
    assert_eq!(provider.requests(), 0);

    let expected = text_of(&turn(
        &setup(&provider.base_url()).env("SSL_CERT_FILE", ca.to_str().unwrap()),
    ));
    assert!(!expected.is_empty());
    assert_eq!(provider.requests(), 1);

    let via_node =
        turn(&setup(&provider.base_url()).env("NODE_EXTRA_CA_CERTS", ca.to_str().unwrap()));
    assert_eq!(via_node["stopReason"], "stop", "{via_node}");
    assert_eq!(text_of(&via_node), expected);

    let certs_dir = dir.path().join("certs");
    std::fs::create_dir(&certs_dir).unwrap();
    std::fs::copy(&ca, certs_dir.join("corp.pem")).unwrap();
    let via_dir =
        turn(&setup(&provider.base_url()).env("SSL_CERT_DIR", certs_dir.to_str().unwrap()));
    assert_eq!(via_dir["stopReason"], "stop", "{via_dir}");
    assert_eq!(provider.requests(), 3);
}

/// A tinyproxy of this test's own, logging every request it forwards.
struct Tinyproxy {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Tinyproxy {
    fn start(binary: &Path, dir: &Path) -> Tinyproxy {
        Tinyproxy::start_with(binary, dir, "")
    }

    /// `extra`: more configuration lines (e.g. `BasicAuth user password`).
    fn start_with(binary: &Path, dir: &Path, extra: &str) -> Tinyproxy {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("tinyproxy.log");
        let conf = dir.join("tinyproxy.conf");
        std::fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\nAllow 127.0.0.1\nLogLevel Info\nLogFile \"{}\"\nPidFile \"{}\"\n{extra}",
                log.display(),
                dir.join("tinyproxy.pid").display()
            ),
        )
        .unwrap();
        let child = Command::new(binary)
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tinyproxy");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "tinyproxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Tinyproxy { child, port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The CONNECT requests in the log, e.g. `CONNECT 127.0.0.1:4431 HTTP/1.1`.
    fn connects(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter_map(|l| l.rfind("CONNECT ").map(|at| l[at..].trim().to_string()))
            .filter(|l| l.contains("HTTP/1."))
            .collect()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn provider_requests_go_through_the_proxy_unless_no_proxy_says_otherwise() {
    if is_reference() || !require("openssl", which("openssl").is_some()) {
        return;
    }
    let Some(binary) = which("tinyproxy") else {
        require("tinyproxy", false);
        return;
    };
    let dir = TempDir::new("proxy");
    let proxy = Tinyproxy::start(&binary, dir.path());
    let (ca, cert, key) = make_ca(dir.path());
    let provider = TlsProvider::start(&cert, &key, fixture("openai/text.sse"));
    let ca = ca.to_str().unwrap();
    let target = format!("CONNECT 127.0.0.1:{} HTTP/1.1", provider.port);

    // HTTPS through the proxy: a CONNECT tunnel, TLS end to end with the provider.
    let message = turn(
        &setup(&provider.base_url())
            .env("SSL_CERT_FILE", ca)
            .env("HTTPS_PROXY", &proxy.url()),
    );
    assert_eq!(message["stopReason"], "stop", "{message}");
    assert_eq!(provider.requests(), 1);
    assert_eq!(proxy.connects(), [target], "proxy log");

    // The lowercase variable wins, as in pi; NO_PROXY for the host bypasses the proxy.
    let message = turn(
        &setup(&provider.base_url())
            .env("SSL_CERT_FILE", ca)
            .env("https_proxy", &proxy.url())
            .env("HTTPS_PROXY", "http://127.0.0.1:1")
            .env("NO_PROXY", "localhost,127.0.0.1"),
    );
    assert_eq!(message["stopReason"], "stop", "{message}");
    assert_eq!(provider.requests(), 2);
    assert_eq!(
        proxy.connects().len(),
        1,
        "NO_PROXY request went through the proxy"
    );

    // A proxy that is down is a connection error, not a silent direct connection.
    let message = turn(
        &setup(&provider.base_url())
            .env("SSL_CERT_FILE", ca)
            .env("HTTPS_PROXY", "http://127.0.0.1:1"),
    );
    assert_eq!(message["errorMessage"], "Connection error.", "{message}");
    assert_eq!(provider.requests(), 2);

    // Plain http:// providers use HTTP_PROXY (tunnelled too).
    let fake =
        crate::fake_provider::FakeProvider::start(vec![crate::fake_provider::Reply::sse_fixture(
            "openai/text.sse",
        )]);
    let message = turn(&setup(&fake.base_url()).env("HTTP_PROXY", &proxy.url()));
    assert_eq!(message["stopReason"], "stop", "{message}");
    let port = fake.base_url().rsplit(':').next().unwrap().to_string();
    assert!(
        proxy
            .connects()
            .contains(&format!("CONNECT 127.0.0.1:{port} HTTP/1.1")),
        "{:?}",
        proxy.connects()
    );
}

#[test]
fn proxy_credentials_in_the_proxy_url_authenticate_the_tunnel() {
    if is_reference() || !require("openssl", which("openssl").is_some()) {
        return;
    }
    let Some(binary) = which("tinyproxy") else {
        require("tinyproxy", false);
        return;
    };
    let dir = TempDir::new("proxy-auth");
    let proxy = Tinyproxy::start_with(&binary, dir.path(), "BasicAuth corp s3cret-pass\n");
    let (ca, cert, key) = make_ca(dir.path());
    let provider = TlsProvider::start(&cert, &key, fixture("openai/text.sse"));
    let with_credentials = |credentials: &str| {
        turn(
            &setup(&provider.base_url())
                .env("SSL_CERT_FILE", ca.to_str().unwrap())
                .env(
                    "HTTPS_PROXY",
                    &format!("http://{credentials}@127.0.0.1:{}", proxy.port),
                ),
        )
    };
    let refused = with_credentials("corp:wrong");
    assert_eq!(refused["stopReason"], "error", "{refused}");
    assert_eq!(provider.requests(), 0);
    let message = with_credentials("corp:s3cret-pass");
    assert_eq!(message["stopReason"], "stop", "{message}");
    assert_eq!(provider.requests(), 1);
}
