//! A real OCI registry on loopback for the tests: Debian's
//! `docker-registry` (the CNCF distribution registry), started by
//! [`OciRegistry::start`] on a free port with filesystem storage in a
//! temporary directory, optionally behind htpasswd (bcrypt) basic auth,
//! and killed when dropped.
//!
//! Components are pushed with the same `oci-client` crate the host pulls
//! with ([`OciRegistry::push`]); [`Artifact`] says what the manifest
//! declares, so a test can push exactly the wrong thing it wants refused.
//!
//! If the binary is missing, starting panics with how to install it: the
//! tests that need it fail, they never skip.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use informer_host::oci::cache::sha256_digest;
use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;

/// Where Debian installs the registry.
pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// The wasm artifact media types (CNCF TAG Runtime layout).
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER: &str = "application/wasm";

/// A running registry (see the module docs).
pub struct OciRegistry {
    child: Option<Child>,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    credentials: Option<(String, String)>,
}

/// What a pushed manifest declares.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub config_media_type: String,
    pub config: Vec<u8>,
    pub layer_media_type: String,
    /// The layer's bytes (pushed as a blob under their digest).
    pub layer: Vec<u8>,
}

impl Artifact {
    /// A wasm artifact: `{}` config of `application/vnd.wasm.config.v0+json`,
    /// one `application/wasm` layer.
    pub fn wasm(bytes: impl Into<Vec<u8>>) -> Self {
        Artifact {
            config_media_type: WASM_CONFIG.into(),
            config: b"{}".to_vec(),
            layer_media_type: WASM_LAYER.into(),
            layer: bytes.into(),
        }
    }
}

/// What [`OciRegistry::push`] pushed.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// `host:port/repo:tag`.
    pub tag_reference: String,
    /// `host:port/repo@sha256:...`.
    pub digest_reference: String,
    /// The manifest's digest.
    pub digest: String,
    /// The layer's digest.
    pub layer_digest: String,
}

impl OciRegistry {
    /// A registry open to anonymous pulls and pushes.
    pub async fn start() -> OciRegistry {
        Self::start_with(None).await
    }

    /// A registry that requires basic auth with `username`/`password` for
    /// everything (pulls and pushes).
    pub async fn start_with_auth(username: &str, password: &str) -> OciRegistry {
        Self::start_with(Some((username.to_owned(), password.to_owned()))).await
    }

    async fn start_with(credentials: Option<(String, String)>) -> OciRegistry {
        let bin = registry_bin();
        let dir = tempfile::tempdir().expect("temporary directory for the registry");
        if let Some((username, password)) = &credentials {
            let hash = bcrypt::hash(password, 4).expect("bcrypt");
            std::fs::write(dir.path().join("htpasswd"), format!("{username}:{hash}\n")).unwrap();
        }
        // A free port can be taken by someone else between finding it and
        // the registry binding it: try a few.
        let mut last_log = String::new();
        for _ in 0..5 {
            let addr = free_port();
            write_config(dir.path(), addr, credentials.is_some());
            let log_path = dir.path().join("registry.log");
            let log = std::fs::File::create(&log_path).unwrap();
            let mut child = Command::new(&bin)
                .arg("serve")
                .arg(dir.path().join("config.yml"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            if wait_ready(&mut child, addr).await {
                return OciRegistry { child: Some(child), addr, dir, credentials };
            }
            let _ = child.kill();
            let _ = child.wait();
            last_log = std::fs::read_to_string(&log_path).unwrap_or_default();
        }
        panic!("docker-registry did not come up on loopback; its log:\n{last_log}");
    }

    /// `127.0.0.1:<port>`: the registry part of a reference, and what the
    /// host's `plain_http` list must name.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The registry's storage directory.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// The file the registry serves blob `digest` from.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.storage().join("docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }

    /// Kills the registry (a pull now fails to connect). Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A `.dockerconfigjson` with this registry's credentials (or
    /// `username`/`password` given here, e.g. wrong ones).
    pub fn docker_config_json(&self, username: &str, password: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "auths": { self.host(): { "username": username, "password": password } }
        }))
        .unwrap()
    }

    /// Pushes `artifact` as `repo:tag` (with the registry's own
    /// credentials if it has some).
    pub async fn push(&self, repo_tag: &str, artifact: &Artifact) -> Pushed {
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": artifact.config_media_type,
                "digest": sha256_digest(&artifact.config),
                "size": artifact.config.len(),
            },
            "layers": [{
                "mediaType": artifact.layer_media_type,
                "digest": sha256_digest(&artifact.layer),
                "size": artifact.layer.len(),
            }],
        });
        let manifest = serde_json::to_vec(&manifest).unwrap();
        self.push_raw(repo_tag, &[&artifact.config, &artifact.layer], &manifest).await
    }

    /// Pushes `blobs` and then `manifest` (bytes as given) as `repo:tag`.
    pub async fn push_raw(&self, repo_tag: &str, blobs: &[&[u8]], manifest: &[u8]) -> Pushed {
        let tag_reference = format!("{}/{repo_tag}", self.host());
        let reference: Reference = tag_reference.parse().unwrap();
        let client = self.client();
        if let Some((username, password)) = &self.credentials {
            let auth = RegistryAuth::Basic(username.clone(), password.clone());
            client.store_auth_if_needed(reference.resolve_registry(), &auth).await;
        }
        for blob in blobs {
            client
                .push_blob(&reference, blob.to_vec(), &sha256_digest(blob))
                .await
                .unwrap_or_else(|e| panic!("pushing a blob to {tag_reference}: {e}"));
        }
        client
            .push_manifest_raw(
                &reference,
                manifest.to_vec(),
                HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json"),
            )
            .await
            .unwrap_or_else(|e| panic!("pushing the manifest of {tag_reference}: {e}"));
        let digest = sha256_digest(manifest);
        let layer_digest = serde_json::from_slice::<serde_json::Value>(manifest).unwrap()["layers"][0]["digest"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Pushed {
            digest_reference: format!("{}/{}@{digest}", self.host(), reference.repository()),
            tag_reference,
            digest,
            layer_digest,
        }
    }

    fn client(&self) -> oci_client::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = ClientConfig { protocol: ClientProtocol::HttpsExcept(vec![self.host()]), ..Default::default() };
        oci_client::Client::try_from(config).expect("registry client")
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn registry_bin() -> PathBuf {
    let bin = Path::new(REGISTRY_BIN);
    if bin.is_file() {
        return bin.to_owned();
    }
    panic!(
        "{REGISTRY_BIN} not found: the OCI tests need the CNCF distribution registry \
         (Debian package docker-registry). Install it with `apt-get install docker-registry`."
    );
}

/// Polls `GET /v2/` until it answers (200, or 401 behind auth) or the
/// process exits; 10 s at most.
async fn wait_ready(child: &mut Child, addr: SocketAddr) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        if let Some(status) = http_status(addr, "/v2/")
            && (status == 200 || status == 401)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    listener.local_addr().unwrap()
}

fn write_config(dir: &Path, addr: SocketAddr, with_auth: bool) {
    let storage = dir.join("storage");
    let mut config = format!(
        "version: 0.1\n\
         log:\n  level: warn\n  accesslog:\n    disabled: true\n\
         storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
         http:\n  addr: {addr}\n",
        storage.display()
    );
    if with_auth {
        config.push_str(&format!(
            "auth:\n  htpasswd:\n    realm: informer-host-tests\n    path: {}\n",
            dir.join("htpasswd").display()
        ));
    }
    std::fs::write(dir.join("config.yml"), config).unwrap();
}

/// The status code of `GET path`, or `None` if nothing answers.
fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut head = [0u8; 32];
    let n = stream.read(&mut head).ok()?;
    let line = std::str::from_utf8(&head[..n]).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}
