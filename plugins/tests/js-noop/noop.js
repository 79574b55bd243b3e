// Does nothing: the benchmark baseline for the cost of a call (the
// JavaScript twin of the Rust `noop` plugin).
import { Handler, exportHandler } from '../../../sdk/js/informer-guest.js';
import { exportBatchHandler } from '../../../sdk/js/informer-batch.js';

class Noop extends Handler {}

export const resourceEventHandler = exportHandler(Noop);
export const batchHandler = exportBatchHandler(resourceEventHandler);
