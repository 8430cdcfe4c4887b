//! The PyO3 routes of the per-argument race, shared by the module built as
//! the crate's (`_args_pyo3`, PyO3's version-specific build) and the one
//! built under the stable ABI (`_args_pyo3_abi3`, bench/args/pyo3-abi3):
//! each function takes one 1-D float32 array and returns its length; `noop`
//! takes any object and returns 0.

use numpy::{PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyxbuf::{PyXBuffer, PyXBuffer1};

/// The length of a 1-D shape: the check every route without a
/// dimensionality in its type makes itself.
fn one_dimension(shape: &[usize]) -> PyResult<usize> {
    match shape {
        [n] => Ok(*n),
        s => Err(PyTypeError::new_err(format!(
            "expected 1-D, found shape {s:?}"
        ))),
    }
}

/// The call alone.
#[pyfunction]
pub(crate) fn noop(x: &Bound<'_, PyAny>) -> usize {
    let _ = x;
    0
}

/// pyxbuf's default argument: a shared borrow, any dimensionality; the
/// one-dimension check is the function's, as for `PyBuffer`.
#[pyfunction(name = "pyxbuf")]
pub(crate) fn by_pyxbuf(x: PyXBuffer<'_, f32>) -> PyResult<usize> {
    one_dimension(x.shape())
}

/// pyxbuf with the dimensionality in the type (as `PyReadonlyArray1`).
#[pyfunction(name = "pyxbuf1")]
pub(crate) fn by_pyxbuf1(x: PyXBuffer1<'_, f32>) -> usize {
    x.shape()[0]
}

/// PyO3's own buffer argument (no borrow, format checked, no ndim check).
#[pyfunction(name = "pybuffer")]
pub(crate) fn by_pybuffer(x: PyBuffer<f32>) -> PyResult<usize> {
    one_dimension(x.shape())
}

/// bfloat16, which neither `PyBuffer` nor rust-numpy can say.
#[pyfunction(name = "pyxbuf_bf16")]
pub(crate) fn by_pyxbuf_bf16(x: PyXBuffer<'_, pyxbuf::bf16>) -> PyResult<usize> {
    one_dimension(x.shape())
}

/// float8_e4m3fn (the float8 crate's F8E4M3, re-exported by pyxbuf).
#[pyfunction(name = "pyxbuf_f8")]
pub(crate) fn by_pyxbuf_f8(x: PyXBuffer<'_, pyxbuf::F8E4M3>) -> PyResult<usize> {
    one_dimension(x.shape())
}

/// rust-numpy's read-only 1-D array (NumPy arrays only; its borrow checker).
#[pyfunction(name = "numpy")]
pub(crate) fn by_numpy(x: PyReadonlyArray1<'_, f32>) -> usize {
    x.len()
}

/// dlpark's import (DLPack only: its C exchange table, else `__dlpack__`),
/// checked as the others are: one dimension of float32.
#[pyfunction(name = "dlpark")]
pub(crate) fn by_dlpark(x: &Bound<'_, PyAny>) -> PyResult<usize> {
    let tensor = dlpark::python::from_dlpack(x.as_borrowed(), None, None)?;
    let t = tensor
        .validate()
        .map_err(|e| PyTypeError::new_err(e.to_string()))?;
    let dt = t.dtype();
    match t.shape() {
        [n] if dt.code == dlpark::ffi::DLDataTypeCode::FLOAT && dt.bits == 32 && dt.lanes == 1 => {
            Ok(*n as usize)
        }
        s => Err(PyTypeError::new_err(format!(
            "expected 1-D float32, found shape {s:?}, dtype {dt:?}"
        ))),
    }
}
