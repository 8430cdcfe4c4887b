"""pyxbuf.Exporter across processes (issue 48): pickle protocol 5 with the
items out of band (PEP 574), every format, layout, read-only flag and device
kept; exporters over another object's memory (pyxbuf.frombuffer); exporters
over a SharedMemory block, pickled by name, with no borrow granted."""

import copy
import gc
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
from multiprocessing import shared_memory

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import _pyxbuf_testext as t
import pyxbuf

BF16 = "[ml_dtypes$bfloat16]"
F8 = "[ml_dtypes$float8_e4m3fn]"
# format -> NumPy dtype of its items, for filling and comparing them
FORMATS = {"f": np.float32, "d": np.float64, "B": np.uint8, "<h": np.int16, "q": np.int64,
           "Zf": np.complex64, BF16: ml_dtypes.bfloat16, F8: ml_dtypes.float8_e4m3fn}
SHARED_BORROW = pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED


def items_bytes(x):
    """The items of an exporter in C order, as bytes (any format: through a
    byte view of its memory and the layout it reports)."""
    a = np.asarray(x)
    return np.ascontiguousarray(a).tobytes()


def address(x):
    return np.asarray(x).__array_interface__["data"][0]


def roundtrip(x, protocol=5, out_of_band=True):
    buffers = []
    oob = out_of_band and protocol >= 5  # buffer_callback needs protocol 5
    stream = pickle.dumps(x, protocol=protocol, buffer_callback=buffers.append if oob else None)
    return pickle.loads(stream, buffers=buffers), stream, buffers


def random_exporter(fmt, shape, layout, rng, readonly=False):
    """An exporter of `shape` items of `fmt` with random bytes, laid out in C
    order, Fortran order, every other item (a strided view of a larger buffer)
    or with the first dimension running backwards."""
    itemsize = np.dtype(FORMATS[fmt]).itemsize
    n = int(np.prod(shape))
    step = 2 if layout == "strided" else 1
    base = bytearray(rng.integers(0, 256, size=max(n * step, 1) * itemsize, dtype=np.uint8)
                     .tobytes())
    c = [itemsize * step] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        c[i] = c[i + 1] * shape[i + 1]
    f = [itemsize] * len(shape)
    for i in range(1, len(shape)):
        f[i] = f[i - 1] * shape[i - 1]
    strides, offset = (f if layout == "F" else c), 0
    if layout == "reversed" and shape and shape[0] > 1:
        offset = strides[0] * (shape[0] - 1)
        strides = [-strides[0]] + strides[1:]
    return pyxbuf.frombuffer(base, fmt, shape, offset=offset, strides=strides if shape else None,
                             readonly=readonly)


# --- every format, layout and protocol: the same items come back -----------

@settings(max_examples=150, deadline=None)
@given(fmt=st.sampled_from(sorted(FORMATS)),
       shape=st.lists(st.integers(0, 4), min_size=0, max_size=3),
       layout=st.sampled_from(["C", "F", "strided", "reversed"]),
       protocol=st.integers(2, 5), out_of_band=st.booleans(), readonly=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_items_format_shape_and_flag_come_back(fmt, shape, layout, protocol, out_of_band,
                                               readonly, seed):
    x = random_exporter(fmt, tuple(shape), layout, np.random.default_rng(seed), readonly)
    r, _, buffers = roundtrip(x, protocol, out_of_band)
    assert type(r) is pyxbuf.Exporter
    assert (r.format, r.shape, r.itemsize, r.device) == (x.format, x.shape, x.itemsize, "cpu")
    assert r.readonly == x.readonly
    assert items_bytes(r) == items_bytes(x)
    assert buffers == [] or protocol == 5
    if layout in ("C", "F") or np.prod(shape) <= 1:
        # A contiguous layout is kept as it is (Fortran order included; a
        # dimension of extent 1 has no stride that matters) ...
        if np.prod(shape) > 1:
            assert [s for s, n in zip(r.strides, shape) if n > 1] == \
                [s for s, n in zip(x.strides, shape) if n > 1]
    else:
        # ... any other is sent as a C-order copy: its span can be far larger
        # than its items and hold bytes that are not the array's.
        assert np.asarray(r).flags.c_contiguous


def test_fortran_order_is_sent_without_a_copy():
    a = np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4))
    x = pyxbuf.frombuffer(a, "d", a.shape, strides=a.strides)
    r, _, buffers = roundtrip(x)
    assert r.strides == (8, 24) and address(r) == a.ctypes.data
    np.testing.assert_array_equal(np.asarray(r), a)


def test_a_strided_array_sends_only_its_items():
    base = np.arange(1000, dtype=np.float32)
    x = pyxbuf.frombuffer(base, "f", (10,), strides=(400,))  # every 100th item
    r, stream, buffers = roundtrip(x)
    assert [b.raw().nbytes for b in buffers] == [40]
    np.testing.assert_array_equal(np.asarray(r), base[::100])


# --- out of band: no item in the stream, no copy on either side ------------

@pytest.mark.parametrize("nbytes", [1 << 10, 1 << 20, 256 << 20, 1 << 30],
                         ids=["1KiB", "1MiB", "256MiB", "1GiB"])
@pytest.mark.parametrize("fmt", ["f", BF16])
def test_out_of_band_sends_no_item_and_copies_nothing(nbytes, fmt):
    itemsize = 4 if fmt == "f" else 2
    x = pyxbuf.exporter([nbytes // itemsize], fmt)
    np.asarray(x)[-1] = 3  # one page touched: the rest stays untouched zeros
    r, stream, buffers = roundtrip(x)
    assert len(stream) < 256  # the rebuilding call and the layout: no item
    assert len(buffers) == 1 and buffers[0].raw().nbytes == nbytes
    assert address(r) == address(x)  # the same memory, not a copy
    assert np.asarray(r)[-1] == 3 and r.format == fmt and r.readonly == 0


def test_in_band_protocol_5_writes_the_items_once():
    x = pyxbuf.exporter([1000], "f")
    np.asarray(x)[:] = np.arange(1000)
    r, stream, _ = roundtrip(x, out_of_band=False)
    assert 4000 <= len(stream) < 4300
    assert address(r) != address(x) and r.readonly == 0  # a bytearray: writable
    np.testing.assert_array_equal(np.asarray(r), np.arange(1000, dtype=np.float32))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_a_writable_array_comes_back_writable_and_a_read_only_one_read_only(protocol):
    for readonly in (False, True):
        x = pyxbuf.exporter([4], "f", readonly=readonly)
        r, _, _ = roundtrip(x, protocol, out_of_band=False)
        assert r.readonly == readonly
        if not readonly:
            np.asarray(r)[0] = 5  # and writable it is


def test_buffers_handed_back_read_only_give_a_read_only_array():
    # As Ray's object store hands them: NumPy's arrays come back read-only too.
    x = pyxbuf.exporter([4], "f")
    buffers = []
    stream = pickle.dumps(x, protocol=5, buffer_callback=buffers.append)
    r = pickle.loads(stream, buffers=[memoryview(b).toreadonly() for b in buffers])
    assert r.readonly == 1 and address(r) == address(x)
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(r)[0] = 1


def test_zero_dimensional_and_empty_arrays():
    for shape in ([], [0], [3, 0, 2]):
        x = pyxbuf.exporter(shape, "d")
        for oob in (True, False):
            r, _, _ = roundtrip(x, out_of_band=oob)
            assert r.shape == x.shape and r.nbytes == x.nbytes


# --- other producers' exporters, registered types, copies ------------------

def test_an_exporter_of_another_copy_of_libpyxbuf_comes_back_as_pyxbufs():
    # The C test extension links a libpyxbuf of its own, with an Exporter
    # type of its own (its messages name C's fixes): what it pickles comes
    # back as the pyxbuf package's.
    x = t.exporter("f", (3,))
    np.asarray(x)[:] = [1, 2, 3]
    r, _, _ = roundtrip(x)
    assert type(r) is pyxbuf.Exporter and type(x) is not pyxbuf.Exporter
    assert list(np.asarray(r)) == [1, 2, 3]


def test_a_borrowing_exporter_pickles_its_bytes_not_the_borrow():
    a = np.arange(6, dtype=np.float32)
    x = pyxbuf.from_dlpack(a)
    r, _, _ = roundtrip(x, protocol=4)
    a[0] = 100  # the original changes; the copy that travelled does not
    assert np.asarray(r)[0] == 0 and r.readonly == x.readonly
    del x
    gc.collect()
    assert list(np.asarray(r)) == list(range(6))


def test_a_registered_custom_type_travels_with_its_format_and_size():
    # Registered in the C test extension's libpyxbuf only: the process that
    # loads the pickle (here the pyxbuf module's copy) holds the items
    # without knowing the type, from the item size in the stream.
    t.dtype_register("pyxbuf_pickle_test$pair", 8, 4)
    try:
        x = t.exporter("[pyxbuf_pickle_test$pair]", (3,))
        np.asarray(pyxbuf.frombuffer(x))[:] = np.arange(24, dtype=np.uint8)  # its bytes
        for oob in (True, False):
            r, _, _ = roundtrip(x, out_of_band=oob)
            assert r.format == "[pyxbuf_pickle_test$pair]" and r.itemsize == 8
            assert r.shape == (3,) and r.strides == (8,)
            assert bytes(np.asarray(pyxbuf.frombuffer(r))) == bytes(range(24))
    finally:
        t.dtype_unregister("pyxbuf_pickle_test$pair")


def test_copy_and_deepcopy_give_independent_items():
    x = pyxbuf.exporter([3], BF16)
    for y in (copy.copy(x), copy.deepcopy(x)):
        assert y.format == BF16 and address(y) != address(x)
        np.asarray(y)[0] = 1
        assert np.asarray(x)[0] == 0


def test_pickling_leaks_nothing():
    x = pyxbuf.exporter([256], BF16)
    refs = sys.getrefcount(x)
    for _ in range(50):
        r, _, buffers = roundtrip(x)
        del r, buffers
        roundtrip(x, protocol=4)
    gc.collect()
    assert sys.getrefcount(x) == refs
    assert x.borrows == {"views": 0, "writable": 0, "shared": 0, "exclusive": 0}


def test_the_items_pickle_holds_keep_the_exporters_borrow_rules():
    # The out-of-band buffer is a view of the exporter, counted as any other
    # plain view it cannot control: a borrow asked meanwhile is only tracked,
    # and enforced again once pickle's buffers are gone.
    x = pyxbuf.exporter([4], "f")
    buffers = []
    pickle.dumps(x, protocol=5, buffer_callback=buffers.append)
    assert x.borrows["views"] == 1
    v = t.acquire(x, t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE)
    assert v.info()["ext_flags"] & t.PYXBUF_EXT_TRACKED
    v.release()
    del buffers
    gc.collect()
    assert x.borrows["views"] == 0
    v = t.acquire(x, t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE)
    assert not v.info()["ext_flags"] & t.PYXBUF_EXT_TRACKED
    with pytest.raises(BufferError, match="cannot grant"):  # enforced: pickling waits
        pickle.dumps(x, protocol=5, buffer_callback=[].append)
    v.release()


def test_getsizeof_counts_the_items_an_exporter_owns():
    # As NumPy counts an array that owns its data (Dask's sizeof of a Rust
    # crate's arrays is this): items it allocated, not those it views.
    import pyxbuf_sum

    owned = [pyxbuf.exporter([1000], "f"), pyxbuf_sum.ramp_f32(1000, 1.0), t.exporter("f", (1000,))]
    for x in owned:
        assert 4000 < sys.getsizeof(x) < 4000 + 1024, type(x)
    view = pyxbuf.frombuffer(np.zeros(1000, np.float32), "f")
    assert sys.getsizeof(view) < 1024


# --- device arrays: through a host copy, back onto the device --------------

@pytest.mark.usefixtures("nothing_left_behind")
@pytest.mark.parametrize("fmt", ["f", BF16])
def test_a_device_array_comes_back_on_its_device(fmt):
    host = np.arange(8).astype(FORMATS[fmt])
    d = pyxbuf.to_device(host, "ext_dev:1")
    for protocol, oob in ((5, True), (5, False), (4, False)):
        r, _, _ = roundtrip(d, protocol, oob)
        assert (r.device, r.format, r.shape) == ("ext_dev:1", fmt, (8,))
        assert items_bytes(r.to_device("cpu")) == host.tobytes()
    del d, r


@pytest.mark.usefixtures("nothing_left_behind")
def test_a_device_array_restored_on_the_host_on_request(monkeypatch):
    d = pyxbuf.to_device(np.arange(4, dtype=np.float32), "ext_dev:0")
    stream = pickle.dumps(d, protocol=5)
    with pyxbuf.unpickle_on_host():
        r = pickle.loads(stream)
    assert r.device == "cpu" and list(np.asarray(r)) == [0, 1, 2, 3]
    assert pickle.loads(stream).device == "ext_dev:0"  # outside the block: the device
    monkeypatch.setenv("PYXBUF_UNPICKLE_ON_HOST", "1")  # a worker's environment
    assert pickle.loads(stream).device == "cpu"
    del d, r


def test_a_device_this_process_lacks_is_named_with_the_way_out():
    d = pyxbuf.to_device(np.arange(4, dtype=np.float32), "ext_dev:0")
    rebuild, args = d.__reduce_ex__(5)
    assert rebuild is pyxbuf._pickle.rebuild and args[-1] == "ext_dev:0"
    # The same pickle as a CUDA array would give, loaded here (no GPU, no driver).
    with pytest.raises(RuntimeError) as info:
        rebuild(*args[:-1], "cuda:0")
    message = str(info.value)
    assert "device 'cuda:0'" in message and "unpickle_on_host" in message
    assert "PYXBUF_UNPICKLE_ON_HOST" in message
    with pyxbuf.unpickle_on_host():
        assert rebuild(*args[:-1], "cuda:0").device == "cpu"


# --- pyxbuf.frombuffer: exporters over another object's memory -------------

def test_frombuffer_is_zero_copy_and_keeps_its_base():
    b = bytearray(range(16))
    x = pyxbuf.frombuffer(b, "<h", (2, 4), offset=0)
    assert address(x) == address(np.frombuffer(b, np.uint8)) and x.readonly == 0
    with pytest.raises(BufferError):  # the bytearray cannot resize under it
        b.append(1)
    np.asarray(x)[0, 0] = -1
    assert b[:2] == b"\xff\xff"
    assert pyxbuf.frombuffer(bytes(8), "f").readonly == 1  # read-only memory
    assert pyxbuf.frombuffer(b, "f", readonly=True).readonly == 1
    grants = pyxbuf.inspect(x, flags=SHARED_BORROW)["grants"]
    assert grants == {"shared": True, "exclusive": False, "tracked": True}


@pytest.mark.parametrize("kwargs,error,cause", [
    (dict(buffer=object()), TypeError, "neither a buffer"),
    (dict(buffer=bytearray(8), format="f", shape=(3,)), ValueError, "reach bytes"),
    (dict(buffer=bytearray(8), format="f", shape=(2,), offset=4), ValueError, "reach bytes"),
    (dict(buffer=bytearray(8), format="f", shape=(1,), offset=-4), ValueError, "reach bytes"),
    (dict(buffer=bytearray(8), format="f", shape=(2,), strides=(-4,)), ValueError,
     "reach bytes"),
    (dict(buffer=bytearray(10), format="f"), ValueError, "not a whole number"),
    (dict(buffer=bytearray(8), format="f", shape=(2,), strides=(4, 4)), ValueError,
     "2 strides for 1 dimensions"),
    (dict(buffer=bytearray(8), format="T{", shape=(1,)), ValueError, "T{"),
    (dict(buffer=np.arange(8)[::2], format="q", shape=(4,)), BufferError,
     "'numpy.ndarray' gave no contiguous view"),
], ids=["not-a-buffer", "too-many-items", "offset-past-end", "negative-offset",
        "backwards-past-start", "no-whole-count", "strides-per-dim", "bad-format",
        "strided-base"])
def test_frombuffer_refusals_name_the_cause(kwargs, error, cause):
    with pytest.raises(error, match=cause):
        pyxbuf.frombuffer(**kwargs)


# --- shared memory: one block, several processes, no grant -----------------

@pytest.fixture
def block():
    shm = shared_memory.SharedMemory(create=True, size=4096)
    yield shm
    gc.collect()
    shm.close()
    shm.unlink()


def test_an_exporter_over_shared_memory_pickles_the_blocks_name(block):
    x = pyxbuf.frombuffer(block, "f", (4, 8), offset=1024)
    stream = pickle.dumps(x, protocol=5, buffer_callback=lambda b: pytest.fail("no buffer"))
    assert block.name.encode() in stream and len(stream) < 256
    r = pickle.loads(stream)
    assert address(r) != address(x)  # another mapping ...
    np.asarray(r)[1, 2] = 42  # ... of the same memory
    assert np.asarray(x)[1, 2] == 42
    assert np.frombuffer(block.buf, np.float32)[256 + 10] == 42
    with pytest.raises(BufferError):  # the block stays mapped while exported
        block.close()
    del x, r


def test_shared_memory_gets_no_grant(block):
    # Another process can write it whatever this one's counters or registry
    # say: no grant at all, never one tracked in one process's registry.
    for x in (pyxbuf.frombuffer(block, "f"),
              pyxbuf.frombuffer(bytearray(16), "f", process_shared=True)):
        for flags in (SHARED_BORROW, pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE):
            got = pyxbuf.inspect(x, flags=flags)
            assert got["grants"] == {"shared": False, "exclusive": False, "tracked": False}
        assert pyxbuf.live_borrows() == 0
    del x


def _fill_slice(x, lo, hi, value):
    np.asarray(x)[lo:hi] = value


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_worker_processes_fill_one_shared_array_in_place(block, method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    x = pyxbuf.frombuffer(block, "f", (1024,))
    ctx = multiprocessing.get_context(method)
    procs = [ctx.Process(target=_fill_slice, args=(x, i * 256, (i + 1) * 256, i + 1))
             for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    np.testing.assert_array_equal(np.asarray(x), np.repeat(np.arange(1, 5), 256))
    del x


def test_a_process_without_the_pyxbuf_package_is_told_what_to_install(tmp_path):
    # The exporter's own process pickles through pyxbuf._pickle; one whose
    # pyxbuf package cannot be imported says so.
    code = textwrap.dedent("""
        import pickle, sys
        import _pyxbuf_testext as t
        sys.modules["pyxbuf"] = None  # the package is not importable here
        try:
            pickle.dumps(t.exporter("f", (2,)))
        except TypeError as e:
            print("refused:", e)
    """)
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert "refused: cannot pickle a 'pyxbuf.Exporter'" in out.stdout, out.stderr
    assert "pip install pyxbuf" in out.stdout
