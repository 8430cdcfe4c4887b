"""The pyxbuf Python module against NumPy, ml_dtypes, JAX (where installed)
and its own producers. Run after building the module (maturin develop)."""

import ast
import inspect
import os
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import pyxbuf


@pytest.fixture(autouse=True)
def no_borrow_left_behind():
    yield
    assert pyxbuf.live_borrows() == 0


DEFAULT_FLAGS = pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_DEVICE
# NumPy 2's arrays are read from their struct; NumPy 1's through its exports.
NUMPY_2 = int(np.__version__.split(".")[0]) >= 2


def test_inspect_numpy():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    info = pyxbuf.inspect(a)
    assert info["path"] == ("numpy" if NUMPY_2 else "classic")  # NumPy 1: its export
    assert info["device"] == "cpu" and info["device_identifier"] is None
    assert (info["device_type"], info["device_id"]) == (1, 0)  # DLPack's kDLCPU
    assert info["format"] == "f" and info["itemsize"] == 4
    assert info["shape"] == (2, 3) and info["strides"] == (12, 4)
    assert info["format_parsed"]["fields"][0]["code"] == "f"
    assert info["grants"] == {"shared": False, "exclusive": False, "tracked": False}
    assert info["requested_flags"] == DEFAULT_FLAGS
    # NumPy knows no extended flag: none is honoured, the request's PYXBUF_DEVICE included
    assert (info["honoured_extended_flags"], info["grant_flags"]) == (0, 0)
    shared = pyxbuf.inspect(a, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    assert shared["grants"] == {"shared": True, "exclusive": False, "tracked": True}
    assert shared["requested_flags"] == pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED
    assert shared["honoured_extended_flags"] == pyxbuf.PYXBUF_BORROW_SHARED
    assert shared["grant_flags"] == pyxbuf.PYXBUF_EXT_SHARED | pyxbuf.PYXBUF_EXT_TRACKED


def test_inspect_keys_say_what_they_hold():
    """Issue 27: `flags` held the honoured extended request bits and
    `ext_flags` the grant bits; the keys now say so."""
    info = pyxbuf.inspect(pyxbuf.exporter((2,)), DEFAULT_FLAGS | pyxbuf.PYXBUF_BORROW_SHARED)
    assert "flags" not in info and "ext_flags" not in info
    assert info["requested_flags"] == DEFAULT_FLAGS | pyxbuf.PYXBUF_BORROW_SHARED
    # pyxbuf's exporter speaks the extended protocol and honours the borrow it
    # grants; host memory sets no device, so PYXBUF_DEVICE is not honoured
    assert info["honoured_extended_flags"] == pyxbuf.PYXBUF_BORROW_SHARED
    assert info["grant_flags"] == pyxbuf.PYXBUF_EXT_SHARED
    assert info["grants"] == {"shared": True, "exclusive": False, "tracked": False}
    if pyxbuf.EMULATED_DEVICE:  # device memory: PYXBUF_DEVICE honoured too
        dev = pyxbuf.inspect(pyxbuf.exporter((2,), device="ext_dev:0"))
        assert dev["honoured_extended_flags"] == pyxbuf.PYXBUF_DEVICE
        assert (dev["requested_flags"], dev["grant_flags"]) == (DEFAULT_FLAGS, 0)


def test_defaults_are_the_documented_ones():
    a = np.arange(3, dtype=np.float32)
    assert pyxbuf.inspect(a) == pyxbuf.inspect(a, None) == pyxbuf.inspect(a, DEFAULT_FLAGS)
    assert pyxbuf.inspect(a, stream=None)["requested_flags"] == DEFAULT_FLAGS
    assert pyxbuf.to_device(a, "cpu") is a and pyxbuf.to_device(a, "cpu", None) is a
    e = pyxbuf.exporter((2,))
    assert (e.device, e.format, e.readonly) == ("cpu", "B", 0)
    assert pyxbuf.exporter((2,), device="cpu").device == "cpu"
    assert pyxbuf.exporter((2,), device=(1, 0)).device == "cpu"


def test_bad_arguments_name_the_cause():
    a = np.arange(3, dtype=np.float32)
    with pytest.raises(TypeError, match="flags"):
        pyxbuf.inspect(a, "RECORDS")
    with pytest.raises(TypeError, match="stream"):
        pyxbuf.to_device(a, "cpu", "default")
    with pytest.raises(ValueError, match="unknown device 'my_accel:0'; write it as 'cpu'"):
        pyxbuf.to_device(a, "my_accel:0")
    with pytest.raises(ValueError, match="bad device ordinal in 'cuda:x'"):
        pyxbuf.exporter((2,), device="cuda:x")
    with pytest.raises(TypeError, match="cannot create 'pyxbuf.Exporter' instances"):
        pyxbuf.Exporter()


def test_inspect_struct_format():
    a = np.zeros(2, dtype=[("x", "<i4"), ("y", "<f8", (2,))])
    parsed = pyxbuf.inspect(a)["format_parsed"]
    assert parsed["itemsize"] == 20
    names = [f["name"] for f in parsed["fields"] if f["name"]]
    assert names == ["x", "y"]
    y = next(f for f in parsed["fields"] if f["name"] == "y")
    assert y["shape"] == (2,) and y["offset"] == 4


def test_inspect_bfloat16():
    a = np.ones(3, dtype=ml_dtypes.bfloat16)
    info = pyxbuf.inspect(a)
    # read from the array struct (issue 39); NumPy 1's through __array_interface__
    assert info["path"] == ("numpy" if NUMPY_2 else "array-interface")
    assert info["format"] == "[ml_dtypes$bfloat16]"
    assert info["format_parsed"]["fields"][0]["custom"] == "ml_dtypes$bfloat16"


def test_refusals_are_buffer_errors():
    with pytest.raises(BufferError):
        pyxbuf.inspect(b"read-only", pyxbuf.PyBUF_RECORDS)
    with pytest.raises(TypeError):
        pyxbuf.inspect(42)


@pytest.mark.skipif(not pyxbuf.EMULATED_DEVICE, reason="built without the emulated device")
def test_emulated_device_names_a_device_to_device_takes():
    """issue 50 item 10: it was True/False, and to_device(a, EMULATED_DEVICE)
    said "unknown device 'True'"."""
    assert pyxbuf.EMULATED_DEVICE == "ext_dev:0"
    a = np.arange(4, dtype=np.float32)
    d = pyxbuf.to_device(a, pyxbuf.EMULATED_DEVICE)
    assert d.device == pyxbuf.EMULATED_DEVICE
    e = pyxbuf.exporter((2,), "f", device=pyxbuf.EMULATED_DEVICE)
    assert e.device == pyxbuf.EMULATED_DEVICE
    assert np.asarray(pyxbuf.to_device(d, "cpu")).tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.skipif(not pyxbuf.EMULATED_DEVICE, reason="built without the emulated device")
def test_to_device_and_back():
    a = np.arange(8, dtype=np.int32)
    d = pyxbuf.to_device(a, "ext_dev:0")
    assert isinstance(d, pyxbuf.Exporter) and d.device == "ext_dev:0"
    info = pyxbuf.inspect(d)
    assert info["device"] == "ext_dev:0" and info["device_type"] == 12
    assert info["path"] == "native"
    with pytest.raises(BufferError, match="ext_dev:0"):
        memoryview(d)  # the host cannot read it
    back = pyxbuf.to_device(d, "cpu")
    assert np.asarray(back).tolist() == list(range(8))
    assert pyxbuf.to_device(d, (12, 0)) is d  # already there: no copy


@pytest.mark.skipif(not pyxbuf.EMULATED_DEVICE, reason="built without the emulated device")
def test_exporter_test_producers():
    e = pyxbuf.exporter((2, 2), "<f", "ext_dev:0")
    assert e.device == "ext_dev:0" and e.format == "<f"
    host = pyxbuf.exporter((3,), "[ml_dtypes$bfloat16]")
    assert pyxbuf.inspect(host)["itemsize"] == 2
    x = pyxbuf.inspect(host, pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE)
    assert x["grants"] == {"shared": False, "exclusive": True, "tracked": False}
    assert host.borrows["views"] == 0


def test_from_dlpack_is_zero_copy():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    e = pyxbuf.from_dlpack(a, writable=True)
    assert isinstance(e, pyxbuf.Exporter)
    assert e.shape == (2, 3) and e.format == "d"
    a[1, 2] = 42.0
    assert np.asarray(e)[1, 2] == 42.0
    # The wrapper's exclusive borrow of `a` is tracked (NumPy knows nothing of
    # borrows), so its own grants are tracked too: never stronger than that.
    info = pyxbuf.inspect(e, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    assert info["grants"] == {"shared": True, "exclusive": False, "tracked": True}
    del e  # releases its view of a


def test_a_wrapper_of_tracked_memory_grants_tracked():
    """Issue 25, item 1: a wrapper must not launder its tracked borrow of the
    source into an enforced grant -- NumPy can still write `a` behind it."""
    a = np.arange(4.0)
    w = pyxbuf.from_dlpack(a)
    info = pyxbuf.inspect(w, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    assert info["grants"] == {"shared": True, "exclusive": False, "tracked": True}
    rw = pyxbuf.from_dlpack(np.arange(4.0), writable=True)
    info = pyxbuf.inspect(rw, pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE)
    assert info["grants"] == {"shared": False, "exclusive": True, "tracked": True}
    # A wrapper of an enforcing producer (another wrapper's exporter, which
    # counts its borrows) is exactly as strong as its source: tracked here.
    ww = pyxbuf.from_dlpack(w)
    info = pyxbuf.inspect(ww, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    assert info["grants"]["tracked"] is True
    # ... and of an enforcing exporter that owns its memory: enforced.
    own = pyxbuf.exporter((4,), "d")
    wo = pyxbuf.from_dlpack(own)
    info = pyxbuf.inspect(wo, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    assert info["grants"] == {"shared": True, "exclusive": False, "tracked": False}
    del ww, w, rw, wo


def test_from_dlpack_holds_a_borrow_of_its_source():
    """The wrapper's grants must not alias: while it lives, pyxbuf refuses a
    conflicting borrow of the source's memory (issue 11, item 1)."""
    a = np.arange(4, dtype=np.float64)
    before = pyxbuf.live_borrows()
    ro = pyxbuf.from_dlpack(a)
    assert pyxbuf.live_borrows() == before + 1
    # read-only although `a` is writable: writable=False means it
    assert pyxbuf.inspect(ro)["readonly"] is True
    with pytest.raises(BufferError):
        pyxbuf.inspect(ro, pyxbuf.PyBUF_RECORDS)
    # an exclusive borrow of the source conflicts with the wrapper's shared one
    with pytest.raises(BufferError, match="borrow"):
        pyxbuf.inspect(a, pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE)
    pyxbuf.inspect(a, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)  # readers share
    del ro
    assert pyxbuf.live_borrows() == before

    rw = pyxbuf.from_dlpack(a, writable=True)
    with pytest.raises(BufferError, match="borrow"):
        pyxbuf.inspect(a, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    # two writable wrappers of one array would be two exclusive grants
    with pytest.raises(BufferError, match="exclusive borrow"):
        pyxbuf.from_dlpack(a, writable=True)
    del rw
    assert pyxbuf.live_borrows() == before


def test_check_supports():
    e = pyxbuf.exporter((1,))
    assert pyxbuf.check_supports(e, pyxbuf.PYXBUF_DEVICE)
    # every bit is asked about: NumPy speaks DLPack, which can carry device
    # memory (its device is known once acquired), bytes cannot
    assert pyxbuf.check_supports(np.zeros(1), pyxbuf.PYXBUF_DEVICE)
    assert not pyxbuf.check_supports(b"x", pyxbuf.PYXBUF_DEVICE)
    assert pyxbuf.inspect(np.zeros(1), pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_DEVICE)["device"] == "cpu"
    assert pyxbuf.check_supports(np.zeros(1), pyxbuf.PyBUF_RECORDS)
    assert not pyxbuf.check_supports([0.0], pyxbuf.PyBUF_SIMPLE)


def test_jax_bfloat16_if_installed():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(4, dtype=jnp.bfloat16)
    info = pyxbuf.inspect(x)
    assert info["format"] == "[ml_dtypes$bfloat16]" and info["shape"] == (4,)
    e = pyxbuf.from_dlpack(x)
    assert e.format == "[ml_dtypes$bfloat16]" and e.shape == (4,)


# --- signatures (issue 27): help() and inspect.signature() read real ones,
# and the type stub says the same ------------------------------------------

STUB = Path(pyxbuf.pyxbuf.__file__).with_name("pyxbuf.pyi")
KIND = {
    "posonlyargs": inspect.Parameter.POSITIONAL_ONLY,
    "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kwonlyargs": inspect.Parameter.KEYWORD_ONLY,
}


def stub_parameters(fn):
    """[(name, kind, default)] of a stub's `def` (defaults as literals)."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = []
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = KIND["posonlyargs"] if i < len(a.posonlyargs) else KIND["args"]
        out.append((arg.arg, kind, default))
    if a.vararg:
        out.append((a.vararg.arg, inspect.Parameter.VAR_POSITIONAL, None))
    out += [(arg.arg, KIND["kwonlyargs"], d) for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, inspect.Parameter.VAR_KEYWORD, None))
    return [(name, kind, inspect.Parameter.empty if d is None else ast.literal_eval(d))
            for name, kind, d in out]


def stub_functions():
    """{name: parameters} of the stub's functions, and of Exporter's methods as
    'Exporter.name' (self left out); properties are attributes, not callables."""
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = stub_parameters(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not any(
                        isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list):
                    out[f"{node.name}.{item.name}"] = stub_parameters(item)[1:]
    return out


def runtime_callables():
    """{name: callable} of the compiled module's public functions and of the
    methods its classes define (classes themselves cannot be called)."""
    out = {}
    for name in dir(pyxbuf.pyxbuf):
        obj = getattr(pyxbuf.pyxbuf, name)
        if name.startswith("_") or not callable(obj):
            continue
        if isinstance(obj, type):
            for attr, value in vars(obj).items():
                if isinstance(value, types.MethodDescriptorType):
                    out[f"{name}.{attr}"] = value
        else:
            out[name] = obj
    return out


def runtime_parameters(name, obj):
    params = list(inspect.signature(obj).parameters.values())
    if "." in name:  # a method: drop self
        assert params[0].name == "self", name
        params = params[1:]
    return [(p.name, p.kind, p.default) for p in params]


def test_the_module_has_callables_to_check():
    names = set(runtime_callables())
    assert {"inspect", "to_device", "exporter", "Exporter.to_device",
            "Exporter.__dlpack__"} <= names


@pytest.mark.parametrize("name", sorted(runtime_callables()))
def test_signature_is_real_and_matches_the_stub(name):
    obj = runtime_callables()[name]
    assert obj.__text_signature__, f"{name} has no __text_signature__"
    got = runtime_parameters(name, obj)  # inspect.signature works
    assert all(d is not Ellipsis for _, _, d in got), f"{name}{inspect.signature(obj)}"
    stub = stub_functions()
    assert name in stub, f"{name} is missing from {STUB.name}"
    assert all(d is not Ellipsis for _, _, d in stub[name]), f"{STUB.name}: {name} uses ..."
    assert got == stub[name]
    # help() shows the same signature (pydoc of 3.13+ wraps a long one over
    # lines: compared without whitespace)
    def squeeze(text):
        return "".join(text.split()).replace(",)", ")")

    assert squeeze(str(inspect.signature(obj))) in squeeze(pydoc_text(obj))
    # and the docstring speaks of every parameter, with no second signature of its own
    doc = inspect.getdoc(obj)
    assert doc and not doc.startswith(name.rsplit(".", 1)[-1] + "("), doc
    for param, _, _ in got:
        assert f"`{param}`" in doc, f"{name}'s docstring does not describe `{param}`"


def test_the_stub_has_nothing_the_module_lacks():
    assert set(stub_functions()) == set(runtime_callables())


@pytest.mark.parametrize(
    "name", ["get_include", "get_library_dir", "get_cmake_dir", "get_cython_include"]
)
def test_package_functions_have_signatures(name):
    assert str(inspect.signature(getattr(pyxbuf, name))) == "() -> str"


def pydoc_text(obj):
    import pydoc
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython (3.13t+); "
                    "`make test-matrix` runs one")
@pytest.mark.parametrize("module", ["pyxbuf", "pyxbuf_sum"])
def test_modules_run_without_the_gil_on_free_threaded_builds(module):
    """libpyxbuf is safe without the GIL, so its modules declare
    Py_MOD_GIL_NOT_USED: importing one leaves the GIL off (PYTHON_GIL unset,
    so nothing forces it)."""
    code = f"import sys, {module}; print(sys._is_gil_enabled())"
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                         text=True, env=env, check=True)
    assert out.stdout.strip() == "False", out.stderr
