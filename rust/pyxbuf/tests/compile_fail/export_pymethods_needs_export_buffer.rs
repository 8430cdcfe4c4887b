// `export_pymethods!` forwards the buffer slots of a class that made the
// promise of the `unsafe` trait `ExportBuffer`; without that impl there is
// nothing to forward to, and the class does not compile.
use pyo3::prelude::*;

#[pyclass(frozen)]
struct Unpromised {
    data: Vec<u8>,
}

pyxbuf::export_pymethods! {
    impl Unpromised {}
}

fn main() {}
