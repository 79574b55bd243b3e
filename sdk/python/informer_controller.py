"""Python guest SDK for Informer Host controllers (world ``controller``).

A controller is a module that subclasses :class:`Reconciler` and exports it::

    import informer_controller as ic

    class Labeller(ic.Reconciler):
        def init(self, config):
            self.settings = config.parse()

        def reconcile(self, key):
            ns = ic.stores.get("namespaces", key)
            if ns is None:
                return ic.Action.done()  # deleted
            if ns.label("team") is None:
                target = ic.Target.of(ns)
                ic.kube.patch(target, ic.Patch.merge({"metadata": {"labels": {"team": "none"}}}))
                ic.info(f"labelled {target}")
            return ic.Action.done()

    Reconciler = ic.export_controller(Labeller)

and is built by ``plugins/build-other-languages.sh`` when its folder has a
file ``world`` that says ``controller`` (componentize-py ``-w controller``).
It is the Python face of the Rust SDK's ``informer_guest::controller``:

- **Reconcile** is level-driven: read the caches (:class:`stores`), compare
  with the desired state, write only the difference (:class:`kube`), so a
  reconcile when nothing changed writes nothing. Return
  :meth:`Action.done` (or ``None``) or :meth:`Action.requeue_after`.
- **Errors**: raise :class:`Error` (``Error("message")``), or let a
  :class:`KubeError` escape, to return ``err``: the host requeues the key
  with exponential backoff. Any other exception traps the instance, like a
  Rust panic: the host replaces it and requeues the key with backoff too.
- **State**: :func:`export_controller` keeps one value of the class per
  instance (``init`` creates it). The host may run several instances and
  replaces one that trapped, so state is a per-instance cache, never the
  truth.
- **Writes** (:class:`kube`) answer the object as stored, as JSON text, or
  raise :class:`KubeError` (``reason`` says which: ``"conflict"``,
  ``"not-found"``, ``"forbidden"``, ...). The host checks each write
  against the plugin's rules and its tenant's namespaces before it leaves
  and sends it with the plugin's name as field manager.
- :mod:`informer_guest`'s :class:`Config`, :class:`Error`, :func:`parse`,
  :func:`parse_at` and the logging functions are re-exported here.
"""

import json as _json
import math as _math

from componentize_py_types import Err as _Err
from wit_world import exports as _exports
from wit_world.exports import reconciler as _reconciler
from wit_world.imports import kube as _kube
from wit_world.imports import queue as _queue
from wit_world.imports import stores as _stores

from informer_guest import (  # noqa: F401 (re-exported)
    Config,
    Error,
    Level,
    Object,
    debug,
    error,
    info,
    log,
    parse,
    parse_at,
    trace,
    warn,
)


def _millis(seconds):
    """``seconds`` in whole milliseconds, rounded up (a sub-millisecond delay
    is not "now"), at least 0."""
    return max(0, _math.ceil(seconds * 1000))


class Action:
    """What to do with a key after a successful reconcile."""

    __slots__ = ("after_ms",)

    def __init__(self, after_ms=None):
        self.after_ms = after_ms

    @staticmethod
    def done():
        """Nothing until the next change; the key's failures are forgotten."""
        return Action()

    @staticmethod
    def requeue_after(seconds):
        """Reconcile the key again after ``seconds`` (rounded up to a
        millisecond), e.g. to poll something no informer watches."""
        return Action(_millis(seconds))

    def __eq__(self, other):
        return isinstance(other, Action) and other.after_ms == self.after_ms

    def __repr__(self):
        return "Action.done()" if self.after_ms is None else f"Action.requeue_after({self.after_ms / 1000})"

    def _raw(self):
        if self.after_ms is None:
            return _reconciler.Action_Done()
        return _reconciler.Action_RequeueAfter(self.after_ms)


class Reconciler:
    """Base class of a plugin's controller."""

    def init(self, config):
        """Called once per instance with the plugin's :class:`Config`."""

    def reconcile(self, key):
        """Brings the object with ``key`` (``namespace/name``, or ``name``) to
        its desired state; it may no longer exist."""
        raise NotImplementedError("reconcile")

    def map(self, informer, obj):
        """The keys of the primary resource to reconcile because ``obj`` of the
        secondary informer ``informer`` changed (only for informers the host
        configures to be mapped by the plugin). The default maps nothing."""
        return []


def export_controller(reconciler_class):
    """The ``Reconciler`` export class for ``reconciler_class``.

    Assign it at module level of the app: ``Reconciler = export_controller(MyController)``.
    """
    state = {}

    def current():
        if "reconciler" not in state:
            state["reconciler"] = reconciler_class()
        return state["reconciler"]

    class Reconciler(_exports.Reconciler):
        def init(self, config):
            reconciler = reconciler_class()
            reconciler.init(Config(config))
            state["reconciler"] = reconciler

        def reconcile(self, key):
            try:
                action = current().reconcile(key)
            except KubeError as e:
                # componentize-py returns `err` only for an `Err` itself.
                raise Error(str(e)) from None
            if action is None:
                action = Action.done()
            if not isinstance(action, Action):
                raise TypeError(f"reconcile returned {action!r}, not an Action")
            return action._raw()

        def map(self, informer, obj):
            return [str(key) for key in current().map(informer, obj)]

    return Reconciler


# ---- reads -------------------------------------------------------------------


class stores:
    """Read access to the caches of every informer the controller watches, by
    the name the host's configuration gives them. :class:`Error` names an
    informer the controller does not watch, or an index it does not have."""

    @staticmethod
    def get(informer, key):
        """The cached :class:`Object` of ``informer`` with this key, or None."""
        try:
            return _stores.get(informer, key)
        except _Err as e:
            raise Error(e.value) from None

    @staticmethod
    def list(informer, namespace=None):
        """Every cached object of ``informer`` in a namespace, or in every
        visible namespace."""
        try:
            return _stores.list(informer, namespace)
        except _Err as e:
            raise Error(e.value) from None

    @staticmethod
    def by_index(informer, index, value):
        """Objects of ``informer`` whose index ``index`` yields ``value``."""
        try:
            return _stores.by_index(informer, index, value)
        except _Err as e:
            raise Error(e.value) from None


class queue:
    """Asking for more reconciles than the informers cause."""

    @staticmethod
    def enqueue(key, after=0):
        """Queues ``key`` of the primary resource for a reconcile after
        ``after`` seconds (rounded up to a millisecond; 0: as soon as a worker
        is free). A key already queued is reconciled once, at the earliest
        time asked."""
        _queue.enqueue(key, _millis(after))


# ---- writes ------------------------------------------------------------------


def _body(body):
    """JSON text of a request body: text passes through, values are dumped."""
    if isinstance(body, str):
        return body
    return _json.dumps(body, separators=(",", ":"))


class Target:
    """Names one object."""

    __slots__ = ("api_version", "kind", "namespace", "name")

    def __init__(self, api_version, kind, namespace, name):
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self.name = name

    @staticmethod
    def namespaced(api_version, kind, namespace, name):
        return Target(api_version, kind, namespace, name)

    @staticmethod
    def cluster(api_version, kind, name):
        return Target(api_version, kind, None, name)

    @staticmethod
    def of(obj):
        """The object a cached version (an :class:`Object`) belongs to."""
        return Target(obj.api_version(), obj.kind(), obj.namespace(), obj.name())

    @staticmethod
    def of_json(manifest):
        """The object a manifest (a dict, or JSON text) names, or None when
        one of ``apiVersion``, ``kind`` and ``metadata.name`` is missing."""
        if isinstance(manifest, str):
            manifest = _json.loads(manifest)
        metadata = manifest.get("metadata") or {}

        def text(value):
            return value if isinstance(value, str) else None

        api_version, kind, name = text(manifest.get("apiVersion")), text(manifest.get("kind")), text(metadata.get("name"))
        if api_version is None or kind is None or name is None:
            return None
        return Target(api_version, kind, text(metadata.get("namespace")), name)

    def __eq__(self, other):
        return isinstance(other, Target) and self._tuple() == other._tuple()

    def __hash__(self):
        return hash(self._tuple())

    def __repr__(self):
        return f"Target({self.api_version!r}, {self.kind!r}, {self.namespace!r}, {self.name!r})"

    def __str__(self):
        """``Kind namespace/name``, or ``Kind name`` for a cluster-scoped object."""
        if self.namespace is None:
            return f"{self.kind} {self.name}"
        return f"{self.kind} {self.namespace}/{self.name}"

    def _tuple(self):
        return (self.api_version, self.kind, self.namespace, self.name)

    def _raw(self):
        return _kube.Target(self.api_version, self.kind, self.namespace, self.name)


class Patch:
    """A patch body by content type: :meth:`merge`, :meth:`json` or :meth:`apply`."""

    __slots__ = ("type", "body", "forced")

    def __init__(self, type, body, forced=False):
        self.type = type
        self.body = body
        self.forced = forced

    @staticmethod
    def merge(body):
        """A JSON merge patch (RFC 7386): ``None`` removes a field, objects
        merge, lists are replaced whole."""
        return Patch("merge", _body(body))

    @staticmethod
    def json(body):
        """A JSON patch (RFC 6902): a list of operations."""
        return Patch("json", _body(body))

    @staticmethod
    def apply(config):
        """A server-side apply of ``config`` (a partial object naming
        ``apiVersion``, ``kind`` and ``metadata``, with only the fields the
        controller owns) with the plugin's name as field manager. It fails
        with a conflict on fields another manager owns; :meth:`force` it to
        take them."""
        return Patch("apply", _body(config))

    def force(self):
        """The same apply, taking fields other managers own. Other patches
        are unchanged."""
        return Patch(self.type, self.body, self.type == "apply")

    def __repr__(self):
        return f"Patch({self.type!r}, {self.body!r}, forced={self.forced})"

    def _raw(self):
        if self.type == "merge":
            return _kube.PatchBody_Merge(self.body)
        if self.type == "json":
            return _kube.PatchBody_Json(self.body)
        return _kube.PatchBody_Apply(_kube.Apply(self.body, self.forced))


_PROPAGATION = {
    "orphan": _kube.Propagation.ORPHAN,
    "background": _kube.Propagation.BACKGROUND,
    "foreground": _kube.Propagation.FOREGROUND,
}


class DeleteOptions:
    """Preconditions and propagation (``"orphan"``, ``"background"``,
    ``"foreground"``, or None for the kind's default) of a delete."""

    __slots__ = ("uid", "resource_version", "propagation")

    def __init__(self, uid=None, resource_version=None, propagation=None):
        if propagation is not None and propagation not in _PROPAGATION:
            raise ValueError(f"unknown propagation {propagation!r}")
        self.uid = uid
        self.resource_version = resource_version
        self.propagation = propagation

    @staticmethod
    def exactly(obj):
        """Deletes only the version that was read (an :class:`Object`): the
        same uid and resourceVersion (else a conflict)."""
        return DeleteOptions(obj.uid(), obj.resource_version())

    def _raw(self):
        propagation = None if self.propagation is None else _PROPAGATION[self.propagation]
        return _kube.DeleteOptions(self.uid, self.resource_version, propagation)


class KubeError(Exception):
    """Why a write did not happen (the ``Status`` reasons of the API conventions).

    ``reason`` is one of ``not-found``, ``already-exists``, ``conflict``,
    ``forbidden``, ``invalid``, ``rate-limited``, ``timeout``, ``bad-request``,
    ``server-error``; ``message`` is the server's (or the host's) message;
    ``causes`` (``invalid``: a list of ``(field, reason, message)``),
    ``retry_after`` (``rate-limited``: seconds or None) and ``code``
    (``server-error``) add detail. A ``KubeError`` escaping ``reconcile``
    returns its one-line description (``str(e)``) as the error, as
    :class:`Error` would.
    """

    def __init__(self, reason, message, causes=(), retry_after=None, code=None):
        self.reason = reason
        self.message = message
        self.causes = list(causes)
        self.retry_after = retry_after
        self.code = code
        Exception.__init__(self, self._describe())

    def _describe(self):
        if self.reason == "invalid":
            return "".join([f"invalid: {self.message}"] + [f"; {field}: {message}" for field, _, message in self.causes])
        if self.reason == "rate-limited" and self.retry_after is not None:
            return f"rate limited (retry after {self.retry_after}s): {self.message}"
        if self.reason == "server-error":
            return f"server error {self.code}: {self.message}"
        return f"{self.reason.replace('-', ' ')}: {self.message}"

    def __repr__(self):
        return f"KubeError({self.reason!r}, {self.message!r})"

    def is_not_found(self):
        return self.reason == "not-found"

    def is_already_exists(self):
        return self.reason == "already-exists"

    def is_conflict(self):
        return self.reason == "conflict"

    @staticmethod
    def _of(raw):
        simple = {
            _kube.KubeError_NotFound: "not-found",
            _kube.KubeError_AlreadyExists: "already-exists",
            _kube.KubeError_Conflict: "conflict",
            _kube.KubeError_Forbidden: "forbidden",
            _kube.KubeError_Timeout: "timeout",
            _kube.KubeError_BadRequest: "bad-request",
        }
        if type(raw) in simple:
            return KubeError(simple[type(raw)], raw.value)
        value = raw.value
        if isinstance(raw, _kube.KubeError_Invalid):
            causes = [(c.field, c.reason, c.message) for c in value.causes]
            return KubeError("invalid", value.message, causes=causes)
        if isinstance(raw, _kube.KubeError_RateLimited):
            return KubeError("rate-limited", value.message, retry_after=value.retry_after_seconds)
        if isinstance(raw, _kube.KubeError_ServerError):
            return KubeError("server-error", value.message, code=value.code)
        return KubeError("server-error", repr(raw), code=0)


def _write(call, *args):
    try:
        return call(*args)
    except _Err as e:
        raise KubeError._of(e.value) from None


class kube:
    """Writes to the cluster. Each raises :class:`KubeError` when the write did
    not happen; bodies are dicts (dumped as JSON) or JSON text; successful
    writes answer the object as stored, as JSON text."""

    @staticmethod
    def create(obj):
        """Creates the object (it names apiVersion, kind, namespace, name)."""
        return _write(_kube.create, _body(obj))

    @staticmethod
    def replace(obj):
        """Replaces the object; its ``metadata.resourceVersion``, when set,
        must be current (else a conflict)."""
        return _write(_kube.replace, _body(obj))

    @staticmethod
    def patch(target, patch):
        """Patches the :class:`Target` with a :class:`Patch`."""
        return _write(_kube.patch, target._raw(), patch._raw())

    @staticmethod
    def delete(target, options=None):
        """Deletes the :class:`Target`. Answers the object when it was only
        marked for deletion (it has finalizers), None when it is gone."""
        return _write(_kube.delete, target._raw(), (options or DeleteOptions())._raw())

    @staticmethod
    def replace_status(obj):
        """Replaces the object's status subresource."""
        return _write(_kube.replace_status, _body(obj))

    @staticmethod
    def patch_status(target, patch):
        """Patches the object's status subresource."""
        return _write(_kube.patch_status, target._raw(), patch._raw())

    @staticmethod
    def record_event(involved, event_type, reason, message):
        """Records an Event about the :class:`Target` ``involved``;
        ``event_type`` is ``"Normal"`` or ``"Warning"``, ``reason``
        UpperCamelCase (``ConfigChanged``), ``message`` for people."""
        types = {"normal": _kube.EventType.NORMAL, "warning": _kube.EventType.WARNING}
        if event_type.lower() not in types:
            raise ValueError(f"unknown event type {event_type!r}")
        _write(_kube.record_event, involved._raw(), types[event_type.lower()], reason, message)
