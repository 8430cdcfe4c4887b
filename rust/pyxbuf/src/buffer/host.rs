//! Host memory: plain slices and cells under grants (cells without one
//! only in `unsafe` code), raw slice pointers, and copies in C or Fortran
//! order.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::fmt;
use std::mem::{self, MaybeUninit};
use std::ptr::{self, NonNull};

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyxbuf_sys as sys;

use super::request::{BorrowMode, Exclusive};
use super::PyXBuffer;
use crate::element::Element;

/// Like [`std::cell::Cell`], but read-only: a `&ReadOnlyCell<T>` is an item
/// that this code only reads but others may write. What
/// [`PyXBuffer::as_cells`] hands out under a borrow grant, and the `unsafe`
/// [`PyXBuffer::as_cells_unchecked`] without one.
///
/// Reads are plain loads. They tolerate writes made *on this thread*
/// between two reads (Python code you call while holding the cells), but a
/// write from *another thread* at the same time is a data race, which no
/// cell type can prevent: on free-threaded CPython any thread runs Python at
/// any time, and with the GIL a NumPy ufunc that released it
/// (`np.add(a, 1, out=a)`) writes from another thread too. That is why
/// PyO3 0.30 deprecated its safe cell accessors, and why cells without a
/// grant are `unsafe` here.
///
/// The cell holds a `MaybeUninit<T>`, not a `T`: the bytes belong to the
/// producer and need not be a valid `T` (a `bool` item may hold 2..=255), so
/// no reference to a `T` is ever formed over them; [`get`](ReadOnlyCell::get)
/// reads the bytes and makes a valid value of them.
#[repr(transparent)]
pub struct ReadOnlyCell<T: Element>(UnsafeCell<MaybeUninit<T>>);

impl<T: Element> ReadOnlyCell<T> {
    /// A copy of the current value (a `bool` item is `true` for any
    /// non-zero byte).
    #[inline]
    pub fn get(&self) -> T {
        // SAFETY: the cell lives in an aligned, readable item of the view
        // (cells_in checks host memory, alignment and bounds), which no other
        // thread writes meanwhile: as_cells' grant promises it (enforced, or
        // tracked under the crate's trust model), as_cells_unchecked's caller
        // does; `read_item` turns any bits into a valid T.
        unsafe { T::read_item(self.as_ptr()) }
    }

    /// A pointer to the item (its bytes may not be a valid `T`: read it with
    /// [`get`](ReadOnlyCell::get) or as bytes).
    #[inline]
    pub fn as_ptr(&self) -> *const T {
        self.0.get().cast::<T>().cast_const()
    }
}

impl<T: Element + fmt::Debug> fmt::Debug for ReadOnlyCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl<'py, T: Element, M: BorrowMode> PyXBuffer<'py, T, M> {
    /// As `host_items`, for memory contiguous in Fortran order when
    /// `fortran` (C order otherwise).
    fn host_items_in(&self, fortran: bool) -> Option<(*const T, usize)> {
        let contiguous = if fortran {
            self.is_fortran_contiguous()
        } else {
            self.is_c_contiguous()
        };
        // Contiguity is false with suboffsets (the items are behind pointers).
        if !self.is_host() || !contiguous {
            return None;
        }
        let n = self.item_count();
        if n == 0 {
            return Some((NonNull::<T>::dangling().as_ptr(), 0));
        }
        let p = self.buf_ptr().cast::<T>();
        (!p.is_null() && p.is_aligned()).then_some((p.cast_const(), n))
    }

    /// The items as a plain slice — only when the producer (or pyxbuf's
    /// registry) granted a shared or exclusive borrow, the memory is on the
    /// host, C-contiguous and aligned for `T`. `None` otherwise: use
    /// [`to_vec`](PyXBuffer::to_vec), [`copy_to_host`](PyXBuffer::copy_to_host)
    /// or, under a grant, [`as_cells`](PyXBuffer::as_cells).
    ///
    /// What the grant promises is described at [`Grants`](crate::Grants); a `bool` buffer
    /// whose bytes are not all 0 or 1 gives `None` too.
    pub fn as_slice(&self) -> Option<&[T]> {
        self.slice_in(false)
    }

    /// [`as_slice`](PyXBuffer::as_slice) for memory contiguous in Fortran
    /// order: the items in memory order, first index fastest.
    pub fn as_fortran_slice(&self) -> Option<&[T]> {
        self.slice_in(true)
    }

    fn slice_in(&self, fortran: bool) -> Option<&[T]> {
        if !self.grants().any() {
            return None;
        }
        let (p, n) = self.host_items_in(fortran)?;
        // SAFETY: host memory of n aligned, initialised items that stays
        // alive while the view does (`&self` borrows it); the borrow grant
        // means nobody writes it through pyxbuf (and, enforced grants, at
        // all) while the view lives, and the only writer this crate allows,
        // as_mut_slice, needs `&mut self`.
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n * mem::size_of::<T>()) };
        if !T::valid_bytes(bytes) {
            return None;
        }
        // SAFETY: as above, and every item is a valid T (checked for bool,
        // guaranteed by `Element` otherwise).
        Some(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// The items as read-only cells -- under a shared or exclusive grant
    /// (the promise [`as_slice`](PyXBuffer::as_slice) needs, enforced or
    /// tracked: see [`Grants`](crate::Grants)), for host, C-contiguous,
    /// aligned memory. Unlike the slice, cells tolerate writes made on this
    /// thread between reads (by Python code you call) and `bool` items whose
    /// bytes are not 0 or 1. `None` without a grant (a producer that ignores
    /// borrow requests): another thread may be writing the memory, which
    /// cells cannot make safe; use a copy ([`to_vec`](PyXBuffer::to_vec)),
    /// or [`as_cells_unchecked`](PyXBuffer::as_cells_unchecked) where you
    /// can promise that no other thread writes.
    pub fn as_cells(&self) -> Option<&[ReadOnlyCell<T>]> {
        if !self.grants().any() {
            return None;
        }
        self.cells_in(false)
    }

    /// [`as_cells`](PyXBuffer::as_cells) for memory contiguous in Fortran
    /// order.
    pub fn as_fortran_cells(&self) -> Option<&[ReadOnlyCell<T>]> {
        if !self.grants().any() {
            return None;
        }
        self.cells_in(true)
    }

    /// The items as read-only cells whatever the grants: PyO3's `as_slice`,
    /// which PyO3 0.30 deprecated as unsound. For host, C-contiguous,
    /// aligned memory.
    ///
    /// # Safety
    ///
    /// While the returned cells are used, no *other* thread writes the
    /// memory: not another Python thread (any thread, on free-threaded
    /// CPython), not C code that released the GIL (a NumPy ufunc writing
    /// `out=`), not a Rust thread. Writes from this thread between reads --
    /// Python code you call -- are allowed; that is what cells are for.
    pub unsafe fn as_cells_unchecked(&self) -> Option<&[ReadOnlyCell<T>]> {
        self.cells_in(false)
    }

    /// [`as_cells_unchecked`](PyXBuffer::as_cells_unchecked) for memory
    /// contiguous in Fortran order (PyO3's deprecated `as_fortran_slice`).
    ///
    /// # Safety
    ///
    /// As for [`as_cells_unchecked`](PyXBuffer::as_cells_unchecked).
    pub unsafe fn as_fortran_cells_unchecked(&self) -> Option<&[ReadOnlyCell<T>]> {
        self.cells_in(true)
    }

    /// The cells of `as_cells` and `as_cells_unchecked`, whose callers
    /// answer for other threads (a grant, or the caller's promise).
    fn cells_in(&self, fortran: bool) -> Option<&[ReadOnlyCell<T>]> {
        let (p, n) = self.host_items_in(fortran)?;
        // SAFETY: n aligned, readable items of host memory alive while the
        // view is; ReadOnlyCell<T> is a transparent UnsafeCell<MaybeUninit<T>>,
        // so writes by code this thread runs are permitted by the type, no
        // validity is assumed of the bytes, and every read goes through
        // `Element::read_item`. Writes from other threads are excluded by
        // the callers: a borrow grant (as_cells; a tracked one under the
        // crate's trust model) or the caller's promise (as_cells_unchecked).
        Some(unsafe { std::slice::from_raw_parts(p.cast::<ReadOnlyCell<T>>(), n) })
    }

    /// The items as a raw slice pointer, whatever the grants: for host,
    /// C-contiguous, aligned memory without suboffsets (as PyO3 0.30's
    /// pointer accessors). Nothing is promised about other readers and
    /// writers: dereferencing is your `unsafe` block, under your own
    /// reasoning (see the crate's `# Soundness` section). Valid while `self`
    /// lives.
    pub fn as_slice_ptr(&self) -> Option<NonNull<[T]>> {
        self.slice_ptr_in(false)
    }

    /// [`as_slice_ptr`](PyXBuffer::as_slice_ptr) for memory contiguous in
    /// Fortran order: the items in memory order, first index fastest (as
    /// PyO3's `as_fortran_slice_ptr`; `None` when the memory is not
    /// Fortran-contiguous).
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let m = py.eval(c"memoryview(bytes(range(6))).cast('B', (2, 3))", None, None)?;
    ///     let buf = PyXBuffer::<u8>::get(&m)?; // C order: not Fortran-contiguous
    ///     assert!(buf.as_fortran_slice_ptr().is_none());
    ///     assert_eq!(buf.as_slice_ptr().map(|p| p.len()), Some(6));
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn as_fortran_slice_ptr(&self) -> Option<NonNull<[T]>> {
        self.slice_ptr_in(true)
    }

    /// [`as_slice_ptr`](PyXBuffer::as_slice_ptr) for writing: also `None`
    /// for read-only memory. Writing through it is sound only when nobody
    /// else reads or writes the memory meanwhile, which only an exclusive
    /// grant promises.
    pub fn as_mut_slice_ptr(&self) -> Option<NonNull<[T]>> {
        self.mut_slice_ptr_in(false)
    }

    /// [`as_mut_slice_ptr`](PyXBuffer::as_mut_slice_ptr) for memory
    /// contiguous in Fortran order.
    pub fn as_fortran_mut_slice_ptr(&self) -> Option<NonNull<[T]>> {
        self.mut_slice_ptr_in(true)
    }

    fn slice_ptr_in(&self, fortran: bool) -> Option<NonNull<[T]>> {
        let (p, n) = self.host_items_in(fortran)?;
        NonNull::new(ptr::slice_from_raw_parts_mut(p.cast_mut(), n))
    }

    fn mut_slice_ptr_in(&self, fortran: bool) -> Option<NonNull<[T]>> {
        if self.readonly() {
            return None;
        }
        self.slice_ptr_in(fortran)
    }

    fn alloc_copy(
        &self,
        copy: impl FnOnce(*const sys::pyxbuf_view, *mut c_void, usize) -> i32,
    ) -> PyResult<Vec<T>> {
        let n = self.item_count();
        let nbytes = n * mem::size_of::<T>();
        if nbytes != self.len_bytes() {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: the view's len ({} bytes) is not its {n} items of {} bytes",
                self.len_bytes(),
                mem::size_of::<T>()
            )));
        }
        let mut out: Vec<T> = Vec::with_capacity(n);
        let rc = self.with_view(|v| copy(v, out.as_mut_ptr().cast(), nbytes));
        self.check(rc)?;
        // SAFETY: the copy wrote all nbytes of the spare capacity.
        let spare = unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<MaybeUninit<u8>>(), nbytes)
        };
        T::normalize_bytes(spare);
        // SAFETY: n items were written and made valid T values.
        unsafe { out.set_len(n) };
        Ok(out)
    }

    /// The items in C order, for host and device memory alike (device
    /// memory is copied by its backend after waiting for the producer's
    /// event).
    pub fn copy_to_host(&self) -> PyResult<Vec<T>> {
        // SAFETY: a valid view and a destination of exactly nbytes; the thread
        // is attached (the C function detaches around the copy itself).
        self.alloc_copy(|v, dst, n| unsafe { sys::pyxbuf_copy_to_host(v, dst, n) })
    }

    fn host_copy(&self, order: u8) -> PyResult<Vec<T>> {
        // SAFETY: a valid view and a destination of exactly nbytes; device
        // views are refused by the C function with BufferError.
        self.alloc_copy(|v, dst, n| unsafe {
            sys::pyxbuf_view_copy_contiguous(v, dst, n, order as std::ffi::c_char)
        })
    }

    /// The items of host memory in C order (`BufferError` for device memory:
    /// use [`copy_to_host`](PyXBuffer::copy_to_host)).
    pub fn to_vec(&self) -> PyResult<Vec<T>> {
        self.host_copy(b'C')
    }

    /// The items of host memory in Fortran order.
    pub fn to_fortran_vec(&self) -> PyResult<Vec<T>> {
        self.host_copy(b'F')
    }

    fn copy_into(&self, target: &mut [T], order: u8) -> PyResult<()> {
        // SAFETY: a valid view and a destination of exactly nbytes.
        self.copy_into_with(target, |v, dst, nbytes| unsafe {
            sys::pyxbuf_view_copy_contiguous(v, dst, nbytes, order as std::ffi::c_char)
        })
    }

    /// `copy_into` with the C copy as a parameter (the tests' seam).
    fn copy_into_with(
        &self,
        target: &mut [T],
        copy: impl FnOnce(*const sys::pyxbuf_view, *mut c_void, usize) -> i32,
    ) -> PyResult<()> {
        if target.len() != self.item_count() {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: slice of {} items cannot receive the buffer's {} items",
                target.len(),
                self.item_count()
            )));
        }
        let nbytes = mem::size_of_val(target);
        let rc = self.with_view(|v| copy(v, target.as_mut_ptr().cast(), nbytes));
        // Valid values first, whatever the copy returned: a copy that wrote
        // some bytes and then failed must not leave a `bool` of 2 behind in
        // the caller's slice.
        // SAFETY: `target`'s bytes, initialised (a `&mut [T]`) and perhaps
        // overwritten; viewing them as MaybeUninit<u8> allows any bits.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(target.as_mut_ptr().cast::<MaybeUninit<u8>>(), nbytes)
        };
        T::normalize_bytes(bytes);
        self.check(rc)
    }

    /// Copy the items of host memory, in C order, into `target` (exactly
    /// `item_count()` long).
    pub fn copy_to_slice(&self, target: &mut [T]) -> PyResult<()> {
        self.copy_into(target, b'C')
    }

    /// Copy the items of host memory, in Fortran order, into `target`.
    pub fn copy_to_fortran_slice(&self, target: &mut [T]) -> PyResult<()> {
        self.copy_into(target, b'F')
    }
}

impl<'py, T: Element> PyXBuffer<'py, T, Exclusive> {
    /// The items as a mutable slice — only under an **exclusive** grant, on
    /// writable, host, C-contiguous memory aligned for `T`.
    ///
    /// Exists only on buffers requested with
    /// [`borrow_exclusive`](crate::Request::borrow_exclusive) (or
    /// [`writable`](crate::Request::writable)), and takes `&mut self`, so no other
    /// slice of this view can be alive.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::{Exclusive, PyXBuffer};
    /// Python::attach(|py| -> PyResult<()> {
    ///     let data = pyo3::types::PyByteArray::new(py, b"abc");
    ///     let mut buf = PyXBuffer::<u8, Exclusive>::get(&data)?;
    ///     buf.as_mut_slice().unwrap().make_ascii_uppercase();
    ///     // While it is held, pyxbuf refuses every other borrow of the memory.
    ///     assert!(PyXBuffer::<u8>::get(&data).is_err());
    ///     drop(buf);
    ///     assert_eq!(data.to_vec(), b"ABC");
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        self.mut_slice_in(false)
    }

    /// [`as_mut_slice`](PyXBuffer::as_mut_slice) for memory contiguous in
    /// Fortran order.
    pub fn as_fortran_mut_slice(&mut self) -> Option<&mut [T]> {
        self.mut_slice_in(true)
    }

    fn mut_slice_in(&mut self, fortran: bool) -> Option<&mut [T]> {
        if !self.grants().exclusive() || self.readonly() {
            return None;
        }
        let (p, n) = self.host_items_in(fortran)?;
        // SAFETY: as in as_slice, plus: the exclusive grant means no other
        // view reads or writes the memory (through pyxbuf; enforced grants:
        // at all) while this one lives, the memory is writable, and `&mut
        // self` makes this the only slice of this view.
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n * mem::size_of::<T>()) };
        if !T::valid_bytes(bytes) {
            return None;
        }
        // SAFETY: as above; every item is a valid T.
        Some(unsafe { std::slice::from_raw_parts_mut(p.cast_mut(), n) })
    }

    /// Copy `source` (exactly `item_count()` items, C order) into the
    /// buffer's host memory under an exclusive grant; strided layouts are
    /// written item by item. `BufferError` without the grant or for device
    /// memory. PyO3: `copy_from_slice`.
    pub fn copy_from_slice(&mut self, source: &[T]) -> PyResult<()> {
        self.copy_from_in(source, false)
    }

    /// [`copy_from_slice`](PyXBuffer::copy_from_slice) with `source` in
    /// Fortran order (first index fastest). PyO3: `copy_from_fortran_slice`.
    pub fn copy_from_fortran_slice(&mut self, source: &[T]) -> PyResult<()> {
        self.copy_from_in(source, true)
    }

    fn copy_from_in(&mut self, source: &[T], fortran: bool) -> PyResult<()> {
        if source.len() != self.item_count() {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: slice of {} items cannot fill the buffer's {} items",
                source.len(),
                self.item_count()
            )));
        }
        if !self.grants().exclusive() || self.readonly() || !self.is_host() {
            return Err(PyBufferError::new_err(
                "pyxbuf: copy_from_slice needs writable host memory under an exclusive grant",
            ));
        }
        if let Some(items) = self.mut_slice_in(fortran) {
            items.copy_from_slice(source);
            return Ok(());
        }
        let shape = self.shape().to_vec();
        let mut index = vec![0usize; shape.len()];
        let order: Vec<usize> = if fortran {
            (0..shape.len()).collect()
        } else {
            (0..shape.len()).rev().collect()
        };
        for value in source {
            let p = self.get_ptr(&index).cast::<T>();
            // SAFETY: an in-bounds item of writable host memory this view holds
            // exclusively; unaligned writes are allowed.
            unsafe { p.write_unaligned(*value) };
            for &d in &order {
                index[d] += 1;
                if index[d] < shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 25, item 8: a copy into `&mut [bool]` that writes bytes and then
    /// fails leaves no invalid `bool` behind (the bytes are made 0 or 1
    /// before the error is returned).
    #[test]
    fn failed_copy_leaves_only_valid_bools() {
        Python::attach(|py| {
            let data = py
                .eval(c"memoryview(bytes([0, 1, 1, 0])).cast('?')", None, None)
                .unwrap();
            let buf = PyXBuffer::<bool>::get(&data).unwrap();
            let mut target = [false; 4];
            let err = buf
                .copy_into_with(&mut target, |_, dst, n| {
                    // SAFETY: `dst` is the target's n bytes.
                    unsafe { ptr::write_bytes(dst.cast::<u8>(), 2, n) };
                    PyBufferError::new_err("pyxbuf: the copy failed halfway").restore(py);
                    -1
                })
                .unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
            assert!(err.to_string().contains("failed halfway"), "{err}");
            // Read as bytes: a `bool` read of a 2 would itself be the bug.
            // SAFETY: the target's 4 initialised bytes.
            let bytes = unsafe { std::slice::from_raw_parts(target.as_ptr().cast::<u8>(), 4) };
            assert!(
                bytes.iter().all(|&b| b <= 1),
                "invalid bools left: {bytes:?}"
            );
        });
    }
}
