// The JavaScript twin of the Rust `recorder` plugin: logs exactly one info
// line per notification, in the format of `describe`, and `init <config>` on
// init. With `{"throw_on": "<name>"}` it throws (an exception escaping the
// handler: a trap) on every notification about an object of that name; with
// `{"fail_on": "<name>"}` it returns an error for it instead.
import { Handler, PluginError, describe, exportHandler, info } from '../js-sdk/informer-guest.js';
import { exportBatchHandler } from '../js-sdk/informer-batch.js';

class Recorder extends Handler {
  init(config) {
    info(`init ${config.text}`);
    const { throw_on: throwOn, fail_on: failOn } = config.parse();
    Object.assign(this, { throwOn, failOn });
  }
  check(name) {
    if (name === this.throwOn) throw new Error(`told to throw on ${name}`);
    if (name === this.failOn) throw new PluginError(`told to fail on ${name}`);
  }
  onAdd(obj, isInInitialList) {
    this.check(obj.name());
    info(describe.add(obj, isInInitialList));
  }
  onUpdate(old, cur) {
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
