// A buffer acquired with the default (shared) request has no as_mut_slice:
// writing needs `.borrow_exclusive()` (or `.writable()`).
use pyo3::prelude::*;
use pyxbuf::PyXBuffer;

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyByteArray::new(py, b"abc").into_any();
        let mut shared = PyXBuffer::<u8>::get(&data).unwrap();
        shared.as_mut_slice();
        let mut on_device = PyXBuffer::<u8>::request().device().contiguous().get(&data).unwrap();
        on_device.as_mut_slice();
    });
}
