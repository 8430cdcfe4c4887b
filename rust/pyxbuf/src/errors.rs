//! The class of an item-type refusal: [`item_type_error_class`].

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::sys;

/// `pyxbuf.ItemTypeError`: the class of every item-type refusal, a buffer
/// whose items are not the `T` of a [`PyXBuffer<T>`](crate::PyXBuffer)
/// (format or item size: `PyXBuffer<f32>` given bfloat16 or an
/// `array('i')`), or whose number of dimensions is not the one a
/// [`PyXBuffer1`](crate::PyXBuffer1) / [`PyXBuffer2`](crate::PyXBuffer2)
/// fixes.
///
/// It derives from both `TypeError` and `BufferError`: a `TypeError` by
/// pyxbuf's rule (the array is of the wrong kind, its memory is fine), and a
/// `BufferError` so that code written for PyO3's `PyBuffer`, whose `get`
/// raises `BufferError` there, catches it unchanged. So
/// `err.is_instance_of::<PyTypeError>(py)` and
/// `err.is_instance_of::<PyBufferError>(py)` are both true, in Rust as in
/// Python (`except TypeError`, `except BufferError`).
///
/// One class for the whole process: every copy of libpyxbuf (each PyO3
/// extension links its own) finds the one the first copy made, in
/// `sys.modules['_pyxbuf_shared']`, and the `pyxbuf` Python module exports
/// it as `pyxbuf.ItemTypeError`. Fails only if something else was put where
/// pyxbuf keeps it.
///
/// ```
/// use pyo3::exceptions::{PyBufferError, PyTypeError};
/// use pyo3::prelude::*;
/// use pyxbuf::PyXBuffer;
/// Python::attach(|py| -> PyResult<()> {
///     let ints = py.eval(c"__import__('array').array('i', [1, 2])", None, None)?;
///     let err = PyXBuffer::<f64>::get(&ints).unwrap_err();
///     assert!(err.is_instance_of::<PyTypeError>(py));
///     assert!(err.is_instance_of::<PyBufferError>(py)); // as PyO3's PyBuffer::get
///     assert!(err.get_type(py).is(pyxbuf::item_type_error_class(py)?));
///     Ok(())
/// })
/// .unwrap();
/// ```
pub fn item_type_error_class(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    // SAFETY: the thread is attached (`py`); the result is a borrowed
    // reference the library keeps for the process, or NULL with an
    // exception set.
    let cls = unsafe { sys::pyxbuf_item_type_error() };
    if cls.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a live object (kept by the library), non-NULL.
    let cls = unsafe { Bound::from_borrowed_ptr(py, cls) };
    Ok(cls.cast_into::<PyType>()?)
}

/// Names Rust as the binding of this copy of libpyxbuf (once, on its first
/// acquisition): the C core's messages then name Rust's fix
/// (`PyXBuffer::<T>::request().device()`, not `PYXBUF_DEVICE`). A copy whose
/// binding was set first (the `pyxbuf` Python module's) keeps it.
#[inline(always)]
pub(crate) fn speak_rust() {
    if !RUST_BINDING_ASKED.load(Ordering::Relaxed) {
        ask_rust_binding();
    }
}

static RUST_BINDING_ASKED: AtomicBool = AtomicBool::new(false);

#[cold]
#[inline(never)]
fn ask_rust_binding() {
    // SAFETY: a plain setter of one atomic word; no GIL or object involved.
    unsafe { sys::pyxbuf_message_binding(sys::PYXBUF_BINDING_RUST) };
    RUST_BINDING_ASKED.store(true, Ordering::Relaxed);
}

/// An item-type refusal with `message`: [`item_type_error_class`], or a
/// plain `TypeError` should that class not be had.
#[cold]
#[inline(never)]
pub(crate) fn item_type_error(py: Python<'_>, message: String) -> PyErr {
    match item_type_error_class(py) {
        Ok(cls) => PyErr::from_type(cls, message),
        Err(_) => PyTypeError::new_err(message),
    }
}
