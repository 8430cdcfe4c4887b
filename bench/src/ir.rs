//! The operations `make bench-ir` counts instructions of (`benches/ir.rs`),
//! each beside its peer on the same object.
//!
//! Every operation runs [`ITERS`] times per measurement and the report
//! divides by that: single calls would be as deterministic, but amortised
//! costs (a dict resize, a garbage collection triggered by allocation counts)
//! belong in the average. Each benchmark's setup runs the operation once
//! first, so lazily built caches are warm, as they are in a long-running
//! process.
//!
//! `cargo test -p pyxbuf-bench` runs each operation once, natively (the
//! smoke test of `make test`), so none can rot between `make bench-ir` runs.

use std::ffi::{CStr, CString};
use std::hint::black_box;

use pyo3::ffi;
use pyo3::prelude::*;
use pyxbuf::PyXBuffer;
use pyxbuf_sys as sys;

use crate::{fixtures, module, setup_python, DEVICE_VIEW, RECORDS_RO};

/// How many times each benchmark runs its operation (the report divides by it).
pub const ITERS: usize = 100;

/// The struct format of target 7, what NumPy exports for
/// `dtype([("x", "<i4"), ("y", "<f8"), ("z", "<f4", (2,))])`-like records.
pub const STRUCT_FORMAT: &str = "T{<i:x:<d:y:(2)f:z:}";

/// A Python object kept alive for the rest of the process (the benchmark
/// process ends right after its one measurement).
#[derive(Clone, Copy)]
pub struct Obj(pub *mut ffi::PyObject);

/// The interpreter, started and attached to this thread for good: each
/// benchmark process makes one measurement and exits, so the thread state is
/// never detached (attaching inside the measured function would count
/// `PyGILState_Ensure` on both sides of every ratio).
pub fn attach() -> Python<'static> {
    Python::initialize();
    // SAFETY: the interpreter is initialised; the thread state stays attached
    // until the process exits, which makes the `Python` token valid for the
    // rest of the process.
    unsafe {
        let _ = ffi::PyGILState_Ensure();
        Python::assume_attached()
    }
}

const FIXTURES: &str = r#"
import builtins
import numpy as np
from pyxbuf_bench_fixtures import DLPackOnly

def numpy_f32_2d():
    return np.zeros((64, 64), "float32")

def memoryview():
    return builtins.memoryview(np.zeros((64, 64), "float32"))

def dlpack_only():
    return DLPackOnly(np.ones((64, 64), "float32"))

def testext_dlpack_c():
    import _pyxbuf_testext
    return _pyxbuf_testext.DLPackCProducer(np.ones((64, 64), "float32"))

def ml_dtypes_bf16():
    import ml_dtypes
    return np.ones((64, 64), ml_dtypes.bfloat16)

def from_dlpack():
    return np.from_dlpack

def pep3118_parser():
    from numpy._core._internal import _dtype_from_pep3118
    return _dtype_from_pep3118

def pep3118_arg():
    return "T{<i:x:<d:y:(2)f:z:}"
"#;

fn build(py: Python<'_>, name: &str) -> PyResult<Obj> {
    if name == "bytes" {
        let b = pyo3::types::PyBytes::new(py, &[7u8; 4096]);
        return Ok(Obj(b.into_any().into_ptr()));
    }
    setup_python(py)?;
    fixtures(py)?;
    let fx = module(py, "pyxbuf_ir_fixtures", FIXTURES)?;
    Ok(Obj(fx.getattr(name)?.call0()?.into_ptr()))
}

/// The fixture `name` (a function of [`FIXTURES`], or `"bytes"`), with the
/// interpreter attached. Panics with the Python error when it cannot be made.
pub fn object(name: &str) -> Obj {
    let py = attach();
    build(py, name).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn bound(obj: Obj) -> Bound<'static, PyAny> {
    // SAFETY: `attach` made the token valid for the process; obj holds a
    // strong reference that is never released.
    unsafe { Bound::from_borrowed_ptr(Python::assume_attached(), obj.0) }
}

/// `PyObject_GetBuffer(PyBUF_RECORDS_RO)` + `PyBuffer_Release`.
pub fn raw_getbuffer(obj: Obj) {
    let mut view = ffi::Py_buffer::new();
    for _ in 0..ITERS {
        // SAFETY: attached; the view is released right after.
        unsafe {
            assert_eq!(ffi::PyObject_GetBuffer(obj.0, &mut view, RECORDS_RO), 0);
            black_box(view.buf);
            ffi::PyBuffer_Release(&mut view);
        }
    }
}

/// `pyxbuf_get(flags)` + `pyxbuf_release`.
pub fn pyxbuf_cycle(obj: Obj, flags: i32) {
    let mut view = std::mem::MaybeUninit::<sys::pyxbuf_view>::uninit();
    for _ in 0..ITERS {
        // SAFETY: attached; pyxbuf_get initialises the view it returns 0
        // for, which is released right after.
        unsafe {
            assert_eq!(sys::pyxbuf_get(obj.0, view.as_mut_ptr(), flags), 0);
            black_box((*view.as_ptr()).base.buf);
            sys::pyxbuf_release(view.as_mut_ptr());
        }
    }
}

/// `pyxbuf_get` of what a device-aware consumer asks
/// (`PyBUF_RECORDS_RO | PYXBUF_DEVICE`).
pub fn pyxbuf_get(obj: Obj) {
    pyxbuf_cycle(obj, DEVICE_VIEW)
}

/// The same with a shared borrow asked for (tracked through the registry for
/// producers that know nothing of borrows).
pub fn pyxbuf_get_shared(obj: Obj) {
    pyxbuf_cycle(obj, DEVICE_VIEW | sys::PYXBUF_BORROW_SHARED)
}

/// What a `#[pyfunction]` taking `PyBuffer<T>` does per call: extract + drop.
pub fn pyo3_pybuffer<T: pyo3::buffer::Element>(obj: Obj) {
    let b = bound(obj);
    for _ in 0..ITERS {
        let buf = b.extract::<pyo3::buffer::PyBuffer<T>>().expect("PyBuffer");
        drop(black_box(buf));
    }
}

/// What a `#[pyfunction]` taking `PyXBuffer<T>` does per call: extract (the
/// default request) + drop.
pub fn pyxbuffer<T: pyxbuf::Element>(obj: Obj) {
    let b = bound(obj);
    for _ in 0..ITERS {
        let buf = b.extract::<PyXBuffer<'_, T>>().expect("PyXBuffer");
        drop(black_box(buf));
    }
}

/// The same, then the shared borrow used: `as_slice()` answers only under a
/// grant, so this measures a default `PyXBuffer` whose borrow was granted
/// (tracked, through the registry, for NumPy).
pub fn pyxbuffer_slice<T: pyxbuf::Element>(obj: Obj) {
    let b = bound(obj);
    for _ in 0..ITERS {
        let buf = b.extract::<PyXBuffer<'_, T>>().expect("PyXBuffer");
        black_box(buf.as_slice().expect("a granted shared borrow").as_ptr());
        drop(buf);
    }
}

/// `f(obj)` with the result dropped (`np.from_dlpack`, NumPy's parser...).
pub fn call1(f: Obj, arg: Obj) {
    for _ in 0..ITERS {
        // SAFETY: attached; both are live objects.
        unsafe {
            let r = ffi::PyObject_CallOneArg(f.0, arg.0);
            assert!(!r.is_null(), "the Python call failed");
            ffi::Py_DECREF(r);
        }
    }
}

/// `getattr(obj, "__array_interface__")`, the dict pyxbuf's bridge reads.
pub fn getattr_array_interface(obj: Obj) {
    let name = c"__array_interface__";
    for _ in 0..ITERS {
        // SAFETY: attached; obj is live; name is NUL-terminated.
        unsafe {
            let r = ffi::PyObject_GetAttrString(obj.0, name.as_ptr());
            assert!(!r.is_null(), "no __array_interface__");
            ffi::Py_DECREF(r);
        }
    }
}

/// `pyxbuf_format_parse` + `pyxbuf_format_clear` into uninitialised
/// storage, as a C caller's stack variable would be.
pub fn format_parse(fmt: &CStr) {
    let mut f = std::mem::MaybeUninit::<sys::pyxbuf_format>::uninit();
    for _ in 0..ITERS {
        // SAFETY: fmt is NUL-terminated and outlives the descriptor; parse
        // initialises what clear and the itemsize read.
        unsafe {
            let rc = sys::pyxbuf_format_parse(
                black_box(fmt.as_ptr()),
                f.as_mut_ptr(),
                std::ptr::null_mut(),
            );
            assert_eq!(rc, 0, "pyxbuf_format_parse({fmt:?})");
            black_box((*f.as_ptr()).itemsize);
            sys::pyxbuf_format_clear(f.as_mut_ptr());
        }
    }
}

/// `pyxbuf_format_itemsize`.
pub fn format_itemsize(fmt: &CStr) {
    for _ in 0..ITERS {
        let mut size = 0i64;
        // SAFETY: fmt is NUL-terminated; NULL alignment and error are allowed.
        let rc = unsafe {
            sys::pyxbuf_format_itemsize(
                black_box(fmt.as_ptr()),
                &mut size,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, 0, "pyxbuf_format_itemsize({fmt:?})");
        black_box(size);
    }
}

/// A NUL-terminated copy of `s`, kept for the process.
pub fn cstr(s: &str) -> &'static CStr {
    Box::leak(CString::new(s).expect("no NUL").into_boxed_c_str())
}

/// One benchmark, ready to run: its operation bound to its objects, warmed up.
pub struct Prepared(Box<dyn Fn()>);

impl Prepared {
    /// Run the operation [`ITERS`] times.
    pub fn run(&self) {
        (self.0)()
    }
}

/// Every benchmark id `prepare` knows, `<operation>/<object>`: the
/// benchmark file names each one, and the smoke test runs them all.
pub const IDS: &[&str] = &[
    "raw_getbuffer/numpy_f32_2d",
    "raw_getbuffer/bytes",
    "raw_getbuffer/memoryview",
    "pyxbuf_get/numpy_f32_2d",
    "pyxbuf_get/bytes",
    "pyxbuf_get/memoryview",
    "pyxbuf_get_shared/numpy_f32_2d",
    "pyo3_pybuffer/numpy_f32_2d",
    "pyo3_pybuffer/bytes",
    "pyo3_pybuffer/memoryview",
    "pyxbuffer/numpy_f32_2d",
    "pyxbuffer/bytes",
    "pyxbuffer/memoryview",
    "pyxbuffer_slice/numpy_f32_2d",
    "pyxbuf_get/dlpack_only",
    "np_from_dlpack/dlpack_only",
    "pyxbuf_get/testext_dlpack_c",
    "np_from_dlpack/testext_dlpack_c",
    "pyxbuf_get/ml_dtypes_bf16",
    "getattr_array_interface/ml_dtypes_bf16",
    "format_parse/f",
    "format_parse/<d",
    "format_parse/Zd",
    "format_itemsize/f",
    "format_itemsize/<d",
    "format_parse/struct3",
    "numpy_pep3118/struct3",
];

fn with<F: Fn() + 'static>(f: F) -> Prepared {
    Prepared(Box::new(f))
}

/// The benchmark `id` (one of [`IDS`]): its objects built, its operation
/// run once (but the format functions', see below). Panics with the reason when it cannot be prepared.
pub fn prepare(id: &str) -> Prepared {
    let (op, what) = id.split_once('/').expect("<operation>/<object>");
    let fmt = |what: &str| {
        cstr(if what == "struct3" {
            STRUCT_FORMAT
        } else {
            what
        })
    };
    let p = match op {
        "format_parse" => {
            let f = fmt(what);
            with(move || format_parse(f))
        }
        "format_itemsize" => {
            let f = fmt(what);
            with(move || format_itemsize(f))
        }
        "numpy_pep3118" => {
            let (parser, arg) = (object("pep3118_parser"), object("pep3118_arg"));
            with(move || call1(parser, arg))
        }
        "np_from_dlpack" => {
            let (f, obj) = (object("from_dlpack"), object(what));
            with(move || call1(f, obj))
        }
        _ => {
            let obj = object(what);
            let u8_items = what == "bytes";
            let run: fn(Obj) = match (op, u8_items) {
                ("raw_getbuffer", _) => raw_getbuffer,
                ("pyxbuf_get", _) => pyxbuf_get,
                ("pyxbuf_get_shared", _) => pyxbuf_get_shared,
                ("pyo3_pybuffer", false) => pyo3_pybuffer::<f32>,
                ("pyo3_pybuffer", true) => pyo3_pybuffer::<u8>,
                ("pyxbuffer", false) => pyxbuffer::<f32>,
                ("pyxbuffer", true) => pyxbuffer::<u8>,
                ("pyxbuffer_slice", false) => pyxbuffer_slice::<f32>,
                ("getattr_array_interface", _) => getattr_array_interface,
                _ => panic!("unknown benchmark {id}"),
            };
            with(move || run(obj))
        }
    };
    // Warm caches (type caches, NumPy's buffer info) outside the measurement.
    // The format functions have none, and their benchmarks count every call
    // to them in the process (benches/ir.rs), so they get no warm-up run.
    if !matches!(op, "format_parse" | "format_itemsize") {
        p.run();
    }
    p
}

#[cfg(test)]
mod tests {
    /// The smoke test of `make test`: every benchmark of `make bench-ir`
    /// prepares (its objects, one warm-up run) and runs once more, natively.
    #[test]
    fn every_benchmark_runs() {
        for id in super::IDS {
            super::prepare(id).run();
        }
    }
}
