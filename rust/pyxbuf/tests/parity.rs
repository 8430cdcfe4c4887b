//! What a port from `pyo3::buffer::PyBuffer` (or from rust-numpy) needs:
//! acquire once and pick the type, Fortran order, sub-array pointers,
//! ndarray views, arguments named in errors.

mod common;

use common::{eval, run};
use half::bf16;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyxbuf::{Exclusive, PyXBuffer, PyXUntypedBuffer};

#[test]
fn untyped_buffer_acquires_once_and_types_later() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(6, dtype=np.float32).reshape(2, 3)", &[]);
        let buf = PyXUntypedBuffer::get(&a).unwrap();
        assert_eq!(
            (buf.format().to_str().unwrap(), buf.shape()),
            ("f", &[2usize, 3][..])
        );
        assert!(buf.grants().shared());
        // The wrong type: TypeError naming both formats, and the buffer lives on.
        // A BufferError too, as PyO3's PyBuffer::get raised it: pyxbuf.ItemTypeError.
        let err = buf.as_typed::<bf16>().unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py), "{err}");
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        assert!(err
            .get_type(py)
            .is(pyxbuf::item_type_error_class(py).unwrap()));
        assert!(err.to_string().contains("'f'") && err.to_string().contains("bfloat16"));
        let floats = buf.as_typed::<f32>().unwrap();
        assert_eq!(floats.as_slice().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        // Typed by value: still one acquisition, released once.
        let owned: PyXBuffer<'_, f32> = buf.into_typed().unwrap();
        assert_eq!(owned.item_count(), 6);
        let back = owned.into_untyped();
        assert!(back.into_typed::<f64>().is_err());
        // A request without a type, with the builder.
        let dev = PyXUntypedBuffer::request()
            .device()
            .get_untyped(&a)
            .unwrap();
        assert_eq!(dev.item_size(), 4);
    });
}

#[test]
fn fortran_order_slices_and_copies() {
    Python::attach(|py| {
        let a = eval(py, "np.asfortranarray(np.arange(6.0).reshape(2, 3))", &[]);
        let buf = PyXBuffer::<f64>::get(&a).unwrap();
        assert!(buf.as_slice().is_none(), "not C-contiguous");
        let memory_order = [0.0, 3.0, 1.0, 4.0, 2.0, 5.0];
        assert_eq!(buf.as_fortran_slice().unwrap(), memory_order);
        assert_eq!(buf.as_fortran_cells().unwrap()[1].get(), 3.0);
        assert_eq!(buf.to_fortran_vec().unwrap(), memory_order);
        assert_eq!(buf.to_vec().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        drop(buf);

        let mut ex = PyXBuffer::<f64, Exclusive>::get(&a).unwrap();
        ex.as_fortran_mut_slice().unwrap()[1] = 30.0; // a[1, 0]
        drop(ex);
        assert_eq!(
            eval(py, "a[1, 0]", &[("a", &a)]).extract::<f64>().unwrap(),
            30.0
        );

        // Filling a C-order array from Fortran-ordered values.
        let c = eval(py, "np.zeros((2, 3))", &[]);
        let mut ex = PyXBuffer::<f64, Exclusive>::get(&c).unwrap();
        ex.copy_from_fortran_slice(&memory_order).unwrap();
        assert_eq!(ex.as_slice().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        // And a strided one, item by item.
        let s = eval(py, "np.zeros((2, 6))[:, ::2]", &[]);
        let mut ex = PyXBuffer::<f64, Exclusive>::get(&s).unwrap();
        ex.copy_from_fortran_slice(&memory_order).unwrap();
        drop(ex);
        assert_eq!(
            eval(py, "s.tolist()", &[("s", &s)])
                .extract::<Vec<Vec<f64>>>()
                .unwrap(),
            [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        );
    });
}

#[test]
fn get_ptr_takes_partial_indices() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(24, dtype=np.int32).reshape(2, 3, 4)", &[]);
        let buf = PyXBuffer::<i32>::get(&a).unwrap();
        let base = buf.buf_ptr().cast::<u8>();
        assert_eq!(buf.get_ptr(&[]), base.cast());
        assert_eq!(buf.get_ptr(&[1]), base.wrapping_add(48).cast());
        assert_eq!(buf.get_ptr(&[1, 2]), base.wrapping_add(48 + 32).cast());
        assert_eq!(
            buf.get_ptr(&[1, 2, 3]),
            base.wrapping_add(48 + 32 + 12).cast()
        );
    });
}

#[cfg(feature = "ndarray")] // as_array/as_array_mut: the default feature
#[test]
fn ndarray_views_strided_and_backwards() {
    Python::attach(|py| {
        for expr in [
            "np.arange(12.0).reshape(3, 4)",
            "np.arange(12.0).reshape(3, 4)[:, ::2]",
            "np.arange(12.0).reshape(3, 4)[::-1, ::-3]",
            "np.arange(12.0).reshape(3, 4).T",
            "np.zeros((0, 4))",
            "np.float64(7.0).reshape(())",
        ] {
            let a = eval(py, expr, &[]);
            let buf = PyXBuffer::<f64>::get(&a).unwrap();
            let view = buf.as_array().unwrap_or_else(|| panic!("{expr}: no view"));
            let want = eval(py, "a.tolist()", &[("a", &a)]);
            let flat: Vec<f64> = view.iter().copied().collect();
            let np_flat = eval(py, "a.ravel().tolist()", &[("a", &a)])
                .extract::<Vec<f64>>()
                .unwrap();
            assert_eq!(flat, np_flat, "{expr}: {want}");
            assert_eq!(view.shape(), buf.shape(), "{expr}");
        }
        // Items not aligned for f64 (one byte into a buffer): no view.
        let odd = eval(
            py,
            "np.frombuffer(bytearray(17), dtype=np.uint8)[1:].view(np.float64)",
            &[],
        );
        let buf = PyXBuffer::<f64>::get(&odd).unwrap();
        assert!(!buf.buf_ptr().cast::<f64>().is_aligned());
        assert!(buf.as_array().is_none() && buf.as_slice().is_none());
        assert_eq!(buf.to_vec().unwrap(), [0.0, 0.0]);
    });
}

#[cfg(feature = "ndarray")] // as_array/as_array_mut: the default feature
#[test]
fn ndarray_mut_views_need_exclusive_and_no_aliasing() {
    Python::attach(|py| {
        let a = eval(py, "np.zeros((2, 3))", &[]);
        let mut ex = PyXBuffer::<f64, Exclusive>::get(&a).unwrap();
        {
            let mut view = ex.as_array_mut().unwrap();
            view[[1, 2]] = 5.0;
            for j in 0..3 {
                view[[0, j]] = 1.0;
            }
        }
        drop(ex);
        assert_eq!(
            eval(py, "a.tolist()", &[("a", &a)])
                .extract::<Vec<Vec<f64>>>()
                .unwrap(),
            [[1.0, 1.0, 1.0], [0.0, 0.0, 5.0]]
        );
        // A writable stride-0 broadcast reaches one item from many indices.
        let b = eval(
            py,
            "np.lib.stride_tricks.as_strided(np.zeros(1), shape=(4,), strides=(0,), writeable=True)",
            &[],
        );
        let mut ex = PyXBuffer::<f64, Exclusive>::get(&b).unwrap();
        assert!(ex.as_array_mut().is_none());
        assert_eq!(ex.as_array().unwrap().sum(), 0.0);
    });
}

#[pyfunction]
fn total(x: PyXBuffer<'_, f64>) -> f64 {
    x.to_vec().unwrap().iter().sum()
}

#[test]
fn argument_errors_name_the_argument() {
    Python::attach(|py| {
        let f = wrap_pyfunction!(total, py).unwrap();
        let a = eval(py, "np.ones(3)", &[]);
        let _ex = PyXBuffer::<f64, Exclusive>::get(&a).unwrap();
        let err = f.call1((&a,)).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        // PyO3 0.29 and later name it in a note; 0.28 passes any error but a
        // plain TypeError through as it is.
        if cfg!(pyo3_before_0_29) {
            assert!(!err.value(py).hasattr("__notes__").unwrap());
        } else {
            let notes = err.value(py).getattr("__notes__").unwrap();
            assert!(
                notes.to_string().contains("while processing 'x'"),
                "{notes}"
            );
        }
        run(py, "assert f(np.ones(2)) == 2.0", &[("f", f.as_any())]);
    });
}

/// Issue 27: PyO3 0.30's `as_fortran_slice_ptr` beside `as_slice_ptr`,
/// `None` where PyO3's is, the same pointer and length where it is not.
/// Against an older PyO3 (`make test-pyo3-versions` sets the cfg), ignored
/// with the reason.
#[test]
#[cfg(not(pyo3_before_0_30))]
#[allow(deprecated)] // PyBuffer's own cell accessors are not used, only its pointers
fn slice_pointers_match_pyo3s() {
    use pyo3::buffer::PyBuffer;
    Python::attach(|py| {
        for expr in [
            "np.arange(6.0).reshape(2, 3)",
            "np.asfortranarray(np.arange(6.0).reshape(2, 3))",
            "np.arange(6.0)[::2]",
            "np.arange(6.0)",
        ] {
            let a = eval(py, expr, &[]);
            let ours = PyXBuffer::<f64>::get(&a).unwrap();
            let theirs = PyBuffer::<f64>::get(&a).unwrap();
            let same = |x: Option<std::ptr::NonNull<[f64]>>,
                        y: Option<std::ptr::NonNull<[f64]>>| {
                assert_eq!(
                    x.map(|p| (p.cast::<f64>(), p.len())),
                    y.map(|p| (p.cast::<f64>(), p.len())),
                    "{expr}"
                );
            };
            same(ours.as_slice_ptr(), theirs.as_slice_ptr());
            same(ours.as_fortran_slice_ptr(), theirs.as_fortran_slice_ptr());
            // Read-only views (shared borrows) have no pointer for writing.
            assert!(ours.as_fortran_mut_slice_ptr().is_none());
            drop(ours);
            let ex = PyXBuffer::<f64, Exclusive>::get(&a).unwrap();
            same(ex.as_fortran_mut_slice_ptr(), theirs.as_fortran_slice_ptr());
        }
    });
}

#[test]
#[cfg(pyo3_before_0_30)]
#[ignore = "PyO3 before 0.30 has no PyBuffer::as_slice_ptr / as_fortran_slice_ptr to compare with"]
fn slice_pointers_match_pyo3s() {}

/// With PyO3's `experimental-inspect`, a buffer argument's stub type is
/// what PyO3's own `PyBuffer` gives: the buffer ABC for this Python.
#[cfg(feature = "experimental-inspect")]
#[test]
fn stub_type_is_the_buffer_abc() {
    use pyo3::FromPyObject;
    use pyxbuf::PyXBuffer2;
    Python::attach(|py| {
        // PyO3's own answer for this build: the Python built for, which under
        // abi3 is the minimum version (abi3-py311: typing_extensions.Buffer,
        // whatever runs the test).
        #[cfg(not(pyo3_before_0_30))]
        let want = <pyo3::buffer::PyBuffer<f32> as FromPyObject<'_, '_>>::INPUT_TYPE.to_string();
        #[cfg(pyo3_before_0_30)]
        let want = if py.version_info() >= (3, 12) {
            "collections.abc.Buffer"
        } else {
            "typing_extensions.Buffer"
        }
        .to_string();
        let _ = py;
        assert!(
            want == "collections.abc.Buffer" || want == "typing_extensions.Buffer",
            "{want}"
        );
        let hints = [
            <PyXBuffer<'_, f32> as FromPyObject<'_, '_>>::INPUT_TYPE.to_string(),
            <PyXBuffer<'_, u8, Exclusive> as FromPyObject<'_, '_>>::INPUT_TYPE.to_string(),
            <PyXBuffer2<'_, f64> as FromPyObject<'_, '_>>::INPUT_TYPE.to_string(),
            <PyXUntypedBuffer<'_> as FromPyObject<'_, '_>>::INPUT_TYPE.to_string(),
            // Before 0.30, PyO3's says collections.abc.Buffer on every Python.
            #[cfg(not(pyo3_before_0_30))]
            <pyo3::buffer::PyBuffer<f32> as FromPyObject<'_, '_>>::INPUT_TYPE.to_string(),
        ];
        assert!(hints.iter().all(|h| *h == want), "{hints:?}");
    });
}
