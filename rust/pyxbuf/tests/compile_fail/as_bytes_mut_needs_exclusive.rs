// A buffer acquired with the default (shared) request has no mutable byte
// view, typed or untyped: writing needs `.borrow_exclusive()`.
use pyo3::prelude::*;
use pyxbuf::{PyXBuffer, PyXBuffer1, PyXUntypedBuffer};

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyByteArray::new(py, b"abc").into_any();
        let mut typed = PyXBuffer::<u8>::get(&data).unwrap();
        typed.as_bytes_mut();
        typed.as_mut_slice_of::<u8>();
        drop(typed);
        let mut untyped = PyXUntypedBuffer::get(&data).unwrap();
        untyped.as_bytes_mut();
        untyped.as_mut_slice_of::<u8>();
        drop(untyped);
        let mut one = PyXBuffer1::<u8>::get(&data).unwrap();
        one.as_bytes_mut();
    });
}
