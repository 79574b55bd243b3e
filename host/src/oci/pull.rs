//! [`OciPuller`]: a pull of one component (manifest, checks, layer) through
//! the blob cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use sha2::{Digest as _, Sha256};

use super::cache::{BlobCache, sha256_digest, sha256_hex};
use super::egress::{Egress, EgressPolicy, Stopped};
use super::media::{self, Layer};
use super::{OciError, RegistryAuth};

/// The largest manifest read from the cache (the distribution registry
/// refuses manifests over 4 MiB too).
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// How an [`OciPuller`] pulls.
#[derive(Debug, Clone)]
pub struct OciConfig {
    /// Root of the blob cache (`<cache_dir>/blobs/sha256/<hex>`).
    pub cache_dir: PathBuf,
    /// The largest component accepted, in bytes: checked against the
    /// manifest before downloading and counted while downloading.
    pub max_bytes: u64,
    /// Registries (`host:port`, as written in references) spoken to over
    /// plain HTTP instead of HTTPS: for a loopback or in-cluster registry
    /// without TLS. Empty in production. They count as internal registries.
    pub plain_http: Vec<String>,
    /// Registries (`host` or `host:port`) a pull may reach although they
    /// resolve to a private, loopback or link-local address: in-cluster
    /// registries. Every other destination must be on the public internet
    /// (see [`super::egress`]).
    pub internal_registries: Vec<String>,
    /// The longest one pull may take, end to end.
    pub timeout: Duration,
    /// The most bytes the blob cache keeps on disk: past it, the blobs
    /// used least recently are removed (a tenant pulling new digests again
    /// and again must not fill the host's disk).
    pub cache_max_bytes: u64,
}

impl OciConfig {
    /// Defaults: 64 MiB components, two minutes per pull, HTTPS only, a
    /// 1 GiB cache.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        OciConfig {
            cache_dir: cache_dir.into(),
            max_bytes: 64 << 20,
            plain_http: Vec::new(),
            internal_registries: Vec::new(),
            timeout: Duration::from_secs(120),
            cache_max_bytes: 1 << 30,
        }
    }
}

/// A component pulled (or found in the cache).
#[derive(Debug, Clone)]
pub struct PulledComponent {
    /// `sha256:<hex>` of the manifest: the artifact's identity (what a
    /// reference by digest names, and what a status reports as loaded).
    pub digest: String,
    /// `sha256:<hex>` of the component's bytes (the layer).
    pub layer_digest: String,
    /// The component (verified against `layer_digest`).
    pub bytes: Arc<[u8]>,
    /// Whether the bytes came from the cache rather than a download. A
    /// reference by digest whose manifest and layer are cached is served
    /// with no network at all; a tag is always resolved by the registry.
    pub from_cache: bool,
}

/// Pulls components from OCI registries into a content-addressed cache.
///
/// Each pull uses its own `oci-client` client: the client remembers the
/// first credentials and tokens it saw per registry, and one tenant's
/// credentials must never serve another tenant's pull.
#[derive(Debug)]
pub struct OciPuller {
    config: OciConfig,
    cache: BlobCache,
}

impl OciPuller {
    /// A puller. Installs rustls' `ring` provider as the process default if
    /// none is installed (the registry client needs one; kube uses `ring`).
    pub fn new(config: OciConfig) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        OciPuller { cache: BlobCache::new(&config.cache_dir).with_max_bytes(config.cache_max_bytes), config }
    }

    /// The configuration.
    pub fn config(&self) -> &OciConfig {
        &self.config
    }

    /// The blob cache (its files: [`BlobCache::path`]).
    pub fn cache(&self) -> &BlobCache {
        &self.cache
    }

    /// Pulls the component `reference` names (`registry/repo:tag` or
    /// `registry/repo@sha256:<hex>`), with `auth` if given (else
    /// anonymously). A reference by digest already cached is served from
    /// the cache without the network.
    pub async fn pull(&self, reference: &str, auth: Option<&RegistryAuth>) -> Result<PulledComponent, OciError> {
        let parsed = parse_reference(reference)?;
        let source = source_of(&parsed, auth);
        if let Some(digest) = parsed.digest()
            && let Some(hit) = self.cached(reference, digest, &source).await?
        {
            tracing::debug!(reference, digest, "component served from the cache");
            return Ok(hit);
        }
        let egress = Egress::start(self.egress_policy()).await.map_err(|e| OciError::Transport {
            reference: reference.to_owned(),
            message: format!("cannot start the egress proxy: {e}"),
        })?;
        let pulled =
            tokio::time::timeout(self.config.timeout, self.pull_remote(reference, &parsed, auth, &source, &egress))
                .await
                .map_err(|_| OciError::Timeout { reference: reference.to_owned(), after: self.config.timeout })
                .flatten()
                // What the proxy refused or cut is the cause, whatever
                // the registry client made of it.
                .map_err(|e| match egress.stopped() {
                    Some(why) => stopped_error(reference, why),
                    None => e,
                })?;
        tracing::info!(
            reference,
            digest = pulled.digest,
            bytes = pulled.bytes.len(),
            from_cache = pulled.from_cache,
            "pulled component"
        );
        Ok(pulled)
    }

    /// The manifest `digest` and its layer, both from the cache, when
    /// `source` fetched both before.
    async fn cached(&self, reference: &str, digest: &str, source: &str) -> Result<Option<PulledComponent>, OciError> {
        if !self.cache.fetched_by(digest, source).await {
            return Ok(None);
        }
        let Some(manifest) = self.cache.get(digest, MAX_MANIFEST_BYTES).await? else {
            return Ok(None);
        };
        let layer = media::component_layer(reference, &manifest)?;
        self.check_size(reference, layer.size)?;
        if !self.cache.fetched_by(&layer.digest, source).await {
            return Ok(None);
        }
        let Some(bytes) = self.cache.get(&layer.digest, layer.size).await? else {
            return Ok(None);
        };
        Ok(Some(PulledComponent {
            digest: digest.to_owned(),
            layer_digest: layer.digest,
            bytes: bytes.into(),
            from_cache: true,
        }))
    }

    async fn pull_remote(
        &self,
        reference: &str,
        parsed: &Reference,
        auth: Option<&RegistryAuth>,
        source: &str,
        egress: &Egress,
    ) -> Result<PulledComponent, OciError> {
        let client_error = |e| OciError::from_client(reference, auth.is_some(), e);
        let client = self.client(reference, egress)?;
        let client_auth = auth.map(RegistryAuth::to_client).unwrap_or(oci_client::secrets::RegistryAuth::Anonymous);
        let (manifest, _) =
            client.pull_manifest_raw(parsed, &client_auth, media::MANIFEST_MEDIA_TYPES).await.map_err(client_error)?;
        let digest = sha256_digest(&manifest);
        if let Some(expected) = parsed.digest()
            && expected != digest
        {
            return Err(OciError::DigestMismatch {
                reference: reference.to_owned(),
                expected: expected.to_owned(),
                found: digest,
            });
        }
        let layer = media::component_layer(reference, &manifest)?;
        self.check_size(reference, layer.size)?;
        self.cache.put(&digest, &manifest).await?;
        self.cache.record_source(&digest, source).await?;

        // A layer someone else fetched is not this source's to take: its
        // manifest (from this source's registry) may name any digest.
        if self.cache.fetched_by(&layer.digest, source).await
            && let Some(bytes) = self.cache.get(&layer.digest, layer.size).await?
        {
            return Ok(PulledComponent { digest, layer_digest: layer.digest, bytes: bytes.into(), from_cache: true });
        }
        let bytes = self.download(reference, &client, parsed, &layer, auth.is_some()).await?;
        self.cache.put(&layer.digest, &bytes).await?;
        self.cache.record_source(&layer.digest, source).await?;
        Ok(PulledComponent { digest, layer_digest: layer.digest, bytes: bytes.into(), from_cache: false })
    }

    /// Downloads the layer, stopping as soon as it exceeds the limit or
    /// its declared size, and checks its digest.
    async fn download(
        &self,
        reference: &str,
        client: &oci_client::Client,
        parsed: &Reference,
        layer: &Layer,
        with_credentials: bool,
    ) -> Result<Vec<u8>, OciError> {
        let mismatch = |found: String| OciError::DigestMismatch {
            reference: reference.to_owned(),
            expected: layer.digest.clone(),
            found,
        };
        let mut stream = client
            .pull_blob_stream(parsed, &layer.descriptor())
            .await
            .map_err(|e| OciError::from_client(reference, with_credentials, e))?;
        if let Some(length) = stream.content_length {
            self.check_size(reference, length)?;
        }
        let mut bytes = Vec::with_capacity(layer.size.min(self.config.max_bytes) as usize);
        let mut hasher = Sha256::new();
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                // oci-client's own digest check fails the stream at its end;
                // report what arrived in our terms.
                Err(_) if bytes.len() as u64 == layer.size => {
                    let found = format!("sha256:{}", hex::encode(hasher.finalize()));
                    return Err(mismatch(found));
                }
                Err(e) => {
                    return Err(OciError::Transport {
                        reference: reference.to_owned(),
                        message: format!("downloading {}: {e}", layer.digest),
                    });
                }
            };
            let received = (bytes.len() + chunk.len()) as u64;
            self.check_size(reference, received)?;
            if received > layer.size {
                return Err(mismatch(format!("more than the {} bytes the manifest declares", layer.size)));
            }
            hasher.update(&chunk);
            bytes.extend_from_slice(&chunk);
        }
        let found = format!("sha256:{}", hex::encode(hasher.finalize()));
        if found != layer.digest {
            return Err(mismatch(found));
        }
        if bytes.len() as u64 != layer.size {
            return Err(mismatch(format!("{} bytes, the manifest declares {}", bytes.len(), layer.size)));
        }
        Ok(bytes)
    }

    fn check_size(&self, reference: &str, size: u64) -> Result<(), OciError> {
        if size > self.config.max_bytes {
            return Err(OciError::TooLarge { reference: reference.to_owned(), size, max: self.config.max_bytes });
        }
        Ok(())
    }

    /// Where a pull may connect and how much it may receive: a component,
    /// two manifests (one by tag, one by digest) and room for tokens,
    /// headers and TLS framing.
    fn egress_policy(&self) -> EgressPolicy {
        let max = self.config.max_bytes;
        EgressPolicy {
            internal: self.config.plain_http.iter().chain(&self.config.internal_registries).cloned().collect(),
            max_bytes: max.saturating_add(max / 64).saturating_add(2 * MAX_MANIFEST_BYTES + (1 << 20)),
        }
    }

    fn client(&self, reference: &str, egress: &Egress) -> Result<oci_client::Client, OciError> {
        let protocol = if self.config.plain_http.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(self.config.plain_http.clone())
        };
        let config = ClientConfig {
            protocol,
            connect_timeout: Some(self.config.timeout.min(Duration::from_secs(10))),
            read_timeout: Some(self.config.timeout),
            // An index is never a component: do not pick a platform from it.
            platform_resolver: None,
            // Every request, to the registry, its token realm or a
            // redirect, goes through the pull's proxy.
            https_proxy: Some(egress.url()),
            http_proxy: Some(egress.url()),
            ..ClientConfig::default()
        };
        oci_client::Client::try_from(config).map_err(|e| OciError::Transport {
            reference: reference.to_owned(),
            message: format!("cannot build the registry client: {e}"),
        })
    }
}

fn stopped_error(reference: &str, why: Stopped) -> OciError {
    let reference = reference.to_owned();
    match why {
        Stopped::Forbidden { destination, address, kind } => {
            OciError::AddressForbidden { reference, destination, address, kind }
        }
        Stopped::TooMuchData { max } => OciError::ResponseTooLarge { reference, max },
        Stopped::Unreachable { message } => OciError::Transport { reference, message },
    }
}

/// Who fetches a pull's blobs: a hash of the registry, the repository and
/// the credentials (their hash: no secret reaches the cache's files).
fn source_of(parsed: &Reference, auth: Option<&RegistryAuth>) -> String {
    let credentials = auth.map_or_else(
        || "anonymous".to_owned(),
        |a| hex::encode(Sha256::digest(format!("{}\n{}", a.username, a.password))),
    );
    let who = format!("{}/{}\n{credentials}", parsed.resolve_registry(), parsed.repository());
    hex::encode(Sha256::digest(who))
}

/// Parses `reference`; a pinned digest must be sha256 (the cache's names).
fn parse_reference(reference: &str) -> Result<Reference, OciError> {
    let invalid = |reason: String| OciError::InvalidReference { reference: reference.to_owned(), reason };
    let parsed = Reference::try_from(reference).map_err(|e| invalid(e.to_string()))?;
    if let Some(digest) = parsed.digest()
        && sha256_hex(digest).is_none()
    {
        return Err(invalid(format!("digest {digest} is not sha256:<64 lowercase hex>")));
    }
    Ok(parsed)
}
