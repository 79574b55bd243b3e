// JavaScript guest SDK for Informer Host plugins (componentize-js).
//
// A plugin is an ES module that extends `Handler` and exports it:
//
//   import { Handler, exportHandler, info } from '../../../sdk/js/informer-guest.js';
//
//   class Greeter extends Handler {
//     init(config) { this.prefix = config.parse().prefix ?? 'hello'; }
//     onAdd(obj, isInInitialList) { info(`${this.prefix} ${obj.key()}`); }
//   }
//
//   export const resourceEventHandler = exportHandler(Greeter);
//   export const batchHandler = exportBatchHandler(resourceEventHandler);
//
// (`exportBatchHandler` from informer-batch.js) built with
// `node ../../../sdk/js/build.mjs plugin.js plugin.wasm batched-handler` from its
// folder (`bash plugins/build-other-languages.sh` does that). In world
// `batched-handler` the host delivers many notifications per call through
// `batchHandler`; in world `handler` (one call per notification) leave
// informer-batch.js out.
//
// - State: `exportHandler` keeps one value of the class per instance; `init`
//   creates it and calls its `init(config)`; a notification before `init`
//   gets a fresh one. A trapped instance is never called again.
// - Errors: throw `new PluginError(message)` to return `err(message)`: the
//   host logs and counts it. Any other exception escaping a method (an
//   `Error`, `TypeError`, ...) traps the instance, like a Rust panic: the
//   host skips that notification, waits a second and goes on with a fresh
//   instance.
// - Objects are host-owned resources: `key()`, `name()`, `namespace()`,
//   `resourceVersion()`, `label(k)`, ... never copy the body; `json()` returns
//   it and `parse(obj)` decodes it. `Deleted` wraps what `onDelete` gets.
//   In a batch an object is lent for its notification only: its metadata
//   comes from one buffer per batch, its body is borrowed from the host on
//   the first `json()`, `pointer()` or `annotations()` and handed back when
//   the method returns. Keep what you need (`key()`, parsed values), not the
//   object.
// - Logging: `trace`, `debug`, `info`, `warn`, `error` call the `log` import.
//
// Controllers (world `controller`) use informer-controller.js, next to this
// module.
import { log as hostLog } from 'informer-host:plugin/log@0.1.0';

/**
 * Throw to return `err(message)`. componentize-js returns a thrown value's
 * `payload` (or a thrown string) as the `err`; an exception without one
 * cannot be lowered to the WIT error type and traps.
 */
export class PluginError extends Error {
  constructor(message) {
    super(message);
    this.payload = String(message);
  }
}

export class Config {
  constructor(text) {
    this.text = text;
  }
  isEmpty() {
    return this.text.trim() === '';
  }
  /** The configuration as JS values; blank text parses as `{}`. */
  parse() {
    if (this.isEmpty()) return {};
    try {
      return JSON.parse(this.text);
    } catch (e) {
      throw new PluginError(`invalid plugin configuration: ${e.message}`);
    }
  }
}

/** What `onDelete` receives: the last known state, or a tombstone. */
export class Deleted {
  constructor(raw) {
    this.raw = raw;
  }
  /** True for client-go's `DeletedFinalStateUnknown`. */
  isTombstone() {
    return this.raw.tag === 'unknown-final-state';
  }
  /** The deleted object, or a tombstone's last cached state (or undefined). */
  lastKnown() {
    return this.isTombstone() ? this.raw.val.lastKnown : this.raw.val;
  }
  key() {
    return this.isTombstone() ? this.raw.val.key : this.raw.val.key();
  }
  name() {
    const obj = this.lastKnown();
    if (obj !== undefined && obj !== null) return obj.name();
    const key = this.key();
    return key.slice(key.lastIndexOf('/') + 1);
  }
}

/** The whole object (its `json()`) as JS values. */
export function parse(obj) {
  return JSON.parse(obj.json());
}

/** The value at an RFC 6901 pointer such as `/spec/replicas`, or undefined. */
export function parseAt(obj, pointer) {
  const text = obj.pointer(pointer);
  return text === undefined ? undefined : JSON.parse(text);
}

/** Base class of a plugin's handler; every method is a no-op by default. */
export class Handler {
  init(_config) {}
  onAdd(_obj, _isInInitialList) {}
  onUpdate(_old, _new) {}
  onDelete(_obj) {}
}

function rv(obj) {
  const v = obj === undefined || obj === null ? undefined : obj.resourceVersion();
  return v === undefined || v === null ? 'none' : v;
}

/** One-line descriptions in the format of the Rust SDK's `describe`. */
export const describe = {
  add: (obj, isInInitialList) => `add ${obj.key()} rv=${rv(obj)} initial=${isInInitialList}`,
  update: (old, cur) => `update ${cur.key()} rv=${rv(old)}->${rv(cur)}`,
  delete: (obj) => `${obj.isTombstone() ? 'delete-tombstone' : 'delete'} ${obj.key()} rv=${rv(obj.lastKnown())}`,
};

/**
 * The batch item in flight (informer-batch.js): its index (-1 outside a
 * batch), whether the host was told it is having a visible effect, and how
 * to tell it. Internal to the SDK.
 */
export const batchItem = { index: -1, begun: false, begin: undefined };

export const log = (level, message) => {
  if (batchItem.index >= 0 && !batchItem.begun) batchItem.begin();
  hostLog(level, String(message));
};
export const trace = (message) => log('trace', message);
export const debug = (message) => log('debug', message);
export const info = (message) => log('info', message);
export const warn = (message) => log('warn', message);
export const error = (message) => log('error', message);

/** The `resourceEventHandler` export object for `HandlerClass`. */
export function exportHandler(HandlerClass) {
  let handler;
  const current = () => (handler ??= new HandlerClass());
  return {
    init(config) {
      const h = new HandlerClass();
      h.init(new Config(config));
      handler = h;
    },
    onAdd(obj, isInInitialList) {
      current().onAdd(obj, isInInitialList);
    },
    onUpdate(old, cur) {
      current().onUpdate(old, cur);
    },
    onDelete(obj) {
      current().onDelete(new Deleted(obj));
    },
  };
}
