//! The device path on pyxbuf's guarded emulated device (`--features emulated`):
//! acquisition, device(), device_ptr(), copies, to_device, refusals.
#![cfg(feature = "emulated-device")]

mod common;

use common::eval;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyxbuf::{Device, Exclusive, Path, PyXBuffer, SyncEvent};

const EMU: Device = Device::Emulated { id: 0 };

/// A float32 array of `values` on the emulated device.
fn on_device<'py>(py: Python<'py>, values: &[f32], shape: &[usize]) -> Bound<'py, PyAny> {
    pyxbuf::emulated::register().unwrap();
    let host = pyxbuf::export::new_exporter::<f32>(py, shape, Device::Cpu).unwrap();
    PyXBuffer::<f32, Exclusive>::get(&host)
        .unwrap()
        .as_mut_slice()
        .unwrap()
        .copy_from_slice(values);
    let dev = PyXBuffer::<f32>::get(&host)
        .unwrap()
        .to_device(EMU)
        .unwrap();
    assert_eq!(
        dev.getattr("device").unwrap().extract::<String>().unwrap(),
        "ext_dev:0"
    );
    dev
}

#[test]
fn emulated_device_arrays() {
    Python::attach(|py| {
        let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let dev = on_device(py, &values, &[2, 3]);

        // Without .device() the producer refuses: the host cannot read it.
        let err = PyXBuffer::<f32>::get(&dev).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        assert!(err.to_string().contains("ext_dev:0"), "{err}");

        let buf = PyXBuffer::<f32>::request().device().get(&dev).unwrap();
        assert_eq!(buf.path(), Path::Native);
        assert_eq!(buf.device(), EMU);
        assert!(!buf.is_host());
        assert_eq!(buf.device_identifier().unwrap(), c"pyxbuf.dlpack");
        assert_eq!(buf.shape(), [2, 3]);
        assert!(buf.grants().shared() && buf.grants().is_enforced());
        assert!(
            buf.as_slice().is_none(),
            "device memory is never a host slice"
        );
        assert!(buf.as_cells().is_none());
        let err = buf.to_vec().unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");

        let ptr = buf
            .device_ptr()
            .expect("device memory has a device pointer");
        assert_eq!(ptr.device(), EMU);
        assert_eq!(ptr.as_ptr(), buf.buf_ptr().cast::<f32>().cast_const());
        assert_ne!(ptr.addr(), 0);
        // to_device recorded an event after its copy; consumers wait on it.
        assert!(matches!(ptr.sync_event(), SyncEvent::Event(_)));
        buf.device_wait(pyxbuf::sys::PYXBUF_STREAM_DEFAULT).unwrap();

        assert_eq!(buf.copy_to_host().unwrap(), values);
        let back = buf.to_device(Device::Cpu).unwrap();
        assert_eq!(
            PyXBuffer::<f32>::get(&back).unwrap().as_slice().unwrap(),
            values
        );
        // Already there: the same object, no copy.
        assert!(buf.to_device(EMU).unwrap().is(&dev));
    });
}

#[test]
fn exclusive_device_borrows() {
    Python::attach(|py| {
        let dev = on_device(py, &[0.5; 4], &[4]);
        let mut w = PyXBuffer::<f32>::request()
            .device()
            .writable()
            .get(&dev)
            .unwrap();
        assert!(w.grants().exclusive());
        assert!(
            w.as_mut_slice().is_none(),
            "no host slice of device memory, even exclusive"
        );
        assert!(w.device_ptr().is_some());
        assert!(PyXBuffer::<f32>::request().device().get(&dev).is_err());
        drop(w);
        assert_eq!(
            PyXBuffer::<f32>::request()
                .device()
                .get(&dev)
                .unwrap()
                .copy_to_host()
                .unwrap(),
            [0.5; 4]
        );
    });
}

#[test]
fn device_bfloat16_and_numpy_round_trip() {
    Python::attach(|py| {
        pyxbuf::emulated::register().unwrap();
        let a = eval(
            py,
            "np.arange(6, dtype=np.float64).reshape(2, 3)[:, ::2]",
            &[],
        );
        let host = PyXBuffer::<f64>::get(&a).unwrap();
        let dev = host.to_device(EMU).unwrap(); // strided host -> packed device copy
        drop(host);
        let buf = PyXBuffer::<f64>::request().device().get(&dev).unwrap();
        assert!(buf.is_c_contiguous());
        assert_eq!(buf.copy_to_host().unwrap(), [0.0, 2.0, 3.0, 5.0]);

        // Fresh device memory is poisoned (0xDB), never silently zero.
        let raw = pyxbuf::export::new_exporter::<half::bf16>(py, &[3], EMU).unwrap();
        let b = PyXBuffer::<half::bf16>::request()
            .device()
            .get(&raw)
            .unwrap();
        assert_eq!(b.format().to_str().unwrap(), "[ml_dtypes$bfloat16]");
        assert_eq!(
            b.copy_to_host().unwrap(),
            [half::bf16::from_bits(0xDBDB); 3]
        );
    });
}

/// A device pyxbuf has no description for: its sync state is Unknown, never
/// Ready (the two used to be one `None`). A freshly made emulated-device
/// array whose producer recorded no event is Ready.
#[test]
fn foreign_device_sync_is_unknown_not_ready() {
    Python::attach(|py| {
        pyxbuf::emulated::register().unwrap();
        let ready = pyxbuf::export::new_exporter::<f32>(py, &[2], EMU).unwrap();
        let buf = PyXBuffer::<f32>::request().device().get(&ready).unwrap();
        assert_eq!(buf.device_ptr().unwrap().sync_event(), SyncEvent::Ready);
        drop(buf);

        // Declared before the exporter, so it outlives it.
        let mut memory = [0f32; 4];
        let mut shape: [pyxbuf::sys::Py_ssize_t; 1] = [4];
        let desc = pyxbuf::sys::pyxbuf_export_desc {
            size: std::mem::size_of::<pyxbuf::sys::pyxbuf_export_desc>() as u32,
            ndim: 1,
            // pyxbuf never reads a foreign device's memory: only the address.
            buf: memory.as_mut_ptr().cast(),
            format: c"f".as_ptr(),
            shape: shape.as_mut_ptr(),
            device: c"otherlib.npu".as_ptr(),
            ..Default::default()
        };
        // SAFETY: a complete description whose memory outlives the exporter
        // (dropped at the end of this closure, before `memory`); a new
        // reference or NULL with an exception set.
        let foreign = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyxbuf::sys::pyxbuf_exporter_wrap(&desc, None, std::ptr::null_mut()),
            )
        }
        .unwrap();
        let buf = PyXBuffer::<f32>::request().device().get(&foreign).unwrap();
        assert_eq!(buf.device(), Device::Unknown);
        assert_eq!(buf.device_identifier(), Some(c"otherlib.npu"));
        let ptr = buf.device_ptr().unwrap();
        assert_eq!(ptr.sync_event(), SyncEvent::Unknown);
        assert!(ptr.sync_event().event().is_none());
    });
}

/// A device pointer can go where a kernel launch goes: inside `py.detach`.
#[test]
fn device_pointers_cross_into_detach() {
    Python::attach(|py| {
        let dev = on_device(py, &[1.0, 2.0], &[2]);
        let buf = PyXBuffer::<f32>::request().device().get(&dev).unwrap();
        let ptr = buf.device_ptr().unwrap();
        let (addr, device) = py.detach(|| (ptr.addr(), ptr.device()));
        assert_eq!((addr, device), (ptr.addr(), EMU));
    });
}

/// The emulated device's backend.
fn emulated_backend() -> pyxbuf::sys::pyxbuf_backend {
    let mut b = pyxbuf::sys::pyxbuf_backend::default();
    let mut err = pyxbuf::sys::pyxbuf_error::default();
    // SAFETY: out-pointers to live locals.
    let rc = unsafe {
        pyxbuf::sys::pyxbuf_backend_get(pyxbuf::sys::PYXBUF_DL_EXT_DEV, &mut b, &mut err)
    };
    assert_eq!(rc, 0);
    b
}

/// A producer "kernel" on a stream of its own writes `values` into the
/// emulated-device exporter `dev` and hands it the event recorded after it;
/// on the emulated device nothing runs until someone waits.
fn pending_write(dev: &Bound<'_, PyAny>, values: &[f32]) -> i64 {
    let b = emulated_backend();
    let mut err = pyxbuf::sys::pyxbuf_error::default();
    let mut stream = 0i64;
    let mut event = std::ptr::null_mut();
    // SAFETY: `dev` is a live exporter with room for `values` (the tests make
    // it so); the backend functions get live out-pointers.
    unsafe {
        let data = pyxbuf::sys::pyxbuf_exporter_data(dev.as_ptr());
        assert_eq!(
            pyxbuf::sys::emulated::pyxbuf_emulated_stream_create(0, &mut stream, &mut err),
            0
        );
        let n = std::mem::size_of_val(values);
        let rc = pyxbuf::sys::emulated::pyxbuf_emulated_enqueue_write(
            0,
            stream,
            data,
            values.as_ptr().cast(),
            n,
            &mut err,
        );
        assert_eq!(rc, 0);
        assert_eq!(
            b.event_record.unwrap()(b.ctx, 0, stream, &mut event, &mut err),
            0
        );
        assert_eq!(
            pyxbuf::sys::pyxbuf_exporter_set_event(dev.as_ptr(), event, stream),
            0
        );
    }
    stream
}

/// A consumer working on a stream of its own that reads `buf` as
/// [`SyncEvent`] tells it to: it waits for an event, and trusts `Ready`.
fn read_on_own_stream(buf: &PyXBuffer<'_, f32>) -> Vec<f32> {
    let b = emulated_backend();
    let mut err = pyxbuf::sys::pyxbuf_error::default();
    let ptr = buf.device_ptr().unwrap();
    let mut own = 0i64;
    let mut out = vec![0f32; buf.item_count()];
    // SAFETY: the view is acquired and on emulated device 0; `out` holds
    // exactly the view's bytes (a C-contiguous exporter).
    unsafe {
        assert_eq!(
            pyxbuf::sys::emulated::pyxbuf_emulated_stream_create(0, &mut own, &mut err),
            0
        );
        if let SyncEvent::Event(e) = ptr.sync_event() {
            assert_eq!(
                b.event_wait.unwrap()(b.ctx, 0, e.as_ptr(), own, &mut err),
                0
            );
        }
        let n = out.len() * 4;
        let rc = b.copy_to_host.unwrap()(
            b.ctx,
            0,
            out.as_mut_ptr().cast(),
            ptr.as_ptr().cast(),
            n,
            own,
            &mut err,
        );
        assert_eq!(rc, 0);
        assert_eq!(
            pyxbuf::sys::emulated::pyxbuf_emulated_stream_destroy(own, &mut err),
            0
        );
    }
    out
}

/// Issue 25, item 4: `SyncEvent::Ready` means "ordered before the request's
/// stream", and a view taken without a stream has none: a consumer on another
/// stream that trusts what the view says must read the producer's data. Before
/// the fix a DLPack view taken without `Request::stream` and a `wrap` exporter
/// (which waited on the default stream and dropped the event) said `Ready`,
/// and such a consumer read the device's stale bytes.
#[test]
fn a_consumer_on_its_own_stream_that_trusts_the_sync_event_reads_current_data() {
    Python::attach(|py| {
        let fresh = [7.0f32, 8.0, 9.0];
        // Through DLPack, without a consumer stream.
        let dev = on_device(py, &[0.0; 3], &[3]);
        let producer = pending_write(&dev, &fresh);
        let only = eval(
            py,
            "type('DLPackOnly', (), {'__dlpack__': lambda s, **k: d.__dlpack__(**k), \
             '__dlpack_device__': lambda s: d.__dlpack_device__()})()",
            &[("d", &dev)],
        );
        let buf = PyXBuffer::<f32>::request().device().get(&only).unwrap();
        assert_eq!(buf.path(), Path::Dlpack);
        assert_eq!(read_on_own_stream(&buf), fresh);
        drop(buf);

        // Through a zero-copy wrapper of a device array with pending work.
        let dev = on_device(py, &[0.0; 3], &[3]);
        let producer2 = pending_write(&dev, &fresh);
        let w = pyxbuf::export::wrap(&dev, false, None).unwrap();
        let buf = PyXBuffer::<f32>::request().device().get(&w).unwrap();
        assert_eq!(read_on_own_stream(&buf), fresh);
        drop(buf);
        let mut err = pyxbuf::sys::pyxbuf_error::default();
        for s in [producer, producer2] {
            // SAFETY: streams this test created.
            assert_eq!(
                unsafe { pyxbuf::sys::emulated::pyxbuf_emulated_stream_destroy(s, &mut err) },
                0
            );
        }
    });
}
