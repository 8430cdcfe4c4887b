//! What a class exports and what it promises about it: [`ExportDesc`] (memory,
//! item type, shape, strides, device), [`DeviceInfo`] (the device and its sync
//! event) and the `unsafe` trait [`ExportBuffer`].

use std::ffi::{c_void, CStr};
use std::mem;

use pyo3::PyClass;
use pyxbuf_sys as sys;

use super::BorrowCounter;
use crate::device::Device;
use crate::element::Element;

/// The device description an exporter of device memory keeps alive for its
/// views (a `pyxbuf_device_info`): device and the sync event consumers wait on.
#[derive(Debug)]
pub struct DeviceInfo(pub(super) sys::pyxbuf_device_info);

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
    pub(super) buf: *mut c_void,
    pub(super) shape: &'a [isize],
    pub(super) strides: Option<&'a [isize]>,
    pub(super) format: &'static CStr,
    pub(super) itemsize: usize,
    pub(super) readonly: bool,
    pub(super) device: Option<&'a DeviceInfo>,
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

/// A `#[pyclass]` that exports memory through
/// [`getbuffer`](super::getbuffer) / [`releasebuffer`](super::releasebuffer)
/// (to which [`export_pymethods!`](crate::export_pymethods) forwards its
/// buffer slots).
///
/// # Safety
///
/// While the object has live views ([`BorrowCounter::views`] > 0) the memory,
/// shape and strides [`export_desc`](ExportBuffer::export_desc) describes
/// stay valid, in place and unchanged, and the class does not write the
/// memory itself while a shared or exclusive borrow is live, nor read it
/// while an exclusive borrow is (see [`HostArray`](super::HostArray), which
/// does all of this).
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
