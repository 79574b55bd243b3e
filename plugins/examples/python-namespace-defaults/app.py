"""Namespace defaults, in Python: every Namespace labelled for a tenant gets a
default ResourceQuota, LimitRange and RoleBinding, owned by the Namespace.

The twin of the Rust ``namespace-defaults`` plugin (plugins/namespace-defaults,
docs/controllers.md): the same configuration, the same informers, the same
writes (one forced server-side apply per missing or changed default, none
when everything is as configured) and the same log lines.

Informers (names from the config, defaults shown):

- ``namespaces`` (v1 Namespaces): the primary; reconciled by name.
- ``resourcequotas``, ``limitranges`` (v1), ``rolebindings``
  (rbac.authorization.k8s.io/v1): secondaries, which the host maps to their
  owner through the ownerReference this controller sets.

Write quantities in their canonical form (``500m``, not ``0.5``): the API
server stores that form, and a config that differs from it would be applied
again on every resync.
"""

import json

import informer_controller as ic

# How many reconciles in a row may pass over a default this controller wrote
# and the cache does not show yet, before writing it again.
MAX_WAITS = 5

TENANT_DEFAULT = "tenant-default"
TENANT_ADMINS = "tenant-admins"


def _settings(config):
    """The settings: the defaults, overridden by ``config``; unknown fields
    are refused (like the Rust twin's ``deny_unknown_fields``)."""
    settings = {
        "tenant_label": "informer-host.dev/tenant",
        "namespaces": "namespaces",
        "resourcequotas": "resourcequotas",
        "limitranges": "limitranges",
        "rolebindings": "rolebindings",
        "resource_quota": {
            "name": TENANT_DEFAULT,
            "hard": {"pods": "50", "requests.cpu": "8", "requests.memory": "16Gi"},
        },
        "limit_range": {
            "name": TENANT_DEFAULT,
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "500m", "memory": "512Mi"},
                    "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
                }
            ],
        },
        "role_binding": {
            "name": TENANT_ADMINS,
            "cluster_role": "admin",
            "subjects": [{"kind": "Group", "name": "tenant:{tenant}"}],
        },
    }
    if not isinstance(config, dict):
        raise ic.Error("the configuration is not a JSON object")
    _known(config, settings.keys(), "the configuration")
    for key in ("tenant_label", "namespaces", "resourcequotas", "limitranges", "rolebindings"):
        if key in config:
            settings[key] = _string(config[key], key)
    kinds = {
        "resource_quota": (TENANT_DEFAULT, {"hard": dict}),
        "limit_range": (TENANT_DEFAULT, {"limits": list}),
        "role_binding": (TENANT_ADMINS, {"cluster_role": str, "subjects": list}),
    }
    for key, (name, required) in kinds.items():
        if key not in config:
            continue
        value = config[key]
        if value is None:
            settings[key] = None  # leaves that kind alone
            continue
        if not isinstance(value, dict):
            raise ic.Error(f"{key}: not an object")
        _known(value, ["name", *required], key)
        for field, of_type in required.items():
            if not isinstance(value.get(field), of_type):
                raise ic.Error(f"{key}.{field}: missing or not {_JSON_TYPES[of_type]}")
        settings[key] = {"name": _string(value.get("name", name), f"{key}.name"), **value}
    quota = settings["resource_quota"]
    if quota is not None:
        for resource, quantity in quota["hard"].items():
            _string(quantity, f"resource_quota.hard.{resource}")
    binding = settings["role_binding"]
    if binding is not None:
        for subject in binding["subjects"]:
            if not isinstance(subject, dict):
                raise ic.Error("role_binding.subjects: not an object")
            _known(subject, ["kind", "name", "namespace"], "role_binding.subjects")
            for field in ("kind", "name"):
                _string(subject.get(field), f"role_binding.subjects.{field}")
    return settings


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string"}


def _known(value, fields, what):
    for key in value:
        if key not in fields:
            raise ic.Error(f"{what}: unknown field `{key}`")


def _string(value, what):
    if not isinstance(value, str):
        raise ic.Error(f"{what}: not a string")
    return value


class NamespaceDefaults(ic.Reconciler):
    def __init__(self):
        self.settings = _settings({})
        # Defaults written whose write the cache has not shown yet: str(target)
        # -> (the resourceVersion the write answered, reconciles that waited).
        # The informers of the other kinds can run ahead of this one's.
        self.written = {}

    def init(self, config):
        self.settings = _settings(config.parse())

    def reconcile(self, name):
        s = self.settings
        namespace = ic.stores.get(s["namespaces"], name)
        if namespace is None:
            return ic.Action.done()  # deleted: what it owned goes with it
        if namespace.pointer("/metadata/deletionTimestamp") is not None:
            return ic.Action.done()  # terminating: the server refuses new objects in it
        tenant = namespace.label(s["tenant_label"])
        if tenant is None:
            return ic.Action.done()  # not a tenant's
        uid = namespace.uid()
        if uid is None:
            raise ic.Error("a Namespace without a uid")
        waiting = False
        for informer, desired in self.desired(name, uid, tenant):
            target = ic.Target.of_json(desired)
            if target is None:
                raise ic.Error("a default without a name")
            cached = ic.stores.get(informer, f"{name}/{target.name}")
            current = None if cached is None else ic.parse(cached)
            key = str(target)
            if current is not None and contains(current, desired):
                self.written.pop(key, None)
                continue  # already as configured: no write
            if key in self.written:
                rv, waits = self.written[key]
                cached_rv = None if current is None else current.get("metadata", {}).get("resourceVersion")
                if cached_rv != rv and waits < MAX_WAITS:
                    # Written, not in the cache yet: look again soon.
                    self.written[key] = (rv, waits + 1)
                    waiting = True
                    continue
            # A RoleBinding's roleRef cannot change: replace the binding.
            if current is not None and target.kind == "RoleBinding" and current.get("roleRef") != desired.get("roleRef"):
                ic.kube.delete(target, ic.DeleteOptions(uid=uid_of(current)))
            stored = json.loads(ic.kube.patch(target, ic.Patch.apply(desired).force()))
            rv = stored.get("metadata", {}).get("resourceVersion") if isinstance(stored, dict) else None
            if rv is not None:
                self.written[key] = (rv, 0)
            verb = "updated" if current is not None else "created"
            ic.info(f"{verb} {target} for tenant {tenant}")
        return ic.Action.requeue_after(1) if waiting else ic.Action.done()

    def desired(self, namespace, uid, tenant):
        """Each configured default for the Namespace ``namespace`` (with
        ``uid``) of ``tenant``, with the informer that caches its kind."""
        s = self.settings

        def metadata(name):
            return {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "namespace-defaults", s["tenant_label"]: tenant},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": uid, "controller": True}
                ],
            }

        desired = []
        quota = s["resource_quota"]
        if quota is not None:
            desired.append(
                (
                    s["resourcequotas"],
                    {
                        "apiVersion": "v1",
                        "kind": "ResourceQuota",
                        "metadata": metadata(quota["name"]),
                        "spec": {"hard": quota["hard"]},
                    },
                )
            )
        limits = s["limit_range"]
        if limits is not None:
            desired.append(
                (
                    s["limitranges"],
                    {
                        "apiVersion": "v1",
                        "kind": "LimitRange",
                        "metadata": metadata(limits["name"]),
                        "spec": {"limits": limits["limits"]},
                    },
                )
            )
        binding = s["role_binding"]
        if binding is not None:
            subjects = []
            for subject in binding["subjects"]:
                # The server defaults apiGroup, and stores a ServiceAccount's
                # empty one as absent (`omitempty`): written the way it is
                # stored, the comparison with the cache stays exact.
                value = {"kind": subject["kind"], "name": subject["name"].replace("{tenant}", tenant)}
                if subject["kind"] != "ServiceAccount":
                    value["apiGroup"] = "rbac.authorization.k8s.io"
                if subject.get("namespace") is not None:
                    value["namespace"] = subject["namespace"].replace("{tenant}", tenant)
                subjects.append(value)
            desired.append(
                (
                    s["rolebindings"],
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "RoleBinding",
                        "metadata": metadata(binding["name"]),
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "ClusterRole",
                            "name": binding["cluster_role"],
                        },
                        "subjects": subjects,
                    },
                )
            )
        return desired


def contains(actual, desired):
    """Whether ``actual`` has every field of ``desired`` with the same value.
    Fields only ``actual`` has (status, server defaults, others' labels) do
    not count; lists must match item by item."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(k in actual and contains(actual[k], d) for k, d in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(desired)
            and all(contains(a, d) for a, d in zip(actual, desired))
        )
    # JSON values: `true` is not `1`.
    return type(actual) is type(desired) and actual == desired


def uid_of(obj):
    uid = (obj.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else None


Reconciler = ic.export_controller(NamespaceDefaults)
