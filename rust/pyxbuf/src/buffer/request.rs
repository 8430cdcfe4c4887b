//! Requests: the borrow mode as a type ([`Shared`], [`Exclusive`]) and the
//! [`Request`] builder.

use std::fmt;
use std::marker::PhantomData;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyxbuf_sys as sys;

use super::{type_name, Grants, PyXBuffer, PyXUntypedBuffer};
use crate::element::Element;
use crate::words::count;

mod sealed {
    pub trait Sealed {}
}

/// The borrow a [`PyXBuffer`] asked for, as a type: [`Shared`] (the default)
/// or [`Exclusive`]. Only an `Exclusive` buffer has
/// [`as_mut_slice`](PyXBuffer::as_mut_slice).
pub trait BorrowMode: sealed::Sealed + 'static {
    /// The request flags of a plain `PyXBuffer::<T, Self>::get`.
    #[doc(hidden)]
    const FLAGS: i32;
}

/// Asked for a shared borrow: nobody may write while the view lives
/// (read-only request, `PYXBUF_BORROW_SHARED`). The default mode.
#[derive(Debug, Clone, Copy)]
pub enum Shared {}

/// Asked for an exclusive borrow: only this view may read or write while it
/// lives (writable request, `PYXBUF_BORROW_EXCLUSIVE`).
#[derive(Debug, Clone, Copy)]
pub enum Exclusive {}

impl sealed::Sealed for Shared {}
impl sealed::Sealed for Exclusive {}

/// Strides, shape and a format, read-only (`PyBUF_RECORDS_RO`).
const BASE_FLAGS: i32 = ffi::PyBUF_STRIDES | ffi::PyBUF_FORMAT;

impl BorrowMode for Shared {
    const FLAGS: i32 = BASE_FLAGS | sys::PYXBUF_BORROW_SHARED;
}

impl BorrowMode for Exclusive {
    const FLAGS: i32 = BASE_FLAGS | ffi::PyBUF_WRITABLE | sys::PYXBUF_BORROW_EXCLUSIVE;
}

/// A request for a [`PyXBuffer`], built from [`PyXBuffer::request`]:
/// read-only, strided, with a format and a shared borrow asked for, then
/// whatever the builder adds.
///
/// The borrow is part of the type: [`borrow_exclusive`](Request::borrow_exclusive)
/// (or [`writable`](Request::writable), which means the same) turns a
/// `Request<T, Shared>` into a `Request<T, Exclusive>`, whose buffers alone
/// have [`as_mut_slice`](PyXBuffer::as_mut_slice).
///
/// ```
/// use pyo3::prelude::*;
/// use pyxbuf::{Exclusive, PyXBuffer};
/// Python::attach(|py| -> PyResult<()> {
///     let data = pyo3::types::PyByteArray::new(py, &[1, 2, 3]);
///     let mut buf: PyXBuffer<u8, Exclusive> =
///         PyXBuffer::<u8>::request().borrow_exclusive().contiguous().get(&data)?;
///     buf.as_mut_slice().unwrap()[0] = 7;
///     drop(buf);
///     assert_eq!(data.to_vec(), [7, 2, 3]);
///     Ok(())
/// })
/// .unwrap();
/// ```
pub struct Request<T, M: BorrowMode = Shared> {
    flags: i32,
    stream: Option<i64>,
    require_borrow: bool,
    require_enforced: bool,
    _t: PhantomData<fn() -> (T, M)>,
}

impl<T, M: BorrowMode> Clone for Request<T, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, M: BorrowMode> Copy for Request<T, M> {}

impl<T, M: BorrowMode> fmt::Debug for Request<T, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("flags", &format_args!("{:#x}", self.flags))
            .field("stream", &self.stream)
            .field("require_borrow", &self.require_borrow)
            .field("require_enforced", &self.require_enforced)
            .finish()
    }
}

impl<T, M: BorrowMode> Request<T, M> {
    fn with<N: BorrowMode>(self, flags: i32) -> Request<T, N> {
        Request {
            flags,
            stream: self.stream,
            require_borrow: self.require_borrow,
            require_enforced: self.require_enforced,
            _t: PhantomData,
        }
    }

    /// Ask for a shared borrow (the default): read-only, nobody writes while
    /// the view lives. Drops a writable/exclusive request.
    pub fn borrow_shared(self) -> Request<T, Shared> {
        let flags = self.flags & !(ffi::PyBUF_WRITABLE | sys::PYXBUF_BORROW_EXCLUSIVE)
            | sys::PYXBUF_BORROW_SHARED;
        self.with(flags)
    }

    /// Ask for an exclusive borrow of writable memory: only this view reads
    /// or writes while it lives. Its buffers have
    /// [`as_mut_slice`](PyXBuffer::as_mut_slice).
    pub fn borrow_exclusive(self) -> Request<T, Exclusive> {
        let flags = self.flags & !sys::PYXBUF_BORROW_SHARED
            | ffi::PyBUF_WRITABLE
            | sys::PYXBUF_BORROW_EXCLUSIVE;
        self.with(flags)
    }

    /// Ask for no borrow at all: a read-only view without a grant, so
    /// [`as_slice`](PyXBuffer::as_slice) and cells return `None` and only the
    /// raw accessors read it. For what no borrow can cover: pyxbuf refuses to
    /// track a borrow of a view with suboffsets (its span is a table of
    /// pointers, not the items they reach), so a PIL-style array is read with
    /// `.indirect().without_borrow()`.
    pub fn without_borrow(self) -> Request<T, Shared> {
        let flags = self.flags
            & !(ffi::PyBUF_WRITABLE | sys::PYXBUF_BORROW_SHARED | sys::PYXBUF_BORROW_EXCLUSIVE);
        self.with(flags)
    }

    /// Ask for writable memory. Writing from safe Rust needs an exclusive
    /// borrow, so this is [`borrow_exclusive`](Request::borrow_exclusive)
    /// under the name a PyO3 user looks for.
    pub fn writable(self) -> Request<T, Exclusive> {
        self.borrow_exclusive()
    }

    /// Accept device (GPU) memory (`PYXBUF_DEVICE`); without it a producer
    /// whose memory is not on the host refuses with `BufferError`.
    pub fn device(self) -> Self {
        self.with(self.flags | sys::PYXBUF_DEVICE)
    }

    /// Require C-contiguous memory (`PyBUF_C_CONTIGUOUS`); the producer
    /// refuses otherwise.
    pub fn contiguous(self) -> Self {
        self.with(self.flags | ffi::PyBUF_C_CONTIGUOUS)
    }

    /// Accept PIL-style indirect arrays (`PyBUF_INDIRECT`): the view may carry
    /// suboffsets, which [`get_ptr`](PyXUntypedBuffer::get_ptr) follows and
    /// [`suboffsets`](PyXUntypedBuffer::suboffsets) returns. Without it a producer
    /// that hands out suboffsets is refused at acquisition. A view with
    /// suboffsets is refused any borrow (pyxbuf cannot track the items its
    /// pointers reach): add [`without_borrow`](Request::without_borrow).
    pub fn indirect(self) -> Self {
        self.with(self.flags | ffi::PyBUF_INDIRECT)
    }

    /// Require Fortran-contiguous memory (`PyBUF_F_CONTIGUOUS`).
    pub fn fortran_contiguous(self) -> Self {
        self.with(self.flags | ffi::PyBUF_F_CONTIGUOUS)
    }

    /// Promise the producer that the view is released before control returns
    /// to Python (`PYXBUF_TEMPORARY`), which lets some producers skip work
    /// (a producer may, for instance, skip pinning or copying memory it would
    /// otherwise keep stable for as long as Python code could run).
    ///
    /// # Safety
    ///
    /// The buffer this request acquires must be dropped before any Python
    /// code runs on this thread: no call into Python (no method call, no
    /// attribute access, no conversion that may run `__index__` or
    /// `__float__`, nothing that can trigger a garbage collection or a
    /// finalizer, no `py.detach` that lets another thread run Python) between
    /// acquisition and drop, and the buffer is not returned to Python or
    /// stored. The producer relies on this promise for the soundness of the
    /// memory it hands out; breaking it is undefined behaviour on its side.
    pub unsafe fn temporary(self) -> Self {
        self.with(self.flags | sys::PYXBUF_TEMPORARY)
    }

    /// Acquire on behalf of a consumer working on `stream` (DLPack's integer
    /// convention): DLPack producers order their work before it.
    pub fn stream(mut self, stream: i64) -> Self {
        self.stream = Some(stream);
        self
    }

    /// Fail with `BufferError` when the producer does not grant the borrow
    /// asked for (a producer may ignore borrow requests; by default the
    /// buffer is then handed out without a grant and
    /// [`as_slice`](PyXBuffer::as_slice) returns `None`).
    pub fn require_borrow(mut self) -> Self {
        self.require_borrow = true;
        self
    }

    /// Fail with `BufferError` unless the producer itself enforces the
    /// borrow asked for: anything weaker than an *enforced* grant -- a
    /// *tracked* grant from pyxbuf's cooperative registry (NumPy, `bytearray`,
    /// DLPack tensors, and wrappers over them), or no grant at all -- is
    /// refused, the message naming what was granted.
    ///
    /// Ask for it where a plain slice must stay sound whatever other code
    /// does: a tracked grant binds pyxbuf's consumers and rust-numpy, but
    /// Python or C code on another thread (free-threaded CPython, or a NumPy
    /// ufunc that released the GIL, `np.add(a, 1, out=a)`) can still write
    /// the memory while you read it. See the crate's `# Soundness` section.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.import("array")?.getattr("array")?.call1(("d", vec![1.0, 2.0]))?;
    ///     // array.array knows nothing of borrows: its grant is only tracked.
    ///     let err = PyXBuffer::<f64>::request().require_enforced().get(&array).unwrap_err();
    ///     assert!(err.is_instance_of::<pyo3::exceptions::PyBufferError>(py));
    ///     assert!(err.to_string().contains("tracked shared borrow"));
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn require_enforced(mut self) -> Self {
        self.require_enforced = true;
        self
    }

    /// The request flags (`PyBUF_*` | `PYXBUF_*`) this request passes.
    pub fn flags(&self) -> i32 {
        self.flags
    }
}

/// The refusal of `require_enforced`, naming what was granted.
#[cold]
#[inline(never)]
fn not_enforced(obj: &Bound<'_, PyAny>, grants: Grants) -> PyErr {
    let kind = if grants.exclusive() {
        "exclusive"
    } else {
        "shared"
    };
    let granted = if let Some(live) = grants.any().then(|| foreign_views(obj)).flatten() {
        format!(
            "a tracked {kind} borrow: its producer enforces borrows, but {live} of its memory \
             that it cannot stop (a NumPy array, memoryview or DLPack tensor over it, for \
             example); drop them (del the array or tensor) and ask again"
        )
    } else if grants.any() {
        format!(
            "a tracked {kind} borrow (pyxbuf's cooperative registry granted it: its producer \
             does not enforce borrows, so code that bypasses pyxbuf -- Python or C on another \
             thread -- can still write the memory)"
        )
    } else {
        "no borrow (its producer ignores borrow requests)".to_owned()
    };
    PyBufferError::new_err(format!(
        "pyxbuf: an enforced borrow of the buffer of '{}' was required (require_enforced), but it \
         holds {granted}; copy the data (to_vec, to_device) or export it from an object that \
         enforces borrows, or drop require_enforced() to accept the weaker grant",
        type_name(obj),
    ))
}

/// "N other views are live" for an exporter that counts its views (its
/// `borrows` attribute, as `pyxbuf.Exporter` has), not counting the view
/// just acquired; `None` for any other object.
fn foreign_views(obj: &Bound<'_, PyAny>) -> Option<String> {
    let borrows = obj.getattr("borrows").ok()?;
    let field = |name: &str| -> Option<i64> { borrows.get_item(name).ok()?.extract().ok() };
    let (views, writable) = (field("views")? - 1, field("writable")?);
    let are = if views == 1 { "is" } else { "are" };
    Some(format!(
        "{} ({writable} writable) {are} live",
        count(views.max(0) as u64, "other view", "other views")
    ))
}

/// The item type of a request for a [`PyXUntypedBuffer`]: none yet (see
/// [`PyXUntypedBuffer::request`]).
#[derive(Debug, Clone, Copy)]
pub enum Untyped {}

impl<T, M: BorrowMode> Request<T, M> {
    pub(super) fn new(flags: i32) -> Self {
        Request {
            flags,
            stream: None,
            require_borrow: false,
            require_enforced: false,
            _t: PhantomData,
        }
    }

    fn check_grant(&self, obj: &Bound<'_, PyAny>, buf: &PyXUntypedBuffer<'_, M>) -> PyResult<()> {
        let grants = buf.grants();
        if self.require_borrow && !grants.any() {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: the buffer of '{}' was handed out without the shared borrow requested \
                 (its producer ignores borrow requests); drop require_borrow() to accept it",
                type_name(obj),
            )));
        }
        if self.require_enforced && !grants.is_enforced() {
            return Err(not_enforced(obj, grants));
        }
        Ok(())
    }

    /// Acquire the buffer of `obj` without an item type: look at its format
    /// first, then [`into_typed`](PyXUntypedBuffer::into_typed) or
    /// [`as_typed`](PyXUntypedBuffer::as_typed) it (one acquisition, any
    /// number of types tried).
    pub fn get_untyped<'py>(self, obj: &Bound<'py, PyAny>) -> PyResult<PyXUntypedBuffer<'py, M>> {
        let buf = PyXUntypedBuffer::acquire(obj, self.flags, self.stream)?;
        self.check_grant(obj, &buf)?;
        Ok(buf)
    }
}

impl<T: Element, M: BorrowMode> Request<T, M> {
    /// Acquire the buffer of `obj` as items of `T` (`pyxbuf.ItemTypeError`,
    /// a `TypeError` and a `BufferError`, naming both formats when they
    /// differ).
    #[inline]
    pub fn get<'py>(self, obj: &Bound<'py, PyAny>) -> PyResult<PyXBuffer<'py, T, M>> {
        let buf = PyXUntypedBuffer::acquire(obj, self.flags, self.stream)?;
        self.check_grant(obj, &buf)?;
        buf.typed_for(obj)
    }
}
