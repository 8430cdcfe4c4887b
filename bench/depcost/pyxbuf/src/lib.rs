//! Dependency cost: sum and FNV-1a hash of a bytes-like object through
//! `pyxbuf::PyXBuffer<u8>` (borrowed in place; copied when not borrowable).

use pyo3::prelude::*;
use pyxbuf::PyXBuffer;

fn fold(bytes: impl IntoIterator<Item = u8>) -> (u64, u64) {
    let mut sum = 0u64;
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for b in bytes {
        sum += u64::from(b);
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    (sum, hash)
}

/// (sum of the bytes, FNV-1a 64 hash) of any host byte buffer.
#[pyfunction]
fn digest(x: PyXBuffer<'_, u8>) -> PyResult<(u64, u64)> {
    if let Some(bytes) = x.as_slice() {
        return Ok(fold(bytes.iter().copied()));
    }
    Ok(fold(x.copy_to_host()?))
}

#[pymodule]
fn depcost_pyxbuf(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(digest, m)?)
}
