//! As `rust_numpy_interop.rs`, with rust-numpy first: its own table is what
//! NumPy's multiarray module holds, and pyxbuf takes every tracked borrow of an
//! ndarray in it too.

#[path = "rust_numpy_interop/cases.rs"]
mod cases;
mod common;

use numpy::PyArrayMethods;
use pyo3::prelude::*;

#[test]
fn rust_numpy_installs_the_table_when_it_comes_first() {
    Python::attach(|py| {
        let a = cases::array(py);
        // rust-numpy first: its table goes into NumPy's module.
        drop(a.readwrite());
        assert_eq!(cases::table_owner(py), "rust-numpy");
        cases::both_directions(py);
        cases::interleaved(py);
        cases::same_range_other_spacing(py);
    });
}
