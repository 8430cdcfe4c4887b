"""Device arrays shared between two processes on one GPU, without a copy
(issue 48): pyxbuf.multiprocessing (CUDA's IPC handles through the
backend's ipc_export/ipc_open) beside torch.multiprocessing sharing a
PyTorch CUDA tensor, both timed in the same run.

One spawned worker process receives each array through a Queue, opens it,
reads its first and last items on the device (through DLPack into PyTorch),
writes item 1 (-1.0) and answers; the parent then checks that it sees the
write in its own array (the same memory, not a copy). A round trip is the
time from `put` to the answer, median of ROUNDS after one warm-up, for each
size. Also checked: an array opened in the process that made it is its own
memory (same address; CUDA refuses such opens, pyxbuf hands back the
pointer), and memory of the device's default pool is refused with the ways
out named (no process but its own can open it; PyTorch's cudaMallocAsync
backend refuses it too). pyxbuf's arrays are timed twice: from cuMemAlloc
(`transfer_config(device_pool=False)`: CUDA's IPC handles) and from
pyxbuf's shareable pool (`device_pool_shareable=True`: the pool's export
data, its file descriptor sent beside it by SCM_RIGHTS, imported once).

Needs the pyxbuf Python package (a cp312 wheel unpacked on PYTHONPATH on the
GPU machine: bench/cuda/run-on-gpu.sh's `ipc` step). IPC_DEVICE=emulated:
a dry run on the emulated device (no GPU, no PyTorch: reads through a host
copy, no write-back check, no peer column).
"""

import os
import statistics
import sys
import time

import numpy as np

import pyxbuf
import pyxbuf.multiprocessing as pmp
from pyxbuf import _pickle
from pyxbuf.pyxbuf import _share_device

EMULATED = os.environ.get("IPC_DEVICE") == "emulated"
DEVICE = "ext_dev:0" if EMULATED else "cuda:0"
SIZES = [int(s) << 20 for s in os.environ.get("IPC_MIB", "1,64,256").split(",")]
ROUNDS = int(os.environ.get("IPC_ROUNDS", "20"))
TIMEOUT = 120

torch = None
if not EMULATED:
    import torch
    import torch.multiprocessing  # noqa: F401 -- registers PyTorch's reductions


def worker(inbox, outbox):
    """Open what arrives, read its ends on the device, write item 1, answer."""
    if not EMULATED:
        import torch as wt  # noqa: F811
    while True:
        msg = inbox.get(timeout=TIMEOUT)
        if msg is None:
            return
        x = msg
        try:
            if EMULATED:
                host = np.asarray(x.to_device("cpu"))
                ends = (float(host[0]), float(host[-1]))
            else:
                t = wt.from_dlpack(x) if not isinstance(x, wt.Tensor) else x
                ends = (t[0].item(), t[-1].item())
                t[1] = -1.0
                wt.cuda.synchronize()
                del t
            outbox.put(("ok", ends))
        except BaseException as err:  # reported, not lost in the worker's stderr
            outbox.put(("failed", repr(err)))
        del x


def data_pointer(x):
    return pyxbuf.inspect(x)["data"]


MODES = {"cuMemAlloc": {"device_pool": False, "device_pool_shareable": False},
         "shareable pool": {"device_pool": True, "device_pool_shareable": True},
         "default pool": {"device_pool": True, "device_pool_shareable": False}}


SPACERS = []


def make_pyxbuf(n_items, mode="cuMemAlloc"):
    """pyxbuf's own device array, from cuMemAlloc or one of the pools. In
    the shareable pool a small array is made first and kept, so that the
    shared one does not start the pool's chunk: a handle naming the chunk
    instead of the allocation would show as wrong items in the worker."""
    pyxbuf.transfer_config(**MODES[mode])
    if mode == "shareable pool":
        SPACERS.append(pyxbuf.to_device(np.zeros(1024, dtype=np.float32), DEVICE))
    return pyxbuf.to_device(np.arange(n_items, dtype=np.float32), DEVICE)


def round_trips(inbox, outbox, x, expect, sees_write):
    """Median round trip (ms) of sending `x`, and whether every answer held."""
    times = []
    for i in range(ROUNDS + 1):
        sees_write(reset=True)
        start = time.perf_counter()
        inbox.put(x)
        status, got = outbox.get(timeout=TIMEOUT)
        elapsed = time.perf_counter() - start
        if status != "ok":
            raise SystemExit(f"worker failed: {got}")
        if got != expect:
            raise SystemExit(f"worker read {got}, expected {expect}")
        if not EMULATED and not sees_write():
            raise SystemExit("the worker's write is not in the sender's array: not shared")
        if i > 0:
            times.append(elapsed * 1e3)
    return statistics.median(times)


def torch_item_one(t):
    def sees_write(reset=False):
        if reset:
            t[1] = 1.0
            torch.cuda.synchronize()
            return True
        return t[1].item() == -1.0

    return sees_write


def pyxbuf_item_one(x):
    if EMULATED:
        return lambda reset=False: True
    return torch_item_one(torch.from_dlpack(x))


def check_same_process():
    x = make_pyxbuf(1 << 10)
    device, handle, _ = _share_device(x)
    y = _pickle.rebuild_shared_device(device, handle, None, x.format, x.itemsize, x.shape,
                                      x.strides, x.readonly)
    same = data_pointer(y) == data_pointer(x)
    del y
    print(f"- opened in the process that made it: {'same address' if same else 'ANOTHER ADDRESS'}")
    return same


def check_pool_refused():
    if EMULATED:
        return True
    x = make_pyxbuf(1 << 10, "default pool")
    try:
        _share_device(x)
    except Exception as err:  # the backend's error, raised as its class
        ok = "cannot be opened by other processes" in str(err) and \
            "PYXBUF_DEVICE_POOL=shareable" in str(err)
        print(f"- default pool memory refused ({type(err).__name__}): {'names the pool and the ways out' if ok else 'MESSAGE LACKS THE CAUSE'}")
        print(f"  > {err}")
        return ok
    finally:
        pyxbuf.transfer_config(**MODES["cuMemAlloc"])
    print("- default pool memory: SHARED (CUDA was expected to refuse it)")
    return False


def main():
    before = pyxbuf.transfer_config()
    ctx = pmp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker, args=(inbox, outbox))
    proc.start()
    print(f"# Device arrays between two processes ({DEVICE}; median of {ROUNDS} round trips)\n")
    peer = "torch.multiprocessing (ms)" if torch is not None else "peer"
    print(f"| float32 array | pyxbuf, cuMemAlloc (ms) | pyxbuf, shareable pool (ms) | {peer} | "
          f"ratio (pyxbuf's slower / peer) |")
    print("|---|---|---|---|---|")
    ok = True
    ratios = []
    try:
        for size in SIZES:
            n = size // 4
            expect = (0.0, float(np.float32(n - 1)))
            times = []
            for mode in ("cuMemAlloc", "shareable pool"):
                x = make_pyxbuf(n, mode)
                times.append(round_trips(inbox, outbox, x, expect, pyxbuf_item_one(x)))
                del x
            ours = max(times)
            theirs = ratio = None
            if torch is not None:
                t = torch.arange(n, dtype=torch.float32, device="cuda:0")
                texpect = (t[0].item(), t[-1].item())
                theirs = round_trips(inbox, outbox, t, texpect, torch_item_one(t))
                ratio = ours / theirs
                ratios.append(ratio)
                del t
            print(f"| {size >> 20} MiB | {times[0]:.3f} | {times[1]:.3f} | "
                  f"{'-' if theirs is None else f'{theirs:.3f}'} | "
                  f"{'-' if ratio is None else f'{ratio:.2f}'} |")
        print()
        pyxbuf.transfer_config(**MODES["cuMemAlloc"])
        ok &= check_same_process()
        ok &= check_pool_refused()
    finally:
        inbox.put(None)
        proc.join(TIMEOUT)
        pyxbuf.transfer_config(**before)
    ok &= proc.exitcode == 0
    print(f"- worker exit code {proc.exitcode}; every read bit-exact"
          f"{'' if EMULATED else ' and every write seen by the sender'}")
    if ratios:
        print(f"target: round trip within 1.5x torch.multiprocessing at every size: "
              f"{'met' if max(ratios) <= 1.5 else 'missed'} (worst {max(ratios):.2f})")
    print(f"ipc: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
