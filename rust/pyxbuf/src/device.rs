//! Devices (in the Array API's sense: a DLPack device type and an ordinal)
//! and typed device pointers.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use pyxbuf_sys as sys;

/// Where a buffer's memory lives. Device types are DLPack's `DLDeviceType`
/// integers, so every device DLPack names is describable.
///
/// ```
/// use pyxbuf::Device;
/// assert_eq!(Device::Cuda { ordinal: 1 }.to_string(), "cuda:1");
/// assert_eq!(Device::from_dlpack(2, 1), Device::Cuda { ordinal: 1 });
/// assert_eq!(Device::Cpu.dlpack(), (1, 0));
/// assert!(Device::CudaHost.is_host_accessible());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Device {
    /// Host memory (`kDLCPU`).
    Cpu,
    /// CUDA device memory (`kDLCUDA`).
    Cuda {
        /// The CUDA device ordinal.
        ordinal: i32,
    },
    /// Pinned host memory registered with CUDA (`kDLCUDAHost`).
    CudaHost,
    /// ROCm/HIP device memory (`kDLROCM`).
    Rocm {
        /// The HIP device ordinal.
        ordinal: i32,
    },
    /// pyxbuf's guarded emulated device (`kDLExtDev`), used by tests: its
    /// memory faults when the host dereferences it.
    Emulated {
        /// The emulated device's id.
        id: i32,
    },
    /// Any other DLPack device type (CUDA managed, oneAPI, Metal, Vulkan, ...).
    Other {
        /// The DLPack `DLDeviceType`.
        device_type: i32,
        /// The device ordinal.
        id: i32,
    },
    /// A device identifier pyxbuf cannot interpret (a producer's own id
    /// rather than `"pyxbuf.dlpack"`): see
    /// [`PyXUntypedBuffer::device_identifier`](crate::PyXUntypedBuffer::device_identifier).
    Unknown,
}

impl Device {
    /// The device of a DLPack `(device_type, device_id)` pair.
    pub fn from_dlpack(device_type: i32, id: i32) -> Device {
        match device_type {
            sys::PYXBUF_DL_CPU => Device::Cpu,
            sys::PYXBUF_DL_CUDA => Device::Cuda { ordinal: id },
            sys::PYXBUF_DL_CUDA_HOST => Device::CudaHost,
            sys::PYXBUF_DL_ROCM => Device::Rocm { ordinal: id },
            sys::PYXBUF_DL_EXT_DEV => Device::Emulated { id },
            _ => Device::Other { device_type, id },
        }
    }

    /// The DLPack `(device_type, device_id)` pair (`(0, 0)` for
    /// [`Device::Unknown`], which DLPack has no number for).
    pub fn dlpack(&self) -> (i32, i32) {
        match *self {
            Device::Cpu => (sys::PYXBUF_DL_CPU, 0),
            Device::Cuda { ordinal } => (sys::PYXBUF_DL_CUDA, ordinal),
            Device::CudaHost => (sys::PYXBUF_DL_CUDA_HOST, 0),
            Device::Rocm { ordinal } => (sys::PYXBUF_DL_ROCM, ordinal),
            Device::Emulated { id } => (sys::PYXBUF_DL_EXT_DEV, id),
            Device::Other { device_type, id } => (device_type, id),
            Device::Unknown => (0, 0),
        }
    }

    /// Whether the host may dereference this memory (host, pinned host).
    pub fn is_host_accessible(&self) -> bool {
        matches!(
            self.dlpack().0,
            sys::PYXBUF_DL_CPU | sys::PYXBUF_DL_CUDA_HOST | sys::PYXBUF_DL_ROCM_HOST
        )
    }

    pub(crate) fn raw(&self) -> sys::pyxbuf_device {
        let (device_type, device_id) = self.dlpack();
        sys::pyxbuf_device {
            device_type,
            device_id,
        }
    }
}

impl fmt::Display for Device {
    /// The Array API's spelling that pyxbuf's exporters use: `"cpu"`,
    /// `"cuda:0"`, `"ext_dev:1"`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Device::Unknown {
            return f.write_str("unknown");
        }
        let raw = self.raw();
        let mut buf = [0u8; 64];
        // SAFETY: a valid device and a writable buffer of the stated capacity;
        // the C function writes a NUL-terminated string when it fits.
        let n = unsafe { sys::pyxbuf_device_format(&raw, buf.as_mut_ptr().cast(), buf.len()) };
        match usize::try_from(n) {
            Ok(n) if n < buf.len() => f.write_str(&String::from_utf8_lossy(&buf[..n])),
            _ => write!(f, "device({}, {})", raw.device_type, raw.device_id),
        }
    }
}

/// A typed pointer into device memory, with the device that holds it and
/// the producer's synchronisation event. Borrowed from the
/// [`PyXBuffer`](crate::PyXBuffer) it came from: it cannot outlive the view.
///
/// Nothing here dereferences the pointer: hand it to your device API (a
/// CUDA kernel launch, cudarc, ...) after making your stream wait for
/// [`sync_event`](DevicePtr::sync_event) (or call
/// [`PyXUntypedBuffer::device_wait`](crate::PyXUntypedBuffer::device_wait)).
#[derive(Debug, Clone, Copy)]
pub struct DevicePtr<'a, T> {
    pub(crate) ptr: *mut T,
    pub(crate) device: Device,
    pub(crate) sync: SyncEvent,
    pub(crate) stream: i64,
    pub(crate) _view: PhantomData<&'a T>,
}

// SAFETY: a DevicePtr is an address, a device and an event handle, none of
// which it dereferences: any thread may carry it (a kernel launch inside
// `py.detach`), while the borrow of its view keeps the memory alive.
unsafe impl<T: Send + Sync> Send for DevicePtr<'_, T> {}
// SAFETY: as above; shared access only copies the numbers out.
unsafe impl<T: Send + Sync> Sync for DevicePtr<'_, T> {}

/// What a consumer must wait for before touching device memory.
///
/// `Ready` means exactly: the producer's writes are ordered before work the
/// consumer enqueues on the request's stream
/// ([`Request::stream`](crate::Request::stream)), or it has none pending. It
/// says nothing about any other stream. pyxbuf hands out `Ready` only where that holds: a DLPack
/// producer asked with a stream orders its work before it; asked without one
/// it orders it before the default stream only, and pyxbuf then records an
/// event there and answers `Event`; a zero-copy exporter
/// ([`wrap`](crate::export::wrap)) records its own event after the source's.
///
/// `Ready` and `Unknown` are different answers: `Unknown` is pyxbuf not being
/// able to tell, because the producer's device identifier is one pyxbuf has
/// no description for. Treat `Unknown` as "synchronise the whole device" (or
/// refuse), never as ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncEvent {
    /// Ordered before the request's stream: work enqueued there after
    /// acquisition sees the producer's data (see above).
    Ready,
    /// Wait for this event (a `CUevent` for CUDA) before reading or writing.
    Event(NonNull<c_void>),
    /// The device is one pyxbuf cannot describe: nothing is known about
    /// pending work.
    Unknown,
}

// SAFETY: an opaque handle of the device's driver (a CUevent), which the
// driver lets any thread wait on; pyxbuf never dereferences it.
unsafe impl Send for SyncEvent {}
// SAFETY: as above.
unsafe impl Sync for SyncEvent {}

impl SyncEvent {
    pub(crate) fn from_info(info: Option<&pyxbuf_sys::pyxbuf_device_info>) -> SyncEvent {
        match info {
            None => SyncEvent::Unknown,
            Some(i) => NonNull::new(i.sync_event).map_or(SyncEvent::Ready, SyncEvent::Event),
        }
    }

    /// The event, if there is one to wait for.
    pub fn event(&self) -> Option<NonNull<c_void>> {
        match self {
            SyncEvent::Event(e) => Some(*e),
            _ => None,
        }
    }
}

impl<T> DevicePtr<'_, T> {
    /// The first item's address on the device.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The first item's address on the device, for writing. Writing is only
    /// sound under an exclusive grant (see [`Grants`](crate::Grants)).
    pub fn as_mut_ptr(&self) -> *mut T {
        self.ptr
    }

    /// The address as an integer (e.g. a `CUdeviceptr`).
    pub fn addr(&self) -> u64 {
        self.ptr as usize as u64
    }

    /// The device holding the memory.
    pub fn device(&self) -> Device {
        self.device
    }

    /// What to wait for: the event the producer recorded after its last write
    /// (a `CUevent` for CUDA), [`SyncEvent::Ready`] when there is none, or
    /// [`SyncEvent::Unknown`] for a device pyxbuf cannot describe.
    pub fn sync_event(&self) -> SyncEvent {
        self.sync
    }

    /// The producer's stream (DLPack's integer convention), informational.
    pub fn producer_stream(&self) -> i64 {
        self.stream
    }
}
