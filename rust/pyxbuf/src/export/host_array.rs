//! [`HostArray`]: ready-made host storage for an [`ExportBuffer`](super::ExportBuffer)
//! class, with the owner's reads and writes counted as borrows.

use std::cell::UnsafeCell;
use std::mem;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyxbuf_sys as sys;

use super::{BorrowCounter, ExportDesc};
use crate::element::Element;

/// Host memory ready to export: items, C-order shape and strides, and the
/// borrow counter. The owner reads and writes it through
/// [`read`](HostArray::read) / [`write`](HostArray::write), which take part
/// in the borrow rules like a consumer would. Keep it in a
/// `#[pyclass(frozen)]`: nothing here needs `&mut self`, and PyO3's own
/// borrow flag would otherwise stand between `__releasebuffer__` and a
/// method that is running.
pub struct HostArray<T: Element> {
    data: Box<[UnsafeCell<T>]>,
    shape: Box<[isize]>,
    strides: Box<[isize]>,
    readonly: bool,
    borrows: BorrowCounter,
}

// SAFETY: the items are only reached through `read` / `write` (which take
// part in the borrow counter under its lock) and through views, whose
// access the counter's grants order. Like an RwLock, sharing the array
// hands `&T` to several threads at once (T: Sync) and lets one of them write
// or take a value another thread put there (T: Send).
unsafe impl<T: Element + Send + Sync> Sync for HostArray<T> {}
// SAFETY: owns its items.
unsafe impl<T: Element + Send> Send for HostArray<T> {}

impl<T: Element> std::fmt::Debug for HostArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostArray")
            .field("format", &T::FORMAT)
            .field("shape", &self.shape)
            .field("readonly", &self.readonly)
            .field("borrows", &self.borrows.counts())
            .finish()
    }
}

impl<T: Element> HostArray<T> {
    /// `data` as an array of `shape` (C order); `ValueError` when the item
    /// count differs, when there are more than `PYXBUF_MAX_NDIM` dimensions,
    /// or when the shape does not fit in memory (its non-zero extents, or
    /// their bytes, exceed `isize::MAX`: consumers size slices and strides
    /// by them).
    pub fn new(data: Vec<T>, shape: &[usize]) -> PyResult<HostArray<T>> {
        if shape.len() > sys::PYXBUF_MAX_NDIM {
            return Err(PyValueError::new_err(format!(
                "pyxbuf: shape {shape:?} has {} dimensions, more than the {} a buffer may have",
                shape.len(),
                sys::PYXBUF_MAX_NDIM
            )));
        }
        // Items with the zero extents left out (what strides multiply), and
        // their bytes: both bounded, with checked arithmetic.
        let spanned = shape
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n.max(1)))
            .and_then(|n| n.checked_mul(mem::size_of::<T>().max(1)))
            .filter(|&bytes| bytes <= isize::MAX as usize);
        if spanned.is_none() {
            return Err(PyValueError::new_err(format!(
                "pyxbuf: shape {shape:?} of {}-byte items does not fit in memory (its non-zero \
                 extents times the item size exceed isize::MAX bytes); give a smaller shape",
                mem::size_of::<T>()
            )));
        }
        let count = if shape.contains(&0) {
            0
        } else {
            shape.iter().product()
        };
        if count != data.len() {
            return Err(PyValueError::new_err(format!(
                "pyxbuf: {} items cannot have shape {shape:?} ({count} items); give a shape \
                 whose extents multiply to the data's length",
                data.len()
            )));
        }
        // C-order strides: products of the extents after each dimension,
        // bounded by `spanned` above.
        let mut strides = vec![0isize; shape.len()].into_boxed_slice();
        let mut stride = mem::size_of::<T>() as isize;
        for i in (0..shape.len()).rev() {
            strides[i] = stride;
            stride = stride.saturating_mul(shape[i].max(1) as isize);
        }
        let data: Box<[T]> = data.into_boxed_slice();
        // SAFETY: UnsafeCell<T> is repr(transparent) over T.
        let data = unsafe { Box::from_raw(Box::into_raw(data) as *mut [UnsafeCell<T>]) };
        Ok(HostArray {
            data,
            shape: shape.iter().map(|&n| n as isize).collect(),
            strides,
            readonly: false,
            borrows: BorrowCounter::new(),
        })
    }

    /// A one-dimensional array of `data`.
    pub fn from_vec(data: Vec<T>) -> HostArray<T> {
        let n = data.len();
        HostArray::new(data, &[n]).expect("a 1-D shape always fits")
    }

    /// Export read-only (writable requests are refused).
    pub fn with_readonly(mut self, readonly: bool) -> HostArray<T> {
        self.readonly = readonly;
        self
    }

    /// The description
    /// [`ExportBuffer::export_desc`](super::ExportBuffer::export_desc)
    /// returns.
    pub fn desc(&self) -> ExportDesc<'_> {
        ExportDesc::new(UnsafeCell::raw_get(self.data.as_ptr()), &self.shape)
            .strides(&self.strides)
            .readonly(self.readonly)
    }

    /// The borrow counter
    /// [`ExportBuffer::borrow_counter`](super::ExportBuffer::borrow_counter)
    /// returns.
    pub fn borrows(&self) -> &BorrowCounter {
        &self.borrows
    }

    /// Items per dimension.
    pub fn shape(&self) -> Vec<usize> {
        self.shape.iter().map(|&n| n as usize).collect()
    }

    /// Read the items (C order), as a shared borrower would: `BufferError`
    /// while a writable view or an exclusive borrow is live; during `f`,
    /// writable and exclusive requests are refused.
    pub fn read<R>(&self, f: impl FnOnce(&[T]) -> R) -> PyResult<R> {
        let _guard = self
            .borrows
            .shared_guard("read its HostArray as the owner")?;
        // SAFETY: no writable view and no exclusive borrow is live, and none
        // can be granted until the guard drops (it counts as a shared borrow
        // under the counter's lock), so nobody writes the items meanwhile.
        let items = unsafe {
            std::slice::from_raw_parts(
                UnsafeCell::raw_get(self.data.as_ptr()).cast_const(),
                self.data.len(),
            )
        };
        Ok(f(items))
    }

    /// Write the items (C order), as an exclusive borrower would:
    /// `BufferError` while any view is live (a NumPy array made with
    /// `np.asarray(obj)` included); during `f` every request is refused.
    /// Takes `&self`, so it works in a `#[pyclass(frozen)]`: the counter, not
    /// the borrow checker, makes concurrent owner writes impossible.
    pub fn write<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> PyResult<R> {
        let _guard = self
            .borrows
            .exclusive_guard("write its HostArray as the owner")?;
        // SAFETY: no view (and no other owner access, which counts as one) is
        // live, and none can start until the guard drops (it counts as an
        // exclusive borrow under the counter's lock): this is the only access
        // to the items, which live in UnsafeCells.
        let items = unsafe {
            std::slice::from_raw_parts_mut(UnsafeCell::raw_get(self.data.as_ptr()), self.data.len())
        };
        Ok(f(items))
    }
}
