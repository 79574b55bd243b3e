// JavaScript guest SDK for Informer Host controllers (world `controller`).
//
// A controller is an ES module that extends `Reconciler` and exports it:
//
//   import { Action, Patch, Reconciler, Target, exportController, info, kube, stores }
//     from '../../../sdk/js/informer-controller.js';
//
//   class Labeller extends Reconciler {
//     reconcile(key) {
//       const ns = stores.get('namespaces', key);
//       if (ns === undefined) return Action.done(); // deleted
//       if (ns.label('team') === undefined) {
//         const target = Target.of(ns);
//         kube.patch(target, Patch.merge({ metadata: { labels: { team: 'none' } } }));
//         info(`labelled ${target}`);
//       }
//       return Action.done();
//     }
//   }
//
//   export const reconciler = exportController(Labeller);
//
// built by plugins/build-other-languages.sh when the plugin's folder has a
// file `world` that says `controller` (build.mjs's third argument). It is the
// JavaScript face of the Rust SDK's `informer_guest::controller`:
//
// - Reconcile is level-driven: read the caches (`stores`), compare with the
//   desired state, write only the difference (`kube`), so a reconcile when
//   nothing changed writes nothing. Return `Action.done()` (or nothing) or
//   `Action.requeueAfter(ms)`.
// - Errors: throw `new PluginError(message)`, or let a `KubeError` escape, to
//   return `err`: the host requeues the key with exponential backoff. Any
//   other exception traps the instance, like a Rust panic: the host replaces
//   it and requeues the key with backoff too.
// - State: `exportController` keeps one value of the class per instance
//   (`init` creates it). The host may run several instances and replaces one
//   that trapped, so state is a per-instance cache, never the truth.
// - Writes (`kube`) answer the object as stored, as JSON text, or throw a
//   `KubeError` (`reason`: 'conflict', 'not-found', 'forbidden', ...). The
//   host checks each write against the plugin's rules and its tenant's
//   namespaces before it leaves and sends it with the plugin's name as field
//   manager.
// - Cached objects are host-owned resources with the accessors of
//   informer-guest.js (`key()`, `label(k)`, `uid()`, `json()`, ...). Each
//   holds a handle in the host until the garbage collector finalizes it;
//   `drop(obj)` (or `using`) releases it at once, which a controller that
//   reads many objects per reconcile should do.
// - informer-guest.js's `Config`, `PluginError`, `parse`, `parseAt` and the
//   logging functions are re-exported here.
import * as rawKube from 'informer-host:plugin/kube@0.1.0';
import { enqueue as rawEnqueue } from 'informer-host:plugin/queue@0.1.0';
import * as rawStores from 'informer-host:plugin/stores@0.1.0';
import { Config, PluginError } from './informer-guest.js';

export { Config, PluginError, debug, error, info, log, parse, parseAt, trace, warn } from './informer-guest.js';

/** `ms` in whole milliseconds (rounded up), as the u64 the host takes. */
function millis(ms) {
  const n = Math.ceil(Number(ms));
  if (!(n > 0)) return 0n;
  return BigInt(Math.min(n, Number.MAX_SAFE_INTEGER));
}

/** What to do with a key after a successful reconcile. */
export class Action {
  constructor(afterMs) {
    this.afterMs = afterMs;
  }
  /** Nothing until the next change; the key's failures are forgotten. */
  static done() {
    return new Action(undefined);
  }
  /**
   * Reconcile the key again after `ms` milliseconds (rounded up), e.g. to
   * poll something no informer watches.
   */
  static requeueAfter(ms) {
    return new Action(millis(ms));
  }
  raw() {
    return this.afterMs === undefined ? { tag: 'done' } : { tag: 'requeue-after', val: this.afterMs };
  }
}

/** Base class of a plugin's controller. */
export class Reconciler {
  /** Called once per instance with the plugin's `Config`. */
  init(_config) {}
  /**
   * Brings the object with `key` (`namespace/name`, or `name`) to its
   * desired state; it may no longer exist.
   */
  reconcile(_key) {
    throw new Error('reconcile is not implemented');
  }
  /**
   * The keys of the primary resource to reconcile because `obj` of the
   * secondary informer `informer` changed (only for informers the host
   * configures to be mapped by the plugin). The default maps nothing.
   */
  map(_informer, _obj) {
    return [];
  }
}

/** The `reconciler` export object for `ReconcilerClass`. */
export function exportController(ReconcilerClass) {
  let reconciler;
  const current = () => (reconciler ??= new ReconcilerClass());
  return {
    init(config) {
      const r = new ReconcilerClass();
      r.init(new Config(config));
      reconciler = r;
    },
    reconcile(key) {
      const action = current().reconcile(key) ?? Action.done();
      if (!(action instanceof Action)) throw new TypeError(`reconcile returned ${action}, not an Action`);
      return action.raw();
    },
    map(informer, obj) {
      return Array.from(current().map(informer, obj), String);
    },
  };
}

// ---- reads ------------------------------------------------------------------

/** The symbol componentize-js disposes resources with. */
const DISPOSE = Symbol.dispose ?? Symbol.for('dispose');

/**
 * Releases the host handle of a cached object now (it must not be used
 * afterwards); undefined and null are ignored.
 */
export function drop(obj) {
  if (obj !== undefined && obj !== null && typeof obj[DISPOSE] === 'function') obj[DISPOSE]();
}

/** The error text of a failed import call (its `payload`). */
function payloadOf(e) {
  return e !== null && typeof e === 'object' && 'payload' in e ? e.payload : e;
}

function read(call) {
  try {
    return call();
  } catch (e) {
    throw new PluginError(payloadOf(e));
  }
}

/**
 * Read access to the caches of every informer the controller watches, by the
 * name the host's configuration gives them. A `PluginError` names an
 * informer the controller does not watch, or an index it does not have.
 */
export const stores = {
  /** The cached object of `informer` with this key, or undefined. */
  get: (informer, key) => read(() => rawStores.get(informer, key)) ?? undefined,
  /** Every cached object of `informer` in a namespace, or in every visible one. */
  list: (informer, namespace) => read(() => rawStores.list(informer, namespace ?? undefined)),
  /** Objects of `informer` whose index `index` yields `value`. */
  byIndex: (informer, index, value) => read(() => rawStores.byIndex(informer, index, value)),
};

/** Asking for more reconciles than the informers cause. */
export const queue = {
  /**
   * Queues `key` of the primary resource for a reconcile after `afterMs`
   * milliseconds (rounded up; 0: as soon as a worker is free). A key already
   * queued is reconciled once, at the earliest time asked.
   */
  enqueue: (key, afterMs = 0) => rawEnqueue(key, millis(afterMs)),
};

// ---- writes -----------------------------------------------------------------

/** JSON text of a request body: text passes through, values are stringified. */
function body(value) {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** Names one object. */
export class Target {
  constructor(apiVersion, kind, namespace, name) {
    this.apiVersion = apiVersion;
    this.kind = kind;
    /** undefined for a cluster-scoped object. */
    this.namespace = namespace ?? undefined;
    this.name = name;
  }
  static namespaced(apiVersion, kind, namespace, name) {
    return new Target(apiVersion, kind, namespace, name);
  }
  static cluster(apiVersion, kind, name) {
    return new Target(apiVersion, kind, undefined, name);
  }
  /** The object a cached version belongs to. */
  static of(obj) {
    return new Target(obj.apiVersion(), obj.kind(), obj.namespace(), obj.name());
  }
  /**
   * The object a manifest (a value, or JSON text) names, or undefined when
   * one of `apiVersion`, `kind` and `metadata.name` is missing.
   */
  static ofJson(manifest) {
    const m = typeof manifest === 'string' ? JSON.parse(manifest) : manifest;
    const text = (v) => (typeof v === 'string' ? v : undefined);
    const [apiVersion, kind, name] = [text(m?.apiVersion), text(m?.kind), text(m?.metadata?.name)];
    if (apiVersion === undefined || kind === undefined || name === undefined) return undefined;
    return new Target(apiVersion, kind, text(m.metadata.namespace), name);
  }
  /** `Kind namespace/name`, or `Kind name` for a cluster-scoped object. */
  toString() {
    return this.namespace === undefined ? `${this.kind} ${this.name}` : `${this.kind} ${this.namespace}/${this.name}`;
  }
  raw() {
    return { apiVersion: this.apiVersion, kind: this.kind, namespace: this.namespace, name: this.name };
  }
}

/** A patch body by content type: `merge`, `json` or `apply`. */
export class Patch {
  constructor(type, body, forced = false) {
    this.type = type;
    this.body = body;
    this.forced = forced;
  }
  /** A JSON merge patch (RFC 7386): `null` removes a field, lists are replaced. */
  static merge(value) {
    return new Patch('merge', body(value));
  }
  /** A JSON patch (RFC 6902): a list of operations. */
  static json(value) {
    return new Patch('json', body(value));
  }
  /**
   * A server-side apply of `config` (a partial object naming `apiVersion`,
   * `kind` and `metadata`, with only the fields the controller owns) with the
   * plugin's name as field manager. It fails with a conflict on fields
   * another manager owns; `force()` it to take them.
   */
  static apply(config) {
    return new Patch('apply', body(config));
  }
  /** The same apply, taking fields other managers own; other patches unchanged. */
  force() {
    return new Patch(this.type, this.body, this.type === 'apply');
  }
  raw() {
    if (this.type === 'apply') return { tag: 'apply', val: { config: this.body, force: this.forced } };
    return { tag: this.type, val: this.body };
  }
}

const PROPAGATIONS = ['orphan', 'background', 'foreground'];

/**
 * Preconditions and propagation (`'orphan'`, `'background'`, `'foreground'`,
 * or undefined for the kind's default) of a delete.
 */
export class DeleteOptions {
  constructor({ uid, resourceVersion, propagation } = {}) {
    if (propagation !== undefined && !PROPAGATIONS.includes(propagation)) {
      throw new TypeError(`unknown propagation ${propagation}`);
    }
    this.uid = uid ?? undefined;
    this.resourceVersion = resourceVersion ?? undefined;
    this.propagation = propagation;
  }
  /** Only the version that was read: the same uid and resourceVersion. */
  static exactly(obj) {
    return new DeleteOptions({ uid: obj.uid(), resourceVersion: obj.resourceVersion() });
  }
  raw() {
    return { uid: this.uid, resourceVersion: this.resourceVersion, propagation: this.propagation };
  }
}

/**
 * Why a write did not happen (the `Status` reasons of the API conventions).
 *
 * `reason` is one of 'not-found', 'already-exists', 'conflict', 'forbidden',
 * 'invalid', 'rate-limited', 'timeout', 'bad-request', 'server-error';
 * `detail` is the message, or for 'invalid' `{message, causes}`, for
 * 'rate-limited' `{message, retryAfterSeconds}`, for 'server-error`
 * `{code, message}`. It is a `PluginError` whose message is its one-line
 * description, so a `KubeError` escaping `reconcile` returns that as the
 * error.
 */
export class KubeError extends PluginError {
  constructor(reason, detail) {
    super(describeKubeError(reason, detail));
    this.name = 'KubeError';
    this.reason = reason;
    this.detail = detail;
  }
  isNotFound() {
    return this.reason === 'not-found';
  }
  isAlreadyExists() {
    return this.reason === 'already-exists';
  }
  isConflict() {
    return this.reason === 'conflict';
  }
}

function describeKubeError(reason, detail) {
  switch (reason) {
    case 'invalid':
      return [`invalid: ${detail.message}`, ...detail.causes.map((c) => `; ${c.field}: ${c.message}`)].join('');
    case 'rate-limited':
      return detail.retryAfterSeconds === undefined || detail.retryAfterSeconds === null
        ? `rate limited: ${detail.message}`
        : `rate limited (retry after ${detail.retryAfterSeconds}s): ${detail.message}`;
    case 'server-error':
      return `server error ${detail.code}: ${detail.message}`;
    default:
      return `${reason.replaceAll('-', ' ')}: ${detail}`;
  }
}

function write(call) {
  try {
    return call();
  } catch (e) {
    const raw = payloadOf(e);
    if (raw !== null && typeof raw === 'object' && typeof raw.tag === 'string') throw new KubeError(raw.tag, raw.val);
    throw e;
  }
}

/**
 * Writes to the cluster. Each throws a `KubeError` when the write did not
 * happen; bodies are values (stringified) or JSON text; successful writes
 * answer the object as stored, as JSON text.
 */
export const kube = {
  /** Creates the object (it names apiVersion, kind, namespace, name). */
  create: (obj) => write(() => rawKube.create(body(obj))),
  /** Replaces the object; its resourceVersion, when set, must be current. */
  replace: (obj) => write(() => rawKube.replace(body(obj))),
  /** Patches `target` (a `Target`) with a `Patch`. */
  patch: (target, patch) => write(() => rawKube.patch(target.raw(), patch.raw())),
  /**
   * Deletes `target`; answers the object when it was only marked for
   * deletion (it has finalizers), undefined when it is gone.
   */
  delete: (target, options = new DeleteOptions()) =>
    write(() => rawKube.delete(target.raw(), options.raw())) ?? undefined,
  /** Replaces the object's status subresource. */
  replaceStatus: (obj) => write(() => rawKube.replaceStatus(body(obj))),
  /** Patches the object's status subresource. */
  patchStatus: (target, patch) => write(() => rawKube.patchStatus(target.raw(), patch.raw())),
  /**
   * Records an Event about `involved` (a `Target`); `eventType` is 'Normal'
   * or 'Warning', `reason` UpperCamelCase, `message` for people.
   */
  recordEvent: (involved, eventType, reason, message) => {
    const type = String(eventType).toLowerCase();
    if (type !== 'normal' && type !== 'warning') throw new TypeError(`unknown event type ${eventType}`);
    write(() => rawKube.recordEvent(involved.raw(), type, reason, message));
  },
};
