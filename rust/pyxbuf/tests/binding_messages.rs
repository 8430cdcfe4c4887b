//! Issue 50, item 9: a refusal raised by the Rust crate's copy of libpyxbuf
//! names Rust's fix (`PyXBuffer::<T>::request().device()`), and the Python
//! caller's beside it, not the C API's (`request PYXBUF_DEVICE and read
//! view->device`). The crate claims its copy's binding on its first
//! acquisition.
#![cfg(feature = "emulated-device")]

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyxbuf::{Device, PyXBuffer};

#[test]
fn a_device_refusal_names_the_rust_fix() {
    pyxbuf::emulated::register().unwrap();
    Python::attach(|py| {
        let host = PyBytes::new(py, &[1, 2, 3, 4]);
        let on_device = PyXBuffer::<u8>::get(&host)
            .unwrap()
            .to_device(Device::Emulated { id: 0 })
            .unwrap();
        let err = PyXBuffer::<u8>::get(&on_device).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("holds memory on device 'ext_dev:0'")
                && msg.contains("PyXBuffer::<T>::request().device()")
                && msg.contains("pyxbuf.to_device(x, \"cpu\")"),
            "{msg}"
        );
        assert!(!msg.contains("view->device"), "{msg}");
        // The fix it names works.
        let buf = PyXBuffer::<u8>::request().device().get(&on_device).unwrap();
        assert_eq!(buf.device(), Device::Emulated { id: 0 });
        assert_eq!(buf.copy_to_host().unwrap(), [1, 2, 3, 4]);
    });
}

#[test]
fn a_device_without_backend_names_the_rust_ways_to_one() {
    Python::attach(|py| {
        let host = PyBytes::new(py, &[1, 2, 3, 4]);
        let err = PyXBuffer::<u8>::get(&host)
            .unwrap()
            .to_device(Device::Rocm { ordinal: 0 })
            .map(|_| ())
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("no pyxbuf backend for device type 10 (rocm)")
                && msg.contains("pyxbuf::emulated::register()")
                && msg.contains("pyxbuf::sys::pyxbuf_backend_register"),
            "{msg}"
        );
        assert!(
            !msg.contains("register one with pyxbuf_backend_register"),
            "{msg}"
        );
    });
}
