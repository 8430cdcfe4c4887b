//! [`PyXBufferN`]: a [`PyXBuffer`] whose number of dimensions is part of its
//! type ([`PyXBuffer1`], [`PyXBuffer2`]), checked once at acquisition.

use crate::words::count;
use std::fmt;
use std::ops::Deref;

use pyo3::prelude::*;

use super::iter::IterMut;
use super::request::{BorrowMode, Exclusive, Shared};
use super::PyXBuffer;
use crate::element::Element;
use crate::errors::item_type_error;

/// A [`PyXBuffer`] of exactly `N` dimensions: as a `#[pyfunction]`
/// argument, or from [`get`](Self::get), an array of another number of
/// dimensions is refused with `pyxbuf.ItemTypeError`, a `TypeError` and a
/// `BufferError` ([`item_type_error_class`](crate::item_type_error_class)):
/// "expected a 1-dimensional array, found 2 dimensions (shape (2, 3)); ...",
/// to which PyO3 adds the note "while processing 'x'" naming the argument. Use it through its
/// aliases [`PyXBuffer1`] and [`PyXBuffer2`].
///
/// It derefs to [`PyXBuffer`] for everything that reads (`iter`, `shape`,
/// `as_slice`, `as_bytes`, `to_vec`, grants, device...); what writes
/// (`iter_mut`, `as_mut_slice`, `as_bytes_mut`, `copy_from_slice`) is here
/// for `Exclusive` buffers, and with the `ndarray` feature (on by default)
/// [`as_array`](PyXBufferN::as_array) is typed (`ArrayView1`, `ArrayView2`).
/// [`dims`](Self::dims) gives the shape as an array.
///
/// ```
/// use pyo3::prelude::*;
/// use pyxbuf::PyXBuffer2;
///
/// /// The sum of each row of a matrix, whatever its strides.
/// #[pyfunction]
/// fn row_sums(m: PyXBuffer2<'_, f64>) -> PyResult<Vec<f64>> {
///     let [rows, cols] = m.dims();
///     let items: Vec<f64> = m.iter()?.copied().collect(); // C order
///     Ok((0..rows).map(|r| items[r * cols..][..cols].iter().sum()).collect())
/// }
///
/// Python::attach(|py| -> PyResult<()> {
///     let f = wrap_pyfunction!(row_sums, py)?;
///     let m = py.eval(c"memoryview(__import__('array').array('d', range(6))).cast('B').cast('d', (2, 3))", None, None)?;
///     assert_eq!(f.call1((m,))?.extract::<Vec<f64>>()?, [3.0, 12.0]);
///     let flat = py.eval(c"__import__('array').array('d', range(6))", None, None)?;
///     let err = f.call1((flat,)).unwrap_err();
///     assert!(err.is_instance_of::<pyo3::exceptions::PyTypeError>(py));
///     assert!(err.is_instance_of::<pyo3::exceptions::PyBufferError>(py));
///     assert!(err.to_string().contains("expected a 2-dimensional array, found 1 dimension (shape (6,))"));
///     Ok(())
/// })
/// .unwrap();
/// ```
#[repr(transparent)]
pub struct PyXBufferN<'py, T: Element, const N: usize, M: BorrowMode = Shared> {
    // No DerefMut: a `&mut PyXBuffer` could be swapped for one of another
    // number of dimensions. What writes is forwarded below.
    inner: PyXBuffer<'py, T, M>,
}

/// A one-dimensional [`PyXBuffer`] (see [`PyXBufferN`]).
pub type PyXBuffer1<'py, T, M = Shared> = PyXBufferN<'py, T, 1, M>;

/// A two-dimensional [`PyXBuffer`] (see [`PyXBufferN`]).
pub type PyXBuffer2<'py, T, M = Shared> = PyXBufferN<'py, T, 2, M>;

impl<'py, T: Element, const N: usize, M: BorrowMode> Deref for PyXBufferN<'py, T, N, M> {
    type Target = PyXBuffer<'py, T, M>;
    fn deref(&self) -> &PyXBuffer<'py, T, M> {
        &self.inner
    }
}

impl<'py, T: Element, const N: usize, M: BorrowMode> PyXBufferN<'py, T, N, M> {
    /// Acquire the buffer of `obj` as [`PyXBuffer::get`] does, then check
    /// that it has `N` dimensions (`pyxbuf.ItemTypeError` otherwise).
    #[inline]
    pub fn get(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        Self::from_buffer(PyXBuffer::get(obj)?)
    }

    /// `buf` when it has `N` dimensions (acquired with a
    /// [`Request`](crate::Request), say); `pyxbuf.ItemTypeError` naming the shape
    /// otherwise (`buf` is released then).
    #[inline]
    pub fn from_buffer(buf: PyXBuffer<'py, T, M>) -> PyResult<Self> {
        if buf.ndim() != N {
            return Err(wrong_ndim(buf.py(), N, buf.shape()));
        }
        Ok(PyXBufferN { inner: buf })
    }

    /// The buffer without its number of dimensions.
    pub fn into_inner(self) -> PyXBuffer<'py, T, M> {
        self.inner
    }

    /// The shape as an array: `let [rows, cols] = m.dims();`.
    pub fn dims(&self) -> [usize; N] {
        let shape = self.inner.shape();
        std::array::from_fn(|d| shape[d])
    }
}

impl<'py, T: Element, const N: usize> PyXBufferN<'py, T, N, Exclusive> {
    /// [`PyXBuffer::iter_mut`]: every item as `&mut T`, in C order, for any
    /// strides without overlaps.
    pub fn iter_mut(&mut self) -> PyResult<IterMut<'_, T>> {
        self.inner.iter_mut()
    }

    /// [`PyXBuffer::as_mut_slice`].
    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        self.inner.as_mut_slice()
    }

    /// [`PyXBuffer::as_fortran_mut_slice`].
    pub fn as_fortran_mut_slice(&mut self) -> Option<&mut [T]> {
        self.inner.as_fortran_mut_slice()
    }

    /// [`PyXBuffer::copy_from_slice`].
    pub fn copy_from_slice(&mut self, source: &[T]) -> PyResult<()> {
        self.inner.copy_from_slice(source)
    }

    /// [`PyXBuffer::copy_from_fortran_slice`].
    pub fn copy_from_fortran_slice(&mut self, source: &[T]) -> PyResult<()> {
        self.inner.copy_from_fortran_slice(source)
    }

    /// [`PyXUntypedBuffer::as_bytes_mut`](crate::PyXUntypedBuffer::as_bytes_mut).
    pub fn as_bytes_mut(&mut self) -> PyResult<&mut [u8]> {
        self.inner.as_bytes_mut()
    }

    /// [`PyXUntypedBuffer::as_mut_slice_of`](crate::PyXUntypedBuffer::as_mut_slice_of).
    pub fn as_mut_slice_of<U: bytemuck::Pod>(&mut self) -> PyResult<&mut [U]> {
        self.inner.as_mut_slice_of()
    }
}

#[cfg(feature = "ndarray")]
impl<'py, T: Element, const N: usize, M: BorrowMode> PyXBufferN<'py, T, N, M>
where
    ndarray::Dim<[ndarray::Ix; N]>: ndarray::Dimension,
{
    /// [`PyXBuffer::as_array`] with `N` dimensions in its type
    /// (`ArrayView1`, `ArrayView2`...).
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer1;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.eval(c"__import__('array').array('d', [1, 2, 3])", None, None)?;
    ///     let x = PyXBuffer1::<f64>::get(&array)?;
    ///     let view: ndarray::ArrayView1<'_, f64> = x.as_array().unwrap();
    ///     assert_eq!(view.dot(&view), 14.0);
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn as_array(&self) -> Option<ndarray::ArrayView<'_, T, ndarray::Dim<[ndarray::Ix; N]>>> {
        self.inner.as_array()?.into_dimensionality().ok()
    }
}

#[cfg(feature = "ndarray")]
impl<'py, T: Element, const N: usize> PyXBufferN<'py, T, N, Exclusive>
where
    ndarray::Dim<[ndarray::Ix; N]>: ndarray::Dimension,
{
    /// [`PyXBuffer::as_array_mut`] with `N` dimensions in its type.
    pub fn as_array_mut(
        &mut self,
    ) -> Option<ndarray::ArrayViewMut<'_, T, ndarray::Dim<[ndarray::Ix; N]>>> {
        self.inner.as_array_mut()?.into_dimensionality().ok()
    }
}

/// The item-type refusal (`pyxbuf.ItemTypeError`, a `TypeError` and a
/// `BufferError`) of an array with other dimensions than `want`.
#[cold]
#[inline(never)]
fn wrong_ndim(py: Python<'_>, want: usize, shape: &[usize]) -> PyErr {
    let tuple = match shape {
        [n] => format!("({n},)"),
        _ => {
            let items: Vec<String> = shape.iter().map(|n| n.to_string()).collect();
            format!("({})", items.join(", "))
        }
    };
    let message = format!(
        "expected a {want}-dimensional array, found {} (shape {tuple}); pass a \
         {want}-dimensional one (NumPy: a.reshape(...){})",
        count(shape.len() as u64, "dimension", "dimensions"),
        if want == 1 { " or a.ravel()" } else { "" },
    );
    item_type_error(py, message)
}

impl<T: Element, const N: usize, M: BorrowMode> fmt::Debug for PyXBufferN<'_, T, N, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.debug_as(&format!("PyXBufferN<{N}>"), f)
    }
}

super::from_py_object_via_get!(impl[T: Element, const N: usize, M: BorrowMode] for PyXBufferN<'py, T, N, M>);
