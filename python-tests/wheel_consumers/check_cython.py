"""What a Cython extension author gets from pyxbuf's release wheel (make
test-wheel, in the fresh venv of check_consumers.py): `from pyxbuf cimport`
declarations of pyxbuf.h, the XView guard of pyxbuf_xview.pxi, and the
consumer in cython/ built on them (Cython from PyPI) reading NumPy float32,
ml_dtypes bfloat16, PyTorch CPU tensors (skipped where PyTorch is not
installed: make test-wheel does not install it) and arrays on a device the
consumer emulates, with grants. Refcounts before and after each failure
show that nothing leaks; pyxbuf.live_borrows() (shared by every copy of
libpyxbuf in the process) shows that every grant is given back. Last,
c_api.pxd is compiled against pyxbuf.h with every function, field and
constant used, so that a declaration drifting from the header fails here."""

import os
import pathlib
import re
import subprocess
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest

import pyxbuf
import pyxbuf_consumer_cython as cy

WHEEL = pathlib.Path(os.environ["PYXBUF_WHEEL"])
SHARED_TRACKED = pyxbuf.PYXBUF_EXT_SHARED | pyxbuf.PYXBUF_EXT_TRACKED


def test_wheel_ships_the_cython_declarations():
    package = pathlib.Path(pyxbuf.__file__).parent
    assert pathlib.Path(pyxbuf.get_cython_include()) == package
    assert 'cdef extern from "pyxbuf.h"' in (package / "c_api.pxd").read_text()
    assert "from pyxbuf.c_api cimport *" in (package / "__init__.pxd").read_text()
    assert "cdef class XView" in (package / "pyxbuf_xview.pxi").read_text()
    with zipfile.ZipFile(WHEEL) as whl:
        names = set(whl.namelist())
    assert {"pyxbuf/__init__.pxd", "pyxbuf/c_api.pxd", "pyxbuf/pyxbuf_xview.pxi"} <= names


def test_abi_checked_at_import():
    assert cy.abi_versions() == (pyxbuf.abi_version(), pyxbuf.abi_version())


STRIDED = {
    "c-order": lambda a: a,
    "transposed": lambda a: a.T,
    "every-other-row-reversed": lambda a: a[::2, ::-1],
    "column": lambda a: a[:, 1],
    "row-step-3": lambda a: a[1, ::3],
}


@pytest.mark.parametrize("layout", STRIDED)
def test_shapes_and_strides_of_float32(layout):
    a = STRIDED[layout](np.arange(42, dtype=np.float32).reshape(6, 7))
    got = cy.describe(a)
    assert (got["shape"], got["strides"]) == (a.shape, a.strides)
    assert (got["format"], got["itemsize"], got["path"], got["device"]) == ("f", 4, "numpy", None)
    # NumPy knows no grants: pyxbuf's registry gives a tracked shared one.
    assert got["ext_flags"] == SHARED_TRACKED and got["readonly"]
    assert cy.total(a) == float(a.sum(dtype=np.float64))
    if a.ndim == 1:
        assert cy.c_total(a) == float(a.sum(dtype=np.float64))


def test_xview_exports_its_view_to_python_too():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    v = cy.XView(a)
    m = memoryview(v)
    assert (m.shape, m.strides, m.format, m.readonly) == ((3, 2), (16, 8), "f", True)
    assert m.tolist() == a.tolist()
    with pytest.raises(BufferError, match="already holds .* make a new XView"):
        v.__init__(a)  # one XView, one acquisition
    m.release()
    v.release()
    v.release()  # a second call does nothing
    with pytest.raises(BufferError, match="was released .* acquire the array again"):
        memoryview(v)
    assert not v.held and pyxbuf.live_borrows() == 0
    with pytest.raises(BufferError, match=r"holds no view \(it was made by XView.__new__\)"):
        memoryview(cy.XView.__new__(cy.XView))


def test_bfloat16_from_ml_dtypes():
    a = np.array([1.5, -2.0, 4.25, 0.125], dtype=ml_dtypes.bfloat16)
    got = cy.describe(a)
    assert (got["format"], got["itemsize"], got["path"]) == ("[ml_dtypes$bfloat16]", 2, "numpy")
    assert cy.total_bf16(a) == 3.875
    assert cy.total_bf16(a[::-2]) == float(a[::-2].astype(np.float32).sum())
    with pytest.raises(TypeError, match=r"reads bfloat16 .* not format 'f'"):
        cy.total_bf16(np.zeros(2, np.float32))
    # A float32 memoryview of bfloat16 items: Cython's own format check.
    with pytest.raises(ValueError, match=r"Does not understand character buffer dtype format string \('\['\)"):
        cy.total(a)


def test_float8_from_ml_dtypes():
    a = np.array([0.5, -448.0, 3.0, 0.001953125], dtype=ml_dtypes.float8_e4m3fn)
    assert cy.total_f8e4m3(a) == float(a.astype(np.float64).sum())
    assert cy.total_f8e4m3(a[::-2]) == float(a[::-2].astype(np.float64).sum())
    with pytest.raises(TypeError, match=r"reads float8_e4m3fn .* not format '\[ml_dtypes\$float8_e5m2\]'"):
        cy.total_f8e4m3(np.zeros(2, ml_dtypes.float8_e5m2))


def test_item_type_refusals_are_pyxbufs_one_class():
    """Issue 50, item 1: an item type that is not the one asked is
    pyxbuf.ItemTypeError, a TypeError and a BufferError, in XView.as_bits()
    and in this consumer's own refusals; the consumer's copy of libpyxbuf
    finds the class the pyxbuf module's copy made (one for the process)."""
    cls = cy.item_type_error()
    assert cls is pyxbuf.ItemTypeError
    assert issubclass(cls, TypeError) and issubclass(cls, BufferError)
    for caught in (TypeError, BufferError, pyxbuf.ItemTypeError):
        with pytest.raises(caught, match=r"as_bits\(\): items of format 'Zd' are 16 bytes"):
            cy.bits_of(np.zeros(2, np.complex128))
        with pytest.raises(caught, match=r"reads bfloat16 .* not format 'f'"):
            cy.total_bf16(np.zeros(2, np.float32))
        with pytest.raises(caught, match=r"c_total: reads 1-D float32, not 1-D format 'd'"):
            cy.c_total(np.zeros(2))
    assert cy.bits_of(np.array([1.0], np.float32)) == [0x3F800000]
    # A typed memoryview checks its item type itself: Cython's ValueError
    # (DESIGN, Errors: the one exception to the rule).
    with pytest.raises(ValueError, match="Buffer dtype mismatch"):
        cy.total(np.zeros(2))
    assert pyxbuf.live_borrows() == 0


def test_read_only_refusal():
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    before = sys.getrefcount(a)
    with pytest.raises(BufferError, match="refused the request WRITABLE.*read-only"):
        cy.fill(a, 1.0)
    with pytest.raises(BufferError, match="refused the request WRITABLE.*read-only"):
        cy.scale_into(np.ones(4, np.float32), a, 2.0)
    assert a.tolist() == [0, 1, 2, 3]
    # A writable typed memoryview of an XView acquired read-only.
    w = np.zeros(4, np.float32)
    with pytest.raises(BufferError, match=r"writable typed memoryview .* acquired read-only"):
        cy.writable_memoryview_of_read_only_xview(w)
    assert sys.getrefcount(a) == before and pyxbuf.live_borrows() == 0


def test_exclusive_argument_refused_when_passed_as_shared_too():
    x = np.arange(6, dtype=np.float32)
    before = sys.getrefcount(x)
    with pytest.raises(BufferError, match="cannot grant an exclusive borrow of 'numpy.ndarray'.*"
                                          "overlaps a shared borrow"):
        cy.scale_into(x, x, 2.0)
    assert x.tolist() == [0, 1, 2, 3, 4, 5]
    # Overlapping parts of one array conflict too; interleaved ones do not.
    with pytest.raises(BufferError, match="cannot grant an exclusive borrow"):
        cy.scale_into(x[1:4], x[0:3], 2.0)
    assert x.tolist() == [0, 1, 2, 3, 4, 5]
    cy.scale_into(x[::2], x[1::2], 10.0)
    assert x.tolist() == [0, 0, 2, 20, 4, 40]
    y = np.empty(6, np.float32)
    cy.scale_into(x, y, 0.5)
    assert y.tolist() == [0, 0, 1, 10, 2, 20]
    assert sys.getrefcount(x) == before and pyxbuf.live_borrows() == 0


def test_release_on_exception_paths_leaks_nothing():
    x = np.zeros(4, np.float32)
    d = np.zeros(3)
    s = np.arange(8, dtype=np.float32)[::2]
    before = (sys.getrefcount(x), sys.getrefcount(d), sys.getrefcount(s))
    for _ in range(50):
        with pytest.raises(RuntimeError, match="raised on purpose"):
            cy.fail_inside(x)  # exclusive grant, a live memoryview, then raise
        with pytest.raises(BufferError, match="cannot grant an exclusive borrow"):
            cy.scale_into(x, x, 1.0)  # the second acquisition fails
        with pytest.raises(ValueError, match="Buffer dtype mismatch, expected 'const float' but got 'double'"):
            cy.total(d)  # acquired, then the memoryview refuses the format
        with pytest.raises(BufferError, match="C-contiguous typed memoryview was asked"):
            cy.contiguous_sum(s)
    assert (sys.getrefcount(x), sys.getrefcount(d), sys.getrefcount(s)) == before
    assert pyxbuf.live_borrows() == 0
    assert x[0] == 42  # fail_inside wrote before it raised
    cy.fill(x, 7.0)  # the exclusive grant was given back
    assert x.tolist() == [7, 7, 7, 7]
    assert cy.contiguous_sum(np.arange(4, dtype=np.float32)) == 6.0


def test_release_waits_for_the_last_memoryview():
    x = np.arange(3, dtype=np.float32)
    v, m = cy.escape(x)  # the with block ended; the memoryview lives on
    assert v.released and v.held and pyxbuf.live_borrows() == 1
    with pytest.raises(BufferError, match="cannot grant an exclusive borrow"):
        cy.fill(x, 1.0)
    assert list(m) == [0, 1, 2]
    with pytest.raises(BufferError, match="was released"):
        memoryview(v)
    del m
    assert not v.held and pyxbuf.live_borrows() == 0
    cy.fill(x, 1.0)
    assert x.tolist() == [1, 1, 1]


def test_an_xview_never_released_is_released_when_collected():
    x = np.arange(4, dtype=np.float32)
    before = sys.getrefcount(x)
    assert cy.count_direct(x) == 4 and pyxbuf.live_borrows() == 0
    v = cy.XView(x, pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE)
    assert v.held and pyxbuf.live_borrows() == 1
    del v  # no release(), no with block: collection gives the grant back
    assert pyxbuf.live_borrows() == 0 and sys.getrefcount(x) == before
    cy.fill(x, 2.0)
    # Collected while an exception unwinds (the XView is a local of the
    # raising function): released, and the exception arrives unchanged.
    for _ in range(50):
        try:
            cy.raise_while_held(x)
        except LookupError as e:  # not pytest.raises: its record would keep x
            assert "raised on purpose with the XView held (True)" in str(e)
            assert e.__context__ is None and pyxbuf.live_borrows() == 0
        else:
            pytest.fail("raise_while_held returned")
    assert x.tolist() == [5, 2, 2, 2]
    assert sys.getrefcount(x) == before
    cy.fill(x, 3.0)  # the exclusive grant was given back each time
    assert x.tolist() == [3, 3, 3, 3]


def test_emulated_device_array_refused_or_copied():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = cy.to_emulated_device(a)
    got = cy.describe(d)
    assert (got["device"], got["path"], got["shape"], got["strides"]) == ("ext_dev:0", "native", (3, 4), (16, 4))
    before = sys.getrefcount(d)
    # The refusal names the fix in Cython's terms (the extension's copy of
    # libpyxbuf speaks Cython: pyxbuf_xview.pxi sets it at import), and the
    # Python caller's beside it.
    with pytest.raises(BufferError, match=r"holds memory on device 'ext_dev:0'.*"
                       r"XView\(obj, PyBUF_RECORDS_RO \| PYXBUF_DEVICE\).*"
                       r'pyxbuf\.to_device\(x, "cpu"\)'):
        cy.total(d)
    with pytest.raises(BufferError, match="needs host memory, but the array lives on device 'ext_dev:0'"):
        memoryview(cy.XView(d, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_DEVICE))
    assert cy.total(d, copy=True) == 66.0
    assert sys.getrefcount(d) == before and pyxbuf.live_borrows() == 0


def test_pytorch_cpu_tensor_through_the_c_exchange_table():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for x in (t, t.t(), t[:, 1]):
        got = cy.describe(x)
        assert got["path"] == "dlpack-c"
        assert got["shape"] == tuple(x.shape)
        assert got["strides"] == tuple(4 * s for s in x.stride())
        assert cy.total(x) == float(x.sum())
    before = sys.getrefcount(t)
    with pytest.raises(BufferError, match="cannot grant an exclusive borrow"):
        cy.scale_into(t[0], t[0], 2.0)
    assert sys.getrefcount(t) == before and pyxbuf.live_borrows() == 0


# ---------------------------------------------------------------------------
# c_api.pxd against pyxbuf.h: Cython trusts its declarations, so a field or a
# parameter type that drifts from the header would compile into wrong code.
# The C compiler checks them when every function is assigned to a pointer of
# its declared type, every field's address to a pointer of its declared type
# and every constant is used (-Werror: a mismatch is an error).
# ---------------------------------------------------------------------------


def c_api_declarations(pxd_text):
    """(functions, fields by struct, constants) of c_api.pxd, as written
    there: one declaration a line, continuations indented further."""
    logical, depth = [], 0
    for line in pxd_text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if depth > 0:
            logical[-1] = (logical[-1][0], logical[-1][1] + " " + line.strip())
        else:
            logical.append((len(line) - len(line.lstrip()), line.strip()))
        depth += line.count("(") - line.count(")")
    functions, structs, constants = [], {}, []
    block = None
    for indent, text in logical:
        if indent <= 4:
            block = None
        if indent == 4 and (m := re.match(r"ctypedef struct (\w+):$", text)):
            block = structs.setdefault(m.group(1), [])
        elif indent == 4 and text == "enum:":
            block = constants
        elif indent == 8 and block is constants:
            constants.append(text)
        elif indent == 8 and block is not None:
            block.append(text)
        elif indent == 4 and (m := re.match(r"const char \*(PYXBUF_\w+)$", text)):
            constants.append(m.group(1))
        elif indent == 4 and re.search(r"\bpyxbuf_\w+\(", text):
            functions.append(text)
    return functions, structs, constants


def declaration_check_source(pxd_text):
    functions, structs, constants = c_api_declarations(pxd_text)
    out = ["# cython: language_level=3", "from pyxbuf.c_api cimport *",
           "from cpython.object cimport PyObject, PyTypeObject", "", "def check():"]
    for k, decl in enumerate(functions):
        ret, name, rest = re.match(r"(.*?[\s*])(pyxbuf_\w+)\((.*)$", decl).groups()
        out += [f"    cdef {ret.strip()} (*f{k})({rest}", f"    f{k} = {name}"]
    for sname, fields in structs.items():
        out.append(f"    cdef {sname} s_{sname}")
        for k, field in enumerate(fields):
            var = f"p_{sname}_{k}"
            if fp := re.match(r"(.*?)\(\*(\w+)\)(.*)$", field):
                out += [f"    cdef {fp.group(1)}(*{var}){fp.group(3)}", f"    {var} = s_{sname}.{fp.group(2)}"]
                continue
            ctype, stars, name, dims = re.match(r"(.*?)\s*(\**)(\w+)(\[\d+\])?$", field).groups()
            element = "[0]" if dims else ""
            out.append(f"    cdef {ctype} {stars}*{var} = &s_{sname}.{name}{element}")
    out += [f"    print({c})" for c in constants]
    return "\n".join(out) + "\n", len(functions), sum(len(f) for f in structs.values()), len(constants)


def test_c_api_pxd_matches_pyxbuf_h(tmp_path):
    package = pathlib.Path(pyxbuf.__file__).parent
    pxd = (package / "c_api.pxd").read_text()
    header = (pathlib.Path(pyxbuf.get_include()) / "pyxbuf.h").read_text()
    in_header = set(re.findall(r"^PYXBUF_API [^;(]*?\b(pyxbuf_\w+)\(", header, re.M))
    source, nfunctions, nfields, nconstants = declaration_check_source(pxd)
    in_pxd = set(re.findall(r"= (pyxbuf_\w+)$", source, re.M))
    assert in_header and in_pxd == in_header, (in_header - in_pxd, in_pxd - in_header)
    # Every constant of the header but its include guard and export macro.
    macros = set(re.findall(r"^#define (PYXBUF_[A-Z0-9_]+)", header, re.M)) - {"PYXBUF_H", "PYXBUF_API"}
    declared = set(re.findall(r"print\((PYXBUF_\w+)\)", source))
    assert declared == macros, (macros - declared, declared - macros)
    assert nfunctions == len(in_header) and nconstants == len(macros) and nfields > 100
    (tmp_path / "declcheck.pyx").write_text(source)
    setup = (
        "import pyxbuf\nfrom Cython.Build import cythonize\nfrom setuptools import Extension, setup\n"
        "setup(name='declcheck', ext_modules=cythonize([Extension('declcheck', ['declcheck.pyx'], "
        "include_dirs=[pyxbuf.get_include()], extra_compile_args=['-Werror=incompatible-pointer-types', "
        "'-Werror=int-conversion', '-Werror=implicit-function-declaration'])], quiet=True))\n"
    )
    (tmp_path / "setup.py").write_text(setup)
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path,
                          capture_output=True, text=True)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "error" in line.lower()]
    assert done.returncode == 0, "c_api.pxd disagrees with pyxbuf.h:\n" + "\n".join(errors[:20])


@pytest.mark.parametrize("wrap", [np.asarray, memoryview, np.from_dlpack],
                         ids=["np.asarray", "memoryview", "np.from_dlpack"])
def test_own_array_passed_back_while_python_holds_a_view(wrap):
    """Issue 38, part 2: a pyxbuf array looked at from Python, passed to an
    XView under a shared grant: tracked while the Python view lives,
    enforced after."""
    e = pyxbuf.exporter([4], "f")
    seen = wrap(e)
    tracked = pyxbuf.PYXBUF_EXT_TRACKED | pyxbuf.PYXBUF_EXT_SHARED
    assert cy.describe(e)["ext_flags"] == tracked
    assert cy.total(e) == 0.0
    with pytest.raises(BufferError, match="held by another view in this process"):
        cy.scale_into(seen, e, 2.0)  # one memory, borrowed twice through two objects
    del seen
    assert cy.describe(e)["ext_flags"] == pyxbuf.PYXBUF_EXT_SHARED
    assert pyxbuf.live_borrows() == 0
