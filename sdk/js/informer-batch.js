// The batch path of the JavaScript guest SDK (world `batched-handler`):
//
//   export const resourceEventHandler = exportHandler(Greeter);
//   export const batchHandler = exportBatchHandler(resourceEventHandler);
//
// The host passes many notifications per `onBatch` call. Objects are lent
// lazily: metadata comes from one buffer per batch (`delivery.metadata`),
// and the host's handle is taken only when the body is read and handed back
// when the item returns. Before an item's first visible effect (a log line,
// an exception escaping to a trap) the host is told `delivery.begin(index)`,
// and after such an item, or one that returned an error,
// `delivery.done(index, error)`: a trap then skips exactly the item at
// fault, as one call per notification would.
import { begin, done, lend, metadata } from 'informer-host:plugin/delivery@0.1.0';
import { PluginError, batchItem } from './informer-guest.js';

batchItem.begin = () => {
  batchItem.begun = true;
  begin(batchItem.index);
};

const NONE = 0xffffffff;
// Bytes of a record's header in `delivery.metadata`: the record's size;
// the offset and length of each of its seven fields; its label count. The
// label table of 2n + 1 offsets follows it.
const HEADER = 64;
const utf8 = new TextDecoder();
// componentize-js gives imported resources this method to drop the handle.
const dispose = Symbol.dispose || Symbol.for('dispose');

/** The batch's metadata, fetched by the first object whose metadata is read
 * and decoded slot by slot as far as objects are read. */
class Metadata {
  constructor() {
    this.bytes = undefined;
    this.at = 0;
    this.records = [];
  }
  u32(at) {
    return this.view.getUint32(at, true);
  }
  text(start, end) {
    return utf8.decode(this.bytes.subarray(start, end));
  }
  /** [key, namespace, name, uid, resourceVersion, apiVersion, kind, labels]. */
  record(slot) {
    if (this.bytes === undefined) {
      this.bytes = metadata();
      this.view = new DataView(this.bytes.buffer, this.bytes.byteOffset, this.bytes.byteLength);
    }
    while (this.records.length <= slot) {
      const start = this.at;
      const r = [];
      for (let f = 0; f < 7; f++) {
        const offset = start + this.u32(start + 4 + 8 * f);
        const n = this.u32(start + 8 + 8 * f);
        r.push(n === NONE ? undefined : this.text(offset, offset + n));
      }
      const count = this.u32(start + 60);
      // Label i's key and value lie between bounds 2i, 2i + 1 and 2i + 2.
      const bound = (j) => start + this.u32(start + HEADER + 4 * j);
      const labels = [];
      for (let i = 0; i < count; i++) {
        labels.push([this.text(bound(2 * i), bound(2 * i + 1)), this.text(bound(2 * i + 1), bound(2 * i + 2))]);
      }
      r.push(labels);
      this.records.push(r);
      this.at = start + this.u32(start);
    }
    return this.records[slot];
  }
}

/** An object of the batch in flight, with the methods of the `object`
 * resource. */
class Lent {
  constructor(slot, meta) {
    this.slot = slot;
    this.meta = meta;
    this.obj = undefined;
  }
  handle() {
    return (this.obj ??= lend(this.slot));
  }
  release() {
    if (this.obj !== undefined) {
      this.obj[dispose]?.();
      this.obj = undefined;
    }
  }
  key() {
    return this.meta.record(this.slot)[0];
  }
  namespace() {
    return this.meta.record(this.slot)[1];
  }
  name() {
    return this.meta.record(this.slot)[2];
  }
  uid() {
    return this.meta.record(this.slot)[3];
  }
  resourceVersion() {
    return this.meta.record(this.slot)[4];
  }
  apiVersion() {
    return this.meta.record(this.slot)[5];
  }
  kind() {
    return this.meta.record(this.slot)[6];
  }
  labels() {
    return this.meta.record(this.slot)[7].map(([k, v]) => [k, v]);
  }
  label(key) {
    const pair = this.meta.record(this.slot)[7].find(([k]) => k === key);
    return pair === undefined ? undefined : pair[1];
  }
  annotations() {
    return this.handle().annotations();
  }
  json() {
    return this.handle().json();
  }
  pointer(pointer) {
    return this.handle().pointer(pointer);
  }
}

/** What a method threw, as the `err` the one-call path would return, or
 * undefined for an exception that traps (see `PluginError`). */
function returnedError(e) {
  if (e instanceof PluginError) return e.payload;
  if (typeof e === 'string') return e;
  return undefined;
}

/** The `batchHandler` export object over `resourceEventHandler` (what
 * `exportHandler` returned). */
export function exportBatchHandler(resourceEventHandler) {
  return {
    onBatch(kinds, tombstoneKeys) {
      const meta = new Metadata();
      let slot = 0;
      let tombstone = 0;
      const next = () => new Lent(slot++, meta);
      for (let index = 0; index < kinds.length; index++) {
        batchItem.index = index;
        batchItem.begun = false;
        const kind = kinds[index];
        const lent = [];
        let err;
        try {
          if (kind <= 1) {
            const obj = next();
            lent.push(obj);
            resourceEventHandler.onAdd(obj, kind === 1);
          } else if (kind === 2) {
            const old = next();
            const cur = next();
            lent.push(old, cur);
            resourceEventHandler.onUpdate(old, cur);
          } else if (kind === 3) {
            const obj = next();
            lent.push(obj);
            resourceEventHandler.onDelete({ tag: 'object', val: obj });
          } else if (kind === 4) {
            const obj = next();
            lent.push(obj);
            const key = tombstoneKeys[tombstone++] ?? '';
            resourceEventHandler.onDelete({ tag: 'unknown-final-state', val: { key, lastKnown: obj } });
          } else {
            err = `unknown notification kind ${kind} from the host`;
          }
        } catch (e) {
          err = returnedError(e);
          if (err === undefined) {
            // The exception's report is a visible effect: the trap that
            // follows must skip this item only.
            if (!batchItem.begun) batchItem.begin();
            batchItem.index = -1;
            throw e;
          }
        } finally {
          for (const obj of lent) obj.release();
        }
        if (batchItem.begun || err !== undefined) done(index, err);
      }
      batchItem.index = -1;
    },
  };
}
