// Namespace defaults, in JavaScript: every Namespace labelled for a tenant
// gets a default ResourceQuota, LimitRange and RoleBinding, owned by the
// Namespace.
//
// The twin of the Rust `namespace-defaults` plugin (plugins/namespace-defaults,
// docs/controllers.md): the same configuration, the same informers, the same
// writes (one forced server-side apply per missing or changed default, none
// when everything is as configured) and the same log lines.
//
// Informers (names from the config, defaults shown):
// - `namespaces` (v1 Namespaces): the primary; reconciled by name.
// - `resourcequotas`, `limitranges` (v1), `rolebindings`
//   (rbac.authorization.k8s.io/v1): secondaries, which the host maps to their
//   owner through the ownerReference this controller sets.
//
// Write quantities in their canonical form (`500m`, not `0.5`): the API
// server stores that form, and a config that differs from it would be
// applied again on every resync.
import {
  Action,
  DeleteOptions,
  Patch,
  PluginError,
  Reconciler,
  Target,
  drop,
  exportController,
  info,
  kube,
  parse,
  stores,
} from '../../../sdk/js/informer-controller.js';

// How many reconciles in a row may pass over a default this controller wrote
// and the cache does not show yet, before writing it again.
const MAX_WAITS = 5;

const TENANT_DEFAULT = 'tenant-default';
const TENANT_ADMINS = 'tenant-admins';

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

function known(value, fields, what) {
  for (const key of Object.keys(value)) {
    if (!fields.includes(key)) throw new PluginError(`${what}: unknown field \`${key}\``);
  }
}

function string(value, what) {
  if (typeof value !== 'string') throw new PluginError(`${what}: not a string`);
  return value;
}

/**
 * The settings: the defaults, overridden by `config`; unknown fields are
 * refused (like the Rust twin's `deny_unknown_fields`).
 */
function settingsOf(config) {
  const settings = {
    tenant_label: 'informer-host.dev/tenant',
    namespaces: 'namespaces',
    resourcequotas: 'resourcequotas',
    limitranges: 'limitranges',
    rolebindings: 'rolebindings',
    resource_quota: {
      name: TENANT_DEFAULT,
      hard: { pods: '50', 'requests.cpu': '8', 'requests.memory': '16Gi' },
    },
    limit_range: {
      name: TENANT_DEFAULT,
      limits: [
        {
          type: 'Container',
          default: { cpu: '500m', memory: '512Mi' },
          defaultRequest: { cpu: '100m', memory: '128Mi' },
        },
      ],
    },
    role_binding: {
      name: TENANT_ADMINS,
      cluster_role: 'admin',
      subjects: [{ kind: 'Group', name: 'tenant:{tenant}' }],
    },
  };
  if (!isObject(config)) throw new PluginError('the configuration is not a JSON object');
  known(config, Object.keys(settings), 'the configuration');
  for (const key of ['tenant_label', 'namespaces', 'resourcequotas', 'limitranges', 'rolebindings']) {
    if (key in config) settings[key] = string(config[key], key);
  }
  const kinds = {
    resource_quota: [TENANT_DEFAULT, { hard: isObject }],
    limit_range: [TENANT_DEFAULT, { limits: Array.isArray }],
    role_binding: [TENANT_ADMINS, { cluster_role: (v) => typeof v === 'string', subjects: Array.isArray }],
  };
  for (const [key, [name, required]] of Object.entries(kinds)) {
    if (!(key in config)) continue;
    const value = config[key];
    if (value === null) {
      settings[key] = null; // leaves that kind alone
      continue;
    }
    if (!isObject(value)) throw new PluginError(`${key}: not an object`);
    known(value, ['name', ...Object.keys(required)], key);
    for (const [field, valid] of Object.entries(required)) {
      if (!valid(value[field])) throw new PluginError(`${key}.${field}: missing or of the wrong type`);
    }
    settings[key] = { ...value, name: string(value.name ?? name, `${key}.name`) };
  }
  for (const [resource, quantity] of Object.entries(settings.resource_quota?.hard ?? {})) {
    string(quantity, `resource_quota.hard.${resource}`);
  }
  for (const subject of settings.role_binding?.subjects ?? []) {
    if (!isObject(subject)) throw new PluginError('role_binding.subjects: not an object');
    known(subject, ['kind', 'name', 'namespace'], 'role_binding.subjects');
    string(subject.kind, 'role_binding.subjects.kind');
    string(subject.name, 'role_binding.subjects.name');
  }
  return settings;
}

class NamespaceDefaults extends Reconciler {
  constructor() {
    super();
    this.settings = settingsOf({});
    // Defaults written whose write the cache has not shown yet: `${target}` ->
    // { rv: the resourceVersion the write answered, waits: reconciles that
    // waited }. The informers of the other kinds can run ahead of this one's.
    this.written = new Map();
  }

  init(config) {
    this.settings = settingsOf(config.parse());
  }

  reconcile(name) {
    const namespace = stores.get(this.settings.namespaces, name);
    if (namespace === undefined) return Action.done(); // deleted: what it owned goes with it
    try {
      return this.reconcileNamespace(name, namespace);
    } finally {
      drop(namespace);
    }
  }

  reconcileNamespace(name, namespace) {
    const s = this.settings;
    if (namespace.pointer('/metadata/deletionTimestamp') !== undefined) {
      return Action.done(); // terminating: the server refuses new objects in it
    }
    const tenant = namespace.label(s.tenant_label);
    if (tenant === undefined) return Action.done(); // not a tenant's
    const uid = namespace.uid();
    if (uid === undefined) throw new PluginError('a Namespace without a uid');
    let waiting = false;
    for (const [informer, desired] of this.desired(name, uid, tenant)) {
      const target = Target.ofJson(desired);
      if (target === undefined) throw new PluginError('a default without a name');
      const cached = stores.get(informer, `${name}/${target.name}`);
      const current = cached === undefined ? undefined : parse(cached);
      drop(cached);
      const key = `${target}`;
      if (current !== undefined && contains(current, desired)) {
        this.written.delete(key);
        continue; // already as configured: no write
      }
      const written = this.written.get(key);
      if (written !== undefined) {
        const cachedRv = current?.metadata?.resourceVersion;
        if (cachedRv !== written.rv && written.waits < MAX_WAITS) {
          // Written, not in the cache yet: look again soon.
          written.waits += 1;
          waiting = true;
          continue;
        }
      }
      // A RoleBinding's roleRef cannot change: replace the binding.
      if (current !== undefined && target.kind === 'RoleBinding' && !same(current.roleRef, desired.roleRef)) {
        kube.delete(target, new DeleteOptions({ uid: uidOf(current) }));
      }
      const stored = JSON.parse(kube.patch(target, Patch.apply(desired).force()));
      const rv = stored?.metadata?.resourceVersion;
      if (rv !== undefined) this.written.set(key, { rv, waits: 0 });
      const verb = current !== undefined ? 'updated' : 'created';
      info(`${verb} ${target} for tenant ${tenant}`);
    }
    return waiting ? Action.requeueAfter(1000) : Action.done();
  }

  /**
   * Each configured default for the Namespace `namespace` (with `uid`) of
   * `tenant`, with the informer that caches its kind.
   */
  desired(namespace, uid, tenant) {
    const s = this.settings;
    const metadata = (name) => ({
      name,
      namespace,
      labels: { 'app.kubernetes.io/managed-by': 'namespace-defaults', [s.tenant_label]: tenant },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Namespace', name: namespace, uid, controller: true }],
    });
    const desired = [];
    if (s.resource_quota !== null) {
      desired.push([
        s.resourcequotas,
        {
          apiVersion: 'v1',
          kind: 'ResourceQuota',
          metadata: metadata(s.resource_quota.name),
          spec: { hard: s.resource_quota.hard },
        },
      ]);
    }
    if (s.limit_range !== null) {
      desired.push([
        s.limitranges,
        {
          apiVersion: 'v1',
          kind: 'LimitRange',
          metadata: metadata(s.limit_range.name),
          spec: { limits: s.limit_range.limits },
        },
      ]);
    }
    const binding = s.role_binding;
    if (binding !== null) {
      const subjects = binding.subjects.map((subject) => {
        // The server defaults apiGroup, and stores a ServiceAccount's empty
        // one as absent (`omitempty`): written the way it is stored, the
        // comparison with the cache stays exact.
        const value = { kind: subject.kind, name: subject.name.replaceAll('{tenant}', tenant) };
        if (subject.kind !== 'ServiceAccount') value.apiGroup = 'rbac.authorization.k8s.io';
        if (subject.namespace !== undefined && subject.namespace !== null) {
          value.namespace = subject.namespace.replaceAll('{tenant}', tenant);
        }
        return value;
      });
      desired.push([
        s.rolebindings,
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'RoleBinding',
          metadata: metadata(binding.name),
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: binding.cluster_role },
          subjects,
        },
      ]);
    }
    return desired;
  }
}

/**
 * Whether `actual` has every field of `desired` with the same value. Fields
 * only `actual` has (status, server defaults, others' labels) do not count;
 * lists must match item by item.
 */
function contains(actual, desired) {
  if (isObject(desired)) {
    return isObject(actual) && Object.entries(desired).every(([k, d]) => k in actual && contains(actual[k], d));
  }
  if (Array.isArray(desired)) {
    return Array.isArray(actual) && actual.length === desired.length && actual.every((a, i) => contains(a, desired[i]));
  }
  return actual === desired;
}

/** JSON equality (both ways), for `roleRef`. */
function same(a, b) {
  return contains(a, b) && contains(b, a);
}

function uidOf(obj) {
  const uid = obj?.metadata?.uid;
  return typeof uid === 'string' ? uid : undefined;
}

export const reconciler = exportController(NamespaceDefaults);
