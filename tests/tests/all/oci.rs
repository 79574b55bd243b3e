//! Components pulled from a real OCI registry: Debian's `docker-registry`
//! (the CNCF distribution registry) on loopback, started per test by
//! [`e2e::oci_registry::OciRegistry`], with components pushed through the
//! same `oci-client` crate the host pulls with. No mocks: every refusal
//! below is the registry's real answer or the real bytes it served.

use std::time::Duration;

use e2e::oci_registry::{Artifact, OciRegistry};
use e2e::plugins::{Log, runtime, spec, wasm};
use informer_host::oci::{OciConfig, OciError, OciPuller, RegistryAuth};

fn new_puller(registry: &OciRegistry, cache: &tempfile::TempDir) -> OciPuller {
    OciPuller::new(OciConfig {
        max_bytes: 16 << 20,
        plain_http: vec![registry.host()],
        timeout: Duration::from_secs(30),
        ..OciConfig::new(cache.path())
    })
}

fn noop_component() -> Vec<u8> {
    std::fs::read(wasm("noop")).expect("the built noop plugin")
}

#[tokio::test]
async fn pulls_a_component_by_tag_and_by_digest_then_serves_the_digest_from_the_cache_offline() {
    let mut registry = OciRegistry::start().await;
    let component = noop_component();
    let pushed = registry.push("plugins/noop:v1", &Artifact::wasm(component.clone())).await;
    let cache = tempfile::tempdir().unwrap();
    let puller = new_puller(&registry, &cache);

    let by_tag = puller.pull(&pushed.tag_reference, None).await.unwrap();
    assert_eq!(by_tag.digest, pushed.digest);
    assert_eq!(by_tag.layer_digest, pushed.layer_digest);
    assert_eq!(&*by_tag.bytes, &component[..]);
    assert!(!by_tag.from_cache, "the first pull downloads the layer");
    let cached = std::fs::read(puller.cache().path(&pushed.layer_digest).unwrap()).unwrap();
    assert_eq!(cached, component, "the cache holds the layer under its digest");

    // The pulled bytes are a component the host runs.
    let log = Log::default();
    runtime().load_bytes(spec("noop-from-oci", "noop", &log), &by_tag.bytes).expect("compiles and instantiates");

    // A fresh cache: the digest reference downloads, and is checked.
    let cache2 = tempfile::tempdir().unwrap();
    let puller2 = new_puller(&registry, &cache2);
    let by_digest = puller2.pull(&pushed.digest_reference, None).await.unwrap();
    assert_eq!((by_digest.digest.as_str(), by_digest.from_cache), (pushed.digest.as_str(), false));
    assert_eq!(&*by_digest.bytes, &component[..]);

    // Registry gone: the digest is served from the cache, a tag cannot be.
    registry.stop();
    let offline = puller2.pull(&pushed.digest_reference, None).await.unwrap();
    assert!(offline.from_cache);
    assert_eq!(&*offline.bytes, &component[..]);
    let error = puller2.pull(&pushed.tag_reference, None).await.unwrap_err();
    assert!(matches!(error, OciError::Transport { .. }), "{error}");
    assert_eq!(error.reason(), "RegistryUnreachable");
    assert!(error.to_string().contains(&pushed.tag_reference), "{error}");
}

#[tokio::test]
async fn a_missing_tag_or_repository_is_not_found() {
    let registry = OciRegistry::start().await;
    registry.push("plugins/noop:v1", &Artifact::wasm(b"\0asm-bytes".to_vec())).await;
    let cache = tempfile::tempdir().unwrap();
    let puller = new_puller(&registry, &cache);
    for reference in [
        format!("{}/plugins/noop:v2", registry.host()),
        format!("{}/plugins/absent:v1", registry.host()),
        format!("{}/plugins/noop@sha256:{}", registry.host(), "0".repeat(64)),
    ] {
        let error = puller.pull(&reference, None).await.unwrap_err();
        assert!(matches!(error, OciError::NotFound { .. }), "{reference}: {error}");
        assert_eq!(error.reason(), "NotFound");
        assert!(error.to_string().contains(&reference), "{error}");
    }
}

#[tokio::test]
async fn an_htpasswd_registry_refuses_anonymous_and_wrong_credentials_and_serves_the_pull_secret() {
    let registry = OciRegistry::start_with_auth("tenant-a", "s3cret").await;
    let component = b"\0asm-private".to_vec();
    let pushed = registry.push("team-a/private:1", &Artifact::wasm(component.clone())).await;
    let cache = tempfile::tempdir().unwrap();
    let puller = new_puller(&registry, &cache);

    let anonymous = puller.pull(&pushed.tag_reference, None).await.unwrap_err();
    assert!(matches!(anonymous, OciError::Unauthorized { with_credentials: false, .. }), "{anonymous}");
    assert_eq!(anonymous.reason(), "Unauthorized");

    let wrong_secret = registry.docker_config_json("tenant-a", "wrong");
    let wrong = RegistryAuth::from_docker_config_json(&wrong_secret, &registry.host()).unwrap().unwrap();
    let error = puller.pull(&pushed.tag_reference, Some(&wrong)).await.unwrap_err();
    assert!(matches!(error, OciError::Unauthorized { with_credentials: true, .. }), "{error}");
    assert!(error.to_string().contains("check the pull secret"), "{error}");
    assert!(!format!("{error} {error:?}").contains("wrong"), "the password never shows: {error:?}");

    let secret = registry.docker_config_json("tenant-a", "s3cret");
    let auth =
        RegistryAuth::from_docker_config_json(&secret, &registry.host()).unwrap().expect("an entry for the host");
    let pulled = puller.pull(&pushed.tag_reference, Some(&auth)).await.unwrap();
    assert_eq!(&*pulled.bytes, &component[..]);
    assert_eq!(pulled.digest, pushed.digest);
}

/// A component pulled with a tenant's credentials is in the host's cache,
/// but only that source (repository and credentials) gets it from there:
/// another pull of the same digest, anonymous or with other credentials,
/// asks the registry, which refuses it (Kubernetes' `IfNotPresent` problem,
/// closed as `AlwaysPullImages` closes it).
#[tokio::test]
async fn a_cached_private_component_is_served_only_to_the_credentials_that_pulled_it() {
    let mut registry = OciRegistry::start_with_auth("tenant-a", "s3cret").await;
    let component = b"\0asm-private".to_vec();
    let pushed = registry.push("team-a/private:1", &Artifact::wasm(component.clone())).await;
    let cache = tempfile::tempdir().unwrap();
    let puller = new_puller(&registry, &cache);
    let secret = registry.docker_config_json("tenant-a", "s3cret");
    let auth = RegistryAuth::from_docker_config_json(&secret, &registry.host()).unwrap().unwrap();
    let pulled = puller.pull(&pushed.digest_reference, Some(&auth)).await.unwrap();
    assert_eq!((&*pulled.bytes, pulled.from_cache), (&component[..], false));

    let anonymous = puller.pull(&pushed.digest_reference, None).await.unwrap_err();
    assert!(matches!(anonymous, OciError::Unauthorized { with_credentials: false, .. }), "{anonymous}");
    let wrong_secret = registry.docker_config_json("tenant-a", "wrong");
    let wrong = RegistryAuth::from_docker_config_json(&wrong_secret, &registry.host()).unwrap().unwrap();
    let error = puller.pull(&pushed.digest_reference, Some(&wrong)).await.unwrap_err();
    assert!(matches!(error, OciError::Unauthorized { with_credentials: true, .. }), "{error}");

    // The credentials that pulled it get it from the cache, offline.
    registry.stop();
    let again = puller.pull(&pushed.digest_reference, Some(&auth)).await.unwrap();
    assert_eq!((&*again.bytes, again.from_cache), (&component[..], true));
    let offline = puller.pull(&pushed.digest_reference, None).await.unwrap_err();
    assert_eq!(offline.reason(), "RegistryUnreachable", "{offline}");
}

#[tokio::test]
async fn artifacts_that_are_not_components_are_refused_and_nothing_is_downloaded() {
    let registry = OciRegistry::start().await;
    let cache = tempfile::tempdir().unwrap();
    let puller = new_puller(&registry, &cache);

    // A plain artifact as `oras push` makes it by default is a component.
    let plain = Artifact {
        config_media_type: "application/vnd.oci.empty.v1+json".into(),
        config: b"{}".to_vec(),
        layer_media_type: "application/vnd.oci.image.layer.v1.tar".into(),
        layer: b"\0asm-plain".to_vec(),
    };
    let pushed = registry.push("plain/artifact:1", &plain).await;
    assert_eq!(&*puller.pull(&pushed.tag_reference, None).await.unwrap().bytes, b"\0asm-plain");

    let container_layer = Artifact {
        layer_media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into(),
        ..Artifact::wasm(b"not a component".to_vec())
    };
    let image_config = Artifact {
        config_media_type: "application/vnd.oci.image.config.v1+json".into(),
        ..Artifact::wasm(b"not a component either".to_vec())
    };
    for (tag, artifact, found) in [
        ("image:layer", container_layer, "tar+gzip"),
        ("image:config", image_config, "application/vnd.oci.image.config.v1+json"),
    ] {
        let pushed = registry.push(&format!("wrong/{tag}"), &artifact).await;
        let error = puller.pull(&pushed.tag_reference, None).await.unwrap_err();
        match &error {
            OciError::WrongMediaType { found: f, expected, .. } => {
                assert!(f.contains(found), "{error}");
                assert!(
                    expected.contains("application/wasm") || expected.contains("vnd.wasm.config.v0+json"),
                    "{error}"
                );
            }
            other => panic!("{tag}: expected WrongMediaType, got {other}"),
        }
        assert!(!puller.cache().path(&pushed.layer_digest).unwrap().exists(), "{tag}: the layer was not downloaded");
    }
}

#[tokio::test]
async fn a_component_over_the_limit_is_refused_before_and_while_downloading() {
    let registry = OciRegistry::start().await;
    let cache = tempfile::tempdir().unwrap();
    let puller = OciPuller::new(OciConfig {
        max_bytes: 1000,
        plain_http: vec![registry.host()],
        ..OciConfig::new(cache.path())
    });

    // The manifest declares 2000 bytes: refused before downloading.
    let big = registry.push("big/component:1", &Artifact::wasm(vec![7u8; 2000])).await;
    let error = puller.pull(&big.tag_reference, None).await.unwrap_err();
    assert!(matches!(error, OciError::TooLarge { size: 2000, max: 1000, .. }), "{error}");
    assert_eq!(error.reason(), "TooLarge");
    assert!(!puller.cache().path(&big.layer_digest).unwrap().exists());

    // The manifest lies (declares 10 bytes of a 2000-byte blob): the
    // download stops at the limit.
    let blob = vec![9u8; 2000];
    let digest = informer_host::oci::cache::sha256_digest(&blob);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                   "digest": informer_host::oci::cache::sha256_digest(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": digest, "size": 10}],
    }))
    .unwrap();
    let lying = registry.push_raw("big/lying:1", &[b"{}", &blob], &manifest).await;
    let error = puller.pull(&lying.tag_reference, None).await.unwrap_err();
    assert!(matches!(error, OciError::TooLarge { size: 2000, max: 1000, .. }), "{error}");
    assert!(!puller.cache().path(&digest).unwrap().exists());
}

#[tokio::test]
async fn corrupt_bytes_are_a_digest_mismatch_and_a_corrupt_cache_entry_is_fetched_again() {
    let registry = OciRegistry::start().await;
    let cache = tempfile::tempdir().unwrap();
    let puller = new_puller(&registry, &cache);
    let component = b"\0asm-the-real-component".to_vec();

    // A blob corrupted in the registry's storage (same length).
    let pushed = registry.push("corrupt/registry:1", &Artifact::wasm(component.clone())).await;
    let mut corrupt = component.clone();
    corrupt[5] ^= 0xff;
    std::fs::write(registry.blob_file(&pushed.layer_digest), &corrupt).unwrap();
    let error = puller.pull(&pushed.tag_reference, None).await.unwrap_err();
    match &error {
        OciError::DigestMismatch { expected, found, .. } => {
            assert_eq!(expected, &pushed.layer_digest);
            assert_ne!(found, &pushed.layer_digest);
        }
        other => panic!("expected DigestMismatch, got {other}"),
    }
    assert_eq!(error.reason(), "DigestMismatch");
    assert!(!puller.cache().path(&pushed.layer_digest).unwrap().exists(), "corrupt bytes are never cached");

    // A cache entry corrupted on disk: never served; pulled again.
    let good = registry.push("corrupt/cache:1", &Artifact::wasm(b"\0asm-cached".to_vec())).await;
    puller.pull(&good.digest_reference, None).await.unwrap();
    let cached = puller.cache().path(&good.layer_digest).unwrap();
    std::fs::write(&cached, b"\0asm-CACHED").unwrap();
    let again = puller.pull(&good.digest_reference, None).await.unwrap();
    assert!(!again.from_cache, "the corrupt entry was not served");
    assert_eq!(&*again.bytes, b"\0asm-cached");
    assert_eq!(std::fs::read(&cached).unwrap(), b"\0asm-cached", "the cache is repaired");
}

/// A registry a tenant controls, on loopback: answers each request by
/// its path with `answer`, and counts the bytes it sent.
struct HostileRegistry {
    addr: std::net::SocketAddr,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    requests: std::sync::Arc<parking_lot::Mutex<Vec<String>>>,
}

enum Answer {
    /// A whole response: head and body.
    Whole(String),
    /// A head with `Transfer-Encoding: chunked`, then chunks for ever.
    Endless(&'static str),
}

impl HostileRegistry {
    async fn start(answer: impl Fn(&str) -> Answer + Send + Sync + 'static) -> Self {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let requests = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let answer = std::sync::Arc::new(answer);
        let (s, r) = (sent.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (sent, requests, answer) = (s.clone(), r.clone(), answer.clone());
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = tokio::io::BufReader::new(read).lines();
                    while let Ok(Some(request_line)) = lines.next_line().await {
                        while let Ok(Some(header)) = lines.next_line().await {
                            if header.is_empty() {
                                break;
                            }
                        }
                        let path = request_line.split(' ').nth(1).unwrap_or("/").to_owned();
                        requests.lock().push(request_line);
                        match answer(&path) {
                            Answer::Whole(response) => {
                                if write.write_all(response.as_bytes()).await.is_err() {
                                    return;
                                }
                                sent.fetch_add(response.len() as u64, Ordering::Relaxed);
                            }
                            Answer::Endless(head) => {
                                let _ = write.write_all(head.as_bytes()).await;
                                let chunk = format!("4000\r\n{}\r\n", "{".repeat(0x4000));
                                while write.write_all(chunk.as_bytes()).await.is_ok() {
                                    sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                                }
                                return;
                            }
                        }
                    }
                });
            }
        });
        HostileRegistry { addr, sent, requests }
    }

    fn host(&self) -> String {
        self.addr.to_string()
    }

    fn sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn whole(status: &str, headers: &str, body: &str) -> Answer {
    Answer::Whole(format!("HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n{body}", body.len()))
}

/// `oci-client` reads a manifest, a token and an error body whole: a
/// registry answering for ever would grow the host until it is killed,
/// with every tenant on it. The pull's proxy cuts it at the pull's budget
/// (here 1 MiB of component, two 4 MiB manifests and 1 MiB of slack).
#[tokio::test]
async fn an_endless_manifest_is_cut_at_the_pull_budget() {
    let registry = HostileRegistry::start(|path| match path {
        "/v2/" => whole("200 OK", "", "{}"),
        _ => Answer::Endless(
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n\
             Transfer-Encoding: chunked\r\n\r\n",
        ),
    })
    .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = OciPuller::new(OciConfig {
        max_bytes: 1 << 20,
        plain_http: vec![registry.host()],
        timeout: Duration::from_secs(60),
        ..OciConfig::new(cache.path())
    });
    let error = puller.pull(&format!("{}/evil/endless:1", registry.host()), None).await.unwrap_err();
    assert!(matches!(error, OciError::ResponseTooLarge { .. }), "{error}");
    assert_eq!(error.reason(), "TooLarge");
    let budget = (1 << 20) + (1 << 14) + (9 << 20);
    assert!(error.to_string().contains(&format!("{budget} bytes")), "{error}");
    // What the registry wrote beyond the budget sits in socket buffers,
    // not in the host.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(registry.sent() < budget + (16 << 20), "the registry kept sending: {} bytes", registry.sent());
}

/// The tenant names the registry and the registry names its token realm:
/// neither may point the host at an internal address (a metadata service,
/// the API server, a loopback port) unless the operator listed it.
#[tokio::test]
async fn a_registry_or_token_realm_at_an_internal_address_is_refused_unless_listed() {
    // Something internal a tenant would like the host to talk to.
    let internal = HostileRegistry::start(|_| whole("200 OK", "", r#"{"token":"from-inside"}"#)).await;
    let realm = format!("http://{}/token", internal.host());
    let registry = HostileRegistry::start(move |path| match path {
        "/v2/" => whole(
            "401 Unauthorized",
            &format!("WWW-Authenticate: Bearer realm=\"{realm}\",service=\"registry\"\r\n"),
            "",
        ),
        _ => whole("404 Not Found", "", ""),
    })
    .await;
    let cache = tempfile::tempdir().unwrap();
    let listed_registry_only = OciPuller::new(OciConfig {
        plain_http: vec![registry.host()],
        timeout: Duration::from_secs(30),
        ..OciConfig::new(cache.path())
    });
    let reference = format!("{}/team-b/plugin:1", registry.host());
    let error = listed_registry_only.pull(&reference, None).await.unwrap_err();
    match &error {
        OciError::AddressForbidden { destination, kind, .. } => {
            assert_eq!((destination.as_str(), *kind), (internal.host().as_str(), "loopback"));
        }
        other => panic!("expected AddressForbidden, got {other}"),
    }
    assert_eq!(error.reason(), "RegistryForbidden");
    assert!(error.to_string().contains("internal_registries"), "{error}");
    assert!(internal.requests.lock().is_empty(), "the realm was asked: {:?}", internal.requests.lock());

    // A registry at an internal address is refused the same way, before
    // any request reaches it (over HTTPS: it is not listed at all).
    let unlisted = OciPuller::new(OciConfig { timeout: Duration::from_secs(30), ..OciConfig::new(cache.path()) });
    let error = unlisted.pull(&format!("{}/team-b/plugin:1", internal.host()), None).await.unwrap_err();
    assert!(matches!(&error, OciError::AddressForbidden { kind: "loopback", .. }), "{error}");
    assert!(internal.requests.lock().is_empty(), "the registry was asked: {:?}", internal.requests.lock());

    // Listed by the operator, the realm is asked (and its token used).
    let listed = OciPuller::new(OciConfig {
        plain_http: vec![registry.host()],
        internal_registries: vec![internal.host()],
        timeout: Duration::from_secs(30),
        ..OciConfig::new(cache.path())
    });
    let error = listed.pull(&reference, None).await.unwrap_err();
    assert!(matches!(error, OciError::NotFound { .. }), "{error}");
    assert_eq!(internal.requests.lock().len(), 1, "{:?}", internal.requests.lock());
}
