// A PyXBuffer cannot leave the Python::attach scope it was acquired in.
use pyo3::prelude::*;
use pyxbuf::PyXBuffer;

fn main() {
    let escaped = Python::attach(|py| {
        let data = pyo3::types::PyBytes::new(py, b"abc").into_any();
        PyXBuffer::<u8>::get(&data).unwrap()
    });
    println!("{:?}", escaped.shape());
}
