//! [`PyXUntypedBuffer`]: an acquired view whose item type is not decided
//! yet -- layout, grants, path and device. [`PyXBuffer<T>`](super::PyXBuffer) is this plus a type.

use crate::words::count;
use std::ffi::{c_void, CStr};
use std::fmt;
use std::marker::PhantomData;
use std::mem;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::{Borrowed, FromPyObject};
use pyxbuf_sys as sys;

use super::grants::{Grants, Path};
use super::request::{BorrowMode, Request, Shared, Untyped};
use super::slot::ViewSlot;
use super::PyXBuffer;
use crate::element::{self, Element};
use crate::errors::item_type_error;
use crate::format::Format;

/// A view of a Python object's memory acquired through pyxbuf whose item
/// type is not fixed: acquire once, read [`format`](Self::format) (or parse
/// it), then [`into_typed`](Self::into_typed) /
/// [`as_typed`](Self::as_typed) it as the type the format names. Everything
/// that does not depend on the item type (shape, strides, grants, device,
/// path) is here; [`PyXBuffer<T>`](super::PyXBuffer) derefs to it.
///
/// ```
/// use half::bf16;
/// use pyo3::prelude::*;
/// use pyxbuf::{PyXBuffer, PyXUntypedBuffer};
/// Python::attach(|py| -> PyResult<()> {
///     let array = py.import("array")?.getattr("array")?.call1(("f", vec![1.0f32, 2.0]))?;
///     let buf = PyXUntypedBuffer::get(&array)?;
///     assert_eq!(buf.format().to_str().unwrap(), "f");
///     assert!(buf.as_typed::<bf16>().is_err()); // not bfloat16: ItemTypeError, buffer kept
///     let floats: &PyXBuffer<f32> = buf.as_typed::<f32>()?;
///     assert_eq!(floats.as_slice(), Some(&[1.0, 2.0][..]));
///     Ok(())
/// })
/// .unwrap();
/// ```
///
/// # Where the view lives
///
/// The C view (`pyxbuf_view`, 296 bytes on 64-bit targets) lives in a slot
/// that does not move while the buffer holds it, so the interior pointers
/// producers set (CPython's `PyBuffer_FillInfo` points `shape`/`strides` at
/// the view's own `len` and `itemsize`; pyxbuf's bridges at its
/// `inline_dims`) stay valid however the buffer itself is moved. Slots are
/// reused per thread: no allocation per acquisition in the steady state (see
/// the crate's design notes).
pub struct PyXUntypedBuffer<'py, M: BorrowMode = Shared> {
    pub(super) view: RawView,
    pub(super) py: Python<'py>,
    pub(super) _m: PhantomData<M>,
}

/// The slot holding the C view, which derefs to it. Thread safety is
/// decided by `Python<'py>` in the buffer (and by `PyXBufferOwned`'s own
/// contract), so the compiler names one reason rather than every pointer.
pub(super) struct RawView(ViewSlot);

impl RawView {
    /// The C view's stable address, for the `pyxbuf_*` functions.
    #[inline]
    pub(super) fn as_ptr(&self) -> *mut sys::pyxbuf_view {
        self.0.view_ptr()
    }

    /// C-order strides computed at acquisition when the producer gave none.
    #[inline]
    pub(super) fn fallback_strides(&self) -> &[sys::Py_ssize_t; sys::PYXBUF_INLINE_NDIM] {
        &self.0.get().fallback_strides
    }
}

impl std::ops::Deref for RawView {
    type Target = sys::pyxbuf_view;
    #[inline]
    fn deref(&self) -> &sys::pyxbuf_view {
        &self.0.get().view
    }
}

impl std::ops::DerefMut for RawView {
    #[inline]
    fn deref_mut(&mut self) -> &mut sys::pyxbuf_view {
        &mut self.0.get_mut().view
    }
}

pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .fully_qualified_name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}

pub(super) fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    // "num_complex::Complex<f32>" -> "Complex<f32>"; "half::bfloat::bf16" -> "bf16".
    let head = full.split('<').next().unwrap_or(full);
    match head.rfind("::") {
        Some(i) => &full[i + 2..],
        None => full,
    }
}

impl<'py> PyXUntypedBuffer<'py, Shared> {
    /// A request with no item type, to build on: read-only, strided, with a
    /// format and a shared borrow asked for; acquire with
    /// [`Request::get_untyped`] (an exclusive borrow:
    /// `.borrow_exclusive().get_untyped(obj)`).
    pub fn request() -> Request<Untyped, Shared> {
        Request::new(Shared::FLAGS)
    }

    /// Acquire the buffer of `obj` with the default request (read-only,
    /// strided, a shared borrow asked for, host memory), for any item type.
    pub fn get(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        Self::acquire(obj, Shared::FLAGS, None)
    }
}

impl<'py, M: BorrowMode> PyXUntypedBuffer<'py, M> {
    /// Acquire into a slot (see [`ViewSlot`]); the checks' error paths are
    /// out of line, and the rest is inlined into the caller.
    #[inline(always)]
    pub(super) fn acquire(
        obj: &Bound<'py, PyAny>,
        flags: i32,
        stream: Option<i64>,
    ) -> PyResult<Self> {
        let py = obj.py();
        crate::errors::speak_rust();
        let slot = ViewSlot::take();
        let view = slot.view_ptr();
        // SAFETY: `view` points to initialised storage for a pyxbuf_view that
        // does not move while the slot lives; `obj` is live and the thread is
        // attached (we hold `py`).
        let rc = unsafe {
            match stream {
                None => sys::pyxbuf_get(obj.as_ptr(), view, flags),
                Some(s) => sys::pyxbuf_get_stream(obj.as_ptr(), view, flags, s),
            }
        };
        if rc != 0 {
            return Err(PyErr::fetch(py));
        }
        // From here on the buffer owns the acquisition; returning early drops
        // (and so releases) it.
        let this = PyXUntypedBuffer {
            view: RawView(slot),
            py,
            _m: PhantomData,
        };
        this.checked(obj, flags)
    }

    /// The checks of every acquisition, out of line on their error paths.
    #[inline(always)]
    fn checked(mut self, obj: &Bound<'py, PyAny>, flags: i32) -> PyResult<Self> {
        let b = &self.view.base;
        let simple = b.suboffsets.is_null()
            && !b.strides.is_null()
            && b.ndim >= 0
            && (b.ndim == 0 || !b.shape.is_null());
        if !simple || !self.fast_len_consistent() {
            self.check_layout(obj)?;
        }
        if flags & sys::PYXBUF_BORROW_EXCLUSIVE != 0 {
            self.check_exclusive(obj)?;
        }
        Ok(self)
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

    /// Checks made once at acquisition: shape present, extents non-negative
    /// and bounded, no suboffsets unless asked for, `len` consistent with
    /// the shape, strides available.
    #[inline(never)]
    #[cold]
    fn check_layout(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<()> {
        let ndim = self.view.base.ndim;
        if ndim < 0 || (ndim > 0 && self.view.base.shape.is_null()) {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: the buffer of '{}' has ndim {ndim} but no shape; its producer ignored \
                 PyBUF_ND",
                type_name(obj)
            )));
        }
        self.check_extents(obj)?;
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
            // C order: each stride is the item size times the extents after
            // it, a product check_extents bounded (checked all the same).
            let mut stride = Some(self.view.base.itemsize);
            for i in (0..ndim).rev() {
                let Some(s) = stride else {
                    return Err(self.too_big(obj));
                };
                self.view.0.get_mut().fallback_strides[i] = s;
                stride = s.checked_mul(self.raw_shape()[i]);
            }
        }
        Ok(())
    }

    /// Every extent non-negative, and the items and their bytes countable in
    /// `isize` (see `extent_bytes`): refused with the dimension and value, or
    /// the shape, before anything multiplies or slices by them.
    fn check_extents(&self, obj: &Bound<'py, PyAny>) -> PyResult<()> {
        let shape = self.raw_shape();
        if let Some((d, &n)) = shape.iter().enumerate().find(|(_, &n)| n < 0) {
            return Err(PyBufferError::new_err(format!(
                "pyxbuf: the buffer of '{}' has a negative extent {n} in dimension {d} (shape \
                 {shape:?}); extents count items and cannot be negative: its producer is broken",
                type_name(obj)
            )));
        }
        if self.extent_bytes().is_none() {
            return Err(self.too_big(obj));
        }
        Ok(())
    }

    #[cold]
    fn too_big(&self, obj: &Bound<'py, PyAny>) -> PyErr {
        PyBufferError::new_err(format!(
            "pyxbuf: the buffer of '{}' has shape {:?} of {}-byte items, which does not fit in \
             memory (its non-zero extents times the item size exceed isize::MAX bytes); its \
             producer is broken",
            type_name(obj),
            self.raw_shape(),
            self.view.base.itemsize,
        ))
    }

    /// The view's `len` must be its items times `itemsize` on every
    /// path: slices are sized by the shape, copies by `len`, and a producer
    /// whose two answers differ would send one of them past its memory.
    fn check_len(&self, obj: &Bound<'py, PyAny>) -> PyResult<()> {
        if self.len_consistent() {
            return Ok(());
        }
        let bytes = self.extent_bytes();
        Err(PyBufferError::new_err(format!(
            "pyxbuf: the buffer of '{}' is inconsistent: its len is {} bytes, but its shape {:?} \
             of {}-byte items needs {}; its producer is broken",
            type_name(obj),
            self.view.base.len,
            self.raw_shape(),
            self.view.base.itemsize,
            bytes.map_or_else(|| "more than fits in memory".to_owned(), |b| b.to_string()),
        )))
    }

    /// The shape as the producer gave it (checked by `check_extents` before
    /// [`shape`](Self::shape) reads it as `usize`).
    #[inline(always)]
    fn raw_shape(&self) -> &[isize] {
        let n = self.view.base.ndim;
        if n <= 0 || self.view.base.shape.is_null() {
            return &[];
        }
        // SAFETY: a non-NULL shape has ndim entries, alive while the view is
        // (also when it points into the view: its slot never moves).
        unsafe { std::slice::from_raw_parts(self.view.base.shape, n as usize) }
    }

    /// The bytes the shape spans in items of `itemsize`; `None` when an
    /// extent is negative, or when the product of the non-zero extents (the
    /// item count ndarray and slices bound), or that times `itemsize`,
    /// exceeds `isize::MAX` -- Rust's limit for one allocation, which NumPy
    /// enforces too. Every product formed later from the shape (item count,
    /// C-order strides, contiguity, ndarray layouts) is one of these
    /// partial products, or zero, so none of them can overflow.
    #[inline(always)]
    fn extent_bytes(&self) -> Option<usize> {
        let mut count = 1usize;
        let mut signs = 0isize;
        let mut empty = false;
        for &n in self.raw_shape() {
            signs |= n;
            empty |= n == 0;
            count = count.checked_mul(n.max(1) as usize)?;
        }
        let bytes = count.checked_mul(self.view.base.itemsize.max(0) as usize)?;
        if signs < 0 || (count | bytes) > isize::MAX as usize {
            return None;
        }
        Some(if empty { 0 } else { bytes })
    }

    /// `len` is the shape's bytes, exactly: the full check (check_len).
    fn len_consistent(&self) -> bool {
        self.extent_bytes()
            .is_some_and(|b| b as isize == self.view.base.len)
    }

    /// The hot path's check, as cheap as before extents were checked: the
    /// extents read as `usize` multiply (checked) to `len / itemsize` with
    /// `len > 0`. That proves every extent is in `1..=isize::MAX` (a
    /// negative one reads as at least 2^63) and their product bounded, so a
    /// view that passes needs no `check_extents`. Empty views and zero item
    /// sizes (`len == 0`, where a zero extent hides the others) take the cold
    /// path, which checks every extent.
    #[inline(always)]
    fn fast_len_consistent(&self) -> bool {
        let len = self.view.base.len;
        self.shape()
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n))
            .and_then(|n| n.checked_mul(self.view.base.itemsize.max(0) as usize))
            .is_some_and(|b| b as isize == len && len > 0)
    }

    /// Run `f` with the C view's address, for the C functions that read a view.
    #[inline]
    pub(super) fn with_view<R>(&self, f: impl FnOnce(*const sys::pyxbuf_view) -> R) -> R {
        f(self.view.as_ptr())
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

    /// The raw C view, as acquired (it does not move while the buffer lives).
    pub fn raw_view(&self) -> &sys::pyxbuf_view {
        &self.view
    }

    /// Call `f` with a pointer to the C view, for read-only `pyxbuf_*`
    /// functions this crate does not wrap. Use the pointer only during `f`.
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

    /// Number of dimensions, PyO3's name for [`ndim`](PyXUntypedBuffer::ndim).
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
        // entries, alive while the view is (also when it points into the
        // view: its slot never moves); Py_ssize_t and usize share a layout
        // (any bits are a usize). Once acquired, every extent is known
        // non-negative (fast_len_consistent or check_extents; a negative one
        // refuses the view), so each reads as the same value.
        unsafe { std::slice::from_raw_parts(self.view.base.shape.cast::<usize>(), n) }
    }

    /// Bytes between consecutive items of each dimension (negative when the
    /// dimension runs backwards).
    pub fn strides(&self) -> &[isize] {
        let n = self.ndim();
        if n == 0 {
            return &[];
        }
        if self.view.base.strides.is_null() {
            return &self.view.fallback_strides()[..n];
        }
        // SAFETY: strides has ndim entries while the view lives (also when
        // it points into the view: its slot never moves); Py_ssize_t is isize.
        unsafe { std::slice::from_raw_parts(self.view.base.strides, n) }
    }

    /// Number of items.
    pub fn item_count(&self) -> usize {
        // Cannot overflow: acquisition bounded the product (extent_bytes).
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
        unsafe { element::format_of(self.view.base.format) }
    }

    /// The item format parsed ([`Format`]): its kind, item size, byte
    /// order, struct fields with their offsets, custom id and payload, and
    /// the canonical string. Formats compare by meaning: NumPy's `"f"`,
    /// JAX's `"=f"` and an exporter's `"<f"` are equal (little-endian).
    /// `ValueError` with the parser's message for a format pyxbuf cannot
    /// parse.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::{Format, FormatKind, PyXUntypedBuffer};
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.eval(c"__import__('array').array('f', [1, 2])", None, None)?;
    ///     let buf = PyXUntypedBuffer::get(&array)?;
    ///     let format = buf.parsed_format()?;
    ///     assert_eq!(format.kind(), FormatKind::Float);
    ///     assert_eq!(format.itemsize(), Some(4));
    ///     assert_eq!(format, Format::parse(c"=f").unwrap());
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn parsed_format(&self) -> PyResult<Format> {
        Format::parse(self.format()).map_err(|e| {
            PyValueError::new_err(format!(
                "pyxbuf: the buffer of '{}' has format '{}', which pyxbuf cannot parse: {e}; \
                 read it with format() instead",
                self.owner_name(),
                self.format().to_string_lossy(),
            ))
        })
    }

    /// The first item's address (host or device; never dereference a device
    /// address). PyO3: `buf_ptr`.
    pub fn buf_ptr(&self) -> *mut c_void {
        self.view.base.buf
    }

    /// The address of the item at `indices` -- or, with fewer indices than
    /// dimensions, of the first item of that sub-array (as PyO3's) --
    /// panicking when an index is out of bounds or there are too many. The
    /// item itself is not read; with suboffsets (a request made with
    /// [`Request::indirect`]) the pointers stored in the array are followed,
    /// as PEP 3118 says. PyO3: `get_ptr`.
    pub fn get_ptr(&self, indices: &[usize]) -> *mut c_void {
        assert!(
            indices.len() <= self.ndim(),
            "{} indices for {} dimensions",
            indices.len(),
            self.ndim()
        );
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
        let p = self.view.base.suboffsets;
        if p.is_null() || self.ndim() == 0 {
            return None;
        }
        // SAFETY: non-NULL suboffsets have ndim entries while the view lives
        // (also when they point into the view: its slot never moves).
        Some(unsafe { std::slice::from_raw_parts(p, self.ndim()) })
    }

    pub(super) fn contiguous_with(&self, fortran: bool) -> bool {
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
            // Bounded at acquisition (a product of non-zero extents times
            // the item size); checked all the same.
            match expected.checked_mul(n as isize) {
                Some(e) => expected = e,
                None => return false,
            }
        }
        true
    }

    /// Whether the items are laid out in C order without gaps -- never with
    /// suboffsets (the items are reached through pointers), as CPython's
    /// `PyBuffer_IsContiguous` and PyO3 answer.
    pub fn is_c_contiguous(&self) -> bool {
        if !self.view.base.suboffsets.is_null() {
            return false;
        }
        // The common cases without the iterator.
        match (self.shape(), self.strides()) {
            ([], _) => true,
            ([n], [s]) => *n <= 1 || *s == self.item_size() as isize,
            _ => self.contiguous_with(false),
        }
    }

    /// Whether the items are laid out in Fortran order without gaps (never
    /// with suboffsets).
    pub fn is_fortran_contiguous(&self) -> bool {
        if !self.view.base.suboffsets.is_null() {
            return false;
        }
        match (self.shape(), self.strides()) {
            ([], _) => true,
            ([n], [s]) => *n <= 1 || *s == self.item_size() as isize,
            _ => self.contiguous_with(true),
        }
    }

    pub(super) fn check(&self, rc: i32) -> PyResult<()> {
        if rc < 0 {
            Err(PyErr::fetch(self.py))
        } else {
            Ok(())
        }
    }

    /// Release the view now (dropping does the same). PyO3: `release`.
    pub fn release(self) {}

    fn type_error<T: Element>(&self, owner: &str) -> PyErr {
        let format = self.format();
        // SAFETY: the view's format is NULL or NUL-terminated while it lives.
        let theirs =
            unsafe { element::rust_type_for(self.view.base.format, self.view.base.itemsize) };
        let fix = match theirs {
            Some(path) => {
                let name = path.rsplit("::").next().unwrap_or(path);
                if path.contains("::") {
                    format!("or read its own items: use {path} and PyXBuffer<{name}>")
                } else {
                    format!("or read its own items: PyXBuffer<{name}>")
                }
            }
            None => "or read it with an Element type of that format (pyxbuf::Element, \
                     pyxbuf::custom_element!)"
                .to_owned(),
        };
        let message = format!(
            "pyxbuf: the buffer of '{owner}' holds items of format '{}' ({} each), but \
             PyXBuffer<{}> needs format '{}' ({} each); convert the array (e.g. \
             numpy's .astype) {fix}",
            format.to_string_lossy(),
            count(self.view.base.itemsize.max(0) as u64, "byte", "bytes"),
            short_type_name::<T>(),
            T::FORMAT.to_string_lossy(),
            count(mem::size_of::<T>() as u64, "byte", "bytes"),
        );
        item_type_error(self.py, message)
    }

    #[inline(never)]
    #[cold]
    fn type_error_for<T: Element>(self, obj: &Bound<'py, PyAny>) -> PyErr {
        self.type_error::<T>(&type_name(obj))
    }

    /// Whether the view holds `T` items (its format is one item of `T`'s
    /// kind in native byte order, and its `itemsize` is `size_of::<T>()`),
    /// without building a Python exception: to probe several types, or
    /// see [`try_typed`](Self::try_typed).
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXUntypedBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.eval(c"__import__('array').array('h', [1, 2])", None, None)?;
    ///     let buf = PyXUntypedBuffer::get(&array)?;
    ///     assert!(buf.is_of::<i16>() && !buf.is_of::<u16>() && !buf.is_of::<f32>());
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    #[inline(always)]
    pub fn is_of<T: Element>(&self) -> bool {
        // SAFETY: an acquired view's format is NULL or a NUL-terminated
        // string that lives as long as the view.
        unsafe { element::matches_ptr::<T>(self.view.base.format, self.view.base.itemsize) }
    }

    /// The type name of the object whose memory this is, for messages.
    pub(super) fn owner_name(&self) -> String {
        self.obj()
            .map(|o| type_name(&o))
            .unwrap_or_else(|| "object".to_owned())
    }

    /// `into_typed` with `obj` named in the error (the object acquired).
    #[inline(always)]
    pub(super) fn typed_for<T: Element>(
        self,
        obj: &Bound<'py, PyAny>,
    ) -> PyResult<PyXBuffer<'py, T, M>> {
        if !self.is_of::<T>() {
            return Err(self.type_error_for::<T>(obj));
        }
        Ok(PyXBuffer {
            inner: self,
            _t: PhantomData,
        })
    }

    /// The same view as items of `T`: `pyxbuf.ItemTypeError` (a `TypeError`
    /// and a `BufferError`, [`item_type_error_class`](crate::item_type_error_class))
    /// naming both formats when
    /// the format is not `T`'s (the view is released then; use
    /// [`as_typed`](Self::as_typed) to try several types).
    pub fn into_typed<T: Element>(self) -> PyResult<PyXBuffer<'py, T, M>> {
        if !self.is_of::<T>() {
            return Err(self.type_error::<T>(&self.owner_name()));
        }
        Ok(PyXBuffer {
            inner: self,
            _t: PhantomData,
        })
    }

    /// This view as items of `T`, borrowed: `pyxbuf.ItemTypeError` naming both formats
    /// when the format is not `T`'s, and the buffer stays usable.
    pub fn as_typed<T: Element>(&self) -> PyResult<&PyXBuffer<'py, T, M>> {
        self.try_typed()
            .ok_or_else(|| self.type_error::<T>(&self.owner_name()))
    }

    /// This view as items of `T`, borrowed, or `None` when its format is
    /// not `T`'s: [`as_typed`](Self::as_typed) without the exception, for
    /// probing several types.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXUntypedBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.eval(c"__import__('array').array('d', [1, 2])", None, None)?;
    ///     let buf = PyXUntypedBuffer::get(&array)?;
    ///     let total: f64 = if let Some(f) = buf.try_typed::<f32>() {
    ///         f.iter()?.map(|&v| f64::from(v)).sum()
    ///     } else if let Some(d) = buf.try_typed::<f64>() {
    ///         d.iter()?.sum()
    ///     } else {
    ///         return Err(pyo3::exceptions::PyTypeError::new_err("float32 or float64 only"));
    ///     };
    ///     assert_eq!(total, 3.0);
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn try_typed<T: Element>(&self) -> Option<&PyXBuffer<'py, T, M>> {
        if !self.is_of::<T>() {
            return None;
        }
        // SAFETY: PyXBuffer<T, M> is a repr(transparent) wrapper of
        // PyXUntypedBuffer<M> (its other field is a zero-sized marker), and
        // the format check above is the only invariant it adds.
        Some(unsafe { &*(self as *const Self).cast::<PyXBuffer<'py, T, M>>() })
    }

    /// This view as items of `T`, or the view itself back when its format
    /// is not `T`'s: [`into_typed`](Self::into_typed) without the
    /// exception, keeping the view to try another type.
    pub fn try_into_typed<T: Element>(self) -> Result<PyXBuffer<'py, T, M>, Self> {
        if !self.is_of::<T>() {
            return Err(self);
        }
        Ok(PyXBuffer {
            inner: self,
            _t: PhantomData,
        })
    }
}

impl<M: BorrowMode> Drop for PyXUntypedBuffer<'_, M> {
    fn drop(&mut self) {
        // SAFETY: the view was acquired by pyxbuf_get and not released yet
        // (this is the only place that releases it), in a slot that has not
        // moved; the thread is attached for 'py (the type is !Send and cannot
        // outlive its Python<'py>). The slot goes back to the spares after.
        unsafe { sys::pyxbuf_release(self.view.as_ptr()) }
    }
}

impl<M: BorrowMode> fmt::Debug for PyXUntypedBuffer<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.debug_as("PyXUntypedBuffer", f)
    }
}

impl<M: BorrowMode> PyXUntypedBuffer<'_, M> {
    /// The Debug output of both buffer types, under `name`.
    pub(super) fn debug_as(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
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

impl<'a, 'py, M: BorrowMode> FromPyObject<'a, 'py> for PyXUntypedBuffer<'py, M> {
    type Error = PyErr;

    #[cfg(feature = "experimental-inspect")]
    const INPUT_TYPE: pyo3::inspect::PyStaticExpr = super::INPUT_TYPE;

    #[inline]
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Self::acquire(&obj, M::FLAGS, None)
    }
}
