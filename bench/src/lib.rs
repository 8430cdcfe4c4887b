//! Shared helpers of pyxbuf's Criterion suite (`benches/pyxbuf.rs`): the
//! embedded interpreter's setup, the objects every benchmark measures, and
//! the notes file (`PYXBUF_BENCH_NOTES`) in which the suite records what it
//! could not measure and which protocol path each object took, for the
//! results writer (`bench/report.py`).
//!
//! Run the suite with `make bench` (it writes `bench/results/<date>-<machine>.md`)
//! or `cargo bench -p pyxbuf-bench`; `cargo test -p pyxbuf-bench --benches`
//! runs every benchmark once without timing it (`make bench-smoke`, part of
//! `make test`).

use std::ffi::{CStr, CString};
use std::fmt::Write as _;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyList;
use pyxbuf_sys as sys;

/// What a benchmark run could not do, and facts about what it measured: one
/// line per note, written as JSON lines to `$PYXBUF_BENCH_NOTES` at the end.
static NOTES: Mutex<Vec<(String, String, String)>> = Mutex::new(Vec::new());

/// Record a note: `kind` is `"skip"` (a peer or benchmark that could not run,
/// with the reason) or `"path"` (the protocol path pyxbuf took for an object).
pub fn note(kind: &str, id: &str, text: &str) {
    eprintln!("pyxbuf-bench: {kind} {id}: {text}");
    NOTES.lock().unwrap_or_else(|e| e.into_inner()).push((
        kind.to_owned(),
        id.to_owned(),
        text.to_owned(),
    ));
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Write the notes as JSON lines to `$PYXBUF_BENCH_NOTES` (if set).
pub fn write_notes() {
    let Some(path) = std::env::var_os("PYXBUF_BENCH_NOTES") else {
        return;
    };
    let notes = NOTES.lock().unwrap_or_else(|e| e.into_inner());
    let mut text = String::new();
    for (kind, id, msg) in notes.iter() {
        let _ = writeln!(
            text,
            "{{\"kind\": {}, \"id\": {}, \"text\": {}}}",
            json_str(kind),
            json_str(id),
            json_str(msg)
        );
    }
    if let Some(dir) = std::path::Path::new(&path).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("pyxbuf-bench: cannot write {}: {e}", path.to_string_lossy());
    }
}

/// Make the venv's packages and the CMake build's test extension importable
/// (PYTHONPATH usually has the former; `build/python` holds `_pyxbuf_testext`).
pub fn setup_python(py: Python<'_>) -> PyResult<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sys_path = py.import("sys")?.getattr("path")?.cast_into::<PyList>()?;
    let build = std::env::var("PYXBUF_BUILD_DIR").unwrap_or_else(|_| "build".to_owned());
    let testext = root.join(build).join("python");
    if testext.is_dir() {
        sys_path.insert(0, testext.to_string_lossy().as_ref())?;
    }
    Ok(())
}

/// Run Python source defining names in a fresh module; returns the module.
pub fn module<'py>(py: Python<'py>, name: &str, code: &str) -> PyResult<Bound<'py, PyModule>> {
    let code = CString::new(code).expect("no NUL in code");
    let file = CString::new(format!("{name}.py")).expect("no NUL");
    let name = CString::new(name).expect("no NUL");
    PyModule::from_code(py, &code, &file, &name)
}

/// The protocol path `pyxbuf_get(obj, flags)` takes, or why it fails.
pub fn path_of(obj: &Bound<'_, PyAny>, flags: i32) -> Result<String, String> {
    let mut view = sys::pyxbuf_view::default();
    // SAFETY: GIL held (obj is bound); the view is released when acquired.
    unsafe {
        if sys::pyxbuf_get(obj.as_ptr(), &mut view, flags) != 0 {
            return Err(PyErr::fetch(obj.py()).to_string());
        }
        let path = view.path;
        sys::pyxbuf_release(&mut view);
        Ok(CStr::from_ptr(sys::pyxbuf_path_name(path))
            .to_string_lossy()
            .into_owned())
    }
}

/// Register the emulated device (`kDLExtDev`, ids 0..4) in this copy of libpyxbuf.
pub fn register_emulated() {
    pyxbuf::emulated::register().expect("the emulated device registers");
}

/// A `pyxbuf.Exporter` of `format` and `shape` on `device` (None = host).
pub fn exporter<'py>(
    py: Python<'py>,
    format: &CStr,
    shape: &[isize],
    device: Option<sys::pyxbuf_device>,
) -> PyResult<Bound<'py, PyAny>> {
    let dev = device.as_ref().map_or(std::ptr::null(), |d| d as *const _);
    // SAFETY: GIL held; shape has ndim entries; the result is a new reference.
    unsafe {
        let obj =
            sys::pyxbuf_exporter_new(format.as_ptr(), shape.len() as i32, shape.as_ptr(), 0, dev);
        Bound::from_owned_ptr_or_err(py, obj)
    }
}

/// The data pointer of a `pyxbuf.Exporter` (a device address for device ones).
pub fn exporter_data(obj: &Bound<'_, PyAny>) -> usize {
    // SAFETY: GIL held; obj is an exporter (checked by the callee).
    unsafe { sys::pyxbuf_exporter_data(obj.as_ptr()) as usize }
}

/// The emulated device `id`.
pub const fn emulated(id: i32) -> sys::pyxbuf_device {
    sys::pyxbuf_device {
        device_type: sys::PYXBUF_DL_EXT_DEV,
        device_id: id,
    }
}

/// `PyBUF_RECORDS_RO`, the classic request every acquisition benchmark makes.
pub const RECORDS_RO: i32 = pyo3_ffi::PyBUF_RECORDS_RO;
/// `PyBUF_RECORDS_RO | PYXBUF_DEVICE`: the request of pyxbuf's fast path.
pub const DEVICE_VIEW: i32 = pyo3_ffi::PyBUF_RECORDS_RO | sys::PYXBUF_DEVICE;

/// Python-side fixtures shared by both suites: producers that speak one
/// protocol each.
const FIXTURES: &str = r#"
import numpy as np

class DLPackOnly:
    """Speaks only DLPack: forwards to an object that exports it."""
    def __init__(self, inner):
        self.inner = inner
    def __dlpack__(self, *args, **kwargs):
        return self.inner.__dlpack__(*args, **kwargs)
    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()

class CAI:
    """Speaks only the CUDA Array Interface (v3); the dict is built anew on
    every access, as CuPy does. `memory` keeps the allocation alive."""
    def __init__(self, memory, ptr, shape, typestr):
        self.memory = memory
        self.ptr = ptr
        self.shape = shape
        self.typestr = typestr
    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "version": 3, "strides": None}

def struct_dtype(n):
    return np.dtype([(f"f{i}", ("<f8", "<i4", "<f4", "<i2", "u1")[i % 5]) for i in range(n)])
"#;

/// The shared fixtures as the module `pyxbuf_bench_fixtures` (also in
/// `sys.modules`, so other fixture code can import from it).
pub fn fixtures(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    module(py, "pyxbuf_bench_fixtures", FIXTURES)
}

pub mod ir;
