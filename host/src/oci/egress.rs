//! [`Egress`]: the only way a pull reaches the network, and what bounds it.
//!
//! A Plugin's author picks the registry a host pulls from, and the registry
//! picks where its token realm and its blob redirects point. Left to
//! `oci-client`, that lets a tenant
//! - aim the host at internal addresses (the cloud metadata service at
//!   169.254.169.254, the API server, the kubelet, loopback ports) and read
//!   what they answer in its Plugin's status (server-side request forgery);
//! - exhaust the host's memory: `oci-client` reads a manifest, a token and
//!   an error body whole, with no cap, so an endless answer grows the host
//!   at link speed for as long as the pull may last.
//!
//! Each pull therefore gets its own forward proxy on loopback, and its
//! registry client is told to use it for every request (`CONNECT` tunnels
//! for HTTPS, absolute-form requests for plain HTTP). The proxy
//! - resolves each destination itself and connects only to addresses the
//!   [`EgressPolicy`] allows (so a name cannot resolve differently for the
//!   check and for the connection);
//! - counts every byte received from the network for the pull, and cuts
//!   the pull's connections once they pass [`EgressPolicy::max_bytes`];
//! - remembers why it refused or cut, so the pull's error says so rather
//!   than "unsuccessful tunnel".
//!
//! This module owns the proxy and the address policy. It never reads what
//! passes through a tunnel (TLS ends in the registry client), nor decides
//! what a pull fetches.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame, Incoming};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

/// How long connecting to one destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a pull may connect, and how much it may receive.
#[derive(Debug, Clone)]
pub struct EgressPolicy {
    /// Destinations (`host` or `host:port`, as written in references and
    /// realms) exempt from the address check: the operator's in-cluster
    /// registries.
    pub internal: Vec<String>,
    /// The most bytes all of a pull's connections may receive together.
    pub max_bytes: u64,
}

impl EgressPolicy {
    fn is_internal(&self, host: &str, port: u16) -> bool {
        let host = unbracket(host);
        self.internal.iter().any(|allowed| {
            allowed == host
                || allowed.rsplit_once(':').is_some_and(|(h, p)| unbracket(h) == host && p == port.to_string())
        })
    }
}

fn unbracket(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Why the proxy refused a destination or cut a pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// A destination resolved only to addresses the policy forbids.
    Forbidden { destination: String, address: IpAddr, kind: &'static str },
    /// The pull's connections received more than the policy allows.
    TooMuchData { max: u64 },
    /// A destination could not be resolved or connected to.
    Unreachable { message: String },
}

/// One pull's forward proxy; it stops (with every connection through it)
/// when dropped.
#[derive(Debug)]
pub struct Egress {
    addr: SocketAddr,
    state: Arc<State>,
    stop: CancellationToken,
}

#[derive(Debug)]
struct State {
    policy: EgressPolicy,
    received: AtomicU64,
    stopped: Mutex<Option<Stopped>>,
    stop: CancellationToken,
}

impl State {
    fn record(&self, why: Stopped) {
        let mut stopped = self.stopped.lock();
        if stopped.is_none() {
            *stopped = Some(why);
        }
    }

    /// Counts `n` bytes received; false once the pull is over its budget.
    fn receive(&self, n: usize) -> bool {
        let total = self.received.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if total > self.policy.max_bytes {
            self.record(Stopped::TooMuchData { max: self.policy.max_bytes });
            return false;
        }
        true
    }

    /// The address to connect to for `host:port`, if the policy allows one.
    async fn destination(&self, host: &str, port: u16) -> Result<SocketAddr, Response<ProxyBody>> {
        let name = unbracket(host);
        let resolved: Vec<SocketAddr> = match tokio::net::lookup_host((name, port)).await {
            Ok(addrs) => addrs.collect(),
            Err(e) => return Err(self.unreachable(StatusCode::BAD_GATEWAY, format!("cannot resolve {host}: {e}"))),
        };
        if self.policy.is_internal(host, port) {
            return resolved
                .first()
                .copied()
                .ok_or_else(|| self.unreachable(StatusCode::BAD_GATEWAY, format!("{host} resolves to no address")));
        }
        let mut first_forbidden = None;
        for addr in &resolved {
            match forbidden(addr.ip()) {
                None => return Ok(*addr),
                Some(kind) => {
                    first_forbidden.get_or_insert((addr.ip(), kind));
                }
            }
        }
        match first_forbidden {
            Some((address, kind)) => {
                let why = Stopped::Forbidden { destination: format!("{host}:{port}"), address, kind };
                self.record(why);
                Err(text(StatusCode::FORBIDDEN, format!("{host}:{port} resolves to {address}, a {kind} address")))
            }
            None => Err(self.unreachable(StatusCode::BAD_GATEWAY, format!("{host} resolves to no address"))),
        }
    }

    /// Records that a destination cannot be reached, and the answer saying so.
    fn unreachable(&self, status: StatusCode, message: String) -> Response<ProxyBody> {
        self.record(Stopped::Unreachable { message: message.clone() });
        text(status, message)
    }
}

impl Egress {
    /// Starts a proxy on loopback enforcing `policy`.
    pub async fn start(policy: EgressPolicy) -> std::io::Result<Egress> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let state =
            Arc::new(State { policy, received: AtomicU64::new(0), stopped: Mutex::new(None), stop: stop.clone() });
        tokio::spawn(accept(listener, state.clone()));
        Ok(Egress { addr, state, stop })
    }

    /// The proxy's URL, for the registry client's HTTP and HTTPS proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Why the proxy refused or cut something, if it did.
    pub fn stopped(&self) -> Option<Stopped> {
        self.state.stopped.lock().clone()
    }

    /// Bytes received from the network so far.
    pub fn received(&self) -> u64 {
        self.state.received.load(Ordering::Relaxed)
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(listener: TcpListener, state: Arc<State>) {
    loop {
        let stream = tokio::select! {
            _ = state.stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!("egress proxy: accept failed: {e}");
                    continue;
                }
            },
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn({
                let state = state.clone();
                move |req| handle(state.clone(), req)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                _ = state.stop.cancelled() => {}
                served = conn => if let Err(e) = served {
                    tracing::debug!("egress proxy: {e}");
                },
            }
        });
    }
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<ProxyBody>, hyper::Error> {
    let Some((host, port)) = target(req.uri(), req.method()) else {
        return Ok(text(StatusCode::BAD_REQUEST, "the egress proxy takes CONNECT and absolute http:// URIs".into()));
    };
    let addr = match state.destination(&host, port).await {
        Ok(addr) => addr,
        Err(refused) => return Ok(refused),
    };
    let upstream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            return Ok(state.unreachable(StatusCode::BAD_GATEWAY, format!("cannot connect to {host}:{port}: {e}")));
        }
        Err(_) => {
            let message = format!("connecting to {host}:{port} timed out after {CONNECT_TIMEOUT:?}");
            return Ok(state.unreachable(StatusCode::GATEWAY_TIMEOUT, message));
        }
    };
    if req.method() == Method::CONNECT {
        tokio::spawn(tunnel(state, req, upstream));
        return Ok(Response::new(empty()));
    }
    forward(state, req, upstream).await
}

/// `host` and `port` of a CONNECT's authority or an absolute `http://` URI.
fn target(uri: &Uri, method: &Method) -> Option<(String, u16)> {
    let authority = uri.authority()?;
    let port = if *method == Method::CONNECT {
        authority.port_u16()?
    } else if uri.scheme() == Some(&http::uri::Scheme::HTTP) {
        authority.port_u16().unwrap_or(80)
    } else {
        return None;
    };
    Some((authority.host().to_owned(), port))
}

/// Relays a CONNECT tunnel, counting what the destination sends.
async fn tunnel(state: Arc<State>, req: Request<Incoming>, upstream: TcpStream) {
    let upgraded = match hyper::upgrade::on(req).await {
        Ok(upgraded) => upgraded,
        Err(e) => {
            tracing::debug!("egress proxy: upgrade failed: {e}");
            return;
        }
    };
    let (mut client_read, mut client_write) = tokio::io::split(TokioIo::new(upgraded));
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let to_upstream = async {
        let _ = tokio::io::copy(&mut client_read, &mut upstream_write).await;
        let _ = upstream_write.shutdown().await;
    };
    let from_upstream = async {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = match upstream_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if !state.receive(n) || client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::select! {
        _ = state.stop.cancelled() => {}
        // Either side closing ends the tunnel: a cut one must not linger.
        _ = async { tokio::join!(to_upstream, from_upstream) } => {}
    }
}

/// Sends a plain-HTTP request on to its destination and relays the answer,
/// counting its body.
async fn forward(
    state: Arc<State>,
    mut req: Request<Incoming>,
    upstream: TcpStream,
) -> Result<Response<ProxyBody>, hyper::Error> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await?;
    let stop = state.stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = conn => {}
        }
    });
    // Origin-form for the destination; the proxy's own headers stay here.
    let origin: Uri =
        req.uri().path_and_query().map_or("/", |p| p.as_str()).parse().unwrap_or_else(|_| Uri::from_static("/"));
    *req.uri_mut() = origin;
    req.headers_mut().remove("proxy-connection");
    req.headers_mut().remove(http::header::PROXY_AUTHORIZATION);
    let response = sender.send_request(req).await?;
    Ok(response.map(|body| Counted { inner: body, state }.boxed()))
}

/// A relayed body that stops once the pull has received too much.
struct Counted {
    inner: Incoming,
    state: Arc<State>,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, Bytes::len);
                if !self.state.receive(n) {
                    return Poll::Ready(Some(Err("the pull received more than it may".into())));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn empty() -> ProxyBody {
    http_body_util::Empty::new().map_err(|never| match never {}).boxed()
}

fn text(status: StatusCode, message: String) -> Response<ProxyBody> {
    let body = http_body_util::Full::new(Bytes::from(message)).map_err(|never| match never {}).boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

/// The kind of address `ip` is, if a pull may not connect to it: anything
/// not on the public internet.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match (a, b) {
        (127, _) => "loopback",
        (0, _) => "this-network",
        (169, 254) => "link-local (cloud metadata services live there)",
        (10, _) | (192, 168) => "private",
        (172, 16..=31) => "private",
        (100, 64..=127) => "shared (carrier-grade NAT)",
        (192, 0) if ip.octets()[2] == 0 => "IETF protocol assignment",
        (198, 18..=19) => "benchmarking",
        (224..=239, _) => "multicast",
        (240..=255, _) => "reserved",
        _ => return None,
    })
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    let segments = ip.segments();
    // NAT64 (64:ff9b::/96) reaches the IPv4 address in its last 32 bits.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., hi, lo] = segments;
        return forbidden_v4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
    }
    Some(match segments[0] {
        _ if ip.is_loopback() => "loopback",
        _ if ip.is_unspecified() => "unspecified",
        s if s & 0xffc0 == 0xfe80 => "link-local",
        s if s & 0xfe00 == 0xfc00 => "private (unique local)",
        s if s & 0xff00 == 0xff00 => "multicast",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_off_the_public_internet_are_forbidden() {
        let cases: &[(&str, Option<&str>)] = &[
            ("127.0.0.1", Some("loopback")),
            ("169.254.169.254", Some("link-local (cloud metadata services live there)")),
            ("10.96.0.1", Some("private")),
            ("172.20.1.1", Some("private")),
            ("172.32.0.1", None),
            ("192.168.1.10", Some("private")),
            ("100.100.100.200", Some("shared (carrier-grade NAT)")),
            ("0.0.0.0", Some("this-network")),
            ("224.0.0.1", Some("multicast")),
            ("8.8.8.8", None),
            ("140.82.112.34", None),
            ("::1", Some("loopback")),
            ("::", Some("unspecified")),
            ("fe80::1", Some("link-local")),
            ("fd00:ec2::254", Some("private (unique local)")),
            ("::ffff:169.254.169.254", Some("link-local (cloud metadata services live there)")),
            ("64:ff9b::a9fe:a9fe", Some("link-local (cloud metadata services live there)")),
            ("2606:4700::1111", None),
        ];
        for (ip, kind) in cases {
            assert_eq!(forbidden(ip.parse().unwrap()), *kind, "{ip}");
        }
    }

    #[test]
    fn internal_destinations_are_matched_by_host_or_host_and_port() {
        let policy = EgressPolicy { internal: vec!["registry.internal".into(), "10.0.0.5:5000".into()], max_bytes: 0 };
        assert!(policy.is_internal("registry.internal", 443));
        assert!(policy.is_internal("10.0.0.5", 5000));
        assert!(!policy.is_internal("10.0.0.5", 5001));
        assert!(!policy.is_internal("registry.internal.evil.example", 443));
    }

    async fn serve_once(answer: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<usize>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut sent = 0;
            let mut request = vec![0u8; 1024];
            let _ = stream.read(&mut request).await;
            while stream.write_all(answer).await.is_ok() {
                sent += answer.len();
            }
            sent
        });
        (addr, task)
    }

    #[tokio::test]
    async fn a_tunnel_is_cut_once_the_pull_received_its_budget() {
        // An endless answer: what a hostile registry sends as a manifest.
        let (upstream, sent) = serve_once(&[b'x'; 4096]).await;
        let egress =
            Egress::start(EgressPolicy { internal: vec![upstream.to_string()], max_bytes: 1 << 20 }).await.unwrap();
        let mut client = TcpStream::connect(egress.addr).await.unwrap();
        client.write_all(format!("CONNECT {upstream} HTTP/1.1\r\nHost: {upstream}\r\n\r\n").as_bytes()).await.unwrap();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut received = Vec::new();
        client.read_to_end(&mut received).await.unwrap();
        assert!(received.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&received[..40]));
        assert!(received.len() <= (1 << 20) + (16 << 10), "{} bytes relayed", received.len());
        assert_eq!(egress.stopped(), Some(Stopped::TooMuchData { max: 1 << 20 }));
        drop(egress);
        drop(client);
        let sent = sent.await.unwrap();
        assert!(sent < 8 << 20, "the destination kept sending: {sent} bytes");
    }

    #[tokio::test]
    async fn a_destination_at_an_internal_address_is_refused_before_connecting() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let upstream = listener.local_addr().unwrap();
        let egress = Egress::start(EgressPolicy { internal: vec![], max_bytes: 1 << 20 }).await.unwrap();
        let mut client = TcpStream::connect(egress.addr).await.unwrap();
        client.write_all(format!("CONNECT {upstream} HTTP/1.1\r\nHost: {upstream}\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 512];
        let n = client.read(&mut answer).await.unwrap();
        assert!(answer[..n].starts_with(b"HTTP/1.1 403"), "{}", String::from_utf8_lossy(&answer[..n]));
        assert_eq!(
            egress.stopped(),
            Some(Stopped::Forbidden { destination: upstream.to_string(), address: upstream.ip(), kind: "loopback" })
        );
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "the proxy connected to a loopback address");
    }
}
