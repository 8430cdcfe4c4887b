//! Byte views (`as_bytes`, `as_bytes_mut`) and plain-data reinterpretation
//! (`as_slice_of`, `as_mut_slice_of`) of real producers: bytes, bytearray,
//! array.array, NumPy arrays (strided, Fortran-ordered, float16, bool,
//! structured), and their refusals.

mod common;

use common::{eval, run};
use num_complex::Complex;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
use pyxbuf::{f16, Exclusive, PyXBuffer, PyXBuffer1, PyXUntypedBuffer};

/// The error's message, after checking that it is a `BufferError`.
fn buffer_error(py: Python<'_>, err: PyErr) -> String {
    assert!(
        err.is_instance_of::<PyBufferError>(py),
        "not a BufferError: {err}"
    );
    err.to_string()
}

fn ne_bytes(items: &[i32]) -> Vec<u8> {
    items.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

#[test]
fn bytes_of_python_buffers_whatever_their_format() {
    Python::attach(|py| {
        let data = PyBytes::new(py, b"hello");
        let buf = PyXUntypedBuffer::get(&data).unwrap();
        assert_eq!(buf.as_bytes().unwrap(), b"hello");

        let data = PyByteArray::new(py, b"abc");
        let buf = PyXUntypedBuffer::get(&data).unwrap();
        assert_eq!(buf.as_bytes().unwrap(), b"abc");

        // array.array('i'): four bytes an item, in native byte order.
        let array = eval(py, "__import__('array').array('i', [1, -2, 70000])", &[]);
        let buf = PyXUntypedBuffer::get(&array).unwrap();
        assert_eq!(buf.format().to_str().unwrap(), "i");
        assert_eq!(buf.as_bytes().unwrap(), ne_bytes(&[1, -2, 70000]));
        // The typed buffer derefs to the untyped one: the same bytes.
        let typed = PyXBuffer::<i32>::get(&array).unwrap();
        assert_eq!(typed.as_bytes().unwrap(), buf.as_bytes().unwrap());
        assert_eq!(
            typed.as_slice_of::<u32>().unwrap(),
            [1, (-2i32) as u32, 70000]
        );

        // An empty buffer: no bytes, and no items of any type.
        let empty = PyBytes::new(py, b"");
        let buf = PyXUntypedBuffer::get(&empty).unwrap();
        assert_eq!(buf.as_bytes().unwrap(), b"");
        assert_eq!(buf.as_slice_of::<u64>().unwrap(), [] as [u64; 0]);
    });
}

#[test]
fn numpy_bytes_in_memory_order() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(6, dtype=np.int16).reshape(2, 3)", &[]);
        let buf = PyXUntypedBuffer::get(&a).unwrap();
        let want: Vec<u8> = (0..6i16).flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(buf.as_bytes().unwrap(), want);

        // Fortran order is contiguous too: the bytes as they lie in memory.
        let f = eval(
            py,
            "np.asfortranarray(np.arange(6, dtype=np.uint8).reshape(2, 3))",
            &[],
        );
        let buf = PyXBuffer::<u8>::get(&f).unwrap();
        assert!(buf.as_slice().is_none(), "not C-contiguous");
        assert_eq!(buf.as_bytes().unwrap(), [0, 3, 1, 4, 2, 5]);

        // A 0-d array: one item.
        let scalar = eval(py, "np.array(7, dtype=np.uint32)", &[]);
        let buf = PyXUntypedBuffer::get(&scalar).unwrap();
        assert_eq!(buf.as_bytes().unwrap(), 7u32.to_ne_bytes());
        assert_eq!(buf.as_slice_of::<u32>().unwrap(), [7]);
    });
}

#[test]
fn same_size_reinterpretation() {
    Python::attach(|py| {
        // i8 -> u8
        let array = eval(py, "__import__('array').array('b', [-1, 2, -128])", &[]);
        let signed = PyXBuffer::<i8>::get(&array).unwrap();
        assert_eq!(signed.as_slice_of::<u8>().unwrap(), [255, 2, 128]);

        // u32 -> f32
        let bits = eval(
            py,
            "np.array([0x3f800000, 0xc0000000], dtype=np.uint32)",
            &[],
        );
        let buf = PyXBuffer::<u32>::get(&bits).unwrap();
        assert_eq!(buf.as_slice_of::<f32>().unwrap(), [1.0, -2.0]);

        // f16 -> u16 (NumPy float16)
        let halves = eval(py, "np.array([1.0, -2.0, 0.5], dtype=np.float16)", &[]);
        let buf = PyXBuffer::<f16>::get(&halves).unwrap();
        assert_eq!(buf.as_slice_of::<u16>().unwrap(), [0x3c00, 0xc000, 0x3800]);
        // ... and back: u16 bits viewed as f16.
        let buf = PyXUntypedBuffer::get(&halves).unwrap();
        assert_eq!(
            buf.as_slice_of::<f16>().unwrap(),
            [f16::from_f32(1.0), f16::from_f32(-2.0), f16::from_f32(0.5)]
        );

        // bool -> u8, even for bytes that are no bool: the typed slice
        // refuses them, the byte view reads them.
        let flags = eval(py, "np.frombuffer(bytes([1, 0, 2]), dtype=np.bool_)", &[]);
        let buf = PyXBuffer::<bool>::get(&flags).unwrap();
        assert!(buf.as_slice().is_none(), "a bool byte of 2 is no bool");
        assert_eq!(buf.as_slice_of::<u8>().unwrap(), [1, 0, 2]);
        assert_eq!(buf.as_bytes().unwrap(), [1, 0, 2]);

        // Other sizes: complex64 as pairs of f32, and as f32.
        let z = eval(py, "np.array([1+2j, 3-4j], dtype=np.complex64)", &[]);
        let buf = PyXBuffer::<Complex<f32>>::get(&z).unwrap();
        assert_eq!(
            buf.as_slice_of::<[f32; 2]>().unwrap(),
            [[1.0, 2.0], [3.0, -4.0]]
        );
        assert_eq!(buf.as_slice_of::<f32>().unwrap(), [1.0, 2.0, 3.0, -4.0]);
        // float64 as complex128: one item of two.
        let d = eval(py, "np.array([1.0, 2.0, 3.0, 4.0])", &[]);
        let buf = PyXBuffer::<f64>::get(&d).unwrap();
        assert_eq!(
            buf.as_slice_of::<Complex<f64>>().unwrap(),
            [Complex::new(1.0, 2.0), Complex::new(3.0, 4.0)]
        );
    });
}

/// One record of the structured dtype `[('x', '<f4'), ('y', '<i4')]`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Point {
    x: f32,
    y: i32,
}

// SAFETY: two 4-byte plain fields, no padding, every bit pattern valid.
unsafe impl pyxbuf::bytemuck::Zeroable for Point {}
// SAFETY: as above; `Copy + 'static`, no interior mutability or pointers.
unsafe impl pyxbuf::bytemuck::Pod for Point {}

#[test]
fn structured_dtype_as_records() {
    Python::attach(|py| {
        let a = eval(
            py,
            "np.array([(1.5, 2), (-3.0, 4)], dtype=[('x', '<f4'), ('y', '<i4')])",
            &[],
        );
        let buf = PyXUntypedBuffer::get(&a).unwrap();
        // No element type reads a struct format; bytes and records do.
        assert!(
            buf.format().to_str().unwrap().starts_with("T{"),
            "{:?}",
            buf.format()
        );
        assert_eq!(buf.item_size(), 8);
        assert_eq!(buf.as_bytes().unwrap().len(), 16);
        assert_eq!(
            buf.as_slice_of::<Point>().unwrap(),
            [Point { x: 1.5, y: 2 }, Point { x: -3.0, y: 4 }]
        );
        drop(buf);

        // Written as records, seen by NumPy.
        let mut buf = PyXUntypedBuffer::request()
            .borrow_exclusive()
            .get_untyped(&a)
            .unwrap();
        buf.as_mut_slice_of::<Point>().unwrap()[1] = Point { x: 0.25, y: -7 };
        drop(buf);
        run(
            py,
            "assert a[1]['x'] == 0.25 and a[1]['y'] == -7, a",
            &[("a", &a)],
        );
    });
}

#[test]
fn mutable_byte_views_write_through() {
    Python::attach(|py| {
        // bytearray, untyped and exclusive.
        let data = PyByteArray::new(py, b"abc");
        let mut buf = PyXUntypedBuffer::request()
            .borrow_exclusive()
            .get_untyped(&data)
            .unwrap();
        let bytes = buf.as_bytes_mut().unwrap();
        bytes.make_ascii_uppercase();
        // While the view is held, pyxbuf refuses every other borrow.
        let err = PyXBuffer::<u8>::get(&data).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        drop(buf);
        assert_eq!(data.to_vec(), b"ABC");

        // NumPy int32 through a typed exclusive buffer: bytes, then records.
        let a = eval(py, "np.zeros(2, dtype=np.int32)", &[]);
        let mut buf = PyXBuffer::<i32, Exclusive>::get(&a).unwrap();
        buf.as_bytes_mut().unwrap()[..4].copy_from_slice(&5i32.to_ne_bytes());
        buf.as_mut_slice_of::<[u8; 4]>().unwrap()[1] = (-9i32).to_ne_bytes();
        assert_eq!(buf.as_mut_slice().unwrap(), [5, -9]);
        drop(buf);
        run(py, "assert a.tolist() == [5, -9], a", &[("a", &a)]);

        // float32 bits: clear the sign bits.
        let f = eval(py, "np.array([-1.0, 2.0, -0.5], dtype=np.float32)", &[]);
        let mut buf = PyXBuffer::<f32, Exclusive>::get(&f).unwrap();
        for bits in buf.as_mut_slice_of::<u32>().unwrap() {
            *bits &= !(1 << 31);
        }
        drop(buf);
        run(py, "assert f.tolist() == [1.0, 2.0, 0.5], f", &[("f", &f)]);

        // i8 as u8 through a one-dimensional buffer.
        let s = eval(py, "np.array([-1, 1], dtype=np.int8)", &[]);
        let mut buf = PyXBuffer1::<i8, Exclusive>::get(&s).unwrap();
        buf.as_mut_slice_of::<u8>().unwrap()[1] = 200;
        assert_eq!(buf.as_bytes_mut().unwrap(), [255, 200]);
        drop(buf);
        run(py, "assert s.tolist() == [-1, -56], s", &[("s", &s)]);
    });
}

#[test]
fn refusals_name_their_cause() {
    Python::attach(|py| {
        // Not contiguous: every other item of a NumPy array.
        let strided = eval(py, "np.arange(10, dtype=np.int32)[::2]", &[]);
        let buf = PyXUntypedBuffer::get(&strided).unwrap();
        let msg = buffer_error(py, buf.as_bytes().unwrap_err());
        assert!(
            msg.contains(
                "as_bytes() cannot view the buffer of 'numpy.ndarray' (format 'i', 4 bytes \
                 each) as bytes: it is not contiguous (shape [5], strides [8])"
            ),
            "{msg}"
        );
        let msg = buffer_error(py, buf.as_slice_of::<u32>().unwrap_err());
        assert!(
            msg.contains("as_slice_of::<u32>() cannot view") && msg.contains("not contiguous"),
            "{msg}"
        );
        drop(buf);
        let mut buf = PyXBuffer::<i32, Exclusive>::get(&strided).unwrap();
        let msg = buffer_error(py, buf.as_bytes_mut().unwrap_err());
        assert!(
            msg.contains("as_bytes_mut() cannot view") && msg.contains("not contiguous"),
            "{msg}"
        );
        drop(buf);

        // No grant: a view asked for without a borrow.
        let data = PyBytes::new(py, b"abcd");
        let buf = PyXUntypedBuffer::request()
            .without_borrow()
            .get_untyped(&data)
            .unwrap();
        assert!(!buf.grants().any());
        let msg = buffer_error(py, buf.as_bytes().unwrap_err());
        assert!(
            msg.contains("as_bytes() cannot view the buffer of 'bytes'")
                && msg.contains("granted no borrow"),
            "{msg}"
        );
        drop(buf);

        // Misaligned: bytes 1..9 of a NumPy byte array viewed as u32.
        let a = eval(py, "np.zeros(16, dtype=np.uint8)", &[]);
        let whole = PyXUntypedBuffer::get(&a).unwrap();
        assert_eq!(whole.buf_ptr() as usize % 4, 0, "NumPy aligns its data");
        assert_eq!(whole.as_slice_of::<u32>().unwrap(), [0; 4]);
        drop(whole);
        let tail = eval(py, "a[1:9]", &[("a", &a)]);
        let buf = PyXUntypedBuffer::get(&tail).unwrap();
        assert_eq!(
            buf.as_slice_of::<[u8; 4]>().unwrap().len(),
            2,
            "align 1: fine"
        );
        let msg = buffer_error(py, buf.as_slice_of::<u32>().unwrap_err());
        assert!(
            msg.contains(
                "as_slice_of::<u32>() cannot view the buffer of 'numpy.ndarray' (format 'B', 1 \
                 byte each) as u32: its address 0x"
            ) && msg.contains(
                "is not aligned for u32 (4-byte alignment; it is 1 byte past a multiple of 4)"
            ),
            "{msg}"
        );
        drop(buf);

        // Not a whole number of items.
        let five = PyBytes::new(py, b"abcde");
        let buf = PyXUntypedBuffer::get(&five).unwrap();
        let msg = buffer_error(py, buf.as_slice_of::<u16>().unwrap_err());
        assert!(
            msg.contains("as_slice_of::<u16>() cannot view the buffer of 'bytes' (format 'B', 1 byte each) as u16: its 5 bytes are not a whole number of u16 (2 bytes each)"),
            "{msg}"
        );
        let f = eval(py, "np.zeros(3, dtype=np.float32)", &[]);
        let buf = PyXBuffer::<f32>::get(&f).unwrap();
        let msg = buffer_error(py, buf.as_slice_of::<f64>().unwrap_err());
        assert!(
            msg.contains("(format 'f', 4 bytes each) as f64: its 12 bytes are not a whole number of f64 (8 bytes each)"),
            "{msg}"
        );
        // Zero-sized types span nothing.
        let msg = buffer_error(py, buf.as_slice_of::<()>().unwrap_err());
        assert!(msg.contains("() is zero-sized"), "{msg}");
    });
}

#[test]
fn suboffsets_are_refused() {
    Python::attach(|py| {
        let pil = eval(
            py,
            "__import__('_testbuffer').ndarray(list(range(6)), shape=[2, 3], format='B', \
             flags=__import__('_testbuffer').ND_PIL)",
            &[],
        );
        let buf = PyXUntypedBuffer::request()
            .indirect()
            .without_borrow()
            .get_untyped(&pil)
            .unwrap();
        assert!(buf.suboffsets().is_some());
        let msg = buffer_error(py, buf.as_bytes().unwrap_err());
        assert!(msg.contains("it has suboffsets"), "{msg}");
    });
}

#[cfg(feature = "emulated-device")]
#[test]
fn device_memory_is_refused() {
    use pyxbuf::Device;
    Python::attach(|py| {
        pyxbuf::emulated::register().unwrap();
        let host = pyxbuf::export::new_exporter::<u8>(py, &[4], Device::Cpu).unwrap();
        let dev = PyXBuffer::<u8>::get(&host)
            .unwrap()
            .to_device(Device::Emulated { id: 0 })
            .unwrap();
        let buf = PyXUntypedBuffer::request()
            .device()
            .get_untyped(&dev)
            .unwrap();
        assert!(!buf.is_host() && buf.grants().any());
        let msg = buffer_error(py, buf.as_bytes().unwrap_err());
        assert!(
            msg.contains("as_bytes() cannot view the buffer of")
                && msg.contains("it is in device memory (Emulated { id: 0 })"),
            "{msg}"
        );
        let msg = buffer_error(py, buf.as_slice_of::<u8>().unwrap_err());
        assert!(msg.contains("in device memory"), "{msg}");
        drop(buf);
        let mut buf = PyXUntypedBuffer::request()
            .borrow_exclusive()
            .device()
            .get_untyped(&dev)
            .unwrap();
        let msg = buffer_error(py, buf.as_bytes_mut().unwrap_err());
        assert!(msg.contains("in device memory"), "{msg}");
    });
}
