//! `[[plugin]]`: a handler plugin (the `plugin` and `batched-plugin`
//! worlds): its component, informer, limits, grants, tenant, configuration
//! and what happens on a trap, a swap and a wake.
//!
//! Limits are capped by the plugin's tenant (see the `tenant` module);
//! controllers, which are plugins too, are the `controller` module's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::tenant::over;
use super::{Cx, DEFAULT_IDLE_TIMEOUT, Fields, GRANT_NAMES, Location, S, TenantSeen, to_json};
use crate::plugin::{Grants, Limits, OnTrap, OnWake, PluginSpec};
use crate::registry::OnSwap;

/// One `[[plugin]]`.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    pub name: String,
    /// The component file, resolved against the config file's directory.
    pub wasm: PathBuf,
    /// The name of the informer it handles.
    pub informer: String,
    /// Its resync period; `None`: the informer's.
    pub resync: Option<Duration>,
    pub limits: Limits,
    pub grants: Grants,
    /// Granted capability names, in config order (for display).
    pub grant_names: Vec<String>,
    /// The `config` table as JSON text, for `init`.
    pub config_json: String,
    /// What a fresh instance gets after a trap.
    pub on_trap: OnTrap,
    /// How long without a call before its instance is dropped (`None`:
    /// kept; `idle_timeout = "0s"`).
    pub idle_timeout: Option<Duration>,
    /// What an instance made again after idling gets first.
    pub on_wake: OnWake,
    /// The `[[tenant]]` it belongs to (`None`: it sees every object).
    pub tenant: Option<String>,
    /// Swap it when its wasm file changes.
    pub watch: bool,
    /// How a new version takes over.
    pub on_swap: OnSwap,
    /// Cap on its pending notifications (`None`: no cap); on overflow the
    /// host coalesces them by key.
    pub max_pending: Option<usize>,
    /// Where the plugin is defined (its `name`).
    pub location: Location,
}

impl PluginConfig {
    /// What the plugin runtime needs to load it.
    pub fn spec(&self) -> PluginSpec {
        let mut spec = PluginSpec::new(self.name.clone(), self.wasm.clone());
        spec.config_json = self.config_json.clone();
        spec.limits = self.limits.clone();
        spec.grants = self.grants.clone();
        spec.on_trap = self.on_trap;
        spec.idle_timeout = self.idle_timeout;
        spec.on_wake = self.on_wake;
        spec.tenant = self.tenant.clone();
        spec
    }

    /// The keys whose change needs an unload and a load (everything but
    /// `wasm`, `watch` and the location), by name; empty when none changed.
    pub fn changed_keys(&self, other: &PluginConfig) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut check = |key, same: bool| {
            if !same {
                keys.push(key);
            }
        };
        check("informer", self.informer == other.informer);
        check("resync", self.resync == other.resync);
        check("limits", self.limits == other.limits);
        check("grants", self.grants == other.grants);
        check("config", self.config_json == other.config_json);
        check("on_trap", self.on_trap == other.on_trap);
        check("idle_timeout", self.idle_timeout == other.idle_timeout);
        check("on_wake", self.on_wake == other.on_wake);
        check("tenant", self.tenant == other.tenant);
        check("on_swap", self.on_swap == other.on_swap);
        check("max_pending", self.max_pending == other.max_pending);
        keys
    }
}

pub(super) struct RawPlugin {
    pub(super) name: S<String>,
    wasm: S<String>,
    informer: S<String>,
    resync: Option<S<String>>,
    fuel_per_call: Option<S<toml::Value>>,
    deadline: Option<S<String>>,
    memory: Option<S<toml::Value>>,
    grants: Option<Vec<S<String>>>,
    on_trap: Option<S<String>>,
    idle_timeout: Option<S<String>>,
    on_wake: Option<S<String>>,
    config: Option<S<toml::Table>>,
    tenant: Option<S<String>>,
    watch: Option<S<bool>>,
    on_swap: Option<S<String>>,
    max_pending: Option<S<toml::Value>>,
}

impl RawPlugin {
    pub(super) fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(
            f,
            RawPlugin,
            [name, wasm, informer],
            [
                resync,
                fuel_per_call,
                deadline,
                memory,
                grants,
                on_trap,
                idle_timeout,
                on_wake,
                config,
                tenant,
                watch,
                on_swap,
                max_pending
            ]
        )
    }
}

impl<'a> Cx<'a> {
    /// The component file `v` names, reported when it is not a file.
    pub(super) fn wasm_file(&mut self, v: &S<String>) -> PathBuf {
        let wasm = self.path(v.get_ref());
        if !wasm.is_file() {
            let what = if wasm.exists() { "is not a file" } else { "does not exist" };
            let hint = if v.get_ref().contains("target/plugins") {
                " (build the plugins first: `cargo run -p xtask -- demo` does)"
            } else {
                ""
            };
            self.error(v.span(), format!("wasm file {} {what}{hint}", wasm.display()));
        }
        wasm
    }

    pub(super) fn plugin(
        &mut self,
        r: RawPlugin,
        informers: &HashMap<String, Location>,
        tenant_names: &HashMap<String, Location>,
        tenants: &mut HashMap<String, TenantSeen>,
        names: &mut HashMap<String, Location>,
    ) -> Option<PluginConfig> {
        let before = self.problems.len();
        let location = self.location(r.name.span().start);
        self.name(&r.name, "plugin", names);
        let wasm = self.wasm_file(&r.wasm);
        self.known_informer(&r.informer, informers);
        let resync = r.resync.as_ref().and_then(|v| self.duration(v, "resync"));
        if let (Some(d), Some(v)) = (resync, &r.resync)
            && !d.is_zero()
            && d < crate::informer::MINIMUM_RESYNC_PERIOD
        {
            self.error(
                v.span(),
                format!("`resync` must be 0s or at least {:?}", crate::informer::MINIMUM_RESYNC_PERIOD),
            );
        }
        let mut limits = Limits::default();
        if let Some(d) = r.deadline.as_ref().and_then(|v| self.deadline(v)) {
            limits.deadline_per_call = d;
        }
        if let Some(f) = r.fuel_per_call.as_ref().and_then(|v| self.fuel(v)) {
            limits.fuel_per_call = f;
        }
        if let Some(m) = r.memory.as_ref().and_then(|v| self.size(v, "memory")) {
            limits.memory_bytes = m;
        }
        let mut max_pending = r.max_pending.as_ref().and_then(|v| self.count(v, "max_pending"));
        if let Some(tv) = &r.tenant {
            let tenant = tv.get_ref();
            if tenants.contains_key(tenant) {
                self.count_against_tenant(tv, r.name.get_ref(), location.line, tenants);
                let t = &tenants[tenant];
                let mut problems = self.cap_limits(t, &mut limits, &r.fuel_per_call, &r.deadline, &r.memory);
                if let Some(cap) = t.config.max_pending {
                    match (&r.max_pending, max_pending) {
                        (None, _) => max_pending = Some(cap),
                        (Some(v), Some(n)) if n > cap => {
                            problems.push((v.span(), over(t, "max_pending", n.to_string(), cap.to_string())))
                        }
                        _ => {}
                    }
                }
                for (span, msg) in problems {
                    self.error(span, msg);
                }
            } else {
                self.unknown_tenant(tv, tenant_names);
            }
        }
        let on_swap = match r.on_swap.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "continue")) => OnSwap::Continue,
            Some((_, "replay")) => OnSwap::Replay,
            Some((v, other)) => {
                self.error(v.span(), format!("unknown on_swap {other:?}, expected \"continue\" or \"replay\""));
                OnSwap::Continue
            }
        };
        let (grants, grant_names) = self.grants(r.grants.as_deref(), GRANT_NAMES);
        let on_trap = match r.on_trap.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "continue")) => OnTrap::Continue,
            Some((_, "replay")) => OnTrap::Replay,
            Some((v, other)) => {
                self.error(v.span(), format!("unknown on_trap {other:?}, expected \"continue\" or \"replay\""));
                OnTrap::Continue
            }
        };
        let idle_timeout = match &r.idle_timeout {
            None => Some(DEFAULT_IDLE_TIMEOUT),
            Some(v) => self.duration(v, "idle_timeout").filter(|d| !d.is_zero()),
        };
        let on_wake = match r.on_wake.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "init")) => OnWake::Init,
            Some((_, "replay")) => OnWake::Replay,
            Some((v, other)) => {
                self.error(v.span(), format!("unknown on_wake {other:?}, expected \"init\" or \"replay\""));
                OnWake::Init
            }
        };
        let config_json = match &r.config {
            Some(t) => serde_json::Value::Object(t.get_ref().iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
            None => serde_json::Value::Object(Default::default()),
        }
        .to_string();
        (self.problems.len() == before).then(|| PluginConfig {
            name: r.name.into_inner(),
            wasm,
            informer: r.informer.into_inner(),
            resync,
            limits,
            grants,
            grant_names,
            config_json,
            on_trap,
            idle_timeout,
            on_wake,
            tenant: r.tenant.map(|t| t.into_inner()),
            watch: r.watch.is_some_and(|w| w.into_inner()),
            on_swap,
            max_pending,
            location,
        })
    }
}
