"""Does nothing: the benchmark baseline for the cost of a call (the Python
twin of the Rust `noop` plugin)."""

import informer_guest as ig


class Noop(ig.Handler):
    pass


ResourceEventHandler = ig.export(Noop)
BatchHandler = ig.BatchHandler
