"""Python guest SDK for Informer Host plugins (componentize-py).

A plugin is a module that subclasses :class:`Handler` and exports it::

    import informer_guest as ig

    class Greeter(ig.Handler):
        def init(self, config):
            self.prefix = config.parse().get("prefix", "hello")

        def on_add(self, obj, is_in_initial_list):
            ig.info(f"{self.prefix} {obj.key()}")

    ResourceEventHandler = ig.export(Greeter)

and is built with (from the plugin's folder)::

    componentize-py -d ../../wit -w plugin componentize app -p . -p ../python-sdk -o plugin.wasm

- **State**: :func:`export` keeps one value of the handler class per
  instance. ``init`` creates it and calls :meth:`Handler.init` with the
  plugin's :class:`Config`; a notification before ``init`` gets a fresh one.
  A trapped instance is never called again, so state never outlives a trap.
- **Errors**: raise :class:`Error` (``Error("message")``) to return ``err``
  from a handler method: the host logs and counts it. Any other exception
  escaping a method traps the instance, like a Rust panic: the host skips
  that notification, waits a second and goes on with a fresh instance.
- **Objects** are host-owned (``wit_world.imports.types.Object``):
  ``key()``, ``name()``, ``namespace()``, ``resource_version()``,
  ``label(k)``, ... never copy the body; ``json()`` returns it and
  :func:`parse` decodes it. :class:`Deleted` wraps what ``on_delete`` gets.
- **Logging**: :func:`trace`, :func:`debug`, :func:`info`, :func:`warn`,
  :func:`error` call the host's ``log`` import.
- **Cache**: :func:`cache_get`, :func:`cache_list`, :func:`cache_by_index`
  (only when the host grants the ``cache`` capability).

Controllers (world ``controller``) use :mod:`informer_controller`, next to
this module.
"""

import json as _json

from componentize_py_types import Err as _Err
from wit_world import exports as _exports
from wit_world.imports import log as _log
from wit_world.imports import types as _types

Object = _types.Object
Level = _types.Level


Error = _Err
"""Raise ``Error("message")`` to return ``err(message)`` from a handler method."""


class Config:
    """The plugin's configuration: JSON text from the host."""

    def __init__(self, text):
        self.text = text

    def is_empty(self):
        return not self.text.strip()

    def parse(self):
        """The configuration as Python values; blank text parses as ``{}``."""
        if self.is_empty():
            return {}
        try:
            return _json.loads(self.text)
        except ValueError as e:
            raise Error(f"invalid plugin configuration: {e}") from None


class Deleted:
    """What ``on_delete`` receives: the last known state, or a tombstone."""

    def __init__(self, raw):
        self.raw = raw

    def is_tombstone(self):
        """True for client-go's ``DeletedFinalStateUnknown``."""
        return isinstance(self.raw, _types.Deleted_UnknownFinalState)

    def last_known(self):
        """The deleted object, or a tombstone's last cached state (or None)."""
        if self.is_tombstone():
            return self.raw.value.last_known
        return self.raw.value

    def key(self):
        if self.is_tombstone():
            return self.raw.value.key
        return self.raw.value.key()

    def name(self):
        obj = self.last_known()
        if obj is not None:
            return obj.name()
        return self.key().rpartition("/")[2]


def parse(obj):
    """The whole object (its ``json()``) as Python values."""
    return _json.loads(obj.json())


def parse_at(obj, pointer):
    """The value at an RFC 6901 pointer such as ``/spec/replicas``, or None."""
    text = obj.pointer(pointer)
    return None if text is None else _json.loads(text)


class Handler:
    """Base class of a plugin's handler; every method is a no-op by default."""

    def init(self, config):
        pass

    def on_add(self, obj, is_in_initial_list):
        pass

    def on_update(self, old, new):
        pass

    def on_delete(self, obj):
        pass


class describe:
    """One-line descriptions in the format the Rust SDK's ``describe`` uses
    (the recorder plugins log exactly these lines)."""

    @staticmethod
    def _rv(obj):
        rv = None if obj is None else obj.resource_version()
        return "none" if rv is None else rv

    @staticmethod
    def add(obj, is_in_initial_list):
        initial = "true" if is_in_initial_list else "false"
        return f"add {obj.key()} rv={describe._rv(obj)} initial={initial}"

    @staticmethod
    def update(old, new):
        return f"update {new.key()} rv={describe._rv(old)}->{describe._rv(new)}"

    @staticmethod
    def delete(obj):
        kind = "delete-tombstone" if obj.is_tombstone() else "delete"
        return f"{kind} {obj.key()} rv={describe._rv(obj.last_known())}"


def log(level, message):
    _log.log(level, message)


def trace(message):
    _log.log(Level.TRACE, message)


def debug(message):
    _log.log(Level.DEBUG, message)


def info(message):
    _log.log(Level.INFO, message)


def warn(message):
    _log.log(Level.WARN, message)


def error(message):
    _log.log(Level.ERROR, message)


def cache_get(key):
    from wit_world.imports import cache

    return cache.get(key)


def cache_list(namespace=None):
    from wit_world.imports import cache

    return cache.list(namespace)


def cache_by_index(index, value):
    from wit_world.imports import cache

    try:
        return cache.by_index(index, value)
    except _Err as e:
        raise Error(e.value) from None


def export(handler_class):
    """The ``ResourceEventHandler`` export class for ``handler_class``.

    Assign it at module level of the app: ``ResourceEventHandler = export(MyHandler)``.
    """
    state = {}

    def current():
        if "handler" not in state:
            state["handler"] = handler_class()
        return state["handler"]

    class ResourceEventHandler(_exports.ResourceEventHandler):
        def init(self, config):
            handler = handler_class()
            handler.init(Config(config))
            state["handler"] = handler

        def on_add(self, obj, is_in_initial_list):
            current().on_add(obj, is_in_initial_list)

        def on_update(self, old, new):
            current().on_update(old, new)

        def on_delete(self, obj):
            current().on_delete(Deleted(obj))

    return ResourceEventHandler
