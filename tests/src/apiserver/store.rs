//! The object store: current objects, a global increasing resourceVersion
//! (like etcd's revision), and the history of changes since the last compaction.

use super::*;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    pub(super) ty: usize,
    pub(super) namespace: String,
    pub(super) name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    Added,
    Modified,
    Deleted,
}

/// One change in history. `object` is the new state (for a delete: the last
/// state, at the delete's resourceVersion); `prev` the state before.
pub(super) struct Entry {
    pub(super) rv: u64,
    pub(super) change: Change,
    pub(super) key: Key,
    pub(super) object: Arc<Value>,
    pub(super) prev: Option<Arc<Value>>,
}
pub(super) struct State {
    pub(super) types: Vec<ResourceType>,
    /// The current revision: the resourceVersion of the last change.
    pub(super) rv: u64,
    /// The oldest revision history still answers for.
    pub(super) compacted: u64,
    /// The objects at `compacted`.
    pub(super) base: BTreeMap<Key, Arc<Value>>,
    /// Every change after `compacted`, in order.
    pub(super) log: Vec<Arc<Entry>>,
    /// The objects now.
    pub(super) objects: BTreeMap<Key, Arc<Value>>,
    pub(super) watchers: Vec<mpsc::UnboundedSender<Signal>>,
    pub(super) requests: Vec<RecordedRequest>,
    pub(super) failures: Vec<Failure>,
    pub(super) throttles: Vec<Throttle>,
    /// How long every write (create, update, patch, delete) takes to be
    /// answered, as an etcd round trip would.
    pub(super) write_latency: std::time::Duration,
    /// Rules granted to impersonated users.
    pub(super) users: BTreeMap<String, Vec<Rule>>,
    pub(super) gone_style: GoneStyle,
    pub(super) next_uid: u64,
    /// Whether watches with `sendInitialEvents=true` are served (the
    /// WatchList feature gate, on by default since Kubernetes 1.34).
    pub(super) watch_list: bool,
}
impl State {
    /// Serves `ty`, replacing a type with the same group, version and plural.
    pub(super) fn register(&mut self, ty: ResourceType) {
        match self.types.iter().position(|t| t.group == ty.group && t.version == ty.version && t.plural == ty.plural) {
            Some(i) => self.types[i] = ty,
            None => self.types.push(ty),
        }
    }

    pub(super) fn type_of(&self, api_version: &str, kind: &str) -> anyhow::Result<usize> {
        self.types
            .iter()
            .position(|t| t.kind == kind && t.api_version() == api_version)
            .ok_or_else(|| anyhow!("no resource type registered for {api_version} {kind}"))
    }

    /// Finds the key of `obj` and fixes its namespace.
    pub(super) fn normalize(&self, mut obj: Value) -> anyhow::Result<(Key, Value)> {
        let api_version = obj["apiVersion"].as_str().context("object has no apiVersion")?.to_string();
        let kind = obj["kind"].as_str().context("object has no kind")?.to_string();
        let ty = self.type_of(&api_version, &kind)?;
        let meta = obj.get_mut("metadata").and_then(Value::as_object_mut).context("object has no metadata")?;
        let name = meta.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).context("no metadata.name")?;
        let name = name.to_string();
        let namespace = if self.types[ty].namespaced {
            let ns = meta.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or("default");
            let ns = ns.to_string();
            meta.insert("namespace".into(), json!(ns));
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        Ok((Key { ty, namespace, name }, obj))
    }

    /// Applies one change (its resourceVersion already stamped as `self.rv`)
    /// and tells every watch.
    pub(super) fn commit(&mut self, change: Change, key: Key, obj: Value, prev: Option<Arc<Value>>) -> Value {
        let ty = &self.types[key.ty];
        if change != Change::Deleted && ty.kind == "CustomResourceDefinition" && ty.group == "apiextensions.k8s.io" {
            // The apiextensions server starts serving a CRD's resource once it
            // is established; here, at once.
            for t in discovery::crd_types(&obj) {
                self.register(t);
            }
        }
        let object = Arc::new(obj);
        match change {
            Change::Deleted => self.objects.remove(&key),
            _ => self.objects.insert(key.clone(), object.clone()),
        };
        let entry = Arc::new(Entry { rv: self.rv, change, key, object: object.clone(), prev });
        self.log.push(entry.clone());
        self.watchers.retain(|w| w.send(Signal::Event(entry.clone())).is_ok());
        (*object).clone()
    }

    /// The objects as they were at resourceVersion `rv` (`compacted <= rv <= self.rv`).
    pub(super) fn snapshot_at(&self, rv: u64) -> BTreeMap<Key, Arc<Value>> {
        if rv >= self.rv {
            return self.objects.clone();
        }
        let mut objects = self.base.clone();
        for e in self.log.iter().take_while(|e| e.rv <= rv) {
            match e.change {
                Change::Deleted => objects.remove(&e.key),
                _ => objects.insert(e.key.clone(), e.object.clone()),
            };
        }
        objects
    }
}

pub(super) fn rfc3339_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}
