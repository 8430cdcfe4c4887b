// Bytes are no `bool` (only 0 and 1 are): a buffer's bytes cannot be
// reinterpreted as `bool`s, read (`AnyBitPattern`) or written (`Pod`);
// `bool` -> `u8` is fine.
use pyo3::prelude::*;
use pyxbuf::{Exclusive, PyXBuffer};

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyByteArray::new(py, b"\x00\x01\x02").into_any();
        let bytes = PyXBuffer::<u8>::get(&data).unwrap();
        let _fine: &[u8] = bytes.as_slice_of::<u8>().unwrap();
        let _flags: &[bool] = bytes.as_slice_of::<bool>().unwrap();
        drop(bytes);
        let mut bytes = PyXBuffer::<u8, Exclusive>::get(&data).unwrap();
        let _flags: &mut [bool] = bytes.as_mut_slice_of::<bool>().unwrap();
    });
}
