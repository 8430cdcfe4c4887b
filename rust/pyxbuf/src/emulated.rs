//! The guarded emulated device (DLPack `kDLExtDev`) for tests: device memory
//! that faults when the host dereferences it, and streams that run only
//! when synchronised. Compiled in by the `emulated-device` feature; never enable it
//! in a release build.

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;
use pyxbuf_sys as sys;

/// Register the emulated device's backend (idempotent). Afterwards
/// [`Device::Emulated`](crate::Device::Emulated) devices 0..4 work.
///
/// ```
/// use pyo3::prelude::*;
/// use pyxbuf::{Device, PyXBuffer};
/// pyxbuf::emulated::register().unwrap();
/// Python::attach(|py| -> PyResult<()> {
///     let host = pyo3::types::PyBytes::new(py, &[1, 2, 3, 4]);
///     let on_device = PyXBuffer::<u8>::get(&host)?.to_device(Device::Emulated { id: 0 })?;
///     let buf = PyXBuffer::<u8>::request().device().get(&on_device)?;
///     assert_eq!(buf.device(), Device::Emulated { id: 0 });
///     assert!(buf.as_slice().is_none()); // the host cannot read device memory
///     assert_eq!(buf.copy_to_host()?, [1, 2, 3, 4]);
///     Ok(())
/// })
/// .unwrap();
/// ```
pub fn register() -> PyResult<()> {
    let mut err = sys::pyxbuf_error::default();
    // SAFETY: registration needs no GIL; `err` outlives the call.
    let rc = unsafe { sys::emulated::pyxbuf_emulated_register(&mut err) };
    if rc == 0 {
        return Ok(());
    }
    Err(PyRuntimeError::new_err(format!(
        "pyxbuf: cannot register the emulated device: {}",
        crate::format::c_error_message(&err)
    )))
}

/// Live allocations on all emulated devices (tests assert 0 at the end).
pub fn live_allocations() -> i64 {
    // SAFETY: a counter read under the backend's lock.
    unsafe { sys::emulated::pyxbuf_emulated_live_allocations() }
}
