//! What can go wrong pulling a component, in terms a person can act on.
//!
//! Every variant names the reference it was pulling, and
//! [`OciError::reason`] gives the short CamelCase reason a status
//! condition carries (`NotFound`, `Unauthorized`, ...).

use std::path::PathBuf;
use std::time::Duration;

/// A failed pull (or a docker-config-JSON that could not be read).
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The reference does not parse, or pins a digest that is not sha256.
    #[error("invalid OCI reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    /// The registry has no such repository, tag, manifest or blob.
    #[error("{reference}: not found in the registry")]
    NotFound { reference: String },
    /// The registry refused the credentials (or asked for some and none
    /// were given).
    #[error(
        "{reference}: unauthorized: the registry refused {}; check the pull secret ({detail})",
        if *.with_credentials { "the credentials" } else { "an anonymous pull" }
    )]
    Unauthorized {
        reference: String,
        /// Whether credentials were sent.
        with_credentials: bool,
        detail: String,
    },
    /// The artifact is not a wasm component: its manifest, config or layer
    /// has a media type this host does not load.
    #[error("{reference}: wrong media type: found {found}, expected {expected}")]
    WrongMediaType { reference: String, found: String, expected: String },
    /// The bytes (or the manifest) do not hash to the digest they were
    /// asked for under: a corrupt registry, cache or transfer.
    #[error("{reference}: digest mismatch: expected {expected}, found {found}")]
    DigestMismatch { reference: String, expected: String, found: String },
    /// The component is larger than the configured limit.
    #[error("{reference}: component too large: {size} bytes, the limit is {max}")]
    TooLarge { reference: String, size: u64, max: u64 },
    /// The registry, its token realm or a redirect resolves only to an
    /// address off the public internet, and the operator did not list it
    /// as an internal registry.
    #[error(
        "{reference}: the host may not pull from {destination}: it resolves to {address}, a {kind} address \
         (an operator lists in-cluster registries in `internal_registries`)"
    )]
    AddressForbidden { reference: String, destination: String, address: std::net::IpAddr, kind: &'static str },
    /// The registry sent more than a pull may receive (an endless manifest,
    /// token or error body).
    #[error("{reference}: the registry sent more than the {max} bytes one pull may receive")]
    ResponseTooLarge { reference: String, max: u64 },
    /// The pull did not finish in time.
    #[error("{reference}: pull timed out after {after:?}")]
    Timeout { reference: String, after: Duration },
    /// The registry answered with an error not covered above.
    #[error("{reference}: registry error: {message}")]
    Registry { reference: String, message: String },
    /// The registry could not be reached (connection, TLS, protocol).
    #[error("{reference}: cannot reach the registry: {message}")]
    Transport { reference: String, message: String },
    /// The on-disk cache could not be written or read.
    #[error("component cache {}: {source}", path.display())]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A docker-config-JSON (`.dockerconfigjson`) that does not parse.
    #[error("invalid docker config JSON: {reason}")]
    Credentials { reason: String },
}

impl OciError {
    /// The CamelCase reason of a status condition for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            OciError::InvalidReference { .. } => "InvalidReference",
            OciError::NotFound { .. } => "NotFound",
            OciError::Unauthorized { .. } => "Unauthorized",
            OciError::WrongMediaType { .. } => "WrongMediaType",
            OciError::DigestMismatch { .. } => "DigestMismatch",
            OciError::TooLarge { .. } => "TooLarge",
            OciError::AddressForbidden { .. } => "RegistryForbidden",
            OciError::ResponseTooLarge { .. } => "TooLarge",
            OciError::Timeout { .. } => "PullTimeout",
            OciError::Registry { .. } => "RegistryError",
            OciError::Transport { .. } => "RegistryUnreachable",
            OciError::Cache { .. } => "CacheError",
            OciError::Credentials { .. } => "InvalidPullSecret",
        }
    }

    /// Whether retrying the same pull later may succeed (network, registry
    /// trouble, timeouts) as opposed to needing a change by a person.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            OciError::Timeout { .. } | OciError::Registry { .. } | OciError::Transport { .. } | OciError::Cache { .. }
        )
    }

    /// Maps an `oci-client` error of a pull of `reference`.
    pub(super) fn from_client(
        reference: &str,
        with_credentials: bool,
        error: oci_client::errors::OciDistributionError,
    ) -> Self {
        use oci_client::errors::{OciDistributionError as E, OciErrorCode as C};
        let reference = reference.to_owned();
        match error {
            E::ImageManifestNotFoundError(_) => OciError::NotFound { reference },
            E::UnauthorizedError { url } => {
                OciError::Unauthorized { reference, with_credentials, detail: format!("401 from {url}") }
            }
            E::AuthenticationFailure(message) => {
                OciError::Unauthorized { reference, with_credentials, detail: message }
            }
            E::RegistryError { envelope, url } => {
                let codes: Vec<&C> = envelope.errors.iter().map(|e| &e.code).collect();
                let message = format!("{envelope} ({url})");
                if codes.iter().any(|c| matches!(c, C::ManifestUnknown | C::BlobUnknown | C::NameUnknown | C::NotFound))
                {
                    OciError::NotFound { reference }
                } else if codes.iter().any(|c| matches!(c, C::Unauthorized | C::Denied)) {
                    OciError::Unauthorized { reference, with_credentials, detail: message }
                } else {
                    OciError::Registry { reference, message }
                }
            }
            E::ServerError { code: 404, .. } => OciError::NotFound { reference },
            E::ServerError { code: code @ (401 | 403), url, message } => {
                OciError::Unauthorized { reference, with_credentials, detail: format!("{code} from {url}: {message}") }
            }
            E::DigestError(oci_client::errors::DigestError::VerificationError { expected, actual }) => {
                OciError::DigestMismatch { reference, expected, found: actual }
            }
            E::RequestError(e) => OciError::Transport { reference, message: error_chain(&e) },
            other => OciError::Registry { reference, message: other.to_string() },
        }
    }
}

/// An error and its sources on one line (reqwest hides the useful part,
/// "connection refused", in its source chain).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}
