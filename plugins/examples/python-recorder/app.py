"""The Python twin of the Rust `recorder` plugin: logs exactly one info line
per notification, in the format of `informer_guest.describe`, and
`init <config>` on init.

With `{"throw_on": "<name>"}` it raises (an exception escaping the handler:
a trap) on every notification about an object of that name; with
`{"fail_on": "<name>"}` it returns an error for it instead; with
`{"check_json": true}` it first returns an error unless the metadata
accessors agree with the object's body.
"""

import json

import informer_guest as ig


def check_json(obj):
    meta = json.loads(obj.json())["metadata"]
    namespace = meta.get("namespace")
    key = f"{namespace}/{meta['name']}" if namespace else meta["name"]
    fields = (obj.key(), obj.namespace(), obj.name(), obj.uid(), obj.resource_version())
    if fields != (key, namespace, meta["name"], meta.get("uid"), meta.get("resourceVersion")):
        raise ig.Error(f"the body of {obj.key()} disagrees with its metadata: {fields}")
    labels = sorted(meta.get("labels", {}).items())
    if obj.labels() != labels:
        raise ig.Error(f"{obj.key()}: labels {obj.labels()}, {labels} in the body")
    for k, v in labels:
        if obj.label(k) != v:
            raise ig.Error(f"{obj.key()}: label {k} is {obj.label(k)!r}, {v!r} in the body")
    if obj.label("no-such-label") is not None:
        raise ig.Error(f"{obj.key()}: a missing label was found")


class Recorder(ig.Handler):
    throw_on = fail_on = None
    checks_json = False

    def init(self, config):
        ig.info(f"init {config.text}")
        settings = config.parse()
        self.throw_on = settings.get("throw_on")
        self.fail_on = settings.get("fail_on")
        self.checks_json = settings.get("check_json", False)

    def check(self, name):
        if name == self.throw_on:
            raise RuntimeError(f"told to throw on {name}")
        if name == self.fail_on:
            raise ig.Error(f"told to fail on {name}")

    def on_add(self, obj, is_in_initial_list):
        if self.checks_json:
            check_json(obj)
        self.check(obj.name())
        ig.info(ig.describe.add(obj, is_in_initial_list))

    def on_update(self, old, new):
        if self.checks_json:
            check_json(new)
        self.check(new.name())
        ig.info(ig.describe.update(old, new))

    def on_delete(self, obj):
        self.check(obj.name())
        ig.info(ig.describe.delete(obj))


ResourceEventHandler = ig.export(Recorder)
BatchHandler = ig.BatchHandler
