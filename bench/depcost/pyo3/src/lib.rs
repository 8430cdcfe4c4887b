//! Dependency-cost baseline: sum and FNV-1a hash of a bytes-like object
//! through PyO3's own `PyBuffer<u8>`.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

/// (sum of the bytes, FNV-1a 64 hash) of any C-contiguous byte buffer.
#[pyfunction]
fn digest(py: Python<'_>, x: PyBuffer<u8>) -> PyResult<(u64, u64)> {
    let bytes = x.to_vec(py)?;
    let mut sum = 0u64;
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for b in bytes {
        sum += u64::from(b);
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    Ok((sum, hash))
}

#[pymodule]
fn depcost_pyo3(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(digest, m)?)
}
