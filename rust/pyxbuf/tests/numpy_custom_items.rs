//! Issue 50, item 8, for the Rust producer side: a `#[pyclass]` exporting
//! bfloat16 or float8 items through `export_pymethods!` opens in NumPy
//! (`np.asarray(x)`, `np.array(x, dtype=...)`, `x.__array__()`) as an ndarray
//! of ml_dtypes' dtype over the class's own memory; `memoryview(x)`, which
//! cannot read custom items, is refused with a message naming
//! `np.asarray`, and pyxbuf's consumers still read the format.

mod common;

use common::eval;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyxbuf::export::{BorrowCounter, ExportBuffer, ExportDesc, HostArray};
use pyxbuf::{bf16, PyXBuffer, F8E4M3};

macro_rules! grid_class {
    ($name:ident, $t:ty) => {
        #[pyclass(frozen)]
        struct $name {
            data: HostArray<$t>,
        }

        // SAFETY: HostArray keeps memory, shape and strides in place while
        // views live.
        unsafe impl ExportBuffer for $name {
            fn export_desc(&self) -> ExportDesc<'_> {
                self.data.desc()
            }
            fn borrow_counter(&self) -> &BorrowCounter {
                self.data.borrows()
            }
        }

        pyxbuf::export_pymethods! {
            impl $name {}
        }
    };
}

grid_class!(GridBf16, bf16);
grid_class!(GridF8, F8E4M3);

fn address(a: &Bound<'_, PyAny>) -> usize {
    a.getattr("__array_interface__")
        .unwrap()
        .get_item("data")
        .unwrap()
        .get_item(0)
        .unwrap()
        .extract()
        .unwrap()
}

#[test]
fn a_bfloat16_class_opens_in_numpy_as_ml_dtypes_bfloat16_without_a_copy() {
    Python::attach(|py| {
        let values: Vec<bf16> = (0..6).map(|i| bf16::from_f32(i as f32 * 0.5)).collect();
        let data = HostArray::new(values, &[2, 3]).unwrap();
        let g = Bound::new(py, GridBf16 { data }).unwrap();
        let start = PyXBuffer::<bf16>::get(g.as_any()).unwrap().buf_ptr() as usize;
        let a = eval(py, "np.asarray(g)", &[("g", g.as_any())]);
        assert_eq!(
            eval(py, "str(a.dtype), a.shape, a.tolist()", &[("a", &a)]).to_string(),
            "('bfloat16', (2, 3), [[0.0, 0.5, 1.0], [1.5, 2.0, 2.5]])"
        );
        assert_eq!(address(&a), start, "zero-copy: the class's own memory");
        let same = eval(
            py,
            "np.array(g, dtype=__import__('ml_dtypes').bfloat16, copy=False)",
            &[("g", g.as_any())],
        );
        assert_eq!(address(&same), start);
        // The arrays rest on a view of the class, which its counter sees: a
        // borrow taken meanwhile is tracked, enforced again once they are gone.
        let x = PyXBuffer::<bf16, pyxbuf::Exclusive>::get(g.as_any()).unwrap();
        assert!(x.grants().tracked());
        drop(x);
        drop(same);
        drop(a);
        py.run(c"import gc; gc.collect()", None, None).unwrap();
        let x = PyXBuffer::<bf16, pyxbuf::Exclusive>::get(g.as_any()).unwrap();
        assert!(x.grants().is_enforced());
        drop(x);
        // pyxbuf's consumers read the format.
        let buf = PyXBuffer::<bf16>::get(g.as_any()).unwrap();
        assert_eq!(buf.format().to_str().unwrap(), "[ml_dtypes$bfloat16]");
    });
}

#[test]
fn a_float8_class_opens_too_and_memoryview_is_refused_naming_np_asarray() {
    Python::attach(|py| {
        let values: Vec<F8E4M3> = (0..4).map(|i| F8E4M3::from_f32(i as f32)).collect();
        let g = Bound::new(
            py,
            GridF8 {
                data: HostArray::new(values, &[4]).unwrap(),
            },
        )
        .unwrap();
        let got = eval(
            py,
            "str(g.__array__().dtype), g.__array__().tolist()",
            &[("g", g.as_any())],
        );
        assert_eq!(got.to_string(), "('float8_e4m3fn', [0.0, 1.0, 2.0, 3.0])");
        let locals = pyo3::types::PyDict::new(py);
        locals.set_item("g", &g).unwrap();
        let err = py.eval(c"memoryview(g)", None, Some(&locals)).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("GridF8's format '[ml_dtypes$float8_e4m3fn]' holds a custom type")
                && msg.contains("np.asarray(x)"),
            "{msg}"
        );
    });
}
