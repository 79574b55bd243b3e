//! `informer-host check`: validates nothing itself (the config did), but
//! compiles, type-checks and test-instantiates every plugin and every
//! controller (against the `controller` world, with its grants), and
//! renders the table of them and every problem.

use std::fmt::Write as _;

use std::collections::HashMap;
use std::sync::Arc;

use crate::cluster::embedded::EmbeddedCluster;
use crate::config::{Config, ControllerConfig, PluginConfig};
use crate::controller::{ControllerCtx, KeyQueue, WriteGuard};
use crate::plugin::{Limits, PluginError, PluginInfo, PluginRuntime};

use super::format::{fmt_size, tidy_path};
use super::plugins::new_runtime;

/// One plugin as `check` saw it.
pub struct CheckedPlugin {
    pub config: PluginConfig,
    pub result: Result<PluginInfo, PluginError>,
}

/// One controller as `check` saw it.
pub struct CheckedController {
    pub config: ControllerConfig,
    pub result: Result<PluginInfo, PluginError>,
}

/// What `check` found.
pub struct CheckReport {
    pub plugins: Vec<CheckedPlugin>,
    pub controllers: Vec<CheckedController>,
    /// A problem that stopped the check before any plugin was loaded.
    pub fatal: Option<String>,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.fatal.is_none()
            && self.plugins.iter().all(|p| p.result.is_ok())
            && self.controllers.iter().all(|c| c.result.is_ok())
    }

    /// The table of plugins and, below it, every problem.
    pub fn render(&self, config: &Config) -> String {
        let mut rows =
            vec![["PLUGIN", "FILE", "SIZE", "WORLD", "IMPORTS", "GRANTED", "TENANT", "LIMITS"].map(String::from)];
        let rows_of = self
            .plugins
            .iter()
            .map(|p| {
                let c = &p.config;
                (&c.name, &c.wasm, &c.grant_names, &c.tenant, describe_limits(&c.limits, c.max_pending), &p.result)
            })
            .chain(self.controllers.iter().map(|p| {
                let c = &p.config;
                (&c.name, &c.wasm, &c.grant_names, &c.tenant, describe_limits(&c.limits, None), &p.result)
            }));
        for (name, wasm, grant_names, tenant, limits, result) in rows_of {
            let granted = if grant_names.is_empty() { "-".into() } else { grant_names.join(",") };
            let tenant = tenant.clone().unwrap_or_else(|| "-".into());
            let file = tidy_path(wasm).display().to_string();
            let row = match result {
                Ok(info) => [
                    name.clone(),
                    file,
                    fmt_size(info.size_bytes),
                    info.world.clone(),
                    describe_imports(&info.imports),
                    granted,
                    tenant,
                    limits,
                ],
                Err(_) => [name.clone(), file, "-".into(), "FAILED".into(), "-".into(), granted, tenant, limits],
            };
            rows.push(row);
        }
        let mut widths = [0usize; 8];
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        if !self.plugins.is_empty() || !self.controllers.is_empty() {
            for r in &rows {
                let mut line = String::new();
                for (i, (c, w)) in r.iter().zip(widths).enumerate() {
                    if i + 1 == r.len() {
                        line.push_str(c);
                    } else {
                        let _ = write!(line, "{c:<w$}  ");
                    }
                }
                out.push_str(line.trim_end());
                out.push('\n');
            }
        }
        let informers = config.informers.len();
        let problems: Vec<String> = self
            .fatal
            .iter()
            .cloned()
            .chain(
                self.plugins
                    .iter()
                    .filter_map(|p| p.result.as_ref().err().map(|e| format!("{}: {e}", config.at(p.config.location)))),
            )
            .chain(
                self.controllers
                    .iter()
                    .filter_map(|c| c.result.as_ref().err().map(|e| format!("{}: {e}", config.at(c.config.location)))),
            )
            .collect();
        if problems.is_empty() {
            let controllers = match self.controllers.len() {
                0 => String::new(),
                n => format!(", {n} controller(s)"),
            };
            let _ = writeln!(
                out,
                "{}: ok ({informers} informer(s), {} plugin(s){controllers})",
                config.file.display(),
                self.plugins.len()
            );
        } else {
            if !out.is_empty() {
                out.push('\n');
            }
            for p in &problems {
                let _ = writeln!(out, "error: {p}");
            }
            let n = problems.len();
            let _ = writeln!(out, "{}: {n} problem{}", config.file.display(), if n == 1 { "" } else { "s" });
        }
        out
    }
}

/// Compiles, type-checks and test-instantiates every plugin of a config.
pub fn check(config: &Config) -> CheckReport {
    let empty = |fatal| CheckReport { plugins: Vec::new(), controllers: Vec::new(), fatal };
    if config.plugins.is_empty() && config.controllers.is_empty() {
        return empty(None);
    }
    let runtime = match new_runtime(config) {
        Ok(r) => r,
        Err(e) => return empty(Some(super::AppError::Runtime(e).to_string())),
    };
    let plugins = config
        .plugins
        .iter()
        .map(|p| CheckedPlugin { config: p.clone(), result: runtime.load(p.spec()).map(|l| l.info) })
        .collect();
    let controllers = config
        .controllers
        .iter()
        .map(|c| CheckedController { config: c.clone(), result: check_controller(&runtime, c) })
        .collect();
    CheckReport { plugins, controllers, fatal: None }
}

/// Loads a controller (compile, type-check against its grants, one
/// instance with `init`) with nothing to read and an empty in-memory
/// cluster to write to: its writes would go nowhere that matters.
fn check_controller(runtime: &PluginRuntime, c: &ControllerConfig) -> Result<PluginInfo, PluginError> {
    // Its imports await writes on a runtime; a small one of its own.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| PluginError::Io {
        plugin: c.name.clone(),
        file: c.wasm.clone(),
        message: format!("cannot start a runtime for the check: {e}"),
    })?;
    let ctx = Arc::new(ControllerCtx {
        runtime: rt.handle().clone(),
        guard: Arc::new(WriteGuard::new(c.guard_config(None), EmbeddedCluster::in_memory().writer())),
        primary: None,
        stores: HashMap::new(),
        keys: KeyQueue::default(),
    });
    runtime.load_controller(c.spec(), ctx).map(|l| l.info)
}

fn describe_limits(limits: &Limits, max_pending: Option<usize>) -> String {
    let fuel = match limits.fuel_per_call {
        Some(f) => format!("fuel {f}"),
        None => "fuel unlimited".into(),
    };
    let mut s = format!(
        "{fuel}, deadline {}, memory {}",
        humantime::format_duration(limits.deadline_per_call),
        fmt_size(limits.memory_bytes as u64)
    );
    if let Some(n) = max_pending {
        let _ = write!(s, ", pending {n}");
    }
    s
}

/// `log, cache (+3 wasi)`: the capability imports by short name.
fn describe_imports(imports: &[String]) -> String {
    let mut caps = Vec::new();
    let mut wasi = 0;
    for i in imports {
        if i.starts_with("wasi:") {
            wasi += 1;
            continue;
        }
        let short = i.rsplit('/').next().unwrap_or(i);
        let short = short.split('@').next().unwrap_or(short);
        if short != "types" && short != "delivery" {
            caps.push(short.to_string());
        }
    }
    let mut s = if caps.is_empty() { "-".to_string() } else { caps.join(",") };
    if wasi > 0 {
        let _ = write!(s, " (+{wasi} wasi)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_by_short_name() {
        assert_eq!(
            describe_imports(&[
                "informer-host:plugin/types@0.1.0".into(),
                "informer-host:plugin/log@0.1.0".into(),
                "informer-host:plugin/cache@0.1.0".into(),
                "wasi:cli/environment@0.2.6".into(),
            ]),
            "log,cache (+1 wasi)"
        );
    }
}
