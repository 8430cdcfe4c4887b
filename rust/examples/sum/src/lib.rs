//! `pyxbuf_sum`: the code to copy when a `#[pyfunction]` should take any
//! float32 or bfloat16 array — NumPy, ml_dtypes, JAX, PyTorch, a DLPack or
//! CUDA-Array-Interface tensor, host or device memory — without a copy when
//! the memory allows it.
//!
//! Build it into a virtualenv with `maturin develop -m rust/examples/sum/Cargo.toml`
//! (or `pip install rust/examples/sum`), then:
//!
//! ```python
//! import numpy as np, ml_dtypes, pyxbuf_sum
//! pyxbuf_sum.sum_f32(np.arange(10, dtype=np.float32))          # 45.0
//! pyxbuf_sum.sum_bf16(np.ones(4, dtype=ml_dtypes.bfloat16))     # 4.0
//! ```

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyxbuf::{bf16, Device, Element, F4E2M1x2, PyXBuffer, PyXUntypedBuffer, F8E4M3, F8E5M2};

/// The sum of a buffer's items, wherever they are.
///
/// Host memory that pyxbuf could borrow (every NumPy array, unless someone
/// else holds it exclusively) is read in place: an ndarray view, strided or
/// running backwards, no copy. Device memory (and host memory whose strides
/// are not whole items) is copied to the host in C order first (device
/// memory after waiting for its producer).
pub fn total<T: Element>(x: &PyXBuffer<'_, T>, to_f64: impl Fn(T) -> f64) -> PyResult<f64> {
    if let Some(items) = x.as_array() {
        return Ok(items.iter().map(|&v| to_f64(v)).sum());
    }
    Ok(x.copy_to_host()?.into_iter().map(to_f64).sum())
}

/// Sum a float32 array on any device (a float64 accumulator).
///
/// `.device()` accepts device memory; without it a GPU tensor is refused
/// with `BufferError`. The default request also asks for a shared borrow:
/// while this runs, no other pyxbuf consumer may write the array.
#[pyfunction]
fn sum_f32(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let x = PyXBuffer::<f32>::request().device().get(x)?;
    total(&x, f64::from)
}

/// Sum a bfloat16 array (ml_dtypes, JAX, PyTorch, pyxbuf exporters) on any
/// device.
#[pyfunction]
fn sum_bf16(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let x = PyXBuffer::<bf16>::request().device().get(x)?;
    total(&x, |v| f64::from(v.to_f32()))
}

/// The shortest form: a host float32 array as a `#[pyfunction]` argument
/// (read-only, shared borrow, host memory only).
#[pyfunction]
fn sum_host_f32(x: PyXBuffer<'_, f32>) -> PyResult<f64> {
    total(&x, f64::from)
}

/// Multiply a float32 array in place: an exclusive borrow, then `&mut [f32]`.
#[pyfunction]
fn scale_f32(x: &Bound<'_, PyAny>, factor: f32) -> PyResult<()> {
    let mut x = PyXBuffer::<f32>::request().borrow_exclusive().get(x)?;
    match x.as_mut_slice() {
        Some(items) => items.iter_mut().for_each(|v| *v *= factor),
        None => {
            let scaled: Vec<f32> = x.to_vec()?.iter().map(|v| v * factor).collect();
            x.copy_from_slice(&scaled)?;
        }
    }
    Ok(())
}

/// Add `x` into `out` in place (`out += x`): two float32 host arrays of one
/// shape, the two buffers of one call. `out` is borrowed exclusively and `x`
/// shared, so passing one array as both (or overlapping views of one) is
/// refused with `BufferError` before anything is written.
#[pyfunction]
fn add_f32(out: &Bound<'_, PyAny>, x: &Bound<'_, PyAny>) -> PyResult<()> {
    let mut out = PyXBuffer::<f32>::request().borrow_exclusive().get(out)?;
    let x = PyXBuffer::<f32>::get(x)?;
    if out.shape() != x.shape() {
        return Err(PyValueError::new_err(format!(
            "add_f32: `out` has shape {:?} but `x` has shape {:?}; pass arrays of one shape",
            out.shape(),
            x.shape()
        )));
    }
    let add = x.to_vec()?; // C order, as out's items below
    match out.as_mut_slice() {
        Some(items) => items.iter_mut().zip(&add).for_each(|(o, v)| *o += v),
        None => {
            let sum: Vec<f32> = out.to_vec()?.iter().zip(&add).map(|(o, v)| o + v).collect();
            out.copy_from_slice(&sum)?;
        }
    }
    Ok(())
}

/// What pyxbuf sees in a buffer of any item type: protocol path, device,
/// format, shape, strides and borrow grant. One acquisition, no type asked.
#[pyfunction]
fn describe(x: &Bound<'_, PyAny>) -> PyResult<String> {
    let v = PyXUntypedBuffer::request().device().get_untyped(x)?;
    let g = v.grants();
    let grant = match (g.exclusive(), g.shared()) {
        (true, _) => "exclusive",
        (false, true) => "shared",
        _ => "none",
    };
    let by = if g.tracked() {
        "pyxbuf's registry"
    } else {
        "the producer"
    };
    Ok(format!(
        "path={:?} device={} format={} shape={:?} strides={:?} borrow={grant} (granted by {by})",
        v.path(),
        v.device(),
        v.format().to_string_lossy(),
        v.shape(),
        v.strides(),
    ))
}

/// Sum a float32, bfloat16 or float64 array on any device: one acquisition,
/// then the item type its format names.
#[pyfunction]
fn sum_any(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let v = PyXUntypedBuffer::request().device().get_untyped(x)?;
    if let Ok(x) = v.as_typed::<f32>() {
        return total(x, f64::from);
    }
    if let Ok(x) = v.as_typed::<bf16>() {
        return total(x, |v| f64::from(v.to_f32()));
    }
    total(v.as_typed::<f64>()?, |v| v)
}

/// Sum a float8_e4m3fn array (ml_dtypes', PyTorch's `torch.float8_e4m3fn`)
/// on any device, through `pyxbuf::F8E4M3`.
#[pyfunction]
fn sum_f8e4m3(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let x = PyXBuffer::<F8E4M3>::request().device().get(x)?;
    total(&x, |v| f64::from(v.to_f32()))
}

/// Sum a packed float4 array (PyTorch's `torch.float4_e2m1fn_x2`, two
/// float4_e2m1fn values per byte, the first in the low four bits).
#[pyfunction]
fn sum_f4x2(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let x = PyXBuffer::<F4E2M1x2>::request().device().get(x)?;
    total(&x, |v| {
        let (first, second) = v.to_f32_pair();
        f64::from(first) + f64::from(second)
    })
}

/// A copy of `x` made from Rust: its items read as `T`, written into a new
/// `pyxbuf.Exporter` of the same shape and format (what a function that
/// returns a computed array of these types does).
fn copy_as<'py, T: Element>(x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let x = PyXBuffer::<T>::get(x)?;
    let items = x.to_vec()?;
    let shape = x.shape().to_vec();
    let out = pyxbuf::export::new_exporter::<T>(x.py(), &shape, Device::Cpu)?;
    PyXBuffer::<T>::request()
        .borrow_exclusive()
        .get(&out)?
        .copy_from_slice(&items)?;
    Ok(out)
}

/// A copy of a float8_e4m3fn, float8_e5m2, bfloat16 or packed float4
/// (float4_e2m1fn_x2) array, read and written from Rust: `dtype` names the
/// item type.
#[pyfunction]
fn copy_ml<'py>(x: &Bound<'py, PyAny>, dtype: &str) -> PyResult<Bound<'py, PyAny>> {
    match dtype {
        "float8_e4m3fn" => copy_as::<F8E4M3>(x),
        "float8_e5m2" => copy_as::<F8E5M2>(x),
        "bfloat16" => copy_as::<bf16>(x),
        "float4_e2m1fn_x2" => copy_as::<F4E2M1x2>(x),
        other => Err(PyValueError::new_err(format!(
            "copy_ml: dtype {other:?} is not one of float8_e4m3fn, float8_e5m2, bfloat16, \
             float4_e2m1fn_x2"
        ))),
    }
}

/// A new `pyxbuf.Exporter` of `n` zeroed float32 items: pyxbuf's own
/// producer, which enforces borrows itself.
#[pyfunction]
fn zeros_f32(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    pyxbuf::export::new_exporter::<f32>(py, &[n], Device::Cpu)
}

/// A new `pyxbuf.Exporter` of `n` items `0, step, 2*step, ...` of `T`, filled
/// through an exclusive borrow of it (its own producer enforces that none
/// other is live: nothing else can see the array yet).
fn ramp<'py, T: Element>(
    py: Python<'py>,
    n: usize,
    item: impl Fn(usize) -> T,
) -> PyResult<Bound<'py, PyAny>> {
    let e = pyxbuf::export::new_exporter::<T>(py, &[n], Device::Cpu)?;
    {
        let mut items = PyXBuffer::<T>::request().borrow_exclusive().get(&e)?;
        let slice = items.as_mut_slice().ok_or_else(|| {
            PyValueError::new_err("ramp: a new exporter's memory is one writable run")
        })?;
        slice.iter_mut().enumerate().for_each(|(i, v)| *v = item(i));
    }
    Ok(e)
}

/// A new float32 `pyxbuf.Exporter` of `n` items `0, step, 2*step, ...`: an
/// array a Rust function returns (it pickles, so a worker process can
/// return it: protocol 5 sends its memory out of band).
#[pyfunction]
fn ramp_f32(py: Python<'_>, n: usize, step: f32) -> PyResult<Bound<'_, PyAny>> {
    ramp::<f32>(py, n, |i| i as f32 * step)
}

/// The bfloat16 ramp (format `[ml_dtypes$bfloat16]`: `np.asarray` of it is
/// an `ml_dtypes.bfloat16` array).
#[pyfunction]
fn ramp_bf16(py: Python<'_>, n: usize, step: f32) -> PyResult<Bound<'_, PyAny>> {
    ramp::<bf16>(py, n, |i| bf16::from_f32(i as f32 * step))
}

/// A copy of a float32 or bfloat16 array on pyxbuf's emulated device (a
/// `pyxbuf.Exporter` whose memory the host cannot read).
#[cfg(feature = "emulated-device")]
#[pyfunction]
fn to_emulated_device<'py>(x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    pyxbuf::emulated::register()?;
    let device = Device::Emulated { id: 0 };
    // Any item type: to_device copies bytes and keeps the format.
    PyXUntypedBuffer::get(x)?.to_device(device)
}

// libpyxbuf synchronises its own state on free-threaded builds (DESIGN.md,
// Interpreters), and this module keeps none of its own outside pyclasses,
// whose borrows PyO3 checks atomically: it runs with the GIL off, as
// `make test-matrix` tests on 3.14t.
#[pymodule(gil_used = false)]
fn pyxbuf_sum(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sum_f32, m)?)?;
    m.add_function(wrap_pyfunction!(sum_bf16, m)?)?;
    m.add_function(wrap_pyfunction!(sum_host_f32, m)?)?;
    m.add_function(wrap_pyfunction!(scale_f32, m)?)?;
    m.add_function(wrap_pyfunction!(add_f32, m)?)?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(sum_any, m)?)?;
    m.add_function(wrap_pyfunction!(zeros_f32, m)?)?;
    m.add_function(wrap_pyfunction!(ramp_f32, m)?)?;
    m.add_function(wrap_pyfunction!(ramp_bf16, m)?)?;
    m.add_function(wrap_pyfunction!(sum_f8e4m3, m)?)?;
    m.add_function(wrap_pyfunction!(sum_f4x2, m)?)?;
    m.add_function(wrap_pyfunction!(copy_ml, m)?)?;
    #[cfg(feature = "emulated-device")]
    m.add_function(wrap_pyfunction!(to_emulated_device, m)?)?;
    Ok(())
}
