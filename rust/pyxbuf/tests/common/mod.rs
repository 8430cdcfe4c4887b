//! Helpers shared by the integration tests (an embedded interpreter with the
//! project's NumPy: run with PYTHONPATH pointing at the venv's site-packages).
#![allow(dead_code)]

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Evaluate a Python expression with `np` (NumPy) and the given locals.
pub fn eval<'py>(
    py: Python<'py>,
    expr: &str,
    locals: &[(&str, &Bound<'py, PyAny>)],
) -> Bound<'py, PyAny> {
    let ns = PyDict::new(py);
    ns.set_item("np", numpy(py)).unwrap();
    for (k, v) in locals {
        ns.set_item(k, v).unwrap();
    }
    let code = std::ffi::CString::new(expr).unwrap();
    py.eval(&code, Some(&ns), Some(&ns))
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
}

/// Run Python statements with `np` and the given locals.
pub fn run<'py>(py: Python<'py>, code: &str, locals: &[(&str, &Bound<'py, PyAny>)]) {
    let ns = PyDict::new(py);
    ns.set_item("np", numpy(py)).unwrap();
    for (k, v) in locals {
        ns.set_item(k, v).unwrap();
    }
    let c = std::ffi::CString::new(code).unwrap();
    py.run(&c, Some(&ns), Some(&ns))
        .unwrap_or_else(|e| panic!("{code}: {e}"));
}

/// NumPy 2 or newer: its arrays take pyxbuf's struct route (NumPy 1's its
/// classic export, and user dtypes such as ml_dtypes' the
/// `__array_interface__` bridge).
#[allow(dead_code)] // not every test file asks
pub fn numpy_2(py: Python<'_>) -> bool {
    let version: String = numpy(py).getattr("__version__").unwrap().extract().unwrap();
    version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0)
        >= 2
}

/// NumPy speaks DLPack 1 (NumPy 2.1 and newer): `__dlpack__(max_version=)`,
/// versioned capsules, read-only imports.
#[allow(dead_code)]
pub fn numpy_dlpack_1(py: Python<'_>) -> bool {
    let ns = PyDict::new(py);
    ns.set_item("np", numpy(py)).unwrap();
    py.run(
        c"try:\n    np.zeros(1).__dlpack__(max_version=(1, 0))\n    ok = True\nexcept TypeError:\n    ok = False\n",
        Some(&ns),
        Some(&ns),
    )
    .unwrap();
    ns.get_item("ok").unwrap().unwrap().extract().unwrap()
}

pub fn numpy(py: Python<'_>) -> Bound<'_, PyModule> {
    py.import("numpy").unwrap_or_else(|e| {
        panic!(
            "these tests need NumPy: set PYTHONPATH to the site-packages of the project's .venv \
             ({e})"
        )
    })
}

pub fn refcount(obj: &Bound<'_, PyAny>) -> isize {
    // SAFETY: a live object; reading its reference count.
    unsafe { pyo3::ffi::Py_REFCNT(obj.as_ptr()) }
}

/// A frozen `#[pyclass]` `$name { data: HostArray<$item> }` exporting its
/// array through `pyxbuf::export_pymethods!`, with borrow counting: the exporter
/// the tests borrow from. Needs `pyxbuf::export::HostArray` in scope.
#[macro_export]
macro_rules! host_exporter {
    ($name:ident, $item:ty) => {
        #[pyo3::pyclass(frozen)]
        struct $name {
            data: HostArray<$item>,
        }

        pyxbuf::export_pymethods! {
            impl $name {}
        }

        // SAFETY: HostArray keeps memory, shape and strides in place while views live.
        unsafe impl pyxbuf::export::ExportBuffer for $name {
            fn export_desc(&self) -> pyxbuf::export::ExportDesc<'_> {
                self.data.desc()
            }
            fn borrow_counter(&self) -> &pyxbuf::export::BorrowCounter {
                self.data.borrows()
            }
        }
    };
}
