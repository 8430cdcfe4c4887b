"""Leak and lifetime soak (issue 7, Hardening).

1. A million pyxbuf_get/pyxbuf_release pairs per acquisition path, in C
   (`cycle`), against real producers: pyxbuf Exporters (host, emulated
   device, with a borrow), NumPy arrays and bytes (classic, also with a
   tracked exclusive borrow), the test extension's DLPack producers (Python
   `__dlpack__`, host and device, and the DLPack C exchange table), JAX
   bfloat16 (DLPack), a `__cuda_array_interface__` producer on the emulated
   device, an ml_dtypes bfloat16 array (NumPy's struct route) and a
   byte-swapped one (`__array_interface__`). After
   each: the path is the one named, the producer's refcount is unchanged, the
   process RSS grew by less than RSS_BOUND after a warm-up, every DLPack
   tensor exported was deleted exactly once, no borrow is left in the
   registry and no emulated-device allocation is left.
2. Views that outlive every other reference to their producer: the view
   still reads the producer's values (pyxbuf_copy_to_host through the held
   view), and releasing it (or dropping it unreleased) frees the producer,
   its device memory and its DLPack tensor, once.
3. Interpreter shutdown with live views (module globals, reference cycles,
   views never released, borrows held, threads that exit by sys.exit,
   daemon threads still cycling): the child exits 0 and writes nothing to
   stderr.

SOAK_CYCLES (env PYXBUF_SOAK_CYCLES) is 1,000,000; under a preloaded
libasan (make test-asan-python) it is 20,000 and the RSS bound is not
checked (ASan's quarantine holds freed memory by design).
"""

import gc
import os
import subprocess
import sys
import textwrap
import time
import weakref

import ml_dtypes
import numpy as np
import pytest

import _pyxbuf_testext as t
from numpy_route import ROUTE, USER_DTYPE_ROUTE
from cai_producers import cai_over

UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
SOAK_CYCLES = int(os.environ.get("PYXBUF_SOAK_CYCLES", 20_000 if UNDER_ASAN else 1_000_000))
WARMUP = 10_000
RSS_BOUND = 4 << 20  # bytes
PAGE = os.sysconf("SC_PAGE_SIZE")

EXT = t.PYXBUF_DL_EXT_DEV
DEV0 = (EXT, 0)
RO = t.PyBUF_RECORDS_RO
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
SHARED = t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE




def swapped_bf16(values):
    """bfloat16 in the byte order opposite to the machine's: NumPy's struct
    route leaves it to the __array_interface__ bridge (an exact native
    bfloat16 array takes the route, issue 39)."""
    a = values.astype(ml_dtypes.bfloat16)
    return a.view(a.dtype.newbyteorder())


def jax_bf16(n):
    jnp = pytest.importorskip("jax.numpy")
    return jnp.arange(n, dtype=jnp.float32).astype(jnp.bfloat16)


pytestmark = pytest.mark.usefixtures("nothing_left_behind")  # conftest.py


# ---------------------------------------------------------------------------
# 1. A million cycles per path
# ---------------------------------------------------------------------------

def f32(n=256):
    return np.arange(n, dtype=np.float32)


# (id, factory -> producer, request flags, the path pyxbuf must take)
SOAK = [
    ("native-host", lambda: t.exporter("f", (256,)), RO, "native"),
    ("native-device", lambda: t.to_device(f32(), DEV0), DEVICE_VIEW, "native"),
    ("native-shared-borrow", lambda: t.exporter("f", (256,)), SHARED, "native"),
    ("numpy", f32, RO, ROUTE),
    ("numpy-strided", lambda: f32(1024).reshape(32, 32)[::2, ::3], RO, ROUTE),
    ("numpy-tracked-exclusive", f32, EXCLUSIVE, ROUTE),
    ("classic-bytes", lambda: bytes(range(256)), RO, "classic"),
    ("classic-memoryview-strided", lambda: memoryview(f32(1024).reshape(32, 32))[::2], RO,
     "classic"),
    ("classic-tracked-exclusive", lambda: bytearray(range(256)), EXCLUSIVE, "classic"),
    ("dlpack", lambda: t.DLPackProducer(f32()), RO, "dlpack"),
    ("dlpack-legacy", lambda: t.DLPackProducer(f32(), versioned=False), RO, "dlpack"),
    ("dlpack-device", lambda: t.DLPackProducer(t.to_device(f32(), DEV0)), DEVICE_VIEW,
     "dlpack"),
    ("dlpack-jax-bfloat16", lambda: jax_bf16(256), RO, "dlpack"),
    ("dlpack-c", lambda: t.DLPackCProducer(f32()), RO, "dlpack-c"),
    ("cuda-array-interface", lambda: cai_over(f32()), DEVICE_VIEW, "cuda-array-interface"),
    ("numpy-bfloat16", lambda: np.ones(256, dtype=ml_dtypes.bfloat16), RO, USER_DTYPE_ROUTE),
    ("array-interface", lambda: swapped_bf16(np.ones(256)), RO, "array-interface"),
]

@pytest.mark.parametrize("make,flags,path", [s[1:] for s in SOAK], ids=[s[0] for s in SOAK])
def test_million_cycles(request, make, flags, path):
    producer = make()
    assert t.inspect(producer, flags)["path"] == path
    counted = producer if isinstance(producer, t.DLPackProducer) else None
    totals = t.dlpack_totals()
    calls = (counted.dlpack_calls, counted.c_calls) if counted else None
    t.cycle(producer, flags, WARMUP)  # caches, allocator pools, JAX's own
    gc.collect()
    refs = sys.getrefcount(producer)
    before = rss()
    start = time.perf_counter()
    t.cycle(producer, flags, SOAK_CYCLES)
    seconds = time.perf_counter() - start
    growth = rss() - before
    # Shown with pytest -s: the figures the README quotes.
    print(f"\n{request.node.callspec.id}: {SOAK_CYCLES} cycles, RSS {growth / 1024:+.0f} KiB, "
          f"{seconds:.2f} s")
    assert sys.getrefcount(producer) == refs
    if not UNDER_ASAN:
        assert growth < RSS_BOUND, f"RSS grew by {growth} bytes over {SOAK_CYCLES} cycles"
    assert t.shared_info()[1] == 0
    exported, deleted = t.dlpack_totals()
    if counted is not None:
        n = WARMUP + SOAK_CYCLES
        # One tensor per acquisition, deleted exactly once each.
        assert exported - totals[0] == n
        assert deleted - totals[1] == n
        assert counted.exported == counted.deleted
        via_c = path == "dlpack-c"
        assert counted.c_calls - calls[1] == (n if via_c else 0)
        assert counted.dlpack_calls - calls[0] == (0 if via_c else n)
    else:
        assert (exported, deleted) == totals  # no DLPack producer was involved


# ---------------------------------------------------------------------------
# 2. Views that outlive every other reference to their producer
# ---------------------------------------------------------------------------

class Case:
    """A held view whose producer has no other reference once made."""

    def __init__(self, view, expected, path, alive=None, allocation=False, dlpack=False):
        self.view = view
        self.expected = expected  # the bytes the view must read, C order
        self.path = path
        self.alive = alive  # a weakref to the producer (or what owns the memory)
        self.allocation = allocation  # the view holds one emulated-device allocation
        self.dlpack = dlpack  # the view holds one DLPack tensor


def values(n=64, dtype=np.float32):
    return (np.arange(n) * 3 + 1).astype(dtype)


def orphan_native_host():
    e = t.exporter("B", (64,))
    for i in range(64):
        t.exporter_poke(e, i, (7 * i + 1) & 0xFF)
    return Case(t.acquire(e, RO), bytes((7 * i + 1) & 0xFF for i in range(64)), "native")


def orphan_native_device():
    host = values()
    return Case(t.acquire(t.to_device(host, DEV0), DEVICE_VIEW), host.tobytes(), "native",
                allocation=True)


def orphan_native_borrowed():
    host = values()
    e = t.to_device(host, DEV0)
    return Case(t.acquire(e, DEVICE_VIEW | t.PYXBUF_BORROW_SHARED), host.tobytes(), "native",
                allocation=True)


def orphan_numpy():
    a = values(100, np.int64)
    return Case(t.acquire(a, RO), a.tobytes(), ROUTE, alive=weakref.ref(a))


def orphan_numpy_strided():
    a = values(400, np.float64).reshape(20, 20)[::-3, 1::2]  # the base dies with the slice
    return Case(t.acquire(a, RO), a.tobytes(), ROUTE, alive=weakref.ref(a))


def orphan_numpy_tracked():
    a = values(32, np.int32)
    return Case(t.acquire(a, EXCLUSIVE), a.tobytes(), ROUTE, alive=weakref.ref(a))


def orphan_bytes():
    b = bytes(range(7, 200))  # built at run time, not a shared constant
    return Case(t.acquire(b, RO), bytes(range(7, 200)), "classic")


def orphan_dlpack():
    host = values()
    p = t.DLPackProducer(host)
    return Case(t.acquire(p, RO), host.tobytes(), "dlpack", alive=weakref.ref(host),
                dlpack=True)


def orphan_dlpack_legacy():
    host = values()
    p = t.DLPackProducer(host, versioned=False)
    return Case(t.acquire(p, RO), host.tobytes(), "dlpack", alive=weakref.ref(host),
                dlpack=True)


def orphan_dlpack_device():
    host = values()
    p = t.DLPackProducer(t.to_device(host, DEV0))
    return Case(t.acquire(p, DEVICE_VIEW), host.tobytes(), "dlpack", allocation=True,
                dlpack=True)


def orphan_dlpack_c():
    host = values()
    p = t.DLPackCProducer(host)
    return Case(t.acquire(p, RO), host.tobytes(), "dlpack-c", alive=weakref.ref(host),
                dlpack=True)


def orphan_dlpack_c_device():
    host = values()
    p = t.DLPackCProducer(t.to_device(host, DEV0))
    return Case(t.acquire(p, DEVICE_VIEW), host.tobytes(), "dlpack-c", allocation=True,
                dlpack=True)


def orphan_jax():
    x = jax_bf16(64)
    expected = np.asarray(x).tobytes()
    return Case(t.acquire(x, RO), expected, "dlpack", alive=weakref.ref(x))


def orphan_cai():
    host = values()
    c = cai_over(host)
    return Case(t.acquire(c, DEVICE_VIEW), host.tobytes(), "cuda-array-interface",
                alive=weakref.ref(c), allocation=True)


def orphan_array_interface():
    a = swapped_bf16(values(64))
    return Case(t.acquire(a, RO), a.tobytes(), "array-interface", alive=weakref.ref(a))


ORPHANS = [
    orphan_native_host, orphan_native_device, orphan_native_borrowed, orphan_numpy,
    orphan_numpy_strided, orphan_numpy_tracked, orphan_bytes, orphan_dlpack,
    orphan_dlpack_legacy, orphan_dlpack_device, orphan_dlpack_c, orphan_dlpack_c_device,
    orphan_jax, orphan_cai, orphan_array_interface,
]


def churn():
    """Allocate and free enough that freed producer memory would be reused."""
    junk = [np.full(64, 0x5A5A5A5A, dtype=np.uint32) for _ in range(2000)]
    junk += [bytes([0xA5]) * 256 for _ in range(2000)]
    junk += [t.exporter("B", (256,), device=DEV0) for _ in range(20)]
    del junk
    gc.collect()


@pytest.mark.parametrize("end", ["release", "drop"])
@pytest.mark.parametrize("make", ORPHANS, ids=[m.__name__[len("orphan_"):] for m in ORPHANS])
def test_view_outlives_its_producer(make, end):
    gc.collect()
    allocations = t.emulated_live_allocations()
    totals = t.dlpack_totals()
    case = make()  # every reference but the view's is gone with make's frame
    gc.collect()
    churn()
    view = case.view
    info = view.info()
    assert info["path"] == case.path
    del info
    assert view.copy_to_host() == case.expected
    if case.alive is not None:
        assert case.alive() is not None  # the view keeps it alive
    assert t.emulated_live_allocations() == allocations + case.allocation
    exported, deleted = t.dlpack_totals()
    assert (exported - totals[0], deleted - totals[1]) == (int(case.dlpack), 0)
    churn()
    assert view.copy_to_host() == case.expected  # still the producer's values
    if end == "release":
        view.release()
        view.release()  # a no-op
        assert not view.acquired
        with pytest.raises(ValueError, match="released"):
            view.copy_to_host()
    del view
    case.view = None
    gc.collect()
    if case.alive is not None:
        assert case.alive() is None  # freed by the release, not kept by a leaked reference
    assert t.emulated_live_allocations() == allocations
    exported, deleted = t.dlpack_totals()
    assert (exported - totals[0], deleted - totals[1]) == (int(case.dlpack), int(case.dlpack))
    assert t.shared_info()[1] == 0


def test_many_views_of_one_orphaned_producer_release_in_any_order():
    host = values(256)
    p = t.DLPackProducer(t.to_device(host, DEV0))
    e = t.to_device(host, DEV0)
    allocations = t.emulated_live_allocations()
    totals = t.dlpack_totals()
    views = [t.acquire(p, DEVICE_VIEW) for _ in range(50)]
    views += [t.acquire(e, DEVICE_VIEW | t.PYXBUF_BORROW_SHARED) for _ in range(50)]
    del p, e
    gc.collect()
    rng = np.random.default_rng(7)
    for i in rng.permutation(len(views)):
        assert views[i].copy_to_host() == host.tobytes()
        views[i].release()
        if rng.random() < 0.5:
            views[i] = None
    del views
    gc.collect()
    assert t.emulated_live_allocations() == allocations - 2
    exported, deleted = t.dlpack_totals()
    assert (exported - totals[0], deleted - totals[1]) == (50, 50)


# ---------------------------------------------------------------------------
# 3. Interpreter shutdown with live views
# ---------------------------------------------------------------------------

CHILD = textwrap.dedent(r"""
    import atexit, gc, sys, threading
    import numpy as np, ml_dtypes
    import _pyxbuf_testext as t

    MODE = sys.argv[1]
    EXT = t.PYXBUF_DL_EXT_DEV
    RO = t.PyBUF_RECORDS_RO
    DEV = RO | t.PYXBUF_DEVICE

    class CAI:
        def __init__(self, memory, **iface):
            self.memory, self.iface = memory, iface
        @property
        def __cuda_array_interface__(self):
            return dict(self.iface)

    def producers():
        host = np.arange(64, dtype=np.float32)
        e = t.to_device(host, (EXT, 0))
        ptr = t.inspect(e, DEV)["buf"]
        out = [
            (t.exporter("f", (64,)), RO),
            (t.to_device(host, (EXT, 0)), DEV),
            (t.to_device(host, (EXT, 0)), DEV | t.PYXBUF_BORROW_SHARED),
            (host.copy(), RO),
            (np.arange(64.0)[::3], RO),
            (bytes(range(64)), RO),
            (np.zeros(64), t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE),
            (t.DLPackProducer(host.copy()), RO),
            (t.DLPackProducer(host.copy(), versioned=False), RO),
            (t.DLPackProducer(t.to_device(host, (EXT, 0))), DEV),
            (t.DLPackCProducer(host.copy()), RO),
            (t.DLPackCProducer(t.to_device(host, (EXT, 0))), DEV),
            (CAI(e, shape=(64,), typestr="<f4", data=(ptr, False), version=3), DEV),
            (np.ones(64, dtype=ml_dtypes.bfloat16), RO),
            (np.ones(64, dtype=ml_dtypes.bfloat16).view(
                np.dtype(ml_dtypes.bfloat16).newbyteorder()), RO),  # the bridge
        ]
        if "jax" in MODE:
            import jax.numpy as jnp
            out.append((jnp.ones(64, dtype=jnp.bfloat16), RO))
        return out

    def views():
        got = []
        for obj, flags in producers():
            v = t.acquire(obj, flags)
            assert v.copy_to_host()
            got.append(v)
        return got

    # Module globals: views never released, released at module teardown.
    HELD = views()
    FIRST = HELD[0]

    # A reference cycle holding views: only the cyclic GC (or finalization)
    # frees it.
    class Node:
        pass
    node = Node()
    node.self = node
    node.views = views()
    del node

    # A view whose only reference is a closure in a cycle.
    def make_closure():
        vs = views()
        def f():
            return vs, f
        return f
    make_closure()

    if "atexit" in MODE:
        ATEXIT_VIEWS = views()
        def at_exit():
            # Acquire and release during shutdown, with everything still held.
            for obj, flags in producers():
                t.cycle(obj, flags, 100)
                t.acquire(obj, flags).release()
            for v in ATEXIT_VIEWS[::2]:
                v.release()
        atexit.register(at_exit)

    if "thread" in MODE:
        started = threading.Barrier(3)
        def worker():
            mine = views()
            started.wait()
            for obj, flags in producers():
                t.cycle(obj, flags, 200)
            # SystemExit in a thread ends the thread only, silently; its
            # views are dropped with its frame.
            sys.exit(0)
        workers = [threading.Thread(target=worker) for _ in range(2)]
        for w in workers:
            w.start()
        started.wait()
        for w in workers:
            w.join()

    if "daemon" in MODE:
        # Daemon threads still acquiring and releasing, holding views, when
        # the interpreter finalizes: they are stopped at their next GIL
        # acquisition.
        ready = threading.Barrier(4)
        def spin(keep):
            pairs = producers()
            keep.extend(views())
            ready.wait()
            while True:
                for obj, flags in pairs:
                    t.cycle(obj, flags, 10)
                    v = t.acquire(obj, flags)
                    v.copy_to_host()
                    if flags & t.PYXBUF_BORROW_EXCLUSIVE:
                        v.release()  # else the next exclusive request is refused
                    else:
                        keep.append(v)
                    if len(keep) > 200:
                        del keep[:100]
        for _ in range(3):
            threading.Thread(target=spin, args=([],), daemon=True).start()
        ready.wait()

    if "sys-exit" in MODE:
        sys.exit(0)
""")


CHILD_MODES = ["normal", "sys-exit", "atexit", "thread", "daemon", "thread-daemon-atexit-sys-exit",
               "jax"]


@pytest.mark.parametrize("mode", CHILD_MODES)
def test_shutdown_with_live_views(mode):
    if "jax" in mode:
        pytest.importorskip("jax")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(t.__file__)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("PYTHONWARNINGS", None)
    env["JAX_PLATFORMS"] = "cpu"  # the child's JAX arrays are CPU arrays on GPU machines too
    args = [sys.executable]
    if "jax" not in mode:
        # Development mode: the debug allocator and faulthandler catch a
        # release after finalization freed what the view points at.
        args += ["-X", "dev"]
    proc = subprocess.run(args + ["-c", CHILD, mode], env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout == ""
