"""Reads key, name, namespace, resource version and labels of every object
and discards them: the benchmark for metadata-only handlers (the Python twin
of the Rust `metadata` plugin)."""

import informer_guest as ig


def read(obj):
    obj.key()
    obj.name()
    obj.namespace()
    obj.resource_version()
    obj.labels()


class Metadata(ig.Handler):
    def on_add(self, obj, is_in_initial_list):
        read(obj)

    def on_update(self, old, new):
        read(new)

    def on_delete(self, obj):
        obj.key()
        last_known = obj.last_known()
        if last_known is not None:
            read(last_known)


ResourceEventHandler = ig.export(Metadata)
BatchHandler = ig.BatchHandler
