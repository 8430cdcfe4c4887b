//! Byte views and plain-data reinterpretation of contiguous host memory,
//! whatever the format: [`as_bytes`](PyXUntypedBuffer::as_bytes) /
//! [`as_bytes_mut`](PyXUntypedBuffer::as_bytes_mut), and
//! [`as_slice_of`](PyXUntypedBuffer::as_slice_of) /
//! [`as_mut_slice_of`](PyXUntypedBuffer::as_mut_slice_of) for any
//! `bytemuck` plain-data type, under the same grants as the typed slices.

use std::mem;
use std::ptr::NonNull;
use std::slice;

use bytemuck::{AnyBitPattern, Pod};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use super::request::{BorrowMode, Exclusive};
use super::view::short_type_name;
use super::{PyXBuffer, PyXUntypedBuffer};
use crate::element::Element;
use crate::words::count;

/// `U` as a user writes it, for messages: `u32`, `f16`, `[u8; 4]`.
fn target_name<U>() -> &'static str {
    let full = std::any::type_name::<U>();
    if full.starts_with(['[', '(']) {
        full
    } else {
        short_type_name::<U>()
    }
}

impl<'py, M: BorrowMode> PyXUntypedBuffer<'py, M> {
    /// The view's bytes as `count` items of `U` from the returned address
    /// (dangling and aligned for none), or the refusal of `method` saying
    /// why: host memory, no suboffsets, contiguous in C or Fortran order,
    /// under a borrow grant (an exclusive one on writable memory when
    /// `write`), a whole number of `U`s, aligned for `U`.
    fn span_of<U>(&self, method: &'static str, write: bool) -> PyResult<(*mut U, usize)> {
        let refuse = |why: String| self.byte_view_refusal::<U>(method, &why);
        if !self.is_host() {
            return Err(refuse(format!(
                "it is in device memory ({:?}), which the host cannot read; copy it to the host \
                 first (to_device(Device::Cpu), or PyXBuffer::copy_to_host)",
                self.device()
            )));
        }
        if self.suboffsets().is_some() {
            return Err(refuse(
                "it has suboffsets (PIL-style indirect memory): its items are behind pointers, \
                 not one run of bytes; copy them with PyXBuffer::to_vec()"
                    .to_owned(),
            ));
        }
        if !self.is_c_contiguous() && !self.is_fortran_contiguous() {
            return Err(refuse(format!(
                "it is not contiguous (shape {:?}, strides {:?}): its items are not one run of \
                 bytes; ask for a contiguous view (Request::contiguous(); NumPy: \
                 np.ascontiguousarray) or copy the items (PyXBuffer::to_vec())",
                self.shape(),
                self.strides(),
            )));
        }
        let grants = self.grants();
        if write && (!grants.exclusive() || self.readonly()) {
            return Err(refuse(
                "writing needs writable memory under an exclusive borrow, which this view does \
                 not hold"
                    .to_owned(),
            ));
        }
        if !grants.any() {
            return Err(refuse(
                "its producer granted no borrow (it ignores borrow requests), and a slice of its \
                 memory needs one; copy the items (PyXBuffer::to_vec())"
                    .to_owned(),
            ));
        }
        let (size, align) = (mem::size_of::<U>(), mem::align_of::<U>());
        if size == 0 {
            return Err(refuse(format!(
                "{} is zero-sized: no number of them spans the buffer's bytes",
                target_name::<U>()
            )));
        }
        let len = self.len_bytes();
        if len % size != 0 {
            return Err(refuse(format!(
                "its {} are not a whole number of {} ({} each)",
                count(len as u64, "byte", "bytes"),
                target_name::<U>(),
                count(size as u64, "byte", "bytes"),
            )));
        }
        if len == 0 {
            return Ok((NonNull::<U>::dangling().as_ptr(), 0));
        }
        let p = self.buf_ptr();
        if p.is_null() {
            return Err(refuse(format!(
                "its producer gave a NULL address for {}; its producer is broken",
                count(len as u64, "byte", "bytes"),
            )));
        }
        if !p.cast::<U>().is_aligned() {
            return Err(refuse(format!(
                "its address {p:p} is not aligned for {} ({align}-byte alignment; it is {} past \
                 a multiple of {align}); copy the bytes (bytemuck::pod_collect_to_vec of \
                 as_bytes()) or view them as a type of smaller alignment",
                target_name::<U>(),
                count((p as usize % align) as u64, "byte", "bytes"),
            )));
        }
        Ok((p.cast::<U>(), len / size))
    }

    /// The `BufferError` of a byte view or reinterpretation this view cannot
    /// give, naming what was asked (`method`, `U`) and what the view holds.
    #[cold]
    #[inline(never)]
    fn byte_view_refusal<U>(&self, method: &str, why: &str) -> PyErr {
        let (what, target) = if method.starts_with("as_bytes") {
            (format!("{method}()"), "bytes".to_owned())
        } else {
            let name = target_name::<U>();
            (format!("{method}::<{name}>()"), name.to_owned())
        };
        PyBufferError::new_err(format!(
            "pyxbuf: {what} cannot view the buffer of '{}' (format '{}', {} each) as {target}: \
             {why}",
            self.owner_name(),
            self.format().to_string_lossy(),
            count(self.item_size() as u64, "byte", "bytes"),
        ))
    }

    /// The view's bytes, whatever its format and item size: for contiguous
    /// host memory (C or Fortran order; the bytes in memory order) under a
    /// shared or exclusive borrow grant, as for
    /// [`as_slice`](PyXBuffer::as_slice) (see [`Grants`](crate::Grants)).
    /// The slice borrows the buffer, so it cannot outlive the view.
    ///
    /// `BufferError` naming the cause otherwise: device memory, suboffsets,
    /// a layout that is not contiguous (a strided NumPy slice), a producer
    /// that granted no borrow.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXUntypedBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.eval(c"__import__('array').array('i', [1, -1])", None, None)?;
    ///     let buf = PyXUntypedBuffer::get(&array)?;
    ///     let bytes: &[u8] = buf.as_bytes()?;
    ///     assert_eq!(bytes[..4], 1i32.to_ne_bytes());
    ///     assert_eq!(bytes[4..], (-1i32).to_ne_bytes());
    ///
    ///     // Every other item is not one run of bytes.
    ///     let strided = py.eval(c"memoryview(__import__('array').array('i', [1, 2, 3]))[::2]", None, None)?;
    ///     let err = PyXUntypedBuffer::get(&strided)?.as_bytes().unwrap_err();
    ///     assert!(err.is_instance_of::<pyo3::exceptions::PyBufferError>(py));
    ///     assert!(err.to_string().contains("not contiguous"));
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn as_bytes(&self) -> PyResult<&[u8]> {
        let (p, n) = self.span_of::<u8>("as_bytes", false)?;
        // SAFETY: as in as_slice_of, for bytes: any bit pattern is a u8.
        Ok(unsafe { slice::from_raw_parts(p.cast_const(), n) })
    }

    /// The view's bytes reinterpreted as items of `U`, any plain-data type
    /// valid for every bit pattern ([`bytemuck::AnyBitPattern`]): an `i8`
    /// buffer as `u8`, `u32` as `f32`, `f16` as `u16`, `bool` as `u8`,
    /// RGB bytes as `[u8; 3]`. `U` need not be the view's item type nor its
    /// size: the bytes must be a whole number of `U`s and their address
    /// aligned for `U`, checked here (a `u8` buffer at an odd address is no
    /// `&[u32]`). What [`as_bytes`](Self::as_bytes) needs is needed too.
    /// `bool` is no `U` (not every byte is a `bool`): it does not compile.
    ///
    /// `BufferError` naming what was asked and what the view holds (its
    /// format, item size, address or length) otherwise.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::{PyXBuffer, PyXUntypedBuffer};
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.eval(c"__import__('array').array('b', [-1, 2])", None, None)?;
    ///     let signed = PyXBuffer::<i8>::get(&array)?;
    ///     assert_eq!(signed.as_slice_of::<u8>()?, [255, 2]);
    ///
    ///     let bits = py.eval(c"__import__('array').array('I', [0x3f800000])", None, None)?;
    ///     let floats = PyXUntypedBuffer::get(&bits)?;
    ///     assert_eq!(floats.as_slice_of::<f32>()?, [1.0]);
    ///
    ///     let five = pyo3::types::PyBytes::new(py, b"abcde");
    ///     let err = PyXUntypedBuffer::get(&five)?.as_slice_of::<u16>().unwrap_err();
    ///     assert!(err.to_string().contains("5 bytes are not a whole number of u16"));
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn as_slice_of<U: AnyBitPattern>(&self) -> PyResult<&[U]> {
        let (p, n) = self.span_of::<U>("as_slice_of", false)?;
        // SAFETY: span_of found host memory that the view keeps alive while
        // `&self` is borrowed, contiguous (C or Fortran order), so exactly the
        // view's len bytes from `p` (bounded by isize::MAX at acquisition),
        // which are `n` whole `U`s at an address aligned for `U` (dangling
        // and aligned when n is 0). The borrow grant means nobody writes them
        // through pyxbuf (enforced grants: at all; tracked ones under the
        // crate's trust model) while the view lives, and the only writers of
        // this view (as_bytes_mut, as_mut_slice_of, as_mut_slice...) need
        // `&mut self`. `U: AnyBitPattern`: every bit pattern is a valid `U`
        // (padding allowed: only read), without interior mutability.
        Ok(unsafe { slice::from_raw_parts(p.cast_const(), n) })
    }
}

impl<'py> PyXUntypedBuffer<'py, Exclusive> {
    /// The view's bytes, writable, whatever its format and item size: what
    /// [`as_bytes`](Self::as_bytes) needs, on writable memory under the
    /// exclusive grant an `Exclusive` buffer holds (so no other view reads
    /// or writes the memory meanwhile), borrowing the buffer mutably (so no
    /// other slice of this view is alive). A shared buffer has no mutable
    /// byte view.
    ///
    /// The bytes written need not be valid items of the view's type: pyxbuf
    /// checks the bytes of a `bool` item before it forms a `&bool` over
    /// them (a typed slice of them is `None` afterwards; copies make them
    /// `true`).
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXUntypedBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let data = pyo3::types::PyByteArray::new(py, b"abc");
    ///     let mut buf = PyXUntypedBuffer::request().borrow_exclusive().get_untyped(&data)?;
    ///     buf.as_bytes_mut()?.make_ascii_uppercase();
    ///     drop(buf);
    ///     assert_eq!(data.to_vec(), b"ABC");
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn as_bytes_mut(&mut self) -> PyResult<&mut [u8]> {
        let (p, n) = self.span_of::<u8>("as_bytes_mut", true)?;
        // SAFETY: as in as_slice_of, plus: the exclusive grant means no
        // other view reads or writes the memory while this one lives (through
        // pyxbuf; enforced grants: at all), the memory is writable (checked),
        // and `&mut self` makes this the only slice of this view. Any byte is
        // a valid u8, and any byte written leaves the items as sound as
        // before: pyxbuf reads producer bytes as a type with invalid bit
        // patterns (bool) only after checking them.
        Ok(unsafe { slice::from_raw_parts_mut(p, n) })
    }

    /// [`as_slice_of`](Self::as_slice_of), writable: the bytes as items of
    /// `U`, a plain-data type without padding ([`bytemuck::Pod`]), so
    /// whatever is written leaves initialised bytes. What
    /// [`as_bytes_mut`](Self::as_bytes_mut) needs is needed too; size and
    /// alignment are checked as for `as_slice_of`.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::{Exclusive, PyXBuffer};
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.eval(c"__import__('array').array('f', [1.0, -2.0])", None, None)?;
    ///     let mut buf = PyXBuffer::<f32, Exclusive>::get(&array)?;
    ///     for bits in buf.as_mut_slice_of::<u32>()? {
    ///         *bits &= !(1 << 31); // clear the sign bit
    ///     }
    ///     drop(buf);
    ///     assert_eq!(array.call_method0("tolist")?.extract::<Vec<f32>>()?, [1.0, 2.0]);
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn as_mut_slice_of<U: Pod>(&mut self) -> PyResult<&mut [U]> {
        let (p, n) = self.span_of::<U>("as_mut_slice_of", true)?;
        // SAFETY: as in as_bytes_mut, for `n` whole `U`s at an address
        // aligned for `U` (checked); `U: Pod`: every bit pattern is a valid
        // `U` and it has no padding, so every write leaves initialised bytes.
        Ok(unsafe { slice::from_raw_parts_mut(p, n) })
    }
}

impl<'py, T: Element> PyXBuffer<'py, T, Exclusive> {
    /// [`PyXUntypedBuffer::as_bytes_mut`]: the items' bytes, writable.
    pub fn as_bytes_mut(&mut self) -> PyResult<&mut [u8]> {
        self.inner.as_bytes_mut()
    }

    /// [`PyXUntypedBuffer::as_mut_slice_of`]: the items' bytes as items of
    /// `U`, writable.
    pub fn as_mut_slice_of<U: Pod>(&mut self) -> PyResult<&mut [U]> {
        self.inner.as_mut_slice_of()
    }
}
