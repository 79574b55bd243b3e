// Does nothing: the benchmark baseline for the cost of a call (the
// JavaScript twin of the Rust `noop` plugin).
import { Handler, exportHandler } from '../js-sdk/informer-guest.js';

class Noop extends Handler {}

export const resourceEventHandler = exportHandler(Noop);
