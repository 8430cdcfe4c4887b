"""Thread stress (issue 7, Hardening): 8 Python threads started together by a
Barrier, with sys.setswitchinterval(1e-6) so the GIL changes hands between
almost every bytecode, on shared producers of every acquisition path,
concurrent borrow requests, and the device registry.

With the GIL, libpyxbuf's own C code runs one thread at a time except where
it releases the GIL (device copies and waits, c/export/transfer.c; the CAI stream
synchronisation, c/bridges/cai.c) -- so those are the places where two threads are
really inside the library at once, and the borrow registry's and the
emulated device's mutexes are what keep them apart. Everything else here
checks that nothing depends on a sequence of calls not being interleaved:
borrow counters, the registry, DLPack deleters, the type caches. On a
free-threaded build the suite runs with the GIL off (PYTHON_GIL=0, checked
below): there the eight threads are inside the library at once everywhere.

What is checked after each test: every thread finished without an
exception, producers' refcounts are what they were, DLPack deleters ran once
per tensor, the borrow registry is empty (t.shared_info()) and no
emulated-device allocation is left.

Last, a regression: the DLPack bridge's first call published half-built
static state; a finalizer run by the GC during its allocations lets another
thread in (a GIL switch no C code can rule out), which crashed.
"""

import gc
import os
import queue
import random
import subprocess
import sys
import sysconfig
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import _pyxbuf_testext as t
from numpy_route import ROUTE, USER_DTYPE_ROUTE
from cai_producers import cai_over

UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
THREADS = 8
ROUNDS = 60 if UNDER_ASAN else 300

EXT = t.PYXBUF_DL_EXT_DEV
DEV0, DEV1 = (EXT, 0), (EXT, 1)
RO = t.PyBUF_RECORDS_RO
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
SHARED = t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE


@pytest.fixture(autouse=True)
def fast_switching(nothing_left_behind):  # conftest.py checks what is left after
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def test_gil_is_off_on_free_threaded_builds():
    """With the GIL on, a free-threaded build would run this suite one
    thread at a time and prove nothing about it. PYTHON_GIL=0 forces it off;
    without, one imported module not declaring Py_MOD_GIL_NOT_USED turns it
    back on."""
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("a GIL build")
    assert not sys._is_gil_enabled()


def run_threads(target, n=THREADS, timeout=300):
    """Run target(i) on n threads released together; re-raise the first
    failure."""
    barrier = threading.Barrier(n)
    errors = []

    def body(i):
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:  # reported below, with the thread's index
            errors.append((i, exc))
            barrier.abort()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
        assert not th.is_alive(), "a thread is stuck (deadlock?)"
    if errors:
        i, exc = errors[0]
        raise AssertionError(f"thread {i} failed: {exc!r}") from exc




def host_values(n=128):
    return (np.arange(n) * 5 - 3).astype(np.float32)


def native_host():
    e = t.exporter("B", (64,))
    for i in range(64):
        t.exporter_poke(e, i, i)
    return e


def jax_bf16():
    jnp = pytest.importorskip("jax.numpy")
    return jnp.arange(128, dtype=jnp.float32).astype(jnp.bfloat16)


# (id, factory, flags, path)
PATHS = [
    ("native-host", native_host, RO, "native"),
    ("native-device", lambda: t.to_device(host_values(), DEV0), DEVICE_VIEW, "native"),
    ("native-shared-borrow", lambda: t.to_device(host_values(), DEV1),
     DEVICE_VIEW | t.PYXBUF_BORROW_SHARED, "native"),
    ("numpy", host_values, RO, ROUTE),
    ("numpy-strided", lambda: host_values(512).reshape(16, 32)[::3, ::-2], RO, ROUTE),
    ("numpy-tracked-shared", host_values, SHARED, ROUTE),
    ("classic-bytes", lambda: bytes(range(200)), RO, "classic"),
    ("classic-memoryview-strided", lambda: memoryview(host_values(512).reshape(16, 32))[::3],
     RO, "classic"),
    ("classic-tracked-shared", lambda: bytearray(range(200)), SHARED, "classic"),
    # bytes' memory is immutable: an enforced grant, no registry entry.
    ("classic-bytes-enforced-shared", lambda: bytes(range(200)), SHARED, "classic"),
    ("dlpack", lambda: t.DLPackProducer(host_values()), RO, "dlpack"),
    ("dlpack-legacy", lambda: t.DLPackProducer(host_values(), versioned=False), RO, "dlpack"),
    ("dlpack-device", lambda: t.DLPackProducer(t.to_device(host_values(), DEV1)), DEVICE_VIEW,
     "dlpack"),
    ("dlpack-jax-bfloat16", jax_bf16, RO, "dlpack"),
    ("dlpack-c", lambda: t.DLPackCProducer(host_values()), RO, "dlpack-c"),
    ("dlpack-c-device", lambda: t.DLPackCProducer(t.to_device(host_values(), DEV0)),
     DEVICE_VIEW, "dlpack-c"),
    ("cuda-array-interface", lambda: cai_over(host_values()), DEVICE_VIEW,
     "cuda-array-interface"),
    ("numpy-bfloat16", lambda: host_values().astype(ml_dtypes.bfloat16), RO, USER_DTYPE_ROUTE),
    # The byte order opposite to the machine's: the struct route leaves it
    # to the bridge.
    ("array-interface", lambda: host_values().astype(ml_dtypes.bfloat16).view(
        np.dtype(ml_dtypes.bfloat16).newbyteorder()), RO, "array-interface"),
]


def hammer(producers, rounds):
    """What each thread does with the shared producers: C-level cycles,
    held views read through pyxbuf_copy_to_host, views released out of
    order."""
    expected = [t.acquire(obj, flags).copy_to_host() for obj, flags, _ in producers]

    def work(i):
        rng = random.Random(i)
        held = []
        for _ in range(rounds):
            k = rng.randrange(len(producers))
            obj, flags, path = producers[k]
            t.cycle(obj, flags, rng.randrange(1, 20))
            v = t.acquire(obj, flags)
            assert v.info()["path"] == path
            assert v.copy_to_host() == expected[k]
            held.append(v)
            if len(held) > 6:
                held.pop(rng.randrange(len(held))).release()
        for v in held:
            v.release()

    return work


def counters(objs):
    return [(o.exported, o.deleted) if isinstance(o, t.DLPackProducer) else None for o in objs]


@pytest.mark.parametrize("make,flags,path", [p[1:] for p in PATHS], ids=[p[0] for p in PATHS])
def test_one_shared_producer_per_path(make, flags, path):
    obj = make()
    assert t.inspect(obj, flags)["path"] == path
    refs = sys.getrefcount(obj)
    run_threads(hammer([(obj, flags, path)], ROUNDS))
    gc.collect()
    assert sys.getrefcount(obj) == refs
    if isinstance(obj, t.DLPackProducer):
        assert obj.exported == obj.deleted > THREADS * ROUNDS


def test_every_path_at_once():
    producers = [(p[1](), p[2], p[3]) for p in PATHS if "jax" not in p[0]]
    refs = [sys.getrefcount(obj) for obj, _, _ in producers]
    run_threads(hammer(producers, ROUNDS * 2))
    gc.collect()
    assert [sys.getrefcount(obj) for obj, _, _ in producers] == refs
    for c in counters([obj for obj, _, _ in producers]):
        assert c is None or c[0] == c[1]


# ---------------------------------------------------------------------------
# Concurrent borrows
# ---------------------------------------------------------------------------

class Grants:
    """What the threads hold, recorded after a grant and dropped before its
    release, so a conflicting pair can never be recorded at once without
    pyxbuf having granted both."""

    def __init__(self):
        self.lock = threading.Lock()
        self.held = []  # (kind, lo, hi)
        self.counts = {"shared": 0, "exclusive": 0, "plain": 0, "refused": 0}
        self.max_shared = 0

    # Pairs that must never be held at once over common bytes: an exclusive
    # borrow and anything; a shared borrow and a writable plain view. A
    # borrow an exporter granted tracked ("-t": plain views it cannot stop
    # were live, issue 38) promises only that no other borrower conflicts.
    @staticmethod
    def conflict(a, b):
        borrows = {"shared", "exclusive"}
        a0, b0 = a.removesuffix("-t"), b.removesuffix("-t")
        if (a != a0 or b != b0) and not (a0 in borrows and b0 in borrows):
            return False
        pair = {a0, b0}
        return "exclusive" in pair or pair == {"shared", "plain-w"}

    def add(self, kind, lo, hi):
        with self.lock:
            for other, olo, ohi in self.held:
                if olo < hi and lo < ohi:
                    assert not self.conflict(kind, other), (
                        f"{kind} [{lo}, {hi}) granted while {other} [{olo}, {ohi}) is held")
            self.held.append((kind, lo, hi))
            self.counts[kind.split("-")[0]] += 1
            self.max_shared = max(self.max_shared, sum(k == "shared" for k, _, _ in self.held))

    def remove(self, kind, lo, hi):
        with self.lock:
            self.held.remove((kind, lo, hi))

    def refused(self):
        with self.lock:
            self.counts["refused"] += 1


REQUESTS = {"shared": SHARED, "exclusive": EXCLUSIVE, "plain": RO}


def describe(v):
    """ext_flags and readonly of a view from either copy of libpyxbuf
    (_pyxbuf_second_copy's views show only their grants)."""
    if isinstance(v, t.View):
        return v.info()
    return {"ext_flags": v.ext_flags, "readonly": None}


def borrow_worker(grants, target, flags_extra, rounds, windows, kinds, check_flags, read,
                  libraries=(t,)):
    def work(i):
        rng = random.Random(1000 + i)
        lib = libraries[i % len(libraries)]
        for _ in range(rounds):
            kind = rng.choice(kinds)
            lo, hi = rng.choice(windows)
            obj = target(lo, hi)
            try:
                v = lib.acquire(obj, REQUESTS[kind] | flags_extra)
            except BufferError as exc:
                assert kind != "plain" or "exclusive borrow is live" in str(exc), exc
                grants.refused()
                continue
            try:
                info = describe(v)
                check_flags(kind, info)
                if kind == "plain":  # writable unless a shared borrow was live
                    kind = "plain-r" if info["readonly"] else "plain-w"
                elif info["ext_flags"] & t.PYXBUF_EXT_TRACKED:
                    kind += "-t"
                grants.add(kind, lo, hi)
                for _ in range(rng.randrange(3)):
                    read(v)  # device copies release the GIL while the grant is held
                grants.remove(kind, lo, hi)
            finally:
                v.release()
        # End with one exclusive grant per thread, retried until the others
        # let go: exclusive grants under contention are rare, but never none.
        while True:
            lo, hi = windows[0]
            try:
                v = lib.acquire(target(lo, hi), EXCLUSIVE | flags_extra)
            except BufferError:
                grants.refused()
                continue
            try:
                info = describe(v)
                check_flags("exclusive", info)
                kind = "exclusive-t" if info["ext_flags"] & t.PYXBUF_EXT_TRACKED else "exclusive"
                grants.add(kind, lo, hi)
                grants.remove(kind, lo, hi)
            finally:
                v.release()
            return

    return work


@pytest.mark.parametrize("device", [None, DEV0], ids=["host", "device"])
def test_concurrent_borrows_on_one_exporter(device):
    e = t.exporter("f", (256,), device=device)
    flags_extra = t.PYXBUF_DEVICE if device else 0
    refs = sys.getrefcount(e)

    def check(kind, info):
        want = {"shared": t.PYXBUF_EXT_SHARED, "exclusive": t.PYXBUF_EXT_EXCLUSIVE,
                "plain": 0}[kind]
        # tracked while a plain view (which the exporter cannot stop) is live
        assert info["ext_flags"] & ~t.PYXBUF_EXT_TRACKED == want
        assert kind != "plain" or info["ext_flags"] == 0
        if kind != "plain":
            assert info["readonly"] == (kind == "shared")

    grants = Grants()
    run_threads(borrow_worker(grants, lambda lo, hi: e, flags_extra, ROUNDS * 3, [(0, 256)],
                              ["shared", "shared", "exclusive", "plain"], check,
                              lambda v: v.copy_to_host()))
    gc.collect()
    assert sys.getrefcount(e) == refs
    assert not grants.held
    c = grants.counts
    # Every kind was granted, and some requests met a conflicting grant.
    assert c["shared"] and c["exclusive"] >= THREADS and c["plain"] and c["refused"], c
    # With every view released, an exclusive borrow is grantable again.
    t.acquire(e, EXCLUSIVE | flags_extra).release()


@pytest.mark.parametrize("copies", [1, 2], ids=["one-library-copy", "two-library-copies"])
def test_concurrent_tracked_borrows_on_one_numpy_array(copies):
    """Overlapping slices of one array (different objects, the same bytes);
    with two copies, odd threads borrow through _pyxbuf_second_copy's own
    static libpyxbuf, which shares the registry table."""
    import _pyxbuf_second_copy as other

    a = np.arange(1000, dtype=np.int32)
    refs = sys.getrefcount(a)
    windows = [(0, 1000), (0, 300), (250, 600), (550, 1000), (300, 550), (900, 1000)]

    def check(kind, info):
        want = t.PYXBUF_EXT_SHARED if kind == "shared" else t.PYXBUF_EXT_EXCLUSIVE
        assert info["ext_flags"] == t.PYXBUF_EXT_TRACKED | want
        if info["readonly"] is not None:
            assert info["readonly"] == (kind == "shared")

    def read(v):
        if isinstance(v, t.View):
            assert len(v.copy_to_host()) == v.info()["len"]

    grants = Grants()
    run_threads(borrow_worker(grants, lambda lo, hi: a[lo:hi], 0, ROUNDS * 3, windows,
                              ["shared", "shared", "exclusive"], check, read,
                              libraries=(t, other)[:copies]))
    assert other.shared_info()[1] == 0
    gc.collect()
    assert sys.getrefcount(a) == refs
    assert not grants.held
    c = grants.counts
    assert c["shared"] and c["exclusive"] >= THREADS and c["refused"], c
    assert t.shared_info()[1] == 0
    assert np.array_equal(a, np.arange(1000, dtype=np.int32))


def u64_counters(v):
    """The uint64 counters in a held view's memory, read through it."""
    return np.frombuffer(v.copy_to_host(), dtype=np.uint64).copy()


def poke_u64(e, values):
    """Store counters into an exporter's memory byte by byte: many calls,
    so other threads run in the middle of the store too."""
    for j, value in enumerate(values):
        for b, byte in enumerate(int(value).to_bytes(8, "little")):
            t.exporter_poke(e, 8 * j + b, byte)


def exclusive_target(kind):
    """(object to borrow, its ext_flags when exclusive, load-pause-store
    increment under a held view, the counters now)."""
    if kind == "tracked-numpy":
        a = np.zeros(64, dtype=np.int64)

        def increment(v):
            before = a.copy()
            time.sleep(0)  # other threads run between the load and the store
            for j in range(len(a)):  # many bytecodes: and meanwhile
                a[j] = before[j] + 1

        return a, t.PYXBUF_EXT_TRACKED | t.PYXBUF_EXT_EXCLUSIVE, increment, lambda: a
    e = t.exporter("Q", (4,))

    def increment(v):
        before = u64_counters(v)
        time.sleep(0)  # other threads run between the load and the store
        poke_u64(e, before + 1)

    return e, t.PYXBUF_EXT_EXCLUSIVE, increment, lambda: np.frombuffer(
        t.copy_to_host(e), dtype=np.uint64)


@pytest.mark.parametrize("kind", ["tracked-numpy", "exporter"])
def test_exclusive_holders_write_without_interference(kind):
    """Each thread increments counters in the memory under an exclusive
    borrow (a tracked array through NumPy, as a borrower may; an exporter
    byte by byte): a load, other threads running, a store. With pyxbuf
    excluding the others, no increment is lost."""
    obj, ext_flags, increment, counters = exclusive_target(kind)
    done = [0] * THREADS
    refused = [0] * THREADS

    def work(i):
        while done[i] < ROUNDS // 3:
            try:
                v = t.acquire(obj, EXCLUSIVE)
            except BufferError:
                refused[i] += 1
                time.sleep(0)  # the holder runs, rather than a spin
                continue
            try:
                assert v.info()["ext_flags"] == ext_flags
                increment(v)
            finally:
                v.release()
            done[i] += 1

    run_threads(work)
    assert (counters() == sum(done)).all(), (counters(), sum(done))
    assert sum(refused) > 0, "no thread ever met another's exclusive borrow"
    if kind == "exporter":
        assert obj.borrows == {"views": 0, "writable": 0, "shared": 0, "exclusive": 0}


def test_borrowed_views_released_on_another_thread():
    """Threads 0-3 acquire views holding borrows (shared and exclusive
    tracked borrows of overlapping slices of one NumPy array; shared,
    exclusive and plain views of an exporter) and hand them through a queue
    to threads 4-7, which use the memory (exclusive holders increment
    counters by load, pause, store) and release them. A grant belongs to the
    view, not to the thread: until its release on the other thread, no
    conflicting grant is made, and no increment is lost."""
    a = np.zeros(1000, dtype=np.uint64)
    e = t.exporter("Q", (4,))
    windows = [(0, 1000), (0, 300), (250, 600), (550, 1000), (300, 550), (900, 1000)]
    exporter_window = (1000, 1004)  # the exporter in the ledger: apart from the array
    expected = np.zeros(1000, dtype=np.uint64)  # exclusive grants covering each item
    exporter_grants = [0]
    expected_lock = threading.Lock()
    grants = Grants()
    handed = queue.Queue(maxsize=6)
    half = THREADS // 2

    def request(rng):
        if rng.random() < 0.5:
            lo, hi = rng.choice(windows)
            return a[lo:hi], rng.choice(["shared", "shared", "exclusive"]), lo, hi
        return e, rng.choice(["shared", "exclusive", "plain"]), *exporter_window

    def acquire(obj, kind, lo, hi):
        try:
            v = t.acquire(obj, REQUESTS[kind])
        except BufferError as exc:
            assert kind != "plain" or "exclusive borrow is live" in str(exc), exc
            grants.refused()
            return False
        try:
            info = v.info()
            want = {"shared": t.PYXBUF_EXT_SHARED, "exclusive": t.PYXBUF_EXT_EXCLUSIVE,
                    "plain": 0}[kind]
            if obj is e:  # tracked while a plain view it cannot stop is live
                assert info["ext_flags"] & ~t.PYXBUF_EXT_TRACKED == want
                if want and info["ext_flags"] & t.PYXBUF_EXT_TRACKED:
                    kind += "-t"
            else:
                assert info["ext_flags"] == want | t.PYXBUF_EXT_TRACKED
            if kind == "plain":  # writable unless a shared borrow was live
                kind = "plain-r" if info["readonly"] else "plain-w"
            grants.add(kind, lo, hi)
        except BaseException:
            v.release()  # a failure leaks no grant: the other threads finish
            raise
        handed.put((v, kind, lo, hi, threading.get_ident()), timeout=60)
        return True

    def acquirer(i):
        rng = random.Random(2000 + i)
        try:
            for _ in range(ROUNDS // 3):
                acquire(*request(rng))
            # Last, a view of each kind, each asked for until the releasers
            # let go of what conflicts (how many of the random requests above
            # are granted depends on how the threads are scheduled: on a
            # loaded machine a kind could go unserved) -- exclusive views of
            # all the array and of the exporter at the end.
            deadline = time.monotonic() + 60
            for obj, kind, lo, hi in [(a[0:300], "shared", 0, 300), (e, "plain", *exporter_window),
                                      (a, "exclusive", 0, 1000),
                                      (e, "exclusive", *exporter_window)]:
                while not acquire(obj, kind, lo, hi):
                    assert time.monotonic() < deadline, "a grant is never released"
                    time.sleep(0)
        finally:
            handed.put(None, timeout=60)  # one per releaser; the last after every view

    def use(v, kind, lo, hi):
        on_exporter = (lo, hi) == exporter_window
        load = (lambda: u64_counters(v)) if on_exporter else (lambda: a[lo:hi].copy())
        before = load()
        time.sleep(0)  # other threads run between the load and the store
        if kind == "exclusive-t":
            return  # beside plain readers, which check that the bytes stay
        if kind != "exclusive":
            assert (load() == before).all(), "the memory changed under a read-only grant"
        elif on_exporter:
            poke_u64(e, before + 1)
            with expected_lock:
                exporter_grants[0] += 1
        else:
            a[lo:hi] = before + 1
            with expected_lock:
                expected[lo:hi] += 1

    def releaser(i):
        while (item := handed.get(timeout=60)) is not None:
            v, kind, lo, hi, acquired_on = item
            try:
                assert acquired_on != threading.get_ident()
                use(v, kind, lo, hi)
                grants.remove(kind, lo, hi)
            finally:
                v.release()
            assert not v.acquired

    run_threads(lambda i: acquirer(i) if i < half else releaser(i))
    assert handed.empty() and not grants.held
    c = grants.counts
    assert c["shared"] and c["exclusive"] >= 2 * half and c["plain"] and c["refused"], c
    assert (a == expected).all(), "an exclusive holder lost an increment"
    assert (np.frombuffer(t.copy_to_host(e), dtype=np.uint64) == exporter_grants[0]).all()
    # Everything was released, on the other threads: nothing is counted, and
    # exclusive borrows of everything are grantable again.
    assert t.shared_info()[1] == 0
    assert e.borrows == {"views": 0, "writable": 0, "shared": 0, "exclusive": 0}
    t.acquire(a, EXCLUSIVE).release()
    t.acquire(e, EXCLUSIVE).release()


# ---------------------------------------------------------------------------
# The device registry and the emulated device from 8 threads
# ---------------------------------------------------------------------------

def test_device_exporters_created_copied_and_destroyed_concurrently():
    def work(i):
        rng = np.random.default_rng(i)
        for r in range(ROUNDS // 3):
            host = rng.integers(0, 1 << 30, size=rng.integers(1, 300), dtype=np.int32)
            src, dst = (EXT, (i + r) % 4), (EXT, (i + r + 1) % 4)
            e = t.to_device(host, src)
            assert t.view_device(e) == src
            assert t.copy_to_host(e) == host.tobytes()
            moved = t.to_device(e, dst)  # device to device
            assert t.view_device(moved) == dst
            back = t.to_device(moved, None)  # to the host: a host exporter
            assert t.copy_to_host(back) == host.tobytes()
            assert t.inspect(back, RO)["device"] is None
            # A producer "kernel" on its own stream, then a consumer that waits.
            w = t.exporter("B", (16,), device=src)
            stream = t.emulated_write(w, bytes([i] * 16))
            assert t.copy_to_host(w) == bytes([i] * 16)
            t.emulated_destroy_stream(stream)
            # Through DLPack and the CAI, on the device.
            p = t.DLPackProducer(moved)
            assert t.copy_to_host(p) == host.tobytes()
            c = cai_over(host)
            assert t.copy_to_host(c) == host.tobytes()
            with pytest.raises(ValueError, match="different devices"):
                t.same_device(e, moved)
            del e, moved, back, w, p, c

    run_threads(work)


def test_device_views_held_across_threads():
    """Views acquired on one thread, read and released on others."""
    host = host_values(512)
    producers = [t.to_device(host, DEV0), t.DLPackProducer(t.to_device(host, DEV1)),
                 cai_over(host)]
    lock = threading.Lock()
    pool = []

    def work(i):
        rng = random.Random(i)
        for _ in range(ROUNDS):
            if rng.random() < 0.5:
                v = t.acquire(rng.choice(producers), DEVICE_VIEW)
                with lock:
                    pool.append(v)
            else:
                with lock:
                    v = pool.pop(rng.randrange(len(pool))) if pool else None
                if v is not None:
                    assert v.copy_to_host() == host.tobytes()
                    v.release()

    run_threads(work)
    for v in pool:
        v.release()
    pool.clear()
    del producers


# ---------------------------------------------------------------------------
# Regression: first use of the DLPack bridge racing with a GIL switch
# ---------------------------------------------------------------------------

RACE_CHILD = r"""
import gc, sys, threading
import numpy as np
import _pyxbuf_testext as t

K = int(sys.argv[1])
first = t.DLPackProducer(np.arange(4, dtype=np.float32))
second = t.DLPackProducer(np.arange(4, dtype=np.float32))
stage = [0]
go, done = threading.Event(), threading.Event()
seen = []


class Stage:
    # Cyclic garbage whose finalizer makes the next stage's garbage: with a
    # gen-0 threshold of 1, one stage is finalized at each collection, that
    # is at almost every tuple pyxbuf allocates; stage K waits for the other
    # thread (releasing the GIL) in the middle of that allocation.
    def __init__(self):
        self.me = self

    def __del__(self):
        k = stage[0]
        stage[0] += 1
        if k < 12:
            Stage()
        if k == K:
            go.set()
            done.wait(2.0)


def other():
    go.wait()
    seen.append(t.inspect(second, t.PyBUF_RECORDS_RO)["path"])
    done.set()


thread = threading.Thread(target=other)
thread.start()
gc.collect()
Stage()
gc.set_threshold(1)
path = t.inspect(first, t.PyBUF_RECORDS_RO)["path"]  # the process's first __dlpack__ call
gc.set_threshold(700)
go.set()
thread.join()
assert (path, seen) == ("dlpack", ["dlpack"]), (path, seen)
assert first.exported == first.deleted == 1 and second.exported == second.deleted == 1
"""


@pytest.mark.parametrize("stage", range(8))
def test_first_dlpack_calls_race_with_a_finalizer(stage):
    """c/bridges/dlpack_import.c call_dlpack built its keyword tuples lazily and published
    the first before the others existed; a finalizer run by the GC inside
    Py_BuildValue let a second thread call __dlpack__ with a NULL
    max_version (a segfault, at stage 1 here). Each stage parks the first
    thread at a different allocation of its first acquisition."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(t.__file__)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", RACE_CHILD, str(stage)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
