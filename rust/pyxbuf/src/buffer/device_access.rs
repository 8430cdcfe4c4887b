//! Where the memory lives: device, device identifier and info, waiting for
//! the producer, moving to another device; the typed device pointer.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::ptr;

use pyo3::prelude::*;
use pyxbuf_sys as sys;

use super::request::BorrowMode;
use super::{PyXBuffer, PyXUntypedBuffer};
use crate::device::{Device, DevicePtr, SyncEvent};
use crate::element::Element;

impl<'py, M: BorrowMode> PyXUntypedBuffer<'py, M> {
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
        let d = self.view.device;
        // SAFETY: a non-NULL device is a NUL-terminated identifier that lives
        // at least as long as the view.
        (!d.is_null()).then(|| unsafe { CStr::from_ptr(d) })
    }

    pub(super) fn device_info(&self) -> Option<&sys::pyxbuf_device_info> {
        let id = self.device_identifier()?;
        if id != sys::PYXBUF_DEVICE_DLPACK {
            return None;
        }
        let info = self.view.device_info.cast::<sys::pyxbuf_device_info>();
        // SAFETY: a "pyxbuf.dlpack" device's info is a pyxbuf_device_info
        // (validated by pyxbuf_get) that lives as long as the view.
        (!info.is_null()).then(|| unsafe { &*info })
    }

    /// Make `consumer_stream` (DLPack's integer convention) wait for the
    /// producer's sync event; a no-op for host memory and views without one.
    pub fn device_wait(&self, consumer_stream: i64) -> PyResult<()> {
        // SAFETY: a valid, acquired view; the thread is attached.
        let rc = self.with_view(|v| unsafe { sys::pyxbuf_device_wait(v, consumer_stream) });
        self.check(rc)
    }

    /// The same items on `device`: a new `pyxbuf.Exporter` holding a C-order
    /// copy, or the object itself when it already lives there (the Array
    /// API's `to_device`; no implicit transfers elsewhere).
    pub fn to_device(&self, device: Device) -> PyResult<Bound<'py, PyAny>> {
        self.to_device_on_stream(device, sys::PYXBUF_STREAM_DEFAULT)
    }

    /// [`to_device`](PyXUntypedBuffer::to_device) with the copies ordered on
    /// `stream` (DLPack's integer convention). Device memory from the
    /// stream-ordered pool ([`TransferConfig::device_pool`](crate::TransferConfig::device_pool))
    /// is allocated on `stream` and freed in its order when the result dies:
    /// `stream` must still exist then, or the memory is kept out of the pool.
    pub fn to_device_on_stream(&self, device: Device, stream: i64) -> PyResult<Bound<'py, PyAny>> {
        let target = device.raw();
        // SAFETY: a valid, acquired view and device; the result is a new
        // reference or NULL with an exception set.
        let obj = self.with_view(|v| unsafe { sys::pyxbuf_to_device(v, &target, stream) });
        // SAFETY: as above.
        unsafe { Bound::from_owned_ptr_or_err(self.py, obj) }
    }
}

impl<T: Element, M: BorrowMode> PyXBuffer<'_, T, M> {
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
}
