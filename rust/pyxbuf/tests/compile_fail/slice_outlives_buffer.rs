// A slice borrows its buffer: it cannot outlive the view it came from.
use pyo3::prelude::*;
use pyxbuf::PyXBuffer;

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyBytes::new(py, b"abc").into_any();
        let items: &[u8] = {
            let buf = PyXBuffer::<u8>::get(&data).unwrap();
            buf.as_slice().unwrap()
        };
        println!("{items:?}");
    });
}
