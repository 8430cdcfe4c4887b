"""One transfer engine per process (issue 47, part 2).

Three copies of libpyxbuf live in this process, each statically linked into
its own module: _pyxbuf_testext, _pyxbuf_second_copy and the pyxbuf module
(Rust). The first that needs the engine publishes its backend registry,
transfer configuration, pinned pool and fill threads at
sys.modules['_pyxbuf_shared'].ENGINE; the others use them. So all three see
one pool and one configuration, start one set of threads, and each moves the
device arrays the others made.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import _pyxbuf_second_copy as other
import _pyxbuf_testext as t

pyxbuf = pytest.importorskip("pyxbuf", reason="the pyxbuf module (make pymodules) is not installed")
if not pyxbuf.EMULATED_DEVICE:
    pytest.skip("this pyxbuf module was built without the emulated device", allow_module_level=True)

EXT = t.PYXBUF_DL_EXT_DEV
POOL_FIELDS = ("held_bytes", "used_bytes", "allocations", "reuses", "fill_threads")


def pools():
    mine = tuple(t.pinned_pool_stats()[k] for k in POOL_FIELDS)
    module = tuple(pyxbuf.pinned_pool_stats()[k] for k in POOL_FIELDS)
    return mine, other.engine_state()[0], module


@pytest.fixture
def staging_everything():
    before = t.transfer_config(threshold=1, chunk=64 << 10, buffers=3, threads=3,
                               pool_cap=64 << 20, enabled=1)
    yield
    t.transfer_config(**before)


def test_one_pool_and_one_configuration_seen_by_every_copy(staging_everything):
    a = np.random.default_rng(5).integers(0, 256, 3 << 20, dtype=np.uint8)
    held = [t.to_device(a, (EXT, 0)), other.to_device(a, EXT, 0), pyxbuf.to_device(a, "ext_dev:0")]
    mine, theirs, module = pools()
    assert mine == theirs == module
    assert mine[2] + mine[3] >= 3  # each copy's staged copy took from the one pool
    # A configuration set through any copy is every copy's.
    pyxbuf.transfer_config(threads=2, chunk=128 << 10)
    assert (t.transfer_config()["threads"], t.transfer_config()["chunk"]) == (2, 128 << 10)
    assert other.engine_state()[1][:2] == (2, 128 << 10)
    t.transfer_config(threads=4)
    assert pyxbuf.transfer_config()["threads"] == 4 == other.engine_state()[1][0]
    del held


@pytest.mark.parametrize("maker", ["testext", "second copy", "pyxbuf module"])
def test_each_copy_moves_the_device_arrays_the_others_made(maker):
    a = np.arange(4096, dtype=np.float32)
    made = {
        "testext": lambda: t.to_device(a, (EXT, 0)),
        "second copy": lambda: other.to_device(a, EXT, 0),
        "pyxbuf module": lambda: pyxbuf.to_device(a, "ext_dev:0"),
    }[maker]()
    assert t.copy_to_host(made) == a.tobytes()
    assert bytes(memoryview(other.to_device(made, 1, 0))) == a.tobytes()
    assert bytes(memoryview(pyxbuf.to_device(made, "cpu"))) == a.tobytes()  # the new user's call
    # and onwards to the device again, by another copy than the maker
    again = pyxbuf.to_device(made, "ext_dev:0")
    assert t.copy_to_host(other.to_device(again, EXT, 0)) == a.tobytes()


def test_a_view_taken_through_another_copy_orders_the_free_of_pooled_memory():
    """The stream a consumer named through one copy (pyxbuf_get_stream) is
    noted on device memory another copy allocated from the pool: the
    engine's index of pooled blocks is the process's."""
    n = 64 << 10
    consumer, later = t.emulated_stream(), t.emulated_stream()
    try:
        e = t.exporter("B", (n,), device=(EXT, 0))
        at = t.bridge_view(e)["buf"]
        t.emulated_enqueue_write(at, consumer, b"\x55" * 8)  # the consumer's kernel
        other.cycle_stream(e, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE, consumer)
        assert t.emulated_pending(0, consumer) == 2  # its kernel, then the release's event
        del e  # freed on the default stream, behind a wait for the consumer's stream
        t.stream_sync((EXT, 0), 0)
        assert t.emulated_pending(0, consumer) == 0  # run for the free
    finally:
        t.emulated_destroy_stream(consumer)
        t.emulated_destroy_stream(later)


def test_setting_the_same_configuration_replaces_a_bad_environment():
    """pyxbuf.transfer_config(...) with values equal to the ones in force
    still sets them: that is how a bad variable's error is cleared."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if min(ram // 16, 16 << 30) >= 4 << 30:
        pytest.skip("the default pinned pool holds 4 x 1 GiB chunks on this machine")
    out = run("""
        import pyxbuf
        try:
            pyxbuf.transfer_config()
        except ValueError as e:
            print("refused:", e)
        pyxbuf.transfer_config(threads=2)  # the value in force already
        print("now:", pyxbuf.transfer_config()["threads"])
    """, PYXBUF_STAGING_CHUNK="1G", PYXBUF_STAGING_THREADS="2")
    assert out.returncode == 0, out.stderr
    refused, now = out.stdout.splitlines()
    # chunk x buffers outgrew the pool: the variable that is set is named
    assert refused.startswith("refused: the environment variable PYXBUF_STAGING_CHUNK is '1G'")
    assert now == "now: 2"


def run(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)


def test_one_set_of_fill_threads_for_every_copy():
    """Threads counted by the kernel: staging through all three copies starts
    the engine's workers once (threads - 1: the caller fills a part too), and
    the pinned pool's grower once."""
    out = run("""
        import os, numpy as np
        import _pyxbuf_testext as t, _pyxbuf_second_copy as other, pyxbuf
        t.transfer_config(threshold=1, chunk=1 << 20, buffers=3, threads=4, pool_cap=64 << 20)
        tasks = lambda: len(os.listdir("/proc/self/task"))
        a = np.ones(8 << 20, np.uint8)
        before = tasks()
        for _ in range(2):
            t.copy_to_host(t.to_device(a, (t.PYXBUF_DL_EXT_DEV, 0)))
            bytes(memoryview(other.to_device(other.to_device(a, t.PYXBUF_DL_EXT_DEV, 0), 1, 0)))
            bytes(memoryview(pyxbuf.to_device(pyxbuf.to_device(a, "ext_dev:0"), "cpu")))
        print(tasks() - before, t.pinned_pool_stats()["fill_threads"])
    """)
    assert out.returncode == 0, out.stderr
    started, workers = map(int, out.stdout.split())
    assert workers == 3
    assert started == workers + 1  # not three sets; and the pinned pool's one grower


def test_a_copy_of_another_layout_keeps_its_own_engine_and_says_so():
    """A table another pyxbuf published with a layout this copy cannot share
    (faked here with ctypes: version 1, layout 999): the copy warns once and
    works with its own engine."""
    out = run("""
        import ctypes, sys, types, warnings
        warnings.simplefilter("always")
        table = (ctypes.c_uint32 * 128)()
        table[0], table[1], table[2] = 1, 512, 999  # version, size, layout
        version = ctypes.c_char_p(b"9.9.9")
        ctypes.memmove(ctypes.addressof(table) + 32, ctypes.byref(ctypes.c_void_p(
            ctypes.cast(version, ctypes.c_void_p).value)), 8)  # installer_version
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        shared = types.ModuleType("_pyxbuf_shared")
        shared.ENGINE = new(ctypes.addressof(table), b"_pyxbuf_shared.ENGINE", None)
        sys.modules["_pyxbuf_shared"] = shared
        with warnings.catch_warnings(record=True) as seen:
            import numpy as np, _pyxbuf_testext as t
            d = t.to_device(np.arange(10, dtype=np.uint8), (t.PYXBUF_DL_EXT_DEV, 0))
            assert t.copy_to_host(d) == bytes(range(10))
            t.transfer_config(threads=2)
        for w in seen:
            print(f"{w.category.__name__}: {w.message}")
    """)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "transfer engine" in line]
    assert len(lines) == 1, out.stdout  # said once
    assert lines[0].startswith("RuntimeWarning: pyxbuf ")
    assert "keeps its own transfer engine" in lines[0]
    assert "pyxbuf 9.9.9 installed it with layout 999" in lines[0]
