"""What docs/recipes.md's crate does, checked after readme_blocks.py has built
it as written (make test-readme runs it in the scratch venv, in the scratch
folder, after the recipes' own doctests). A recipe that builds but silently
does something else (a "new array" that is a copy, a device function that
brings its result home, a request option that grants what it should refuse)
fails here, whatever its doctest says.

recipes_rs: the recipe crate, `maturin develop --features emulated-device`:
1. arange_f32 (a new pyxbuf.Exporter filled in place), grid_bf16 (a
   #[pyclass] over a HostArray<bf16> moved in);
2. scaled (request().device(); result on the input's device), the emulated
   device registered at import, EMULATED_DEVICE;
4. host_total, on_any_device, fill, first_and_last, total_detached, peek:
   one request() option each.
Recipe 3 is the pyxbuf module's own; its device strings are checked here too.
"""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import pyxbuf
import recipes_rs

DEVICE = "ext_dev:0"


def is_exporter(obj):
    """A pyxbuf.Exporter of any copy of libpyxbuf. Each copy (the pyxbuf
    module's, the recipe crate's) has its own type object of that name, so
    isinstance(obj, pyxbuf.Exporter) holds only for the module's own."""
    return type(obj).__module__ == "pyxbuf" and type(obj).__qualname__ == "Exporter"


@pytest.fixture(autouse=True)
def no_borrow_left_behind():
    yield
    assert pyxbuf.live_borrows() == 0


def test_built_into_the_venv_with_the_emulated_device():
    assert "site-packages" in recipes_rs.__file__, recipes_rs.__file__
    assert recipes_rs.EMULATED_DEVICE == DEVICE
    assert pyxbuf.EMULATED_DEVICE is None  # the release wheel: the crate brought it


# 1. Returning a new array from Rust


def test_arange_f32_is_a_new_enforcing_exporter():
    r = recipes_rs.arange_f32(6)
    assert is_exporter(r)
    assert (r.shape, r.format, r.device, r.readonly) == ((6,), "f", "cpu", 0)
    assert np.asarray(r).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    v = pyxbuf.inspect(r, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    assert v["path"] == "native"
    assert v["grants"] == {"shared": True, "exclusive": False, "tracked": False}
    assert r.borrows["exclusive"] == 0  # the filling borrow was given back
    assert recipes_rs.arange_f32(0).shape == (0,)
    assert recipes_rs.arange_f32(3) is not recipes_rs.arange_f32(3)


def test_arange_f32_is_read_in_place_not_copied():
    r = recipes_rs.arange_f32(4)
    a, b = np.asarray(r), np.asarray(r)
    assert np.shares_memory(a, b)
    a[3] = -1.0
    assert b[3] == -1.0 and recipes_rs.host_total(r) == 0 + 1 + 2 - 1
    del a, b


def test_grid_bf16_exports_the_moved_vec():
    g = recipes_rs.grid_bf16(2, 3)
    assert type(g).__name__ == "Grid"
    v = pyxbuf.inspect(g, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    assert (v["format"], v["shape"], v["strides"], v["itemsize"]) == (
        "[ml_dtypes$bfloat16]", (2, 3), (6, 2), 2)
    assert v["path"] == "native" and v["grants"]["shared"] and not v["grants"]["tracked"]
    m = np.asarray(g)
    assert m.dtype == ml_dtypes.bfloat16 and m.shape == (2, 3)
    assert m.astype(np.float32).tolist() == [[0.0, 0.5, 1.0], [1.5, 2.0, 2.5]]
    # Zero-copy: a second reader sees the first one's memory.
    n = np.array(g, dtype=ml_dtypes.bfloat16, copy=False)
    assert np.shares_memory(m, n)
    del m, n
    with pytest.raises(BufferError, match="np.asarray"):  # classic readers: no bfloat16 format
        memoryview(g)
    assert recipes_rs.grid_bf16(0, 4).__class__.__name__ == "Grid"


def test_grid_bf16_enforces_its_borrows():
    g = recipes_rs.grid_bf16(1, 4)
    w = pyxbuf.from_dlpack(g, writable=True)  # an exclusive borrow of the grid
    with pytest.raises(BufferError, match="exclusive"):
        pyxbuf.inspect(g, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    del w
    assert pyxbuf.inspect(g, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)["shape"] == (1, 4)


# 2. Trying device code without a GPU


def test_scaled_stays_on_the_inputs_device():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for dev in ("ext_dev:0", "ext_dev:2"):
        d = pyxbuf.to_device(a, dev)
        r = recipes_rs.scaled(d, -2.0)
        assert r.device == dev and r.shape == (2, 3)
        with pytest.raises(BufferError, match="host cannot read"):
            memoryview(r)
        assert np.asarray(pyxbuf.to_device(r, "cpu")).tolist() == (a * -2).tolist()


def test_scaled_on_the_host():
    a = np.arange(8, dtype=np.float32)
    r = recipes_rs.scaled(a[::-2], 0.5)  # strided, backwards
    assert r.device == "cpu" and is_exporter(r)
    assert np.asarray(r).tolist() == [3.5, 2.5, 1.5, 0.5]
    assert a.tolist() == list(range(8))  # the input is untouched
    with pytest.raises(pyxbuf.ItemTypeError):
        recipes_rs.scaled(np.zeros(2), 1.0)


def test_ext_dev_needs_a_registration():
    """Recipe 3's claim: before anything registers the emulated device,
    'ext_dev:0' is the ValueError of a device with no backend."""
    code = ("import numpy as np, pyxbuf\n"
            "try:\n"
            "    pyxbuf.to_device(np.ones(2, np.float32), 'ext_dev:0')\n"
            "except ValueError as e:\n"
            "    print('ValueError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ValueError no pyxbuf backend for device type 12 (ext_dev)"), out


# 3. The device strings to_device takes


@pytest.mark.parametrize("spelling", ["cpu", "cpu:0", (1, 0)])
def test_host_spellings_return_the_array_itself(spelling):
    a = np.ones(3, np.float32)
    assert pyxbuf.to_device(a, spelling) is a


@pytest.mark.parametrize("spelling", ["ext_dev:1", "ext_dev:3", (12, 1)])
def test_emulated_spellings(spelling):
    d = pyxbuf.to_device(np.ones(3, np.float32), spelling)
    want = spelling if isinstance(spelling, str) else "ext_dev:1"
    assert d.device == want == pyxbuf.inspect(d)["device"]
    assert d.__dlpack_device__() == (12, int(want.split(":")[1]))
    assert pyxbuf.exporter([2], "f", device=spelling).device == want


@pytest.mark.parametrize("spelling, error, message", [
    ("tpu:0", ValueError, "unknown device 'tpu:0'"),
    ("CPU", ValueError, "unknown device 'CPU'"),
    ("cuda:one", ValueError, "bad device ordinal in 'cuda:one'"),
    ("rocm:0", ValueError, r"no pyxbuf backend for device type 10 \(rocm\)"),
    ("ext_dev:4", BufferError, "no emulated device 4"),
])
def test_device_refusals(spelling, error, message):
    with pytest.raises(error, match=message):
        pyxbuf.to_device(np.ones(2, np.float32), spelling)
    with pytest.raises(error, match=message):
        pyxbuf.exporter([2], "f", device=spelling)


# 4. request()


def test_default_request_is_host_only_and_shared():
    a = np.arange(4, dtype=np.float32)
    assert recipes_rs.host_total(a[::-1]) == 6.0
    with pytest.raises(BufferError, match="host cannot read"):
        recipes_rs.host_total(pyxbuf.to_device(a, DEVICE))
    held = pyxbuf.from_dlpack(a)  # a shared borrow: shared readers still pass
    assert recipes_rs.host_total(a) == 6.0
    del held


def test_device_option_accepts_both():
    a = np.zeros(2, np.float32)
    assert recipes_rs.on_any_device(a) == "cpu"
    assert recipes_rs.on_any_device(pyxbuf.to_device(a, "ext_dev:3")) == "ext_dev:3"


def test_borrow_exclusive_writes_and_refuses():
    a = np.zeros(6, np.float32)
    recipes_rs.fill(a[1::2], 5.0)
    assert a.tolist() == [0, 5, 0, 5, 0, 5]
    held = pyxbuf.from_dlpack(a[:2])  # overlaps: any borrow stops an exclusive one
    with pytest.raises(BufferError, match="exclusive borrow"):
        recipes_rs.fill(a, 1.0)
    recipes_rs.fill(a[2:], 1.0)  # disjoint memory: granted
    del held
    assert a.tolist() == [0, 5, 1, 1, 1, 1]
    r = np.ones(2, np.float32)
    r.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        recipes_rs.fill(r, 0.0)
    with pytest.raises(BufferError):
        recipes_rs.fill(pyxbuf.exporter([2], "f", readonly=True), 0.0)
    assert r.tolist() == [1.0, 1.0]


def test_contiguous_gives_a_slice_or_refuses():
    a = np.arange(5, dtype=np.float32)
    assert recipes_rs.first_and_last(a) == (0.0, 4.0)
    assert recipes_rs.first_and_last(a[2:3]) == (2.0, 2.0)
    assert recipes_rs.first_and_last(recipes_rs.arange_f32(3)) == (0.0, 2.0)
    with pytest.raises(ValueError, match="empty"):
        recipes_rs.first_and_last(a[:0])
    with pytest.raises(BufferError, match="not C-contiguous"):
        recipes_rs.first_and_last(a[::2])
    with pytest.raises(BufferError, match="not C-contiguous"):
        recipes_rs.first_and_last(np.arange(4, dtype=np.float32).reshape(2, 2).T)


def test_require_enforced_takes_pyxbuf_arrays_only():
    assert recipes_rs.total_detached(recipes_rs.arange_f32(5)) == 10.0
    e = pyxbuf.exporter([3], "f")
    assert recipes_rs.total_detached(e) == 0.0
    for tracked in (np.ones(3, np.float32), bytearray(12), pyxbuf.from_dlpack(np.ones(3, np.float32))):
        with pytest.raises(BufferError, match="enforced borrow .* tracked shared borrow"):
            recipes_rs.total_detached(tracked)
    r = recipes_rs.arange_f32(3)
    view = np.asarray(r)  # a NumPy view of r alive: r grants only tracked borrows
    with pytest.raises(BufferError, match="tracked"):
        recipes_rs.total_detached(r)
    del view
    assert recipes_rs.total_detached(r) == 3.0


def test_without_borrow_copies_whatever_holds_the_array():
    a = np.arange(3, dtype=np.float32)
    assert recipes_rs.peek(a[::-1]) == [2.0, 1.0, 0.0]
    held = pyxbuf.from_dlpack(a, writable=True)
    with pytest.raises(BufferError, match="exclusive"):
        recipes_rs.host_total(a)
    assert recipes_rs.peek(a) == [0.0, 1.0, 2.0]  # no grant asked, none refused
    del held
    assert recipes_rs.peek(recipes_rs.arange_f32(2)) == [0.0, 1.0]


@pytest.mark.parametrize("f", ["host_total", "on_any_device", "first_and_last", "total_detached", "peek"])
def test_item_type_error_whatever_the_request(f):
    with pytest.raises(pyxbuf.ItemTypeError, match=r"PyXBuffer<f32>"):
        getattr(recipes_rs, f)(pyxbuf.exporter([2], "d"))
    with pytest.raises(pyxbuf.ItemTypeError):
        recipes_rs.fill(np.zeros(2), 1.0)
