"""``multiprocessing`` that shares pyxbuf's device arrays between processes
without a copy, as ``torch.multiprocessing`` shares CUDA tensors.

``import pyxbuf.multiprocessing as mp`` and use it as ``multiprocessing``
(everything of it is here). Its pickler (queues, pipes, pools, process
arguments) then sends a pyxbuf array on a device as an IPC handle of its
memory (CUDA's ``cuIpcGetMemHandle``; the emulated device's memfd): the
receiving process maps the same memory. Host arrays travel as plain pickle
does through a queue (in band: the queues pickle without a buffer
callback, with protocol 4 before Python 3.14), and ``pickle.dumps`` itself is
unchanged (device arrays through a host copy).

Lifetime and order, as with CUDA's IPC:

- the sending process keeps its array alive until every process that
  received it is done with it: nothing counts the receivers across
  processes, and memory freed and reused meanwhile shows the new owner's
  bytes (``torch.multiprocessing`` asks the same);
- a receiver's array closes its mapping when it dies; if the sender exits
  first, CUDA's memory is gone with it (the emulated device keeps the pages
  while they are mapped, but do not rely on it);
- the sender's writes made before sending happen before the receiver reads:
  the host waits for the producer's event when the handle is made. Writes
  after sending are the program's to order;
- no borrow is granted on received memory: another process writes it;
- a handle that needs a file descriptor (a CUDA pool's shareable handle; the
  emulated device's memfd) sends it beside the handle as multiprocessing
  sends sockets (``multiprocessing.reduction.DupFd``: SCM_RIGHTS), so no
  process needs the right to read another's descriptors. As with sockets,
  the sender's resource sharer holds a duplicate until the receiver
  unpickles the array: a message never received keeps its descriptor.

Exporters of another copy of libpyxbuf (a Rust crate's, a C extension's: a
type of their own) are shared once ``register(type(x))`` names their type.
"""

from multiprocessing import *  # noqa: F401,F403 -- this module stands in for it
from multiprocessing.reduction import DupFd, ForkingPickler

from . import _pickle
from .pyxbuf import Exporter, _share_device


def reduce_exporter(x):
    """ForkingPickler's reduction of an exporter: an IPC handle for device
    memory, pickle's own, in band, for host memory."""
    if x.device == "cpu":
        # Its items in band: ForkingPickler pickles with no buffer callback,
        # and before Python 3.14 with protocol 4, which refuses a PickleBuffer.
        return x.__reduce_ex__(4)
    device, handle, fd = _share_device(x)
    # A descriptor the handle needs (a CUDA pool's, the emulated device's
    # memfd) travels as multiprocessing sends sockets: SCM_RIGHTS.
    sent = DupFd(fd) if fd >= 0 else None
    return _pickle.rebuild_shared_device, (device, handle, sent, x.format, x.itemsize, x.shape,
                                           x.strides, x.readonly)


def register(cls):
    """Share the device arrays of exporter type `cls` through this module's
    pickler (pyxbuf.Exporter is registered on import)."""
    ForkingPickler.register(cls, reduce_exporter)


register(Exporter)
