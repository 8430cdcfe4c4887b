"""How a pickled ``pyxbuf.Exporter`` comes back (``Exporter.__reduce_ex__``
names these functions in the stream, so every process that loads one needs
the pyxbuf package, as NumPy's arrays need numpy).

- ``rebuild``: host memory arrives as the buffer pickle hands over (the
  out-of-band buffer a ``buffer_callback`` took, or the bytes/bytearray
  written in band) and becomes an exporter over it, no copy; a device array
  travelled as its host copy and goes back onto a device of the same kind
  and index (or stays on the host inside ``unpickle_on_host()``).
- ``rebuild_shared``: an exporter over a ``SharedMemory`` block travelled as
  the block's name and maps the same memory here.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from multiprocessing import shared_memory as _shm

_ON_HOST = contextvars.ContextVar("pyxbuf_unpickle_on_host", default=None)


def _restore_on_host() -> bool:
    here = _ON_HOST.get()
    if here is not None:
        return here
    return os.environ.get("PYXBUF_UNPICKLE_ON_HOST", "") not in ("", "0")


@contextlib.contextmanager
def unpickle_on_host():
    """Inside this block (in this thread or task), pickled device arrays are
    restored on the host instead of a device of their kind and index: for a
    process without that device. A process whose unpickling you do not call
    yourself (a Dask or Ray worker) gets the same from the environment
    variable ``PYXBUF_UNPICKLE_ON_HOST=1``."""
    token = _ON_HOST.set(True)
    try:
        yield
    finally:
        _ON_HOST.reset(token)


def _frombuffer():
    from .pyxbuf import frombuffer

    return frombuffer


def byte_view(x):
    """A zero-copy byte view ("B") of an exporter's contiguous items, writable
    when they are: the buffer pickle sends (``Exporter.__reduce_ex__``). A
    custom format would refuse the classic request ``pickle.PickleBuffer``
    makes of the exporter itself."""
    return _frombuffer()(x)


def rebuild(data, format, itemsize, shape, strides, readonly, device):
    """An exporter of ``shape`` items of ``format`` over ``data`` (C order,
    or the Fortran-order ``strides``): read-only when it was, or when
    ``data`` cannot be written (an out-of-band buffer handed over read-only,
    as Ray's object store does: NumPy's arrays come back read-only there
    too). ``device``: the device it lived on, None for the host."""
    frombuffer = _frombuffer()
    host = frombuffer(data, format, shape, strides=strides, itemsize=itemsize,
                      readonly=bool(readonly))
    if device is None or _restore_on_host():
        return host
    try:
        return host.to_device(device)
    except Exception as err:  # the backend's own error, whatever its type
        raise type(err)(
            f"pyxbuf: unpickling an array of device '{device}' ({format}, shape "
            f"{tuple(shape)}), but it cannot go onto '{device}' in this process "
            f"(pid {os.getpid()}): {err}. Restore it on the host with "
            "`with pyxbuf.unpickle_on_host(): pickle.loads(...)`, or "
            "PYXBUF_UNPICKLE_ON_HOST=1 in this process's environment"
        ) from err


def _attach(name):
    """The SharedMemory block `name`, attached without handing it to this
    process's resource tracker: the block belongs to whoever created it, who
    unlinks it; a tracker here would unlink it when this process exits
    (Python before 3.13 has no `track` argument, so the registration is
    undone by hand, as its documentation's workaround does)."""
    if sys.version_info >= (3, 13):
        return _shm.SharedMemory(name=name, track=False)
    block = _shm.SharedMemory(name=name)
    from multiprocessing import resource_tracker

    resource_tracker.unregister(block._name, "shared_memory")  # noqa: SLF001
    return block


def rebuild_shared(name, offset, format, itemsize, shape, strides, readonly):
    """An exporter over the SharedMemory block `name` (no copy): the items
    start `offset` bytes in, with `shape` and byte `strides`. No borrow is
    granted on it: other processes write the same memory."""
    frombuffer = _frombuffer()
    return frombuffer(_attach(name), format, shape, offset=offset, strides=strides,
                      itemsize=itemsize, readonly=bool(readonly))


def rebuild_shared_device(device, handle, fd, format, itemsize, shape, strides, readonly):
    """An exporter over another process's device memory (pyxbuf.multiprocessing
    sent its IPC handle, and `fd`, multiprocessing's DupFd of a descriptor the
    handle needs, or None): mapped here, no copy; no borrow granted. The
    descriptor is received (which also frees the sender's copy of it) and
    closed once the memory is open: the backend keeps what it needs."""
    import os

    from .pyxbuf import _open_shared_device

    received = fd.detach() if fd is not None else -1
    try:
        return _open_shared_device(device, handle, received, format, itemsize, list(shape),
                                   list(strides), bool(readonly))
    finally:
        if received >= 0:
            os.close(received)
