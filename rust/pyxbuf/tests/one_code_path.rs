//! Issue 27: one code path for any layout. `total` and `scale` are the two
//! functions the README and the Rust guide (docs/guides/rust.md) show, exactly; they are called here on NumPy arrays
//! of every layout: contiguous, strided, reversed, transposed, broadcast,
//! the wrong number of dimensions, device memory.

mod common;

use common::{eval, run};
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyxbuf::{Exclusive, PyXBuffer, PyXBuffer1, PyXBuffer2};

#[pyfunction]
fn total(x: PyXBuffer<'_, f32>) -> PyResult<f32> {
    Ok(x.iter()?.sum())
}

#[pyfunction]
fn scale(mut x: PyXBuffer1<'_, f32, Exclusive>, k: f32) -> PyResult<()> {
    for v in x.iter_mut()? {
        *v *= k;
    }
    Ok(())
}

/// Python statements with `np`, `total`, `scale` and the given locals.
fn check(py: Python<'_>, code: &str) {
    let total = wrap_pyfunction!(total, py).unwrap();
    let scale = wrap_pyfunction!(scale, py).unwrap();
    run(
        py,
        code,
        &[("total", total.as_any()), ("scale", scale.as_any())],
    );
}

#[test]
fn contiguous() {
    Python::attach(|py| {
        check(
            py,
            "a = np.arange(1, 5, dtype=np.float32)\n\
             assert total(a) == 10.0\n\
             scale(a, 2.0)\n\
             assert a.tolist() == [2.0, 4.0, 6.0, 8.0], a\n\
             assert total(np.float32(3.5).reshape(())) == 3.5\n\
             assert total(np.zeros(0, np.float32)) == 0.0\n\
             scale(np.zeros(0, np.float32), 2.0)",
        );
    });
}

#[test]
fn strided_every_other_item() {
    Python::attach(|py| {
        check(
            py,
            "a = np.arange(1, 7, dtype=np.float32)\n\
             assert total(a[::2]) == 9.0\n\
             scale(a[::2], 2.0)\n\
             assert a.tolist() == [2.0, 2.0, 6.0, 4.0, 10.0, 6.0], a",
        );
    });
}

#[test]
fn negative_strides() {
    Python::attach(|py| {
        check(
            py,
            "a = np.arange(1, 5, dtype=np.float32)\n\
             assert total(a[::-1]) == 10.0\n\
             scale(a[::-1], 3.0)\n\
             assert a.tolist() == [3.0, 6.0, 9.0, 12.0], a\n\
             scale(a[::-2], 0.5)\n\
             assert a.tolist() == [3.0, 3.0, 9.0, 6.0], a",
        );
        // The items come in the array's logical order, last to first.
        let a = eval(py, "np.arange(4, dtype=np.float32)[::-1]", &[]);
        let buf = PyXBuffer::<f32>::get(&a).unwrap();
        assert_eq!(buf.strides(), [-4]);
        let items: Vec<f32> = buf.iter().unwrap().copied().collect();
        assert_eq!(items, [3.0, 2.0, 1.0, 0.0]);
    });
}

#[test]
fn two_dimensional_transposed() {
    Python::attach(|py| {
        check(
            py,
            "m = np.arange(6, dtype=np.float32).reshape(2, 3)\n\
             assert total(m.T) == 15.0\n\
             assert total(m[:, ::-2]) == 2.0 + 0.0 + 5.0 + 3.0",
        );
        // C order of the transposed array: what NumPy's ravel gives.
        let m = eval(py, "np.arange(6, dtype=np.float32).reshape(2, 3).T", &[]);
        let buf = PyXBuffer2::<f32>::get(&m).unwrap();
        assert_eq!(buf.dims(), [3, 2]);
        let items: Vec<f32> = buf.iter().unwrap().copied().collect();
        assert_eq!(items, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        #[cfg(feature = "ndarray")]
        {
            let view: ndarray::ArrayView2<'_, f32> = buf.as_array().unwrap();
            assert_eq!(view[[2, 1]], 5.0);
        }
    });
}

#[test]
fn a_matrix_passed_to_scale_is_a_type_error_naming_the_argument() {
    Python::attach(|py| {
        let scale = wrap_pyfunction!(scale, py).unwrap();
        let m = eval(py, "np.ones((2, 3), dtype=np.float32)", &[]);
        let err = scale.call1((&m, 2.0)).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py), "{err}");
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}"); // pyxbuf.ItemTypeError
        assert_eq!(
            err.value(py).str().unwrap().to_string(),
            "expected a 1-dimensional array, found 2 dimensions (shape (2, 3)); pass a \
             1-dimensional one (NumPy: a.reshape(...) or a.ravel())"
        );
        // PyO3 0.29 and later name the argument in a note (they no longer
        // rewrite the message of a TypeError as "argument 'x': ..."); 0.28
        // passes a TypeError subclass through as it is.
        if cfg!(pyo3_before_0_29) {
            assert!(!err.value(py).hasattr("__notes__").unwrap());
        } else {
            let notes: Vec<String> = err
                .value(py)
                .getattr("__notes__")
                .unwrap()
                .extract()
                .unwrap();
            assert_eq!(notes, ["while processing 'x'"]);
        }
        // The buffer was released: the array can be borrowed again.
        check(
            py,
            "m = np.ones((2, 3), dtype=np.float32)\nscale(m.ravel(), 2.0)",
        );
        // The other way round, and a scalar.
        let err = PyXBuffer2::<f32>::get(&eval(py, "np.zeros(6, np.float32)", &[])).unwrap_err();
        assert!(err.to_string().contains(
            "expected a 2-dimensional array, found 1 dimension (shape (6,)); pass a \
             2-dimensional one (NumPy: a.reshape(...))"
        ));
        let err = PyXBuffer1::<f32>::get(&eval(py, "np.float32(1).reshape(())", &[])).unwrap_err();
        assert!(
            err.to_string().contains("found 0 dimensions (shape ())"),
            "{err}"
        );
    });
}

#[test]
fn zero_stride_broadcasts_read_but_never_write() {
    Python::attach(|py| {
        check(
            py,
            "b = np.broadcast_to(np.float32(1.5), (4,))\n\
             assert b.strides == (0,)\n\
             assert total(b) == 6.0\n\
             w = np.lib.stride_tricks.as_strided(np.ones(1, np.float32), shape=(4,), strides=(0,), writeable=True)\n\
             try:\n\
             \x20   scale(w, 2.0)\n\
             except BufferError as e:\n\
             \x20   assert 'distinct indices reach the same bytes' in str(e), e\n\
             \x20   assert 'strides [0]' in str(e), e\n\
             else:\n\
             \x20   raise AssertionError('scale wrote a broadcast')\n\
             assert w.tolist() == [1.0] * 4\n\
             o = np.lib.stride_tricks.as_strided(np.ones(4, np.float32), shape=(3,), strides=(2,), writeable=True)\n\
             try:\n\
             \x20   scale(o, 2.0)\n\
             except BufferError:\n\
             \x20   pass\n\
             else:\n\
             \x20   raise AssertionError('scale wrote overlapping items')",
        );
    });
}

#[test]
fn refusals_say_why() {
    Python::attach(|py| {
        // Unaligned items: a float32 field at offset 1 of a packed struct.
        let a = eval(
            py,
            "np.zeros(4, dtype=np.dtype([('pad', 'u1'), ('x', '<f4')]))['x']",
            &[],
        );
        let buf = PyXBuffer::<f32>::get(&a).unwrap();
        let err = buf.iter().unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("iter() cannot iterate over the buffer of 'numpy.ndarray'")
                && msg.contains("not aligned for f32 (4 bytes)")
                && msg.contains("to_vec()"),
            "{msg}"
        );
        assert_eq!(buf.to_vec().unwrap(), [0.0; 4]);
        // bool items that are not 0 or 1.
        let b = eval(py, "np.array([0, 1, 2], np.uint8).view(np.bool_)", &[]);
        let err = PyXBuffer::<bool>::get(&b).unwrap().iter().unwrap_err();
        assert!(err.to_string().contains("other than 0 or 1"), "{err}");
        let ok = eval(py, "np.array([True, False, True])[::-1]", &[]);
        let flags: Vec<bool> = PyXBuffer::<bool>::get(&ok)
            .unwrap()
            .iter()
            .unwrap()
            .copied()
            .collect();
        assert_eq!(flags, [true, false, true]);
    });
}

/// Layouts beyond one run: every dimension kept, merged, reversed,
/// transposed, more outer dimensions than are kept inline.
#[test]
fn every_layout_iterates_in_c_order() {
    Python::attach(|py| {
        let layouts = [
            "np.arange(120.0).reshape(2, 3, 4, 5)[:, ::-1, ::2, 1:]",
            "np.arange(120.0).reshape(2, 3, 4, 5).transpose(3, 0, 2, 1)",
            "np.arange(120.0).reshape(2, 3, 4, 5)[:, :, :, ::5]",
            "np.arange(24.0).reshape(2, 3, 4)[:, 1:2, :]",
            "np.arange(3.0 ** 6).reshape((3,) * 6).transpose(5, 4, 3, 2, 1, 0)",
            "np.arange(3.0 ** 7).reshape((3,) * 7)[::2, ::-1, :, ::2, :, ::-1, ::2]",
            "np.broadcast_to(np.arange(3.0), (4, 2, 3))",
        ];
        for expr in layouts {
            let a = eval(py, expr, &[]);
            let buf = PyXBuffer::<f64>::get(&a).unwrap();
            let want = buf.to_vec().unwrap();
            let iter = buf.iter().unwrap();
            assert_eq!(iter.len(), want.len(), "{expr}");
            // `next` (collect) and `fold` (sum) take different paths.
            let by_next: Vec<f64> = iter.clone().copied().collect();
            assert_eq!(by_next, want, "{expr}");
            assert_eq!(iter.sum::<f64>(), want.iter().sum::<f64>(), "{expr}");
            let mut partly = buf.iter().unwrap();
            partly.nth(want.len() / 2);
            assert_eq!(partly.len(), want.len() - want.len() / 2 - 1, "{expr}");
            assert_eq!(
                partly.fold(0.0, |s, v| s + v),
                want[want.len() / 2 + 1..].iter().sum::<f64>()
            );
        }
    });
}

#[test]
fn iter_mut_writes_every_item_once() {
    Python::attach(|py| {
        let base = eval(py, "np.arange(3.0 ** 6).reshape((3,) * 6)", &[]);
        let view = eval(
            py,
            "b.transpose(5, 4, 3, 2, 1, 0)[::2, ::-1]",
            &[("b", &base)],
        );
        let mut buf = PyXBuffer::<f64, Exclusive>::get(&view).unwrap();
        let n = buf.item_count();
        for (i, v) in buf.iter_mut().unwrap().enumerate() {
            *v = -(i as f64);
        }
        drop(buf);
        // Item i of the view in C order holds -i.
        run(
            py,
            "assert (v.ravel() == -np.arange(n)).all(), v.ravel()",
            &[
                ("v", &view),
                ("n", &n.into_pyobject(py).unwrap().into_any()),
            ],
        );
    });
}

#[test]
fn contiguous_views_iterate_as_slices() {
    Python::attach(|py| {
        // A C-contiguous view and one whose extent-1 axes have odd strides.
        for expr in [
            "np.arange(6.0).reshape(2, 3)",
            "np.arange(6.0).reshape(6, 1)[:, ::-1]",
        ] {
            let a = eval(py, expr, &[]);
            let buf = PyXBuffer::<f64>::get(&a).unwrap();
            let slice = buf.as_slice().unwrap();
            let iter = buf.iter().unwrap();
            assert_eq!(format!("{iter:?}"), "Iter { remaining: 6, .. }");
            assert!(iter.zip(slice).all(|(a, b)| std::ptr::eq(a, b)), "{expr}");
        }
    });
}

#[cfg(feature = "emulated-device")]
#[test]
fn device_memory_is_refused() {
    use pyxbuf::Device;
    pyxbuf::emulated::register().unwrap();
    Python::attach(|py| {
        let host = eval(py, "np.arange(4, dtype=np.float32)", &[]);
        let dev = PyXBuffer::<f32>::get(&host)
            .unwrap()
            .to_device(Device::Emulated { id: 0 })
            .unwrap();
        // As an argument: the default request is for host memory.
        let total = wrap_pyfunction!(total, py).unwrap();
        let err = total.call1((&dev,)).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        let scale = wrap_pyfunction!(scale, py).unwrap();
        let err = scale.call1((&dev, 2.0)).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        // Acquired with .device(): iter says why it cannot.
        let buf = PyXBuffer::<f32>::request().device().get(&dev).unwrap();
        let err = buf.iter().unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        assert!(
            err.to_string()
                .contains("it is in device memory (Emulated { id: 0 })")
                && err.to_string().contains("copy_to_host()"),
            "{err}"
        );
        drop(buf);
        let mut ex = PyXBuffer1::<f32, Exclusive>::from_buffer(
            PyXBuffer::<f32>::request()
                .device()
                .borrow_exclusive()
                .get(&dev)
                .unwrap(),
        )
        .unwrap();
        assert!(ex
            .iter_mut()
            .unwrap_err()
            .is_instance_of::<PyBufferError>(py));
    });
}
