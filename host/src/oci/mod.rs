//! Components pulled from OCI registries.
//!
//! Owns: resolving an OCI reference (by tag or by digest) to the bytes of
//! a wasm component, through a maintained registry client (`oci-client`);
//! deciding which artifacts are components ([`media`]); verifying digests
//! and sizes; the content-addressed blob cache on disk ([`cache`]);
//! registry credentials from a docker-config-JSON Secret
//! ([`RegistryAuth`]); and errors a person can act on ([`OciError`], with
//! a status-condition reason).
//!
//! Does not own: compiling the bytes (the plugin runtime, whose compile
//! cache is keyed by the same content), nor reading the Secret from the
//! cluster (the caller passes its `.dockerconfigjson` bytes).
//!
//! ```no_run
//! # async fn demo(secret: &[u8]) -> Result<(), informer_host::oci::OciError> {
//! use informer_host::oci::{OciConfig, OciPuller, RegistryAuth};
//! let puller = OciPuller::new(OciConfig::new("/var/cache/informer-host/oci"));
//! let auth = RegistryAuth::from_docker_config_json(secret, "ghcr.io")?;
//! let component = puller.pull("ghcr.io/acme/reloader:1.2.0", auth.as_ref()).await?;
//! println!("{} ({} bytes)", component.digest, component.bytes.len());
//! # Ok(()) }
//! ```

pub mod cache;
mod credentials;
pub mod egress;
mod error;
pub mod media;
mod pull;

pub use credentials::RegistryAuth;
pub use error::OciError;
pub use pull::{OciConfig, OciPuller, PulledComponent};
