//! Issue 50, item 1: an item-type refusal is `pyxbuf.ItemTypeError`, one
//! class deriving from `TypeError` (pyxbuf's rule) and `BufferError` (what
//! PyO3's `PyBuffer::get` raises), so that the plain swap
//! `PyBuffer<u8>` → `PyXBuffer<u8>` keeps every `except BufferError`.

mod common;

use common::{eval, run};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyxbuf::{PyXBuffer, PyXBuffer1};

#[pyfunction]
fn first_byte(x: PyXBuffer<'_, u8>) -> PyResult<u8> {
    Ok(x.iter()?.next().copied().unwrap_or(0))
}

#[test]
fn the_plain_swap_keeps_pyo3s_buffer_error() {
    Python::attach(|py| {
        let ints = eval(py, "__import__('array').array('i', [1, 2, 3])", &[]);
        let theirs = PyBuffer::<u8>::get(&ints).unwrap_err();
        assert!(theirs.is_instance_of::<PyBufferError>(py), "{theirs}");
        let ours = PyXBuffer::<u8>::get(&ints).unwrap_err();
        assert!(ours.is_instance_of::<PyBufferError>(py), "{ours}");
        assert!(ours.is_instance_of::<PyTypeError>(py), "{ours}");
        let cls = pyxbuf::item_type_error_class(py).unwrap();
        assert!(ours.get_type(py).is(&cls));
        let msg = ours.value(py).str().unwrap().to_string();
        assert!(
            msg.contains("format 'i'") && msg.contains("PyXBuffer<u8> needs format 'B'"),
            "{msg}"
        );
        // A dimension count a typed argument fixes: the same class.
        let m = eval(py, "np.zeros((2, 2), np.uint8)", &[]);
        let err = PyXBuffer1::<u8>::get(&m).unwrap_err();
        assert!(err.get_type(py).is(&cls), "{err}");
        // Not readable at all: a TypeError only.
        let err = PyXBuffer::<u8>::get(&eval(py, "5", &[])).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py) && !err.is_instance_of::<PyBufferError>(py));
    });
}

#[test]
fn python_catches_an_argument_refusal_both_ways() {
    Python::attach(|py| {
        let f = wrap_pyfunction!(first_byte, py).unwrap();
        let cls = pyxbuf::item_type_error_class(py).unwrap();
        // PyO3 0.28 names no argument (no note) in errors but a plain TypeError.
        let named = pyo3::types::PyBool::new(py, !cfg!(pyo3_before_0_29)).to_owned();
        run(
            py,
            "import array\n\
             for caught in (TypeError, BufferError, cls):\n\
             \x20   try:\n\
             \x20       f(array.array('i', [1]))\n\
             \x20   except caught as e:\n\
             \x20       assert type(e) is cls, type(e)\n\
             \x20       notes = getattr(e, '__notes__', None)\n\
             \x20       assert \"while processing 'x'\" in notes if named else notes is None, notes\n\
             \x20   else:\n\
             \x20       raise AssertionError('not raised')\n\
             assert f(b'\\x07') == 7\n",
            &[("f", f.as_any()), ("cls", cls.as_any()), ("named", named.as_any())],
        );
    });
}

#[test]
fn the_class_is_the_processs_one() {
    Python::attach(|py| {
        let cls = pyxbuf::item_type_error_class(py).unwrap();
        // SAFETY: a live object, the thread attached.
        let refcnt = || unsafe { pyo3::ffi::Py_REFCNT(cls.as_ptr()) };
        let before = refcnt();
        for _ in 0..10_000 {
            assert!(pyxbuf::item_type_error_class(py).unwrap().is(&cls));
        }
        // A class's count is deferred on free-threaded builds: Py_REFCNT is
        // no count there (the calls above still ran).
        if !cfg!(Py_GIL_DISABLED) {
            assert_eq!(refcnt(), before);
        }
        run(
            py,
            "import sys\n\
             assert sys.modules['_pyxbuf_shared'].ItemTypeError is cls\n\
             assert (cls.__module__, cls.__name__) == ('pyxbuf', 'ItemTypeError')\n\
             assert cls.__bases__ == (TypeError, BufferError), cls.__bases__\n\
             assert 'PyO3' in cls.__doc__ and 'BufferError' in cls.__doc__\n",
            &[("cls", cls.as_any())],
        );
    });
}
