// iter_mut, like as_mut_slice, exists only on Exclusive buffers.
use pyo3::prelude::*;
use pyxbuf::{PyXBuffer, PyXBuffer1};

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyByteArray::new(py, b"abc").into_any();
        let mut shared = PyXBuffer::<u8>::get(&data).unwrap();
        shared.iter_mut();
        let mut one = PyXBuffer1::<u8>::get(&data).unwrap();
        one.iter_mut();
    });
}
