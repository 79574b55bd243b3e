//! `[host]` (process-wide settings that command-line flags override) and
//! `[admin]` (the admin API: where it listens, its token, what a load may
//! name).

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use super::{Cx, DEFAULT_ADMIN_ADDR, Fields, Location, S};

/// `[host]`: process-wide settings (command-line flags override them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostSettings {
    pub metrics_addr: Option<SocketAddr>,
    /// Where compiled components are cached (resolved against the config file).
    pub cache_dir: Option<PathBuf>,
    /// The most bytes of compiled code `cache_dir` keeps.
    pub cache_max_size: Option<u64>,
    pub log_format: Option<LogFormat>,
    /// How long in-flight calls may take to finish at shutdown.
    pub shutdown_grace: Option<Duration>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// `[admin]`: the authenticated admin API (see [`crate::admin_api`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AdminSettings {
    /// Where it listens (loopback unless `allow_remote = true`).
    pub addr: SocketAddr,
    pub allow_remote: bool,
    /// The bearer token every request must carry.
    pub token: Secret,
    /// Where the token came from, for messages: `token_file /etc/x` or
    /// `token_env NAME`.
    pub token_source: String,
    /// Largest accepted request body, in bytes.
    pub max_upload: usize,
    /// Directories whose components loads and swaps may name by path (each
    /// must exist; empty: components only by upload).
    pub wasm_dirs: Vec<PathBuf>,
    /// Where `[admin]` is.
    pub location: Location,
}

/// A secret string whose `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

pub(super) struct RawAdmin {
    addr: Option<S<String>>,
    allow_remote: Option<S<bool>>,
    token_file: Option<S<String>>,
    token_env: Option<S<String>>,
    max_upload: Option<S<toml::Value>>,
    wasm_dirs: Option<Vec<S<String>>>,
}

impl RawAdmin {
    pub(super) fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(f, RawAdmin, [], [addr, allow_remote, token_file, token_env, max_upload, wasm_dirs])
    }
}

pub(super) struct RawHost {
    metrics_addr: Option<S<String>>,
    cache_dir: Option<S<String>>,
    cache_max_size: Option<S<String>>,
    log_format: Option<S<String>>,
    shutdown_grace: Option<S<String>>,
}

impl RawHost {
    pub(super) fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(f, RawHost, [], [metrics_addr, cache_dir, cache_max_size, log_format, shutdown_grace])
    }
}

impl<'a> Cx<'a> {
    pub(super) fn admin(&mut self, r: RawAdmin, header: Range<usize>) -> Option<AdminSettings> {
        let before = self.problems.len();
        let location = self.location(header.start);
        let allow_remote = r.allow_remote.as_ref().is_some_and(|v| *v.get_ref());
        let addr = match &r.addr {
            None => DEFAULT_ADMIN_ADDR.parse().ok(),
            Some(v) => match v.get_ref().parse::<SocketAddr>() {
                Ok(a) => {
                    if !a.ip().is_loopback() && !allow_remote {
                        self.error(
                            v.span(),
                            format!(
                                "`addr` {a} is not a loopback address; the admin API loads code into this \
                                 process, so serving it beyond this machine needs `allow_remote = true`"
                            ),
                        );
                    }
                    Some(a)
                }
                Err(e) => {
                    self.error(v.span(), format!("`addr`: {e} (expected e.g. \"{DEFAULT_ADMIN_ADDR}\")"));
                    None
                }
            },
        };
        let token = match (&r.token_file, &r.token_env) {
            (Some(_), Some(e)) => {
                self.error(e.span(), "give either `token_file` or `token_env`, not both");
                None
            }
            (None, None) => {
                self.error(
                    header.clone(),
                    "`[admin]` needs `token_file` or `token_env`: the bearer token every request must carry",
                );
                None
            }
            (Some(f), None) => {
                let path = self.path(f.get_ref());
                match std::fs::read_to_string(&path) {
                    Ok(t) if t.trim().is_empty() => {
                        self.error(f.span(), format!("`token_file` {} is empty", path.display()));
                        None
                    }
                    Ok(t) => Some((Secret(t.trim().to_string()), format!("token_file {}", path.display()))),
                    Err(e) => {
                        self.error(f.span(), format!("`token_file`: cannot read {}: {e}", path.display()));
                        None
                    }
                }
            }
            (None, Some(e)) => {
                let name = e.get_ref();
                match std::env::var(name) {
                    Ok(t) if t.trim().is_empty() => {
                        self.error(e.span(), format!("`token_env`: environment variable {name} is empty"));
                        None
                    }
                    Ok(t) => Some((Secret(t.trim().to_string()), format!("token_env {name}"))),
                    Err(std::env::VarError::NotPresent) => {
                        self.error(e.span(), format!("`token_env`: environment variable {name} is not set"));
                        None
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        self.error(e.span(), format!("`token_env`: environment variable {name} is not valid UTF-8"));
                        None
                    }
                }
            }
        };
        let max_upload = match &r.max_upload {
            Some(v) => self.size(v, "max_upload"),
            None => Some(crate::admin_api::DEFAULT_MAX_UPLOAD),
        };
        let mut wasm_dirs = Vec::new();
        for dir in r.wasm_dirs.iter().flatten() {
            let path = self.path(dir.get_ref());
            // Checked now, so a typo is an error at start, not a 403 later.
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => wasm_dirs.push(path),
                Ok(_) => self.error(dir.span(), format!("`wasm_dirs`: {} is not a directory", path.display())),
                Err(e) => self.error(dir.span(), format!("`wasm_dirs`: cannot read {}: {e}", path.display())),
            }
        }
        if self.problems.len() != before {
            return None;
        }
        let ((token, token_source), addr, max_upload) = (token?, addr?, max_upload?);
        Some(AdminSettings { addr, allow_remote, token, token_source, max_upload, wasm_dirs, location })
    }

    pub(super) fn host(&mut self, r: RawHost) -> HostSettings {
        let mut h = HostSettings::default();
        if let Some(v) = &r.metrics_addr {
            match v.get_ref().parse::<SocketAddr>() {
                Ok(a) => h.metrics_addr = Some(a),
                Err(e) => self.error(v.span(), format!("`metrics_addr`: {e} (expected e.g. \"127.0.0.1:9464\")")),
            }
        }
        if let Some(v) = &r.cache_dir {
            h.cache_dir = Some(self.path(v.get_ref()));
        }
        if let Some(v) = &r.cache_max_size {
            match super::parse_size(v.get_ref()) {
                Ok(n) => h.cache_max_size = Some(n as u64),
                Err(e) => self.error(v.span(), format!("`cache_max_size`: {e}")),
            }
        }
        if let Some(v) = &r.log_format {
            match LogFormat::parse(v.get_ref()) {
                Some(f) => h.log_format = Some(f),
                None => {
                    self.error(v.span(), format!("unknown log_format {:?}, expected \"text\" or \"json\"", v.get_ref()))
                }
            }
        }
        if let Some(v) = &r.shutdown_grace {
            h.shutdown_grace = self.duration(v, "shutdown_grace");
        }
        h
    }
}
