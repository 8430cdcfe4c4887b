//! DLPack's Python protocol for an [`ExportBuffer`] class: `__dlpack__`
//! through [`dlpack`], `__dlpack_device__` through [`dlpack_device`].

use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyxbuf_sys as sys;

use super::{wrap, ExportBuffer};

/// `__dlpack__` for an [`ExportBuffer`] class: a DLPack capsule of the same
/// memory (host or device) under the same borrow rules as its buffer. The
/// capsule's tensor holds a shared borrow of `slf` until the consumer's
/// deleter runs, so the tensor is read-only (DLPack's read-only flag is
/// set) and the owner cannot write the memory meanwhile. `kwargs` are
/// `__dlpack__`'s (`stream`, `max_version`, `dl_device`, `copy`).
///
/// ```ignore
/// #[pyo3(signature = (**kwargs))]
/// fn __dlpack__<'py>(slf: &Bound<'py, Self>, kwargs: Option<&Bound<'py, PyDict>>)
///     -> PyResult<Bound<'py, PyAny>> {
///     pyxbuf::export::dlpack(slf, kwargs)
/// }
/// fn __dlpack_device__(&self) -> (i32, i32) {
///     pyxbuf::export::dlpack_device(self)
/// }
/// ```
pub fn dlpack<'py, C: ExportBuffer>(
    slf: &Bound<'py, C>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let exporter = wrap(slf.as_any(), false, None)?;
    exporter.call_method("__dlpack__", (), kwargs)
}

/// `__dlpack_device__` for an [`ExportBuffer`] class: DLPack's
/// `(device_type, device_id)` of the memory it exports.
pub fn dlpack_device<C: ExportBuffer>(this: &C) -> (i32, i32) {
    match this.export_desc().device {
        Some(info) => (info.0.device_type, info.0.device_id),
        None => (sys::PYXBUF_DL_CPU, 0),
    }
}
