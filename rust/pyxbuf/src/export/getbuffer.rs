//! The buffer slots of an [`ExportBuffer`] class: [`getbuffer`] fills a view
//! and takes its borrow from the class's [`BorrowCounter`], [`releasebuffer`]
//! gives it back. `export_pymethods!` forwards a class's `__getbuffer__` and
//! `__releasebuffer__` to them.

use std::ffi::c_int;
use std::mem;
use std::ptr;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
// PyO3 0.28 and 0.29 also have a (deprecated) `PyTypeInfo::NAME`: name the trait.
use pyo3::PyClass;
use pyxbuf_sys as sys;

use super::{BorrowCounter, ExportBuffer};

/// Fill a view for `slf`: call from `__getbuffer__`.
///
/// Honours the classic request flags as NumPy does and the extended ones
/// (device memory only with `PYXBUF_DEVICE`; shared / exclusive borrows
/// granted or refused with `BufferError` by the counter).
///
/// # Safety
/// `view` and `flags` are what CPython (through PyO3) passed to
/// `bf_getbuffer`: `view` points to a `Py_buffer` — inside a `pyxbuf_view`
/// when `flags` carries extended bits.
pub unsafe fn getbuffer<C: ExportBuffer>(
    slf: &Bound<'_, C>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    let py = slf.py();
    let this = slf.try_borrow()?;
    let d = this.export_desc();
    let ndim = d.shape.len();
    if ndim > sys::PYXBUF_MAX_NDIM || d.strides.is_some_and(|s| s.len() != ndim) {
        return Err(PyValueError::new_err(format!(
            "pyxbuf: {} exports {ndim} dimensions with {} strides (at most {} dimensions, one \
             stride each)",
            <C as PyClass>::NAME,
            d.strides.map_or(ndim, <[isize]>::len),
            sys::PYXBUF_MAX_NDIM
        )));
    }
    // pyxbuf_export_fill needs strides above one dimension, and they must
    // outlive the view: they come from the exporter (HostArray has them).
    if ndim > 1 && d.strides.is_none() {
        return Err(PyValueError::new_err(format!(
            "pyxbuf: {} exports {ndim} dimensions without strides; give C-order strides that \
             live as long as the object (ExportDesc::strides)",
            <C as PyClass>::NAME
        )));
    }
    // Custom items' format to a classic consumer (memoryview, bytes(), NumPy)
    // that cannot read it: refused, as PYXBUF_EXTENDED_FORMAT asks, so that
    // np.asarray falls back to __array__ (numpy_array), which gives their
    // NumPy dtype. (Device memory without PYXBUF_DEVICE: export_fill's
    // refusal, the first thing to fix.) pyxbuf's formats open every custom
    // type with '[' and use it nowhere else.
    if flags & ffi::PyBUF_FORMAT != 0
        && flags & sys::PYXBUF_EXTENDED_FORMAT == 0
        && (d.device.is_none() || flags & sys::PYXBUF_DEVICE != 0)
        && d.format.to_bytes().contains(&b'[')
    {
        return Err(PyBufferError::new_err(format!(
            "pyxbuf: {}'s format '{}' holds a custom type, which a classic buffer consumer \
             (memoryview, bytes(), np.frombuffer) cannot read; np.asarray(x) gives a NumPy \
             array of its dtype (zero-copy), and pyxbuf's consumers (PyXBuffer<T>, \
             pyxbuf.inspect, pyxbuf_get) read the items",
            <C as PyClass>::NAME,
            d.format.to_string_lossy()
        )));
    }
    let desc = sys::pyxbuf_export_desc {
        size: mem::size_of::<sys::pyxbuf_export_desc>() as u32,
        ndim: ndim as i32,
        buf: d.buf,
        format: d.format.as_ptr(),
        itemsize: d.itemsize as isize,
        shape: d.shape.as_ptr().cast_mut(),
        strides: d.strides.map_or(ptr::null_mut(), |s| s.as_ptr().cast_mut()),
        readonly: i32::from(d.readonly),
        device: d
            .device
            .map_or(ptr::null(), |_| sys::PYXBUF_DEVICE_DLPACK.as_ptr()),
        device_info: d
            .device
            .map_or(ptr::null_mut(), |i| ptr::addr_of!(i.0).cast_mut().cast()),
        ..Default::default()
    };
    // SAFETY: the caller passes bf_getbuffer's view; the description's
    // pointers stay valid while views live (ExportBuffer's contract).
    if unsafe { sys::pyxbuf_export_fill(view, slf.as_ptr(), flags, &desc) } < 0 {
        return Err(PyErr::fetch(py));
    }
    let mut name = [0u8; 96];
    let n = <C as PyClass>::NAME.len().min(name.len() - 1);
    name[..n].copy_from_slice(&<C as PyClass>::NAME.as_bytes()[..n]);
    let rc = acquire_borrow(this.borrow_counter(), view, flags, &name);
    if rc < 0 {
        // SAFETY: export_fill stored a strong reference in view->obj; the
        // failed request must hold nothing.
        unsafe {
            let obj = mem::replace(&mut (*view).obj, ptr::null_mut());
            ffi::Py_XDECREF(obj);
        }
        return Err(PyErr::fetch(py));
    }
    Ok(())
}

/// `pyxbuf_borrow_acquire` without holding the counter's lock across it: a
/// refusal formats a Python exception, which can run a garbage collection,
/// a finalizer, and the `__releasebuffer__` of another view of this very
/// object -- which takes the lock. So the decision is made on a snapshot,
/// outside the lock, and stored only if the counter has not changed since
/// (else decided again). A successful decision runs no Python code.
fn acquire_borrow(
    counter: &BorrowCounter,
    view: *mut ffi::Py_buffer,
    flags: c_int,
    name: &[u8; 96],
) -> c_int {
    // SAFETY: `view` is the view getbuffer just filled.
    let readonly = unsafe { (*view).readonly };
    loop {
        let before = *counter.lock();
        let mut after = before;
        // A retry starts from the view as export_fill left it.
        // SAFETY: as above.
        unsafe { (*view).readonly = readonly };
        // SAFETY: a view just filled for this object, a counter of our own
        // (no lock held), and a NUL-terminated name.
        let rc =
            unsafe { sys::pyxbuf_borrow_acquire(&mut after, view, flags, name.as_ptr().cast()) };
        if rc < 0 {
            return rc;
        }
        let mut current = counter.lock();
        if same_counts(&current, &before) {
            *current = after;
            return rc;
        }
        drop(current);
        // A grant decided tracked holds a registry borrow: give it back
        // before deciding again.
        // SAFETY: the view this call just counted in `after`, released once.
        unsafe { sys::pyxbuf_borrow_release(&mut after, view) };
    }
}

fn same_counts(a: &sys::pyxbuf_borrow_counter, b: &sys::pyxbuf_borrow_counter) -> bool {
    (a.views, a.writable, a.shared, a.exclusive) == (b.views, b.writable, b.shared, b.exclusive)
}

/// Undo [`getbuffer`]: call from `__releasebuffer__`.
///
/// # Safety
/// `view` is a view [`getbuffer`] filled for this object, released once.
pub unsafe fn releasebuffer<C: ExportBuffer>(this: &C, view: *mut ffi::Py_buffer) {
    let mut counter = this.borrow_counter().lock();
    // SAFETY: the caller's contract; the counter is locked.
    unsafe { sys::pyxbuf_borrow_release(&mut *counter, view) };
}

/// NumPy 2's `__array__(dtype=None, copy=None)` of an exporting class (what
/// [`export_pymethods!`](crate::export_pymethods) gives it): an ndarray over
/// the object's memory through a view of it, zero-copy unless `copy` is true
/// or `dtype` needs a conversion; custom items (`bf16`, float8...) as their
/// NumPy dtype (`ml_dtypes.bfloat16`), strides and read-only flag kept, the
/// view held until the array is gone. The borrow counter's refusal when a
/// borrow forbids a plain view; `pyxbuf.ItemTypeError` when NumPy has no
/// dtype for the items. (`pyxbuf_numpy_array` in C.)
pub fn numpy_array<'py>(
    obj: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    copy: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let dtype = dtype.map_or(ptr::null_mut(), Bound::as_ptr);
    let copy = copy.map_or(ptr::null_mut(), Bound::as_ptr);
    // SAFETY: live objects (or NULL, read as None); the thread is attached.
    let out = unsafe { sys::pyxbuf_numpy_array(obj.as_ptr(), dtype, copy) };
    if out.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference, non-NULL.
    Ok(unsafe { Bound::from_owned_ptr(py, out) })
}
