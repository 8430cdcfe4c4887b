//! [`PyXBuffer`]: a typed view of a Python object's memory, acquired through
//! `pyxbuf_get` (native extended buffers, DLPack, the CUDA Array Interface,
//! the classic buffer protocol, NumPy's `__array_interface__`).

use std::cell::UnsafeCell;
use std::ffi::{c_void, CStr};
use std::fmt;
use std::marker::PhantomData;
use std::mem::{self, MaybeUninit};
use std::ptr::{self, NonNull};

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::{Borrowed, FromPyObject};
use pyxbuf_sys as sys;

use crate::device::{Device, DevicePtr, SyncEvent};
use crate::element::{self, Element};

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

/// The borrow grants a producer (or pyxbuf's cooperative registry) gave a
/// view, from its `ext_flags`.
///
/// - **shared**: nobody writes the memory while the view lives;
/// - **exclusive**: this view alone reads and writes it;
/// - **tracked**: the grant comes from pyxbuf's process-wide registry, not
///   the producer (NumPy, `bytearray`, DLPack tensors...): every pyxbuf
///   consumer in the process (all copies of the library) respects it, but
///   code that bypasses pyxbuf does not — a Python callback you call while
///   holding a slice could still write `array[0] = 1`, and so could a thread
///   that released the GIL. A grant without `tracked` is enforced by the
///   producer itself (pyxbuf's exporters refuse every conflicting request).
///
/// ```
/// use pyxbuf::Grants;
/// let g = Grants::from_bits(pyxbuf::sys::PYXBUF_EXT_SHARED | pyxbuf::sys::PYXBUF_EXT_TRACKED);
/// assert!(g.shared() && !g.exclusive() && g.tracked() && !g.is_enforced());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Grants(i32);

impl Grants {
    /// From `pyxbuf_view.ext_flags` alone, trusted as given.
    pub const fn from_bits(ext_flags: i32) -> Grants {
        Grants(ext_flags)
    }
    /// From a view's `flags` and `ext_flags`, as the proposal says a consumer
    /// must read them: a grant counts only when the request bit it answers is
    /// set in `flags` (exclusive needs `PYXBUF_BORROW_EXCLUSIVE`, shared either
    /// borrow bit). `pyxbuf_get` already refuses producers that break this;
    /// this is the check for views that came from elsewhere.
    ///
    /// ```
    /// use pyxbuf::{sys, Grants};
    /// let orphan = Grants::from_view(0, sys::PYXBUF_EXT_SHARED);
    /// assert!(!orphan.any());
    /// let g = Grants::from_view(sys::PYXBUF_BORROW_SHARED, sys::PYXBUF_EXT_EXCLUSIVE);
    /// assert!(!g.exclusive());
    /// let g = Grants::from_view(sys::PYXBUF_BORROW_EXCLUSIVE, sys::PYXBUF_EXT_EXCLUSIVE);
    /// assert!(g.exclusive());
    /// ```
    pub const fn from_view(flags: i32, ext_flags: i32) -> Grants {
        let mut backed = 0;
        if flags & (sys::PYXBUF_BORROW_SHARED | sys::PYXBUF_BORROW_EXCLUSIVE) != 0 {
            backed |= sys::PYXBUF_EXT_SHARED;
        }
        if flags & sys::PYXBUF_BORROW_EXCLUSIVE != 0 {
            backed |= sys::PYXBUF_EXT_EXCLUSIVE;
        }
        let grants = ext_flags & backed;
        if grants == 0 {
            return Grants(0);
        }
        Grants(grants | (ext_flags & sys::PYXBUF_EXT_TRACKED))
    }
    /// The raw `PYXBUF_EXT_*` bits.
    pub const fn bits(&self) -> i32 {
        self.0
    }
    /// Nobody writes while the view lives.
    pub const fn shared(&self) -> bool {
        self.0 & sys::PYXBUF_EXT_SHARED != 0
    }
    /// This view alone reads and writes.
    pub const fn exclusive(&self) -> bool {
        self.0 & sys::PYXBUF_EXT_EXCLUSIVE != 0
    }
    /// Granted by pyxbuf's cooperative registry rather than the producer.
    pub const fn tracked(&self) -> bool {
        self.0 & sys::PYXBUF_EXT_TRACKED != 0
    }
    /// Some borrow (shared or exclusive) was granted.
    pub const fn any(&self) -> bool {
        self.shared() || self.exclusive()
    }
    /// A borrow was granted and the producer itself enforces it.
    pub const fn is_enforced(&self) -> bool {
        self.any() && !self.tracked()
    }
}

impl fmt::Debug for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grants")
            .field("shared", &self.shared())
            .field("exclusive", &self.exclusive())
            .field("tracked", &self.tracked())
            .finish()
    }
}

/// Which protocol produced a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Path {
    /// The object's own extended buffer (e.g. pyxbuf's exporters).
    Native,
    /// The DLPack C exchange API.
    DlpackC,
    /// A `__dlpack__` capsule.
    Dlpack,
    /// `__cuda_array_interface__`.
    CudaArrayInterface,
    /// The classic buffer protocol.
    Classic,
    /// NumPy's `__array_interface__` (ml_dtypes arrays).
    ArrayInterface,
    /// A path this version of the crate does not know.
    Other(i32),
}

impl Path {
    fn from_raw(path: i32) -> Path {
        match path {
            sys::PYXBUF_PATH_NATIVE => Path::Native,
            sys::PYXBUF_PATH_DLPACK_C => Path::DlpackC,
            sys::PYXBUF_PATH_DLPACK => Path::Dlpack,
            sys::PYXBUF_PATH_CAI => Path::CudaArrayInterface,
            sys::PYXBUF_PATH_CLASSIC => Path::Classic,
            sys::PYXBUF_PATH_ARRAY_INTERFACE => Path::ArrayInterface,
            other => Path::Other(other),
        }
    }
}

/// Like [`std::cell::Cell`], but read-only: a `&ReadOnlyCell<T>` is an item
/// that this code only reads but others may write. What
/// [`PyXBuffer::as_cells`] hands out when no borrow was granted.
///
/// Reads are plain loads: as with PyO3's cells, a *thread* that writes the
/// memory without holding the GIL while you read would be a data race, which
/// no cell type can prevent — ask for a borrow (the default) to be sure.
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
        // (as_cells checks host memory, alignment and bounds); `read_item`
        // turns any bits into a valid T.
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
pub struct Request<T: Element, M: BorrowMode = Shared> {
    flags: i32,
    stream: Option<i64>,
    require_borrow: bool,
    _t: PhantomData<fn() -> (T, M)>,
}

impl<T: Element, M: BorrowMode> Clone for Request<T, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element, M: BorrowMode> Copy for Request<T, M> {}

impl<T: Element, M: BorrowMode> fmt::Debug for Request<T, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("flags", &format_args!("{:#x}", self.flags))
            .field("stream", &self.stream)
            .field("require_borrow", &self.require_borrow)
            .finish()
    }
}

impl<T: Element, M: BorrowMode> Request<T, M> {
    fn with<N: BorrowMode>(self, flags: i32) -> Request<T, N> {
        Request {
            flags,
            stream: self.stream,
            require_borrow: self.require_borrow,
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
    /// suboffsets, which [`get_ptr`](PyXBuffer::get_ptr) follows and
    /// [`suboffsets`](PyXBuffer::suboffsets) returns. Without it a producer
    /// that hands out suboffsets is refused at acquisition.
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

    /// The request flags (`PyBUF_*` | `PYXBUF_*`) this request passes.
    pub fn flags(&self) -> i32 {
        self.flags
    }

    /// Acquire the buffer of `obj`.
    pub fn get<'py>(self, obj: &Bound<'py, PyAny>) -> PyResult<PyXBuffer<'py, T, M>> {
        let buf = PyXBuffer::acquire(obj, self.flags, self.stream)?;
        if self.require_borrow && !buf.grants().any() {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: the buffer of '{}' was handed out without the shared borrow requested \
                 (its producer ignores borrow requests); drop require_borrow() to accept it",
                type_name(obj),
            )));
        }
        Ok(buf)
    }
}

/// A typed view of a Python object's memory — host or device — acquired
/// through pyxbuf, with the producer's borrow grants.
///
/// - `'py`: the view needs the interpreter (its release calls the producer),
///   so it cannot outlive the `Python<'py>` it was acquired under, nor cross
///   to another thread.
/// - `T`: the item type; the format and item size are checked at
///   acquisition (`TypeError` naming both formats on mismatch).
/// - `M`: the borrow asked for, [`Shared`] (default) or [`Exclusive`].
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
/// # Layout and moves
///
/// The C view (`pyxbuf_view`, 296 bytes on 64-bit targets) lives inline: no
/// heap allocation per acquisition. Producers may point the view's `shape`
/// and `strides` into the view itself (CPython's `PyBuffer_FillInfo` points
/// them at its own `len` and `itemsize`; pyxbuf's bridges at its
/// `inline_dims`), so a Rust move would leave them dangling. `PyXBuffer`
/// records where the view was filled and rebases every pointer that points
/// into that range before using it, so the value may be moved freely (see
/// the crate's design notes).
pub struct PyXBuffer<'py, T: Element, M: BorrowMode = Shared> {
    view: RawView,
    /// Address of `view` when the producer filled it.
    origin: usize,
    /// C-order strides when the producer gave none (ctypes does that).
    fallback_strides: [sys::Py_ssize_t; sys::PYXBUF_INLINE_NDIM],
    py: Python<'py>,
    _t: PhantomData<(fn() -> T, M)>,
}

/// The C view. Its raw pointers alone would make the buffer `!Send` and
/// `!Sync`; that is decided by `Python<'py>` instead (which is both), so the
/// compiler names one reason rather than every pointer field.
#[repr(transparent)]
#[derive(Clone, Copy)]
struct RawView(sys::pyxbuf_view);

// SAFETY: plain data; it only ever lives inside a PyXBuffer, which is !Send
// and !Sync through its Python<'py>.
unsafe impl Send for RawView {}
// SAFETY: as above.
unsafe impl Sync for RawView {}

impl std::ops::Deref for RawView {
    type Target = sys::pyxbuf_view;
    fn deref(&self) -> &sys::pyxbuf_view {
        &self.0
    }
}

impl std::ops::DerefMut for RawView {
    fn deref_mut(&mut self) -> &mut sys::pyxbuf_view {
        &mut self.0
    }
}

const VIEW_SIZE: usize = mem::size_of::<sys::pyxbuf_view>();

/// Rebase every pointer of `view` that points into `[from, from + size)`
/// (the view's earlier location) onto `view`'s current location.
///
/// # Safety
/// `view` is a view that was filled at address `from` and moved since.
unsafe fn relocate(view: &mut sys::pyxbuf_view, from: usize) {
    let to = ptr::addr_of_mut!(*view).cast::<u8>();
    let fix = |p: *mut c_void| -> *mut c_void {
        let off = (p as usize).wrapping_sub(from);
        if off < VIEW_SIZE {
            to.wrapping_add(off).cast()
        } else {
            p
        }
    };
    let b = &mut view.base;
    b.buf = fix(b.buf);
    b.format = fix(b.format.cast()).cast();
    b.shape = fix(b.shape.cast()).cast();
    b.strides = fix(b.strides.cast()).cast();
    b.suboffsets = fix(b.suboffsets.cast()).cast();
    b.internal = fix(b.internal);
    view.device = fix(view.device as *mut c_void).cast_const().cast();
    view.device_info = fix(view.device_info);
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .fully_qualified_name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}

fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    // "num_complex::Complex<f32>" -> "Complex<f32>"; "half::bfloat::bf16" -> "bf16".
    let head = full.split('<').next().unwrap_or(full);
    match head.rfind("::") {
        Some(i) => &full[i + 2..],
        None => full,
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
        Request {
            flags: Shared::FLAGS,
            stream: None,
            require_borrow: false,
            _t: PhantomData,
        }
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
    ///     // The wrong type is a TypeError naming both formats.
    ///     let err = PyXBuffer::<f64>::get(&array).unwrap_err();
    ///     assert!(err.is_instance_of::<pyo3::exceptions::PyTypeError>(py));
    ///     assert!(err.to_string().contains("'i'") && err.to_string().contains("'d'"));
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn get(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        Self::acquire(obj, M::FLAGS, None)
    }

    fn acquire(obj: &Bound<'py, PyAny>, flags: i32, stream: Option<i64>) -> PyResult<Self> {
        let py = obj.py();
        let mut view = MaybeUninit::<sys::pyxbuf_view>::zeroed();
        // SAFETY: `obj` is a live object, `view` writable storage for a
        // pyxbuf_view, and the thread is attached (we hold `py`).
        let rc = unsafe {
            match stream {
                None => sys::pyxbuf_get(obj.as_ptr(), view.as_mut_ptr(), flags),
                Some(s) => sys::pyxbuf_get_stream(obj.as_ptr(), view.as_mut_ptr(), flags, s),
            }
        };
        if rc != 0 {
            return Err(PyErr::fetch(py));
        }
        let origin = view.as_ptr() as usize;
        let mut this = PyXBuffer {
            // SAFETY: zeroed first, then filled by a successful pyxbuf_get:
            // every field holds an integer or pointer value.
            view: RawView(unsafe { view.assume_init() }),
            origin,
            fallback_strides: [0; sys::PYXBUF_INLINE_NDIM],
            py,
            _t: PhantomData,
        };
        // From here on `this` owns the acquisition; returning early drops
        // (and so releases) it.
        this.check_layout(obj)?;
        if flags & sys::PYXBUF_BORROW_EXCLUSIVE != 0 {
            this.check_exclusive(obj)?;
        }
        Ok(this)
    }

    /// An `Exclusive` buffer carries an exclusive grant, or is not handed out:
    /// the type promises it (`as_mut_slice`, `copy_from_slice`).
    fn check_exclusive(&self, obj: &Bound<'py, PyAny>) -> PyResult<()> {
        let g = self.grants();
        if g.exclusive() {
            return Ok(());
        }
        Err(PyBufferError::new_err(format!(
            "pyxbuf: an exclusive borrow of the buffer of '{}' was requested, but its producer \
             granted {}; release the other views of its memory, or request a shared borrow \
             (PyXBuffer<_, Shared>) to read it",
            type_name(obj),
            if g.shared() {
                "only a shared borrow"
            } else {
                "no borrow (it ignores borrow requests)"
            },
        )))
    }

    /// Checks made once at acquisition: shape present, item format and size
    /// are T's, strides available.
    fn check_layout(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<()> {
        let ndim = self.view.base.ndim;
        if ndim < 0 || (ndim > 0 && self.view.base.shape.is_null()) {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: the buffer of '{}' has ndim {ndim} but no shape; its producer ignored \
                 PyBUF_ND",
                type_name(obj)
            )));
        }
        // SAFETY: the view is acquired; its format is NULL or a string that
        // lives as long as the view.
        let format = unsafe { element::format_of(self.fix(self.view.base.format)) };
        if !element::matches::<T>(format, self.view.base.itemsize) {
            return Err(PyTypeError::new_err(format!(
                "pyxbuf: the buffer of '{}' holds items of format '{}' ({} bytes each), but \
                 PyXBuffer<{}> needs format '{}' ({} bytes each); convert the array (e.g. \
                 numpy's .astype) or use the matching Rust type",
                type_name(obj),
                format.to_string_lossy(),
                self.view.base.itemsize,
                short_type_name::<T>(),
                T::FORMAT.to_string_lossy(),
                mem::size_of::<T>(),
            )));
        }
        if !self.view.base.suboffsets.is_null() {
            let indirect = ffi::PyBUF_INDIRECT & !ffi::PyBUF_STRIDES;
            if self.view.requested & indirect == 0 || !self.is_host() {
                return Err(PyBufferError::new_err(format!(
                    "pyxbuf: the buffer of '{}' has suboffsets (PIL-style indirect memory){}; \
                     its producer ignored the request, or ask with Request::indirect()",
                    type_name(obj),
                    if self.is_host() {
                        " though PyBUF_INDIRECT was not requested"
                    } else {
                        " on device memory, which cannot be followed"
                    }
                )));
            }
        }
        self.check_len(obj)?;
        if ndim > 0 && self.view.base.strides.is_null() {
            let ndim = ndim as usize;
            if ndim > sys::PYXBUF_INLINE_NDIM {
                return Err(PyBufferError::new_err(format!(
                    "pyxbuf: the buffer of '{}' has {ndim} dimensions but no strides; \
                     PyXBuffer computes strides for at most {} dimensions",
                    type_name(obj),
                    sys::PYXBUF_INLINE_NDIM
                )));
            }
            let mut stride = self.view.base.itemsize;
            for i in (0..ndim).rev() {
                self.fallback_strides[i] = stride;
                stride *= self.shape()[i] as isize;
            }
        }
        Ok(())
    }

    /// The view's `len` must be its items times `size_of::<T>()` on every
    /// path: slices are sized by the shape, copies by `len`, and a producer
    /// whose two answers differ would send one of them past its memory.
    fn check_len(&self, obj: &Bound<'py, PyAny>) -> PyResult<()> {
        let count = self
            .shape()
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n));
        let bytes = count.and_then(|n| n.checked_mul(mem::size_of::<T>()));
        if bytes.is_some_and(|b| b as isize == self.view.base.len && self.view.base.len >= 0) {
            return Ok(());
        }
        Err(PyBufferError::new_err(format!(
            "pyxbuf: the buffer of '{}' is inconsistent: its len is {} bytes, but its shape {:?} \
             of {}-byte items needs {}; its producer is broken",
            type_name(obj),
            self.view.base.len,
            self.shape(),
            mem::size_of::<T>(),
            bytes.map_or_else(|| "more than fits in memory".to_owned(), |b| b.to_string()),
        )))
    }

    /// `p` as it must be read now: rebased onto the view's current address
    /// when it points into the view's original location.
    #[inline]
    fn fix<P>(&self, p: *const P) -> *const P {
        let off = (p as usize).wrapping_sub(self.origin);
        if off < VIEW_SIZE {
            ptr::addr_of!(self.view)
                .cast::<u8>()
                .wrapping_add(off)
                .cast()
        } else {
            p
        }
    }

    /// Run `f` on a copy of the view whose interior pointers point into the
    /// copy, for the C functions that only read a view.
    #[inline]
    fn with_view<R>(&self, f: impl FnOnce(*const sys::pyxbuf_view) -> R) -> R {
        let mut copy = self.view.0;
        // SAFETY: `copy` is this view, filled at `self.origin` and now at a
        // new address; it does not move again before `f` returns.
        unsafe { relocate(&mut copy, self.origin) };
        f(&copy)
    }

    /// The `Python<'py>` token the view was acquired under.
    pub fn py(&self) -> Python<'py> {
        self.py
    }

    /// The object whose memory this is (the view keeps it alive).
    pub fn obj(&self) -> Option<Borrowed<'_, 'py, PyAny>> {
        // SAFETY: base.obj is NULL or a strong reference the view holds for
        // as long as it lives, which outlives the borrow of `self`.
        unsafe { Borrowed::from_ptr_or_opt(self.py, self.view.base.obj) }
    }

    /// The raw C view, its interior pointers as the producer left them
    /// (they may refer to where the view was filled; see the type's docs).
    /// For functions this crate does not wrap, prefer
    /// [`with_raw_view`](PyXBuffer::with_raw_view).
    pub fn raw_view(&self) -> &sys::pyxbuf_view {
        &self.view.0
    }

    /// Call `f` with a pointer to a copy of the C view whose interior
    /// pointers are valid, for read-only `pyxbuf_*` functions this crate
    /// does not wrap. The pointer is valid only during `f`.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let data = pyo3::types::PyBytes::new(py, b"xyz");
    ///     let buf = PyXBuffer::<u8>::get(&data)?;
    ///     // SAFETY: a valid, acquired view for the duration of the call.
    ///     let host = buf.with_raw_view(|v| unsafe { pyxbuf::sys::pyxbuf_view_is_host(v) });
    ///     assert_eq!(host, 1);
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn with_raw_view<R>(&self, f: impl FnOnce(*const sys::pyxbuf_view) -> R) -> R {
        self.with_view(f)
    }

    /// Which protocol produced the view.
    pub fn path(&self) -> Path {
        Path::from_raw(self.view.path)
    }

    /// The borrow grants the view holds.
    pub fn grants(&self) -> Grants {
        Grants::from_view(self.view.flags, self.view.ext_flags)
    }

    /// The extended request flags the producer honoured (`PYXBUF_*`).
    pub fn honoured_flags(&self) -> i32 {
        self.view.flags
    }

    /// Number of dimensions (PyO3: `dimensions`).
    pub fn ndim(&self) -> usize {
        self.view.base.ndim as usize
    }

    /// Number of dimensions, PyO3's name for [`ndim`](PyXBuffer::ndim).
    pub fn dimensions(&self) -> usize {
        self.ndim()
    }

    /// Items per dimension.
    pub fn shape(&self) -> &[usize] {
        let n = self.ndim();
        if n == 0 {
            return &[];
        }
        // SAFETY: checked at acquisition: shape is non-NULL with ndim
        // entries, alive while the view is (rebased if it points into it);
        // Py_ssize_t and usize share a layout and shapes are non-negative.
        unsafe { std::slice::from_raw_parts(self.fix(self.view.base.shape).cast::<usize>(), n) }
    }

    /// Bytes between consecutive items of each dimension (negative when the
    /// dimension runs backwards).
    pub fn strides(&self) -> &[isize] {
        let n = self.ndim();
        if n == 0 {
            return &[];
        }
        if self.view.base.strides.is_null() {
            return &self.fallback_strides[..n];
        }
        // SAFETY: strides has ndim entries while the view lives (rebased if it
        // points into the view); Py_ssize_t is isize.
        unsafe { std::slice::from_raw_parts(self.fix(self.view.base.strides), n) }
    }

    /// Number of items.
    pub fn item_count(&self) -> usize {
        self.shape().iter().product()
    }

    /// Bytes per item (`size_of::<T>()`, checked at acquisition).
    pub fn item_size(&self) -> usize {
        self.view.base.itemsize as usize
    }

    /// Bytes of all items (`item_count() * item_size()`).
    pub fn len_bytes(&self) -> usize {
        self.view.base.len as usize
    }

    /// Whether the memory is read-only. Views holding a shared borrow are
    /// always read-only.
    pub fn readonly(&self) -> bool {
        self.view.base.readonly != 0
    }

    /// The item format the producer gave (`"B"` if it gave none).
    pub fn format(&self) -> &CStr {
        // SAFETY: NULL or a string that lives as long as the view.
        unsafe { element::format_of(self.fix(self.view.base.format)) }
    }

    /// The first item's address (host or device; never dereference a device
    /// address). PyO3: `buf_ptr`.
    pub fn buf_ptr(&self) -> *mut c_void {
        self.fix(self.view.base.buf).cast_mut()
    }

    /// The address of the item at `indices` (panics when an index is out of
    /// bounds or the count is wrong). The item itself is not read; with
    /// suboffsets (a request made with [`Request::indirect`]) the pointers
    /// stored in the array are followed, as PEP 3118 says. PyO3: `get_ptr`.
    pub fn get_ptr(&self, indices: &[usize]) -> *mut c_void {
        assert_eq!(indices.len(), self.ndim(), "one index per dimension");
        let suboffsets = self.suboffsets();
        let mut p = self.buf_ptr().cast::<u8>();
        for (d, ((&i, &n), &s)) in indices
            .iter()
            .zip(self.shape())
            .zip(self.strides())
            .enumerate()
        {
            assert!(i < n, "index {i} out of bounds for a dimension of {n}");
            p = p.wrapping_offset(i as isize * s);
            if let Some(&off) = suboffsets.and_then(|so| so.get(d)) {
                if off >= 0 {
                    // SAFETY: suboffsets are accepted only on host memory
                    // (check_layout); `p` is an in-bounds element of this
                    // dimension, which PEP 3118 says holds a pointer.
                    p = unsafe { p.cast::<*mut u8>().read_unaligned() }.wrapping_offset(off);
                }
            }
        }
        p.cast()
    }

    /// The suboffsets of a PIL-style indirect array (only when requested with
    /// [`Request::indirect`] and given by the producer); `None` otherwise.
    /// PyO3: `suboffsets`.
    pub fn suboffsets(&self) -> Option<&[isize]> {
        let p = self.fix(self.view.base.suboffsets);
        if p.is_null() || self.ndim() == 0 {
            return None;
        }
        // SAFETY: non-NULL suboffsets have ndim entries while the view lives
        // (rebased if they point into it).
        Some(unsafe { std::slice::from_raw_parts(p, self.ndim()) })
    }

    fn contiguous_with(&self, fortran: bool) -> bool {
        let (shape, strides) = (self.shape(), self.strides());
        let mut expected = self.item_size() as isize;
        for k in 0..shape.len() {
            let d = if fortran { k } else { shape.len() - 1 - k };
            let n = shape[d];
            if n == 0 {
                return true;
            }
            if n != 1 && strides[d] != expected {
                return false;
            }
            expected *= n as isize;
        }
        true
    }

    /// Whether the items are laid out in C order without gaps.
    pub fn is_c_contiguous(&self) -> bool {
        // The common cases without the iterator.
        match (self.shape(), self.strides()) {
            ([], _) => true,
            ([n], [s]) => *n <= 1 || *s == self.item_size() as isize,
            _ => self.contiguous_with(false),
        }
    }

    /// Whether the items are laid out in Fortran order without gaps.
    pub fn is_fortran_contiguous(&self) -> bool {
        match (self.shape(), self.strides()) {
            ([], _) => true,
            ([n], [s]) => *n <= 1 || *s == self.item_size() as isize,
            _ => self.contiguous_with(true),
        }
    }

    /// Whether the memory is on the host (`device()` is [`Device::Cpu`]).
    pub fn is_host(&self) -> bool {
        self.view.device.is_null()
    }

    /// Where the memory lives.
    pub fn device(&self) -> Device {
        if self.view.device.is_null() {
            return Device::Cpu;
        }
        let mut d = sys::pyxbuf_device::default();
        // SAFETY: a valid, acquired view (read-only use) and an out-pointer.
        let rc = self.with_view(|v| unsafe { sys::pyxbuf_view_device(v, &mut d, ptr::null_mut()) });
        if rc != 0 {
            return Device::Unknown;
        }
        Device::from_dlpack(d.device_type, d.device_id)
    }

    /// The producer's device identifier (`"pyxbuf.dlpack"` for every device
    /// pyxbuf describes), or `None` for host memory.
    pub fn device_identifier(&self) -> Option<&CStr> {
        let d = self.fix(self.view.device);
        // SAFETY: a non-NULL device is a NUL-terminated identifier that lives
        // at least as long as the view.
        (!d.is_null()).then(|| unsafe { CStr::from_ptr(d) })
    }

    fn device_info(&self) -> Option<&sys::pyxbuf_device_info> {
        let id = self.device_identifier()?;
        if id != sys::PYXBUF_DEVICE_DLPACK {
            return None;
        }
        let info = self.fix(self.view.device_info.cast::<sys::pyxbuf_device_info>());
        // SAFETY: a "pyxbuf.dlpack" device's info is a pyxbuf_device_info
        // (validated by pyxbuf_get) that lives as long as the view.
        (!info.is_null()).then(|| unsafe { &*info })
    }

    /// A typed pointer to device memory with its device and the producer's
    /// sync event; `None` for host memory (use [`as_slice`](PyXBuffer::as_slice)).
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let data = pyo3::types::PyBytes::new(py, b"host");
    ///     assert!(PyXBuffer::<u8>::get(&data)?.device_ptr().is_none());
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn device_ptr(&self) -> Option<DevicePtr<'_, T>> {
        if self.is_host() {
            return None;
        }
        let info = self.device_info();
        Some(DevicePtr {
            ptr: self.buf_ptr().cast(),
            device: self.device(),
            sync: SyncEvent::from_info(info),
            stream: info.map_or(0, |i| i.stream),
            _view: PhantomData,
        })
    }

    /// Make `consumer_stream` (DLPack's integer convention) wait for the
    /// producer's sync event; a no-op for host memory and views without one.
    pub fn device_wait(&self, consumer_stream: i64) -> PyResult<()> {
        // SAFETY: a valid, acquired view; the thread is attached.
        let rc = self.with_view(|v| unsafe { sys::pyxbuf_device_wait(v, consumer_stream) });
        self.check(rc)
    }

    fn check(&self, rc: i32) -> PyResult<()> {
        if rc < 0 {
            Err(PyErr::fetch(self.py))
        } else {
            Ok(())
        }
    }

    /// Whether plain `&[T]` access is allowed: a borrow was granted, the
    /// memory is host memory, C-contiguous and aligned for `T`.
    fn host_items(&self) -> Option<(*const T, usize)> {
        if !self.is_host() || !self.is_c_contiguous() || !self.view.base.suboffsets.is_null() {
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
    /// [`as_cells`](PyXBuffer::as_cells), [`to_vec`](PyXBuffer::to_vec) or
    /// [`copy_to_host`](PyXBuffer::copy_to_host).
    ///
    /// What the grant promises is described at [`Grants`]; a `bool` buffer
    /// whose bytes are not all 0 or 1 gives `None` too.
    pub fn as_slice(&self) -> Option<&[T]> {
        if !self.grants().any() {
            return None;
        }
        let (p, n) = self.host_items()?;
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

    /// The items as read-only cells: for host, C-contiguous, aligned memory
    /// whatever the grants (PyO3's `as_slice`). Values may change between
    /// reads when no borrow was granted.
    pub fn as_cells(&self) -> Option<&[ReadOnlyCell<T>]> {
        let (p, n) = self.host_items()?;
        // SAFETY: n aligned, readable items of host memory alive while the
        // view is; ReadOnlyCell<T> is a transparent UnsafeCell<MaybeUninit<T>>,
        // so others' writes are permitted by the type, no validity is assumed
        // of the bytes, and every read goes through `Element::read_item`.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<ReadOnlyCell<T>>(), n) })
    }

    /// The items as a raw slice pointer, whatever the grants: for host,
    /// C-contiguous, aligned memory without suboffsets (as PyO3 0.30's
    /// pointer accessors). Nothing is promised about other readers and
    /// writers: dereferencing is your `unsafe` block, under your own
    /// reasoning (see the crate's `# Soundness` section). Valid while `self`
    /// lives.
    pub fn as_slice_ptr(&self) -> Option<NonNull<[T]>> {
        let (p, n) = self.host_items()?;
        NonNull::new(ptr::slice_from_raw_parts_mut(p.cast_mut(), n))
    }

    /// [`as_slice_ptr`](PyXBuffer::as_slice_ptr) for writing: also `None`
    /// for read-only memory. Writing through it is sound only when nobody
    /// else reads or writes the memory meanwhile, which only an exclusive
    /// grant promises.
    pub fn as_mut_slice_ptr(&self) -> Option<NonNull<[T]>> {
        if self.readonly() {
            return None;
        }
        self.as_slice_ptr()
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
        if target.len() != self.item_count() {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: slice of {} items cannot receive the buffer's {} items",
                target.len(),
                self.item_count()
            )));
        }
        let nbytes = mem::size_of_val(target);
        // SAFETY: a valid view and a destination of exactly nbytes.
        let rc = self.with_view(|v| unsafe {
            sys::pyxbuf_view_copy_contiguous(
                v,
                target.as_mut_ptr().cast(),
                nbytes,
                order as std::ffi::c_char,
            )
        });
        self.check(rc)?;
        // SAFETY: `target`'s bytes, just written; viewing them as
        // MaybeUninit<u8> allows any bits.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(target.as_mut_ptr().cast::<MaybeUninit<u8>>(), nbytes)
        };
        T::normalize_bytes(bytes);
        Ok(())
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

    /// The same items on `device`: a new `pyxbuf.Exporter` holding a C-order
    /// copy, or the object itself when it already lives there (the Array
    /// API's `to_device`; no implicit transfers elsewhere).
    pub fn to_device(&self, device: Device) -> PyResult<Bound<'py, PyAny>> {
        self.to_device_on_stream(device, sys::PYXBUF_STREAM_DEFAULT)
    }

    /// [`to_device`](PyXBuffer::to_device) with the copies ordered on
    /// `stream` (DLPack's integer convention).
    pub fn to_device_on_stream(&self, device: Device, stream: i64) -> PyResult<Bound<'py, PyAny>> {
        let target = device.raw();
        // SAFETY: a valid, acquired view and device; the result is a new
        // reference or NULL with an exception set.
        let obj = self.with_view(|v| unsafe { sys::pyxbuf_to_device(v, &target, stream) });
        // SAFETY: as above.
        unsafe { Bound::from_owned_ptr_or_err(self.py, obj) }
    }

    /// Release the view now (dropping does the same). PyO3: `release`.
    pub fn release(self) {}
}

impl<'py, T: Element> PyXBuffer<'py, T, Exclusive> {
    /// The items as a mutable slice — only under an **exclusive** grant, on
    /// writable, host, C-contiguous memory aligned for `T`.
    ///
    /// Exists only on buffers requested with
    /// [`borrow_exclusive`](Request::borrow_exclusive) (or
    /// [`writable`](Request::writable)), and takes `&mut self`, so no other
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
        if !self.grants().exclusive() || self.readonly() {
            return None;
        }
        let (p, n) = self.host_items()?;
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
        if let Some(items) = self.as_mut_slice() {
            items.copy_from_slice(source);
            return Ok(());
        }
        let shape = self.shape().to_vec();
        let mut index = vec![0usize; shape.len()];
        for value in source {
            let p = self.get_ptr(&index).cast::<T>();
            // SAFETY: an in-bounds item of writable host memory this view holds
            // exclusively; unaligned writes are allowed.
            unsafe { p.write_unaligned(*value) };
            for d in (0..index.len()).rev() {
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

impl<T: Element, M: BorrowMode> Drop for PyXBuffer<'_, T, M> {
    fn drop(&mut self) {
        // SAFETY: the view was acquired by pyxbuf_get and not released yet
        // (this is the only place that releases it); it was filled at
        // `origin`, is rebased onto its current address first, and the
        // thread is attached for 'py (the type is !Send and cannot outlive
        // its Python<'py>).
        unsafe {
            relocate(&mut self.view.0, self.origin);
            sys::pyxbuf_release(&mut self.view.0);
        }
    }
}

impl<T: Element, M: BorrowMode> fmt::Debug for PyXBuffer<'_, T, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PyXBuffer")
            .field("format", &self.format())
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("readonly", &self.readonly())
            .field("device", &self.device())
            .field("grants", &self.grants())
            .field("path", &self.path())
            .finish()
    }
}

impl<'a, 'py, T: Element, M: BorrowMode> FromPyObject<'a, 'py> for PyXBuffer<'py, T, M> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Self::get(&obj)
    }
}
