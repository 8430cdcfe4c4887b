//! The real CUDA backend through PyXBuffer, on machines with a CUDA driver;
//! skipped with the reason printed elsewhere (the emulated device covers the
//! same path in tests/device.rs).

use std::io::Write;

use pyo3::prelude::*;
use pyxbuf::{Device, Exclusive, PyXBuffer};

#[test]
fn cuda_device_when_a_driver_is_present() {
    Python::attach(|py| {
        let host = pyxbuf::export::new_exporter::<f32>(py, &[2, 2], Device::Cpu).unwrap();
        PyXBuffer::<f32, Exclusive>::get(&host)
            .unwrap()
            .as_mut_slice()
            .unwrap()
            .copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
        let gpu = Device::Cuda { ordinal: 0 };
        let on_gpu = match PyXBuffer::<f32>::get(&host).unwrap().to_device(gpu) {
            Ok(obj) => obj,
            Err(e) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED cuda_device_when_a_driver_is_present: no usable CUDA device ({e})"
                );
                return;
            }
        };
        let buf = PyXBuffer::<f32>::request().device().get(&on_gpu).unwrap();
        assert_eq!(buf.device(), gpu);
        assert!(buf.as_slice().is_none());
        let ptr = buf.device_ptr().unwrap();
        assert_eq!(ptr.device(), gpu);
        buf.device_wait(pyxbuf::sys::PYXBUF_STREAM_DEFAULT).unwrap();
        assert_eq!(buf.copy_to_host().unwrap(), [1.0, 2.0, 3.0, 4.0]);
        let back = buf.to_device(Device::Cpu).unwrap();
        assert_eq!(
            PyXBuffer::<f32>::get(&back).unwrap().as_slice().unwrap(),
            [1.0, 2.0, 3.0, 4.0]
        );
    });
}
