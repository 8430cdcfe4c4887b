//! The producer side: export a `#[pyclass]`'s host or device memory through
//! the extended buffer protocol, with borrows counted for it.
//!
//! A class implements [`ExportBuffer`] (what it exports, and where its
//! [`BorrowCounter`] is), forwards PyO3's `__getbuffer__` and
//! `__releasebuffer__` to [`getbuffer`] and [`releasebuffer`], and declares
//! that it speaks the extended protocol with the class attribute
//! `__pyxbuf_supported_flags__` (or [`declare_supported`]). [`HostArray`] is
//! ready-made storage that does the bookkeeping for host memory. Forwarding
//! `__dlpack__` and `__dlpack_device__` to [`dlpack`] and [`dlpack_device`]
//! exports the same memory through DLPack under the same borrow rules
//! ([`declare_dlpack_exchange_api`] adds DLPack's C exchange table), and
//! [`wrap`] makes a zero-copy `pyxbuf.Exporter` of any object's memory.
//!
//! ```
//! use std::os::raw::c_int;
//! use pyo3::{ffi, prelude::*};
//! use pyxbuf::export::{self, BorrowCounter, ExportBuffer, ExportDesc, HostArray};
//! use pyxbuf::PyXBuffer;
//!
//! #[pyclass(frozen)]
//! struct Samples {
//!     data: HostArray<f32>,
//! }
//!
//! // SAFETY: HostArray keeps its memory, shape and strides in place and
//! // unchanged while views exist.
//! unsafe impl ExportBuffer for Samples {
//!     fn export_desc(&self) -> ExportDesc<'_> {
//!         self.data.desc()
//!     }
//!     fn borrow_counter(&self) -> &BorrowCounter {
//!         self.data.borrows()
//!     }
//! }
//!
//! #[pymethods]
//! impl Samples {
//!     #[classattr]
//!     #[allow(non_upper_case_globals)]
//!     const __pyxbuf_supported_flags__: i32 = export::SUPPORTED_FLAGS;
//!
//!     unsafe fn __getbuffer__(
//!         slf: Bound<'_, Self>,
//!         view: *mut ffi::Py_buffer,
//!         flags: c_int,
//!     ) -> PyResult<()> {
//!         // SAFETY: PyO3 passes the view and flags of bf_getbuffer.
//!         unsafe { export::getbuffer(&slf, view, flags) }
//!     }
//!
//!     unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
//!         // SAFETY: the view getbuffer filled, released once.
//!         unsafe { export::releasebuffer(self, view) }
//!     }
//! }
//!
//! Python::attach(|py| -> PyResult<()> {
//!     let samples = Bound::new(py, Samples { data: HostArray::from_vec(vec![1.0, 2.0, 3.0]) })?;
//!     let buf = PyXBuffer::<f32>::get(samples.as_any())?;
//!     assert!(buf.grants().is_enforced()); // granted by the producer itself
//!     assert_eq!(buf.as_slice(), Some(&[1.0, 2.0, 3.0][..]));
//!     // A writer is refused while the shared borrow lives ...
//!     assert!(PyXBuffer::<f32>::request().writable().get(samples.as_any()).is_err());
//!     drop(buf);
//!     // ... and granted afterwards.
//!     let mut w = PyXBuffer::<f32>::request().writable().get(samples.as_any())?;
//!     w.as_mut_slice().unwrap()[0] = 10.0;
//!     drop(w);
//!     assert_eq!(samples.get().data.read(|x| x[0])?, 10.0);
//!     Ok(())
//! })
//! .unwrap();
//! ```

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void, CStr};
use std::mem::{self, MaybeUninit};
use std::ptr;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::PyClass;
use pyxbuf_sys as sys;

use crate::device::Device;
use crate::element::Element;
use crate::Grants;

/// Every classic and extended request flag: what a type exporting through
/// [`getbuffer`] supports. The value of `__pyxbuf_supported_flags__`.
pub const SUPPORTED_FLAGS: i32 = sys::PYXBUF_CLASSIC_FLAGS | sys::PYXBUF_EXTENDED_FLAGS;

/// Record that `C` speaks the extended protocol (`SUPPORTED_FLAGS`), for
/// classes that do not set the class attribute `__pyxbuf_supported_flags__`.
/// Without either, pyxbuf treats the class as a classic producer: no device
/// memory, and borrows only from pyxbuf's cooperative registry.
pub fn declare_supported<C: PyClass>(py: Python<'_>) -> PyResult<()> {
    let ty = C::type_object(py);
    // SAFETY: a live, ready type object; the thread is attached.
    let rc = unsafe {
        sys::pyxbuf_type_set_supported_flags(
            ty.as_ptr().cast::<ffi::PyTypeObject>(),
            SUPPORTED_FLAGS,
        )
    };
    if rc < 0 {
        Err(PyErr::fetch(py))
    } else {
        Ok(())
    }
}

/// Live views and borrows of an exporter (`pyxbuf_borrow_counter` behind a
/// lock, so the class stays `Sync`).
///
/// pyxbuf's rules: an exclusive borrow only when no other view is live; a
/// shared borrow only when no exclusive borrow and no writable view is live;
/// plain requests refused while an exclusive borrow is live, and handed out
/// read-only while a shared borrow is.
#[derive(Debug, Default)]
pub struct BorrowCounter(Mutex<sys::pyxbuf_borrow_counter>);

impl BorrowCounter {
    /// No views.
    pub const fn new() -> BorrowCounter {
        BorrowCounter(Mutex::new(sys::pyxbuf_borrow_counter {
            views: 0,
            writable: 0,
            shared: 0,
            exclusive: 0,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, sys::pyxbuf_borrow_counter> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A snapshot: live views, writable views, shared and exclusive borrows.
    pub fn counts(&self) -> sys::pyxbuf_borrow_counter {
        *self.lock()
    }

    /// Live views of any kind.
    pub fn views(&self) -> i64 {
        self.lock().views
    }

    /// `BufferError` while any view is live (like `bytearray`'s "Existing
    /// exports of data: object cannot be re-sized").
    ///
    /// Only a check: a view may be taken right after it answers (by Python
    /// code the act runs, or another thread), so to *act* on the answer --
    /// reallocate, resize, reshape or write exported memory -- hold
    /// [`exclusive_guard`](BorrowCounter::exclusive_guard) across the act
    /// instead.
    pub fn ensure_no_views(&self, what: &str) -> PyResult<()> {
        let c = self.counts();
        if c.views == 0 {
            return Ok(());
        }
        Err(no_views_error(what, &c))
    }

    /// Borrow the memory as its owner, exclusively, for as long as the
    /// guard lives: `BufferError` while any view is live (the message names
    /// `what` and the live views), and while the guard lives every request
    /// is refused -- so the check holds across what the owner then does
    /// (reallocate, resize, reshape, write). The guard counts as one view
    /// with an exclusive borrow ([`views`](BorrowCounter::views) says 1).
    ///
    /// ```
    /// use pyxbuf::export::BorrowCounter;
    /// let counter = BorrowCounter::new();
    /// {
    ///     let _guard = counter.exclusive_guard("resize the array").unwrap();
    ///     // ... reallocate: no consumer can acquire a view meanwhile.
    ///     assert_eq!(counter.views(), 1);
    /// }
    /// assert_eq!(counter.views(), 0);
    /// ```
    pub fn exclusive_guard(&self, what: &str) -> PyResult<OwnerBorrow<'_>> {
        self.owner_borrow(true, what)
    }

    /// Borrow the memory as its owner, shared, for as long as the guard
    /// lives: `BufferError` while a writable view or an exclusive borrow is
    /// live; while the guard lives, writable and exclusive requests are
    /// refused and shared ones granted -- so the owner may read the memory
    /// knowing nobody writes it.
    pub fn shared_guard(&self, what: &str) -> PyResult<OwnerBorrow<'_>> {
        self.owner_borrow(false, what)
    }

    fn owner_borrow(&self, exclusive: bool, what: &str) -> PyResult<OwnerBorrow<'_>> {
        let mut c = self.lock();
        // The owner is one more borrower, under the consumers' rules: reading
        // is a shared borrow (no exclusive borrow, no writable view), writing
        // an exclusive one (no other view at all).
        let conflict = if exclusive {
            c.views > 0
        } else {
            c.exclusive > 0 || c.writable > 0
        };
        if conflict {
            let counts = *c;
            // Format the error without the lock: it can run Python (a
            // finalizer releasing another view takes the lock).
            drop(c);
            return Err(if exclusive {
                no_views_error(what, &counts)
            } else {
                PyBufferError::new_err(format!(
                    "pyxbuf: cannot {what}: a writable view or an exclusive borrow of the memory \
                     is live ({} view(s), {} writable, {} exclusive borrow(s)); release it first",
                    counts.views, counts.writable, counts.exclusive
                ))
            });
        }
        c.views += 1;
        if exclusive {
            c.exclusive += 1;
        } else {
            c.shared += 1;
        }
        Ok(OwnerBorrow {
            counter: self,
            exclusive,
        })
    }
}

fn no_views_error(what: &str, c: &sys::pyxbuf_borrow_counter) -> PyErr {
    PyBufferError::new_err(format!(
        "pyxbuf: cannot {what}: {} view(s) of the memory are live ({} shared, {} exclusive \
         borrow(s)); release them first",
        c.views, c.shared, c.exclusive
    ))
}

/// The owner's borrow of its exported memory, from
/// [`BorrowCounter::exclusive_guard`] or [`BorrowCounter::shared_guard`]:
/// counted as a view with a borrow until dropped, so consumers' requests
/// are decided as if a consumer held it.
#[must_use = "the borrow ends when the guard is dropped"]
#[derive(Debug)]
pub struct OwnerBorrow<'a> {
    counter: &'a BorrowCounter,
    exclusive: bool,
}

impl OwnerBorrow<'_> {
    /// Whether this is an exclusive borrow (else shared).
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }
}

impl Drop for OwnerBorrow<'_> {
    fn drop(&mut self) {
        let mut c = self.counter.lock();
        c.views -= 1;
        if self.exclusive {
            c.exclusive -= 1;
        } else {
            c.shared -= 1;
        }
    }
}

/// The device description an exporter of device memory keeps alive for its
/// views (a `pyxbuf_device_info`): device and the sync event consumers wait on.
#[derive(Debug)]
pub struct DeviceInfo(sys::pyxbuf_device_info);

// SAFETY: the info is plain data plus an event handle the producer owns;
// pyxbuf only passes the handle to the device's backend, from any thread.
unsafe impl Send for DeviceInfo {}
// SAFETY: as above; shared access only reads it.
unsafe impl Sync for DeviceInfo {}

impl DeviceInfo {
    /// Memory on `device`, ready now (no event).
    pub fn new(device: Device) -> DeviceInfo {
        let (device_type, device_id) = device.dlpack();
        DeviceInfo(sys::pyxbuf_device_info {
            size: mem::size_of::<sys::pyxbuf_device_info>() as u32,
            device_type,
            device_id,
            ..Default::default()
        })
    }

    /// The event consumers must wait for (recorded by the producer after its
    /// last write; NULL = ready) and the stream it was recorded on.
    ///
    /// # Safety
    /// `event` is NULL or an event of the device's backend that stays valid
    /// while views exist; change it only while no view is live.
    pub unsafe fn set_sync_event(&mut self, event: *mut c_void, stream: i64) {
        self.0.sync_event = event;
        self.0.stream = stream;
    }

    /// The device.
    pub fn device(&self) -> Device {
        Device::from_dlpack(self.0.device_type, self.0.device_id)
    }
}

/// What an exporter exports: memory, item type, shape, strides, device.
/// Built from references into the exporter, so it cannot outlive them.
#[derive(Debug, Clone, Copy)]
pub struct ExportDesc<'a> {
    buf: *mut c_void,
    shape: &'a [isize],
    strides: Option<&'a [isize]>,
    format: &'static CStr,
    itemsize: usize,
    readonly: bool,
    device: Option<&'a DeviceInfo>,
}

impl<'a> ExportDesc<'a> {
    /// `T` items at `buf` with `shape`, in C order, host memory, writable.
    /// What makes exporting it sound is [`ExportBuffer`]'s contract.
    pub fn new<T: Element>(buf: *mut T, shape: &'a [isize]) -> ExportDesc<'a> {
        ExportDesc {
            buf: buf.cast(),
            shape,
            strides: None,
            format: T::FORMAT,
            itemsize: mem::size_of::<T>(),
            readonly: false,
            device: None,
        }
    }

    /// Byte strides per dimension (default: C order).
    pub fn strides(mut self, strides: &'a [isize]) -> Self {
        self.strides = Some(strides);
        self
    }

    /// Export read-only memory: writable requests are refused.
    pub fn readonly(mut self, readonly: bool) -> Self {
        self.readonly = readonly;
        self
    }

    /// The memory is on a device, described by `info` (kept by the exporter).
    pub fn on_device(mut self, info: &'a DeviceInfo) -> Self {
        self.device = Some(info);
        self
    }
}

/// A `#[pyclass]` that exports memory through [`getbuffer`] /
/// [`releasebuffer`].
///
/// # Safety
///
/// While the object has live views ([`BorrowCounter::views`] > 0) the memory,
/// shape and strides [`export_desc`](ExportBuffer::export_desc) describes
/// stay valid, in place and unchanged, and the class does not write the
/// memory itself while a shared or exclusive borrow is live, nor read it
/// while an exclusive borrow is (see [`HostArray`], which does all of this).
/// `export_desc` describes the same memory every time while views are live,
/// writable only if writing through the pointer is allowed (memory the class
/// holds in an `UnsafeCell` or owns through a raw pointer, never memory
/// behind a plain `&`).
pub unsafe trait ExportBuffer: PyClass {
    /// What to export.
    fn export_desc(&self) -> ExportDesc<'_>;
    /// The object's borrow counter.
    fn borrow_counter(&self) -> &BorrowCounter;
}

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
            C::NAME,
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
            C::NAME
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
    let n = C::NAME.len().min(name.len() - 1);
    name[..n].copy_from_slice(&C::NAME.as_bytes()[..n]);
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

    /// The description [`ExportBuffer::export_desc`] returns.
    pub fn desc(&self) -> ExportDesc<'_> {
        ExportDesc::new(UnsafeCell::raw_get(self.data.as_ptr()), &self.shape)
            .strides(&self.strides)
            .readonly(self.readonly)
    }

    /// The borrow counter [`ExportBuffer::borrow_counter`] returns.
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

/// A new `pyxbuf.Exporter` (pyxbuf's ready-made exporter type, borrow
/// counting included) holding `shape` items of `T` on `device`: zeroed host
/// memory, or device memory allocated by the device's backend (contents
/// undefined). Its `.device`, `.to_device()`, `.shape`, `.format` follow the
/// Array API.
///
/// ```
/// use pyo3::prelude::*;
/// use pyxbuf::{Device, PyXBuffer};
/// Python::attach(|py| -> PyResult<()> {
///     let e = pyxbuf::export::new_exporter::<half::bf16>(py, &[2, 3], Device::Cpu)?;
///     assert_eq!(e.getattr("format")?.extract::<String>()?, "[ml_dtypes$bfloat16]");
///     let buf = PyXBuffer::<half::bf16>::get(&e)?;
///     assert_eq!(buf.shape(), [2, 3]);
///     assert_eq!(buf.as_slice().unwrap()[5], half::bf16::ZERO);
///     Ok(())
/// })
/// .unwrap();
/// ```
pub fn new_exporter<'py, T: Element>(
    py: Python<'py>,
    shape: &[usize],
    device: Device,
) -> PyResult<Bound<'py, PyAny>> {
    let shape: Vec<isize> = shape.iter().map(|&n| n as isize).collect();
    let dev = device.raw();
    // SAFETY: a NUL-terminated format, `shape.len()` dims, a valid device;
    // the thread is attached; the result is a new reference or NULL with an
    // exception set.
    unsafe {
        let obj = sys::pyxbuf_exporter_new(
            T::FORMAT.as_ptr(),
            shape.len() as i32,
            shape.as_ptr(),
            0,
            &dev,
        );
        Bound::from_owned_ptr_or_err(py, obj)
    }
}

/// A new event recorded on `stream` of `info`'s device, after the work queued
/// there so far; NULL when no backend for the device is registered (pyxbuf
/// then cannot order anything on it, and neither can its consumers).
fn record_event(
    py: Python<'_>,
    info: &sys::pyxbuf_device_info,
    stream: i64,
) -> PyResult<*mut c_void> {
    let mut backend = sys::pyxbuf_backend::default();
    let mut err = sys::pyxbuf_error::default();
    // SAFETY: out-pointers to live locals; the backend's functions take the
    // context it gave and a device of its type.
    unsafe {
        if sys::pyxbuf_backend_get(info.device_type, &mut backend, ptr::null_mut()) != 0 {
            return Ok(ptr::null_mut());
        }
        let Some(record) = backend.event_record else {
            return Ok(ptr::null_mut());
        };
        let mut event = ptr::null_mut();
        if record(backend.ctx, info.device_id, stream, &mut event, &mut err) != 0 {
            sys::pyxbuf_error_raise(&err);
            return Err(PyErr::fetch(py));
        }
        Ok(event)
    }
}

/// The view a [`wrap`] exporter keeps alive, released when it dies.
unsafe extern "C" fn release_boxed_view(ctx: *mut std::ffi::c_void) {
    // SAFETY: `ctx` is the Box<pyxbuf_view> `wrap` leaked, acquired in
    // place; the exporter calls this once, with the GIL, when it dies.
    unsafe {
        let mut view = Box::from_raw(ctx.cast::<sys::pyxbuf_view>());
        sys::pyxbuf_release(&mut *view);
    }
}

/// A zero-copy `pyxbuf.Exporter` over `obj`'s memory (host or device),
/// from whatever protocol pyxbuf reads it through (DLPack, the CUDA Array
/// Interface, the classic buffer, `__array_interface__`, a `#[pyclass]`
/// exporting through [`getbuffer`]). It exports the memory through the
/// extended protocol with borrow counting, and through DLPack.
///
/// The exporter holds a borrow of `obj`'s memory for its whole life: shared
/// when `writable` is false (the exporter is then read-only, whatever `obj`
/// allows), exclusive when it is true. So no pyxbuf consumer can write `obj`
/// while the exporter hands out shared borrows, nor touch it at all while it
/// hands out an exclusive one. When `obj`'s producer enforces borrows
/// (pyxbuf's exporters, [`ExportBuffer`] classes), nobody can; when the
/// borrow is tracked (NumPy and other classic producers), code that bypasses
/// pyxbuf still can, as for any tracked grant — and so every grant the
/// exporter gives is tracked too ([`Grants::tracked`](crate::Grants::tracked)):
/// a wrapper never claims more than it holds. A producer that grants no
/// borrow is refused with `BufferError`.
pub fn wrap<'py>(
    obj: &Bound<'py, PyAny>,
    writable: bool,
    stream: Option<i64>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let flags = ffi::PyBUF_RECORDS_RO
        | sys::PYXBUF_DEVICE
        | if writable {
            ffi::PyBUF_WRITABLE | sys::PYXBUF_BORROW_EXCLUSIVE
        } else {
            sys::PYXBUF_BORROW_SHARED
        };
    // The view is acquired where it will live (a box the exporter owns), so
    // its self-references stay valid.
    let boxed: Box<MaybeUninit<sys::pyxbuf_view>> = Box::new(MaybeUninit::zeroed());
    let raw = Box::into_raw(boxed).cast::<sys::pyxbuf_view>();
    // SAFETY: writable storage for a view; a live object; attached thread.
    let rc = unsafe {
        match stream {
            None => sys::pyxbuf_get(obj.as_ptr(), raw, flags),
            Some(s) => sys::pyxbuf_get_stream(obj.as_ptr(), raw, flags, s),
        }
    };
    if rc != 0 {
        // SAFETY: the box leaked above, holding nothing.
        drop(unsafe { Box::from_raw(raw.cast::<MaybeUninit<sys::pyxbuf_view>>()) });
        return Err(PyErr::fetch(py));
    }
    // SAFETY: acquired in place above.
    let v = unsafe { &*raw };
    let grants = Grants::from_view(v.flags, v.ext_flags);
    if !(if writable {
        grants.exclusive()
    } else {
        grants.any()
    }) {
        let err = PyBufferError::new_err(format!(
            "pyxbuf: a zero-copy exporter of '{}' needs {} borrow of its memory, which was not \
             granted ({}); without it the memory could be written behind its consumers' backs; \
             copy the data instead (to_device)",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default(),
            if writable { "an exclusive" } else { "a shared" },
            if grants.shared() {
                "only a shared one"
            } else {
                "its producer ignores borrows"
            },
        ));
        // SAFETY: not adopted by an exporter: release it here.
        unsafe { release_boxed_view(raw.cast()) };
        return Err(err);
    }
    // The exporter adopts (and one day destroys) the event in the device info
    // it is given; the view's event is not ours to give. The request's stream
    // (`stream`, else the default stream) is made to wait for it, and a new
    // event recorded there after that wait is the exporter's: a consumer on
    // any stream that waits for it finds the producer's data, and one that
    // finds no event may trust it (SyncEvent::Ready).
    let mut own_info: Option<sys::pyxbuf_device_info> = None;
    if !v.device.is_null() && !v.device_info.is_null() {
        let on = stream.unwrap_or(sys::PYXBUF_STREAM_DEFAULT);
        // SAFETY: an acquired device view.
        if unsafe { sys::pyxbuf_device_wait(v, on) } != 0 {
            // SAFETY: not adopted by an exporter: release it here.
            unsafe { release_boxed_view(raw.cast()) };
            return Err(PyErr::fetch(py));
        }
        // SAFETY: a non-NULL device is a NUL-terminated identifier.
        if unsafe { CStr::from_ptr(v.device) } == sys::PYXBUF_DEVICE_DLPACK {
            // SAFETY: a "pyxbuf.dlpack" device's info is a pyxbuf_device_info.
            let mut info = unsafe { *v.device_info.cast::<sys::pyxbuf_device_info>() };
            match record_event(py, &info, on) {
                Ok(event) => info.sync_event = event,
                Err(err) => {
                    // SAFETY: not adopted by an exporter: release it here.
                    unsafe { release_boxed_view(raw.cast()) };
                    return Err(err);
                }
            }
            info.stream = on;
            own_info = Some(info);
        }
    }
    let device_info = own_info
        .as_mut()
        .map_or(v.device_info, |i| ptr::addr_of_mut!(*i).cast());
    let b = &v.base;
    let desc = sys::pyxbuf_export_desc {
        size: std::mem::size_of::<sys::pyxbuf_export_desc>() as u32,
        ndim: b.ndim,
        buf: b.buf,
        format: b.format,
        itemsize: b.itemsize,
        shape: b.shape,
        strides: b.strides,
        // Read-only unless asked otherwise: the shared borrow held on `obj`
        // promises that nobody writes it.
        readonly: if writable { b.readonly } else { 1 },
        // The exporter's grants are never stronger than its own borrow of
        // `obj`: tracked there, tracked on every grant it gives.
        tracked: i32::from(grants.tracked()),
        device: v.device,
        device_info,
        ..Default::default()
    };
    // SAFETY: the description points into the acquired view (copied by the
    // exporter except buf, which stays valid until release_boxed_view runs).
    let e = unsafe { sys::pyxbuf_exporter_wrap(&desc, Some(release_boxed_view), raw.cast()) };
    if e.is_null() {
        // SAFETY: not adopted by an exporter: release it here.
        unsafe { release_boxed_view(raw.cast()) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, e) })
}

/// `__dlpack__` for an [`ExportBuffer`] class: a DLPack capsule of the same
/// memory (host or device) under the same borrow rules as its buffer. The
/// capsule's tensor holds a shared borrow of `slf` until the consumer's
/// deleter runs, so the tensor is read-only (DLPack's read-only flag is
/// set) and the owner cannot write the memory meanwhile. `kwargs` are
/// `__dlpack__`'s (`stream`, `max_version`, `dl_device`, `copy`).
///
/// ```ignore
/// #[pyo3(signature = (**kwargs))]
/// fn __dlpack__<'py>(slf: &Bound<'py, Self>, kwargs: Option<&Bound<'py, PyDict>>)
///     -> PyResult<Bound<'py, PyAny>> {
///     pyxbuf::export::dlpack(slf, kwargs)
/// }
/// fn __dlpack_device__(&self) -> (i32, i32) {
///     pyxbuf::export::dlpack_device(self)
/// }
/// ```
pub fn dlpack<'py, C: ExportBuffer>(
    slf: &Bound<'py, C>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let exporter = wrap(slf.as_any(), false, None)?;
    exporter.call_method("__dlpack__", (), kwargs)
}

/// Give `C` DLPack 1.3's C exchange table, `__dlpack_c_exchange_api__` (call
/// once, at module initialisation): consumer frameworks then take its
/// objects' memory through C function pointers, without a Python call per
/// tensor. The managed tensors hold a view of the object under its borrow
/// rules until their deleter runs (see `pyxbuf_type_set_dlpack_exchange_api`
/// in `pyxbuf.h` for each function's behaviour).
pub fn declare_dlpack_exchange_api<C: PyClass>(py: Python<'_>) -> PyResult<()> {
    let ty = C::type_object(py);
    // SAFETY: a live, ready type object; the thread is attached.
    let rc = unsafe {
        sys::pyxbuf_type_set_dlpack_exchange_api(ty.as_ptr().cast::<ffi::PyTypeObject>())
    };
    if rc < 0 {
        Err(PyErr::fetch(py))
    } else {
        Ok(())
    }
}

/// `__dlpack_device__` for an [`ExportBuffer`] class: DLPack's
/// `(device_type, device_id)` of the memory it exports.
pub fn dlpack_device<C: ExportBuffer>(this: &C) -> (i32, i32) {
    match this.export_desc().device {
        Some(info) => (info.0.device_type, info.0.device_id),
        None => (sys::PYXBUF_DL_CPU, 0),
    }
}
