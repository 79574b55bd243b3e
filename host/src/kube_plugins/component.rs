//! Fetching the component a `Plugin` names: a key of a ConfigMap or Secret
//! in the plugin's namespace, or an OCI artifact.
//!
//! This module owns reading those bytes, bounding their size and naming
//! their digest (`sha256:` of the bytes of a ConfigMap or Secret key; the
//! manifest digest of an OCI artifact), and the condition a failure becomes.
//! It never compiles or loads a component; the registry protocol and the
//! blob cache are [`crate::oci`]'s.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use crate::oci::{OciPuller, RegistryAuth};

use super::crd::{ComponentSource, KeySelector};
use super::policy::Refusal;

/// A component's bytes and identity.
pub struct Fetched {
    pub bytes: Vec<u8>,
    /// `sha256:<hex>`; a new one is a new version.
    pub digest: String,
    /// Where it came from, for logs and the registry's `file`.
    pub origin: String,
}

/// Reads the component of a plugin in `namespace`.
pub async fn fetch(
    client: &Client,
    puller: Option<&OciPuller>,
    namespace: &str,
    source: &ComponentSource,
    max_bytes: usize,
) -> Result<Fetched, Refusal> {
    match (&source.oci, &source.config_map, &source.secret) {
        (Some(oci), None, None) => {
            let Some(puller) = puller else {
                return Err(Refusal {
                    reason: "ComponentUnavailable",
                    message: format!(
                        "this host pulls no OCI components ({:?}); use spec.component.configMap or secret",
                        oci.reference
                    ),
                });
            };
            let auth = match &oci.pull_secret {
                Some(secret) => pull_credentials(client, namespace, secret, &oci.reference).await?,
                None => None,
            };
            let pulled = puller
                .pull(&oci.reference, auth.as_ref())
                .await
                .map_err(|e| Refusal { reason: e.reason(), message: e.to_string() })?;
            if pulled.bytes.len() > max_bytes {
                return Err(too_large(&oci.reference, pulled.bytes.len(), max_bytes));
            }
            Ok(Fetched {
                bytes: pulled.bytes.to_vec(),
                digest: pulled.digest,
                origin: format!("oci://{}", oci.reference),
            })
        }
        (None, Some(key), None) => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let cm = get(&api, "ConfigMap", namespace, &key.name).await?;
            let bytes = cm.binary_data.as_ref().and_then(|d| d.get(&key.key)).map(|b| b.0.clone());
            let bytes = bytes.ok_or_else(|| missing_key("ConfigMap", namespace, key, "binaryData"))?;
            sized(bytes, max_bytes, format!("configmap/{namespace}/{}/{}", key.name, key.key))
        }
        (None, None, Some(key)) => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            let secret = get(&api, "Secret", namespace, &key.name).await?;
            let bytes = secret.data.as_ref().and_then(|d| d.get(&key.key)).map(|b| b.0.clone());
            let bytes = bytes.ok_or_else(|| missing_key("Secret", namespace, key, "data"))?;
            sized(bytes, max_bytes, format!("secret/{namespace}/{}/{}", key.name, key.key))
        }
        _ => Err(Refusal {
            reason: "InvalidSpec",
            message: "spec.component must set exactly one of oci, configMap, secret".into(),
        }),
    }
}

async fn get<K>(api: &Api<K>, kind: &str, namespace: &str, name: &str) -> Result<K, Refusal>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(Some(o)) => Ok(o),
        Ok(None) => Err(Refusal {
            reason: "ComponentNotFound",
            message: format!("{kind} {name:?} not found in namespace {namespace:?}"),
        }),
        Err(kube::Error::Api(s)) if s.code == 403 => Err(Refusal {
            reason: "ComponentForbidden",
            message: format!("the host may not read {kind} {name:?} in namespace {namespace:?}: {}", s.message),
        }),
        Err(e) => Err(Refusal {
            reason: "ComponentUnavailable",
            message: format!("reading {kind} {name:?} in namespace {namespace:?}: {e}"),
        }),
    }
}

fn missing_key(kind: &str, namespace: &str, key: &KeySelector, field: &str) -> Refusal {
    Refusal {
        reason: "ComponentNotFound",
        message: format!("{kind} {:?} in namespace {namespace:?} has no key {:?} in {field}", key.name, key.key),
    }
}

/// The credentials for the registry of `reference` in the
/// `kubernetes.io/dockerconfigjson` Secret `name`; none when it has no
/// entry for that registry (an anonymous pull, as the kubelet does).
async fn pull_credentials(
    client: &Client,
    namespace: &str,
    name: &str,
    reference: &str,
) -> Result<Option<RegistryAuth>, Refusal> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = get(&api, "Secret", namespace, name).await?;
    let invalid = |why: String| Refusal {
        reason: "InvalidPullSecret",
        message: format!("pull Secret {name:?} in namespace {namespace:?}: {why}"),
    };
    let json = secret
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .ok_or_else(|| invalid("no `.dockerconfigjson` key (type kubernetes.io/dockerconfigjson)".into()))?;
    let registry = reference.split('/').next().unwrap_or_default();
    RegistryAuth::from_docker_config_json(&json.0, registry).map_err(|e| invalid(e.to_string()))
}

fn too_large(origin: &str, size: usize, max: usize) -> Refusal {
    Refusal {
        reason: "ComponentTooLarge",
        message: format!("{origin} is {size} bytes, more than the host's limit of {max}"),
    }
}

fn sized(bytes: Vec<u8>, max: usize, origin: String) -> Result<Fetched, Refusal> {
    if bytes.len() > max {
        return Err(too_large(&origin, bytes.len(), max));
    }
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    Ok(Fetched { bytes, digest, origin })
}
