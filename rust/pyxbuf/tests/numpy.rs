//! PyXBuffer against real NumPy arrays and Python's own buffers.

mod common;

use common::{eval, refcount, run};
use num_complex::Complex;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyxbuf::{Device, Exclusive, Path, PyXBuffer};

#[test]
fn float32_2d_array() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(6, dtype=np.float32).reshape(2, 3)", &[]);
        let buf = PyXBuffer::<f32>::get(&a).unwrap();
        assert_eq!(buf.shape(), [2, 3]);
        assert_eq!(buf.strides(), [12, 4]);
        assert_eq!(buf.ndim(), 2);
        assert_eq!(buf.dimensions(), 2);
        assert_eq!(buf.item_count(), 6);
        assert_eq!(buf.item_size(), 4);
        assert_eq!(buf.len_bytes(), 24);
        assert!(buf.is_c_contiguous() && !buf.is_fortran_contiguous());
        assert_eq!(buf.format().to_str().unwrap(), "f");
        assert_eq!(buf.device(), Device::Cpu);
        // NumPy 2's struct; NumPy 1's classic export.
        let route = if common::numpy_2(py) {
            Path::Numpy
        } else {
            Path::Classic
        };
        assert_eq!(buf.path(), route);
        assert!(buf.device_ptr().is_none());
        // NumPy knows nothing of borrows: pyxbuf's registry tracks a shared one.
        let g = buf.grants();
        assert!(g.shared() && g.tracked() && !g.exclusive() && !g.is_enforced());
        assert!(buf.readonly(), "a shared borrower reads only");
        assert_eq!(buf.as_slice().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(buf.as_cells().unwrap()[4].get(), 4.0);
        assert_eq!(buf.to_vec().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(
            buf.to_fortran_vec().unwrap(),
            [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        );
        assert_eq!(buf.copy_to_host().unwrap(), buf.to_vec().unwrap());
        let mut out = [0f32; 6];
        buf.copy_to_slice(&mut out).unwrap();
        assert_eq!(out[5], 5.0);
        assert!(buf.copy_to_slice(&mut [0f32; 5]).is_err());
        assert!(buf.obj().unwrap().is(&a));
        // SAFETY: index (1, 2) is in bounds of host memory the view holds.
        let v = unsafe { *buf.get_ptr(&[1, 2]).cast::<f32>() };
        assert_eq!(v, 5.0);
    });
}

#[test]
fn other_dtypes() {
    Python::attach(|py| {
        let d = eval(py, "np.linspace(0, 1, 5)", &[]);
        assert_eq!(
            PyXBuffer::<f64>::get(&d).unwrap().as_slice().unwrap()[4],
            1.0
        );

        let i = eval(py, "np.array([-1, 2, -3], dtype=np.int32)", &[]);
        assert_eq!(
            PyXBuffer::<i32>::get(&i).unwrap().as_slice().unwrap(),
            [-1, 2, -3]
        );

        let q = eval(py, "np.array([1, 2], dtype=np.int64)", &[]);
        assert_eq!(PyXBuffer::<i64>::get(&q).unwrap().to_vec().unwrap(), [1, 2]);

        let u = eval(py, "np.array([1, 65535], dtype=np.uint16)", &[]);
        assert_eq!(
            PyXBuffer::<u16>::get(&u).unwrap().as_slice().unwrap(),
            [1, 65535]
        );

        let b = eval(py, "np.array([True, False, True])", &[]);
        let bb = PyXBuffer::<bool>::get(&b).unwrap();
        assert_eq!(bb.as_slice().unwrap(), [true, false, true]);
        assert_eq!(bb.to_vec().unwrap(), [true, false, true]);

        let c = eval(py, "np.array([1+2j, 3-4j], dtype=np.complex64)", &[]);
        let cb = PyXBuffer::<Complex<f32>>::get(&c).unwrap();
        assert_eq!(cb.format().to_str().unwrap(), "Zf");
        assert_eq!(
            cb.as_slice().unwrap(),
            [Complex::new(1.0, 2.0), Complex::new(3.0, -4.0)]
        );

        let z = eval(py, "np.array([0.5j], dtype=np.complex128)", &[]);
        assert_eq!(
            PyXBuffer::<Complex<f64>>::get(&z)
                .unwrap()
                .as_slice()
                .unwrap(),
            [Complex::new(0.0, 0.5)]
        );

        let h = eval(py, "np.array([1.5, -2], dtype=np.float16)", &[]);
        let hb = PyXBuffer::<half::f16>::get(&h).unwrap();
        assert_eq!(hb.as_slice().unwrap()[0], half::f16::from_f32(1.5));

        let be = eval(py, "np.array([1, 2], dtype='<i4')", &[]);
        assert!(
            PyXBuffer::<i32>::get(&be).is_ok(),
            "explicit native byte order"
        );
    });
}

#[test]
fn bool_bytes_other_than_0_and_1_are_not_a_bool_slice() {
    Python::attach(|py| {
        let b = eval(py, "np.frombuffer(bytes([0, 1, 2]), dtype=np.bool_)", &[]);
        let buf = PyXBuffer::<bool>::get(&b).unwrap();
        assert!(buf.as_slice().is_none(), "a 2 is not a valid bool");
        assert_eq!(buf.to_vec().unwrap(), [false, true, true]);
        assert!(buf.as_cells().unwrap()[2].get());
    });
}

#[test]
fn strided_and_negative_strided_views() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(12, dtype=np.float64).reshape(3, 4)", &[]);
        let every_other = eval(py, "a[:, ::2]", &[("a", &a)]);
        let buf = PyXBuffer::<f64>::get(&every_other).unwrap();
        assert_eq!(buf.shape(), [3, 2]);
        assert_eq!(buf.strides(), [32, 16]);
        assert!(!buf.is_c_contiguous());
        assert!(buf.as_slice().is_none() && buf.as_cells().is_none());
        assert_eq!(buf.to_vec().unwrap(), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(buf.copy_to_host().unwrap(), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);

        let reversed = eval(py, "a[::-1, ::-1]", &[("a", &a)]);
        let buf = PyXBuffer::<f64>::get(&reversed).unwrap();
        assert_eq!(buf.strides(), [-32, -8]);
        assert!(buf.as_slice().is_none());
        assert_eq!(buf.to_vec().unwrap()[..3], [11.0, 10.0, 9.0]);

        let transposed = eval(py, "a.T", &[("a", &a)]);
        let buf = PyXBuffer::<f64>::get(&transposed).unwrap();
        assert!(buf.is_fortran_contiguous() && !buf.is_c_contiguous());
        assert_eq!(
            buf.to_fortran_vec().unwrap(),
            (0..12).map(f64::from).collect::<Vec<_>>()
        );

        // contiguous() makes the producer refuse what is not C-contiguous.
        let err = PyXBuffer::<f64>::request()
            .contiguous()
            .get(&every_other)
            .unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
    });
}

#[test]
fn read_only_arrays() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(4, dtype=np.int32)", &[]);
        run(py, "a.flags.writeable = False", &[("a", &a)]);
        let buf = PyXBuffer::<i32>::get(&a).unwrap();
        assert!(buf.readonly());
        assert_eq!(buf.as_slice().unwrap(), [0, 1, 2, 3]);
        drop(buf);
        let err = PyXBuffer::<i32, Exclusive>::get(&a).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        let b = pyo3::types::PyBytes::new(py, b"ro");
        assert!(PyXBuffer::<u8>::request().writable().get(&b).is_err());
    });
}

#[test]
fn exclusive_writes_are_visible_to_numpy() {
    Python::attach(|py| {
        let a = eval(py, "np.zeros(5, dtype=np.float32)", &[]);
        {
            let mut buf = PyXBuffer::<f32>::request()
                .borrow_exclusive()
                .get(&a)
                .unwrap();
            let g = buf.grants();
            assert!(g.exclusive() && g.tracked());
            assert!(!buf.readonly());
            for (i, x) in buf.as_mut_slice().unwrap().iter_mut().enumerate() {
                *x = i as f32 * 1.5;
            }
            // Readable through the same view, too.
            assert_eq!(buf.as_slice().unwrap()[2], 3.0);
        }
        assert_eq!(
            eval(py, "a.tolist()", &[("a", &a)])
                .extract::<Vec<f32>>()
                .unwrap(),
            [0.0, 1.5, 3.0, 4.5, 6.0]
        );

        // Strided: copy_from_slice writes item by item.
        let view = eval(py, "a[::2]", &[("a", &a)]);
        let mut buf = PyXBuffer::<f32, Exclusive>::get(&view).unwrap();
        assert!(buf.as_mut_slice().is_none());
        buf.copy_from_slice(&[7.0, 8.0, 9.0]).unwrap();
        assert!(buf.copy_from_slice(&[1.0]).is_err());
        drop(buf);
        assert_eq!(
            eval(py, "a.tolist()", &[("a", &a)])
                .extract::<Vec<f32>>()
                .unwrap(),
            [7.0, 1.5, 8.0, 4.5, 9.0]
        );
    });
}

#[test]
fn bytearray_and_array_array() {
    Python::attach(|py| {
        let ba = pyo3::types::PyByteArray::new(py, b"hello");
        {
            let buf = PyXBuffer::<u8>::get(&ba).unwrap();
            assert_eq!(buf.as_slice().unwrap(), b"hello");
            // PyBuffer_FillInfo points strides at the view's own itemsize:
            // moving the buffer around must not break it.
            let moved = Box::new(buf);
            assert_eq!(moved.strides(), [1]);
            assert_eq!(moved.shape(), [5]);
            let back = *moved;
            assert_eq!(back.to_vec().unwrap(), b"hello");
        }
        let mut w = PyXBuffer::<u8, Exclusive>::get(&ba).unwrap();
        w.as_mut_slice().unwrap()[0] = b'j';
        drop(w);
        assert_eq!(ba.to_vec(), b"jello");

        let arr = eval(py, "__import__('array').array('h', [1, -2, 3])", &[]);
        assert_eq!(
            PyXBuffer::<i16>::get(&arr).unwrap().as_slice().unwrap(),
            [1, -2, 3]
        );
        let mv = eval(py, "memoryview(x)[::2]", &[("x", &arr)]);
        assert_eq!(
            PyXBuffer::<i16>::get(&mv).unwrap().to_vec().unwrap(),
            [1, 3]
        );
    });
}

#[test]
fn conflicting_borrows_are_refused() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(10, dtype=np.int64)", &[]);
        let shared1 = PyXBuffer::<i64>::get(&a).unwrap();
        let shared2 = PyXBuffer::<i64>::get(&a).unwrap(); // shared + shared: fine
        let err = PyXBuffer::<i64, Exclusive>::get(&a).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        assert!(err.to_string().contains("overlaps"), "{err}");
        // Overlapping memory through another object conflicts too.
        let tail = eval(py, "a[5:]", &[("a", &a)]);
        assert!(PyXBuffer::<i64, Exclusive>::get(&tail).is_err());
        drop((shared1, shared2));

        let mut excl = PyXBuffer::<i64, Exclusive>::get(&tail).unwrap();
        excl.as_mut_slice().unwrap()[0] = -5;
        let err = PyXBuffer::<i64>::get(&a).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        // Disjoint memory is not a conflict.
        let head = eval(py, "a[:5]", &[("a", &a)]);
        assert!(PyXBuffer::<i64>::get(&head).is_ok());
        drop(excl);
        assert_eq!(
            PyXBuffer::<i64>::get(&a).unwrap().as_slice().unwrap()[5],
            -5
        );
    });
}

#[test]
fn dtype_mismatch_is_a_type_error_naming_both_formats() {
    Python::attach(|py| {
        let a = eval(py, "np.zeros(3, dtype=np.float64)", &[]);
        let err = PyXBuffer::<f32>::get(&a).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert!(err.is_instance_of::<PyBufferError>(py)); // pyxbuf.ItemTypeError: both
        let msg = err.to_string();
        assert!(
            msg.contains("format 'd'") && msg.contains("format 'f'"),
            "{msg}"
        );
        assert!(
            msg.contains("PyXBuffer<f32>") && msg.contains("ndarray"),
            "{msg}"
        );

        let big = eval(py, "np.zeros(3, dtype='>i4')", &[]);
        let msg = PyXBuffer::<i32>::get(&big).unwrap_err().to_string();
        assert!(
            msg.contains("'>i'"),
            "byte order is part of the match: {msg}"
        );

        let c = eval(py, "np.zeros(3, dtype=np.complex128)", &[]);
        assert!(PyXBuffer::<f64>::get(&c).is_err());
        // Released on failure: a later exclusive borrow is granted.
        assert!(PyXBuffer::<Complex<f64>, Exclusive>::get(&c).is_ok());

        let s = eval(py, "np.zeros(2, dtype=[('x', '<i4'), ('y', '<f4')])", &[]);
        let msg = PyXBuffer::<i64>::get(&s).unwrap_err().to_string();
        assert!(msg.contains("T{"), "{msg}");
    });
}

#[test]
fn bfloat16_through_pyxbufs_exporter() {
    Python::attach(|py| {
        let e = pyxbuf::export::new_exporter::<half::bf16>(py, &[4], Device::Cpu).unwrap();
        {
            let mut w = PyXBuffer::<half::bf16, Exclusive>::get(&e).unwrap();
            assert!(w.grants().is_enforced() && w.grants().exclusive());
            assert_eq!(w.path(), Path::Native);
            for (i, x) in w.as_mut_slice().unwrap().iter_mut().enumerate() {
                *x = half::bf16::from_f32(i as f32 + 0.5);
            }
        }
        let r = PyXBuffer::<half::bf16>::get(&e).unwrap();
        assert_eq!(r.format().to_str().unwrap(), "[ml_dtypes$bfloat16]");
        assert!(r.grants().is_enforced());
        let sum: f32 = r.as_slice().unwrap().iter().map(|x| x.to_f32()).sum();
        assert_eq!(sum, 8.0);
        // The exporter enforces the shared borrow: no writer meanwhile.
        assert!(PyXBuffer::<half::bf16, Exclusive>::get(&e).is_err());
        // f16 ("e") is not bf16.
        let msg = PyXBuffer::<half::f16>::get(&e).unwrap_err().to_string();
        assert!(
            msg.contains("[ml_dtypes$bfloat16]") && msg.contains("'e'"),
            "{msg}"
        );
    });
}

#[test]
fn bfloat16_ml_dtypes_arrays() {
    Python::attach(|py| {
        let a = eval(
            py,
            "np.array([1.0, 2.5, -3.0], dtype=__import__('ml_dtypes').bfloat16)",
            &[],
        );
        let buf = PyXBuffer::<half::bf16>::get(&a).unwrap();
        // Read from the array struct (issue 39); NumPy 1's through __array_interface__.
        let route = if common::numpy_2(py) {
            Path::Numpy
        } else {
            Path::ArrayInterface
        };
        assert_eq!(buf.path(), route);
        assert_eq!(buf.format().to_str().unwrap(), "[ml_dtypes$bfloat16]");
        let v: Vec<f32> = buf.to_vec().unwrap().iter().map(|x| x.to_f32()).collect();
        assert_eq!(v, [1.0, 2.5, -3.0]);
        assert!(buf.grants().shared());
        assert_eq!(buf.as_slice().unwrap()[1], half::bf16::from_f32(2.5));
    });
}

#[test]
fn float8_ml_dtypes_arrays_read_as_the_float8_crate_types() {
    Python::attach(|py| {
        let a = eval(
            py,
            "np.array([0.5, -448.0, 3.0], dtype=__import__('ml_dtypes').float8_e4m3fn)",
            &[],
        );
        let buf = PyXBuffer::<pyxbuf::F8E4M3>::get(&a).unwrap();
        let route = if common::numpy_2(py) {
            Path::Numpy
        } else {
            Path::ArrayInterface
        };
        assert_eq!(buf.path(), route);
        let v: Vec<f32> = buf.to_vec().unwrap().iter().map(|x| x.to_f32()).collect();
        assert_eq!(v, [0.5, -448.0, 3.0]);
        let b = eval(
            py,
            "np.array([57344.0, -0.25], dtype=__import__('ml_dtypes').float8_e5m2)",
            &[],
        );
        let buf = PyXBuffer::<pyxbuf::F8E5M2>::get(&b).unwrap();
        let v: Vec<f32> = buf.to_vec().unwrap().iter().map(|x| x.to_f32()).collect();
        assert_eq!(v, [57344.0, -0.25]);
        // One float8 is not the other.
        let err = PyXBuffer::<pyxbuf::F8E5M2>::get(&a).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert!(err.is_instance_of::<PyBufferError>(py));
        assert!(
            err.to_string()
                .contains("use pyxbuf::F8E4M3 and PyXBuffer<F8E4M3>"),
            "{err}"
        );
    });
}

#[test]
fn a_type_mismatch_names_the_rust_type_of_the_items() {
    Python::attach(|py| {
        let a = eval(
            py,
            "np.zeros(3, dtype=__import__('ml_dtypes').bfloat16)",
            &[],
        );
        let err = PyXBuffer::<f32>::get(&a).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert!(err.is_instance_of::<PyBufferError>(py));
        assert!(
            err.to_string()
                .contains("use pyxbuf::bf16 and PyXBuffer<bf16>"),
            "{err}"
        );
        let d = eval(py, "np.zeros(3)", &[]);
        let err = PyXBuffer::<f32>::get(&d).unwrap_err();
        assert!(
            err.to_string()
                .contains("read its own items: PyXBuffer<f64>"),
            "{err}"
        );
    });
}

#[test]
fn refcounts_are_unchanged_after_many_cycles() {
    Python::attach(|py| {
        let a = eval(
            py,
            "np.arange(64, dtype=np.float32).reshape(8, 8)[::2]",
            &[],
        );
        let base = eval(py, "a.base", &[("a", &a)]);
        let ba = pyo3::types::PyByteArray::new(py, &[0u8; 16]).into_any();
        let e = pyxbuf::export::new_exporter::<f32>(py, &[3, 3], Device::Cpu).unwrap();
        let before = [refcount(&a), refcount(&base), refcount(&ba), refcount(&e)];
        for _ in 0..10_000 {
            let b = PyXBuffer::<f32>::get(&a).unwrap();
            assert_eq!(b.shape(), [4, 8]);
            drop(b);
            drop(PyXBuffer::<u8, Exclusive>::get(&ba).unwrap());
            drop(PyXBuffer::<f32>::request().device().get(&e).unwrap());
            assert!(PyXBuffer::<f64>::get(&a).is_err());
        }
        let after = [refcount(&a), refcount(&base), refcount(&ba), refcount(&e)];
        assert_eq!(before, after);
        let live = eval(py, "e.borrows", &[("e", &e)]);
        assert_eq!(live.get_item("views").unwrap().extract::<i64>().unwrap(), 0);
    });
}

#[test]
fn pyfunction_arguments() {
    #[pyfunction]
    fn total(x: PyXBuffer<'_, f32>) -> PyResult<f32> {
        Ok(match x.as_slice() {
            Some(s) => s.iter().sum(),
            None => x.to_vec()?.iter().sum(),
        })
    }

    #[pyfunction]
    fn scale(mut x: PyXBuffer<'_, f32, Exclusive>, by: f32) -> PyResult<()> {
        let items = x
            .as_mut_slice()
            .ok_or_else(|| PyBufferError::new_err("need contiguous memory"))?;
        items.iter_mut().for_each(|v| *v *= by);
        Ok(())
    }

    Python::attach(|py| {
        let total = wrap_pyfunction!(total, py).unwrap();
        let scale = wrap_pyfunction!(scale, py).unwrap();
        let a = eval(py, "np.arange(1, 5, dtype=np.float32)", &[]);
        scale.call1((&a, 2.0)).unwrap();
        assert_eq!(total.call1((&a,)).unwrap().extract::<f32>().unwrap(), 20.0);
        let strided = eval(py, "a[::2]", &[("a", &a)]);
        assert_eq!(
            total.call1((&strided,)).unwrap().extract::<f32>().unwrap(),
            8.0
        );
        let err = total.call1((eval(py, "np.zeros(2)", &[]),)).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py), "{err}");
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}"); // an item type: both
        let err = total.call1((5,)).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py), "{err}");
        assert!(!err.is_instance_of::<PyBufferError>(py), "{err}"); // not an array: TypeError only
    });
}

#[test]
fn dlpack_only_producers() {
    Python::attach(|py| {
        run(
            py,
            "class OnlyDlpack:\n    def __init__(self, a): self.a = a\n    def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)\n    def __dlpack_device__(self): return self.a.__dlpack_device__()\nimport builtins; builtins.OnlyDlpack = OnlyDlpack",
            &[],
        );
        let a = eval(py, "np.arange(6, dtype=np.int16).reshape(3, 2)", &[]);
        let d = eval(py, "OnlyDlpack(a)", &[("a", &a)]);
        let buf = PyXBuffer::<i16>::get(&d).unwrap();
        assert!(
            matches!(buf.path(), Path::Dlpack | Path::DlpackC),
            "{:?}",
            buf.path()
        );
        assert_eq!(buf.shape(), [3, 2]);
        assert!(buf.grants().shared() && buf.grants().tracked());
        assert_eq!(buf.as_slice().unwrap(), [0, 1, 2, 3, 4, 5]);
        // The registry sees the same memory whichever object names it.
        assert!(PyXBuffer::<i16, Exclusive>::get(&a).is_err());
        drop(buf);
        assert!(PyXBuffer::<i16, Exclusive>::get(&a).is_ok());
        let msg = PyXBuffer::<i32>::get(&d).unwrap_err().to_string();
        assert!(msg.contains("'h'") && msg.contains("'i'"), "{msg}");
    });
}
