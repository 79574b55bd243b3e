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
