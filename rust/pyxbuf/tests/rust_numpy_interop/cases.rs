//! The checks both interop binaries run.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyxbuf::{Exclusive, PyXBuffer};

pub fn array(py: Python<'_>) -> Bound<'_, PyArray1<f64>> {
    PyArray1::from_vec(py, vec![1.0, 2.0, 3.0, 4.0])
}

/// Whose table NumPy's multiarray module holds.
pub fn table_owner(py: Python<'_>) -> &'static str {
    let module = py
        .import("numpy._core.multiarray")
        .or_else(|_| py.import("numpy.core.multiarray"))
        .unwrap();
    let capsule = module.getattr("_RUST_NUMPY_BORROW_CHECKING_API").unwrap();
    // SAFETY: a live capsule object; PyCapsule_GetContext only reads it.
    let context = unsafe { pyo3::ffi::PyCapsule_GetContext(capsule.as_ptr()) };
    if context.is_null() {
        "rust-numpy"
    } else {
        "pyxbuf"
    }
}

fn refused<T>(py: Python<'_>, r: PyResult<T>, what: &str) {
    match r {
        Ok(_) => panic!("{what}: granted"),
        Err(e) => assert!(e.is_instance_of::<PyBufferError>(py), "{what}: {e}"),
    }
}

pub fn both_directions(py: Python<'_>) {
    let a = array(py);
    let any = a.as_any();

    // rust-numpy writing: pyxbuf may neither read nor write.
    let rw = a.readwrite();
    refused(
        py,
        PyXBuffer::<f64>::get(any),
        "pyxbuf shared under PyReadwriteArray",
    );
    refused(
        py,
        PyXBuffer::<f64, Exclusive>::get(any),
        "pyxbuf exclusive under PyReadwriteArray",
    );
    drop(rw);

    // rust-numpy reading: pyxbuf may read, not write.
    let ro = a.readonly();
    let shared = PyXBuffer::<f64>::get(any).unwrap();
    assert!(shared.grants().tracked() && shared.grants().shared());
    refused(
        py,
        PyXBuffer::<f64, Exclusive>::get(any),
        "pyxbuf exclusive under PyReadonlyArray",
    );
    drop(shared);
    drop(ro);

    // pyxbuf writing (a tracked exclusive borrow): rust-numpy may not borrow.
    let mut ex = PyXBuffer::<f64, Exclusive>::get(any).unwrap();
    ex.as_mut_slice().unwrap()[0] = 10.0;
    assert!(
        a.try_readwrite().is_err(),
        "PyReadwriteArray under pyxbuf exclusive"
    );
    assert!(
        a.try_readonly().is_err(),
        "PyReadonlyArray under pyxbuf exclusive"
    );
    drop(ex);

    // pyxbuf reading: rust-numpy may read, not write.
    let shared = PyXBuffer::<f64>::get(any).unwrap();
    assert_eq!(
        a.try_readonly().unwrap().as_slice().unwrap(),
        [10.0, 2.0, 3.0, 4.0]
    );
    assert!(
        a.try_readwrite().is_err(),
        "PyReadwriteArray under pyxbuf shared"
    );
    drop(shared);

    // Overlapping views of one base conflict; disjoint ones do not.
    let view = a
        .call_method1("__getitem__", (pyo3::types::PySlice::new(py, 1, 3, 1),))
        .unwrap();
    let half = view.cast::<PyArray1<f64>>().unwrap();
    let ex = PyXBuffer::<f64, Exclusive>::get(any).unwrap();
    assert!(
        half.try_readonly().is_err(),
        "a slice under pyxbuf exclusive of the whole"
    );
    drop(ex);
    let rw = half.readwrite();
    refused(
        py,
        PyXBuffer::<f64>::get(any),
        "pyxbuf of the whole under PyReadwriteArray of a slice",
    );
    let other = a
        .call_method1("__getitem__", (pyo3::types::PySlice::new(py, 3, 4, 1),))
        .unwrap();
    assert!(
        PyXBuffer::<f64>::get(&other).is_ok(),
        "a disjoint slice is free"
    );
    drop(rw);

    // Everything released: both sides grant again.
    drop(a.readwrite());
    drop(PyXBuffer::<f64, Exclusive>::get(any).unwrap());
}

/// Interleaved views share a range but no byte: rust-numpy's borrows and
/// pyxbuf's tracked ones of them coexist, whichever registry is in charge
/// (issue 25, item 18); views that do share a byte still conflict.
pub fn interleaved(py: Python<'_>) {
    let c = numpy::PyArray1::<num_complex::Complex<f64>>::zeros(py, 8, false);
    let real = c.getattr("real").unwrap();
    let imag = c.getattr("imag").unwrap();
    let real_a = real.cast::<PyArray1<f64>>().unwrap();
    let imag_a = imag.cast::<PyArray1<f64>>().unwrap();
    // pyxbuf writes the real parts while rust-numpy writes the imaginary ones,
    let mut ex = PyXBuffer::<f64, Exclusive>::get(&real).unwrap();
    let mut rw = imag_a
        .try_readwrite()
        .expect("imag under pyxbuf exclusive of real");
    *ex.iter_mut().unwrap().next().unwrap() = 1.0; // strided: in logical order
    rw.as_array_mut()[0] = 2.0;
    drop((ex, rw));
    // and the other way round.
    let rw = real_a.try_readwrite().unwrap();
    let ex = PyXBuffer::<f64, Exclusive>::get(&imag).expect("imag under rust-numpy's real");
    drop((ex, rw));
    let z = c.readonly();
    assert_eq!(
        z.as_slice().unwrap()[0],
        num_complex::Complex::new(1.0, 2.0)
    );
    drop(z);

    // Columns of a C-ordered matrix.
    let m = numpy::PyArray2::<f64>::zeros(py, (4, 3), false);
    let col = |j: usize| {
        m.call_method1("__getitem__", ((pyo3::types::PySlice::full(py), j),))
            .unwrap()
    };
    let (c0, c1) = (col(0), col(1));
    let ex = PyXBuffer::<f64, Exclusive>::get(&c0).unwrap();
    let rw = c1
        .cast::<PyArray1<f64>>()
        .unwrap()
        .try_readwrite()
        .expect("column 1 under pyxbuf exclusive of column 0");
    // A row shares one item with each column.
    let row = m.call_method1("__getitem__", (2,)).unwrap();
    refused(
        py,
        PyXBuffer::<f64>::get(&row),
        "a row under column borrows",
    );
    assert!(row.cast::<PyArray1<f64>>().unwrap().try_readonly().is_err());
    drop((ex, rw));
}

/// Two rust-numpy borrows over the same bytes with different spacing
/// (`a[0:10:3]` and `a[0:10]`): releasing the narrow one leaves the broad
/// one held, so a borrow of `a[1:10:3]` (disjoint from the narrow one, inside
/// the broad one) is still refused (issue 38, item 1: pyxbuf's table found the
/// token by range alone and released the broad one's).
pub fn same_range_other_spacing(py: Python<'_>) {
    let a = numpy::PyArray1::<u8>::zeros(py, 16, false);
    let slice = |start: isize, step: isize| {
        a.call_method1(
            "__getitem__",
            (pyo3::types::PySlice::new(py, start, 10, step),),
        )
        .unwrap()
    };
    let (narrow, broad, other) = (slice(0, 3), slice(0, 1), slice(1, 3));
    let narrow_ro = narrow.cast::<PyArray1<u8>>().unwrap().readonly();
    let broad_ro = broad.cast::<PyArray1<u8>>().unwrap().readonly();
    drop(narrow_ro);
    refused(
        py,
        PyXBuffer::<u8, Exclusive>::get(&other),
        "pyxbuf exclusive of a[1:10:3] under rust-numpy's a[0:10]",
    );
    assert!(other
        .cast::<PyArray1<u8>>()
        .unwrap()
        .try_readwrite()
        .is_err());
    drop(broad_ro);
    drop(PyXBuffer::<u8, Exclusive>::get(&other).expect("a[1:10:3] once a[0:10] is released"));
}
