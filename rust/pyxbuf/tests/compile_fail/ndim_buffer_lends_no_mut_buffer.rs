// A PyXBuffer1 lends out no `&mut PyXBuffer` (no DerefMut), through which a
// buffer of another number of dimensions could be swapped in; what writes
// is forwarded (iter_mut, as_mut_slice, ...).
use pyo3::prelude::*;
use pyxbuf::{Exclusive, PyXBuffer, PyXBuffer1};

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyByteArray::new(py, b"abc").into_any();
        let one = PyXBuffer1::<u8, Exclusive>::get(&data).unwrap();
        let matrix = pyo3::types::PyByteArray::new(py, b"abcd").into_any();
        let other = PyXBuffer::<u8, Exclusive>::get(&matrix).unwrap();
        *one = other;
    });
}
