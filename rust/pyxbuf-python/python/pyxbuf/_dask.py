"""pyxbuf arrays in Dask: their size, and their own serializer.

- ``dask.sizeof``: Dask decides by it how to move a result and when a
  worker's memory is full. An object it does not know counts as
  ``sys.getsizeof`` (a few hundred bytes for an exporter over another
  object's memory, whatever its items), so a 256 MiB result looked tiny.
  Counted here as its items' bytes, as Dask counts NumPy's.
- Dask's ``dask`` serialization family, as NumPy's arrays have: the items as
  one frame and the layout in the header. Without it a pyxbuf array goes
  through pickle, and Dask's scheduler speaks pickle protocol 4 ("common
  denominator"), which writes the items inside the pickled bytes: a result
  relayed through it (``future.result()``) was copied three times
  (bench/distributed/dask_return.py: 3.5x NumPy's time).

The wheel declares ``register`` under Dask's ``dask.sizeof`` entry point,
which Dask loads with ``dask.sizeof``: nothing to import by hand. The
serializers go into ``distributed.protocol``'s registry once that module is
imported: ``distributed`` imports ``dask.sizeof`` before it, so ``register``
leaves a one-shot import hook that registers them right after the module
runs (and any lookup of ``pyxbuf.Exporter`` registers them too).
"""

import importlib.abc
import importlib.util
import sys

_registered = False
_PROTOCOL = "distributed.protocol.serialize"


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when distributed's protocol module is about to
    be imported, it takes itself off sys.meta_path, lets the other finders
    find the module, and has its loader register the serializers after the
    module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != _PROTOCOL:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            register_serializers()

        loader.exec_module = exec_module  # this module's loader only
        return spec


def _register_when_imported():
    if _PROTOCOL in sys.modules:
        register_serializers()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())


def register(sizeof):
    """Dask's entry point: count an exporter as its items' bytes plus the
    object, and register the serializers where Dask's protocol is loaded."""
    from .pyxbuf import Exporter

    @sizeof.register(Exporter)
    def _sizeof_exporter(x):
        return x.nbytes + sys.getsizeof(x)

    _register_when_imported()


def register_serializers():
    """Put the ``dask`` family's serializer of pyxbuf.Exporter into
    ``distributed.protocol``'s registry (once; nothing while distributed's
    protocol module is not imported)."""
    global _registered
    protocol = sys.modules.get("distributed.protocol.serialize")
    if _registered or protocol is None or not hasattr(protocol, "dask_deserialize"):
        return
    from .pyxbuf import Exporter

    protocol.dask_serialize.register(Exporter)(_serialize)
    protocol.dask_deserialize.register(Exporter)(_deserialize)
    _registered = True


def _serialize(x):
    """Header and frames: what Exporter.__reduce_ex__ gives pickle, laid out
    for Dask (the items as one frame; a SharedMemory block by its name)."""
    from . import _pickle

    rebuild, args = x.__reduce_ex__(5)
    if rebuild is _pickle.rebuild_shared:
        name, offset, fmt, itemsize, shape, strides, readonly = args
        return {"shared": [name, offset, fmt, itemsize, list(shape), list(strides),
                           bool(readonly)]}, []
    data, fmt, itemsize, shape, strides, readonly, device = args
    header = {"format": fmt, "itemsize": itemsize, "shape": list(shape),
              "strides": None if strides is None else list(strides),
              "readonly": bool(readonly), "device": device}
    return header, [memoryview(data)]


def _deserialize(header, frames):
    """The exporter back: over the frame Dask hands over (no copy), read-only
    when it was; a writable array whose frame arrived read-only is copied
    into writable memory first, as Dask's NumPy deserializer does."""
    from . import _pickle

    if "shared" in header:
        name, offset, fmt, itemsize, shape, strides, readonly = header["shared"]
        return _pickle.rebuild_shared(name, offset, fmt, itemsize, tuple(shape), tuple(strides),
                                      readonly)
    (frame,) = frames
    if not header["readonly"] and memoryview(frame).readonly:
        frame = bytearray(frame)
    strides = header["strides"]
    return _pickle.rebuild(frame, header["format"], header["itemsize"], tuple(header["shape"]),
                           None if strides is None else tuple(strides), header["readonly"],
                           header["device"])
