//! How pi-rs reaches providers and token endpoints through a corporate network: which
//! certificate authorities it trusts and which proxy a request goes through. Every HTTP agent
//! (provider streams, OAuth token requests, `pi login`) is built here.
//!
//! Trust: the built-in roots (Mozilla's, from webpki-roots) **plus** the system store when present
//! (the first CA bundle found at the usual Linux/BSD paths), the PEM files `SSL_CERT_FILE` and
//! `NODE_EXTRA_CA_CERTS`, and every PEM file in the `SSL_CERT_DIR` directories (`:`-separated).
//! ureq's own TLS setting can only use one of these sources, so the TLS step of the connection
//! is ours: a rustls connector over ureq's TCP and CONNECT-proxy connectors. The root store is
//! built once per process; unreadable files are reported on stderr and skipped.
//!
//! Proxies, as pi's undici `EnvHttpProxyAgent` picks them: `https://` URLs use `https_proxy`,
//! else `HTTPS_PROXY`, else the HTTP proxy; `http://` URLs use `http_proxy`, else `HTTP_PROXY`
//! (lowercase wins; empty counts as unset). `no_proxy`/`NO_PROXY` (lowercase wins) lists hosts
//! separated by commas or whitespace: `*` turns proxies off, `host` matches that host, `.suffix`
//! or `*.suffix` matches hosts ending in it, `host:port` only that port. Requests go through the
//! proxy with `CONNECT host:port` (also for `http://` targets, as pi does), with basic
//! credentials from the proxy URL's `user:password@`. `ALL_PROXY` is not read (pi does not).
//!
//! Cancelling one request on a shared agent: ureq's own `Agent::shutdown` ends every request of
//! the agent, so the connector chain is wrapped (`CancelConnector`): it learns the sockets each
//! connection owns (the handles ureq's TCP connector registers) and its transport checks the
//! calling thread's `Cancel` (set by `Cancel::enter`) around every read and write. `Cancel::cancel`
//! from another thread shuts down the sockets the request is blocked on at that moment, and any
//! later read or write of that request fails at once. A socket is only shut down while its
//! request's thread is inside a call on it, so a connection back in the pool, or serving another
//! request, is never touched. Threads without a `Cancel` (OAuth, `pi login`) are not affected.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    ShutdownHandle, TcpConnector, Transport, TransportAdapter,
};

/// CA bundles of common systems; the first one present is the system store.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// An HTTP agent with pi-rs's trust store: statuses are not errors, connecting is bounded by
/// `connect` and every read and write by `idle`. The proxy is chosen per request (`post`, `get`).
pub fn agent(connect: Duration, idle: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(connect))
        .timeout_per_read(Some(idle))
        .timeout_per_write(Some(idle))
        // Proxies come from `proxy_for`, never from ureq's own reading of the environment.
        .proxy(None)
        .build();
    let connector = CancelConnector(
        ().chain(ConnectProxyConnector::default())
            .chain(TcpConnector::default())
            .chain(TlsConnector),
    );
    ureq::Agent::with_parts(config, connector, DefaultResolver::default())
}

/// A POST to `url` through the proxy the environment chooses for it.
pub fn post(agent: &ureq::Agent, url: &str) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
    agent
        .post(url)
        .config()
        .proxy(proxy_for(url, &|name| std::env::var(name).ok()))
        .build()
}

/// A GET to `url` through the proxy the environment chooses for it.
pub fn get(agent: &ureq::Agent, url: &str) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
    agent
        .get(url)
        .config()
        .proxy(proxy_for(url, &|name| std::env::var(name).ok()))
        .build()
}

/// The proxy for `url` under the environment `var` (see the module doc), if any.
pub fn proxy_for(url: &str, var: &dyn Fn(&str) -> Option<String>) -> Option<ureq::Proxy> {
    let uri = proxy_uri_for(url, var)?;
    match ureq::Proxy::new(&uri) {
        Ok(proxy) => Some(proxy),
        Err(e) => {
            log::warn!("ignoring the proxy setting {uri:?}: {e}");
            None
        }
    }
}

fn proxy_uri_for(url: &str, var: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let get = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| var(n).filter(|v| !v.trim().is_empty()))
    };
    let (scheme, rest) = url.split_once("://")?;
    let https = scheme.eq_ignore_ascii_case("https");
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or("");
    let (host, port) = split_host_port(authority);
    let port = port.unwrap_or(if https { 443 } else { 80 });
    if bypasses_proxy(
        &host,
        port,
        &get(&["no_proxy", "NO_PROXY"]).unwrap_or_default(),
    ) {
        return None;
    }
    let http_proxy = get(&["http_proxy", "HTTP_PROXY"]);
    let chosen = if https {
        get(&["https_proxy", "HTTPS_PROXY"]).or(http_proxy)
    } else {
        http_proxy
    }?;
    let chosen = chosen.trim().to_string();
    // A bare `host:port` means an HTTP proxy.
    Some(if chosen.contains("://") {
        chosen
    } else {
        format!("http://{chosen}")
    })
}

fn split_host_port(authority: &str) -> (String, Option<u16>) {
    if let Some(rest) = authority.strip_prefix('[') {
        // [v6]:port
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return (format!("[{}]", host.to_ascii_lowercase()), port);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
            (host.to_ascii_lowercase(), port.parse().ok())
        }
        _ => (authority.to_ascii_lowercase(), None),
    }
}

/// undici's `NO_PROXY` test.
fn bypasses_proxy(host: &str, port: u16, no_proxy: &str) -> bool {
    let no_proxy = no_proxy.trim();
    if no_proxy == "*" {
        return true;
    }
    no_proxy
        .split([',', ' ', '\t', '\n'])
        .filter(|e| !e.is_empty())
        .any(|entry| {
            let (name, entry_port) = match entry.rsplit_once(':') {
                Some((name, p)) if !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) => {
                    (name, p.parse::<u16>().ok())
                }
                _ => (entry, None),
            };
            if entry_port.is_some_and(|p| p != port) {
                return false;
            }
            let name = name.to_ascii_lowercase();
            if name.starts_with(['.', '*']) {
                host.ends_with(name.trim_start_matches('*'))
            } else {
                host == name
            }
        })
}

// ---- cancelling one request -----------------------------------------------------------------------

/// One request's cancellation (see the module doc). Clones share the state.
#[derive(Clone, Default)]
pub struct Cancel(Arc<Mutex<CancelState>>);

#[derive(Default)]
struct CancelState {
    cancelled: bool,
    /// The request's answer is complete; only the end of its body is read (`drain`), each read
    /// bounded by `DRAIN_READ`.
    draining: bool,
    /// How deep the request's thread is inside transport calls (a proxy tunnel nests one).
    depth: usize,
    /// The sockets those calls use; emptied when `depth` returns to zero.
    in_use: Vec<Weak<dyn ShutdownHandle>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Cancel>> = const { RefCell::new(None) };
}

/// The calling thread's requests answer to a `Cancel` until this is dropped.
pub struct CancelScope(Option<Cancel>);

impl Drop for CancelScope {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

impl Cancel {
    /// Requests made on this thread answer to this `Cancel` while the scope lives.
    pub fn enter(&self) -> CancelScope {
        CancelScope(CURRENT.with(|c| c.borrow_mut().replace(self.clone())))
    }

    /// Ends the request: sockets it is blocked on are shut down, later reads and writes fail.
    pub fn cancel(&self) {
        let in_use = {
            let mut state = lock(&self.0);
            state.cancelled = true;
            std::mem::take(&mut state.in_use)
        };
        for handle in in_use.iter().filter_map(Weak::upgrade) {
            handle.shutdown();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        lock(&self.0).cancelled
    }

    /// Marks the thread as inside a call on `sockets`; fails when already cancelled.
    fn busy(&self, sockets: &[Weak<dyn ShutdownHandle>]) -> Result<Busy, ureq::Error> {
        let mut state = lock(&self.0);
        if state.cancelled {
            return Err(cancelled());
        }
        state.depth += 1;
        state.in_use.extend(sockets.iter().cloned());
        Ok(Busy(self.clone()))
    }

    /// A socket created for the request while it connects; shut at once if already cancelled.
    fn connecting(&self, socket: &Weak<dyn ShutdownHandle>) -> Result<(), ureq::Error> {
        let mut state = lock(&self.0);
        if state.cancelled {
            drop(state);
            if let Some(handle) = socket.upgrade() {
                handle.shutdown();
            }
            return Err(cancelled());
        }
        state.in_use.push(socket.clone());
        Ok(())
    }
}

/// How long each read of `drain` may wait.
const DRAIN_READ: Duration = Duration::from_millis(500);
/// How much of a body `drain` reads before it gives up on the connection.
const DRAIN_LIMIT: u64 = 64 * 1024;

/// Reads what is left of a body whose answer is complete (a stream's terminal event came before
/// the body's end, which usually follows at once), so the connection goes back to the pool for
/// the next request instead of being closed. Only on a thread with a `Cancel`, which bounds each
/// read by `DRAIN_READ` and can still cancel it: a server that keeps the body open after its
/// answer costs at most that, and the connection.
pub fn drain(body: &mut dyn Read) {
    let Some(cancel) = current() else {
        return;
    };
    lock(&cancel.0).draining = true;
    match std::io::copy(&mut body.take(DRAIN_LIMIT), &mut std::io::sink()) {
        Ok(n) => log::trace!("drained {n} bytes after the answer"),
        Err(e) => log::trace!("the body's end was not read: {e}"),
    }
}

fn lock(state: &Mutex<CancelState>) -> std::sync::MutexGuard<'_, CancelState> {
    // The state stays consistent under every operation, so a poisoned lock is still usable.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn cancelled() -> ureq::Error {
    ureq::Error::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "request cancelled",
    ))
}

fn current() -> Option<Cancel> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The thread is inside a transport call (or a connect) of a request; dropping ends that.
struct Busy(Cancel);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = lock(&self.0.0);
        state.depth = state.depth.saturating_sub(1);
        if state.depth == 0 {
            state.in_use.clear();
        }
    }
}

/// Wraps the whole connector chain: records the sockets each connection owns and makes its
/// transport answer to the calling thread's `Cancel`.
struct CancelConnector<C>(C);

impl<C: Connector<()>> Connector<()> for CancelConnector<C> {
    type Out = CancelTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let cancel = current();
        let _busy = cancel.as_ref().map(|c| c.busy(&[])).transpose()?;
        let sockets: Arc<Mutex<Vec<Weak<dyn ShutdownHandle>>>> = Arc::default();
        let recorded = sockets.clone();
        let outer = details.register_shutdown.clone();
        let register = move |socket: Weak<dyn ShutdownHandle>| {
            recorded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(socket.clone());
            if let Some(cancel) = &cancel {
                cancel.connecting(&socket)?;
            }
            outer(socket)
        };
        let inner = ConnectionDetails {
            uri: details.uri,
            addrs: details.addrs.clone(),
            config: details.config,
            request_level: details.request_level,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: details.current_time.clone(),
            run_connector: details.run_connector.clone(),
            register_shutdown: Arc::new(register),
        };
        let Some(transport) = self.0.connect(&inner, None)? else {
            return Ok(None);
        };
        let sockets = std::mem::take(&mut *sockets.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(Some(CancelTransport {
            inner: transport.boxed(),
            sockets,
        }))
    }
}

impl<C> std::fmt::Debug for CancelConnector<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CancelConnector")
    }
}

struct CancelTransport {
    inner: Box<dyn Transport>,
    sockets: Vec<Weak<dyn ShutdownHandle>>,
}

impl CancelTransport {
    /// Runs one call on the transport under the thread's `Cancel`, if it has one. A call that
    /// returns after a cancel fails even when the shut socket read as a clean end.
    fn guarded<T>(
        &mut self,
        call: impl FnOnce(&mut dyn Transport) -> Result<T, ureq::Error>,
    ) -> Result<T, ureq::Error> {
        let Some(cancel) = current() else {
            return call(&mut *self.inner);
        };
        let busy = cancel.busy(&self.sockets)?;
        let result = call(&mut *self.inner);
        drop(busy);
        if cancel.is_cancelled() {
            return Err(cancelled());
        }
        result
    }
}

impl Transport for CancelTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.guarded(|t| t.transmit_output(amount, timeout))
    }

    fn await_input(&mut self, mut timeout: NextTimeout) -> Result<bool, ureq::Error> {
        if current().is_some_and(|c| lock(&c.0).draining) {
            let cap = ureq::unversioned::transport::time::Duration::from(DRAIN_READ);
            timeout.per_read = Some(timeout.per_read.map_or(cap, |d| d.min(cap)));
        }
        self.guarded(|t| t.await_input(timeout))
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

impl std::fmt::Debug for CancelTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CancelTransport")
    }
}

// ---- trust ---------------------------------------------------------------------------------------

/// The files whose certificates are trusted besides the built-in roots, in the order read.
pub fn extra_ca_files(var: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(bundle) = SYSTEM_BUNDLES.iter().map(Path::new).find(|p| p.is_file()) {
        files.push(bundle.to_path_buf());
    }
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    files.extend(set("SSL_CERT_FILE").map(PathBuf::from));
    files.extend(set("NODE_EXTRA_CA_CERTS").map(PathBuf::from));
    for dir in set("SSL_CERT_DIR").iter().flat_map(|d| d.split(':')) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            log::warn!("SSL_CERT_DIR: cannot read {dir}");
            continue;
        };
        let mut in_dir: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        in_dir.sort();
        files.extend(in_dir);
    }
    files
}

/// Built-in roots plus every certificate in `files`. Returns the store and how many were added.
pub fn root_store(files: &[PathBuf]) -> (RootCertStore, usize) {
    let mut store = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut added = 0;
    for file in files {
        let certs = match CertificateDer::pem_file_iter(file) {
            Ok(iter) => iter.filter_map(Result::ok).collect::<Vec<_>>(),
            Err(e) => {
                eprintln!(
                    "Warning: cannot read CA certificates from {}: {e}",
                    file.display()
                );
                continue;
            }
        };
        let (ok, _ignored) = store.add_parsable_certificates(certs);
        added += ok;
    }
    (store, added)
}

fn client_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let files = extra_ca_files(&|name| std::env::var(name).ok());
            let (store, added) = root_store(&files);
            log::debug!("TLS: built-in roots plus {added} certificates from {files:?}");
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(rustls::ALL_VERSIONS)
                .map(|b| b.with_root_certificates(store).with_no_client_auth());
            match config {
                Ok(config) => Arc::new(config),
                // Unreachable with ring's provider; fall back to rustls's defaults rather than panic.
                Err(e) => {
                    log::error!("TLS configuration: {e}");
                    Arc::new(
                        ClientConfig::builder()
                            .with_root_certificates(RootCertStore {
                                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                            })
                            .with_no_client_auth(),
                    )
                }
            }
        })
        .clone()
}

/// The TLS step of a connection: wraps the TCP (or proxy tunnel) transport for `https://` URLs.
struct TlsConnector;

impl<In: Transport> Connector<In> for TlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details
            .uri
            .authority()
            .map(|a| a.host().trim_start_matches('[').trim_end_matches(']'))
            .unwrap_or("");
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ureq::Error::Tls("invalid DNS name for TLS"))?;
        let mut connection = ClientConnection::new(client_config(), name)
            .map_err(|e| ureq::Error::Io(std::io::Error::other(e)))?;
        let mut socket = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        socket.set_timeout(details.timeout);
        connection.complete_io(&mut socket)?;
        Ok(Some(Either::B(TlsTransport {
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
            stream: StreamOwned::new(connection, socket),
        })))
    }
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConnector")
    }
}

struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsTransport")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn proxies_are_chosen_like_undici() {
        let vars = [
            ("HTTPS_PROXY", "http://upper:1"),
            ("https_proxy", "http://lower:2"),
            ("HTTP_PROXY", "plain:3"),
            ("NO_PROXY", "internal.corp, .local *.svc,10.0.0.1:8443"),
        ];
        let get = env(&vars);
        let pick = |url: &str| proxy_uri_for(url, &get);
        assert_eq!(
            pick("https://api.openai.com/v1").as_deref(),
            Some("http://lower:2")
        );
        assert_eq!(
            pick("http://api.openai.com").as_deref(),
            Some("http://plain:3")
        );
        assert_eq!(pick("https://internal.corp/x"), None);
        assert_eq!(pick("https://a.b.local"), None);
        assert_eq!(pick("https://x.svc:99"), None);
        assert_eq!(pick("https://10.0.0.1:8443/"), None);
        assert_eq!(pick("https://10.0.0.1/").as_deref(), Some("http://lower:2"));
        assert_eq!(
            pick("https://notinternal.corp").as_deref(),
            Some("http://lower:2")
        );

        let only_http = [("HTTP_PROXY", "http://p:8080")];
        assert_eq!(
            proxy_uri_for("https://h", &env(&only_http)).as_deref(),
            Some("http://p:8080")
        );
        let star = [("HTTPS_PROXY", "http://p:1"), ("no_proxy", "*")];
        assert_eq!(proxy_uri_for("https://h", &env(&star)), None);
        assert_eq!(
            proxy_uri_for("https://h", &env(&[("ALL_PROXY", "http://p:1")])),
            None
        );
    }

    #[test]
    fn extra_certificates_join_the_built_in_roots() {
        let (store, added) = root_store(&[]);
        assert_eq!(store.roots.len(), webpki_roots::TLS_SERVER_ROOTS.len());
        assert_eq!(added, 0);
        let (store, _) = root_store(&[PathBuf::from("/nonexistent/ca.pem")]);
        assert_eq!(store.roots.len(), webpki_roots::TLS_SERVER_ROOTS.len());
        let vars = [
            ("SSL_CERT_FILE", "/a.pem"),
            ("NODE_EXTRA_CA_CERTS", "/b.pem"),
        ];
        let files = extra_ca_files(&env(&vars));
        assert!(files.ends_with(&[PathBuf::from("/a.pem"), PathBuf::from("/b.pem")]));
    }
}
