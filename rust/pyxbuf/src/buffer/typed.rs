//! [`PyXBuffer<T>`]: an untyped view whose format was checked to be `T`'s.

use std::fmt;
use std::marker::PhantomData;

use pyo3::prelude::*;

use super::request::{BorrowMode, Request, Shared};
use super::PyXUntypedBuffer;
use crate::element::Element;

/// A typed view of a Python object's memory — host or device — acquired
/// through pyxbuf, with the producer's borrow grants.
///
/// - `'py`: the view needs the interpreter (its release calls the producer),
///   so it cannot outlive the `Python<'py>` it was acquired under, nor cross
///   to another thread.
/// - `T`: the item type; the format and item size are checked at
///   acquisition (on mismatch `pyxbuf.ItemTypeError` naming both formats: a
///   `TypeError` and a `BufferError`, see [`item_type_error_class`](crate::item_type_error_class)).
/// - `M`: the borrow asked for, [`Shared`] (default) or [`Exclusive`](crate::Exclusive).
///
/// As a `#[pyfunction]` argument it acquires with the default request:
/// read-only, strided, with a format, a shared borrow asked for, host memory.
///
/// ```
/// use pyo3::prelude::*;
/// use pyxbuf::PyXBuffer;
///
/// #[pyfunction]
/// fn total(x: PyXBuffer<'_, f64>) -> PyResult<f64> {
///     Ok(match x.as_slice() {
///         Some(items) => items.iter().sum(),      // borrowed: a plain slice
///         None => x.to_vec()?.iter().sum(),       // strided: copy in C order
///     })
/// }
///
/// Python::attach(|py| -> PyResult<()> {
///     let f = wrap_pyfunction!(total, py)?;
///     let array = py.import("array")?.getattr("array")?.call1(("d", vec![1.5, 2.5]))?;
///     assert_eq!(f.call1((array,))?.extract::<f64>()?, 4.0);
///     Ok(())
/// })
/// .unwrap();
/// ```
///
/// Everything that does not depend on `T` (shape, strides, grants, device,
/// path, layout and moves) is on [`PyXUntypedBuffer`], which this derefs to.
#[repr(transparent)]
pub struct PyXBuffer<'py, T: Element, M: BorrowMode = Shared> {
    pub(super) inner: PyXUntypedBuffer<'py, M>,
    pub(super) _t: PhantomData<fn() -> T>,
}

impl<'py, M: BorrowMode, T: Element> std::ops::Deref for PyXBuffer<'py, T, M> {
    type Target = PyXUntypedBuffer<'py, M>;
    fn deref(&self) -> &PyXUntypedBuffer<'py, M> {
        &self.inner
    }
}

impl<'py, T: Element> PyXBuffer<'py, T, Shared> {
    /// A request to build on: read-only, strided, with a format and a shared
    /// borrow asked for. See [`Request`].
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let data = pyo3::types::PyBytes::new(py, b"abc");
    ///     let buf = PyXBuffer::<u8>::request().contiguous().get(&data)?;
    ///     assert_eq!(buf.as_slice(), Some(&b"abc"[..]));
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn request() -> Request<T, Shared> {
        Request::new(Shared::FLAGS)
    }
}

impl<'py, T: Element, M: BorrowMode> PyXBuffer<'py, T, M> {
    /// Acquire the buffer of `obj` with the default request of mode `M`
    /// (host memory, strided; read-only with a shared borrow asked for, or
    /// writable with an exclusive borrow asked for).
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.import("array")?.getattr("array")?.call1(("i", vec![1, 2, 3]))?;
    ///     let buf = PyXBuffer::<i32>::get(&array)?;
    ///     assert_eq!(buf.shape(), [3]);
    ///     assert!(buf.grants().shared()); // tracked by pyxbuf's registry
    ///     assert_eq!(buf.as_slice(), Some(&[1, 2, 3][..]));
    ///
    ///     // The wrong type is a TypeError naming both formats, and a
    ///     // BufferError, which PyO3's PyBuffer::get raised (pyxbuf.ItemTypeError).
    ///     let err = PyXBuffer::<f64>::get(&array).unwrap_err();
    ///     assert!(err.is_instance_of::<pyo3::exceptions::PyTypeError>(py));
    ///     assert!(err.is_instance_of::<pyo3::exceptions::PyBufferError>(py));
    ///     assert!(err.to_string().contains("'i'") && err.to_string().contains("'d'"));
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    // Inlined into the caller (a #[pyfunction]'s argument extraction, say):
    // its error paths are out of line, and the call it saves is ~15% of the
    // Rust layer's instructions per acquisition.
    #[inline(always)]
    pub fn get(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        PyXUntypedBuffer::acquire(obj, M::FLAGS, None)?.typed_for(obj)
    }

    /// The view without its item type (to re-type it, say).
    pub fn into_untyped(self) -> PyXUntypedBuffer<'py, M> {
        self.inner
    }
}

impl<T: Element, M: BorrowMode> fmt::Debug for PyXBuffer<'_, T, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.debug_as("PyXBuffer", f)
    }
}

super::from_py_object_via_get!(impl[T: Element, M: BorrowMode] for PyXBuffer<'py, T, M>);
