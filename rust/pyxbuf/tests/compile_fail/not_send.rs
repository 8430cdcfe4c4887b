// A PyXBuffer is tied to the thread (and interpreter attachment) it was
// acquired on: it cannot be sent to another thread, nor into detach().
use pyo3::prelude::*;
use pyxbuf::PyXBuffer;

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyBytes::new(py, b"abc").into_any();
        let buf = PyXBuffer::<u8>::get(&data).unwrap();
        std::thread::spawn(move || drop(buf));
        let buf2 = PyXBuffer::<u8>::get(&data).unwrap();
        py.detach(|| buf2.item_count());
    });
}
