"""Device memory shared between processes without a copy (issue 48):
pyxbuf.multiprocessing sends a device array as an IPC handle of its memory
(the emulated device's memfd here; CUDA's handles on a GPU), the receiving
process maps the same memory, the producer's writes happen before the
receiver reads, and the receiver is granted no borrow."""

import multiprocessing as std_mp
import os
import pickle
import struct

import numpy as np
import pytest

import _pyxbuf_testext as t
import pyxbuf
import pyxbuf.multiprocessing as mp

pytestmark = pytest.mark.skipif(pyxbuf.EMULATED_DEVICE is None,
                                reason="this pyxbuf module has no emulated device")

TIMEOUT = 120
N = 16 << 20  # float32 items: 64 MiB


def mapping(address):
    """(permissions, inode, path) of the mapping of this process holding `address`."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                return fields[1], int(fields[4]), " ".join(fields[5:])
    return None


def receive(q, out):
    """The receiving process: what arrived, where it lies, what it holds."""
    try:
        x = q.get(timeout=TIMEOUT)
        info = pyxbuf.inspect(x, flags=pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_DEVICE |
                              pyxbuf.PYXBUF_BORROW_SHARED)
        head = np.asarray(x.to_device("cpu"))[:8].tolist()
        out.put(("ok", x.device, x.shape, x.format, mapping(info["data"]), info["grants"], head))
        q.get(timeout=TIMEOUT)  # the sender lets go only after this
    except BaseException as err:  # reported, not lost in the child's stderr
        out.put(("failed", repr(err)))


def send_and_receive(x, register=None):
    ctx = mp.get_context("spawn")
    if register is not None:
        mp.register(register)
    q, out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=receive, args=(q, out))
    p.start()
    try:
        q.put(x)
        got = out.get(timeout=TIMEOUT)
        q.put("done")
    finally:
        p.join(TIMEOUT)
    assert got[0] == "ok", got
    assert p.exitcode == 0
    return got[1:]


def test_a_64_mib_device_array_is_received_in_the_same_memory():
    d = pyxbuf.to_device(np.arange(N, dtype=np.float32), "ext_dev:0")
    here = mapping(pyxbuf.inspect(d)["data"])
    device, shape, fmt, there, grants, head = send_and_receive(d)
    assert (device, shape, fmt) == ("ext_dev:0", (N,), "f")
    assert head == list(range(8))
    # The same memfd (the inode of its pages), not a copy: guarded in the
    # receiver as in the sender (no host access: the mapping allows nothing).
    assert here[2] == there[2] and "pyxbuf-emulated" in there[2]
    assert here[1] == there[1]
    assert here[0].startswith("---") and there[0].startswith("---")
    # Another process writes it: no grant there.
    assert grants == {"shared": False, "exclusive": False, "tracked": False}
    del d


def test_the_producers_queued_writes_happen_before_the_receiver_reads():
    # A C extension's exporter (its own copy of libpyxbuf, registered by
    # type) with a producer "kernel" still queued on its stream when it is
    # sent: sharing waits for the producer's event, so the receiver reads
    # the kernel's bytes, never what was there before.
    d = t.to_device(np.zeros(1 << 20, dtype=np.float32), (t.PYXBUF_DL_EXT_DEV, 0))
    stream = t.emulated_write(d, np.full(8, 7, dtype=np.float32).tobytes())
    assert t.emulated_pending(0, stream) > 0  # not yet run
    _, _, _, _, _, head = send_and_receive(d, register=type(d))
    assert head == [7.0] * 8
    assert t.emulated_pending(0, stream) == 0


def test_host_arrays_go_through_pickle_and_plain_pickle_stays_a_copy():
    h = pyxbuf.exporter([4], "f")
    rebuild, _ = mp.reduce_exporter(h)
    assert rebuild is pyxbuf._pickle.rebuild  # protocol 5, out of band
    d = pyxbuf.to_device(np.arange(4, dtype=np.float32), "ext_dev:0")
    rebuild, args = mp.reduce_exporter(d)
    assert rebuild is pyxbuf._pickle.rebuild_shared_device and args[0] == "ext_dev:0"
    # pickle.dumps itself is unchanged: a host copy, restored on the device
    assert pickle.loads(pickle.dumps(d)).device == "ext_dev:0"
    assert std_mp.reduction.ForkingPickler.dumps(d)  # the registered reduction


def test_a_handle_opened_by_the_process_that_made_it_is_its_own_memory():
    # CUDA refuses a handle in the process that made it; pyxbuf serves it
    # (a multiprocessing.Queue between two threads of one process).
    d = pyxbuf.to_device(np.arange(4, dtype=np.float32), "ext_dev:0")
    device, handle, _ = pyxbuf.pyxbuf._share_device(d)
    e = pyxbuf._pickle.rebuild_shared_device(device, handle, None, "f", 4, (4,), (4,), False)
    assert pyxbuf.inspect(e)["data"] == pyxbuf.inspect(d)["data"]
    assert np.asarray(e.to_device("cpu")).tolist() == [0, 1, 2, 3]
    del e  # closes nothing: d's memory stays
    assert np.asarray(d.to_device("cpu")).tolist() == [0, 1, 2, 3]
    q = mp.get_context("spawn").Queue()
    q.put(d)
    got = q.get(timeout=TIMEOUT)
    assert pyxbuf.inspect(got)["data"] == pyxbuf.inspect(d)["data"]


def test_host_arrays_travel_through_the_queues_as_plain_pickle_does():
    # ForkingPickler's protocol is 4 before Python 3.14: no PickleBuffer there.
    q = mp.get_context("spawn").Queue()
    for x in (pyxbuf.frombuffer(bytearray(np.arange(4, dtype=np.float32).tobytes()), "f"),
              pyxbuf.exporter([3], "[ml_dtypes$bfloat16]")):
        q.put(x)
        got = q.get(timeout=TIMEOUT)
        assert (got.format, got.shape, got.device) == (x.format, x.shape, "cpu")
        assert np.asarray(got).tobytes() == np.asarray(x).tobytes()


def test_sharing_refusals_name_their_cause():
    with pytest.raises(ValueError, match="holds host memory"):
        pyxbuf.pyxbuf._share_device(pyxbuf.exporter([4], "f"))
    d = pyxbuf.to_device(np.arange(4, dtype=np.float32), "ext_dev:0")
    device, handle, _ = pyxbuf.pyxbuf._share_device(d)
    with pytest.raises(ValueError, match="a handle of 3 bytes is not one pyxbuf_device_share made"):
        pyxbuf._pickle.rebuild_shared_device(device, b"abc", None, "f", 4, (4,), (4,), False)
    # pyxbuf's header, then a backend handle that is not the emulated one.
    with pytest.raises(ValueError, match="an IPC handle of 3 bytes, not"):
        pyxbuf._pickle.rebuild_shared_device(device, b"\0" * 8 + handle[8:32] + b"abc", None,
                                             "f", 4, (4,), (4,), False)
    with pytest.raises(ValueError, match="the handle names memory of 'ext_dev:0', not of "
                                         "'cuda_host:0'"):
        pyxbuf._pickle.rebuild_shared_device("cuda_host:0", handle, None, "f", 4, (4,), (4,),
                                             False)
    with pytest.raises(BufferError, match=r"the backend of 'cpu' \(cpu\) cannot share device memory"):
        pyxbuf._pickle.rebuild_shared_device("cpu:0", handle, None, "f", 4, (4,), (4,), False)


class Received:
    """What multiprocessing's DupFd gives the receiving process: detach()
    hands over a descriptor of its own (here a duplicate made in-process)."""

    def __init__(self, fd):
        self.fd = os.dup(fd)

    def detach(self):
        return self.fd


def as_if_from(handle, pid):
    """`handle` as another process `pid` would have made it: pyxbuf's header
    and the emulated device's handle name that pid (neither is this one, so
    the open goes to the backend and cannot use this process's memory)."""
    other = struct.pack("<q", pid)
    return other + handle[8:32] + other + handle[40:]


def test_the_memfd_travels_beside_the_handle():
    d = pyxbuf.to_device(np.arange(8, dtype=np.float32), "ext_dev:0")
    device, handle, fd = pyxbuf.pyxbuf._share_device(d)
    # The device's memfd, which multiprocessing sends by SCM_RIGHTS
    # (pyxbuf.multiprocessing wraps it in a DupFd).
    assert fd >= 0 and "pyxbuf-emulated" in os.readlink(f"/proc/self/fd/{fd}")
    rebuild, args = mp.reduce_exporter(d)
    assert args[2] is not None and hasattr(args[2], "detach")
    os.close(args[2].detach())  # nobody unpickles this one: let the resource sharer go
    # A process that no longer exists (no /proc/<pid>/fd to open): the
    # descriptor that arrived is what maps the memory.
    gone = as_if_from(handle, 2**22 + 12345)
    received = Received(fd)
    e = pyxbuf._pickle.rebuild_shared_device(device, gone, received, "f", 4, (8,), (4,), False)
    assert pyxbuf.inspect(e)["data"] != pyxbuf.inspect(d)["data"]  # mapped again, here
    assert np.asarray(e.to_device("cpu")).tolist() == list(range(8))
    with pytest.raises(OSError):  # the received descriptor was closed once opened
        os.fstat(received.fd)
    del e
    # A descriptor that is not the device's memfd is refused, naming it.
    with open(os.devnull) as null, pytest.raises(BufferError, match=r"is not the memfd of process "
                                                                    r"4206649's handle"):
        pyxbuf._pickle.rebuild_shared_device(device, gone, Received(null.fileno()), "f", 4, (8,),
                                             (4,), False)
    with pytest.raises(BufferError, match=r"cannot open /proc/4206649/fd/\d+, the device memory "
                                          r"of process 4206649 \(it has exited"):
        pyxbuf._pickle.rebuild_shared_device(device, gone, None, "f", 4, (8,), (4,), False)
    assert os.fstat(fd)  # pyxbuf's own descriptor stays open
