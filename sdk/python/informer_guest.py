"""Python guest SDK for Informer Host plugins (componentize-py).

A plugin is a module that subclasses :class:`Handler` and exports it::

    import informer_guest as ig

    class Greeter(ig.Handler):
        def init(self, config):
            self.prefix = config.parse().get("prefix", "hello")

        def on_add(self, obj, is_in_initial_list):
            ig.info(f"{self.prefix} {obj.key()}")

    ResourceEventHandler = ig.export(Greeter)
    BatchHandler = ig.BatchHandler

and is built with (from the plugin's folder)::

    componentize-py -d ../../../wit -w batched-handler componentize app -p . -p ../../../sdk/python -o plugin.wasm

(``bash plugins/build-other-languages.sh`` does that). In world
``batched-handler`` the host delivers many notifications per call through
``BatchHandler``; in world ``handler`` (log only, one call per
notification) ``ig.BatchHandler`` is ``None`` and the line is harmless.

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
  In a batch an object is lent for its notification only: its metadata
  comes from one buffer per batch, and its body is borrowed from the host
  on the first ``json()``, ``pointer()`` or ``annotations()`` and handed
  back when the handler method returns. Keep what you need (``key()``,
  parsed values), not the object.
- **Logging**: :func:`trace`, :func:`debug`, :func:`info`, :func:`warn`,
  :func:`error` call the host's ``log`` import.
- **Cache**: :func:`cache_get`, :func:`cache_list`, :func:`cache_by_index`
  (only when the host grants the ``cache`` capability).

Controllers (world ``controller``) use :mod:`informer_controller`, next to
this module.
"""

import json as _json
import struct as _struct

from componentize_py_types import Err as _Err
from wit_world import exports as _exports
from wit_world.imports import log as _log
from wit_world.imports import types as _types

try:
    from wit_world.imports import delivery as _delivery
except ImportError:  # world `handler`: one notification per call
    _delivery = None

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
    if _item[0] >= 0 and not _item[1]:
        _begin()
    _log.log(level, message)


def trace(message):
    log(Level.TRACE, message)


def debug(message):
    log(Level.DEBUG, message)


def info(message):
    log(Level.INFO, message)


def warn(message):
    log(Level.WARN, message)


def error(message):
    log(Level.ERROR, message)


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


# The exported handler class and its one value per instance.
_state = {}


def _current():
    handler = _state.get("handler")
    if handler is None:
        handler = _state["handler"] = _state["class"]()
    return handler


def export(handler_class):
    """The ``ResourceEventHandler`` export class for ``handler_class``.

    Assign it at module level of the app: ``ResourceEventHandler = export(MyHandler)``,
    and beside it ``BatchHandler = ig.BatchHandler`` for the batch path.
    """
    _state["class"] = handler_class
    _state.pop("handler", None)

    class ResourceEventHandler(_exports.ResourceEventHandler):
        def init(self, config):
            handler = handler_class()
            handler.init(Config(config))
            _state["handler"] = handler

        def on_add(self, obj, is_in_initial_list):
            _current().on_add(obj, is_in_initial_list)

        def on_update(self, old, new):
            _current().on_update(old, new)

        def on_delete(self, obj):
            _current().on_delete(Deleted(obj))

    return ResourceEventHandler


# ---- the batch path (world `batched-handler`) ------------------------------
#
# The host passes many notifications per `on_batch` call. Before an item's
# first visible effect (a log line, an exception escaping to a trap) the
# host is told `delivery.begin(index)`, and after such an item, or one that
# returned an error, `delivery.done(index, error)`: a trap then skips
# exactly the item at fault, as one call per notification would.

# The item in flight: its index (-1 outside a batch) and whether the host
# was told it is having a visible effect.
_item = [-1, False]


def _begin():
    _item[1] = True
    _delivery.begin(_item[0])


_NONE = 0xFFFFFFFF
# A record's header in ``delivery.metadata``: its size; the offset and
# length of each of its seven fields; its label count. The label table of
# 2n + 1 offsets follows it.
_HEADER = _struct.Struct("<16I")


class _Metadata:
    """The batch's metadata buffer (``delivery.metadata``), fetched by the
    first object whose metadata is read and decoded slot by slot as far as
    objects are read."""

    def __init__(self):
        self.buf = None
        self.at = 0
        self.records = []

    def record(self, slot):
        """(key, namespace, name, uid, resource version, api version, kind,
        labels as a list of pairs) of ``slot``."""
        if self.buf is None:
            self.buf = _delivery.metadata()
        buf, records = self.buf, self.records
        while len(records) <= slot:
            start = self.at
            header = _HEADER.unpack_from(buf, start)
            fields = tuple(
                None if header[2 + 2 * f] == _NONE
                else buf[start + header[1 + 2 * f] : start + header[1 + 2 * f] + header[2 + 2 * f]].decode()
                for f in range(7)
            )
            count = header[15]
            bounds = _struct.unpack_from(f"<{2 * count + 1}I", buf, start + _HEADER.size)
            labels = [
                (
                    buf[start + bounds[2 * i] : start + bounds[2 * i + 1]].decode(),
                    buf[start + bounds[2 * i + 1] : start + bounds[2 * i + 2]].decode(),
                )
                for i in range(count)
            ]
            records.append(fields + (labels,))
            self.at = start + header[0]
        return records[slot]


class _Lent:
    """An object of the batch in flight: metadata from the batch's buffer,
    the host's handle only when the body is read."""

    __slots__ = ("_slot", "_meta", "_obj")

    def __init__(self, slot, meta):
        self._slot = slot
        self._meta = meta
        self._obj = None

    def _handle(self):
        if self._obj is None:
            self._obj = _delivery.lend(self._slot)
        return self._obj

    def _release(self):
        if self._obj is not None:
            self._obj.__exit__(None, None, None)
            self._obj = None

    def key(self):
        return self._meta.record(self._slot)[0]

    def namespace(self):
        return self._meta.record(self._slot)[1]

    def name(self):
        return self._meta.record(self._slot)[2]

    def uid(self):
        return self._meta.record(self._slot)[3]

    def resource_version(self):
        return self._meta.record(self._slot)[4]

    def api_version(self):
        return self._meta.record(self._slot)[5]

    def kind(self):
        return self._meta.record(self._slot)[6]

    def labels(self):
        return list(self._meta.record(self._slot)[7])

    def label(self, key):
        for k, v in self._meta.record(self._slot)[7]:
            if k == key:
                return v
        return None

    def annotations(self):
        return self._handle().annotations()

    def json(self):
        return self._handle().json()

    def pointer(self, pointer):
        return self._handle().pointer(pointer)


def _on_batch(kinds, tombstone_keys):
    meta = _Metadata()
    keys = iter(tombstone_keys)
    slot = 0
    item = _item
    for index, kind in enumerate(kinds):
        item[0], item[1] = index, False
        handler = _current()
        error = None
        lent = []
        try:
            if kind <= 1:
                obj = _Lent(slot, meta)
                slot += 1
                lent.append(obj)
                handler.on_add(obj, kind == 1)
            elif kind == 2:
                old, new = _Lent(slot, meta), _Lent(slot + 1, meta)
                slot += 2
                lent += (old, new)
                handler.on_update(old, new)
            elif kind == 3:
                obj = _Lent(slot, meta)
                slot += 1
                lent.append(obj)
                handler.on_delete(Deleted(_types.Deleted_Object(obj)))
            elif kind == 4:
                obj = _Lent(slot, meta)
                slot += 1
                lent.append(obj)
                tombstone = _types.Tombstone(next(keys, ""), obj)
                handler.on_delete(Deleted(_types.Deleted_UnknownFinalState(tombstone)))
            else:
                error = f"unknown notification kind {kind} from the host"
        except _Err as e:
            error = str(e.value)
        except BaseException:
            # The traceback is a visible effect: the trap that follows
            # must skip this item only.
            if not item[1]:
                _begin()
            raise
        finally:
            for obj in lent:
                obj._release()
        if item[1] or error is not None:
            _delivery.done(index, error)
    item[0] = -1


if _delivery is not None:

    class BatchHandler(_exports.BatchHandler):
        """The ``BatchHandler`` export: assign it at module level of the app
        (``BatchHandler = ig.BatchHandler``) beside ``ResourceEventHandler``."""

        def on_batch(self, kinds, tombstone_keys):
            _on_batch(kinds, tombstone_keys)

else:
    BatchHandler = None
