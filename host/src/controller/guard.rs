//! The write guard: what the host checks before a controller's write
//! leaves, in this order, and what it records after.
//!
//! 0. Names no API server accepts (a name over 253 bytes, a namespace over
//!    63, ...) are [`WriteError::Invalid`] at once, before the target
//!    appears in a log line: a guest chooses its names.
//! 1. The plugin's declared [`WriteRule`]s (RBAC's shape: API groups,
//!    kinds, verbs, optional names). Rules name kinds, not resources: the
//!    host checks before any request, without asking the server for
//!    plurals; the API server's RBAC (with impersonation) speaks resources.
//! 2. Its tenant's namespaces ([`NamespaceScope`]): a write outside them,
//!    or to a cluster-scoped object when the tenant may not, is refused.
//! 3. Its client-side QPS and burst (a token bucket on Tokio's clock; a
//!    write waits for its token, and one that would wait past its timeout
//!    is refused as rate limited), and its tenant's, when all of a
//!    tenant's controllers share one ([`WriteGuard::with_tenant_bucket`]).
//! 4. The write itself, within a timeout, with the plugin's name as field
//!    manager, `dryRun=All` when configured, and the tenant's identity when
//!    it impersonates one.
//!
//! The timeout is the guard's, or what is left of the calling reconcile's
//! deadline when that is shorter ([`WriteGuard::write_within`]): a write
//! may not hold a worker past the deadline of the call that sent it.
//!
//! A refusal is a [`WriteError::Forbidden`] and sends nothing. Every write
//! is logged (plugin, tenant, verb, object, outcome, latency) and counted
//! in [`WriteStats`]. This module may not change what a write asks for.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::cluster::{Cause, ClusterWriter, Target, WriteError, WriteParams, WriteRequest};
use crate::plugin::sanitize;
use crate::workqueue::TokenBucket;

/// One rule of what a plugin may write. An empty list matches nothing; `*`
/// matches everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRule {
    /// API groups (`""`: the core group, `apps`, ...).
    pub api_groups: Vec<String>,
    /// Kinds (`Deployment`), and `Deployment/status` for the status
    /// subresource.
    pub kinds: Vec<String>,
    /// `create`, `update`, `patch`, `delete`.
    pub verbs: Vec<String>,
    /// Only these object names, when not empty.
    pub names: Vec<String>,
}

impl WriteRule {
    fn allows(&self, target: &Target, verb: &str, subresource: Option<&str>) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        let kind = match subresource {
            Some(sub) => format!("{}/{sub}", target.kind),
            None => target.kind.clone(),
        };
        any(&self.api_groups, target.group())
            && any(&self.kinds, &kind)
            && any(&self.verbs, verb)
            && (self.names.is_empty() || self.names.iter().any(|n| n == &target.name))
    }
}

/// The namespaces a tenant's plugins may write in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceScope {
    pub namespaces: Vec<String>,
    /// Whether cluster-scoped objects (Namespaces, ClusterRoles) may be
    /// written.
    pub cluster_scoped: bool,
}

impl NamespaceScope {
    fn allows(&self, target: &Target) -> bool {
        match &target.namespace {
            Some(ns) => self.namespaces.iter().any(|n| n == ns),
            None => self.cluster_scoped,
        }
    }
}

/// How a plugin's writes are checked and sent.
#[derive(Clone)]
pub struct GuardConfig {
    /// The plugin's name: the field manager and the log/metrics label.
    pub plugin: String,
    pub tenant: Option<String>,
    pub rules: Vec<WriteRule>,
    /// `None`: no tenant bound (a plugin without a tenant).
    pub scope: Option<NamespaceScope>,
    /// Writes per second and burst (client-go's defaults: 5 and 10).
    pub qps: f64,
    pub burst: usize,
    /// Longest a write may take, waiting for its token included.
    pub timeout: Duration,
    pub dry_run: bool,
    pub impersonate: Option<String>,
}

impl GuardConfig {
    /// A plugin's guard with client-go's client defaults (5 QPS, burst
    /// 10), a 10 s timeout, and no rules (every write refused).
    pub fn new(plugin: impl Into<String>) -> Self {
        GuardConfig {
            plugin: plugin.into(),
            tenant: None,
            rules: Vec::new(),
            scope: None,
            qps: 5.0,
            burst: 10,
            timeout: Duration::from_secs(10),
            dry_run: false,
            impersonate: None,
        }
    }
}

/// What a plugin's writes did.
#[derive(Debug, Default)]
pub struct WriteStats {
    /// Writes the server (or the embedded store) accepted.
    pub succeeded: AtomicU64,
    /// Writes refused by the host's checks: nothing was sent.
    pub refused: AtomicU64,
    /// Writes the server answered with an error, or that timed out.
    pub failed: AtomicU64,
    /// Writes sent with `dryRun=All`.
    pub dry_run: AtomicU64,
}

/// Checks, sends and records one plugin's writes.
pub struct WriteGuard {
    config: GuardConfig,
    writer: Arc<dyn ClusterWriter>,
    bucket: TokenBucket,
    /// The bucket every controller of the tenant draws from too, and its
    /// rate (for messages).
    tenant_bucket: Option<(Arc<TokenBucket>, f64)>,
    pub stats: WriteStats,
}

impl WriteGuard {
    pub fn new(config: GuardConfig, writer: Arc<dyn ClusterWriter>) -> Self {
        let bucket = TokenBucket::new(config.qps, config.burst);
        WriteGuard { config, writer, bucket, tenant_bucket: None, stats: WriteStats::default() }
    }

    /// Each write also takes a token of `bucket` (of `qps` writes per
    /// second), which the tenant's other controllers share: a tenant
    /// running N controllers gets the tenant's rate, not N times one.
    pub fn with_tenant_bucket(mut self, bucket: Arc<TokenBucket>, qps: f64) -> Self {
        self.tenant_bucket = Some((bucket, qps));
        self
    }

    pub fn config(&self) -> &GuardConfig {
        &self.config
    }

    /// Why `request` may not be sent, if it may not.
    fn refusal(&self, request: &WriteRequest, target: &Target) -> Option<String> {
        let (verb, sub) = (request.verb(), request.subresource());
        let what = match sub {
            Some(s) => format!("{verb} {target} ({s})"),
            None => format!("{verb} {target}"),
        };
        if !self.config.rules.iter().any(|r| r.allows(target, verb, sub)) {
            return Some(format!("plugin {} has no write rule allowing {what}", self.config.plugin));
        }
        if let Some(scope) = &self.config.scope
            && !scope.allows(target)
        {
            let tenant = self.config.tenant.as_deref().unwrap_or("?");
            return Some(match &target.namespace {
                Some(ns) => format!("{what}: namespace {ns} is not one of tenant {tenant}'s"),
                None => format!("{what}: tenant {tenant} may not write cluster-scoped objects"),
            });
        }
        None
    }

    /// Checks `request`, then sends it; see the module documentation.
    pub async fn write(&self, request: WriteRequest) -> Result<Option<Value>, WriteError> {
        self.write_within(request, None).await
    }

    /// As [`write`](Self::write), for a call with `call_left` of its
    /// deadline: the write gets the shorter of that and the guard's timeout.
    /// Waiting longer would gain nothing: the call would trap on its
    /// deadline as soon as the answer reached it, while the worker it runs
    /// on, and the tenant's other keys behind it, waited.
    pub async fn write_within(
        &self,
        request: WriteRequest,
        call_left: Option<Duration>,
    ) -> Result<Option<Value>, WriteError> {
        let started = tokio::time::Instant::now();
        let (timeout, bound) = match call_left {
            Some(left) if left < self.config.timeout => (left, "the call's deadline"),
            _ => (self.config.timeout, "the write timeout"),
        };
        let target = request.target()?;
        let verb = request.verb();
        let plugin = &self.config.plugin;
        let tenant = self.config.tenant.as_deref().unwrap_or("");
        // Before the target appears in any log line: a guest chooses its
        // names, and a name no server accepts must not become a line of
        // megabytes in the host's log.
        if let Some(e) = oversized(&target) {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(plugin = %plugin, tenant, verb, "write refused: {e}");
            return Err(e);
        }
        // A guest's names may hold newlines: logged as they are, one would
        // forge a host log line (in the text format), say in another
        // tenant's name. Logs show them escaped.
        let shown = sanitize(&target.to_string(), 1024).into_owned();
        if let Some(why) = self.refusal(&request, &target) {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(plugin = %plugin, tenant, verb, object = %shown, "write refused: {}", sanitize(&why, 4096));
            return Err(WriteError::Forbidden(why));
        }
        // A call already past its deadline sends nothing: the request could
        // leave, and the server act on it, with no one left to hear back.
        if timeout.is_zero() {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(plugin = %plugin, tenant, verb, object = %shown, "write refused: {bound} has passed");
            return Err(WriteError::Timeout(format!("{verb} {target}: not sent, {bound} has passed")));
        }
        let own = self.bucket.reserve();
        let shared = self.tenant_bucket.as_ref().map_or(Duration::ZERO, |(b, _)| b.reserve());
        let wait = own.max(shared);
        if wait > timeout {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            let message = match &self.tenant_bucket {
                Some((_, qps)) if shared > own => format!(
                    "tenant {} is over the {qps} writes per second its controllers share: the next slot is in {wait:?}",
                    tenant
                ),
                _ => format!(
                    "plugin {plugin} is over its {} writes per second (burst {}): the next slot is in {wait:?}",
                    self.config.qps, self.config.burst
                ),
            };
            tracing::warn!(plugin = %plugin, tenant, verb, object = %shown, "write refused: {}", sanitize(&message, 4096));
            return Err(WriteError::RateLimited { message, retry_after_seconds: Some(wait.as_secs().max(1)) });
        }
        // Only a real wait goes through the timer: a zero sleep still waits
        // for the timer wheel's next tick (about 1 ms), which made every
        // write under the cap cost a millisecond more (write_guard bench).
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let params = WriteParams {
            field_manager: plugin.clone(),
            dry_run: self.config.dry_run,
            impersonate: self.config.impersonate.clone(),
        };
        // Only a dry run logs the body; other writes must not pay for it.
        let summary = if self.config.dry_run { dry_run_summary(&request) } else { String::new() };
        let left = timeout.saturating_sub(started.elapsed());
        let answer = match tokio::time::timeout(left, self.writer.write(request, params)).await {
            Ok(answer) => answer,
            Err(_) => Err(WriteError::Timeout(format!("{verb} {target}: no answer within {timeout:?} ({bound})"))),
        };
        let latency = started.elapsed();
        match &answer {
            Ok(_) if self.config.dry_run => {
                self.stats.dry_run.fetch_add(1, Ordering::Relaxed);
                tracing::info!(plugin = %plugin, tenant, verb, object = %shown, ?latency, "dry run: would {verb} {shown}{summary}");
            }
            Ok(written) => {
                self.stats.succeeded.fetch_add(1, Ordering::Relaxed);
                // The resourceVersion the write produced ("" for a delete or
                // an Event), so a log reader can match it with what the
                // informers later deliver.
                let rv = written
                    .as_ref()
                    .and_then(|o| o.pointer("/metadata/resourceVersion"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                tracing::info!(plugin = %plugin, tenant, verb, object = %shown, rv, ?latency, "write: {verb} {shown}");
            }
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(plugin = %plugin, tenant, verb, object = %shown, ?latency, "write failed: {}", sanitize(&e.to_string(), 4096));
            }
        }
        answer
    }
}

/// What a dry-run write would have changed, for its log line.
fn dry_run_summary(request: &WriteRequest) -> String {
    let body = match request {
        WriteRequest::Patch { patch, .. } | WriteRequest::PatchStatus { patch, .. } => match patch {
            crate::cluster::Patch::Merge(v) | crate::cluster::Patch::Json(v) => v.to_string(),
            crate::cluster::Patch::Apply { config, .. } => config.to_string(),
        },
        WriteRequest::RecordEvent { reason, message, .. } => format!("{reason}: {message}"),
        _ => return String::new(),
    };
    let cut = crate::plugin::sanitize(&body, 512);
    format!(" with {cut}")
}

/// A target whose names no API server accepts: a name longer than a DNS
/// subdomain (253 bytes, one more for `generateName`'s `*`), a namespace
/// longer than a DNS label (63), or an apiVersion or kind longer than 316.
fn oversized(target: &Target) -> Option<WriteError> {
    let too_long = [
        ("metadata.name", target.name.len(), 254),
        ("metadata.namespace", target.namespace.as_deref().map_or(0, str::len), 63),
        ("apiVersion", target.api_version.len(), 316),
        ("kind", target.kind.len(), 316),
    ]
    .into_iter()
    .find(|(_, len, max)| len > max)?;
    let (field, len, max) = too_long;
    Some(WriteError::Invalid {
        message: format!("{field} of {len} bytes (at most {max})"),
        causes: vec![Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("must be no more than {max} bytes"),
            field: field.into(),
        }],
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use futures::future::BoxFuture;
    use serde_json::json;

    use super::*;

    /// Counts what reaches the server; answers every write with its body.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl ClusterWriter for Counting {
        fn write(&self, _: WriteRequest, _: WriteParams) -> BoxFuture<'_, Result<Option<Value>, WriteError>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Box::pin(async { Ok(None) })
        }
    }

    fn patch(ns: &str, name: &str) -> WriteRequest {
        WriteRequest::Patch {
            target: Target {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some(ns.into()),
                name: name.into(),
            },
            patch: crate::cluster::Patch::Merge(json!({"data": {"k": "v"}})),
        }
    }

    fn config() -> GuardConfig {
        GuardConfig {
            rules: vec![WriteRule {
                api_groups: vec!["".into()],
                kinds: vec!["ConfigMap".into()],
                verbs: vec!["patch".into()],
                names: vec![],
            }],
            ..GuardConfig::new("p")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_qps_cap_holds_and_a_write_past_its_timeout_is_refused_unsent() {
        let server = Arc::new(Counting::default());
        let g = WriteGuard::new(
            GuardConfig { qps: 2.0, burst: 2, timeout: Duration::from_secs(1), ..config() },
            server.clone(),
        );
        let start = tokio::time::Instant::now();
        // The burst goes at once; then one write every 500 ms.
        for _ in 0..4 {
            g.write(patch("a", "x")).await.unwrap();
        }
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        assert_eq!(server.0.load(Ordering::Relaxed), 4);
        // Reserve slots far ahead: a write whose slot is beyond its timeout
        // is refused as rate limited and never sent.
        let refused = (0..4).map(|_| g.write(patch("a", "x")));
        let results = futures::future::join_all(refused).await;
        assert!(results.iter().any(|r| matches!(r, Err(WriteError::RateLimited { .. }))), "{results:?}");
        let sent = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(server.0.load(Ordering::Relaxed), 4 + sent);
        assert_eq!(g.stats.refused.load(Ordering::Relaxed) as usize, results.len() - sent);
    }

    /// Two controllers of one tenant, each allowed 10 writes per second,
    /// share the tenant's 2: between them the burst of 4 goes at once, then
    /// one write every 500 ms, whichever controller writes; a write that
    /// would wait past its timeout for the tenant's slot is refused, naming
    /// the tenant.
    #[tokio::test(start_paused = true)]
    async fn a_tenants_controllers_share_its_write_rate() {
        let server = Arc::new(Counting::default());
        let tenant = Arc::new(TokenBucket::new(2.0, 4));
        let guard = |name: &str| {
            let c = GuardConfig {
                qps: 10.0,
                burst: 20,
                timeout: Duration::from_secs(1),
                tenant: Some("team-a".into()),
                ..GuardConfig::new(name)
            };
            WriteGuard::new(GuardConfig { rules: config().rules, ..c }, server.clone())
                .with_tenant_bucket(tenant.clone(), 2.0)
        };
        let (one, two) = (guard("one"), guard("two"));
        let start = tokio::time::Instant::now();
        for i in 0..6 {
            let g = if i % 2 == 0 { &one } else { &two };
            g.write(patch("a", "x")).await.unwrap();
        }
        // 4 at once, then 2 more at 500 ms each: 1 s, not the 0 s of two
        // separate buckets of 20.
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        let ahead = (0..6).map(|i| if i % 2 == 0 { one.write(patch("a", "x")) } else { two.write(patch("a", "x")) });
        let results = futures::future::join_all(ahead).await;
        let refused: Vec<String> = results
            .iter()
            .filter_map(|r| match r {
                Err(WriteError::RateLimited { message, .. }) => Some(message.clone()),
                _ => None,
            })
            .collect();
        assert!(!refused.is_empty(), "{results:?}");
        assert!(refused.iter().all(|m| m.contains("tenant team-a is over the 2 writes per second")), "{refused:?}");
    }

    /// Never answers: a server that hangs.
    struct Silent;

    impl ClusterWriter for Silent {
        fn write(&self, _: WriteRequest, _: WriteParams) -> BoxFuture<'_, Result<Option<Value>, WriteError>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_gets_the_shorter_of_its_timeout_and_what_is_left_of_the_call() {
        let g = WriteGuard::new(GuardConfig { qps: 1.0, burst: 1, ..config() }, Arc::new(Silent));
        let start = tokio::time::Instant::now();
        let e = g.write_within(patch("a", "x"), Some(Duration::from_millis(300))).await.unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        assert_eq!(e, WriteError::Timeout("patch ConfigMap a/x: no answer within 300ms (the call's deadline)".into()));
        // The next token is a second away: past what is left of this call,
        // so the write is refused unsent instead of outliving the call.
        let e = g.write_within(patch("a", "x"), Some(Duration::from_millis(500))).await.unwrap_err();
        assert!(matches!(e, WriteError::RateLimited { .. }), "{e:?}");
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        // A call with more time left than the timeout gets the timeout.
        let start = tokio::time::Instant::now();
        let e = g.write_within(patch("a", "x"), Some(Duration::from_secs(60))).await.unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert_eq!(e, WriteError::Timeout("patch ConfigMap a/x: no answer within 10s (the write timeout)".into()));
        assert_eq!(g.stats.failed.load(Ordering::Relaxed), 2);
        assert_eq!(g.stats.refused.load(Ordering::Relaxed), 1);
        // A call with nothing left sends nothing.
        let server = Arc::new(Counting::default());
        let g = WriteGuard::new(config(), server.clone());
        let e = g.write_within(patch("a", "x"), Some(Duration::ZERO)).await.unwrap_err();
        assert_eq!(e, WriteError::Timeout("patch ConfigMap a/x: not sent, the call's deadline has passed".into()));
        assert_eq!(server.0.load(Ordering::Relaxed), 0);
        assert_eq!(g.stats.refused.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_name_no_server_accepts_is_invalid_and_neither_sent_nor_logged_whole() {
        let server = Arc::new(Counting::default());
        let g = WriteGuard::new(config(), server.clone());
        let huge = "x".repeat(1 << 20);
        match g.write(patch("a", &huge)).await {
            Err(WriteError::Invalid { message, causes }) => {
                assert_eq!(message, "metadata.name of 1048576 bytes (at most 254)");
                assert_eq!(causes[0].field, "metadata.name");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(g.write(patch(&"n".repeat(64), "x")).await, Err(WriteError::Invalid { .. })));
        assert_eq!(server.0.load(Ordering::Relaxed), 0);
        assert_eq!(g.stats.refused.load(Ordering::Relaxed), 2);
        assert!(g.write(patch("a", &"x".repeat(253))).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn rules_names_and_scope_are_checked_before_anything_is_sent() {
        let server = Arc::new(Counting::default());
        let mut c = config();
        c.rules[0].names = vec!["x".into()];
        c.scope = Some(NamespaceScope { namespaces: vec!["a".into()], cluster_scoped: false });
        c.tenant = Some("t".into());
        let g = WriteGuard::new(c, server.clone());
        assert!(g.write(patch("a", "x")).await.is_ok());
        let e = g.write(patch("a", "y")).await.unwrap_err();
        assert_eq!(e, WriteError::Forbidden("plugin p has no write rule allowing patch ConfigMap a/y".into()));
        let e = g.write(patch("b", "x")).await.unwrap_err();
        assert_eq!(e, WriteError::Forbidden("patch ConfigMap b/x: namespace b is not one of tenant t's".into()));
        let status = WriteRequest::PatchStatus {
            target: Target {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("a".into()),
                name: "x".into(),
            },
            patch: crate::cluster::Patch::Merge(json!({})),
        };
        // The status subresource needs a rule of its own (`ConfigMap/status`).
        assert!(matches!(g.write(status).await, Err(WriteError::Forbidden(_))));
        assert_eq!(server.0.load(Ordering::Relaxed), 1);
    }
}
