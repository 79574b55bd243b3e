"""The Python twin of the Rust `label-audit` plugin: warns about added or
updated objects that lack any of the labels named in its config
(`{"required": ["app", "team"]}`). Reads metadata only."""

import informer_guest as ig


class LabelAudit(ig.Handler):
    required = []

    def init(self, config):
        settings = config.parse()
        unknown = sorted(set(settings) - {"required"})
        if unknown:
            raise ig.Error(f"invalid plugin configuration: unknown field `{unknown[0]}`, expected `required`")
        self.required = settings.get("required", [])

    def audit(self, obj):
        missing = [label for label in self.required if obj.label(label) is None]
        if missing:
            ig.warn(f"{obj.kind()} {obj.key()} is missing required labels: {', '.join(missing)}")

    def on_add(self, obj, is_in_initial_list):
        self.audit(obj)

    def on_update(self, old, new):
        self.audit(new)


ResourceEventHandler = ig.export(LabelAudit)
BatchHandler = ig.BatchHandler
