//! Registry credentials, read from the `.dockerconfigjson` key of a
//! `kubernetes.io/dockerconfigjson` Secret (what `kubectl create secret
//! docker-registry` writes, and what kubelet reads for image pulls).
//!
//! The format: `{"auths": {"<registry>": {"username": "...", "password":
//! "..."}}}`, or `"auth": base64("username:password")` in place of the
//! two. A registry key may be a bare host (`ghcr.io`, `127.0.0.1:5000`) or a
//! URL (`https://index.docker.io/v1/`); both match the reference's host.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::Deserialize;

use super::OciError;

/// Username and password for one registry (HTTP Basic, or the token
/// exchange a registry asks for with them). `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAuth").field("username", &self.username).field("password", &"<redacted>").finish()
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuthEntry>,
}

#[derive(Deserialize)]
struct DockerAuthEntry {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    auth: Option<String>,
}

impl RegistryAuth {
    /// Basic credentials.
    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> Self {
        RegistryAuth { username: username.into(), password: password.into() }
    }

    /// The credentials for `registry_host` (`host` or `host:port`, as in
    /// the OCI reference) in a docker config JSON; `Ok(None)` when it has
    /// no entry for that registry (an anonymous pull, as kubelet does).
    pub fn from_docker_config_json(bytes: &[u8], registry_host: &str) -> Result<Option<RegistryAuth>, OciError> {
        let config: DockerConfig =
            serde_json::from_slice(bytes).map_err(|e| OciError::Credentials { reason: e.to_string() })?;
        let wanted = normalize_host(registry_host);
        let Some((key, entry)) = config.auths.iter().find(|(key, _)| normalize_host(key) == wanted) else {
            return Ok(None);
        };
        let invalid = |reason: &str| OciError::Credentials { reason: format!("auths[{key:?}]: {reason}") };
        match (&entry.username, &entry.password, &entry.auth) {
            (Some(username), Some(password), _) if !username.is_empty() => {
                Ok(Some(RegistryAuth::basic(username, password)))
            }
            (_, _, Some(auth)) if !auth.is_empty() => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .map_err(|e| invalid(&format!("`auth` is not base64: {e}")))?;
                let decoded = String::from_utf8(decoded).map_err(|_| invalid("`auth` is not UTF-8 once decoded"))?;
                let (username, password) =
                    decoded.split_once(':').ok_or_else(|| invalid("`auth` is not base64 of `username:password`"))?;
                Ok(Some(RegistryAuth::basic(username, password)))
            }
            _ => Err(invalid("neither `username` and `password` nor `auth` is set")),
        }
    }

    pub(super) fn to_client(&self) -> oci_client::secrets::RegistryAuth {
        oci_client::secrets::RegistryAuth::Basic(self.username.clone(), self.password.clone())
    }
}

/// A registry key or host reduced to `host[:port]`, lower case, with
/// Docker Hub's aliases folded into `docker.io`.
fn normalize_host(key: &str) -> String {
    let key = key.trim();
    let key = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn username_and_password_or_base64_auth() {
        let json = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
            "127.0.0.1:5000": {"username": "alice", "password": "p:w"},
            "ghcr.io": {"username": "", "password": "", "auth": "Ym9iOnRva2Vu"}
        }}"#;
        let get = |host| RegistryAuth::from_docker_config_json(json, host).unwrap();
        assert_eq!(get("docker.io"), Some(RegistryAuth::basic("hub", "secret")));
        assert_eq!(get("127.0.0.1:5000"), Some(RegistryAuth::basic("alice", "p:w")));
        assert_eq!(get("GHCR.io"), Some(RegistryAuth::basic("bob", "token")));
        assert_eq!(get("quay.io"), None);
        assert_eq!(get("127.0.0.1:5001"), None);
    }

    #[test]
    fn broken_configs_are_errors_naming_the_entry() {
        for (json, needle) in [
            (&br#"{"auths": {"r.io": {"auth": "!!"}}}"#[..], "not base64"),
            (br#"{"auths": {"r.io": {"auth": "bm9jb2xvbg=="}}}"#, "username:password"),
            (br#"{"auths": {"r.io": {}}}"#, "neither"),
            (br#"not json"#, "invalid docker config JSON"),
        ] {
            let error = RegistryAuth::from_docker_config_json(json, "r.io").unwrap_err();
            assert!(error.to_string().contains(needle), "{error}");
            assert_eq!(error.reason(), "InvalidPullSecret");
        }
        assert!(
            !format!("{:?}", RegistryAuth::basic("u", "hunter2")).contains("hunter2"),
            "Debug must not show the password"
        );
    }
}
