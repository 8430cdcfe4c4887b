//! What a class declares on its type object: that it speaks the extended
//! protocol ([`SUPPORTED_FLAGS`], [`declare_supported`]) and that it carries
//! DLPack's C exchange table ([`declare_dlpack_exchange_api`]).

use std::ffi::c_int;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::PyClass;
use pyxbuf_sys as sys;

/// Every classic and extended request flag, and `PYXBUF_EXTENDED_FORMAT`
/// (a consumer that reads custom types in formats: without it, a request for
/// the format of custom items is refused, so that NumPy falls back to
/// `__array__`): what a type exporting through [`getbuffer`](super::getbuffer)
/// supports. The value of `__pyxbuf_supported_flags__`.
pub const SUPPORTED_FLAGS: i32 =
    sys::PYXBUF_CLASSIC_FLAGS | sys::PYXBUF_EXTENDED_FLAGS | sys::PYXBUF_EXTENDED_FORMAT;

/// Record that `C` speaks the extended protocol (`SUPPORTED_FLAGS`), for
/// classes that do not set the class attribute `__pyxbuf_supported_flags__`
/// (which [`export_pymethods!`](crate::export_pymethods) sets).
/// Without either, pyxbuf treats the class as a classic producer: no device
/// memory, and borrows only from pyxbuf's cooperative registry.
pub fn declare_supported<C: PyClass>(py: Python<'_>) -> PyResult<()> {
    set_on_type::<C>(py, |ty| {
        // SAFETY: set_on_type passes a live, ready type object and the
        // thread is attached.
        unsafe { sys::pyxbuf_type_set_supported_flags(ty, SUPPORTED_FLAGS) }
    })
}

/// Give `C` DLPack 1.3's C exchange table, `__dlpack_c_exchange_api__` (call
/// once, at module initialisation): consumer frameworks then take its
/// objects' memory through C function pointers, without a Python call per
/// tensor. The managed tensors hold a view of the object under its borrow
/// rules until their deleter runs (see `pyxbuf_type_set_dlpack_exchange_api`
/// in `pyxbuf.h` for each function's behaviour).
pub fn declare_dlpack_exchange_api<C: PyClass>(py: Python<'_>) -> PyResult<()> {
    set_on_type::<C>(py, |ty| {
        // SAFETY: as in declare_supported.
        unsafe { sys::pyxbuf_type_set_dlpack_exchange_api(ty) }
    })
}

/// Call `set` (a `pyxbuf_type_set_*` function) with `C`'s type object,
/// turning its negative answer into the exception it set.
fn set_on_type<C: PyClass>(
    py: Python<'_>,
    set: impl FnOnce(*mut ffi::PyTypeObject) -> c_int,
) -> PyResult<()> {
    let ty = C::type_object(py);
    if set(ty.as_ptr().cast::<ffi::PyTypeObject>()) < 0 {
        Err(PyErr::fetch(py))
    } else {
        Ok(())
    }
}
