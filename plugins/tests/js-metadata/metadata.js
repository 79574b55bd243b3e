// Reads key, name, namespace, resource version and labels of every object
// and discards them: the benchmark for metadata-only handlers (the
// JavaScript twin of the Rust `metadata` plugin).
import { Handler, exportHandler } from '../../../sdk/js/informer-guest.js';
import { exportBatchHandler } from '../../../sdk/js/informer-batch.js';

function read(obj) {
  obj.key();
  obj.name();
  obj.namespace();
  obj.resourceVersion();
  obj.labels();
}

class Metadata extends Handler {
  onAdd(obj, _isInInitialList) {
    read(obj);
  }
  onUpdate(_old, cur) {
    read(cur);
  }
  onDelete(obj) {
    obj.key();
    const lastKnown = obj.lastKnown();
    if (lastKnown !== undefined && lastKnown !== null) read(lastKnown);
  }
}

export const resourceEventHandler = exportHandler(Metadata);
export const batchHandler = exportBatchHandler(resourceEventHandler);
