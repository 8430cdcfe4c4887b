// A byte view borrows its buffer: it cannot outlive the view it came from,
// nor be held while the buffer is written through another byte view.
use pyo3::prelude::*;
use pyxbuf::PyXUntypedBuffer;

fn main() {
    Python::attach(|py| {
        let data = pyo3::types::PyByteArray::new(py, b"abc").into_any();
        let bytes: &[u8] = {
            let buf = PyXUntypedBuffer::get(&data).unwrap();
            buf.as_bytes().unwrap()
        };
        println!("{bytes:?}");

        let mut buf = PyXUntypedBuffer::request()
            .borrow_exclusive()
            .get_untyped(&data)
            .unwrap();
        let read: &[u32] = buf.as_slice_of::<u32>().unwrap();
        let write: &mut [u8] = buf.as_bytes_mut().unwrap();
        write[0] = read.len() as u8;
    });
}
