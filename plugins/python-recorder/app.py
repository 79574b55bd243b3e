"""The Python twin of the Rust `recorder` plugin: logs exactly one info line
per notification, in the format of `informer_guest.describe`, and
`init <config>` on init.

With `{"throw_on": "<name>"}` it raises (an exception escaping the handler:
a trap) on every notification about an object of that name; with
`{"fail_on": "<name>"}` it returns an error for it instead.
"""

import informer_guest as ig


class Recorder(ig.Handler):
    throw_on = fail_on = None

    def init(self, config):
        ig.info(f"init {config.text}")
        settings = config.parse()
        self.throw_on = settings.get("throw_on")
        self.fail_on = settings.get("fail_on")

    def check(self, name):
        if name == self.throw_on:
            raise RuntimeError(f"told to throw on {name}")
        if name == self.fail_on:
            raise ig.Error(f"told to fail on {name}")

    def on_add(self, obj, is_in_initial_list):
        self.check(obj.name())
        ig.info(ig.describe.add(obj, is_in_initial_list))

    def on_update(self, old, new):
        self.check(new.name())
        ig.info(ig.describe.update(old, new))

    def on_delete(self, obj):
        self.check(obj.name())
        ig.info(ig.describe.delete(obj))


ResourceEventHandler = ig.export(Recorder)
BatchHandler = ig.BatchHandler
