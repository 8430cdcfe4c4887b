//! pyxbuf's tracked borrows and rust-numpy's borrow checker (the real `numpy`
//! crate) refuse each other's conflicting borrows of a NumPy array, in both
//! directions. This binary lets pyxbuf reach the array first, so pyxbuf's own
//! table is what NumPy's multiarray module holds and rust-numpy takes its
//! borrows through it; `rust_numpy_interop_theirs.rs` is the other order.

#[path = "rust_numpy_interop/cases.rs"]
mod cases;
mod common;

use pyo3::prelude::*;

#[test]
fn pyxbuf_installs_the_table_when_it_comes_first() {
    Python::attach(|py| {
        let a = cases::array(py);
        // pyxbuf first: its table goes into NumPy's module.
        drop(pyxbuf::PyXBuffer::<f64>::get(a.as_any()).unwrap());
        assert_eq!(cases::table_owner(py), "pyxbuf");
        cases::both_directions(py);
        cases::interleaved(py);
        cases::same_range_other_spacing(py);
    });
}
