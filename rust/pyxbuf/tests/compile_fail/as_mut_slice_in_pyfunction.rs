// The default #[pyfunction] argument is a shared borrow: no writing.
use pyo3::prelude::*;
use pyxbuf::PyXBuffer;

#[pyfunction]
fn zero(mut x: PyXBuffer<'_, f32>) {
    if let Some(items) = x.as_mut_slice() {
        items.fill(0.0);
    }
}

fn main() {}
