// `temporary()` promises the producer that no Python code runs before the
// view is released; safe code cannot keep that promise, so the call needs
// `unsafe`.
use pyo3::prelude::*;
use pyxbuf::PyXBuffer;

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyBytes::new(py, b"abc").into_any();
        let buf = PyXBuffer::<u8>::request().temporary().get(&data).unwrap();
        drop(buf);
    });
}
