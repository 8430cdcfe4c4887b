//! `pyxbuf.Exporter` objects made from Rust: [`new_exporter`] allocates one,
//! [`exporter_over`] views another object's buffer (or a `SharedMemory`),
//! and [`wrap`] lends one another object's memory, zero-copy, under a borrow of
//! that memory held for the exporter's life.

use std::ffi::{c_void, CStr};
use std::mem::MaybeUninit;
use std::ptr;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyxbuf_sys as sys;

use crate::device::Device;
use crate::element::Element;
use crate::Grants;

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
/// exporting through [`getbuffer`](super::getbuffer)). It exports the memory through the
/// extended protocol with borrow counting, and through DLPack.
///
/// The exporter holds a borrow of `obj`'s memory for its whole life: shared
/// when `writable` is false (the exporter is then read-only, whatever `obj`
/// allows), exclusive when it is true. So no pyxbuf consumer can write `obj`
/// while the exporter hands out shared borrows, nor touch it at all while it
/// hands out an exclusive one. When `obj`'s producer enforces borrows
/// (pyxbuf's exporters, [`ExportBuffer`](super::ExportBuffer) classes), nobody can; when the
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

/// A `pyxbuf.Exporter` of `shape` items of `T` over `base`'s memory, no copy:
/// C order from `offset` bytes in, every byte inside `base`'s buffer (else
/// `ValueError`). The exporter holds a view of `base` while it lives (a
/// `bytearray` cannot resize, a `SharedMemory` cannot close under it), and is
/// writable when `base` is and `readonly` is false.
///
/// `base` is any buffer (bytes, bytearray, memoryview, mmap, a NumPy array)
/// or a `multiprocessing.shared_memory.SharedMemory`: then the exporter
/// pickles by the block's name (worker processes map the same memory and
/// fill it in place) and grants no borrow, since nothing in one process can
/// stop another's writes. Other bases' grants are tracked ones (`base`'s
/// owner can still write it). This is `pyxbuf_exporter_over`, what
/// `pyxbuf.frombuffer` calls.
///
/// ```
/// use pyo3::prelude::*;
/// use pyxbuf::PyXBuffer;
/// Python::attach(|py| -> PyResult<()> {
///     let base = pyo3::types::PyByteArray::new(py, &[0u8; 16]);
///     let e = pyxbuf::export::exporter_over::<f32>(&base, &[3], 4, false)?;
///     let mut items = PyXBuffer::<f32>::request().borrow_exclusive().get(&e)?;
///     assert!(items.grants().tracked()); // the bytearray's owner could still write it
///     items.as_mut_slice().unwrap()[0] = 1.0;
///     drop(items);
///     assert_eq!(&base.to_vec()[4..8], &1.0f32.to_ne_bytes());
///     // Outside the buffer: refused, naming the bytes asked for.
///     let err = pyxbuf::export::exporter_over::<f32>(&base, &[4], 4, false).unwrap_err();
///     assert!(err.to_string().contains("reach bytes [0, 16) from offset 4"), "{err}");
///     Ok(())
/// })
/// .unwrap();
/// ```
pub fn exporter_over<'py, T: Element>(
    base: &Bound<'py, PyAny>,
    shape: &[usize],
    offset: usize,
    readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let shape: Vec<isize> = shape.iter().map(|&n| n as isize).collect();
    let offset = isize::try_from(offset)
        .map_err(|_| pyo3::exceptions::PyValueError::new_err("exporter_over: offset too large"))?;
    let options = if readonly {
        sys::PYXBUF_OVER_READONLY
    } else {
        0
    };
    // SAFETY: a live object; a NUL-terminated format; shape.len() dims, C
    // order (no strides); the thread is attached; a new reference or NULL
    // with an exception set.
    unsafe {
        let obj = sys::pyxbuf_exporter_over(
            base.as_ptr(),
            offset,
            T::FORMAT.as_ptr(),
            0,
            shape.len() as i32,
            shape.as_ptr(),
            ptr::null(),
            options,
        );
        Bound::from_owned_ptr_or_err(base.py(), obj)
    }
}
