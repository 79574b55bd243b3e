// The JavaScript twin of the Rust `recorder` plugin: logs exactly one info
// line per notification, in the format of `describe`, and `init <config>` on
// init. With `{"throw_on": "<name>"}` it throws (an exception escaping the
// handler: a trap) on every notification about an object of that name; with
// `{"fail_on": "<name>"}` it returns an error for it instead; with
// `{"check_json": true}` it first returns an error unless the metadata
// accessors agree with the object's body.
import { Handler, PluginError, describe, exportHandler, info } from '../../../sdk/js/informer-guest.js';
import { exportBatchHandler } from '../../../sdk/js/informer-batch.js';

function checkJson(obj) {
  const meta = JSON.parse(obj.json()).metadata;
  const key = meta.namespace ? `${meta.namespace}/${meta.name}` : meta.name;
  const fields = [obj.key(), obj.namespace(), obj.name(), obj.uid(), obj.resourceVersion()];
  const body = [key, meta.namespace, meta.name, meta.uid, meta.resourceVersion];
  if (JSON.stringify(fields) !== JSON.stringify(body)) {
    throw new PluginError(`the body of ${obj.key()} disagrees with its metadata: ${JSON.stringify(fields)}`);
  }
  const labels = Object.entries(meta.labels ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (JSON.stringify(obj.labels()) !== JSON.stringify(labels)) {
    throw new PluginError(`${obj.key()}: labels ${JSON.stringify(obj.labels())}, ${JSON.stringify(labels)} in the body`);
  }
  for (const [k, v] of labels) {
    if (obj.label(k) !== v) throw new PluginError(`${obj.key()}: label ${k} is ${obj.label(k)}, ${v} in the body`);
  }
  if (obj.label('no-such-label') !== undefined) throw new PluginError(`${obj.key()}: a missing label was found`);
}

class Recorder extends Handler {
  init(config) {
    info(`init ${config.text}`);
    const { throw_on: throwOn, fail_on: failOn, check_json: checksJson } = config.parse();
    Object.assign(this, { throwOn, failOn, checksJson });
  }
  check(name) {
    if (name === this.throwOn) throw new Error(`told to throw on ${name}`);
    if (name === this.failOn) throw new PluginError(`told to fail on ${name}`);
  }
  onAdd(obj, isInInitialList) {
    if (this.checksJson) checkJson(obj);
    this.check(obj.name());
    info(describe.add(obj, isInInitialList));
  }
  onUpdate(old, cur) {
    if (this.checksJson) checkJson(cur);
    this.check(cur.name());
    info(describe.update(old, cur));
  }
  onDelete(obj) {
    this.check(obj.name());
    info(describe.delete(obj));
  }
}

export const resourceEventHandler = exportHandler(Recorder);
export const batchHandler = exportBatchHandler(resourceEventHandler);
