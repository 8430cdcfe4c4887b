//! [`PyXBuffer`]: a typed view of a Python object's memory, acquired through
//! `pyxbuf_get` (native extended buffers, DLPack, the CUDA Array Interface,
//! the classic buffer protocol, NumPy's `__array_interface__`).
//!
//! - `request`: the borrow mode as a type and the [`Request`] builder;
//! - `grants`: what the producer granted and which protocol answered;
//! - `slot`: where an acquired view lives (stable, reused per thread);
//! - `view`: [`PyXUntypedBuffer`], the acquired view;
//! - `typed`: [`PyXBuffer`], an untyped view checked to hold `T`s;
//! - `host`: slices, cells and copies of host memory;
//! - `bytes`: byte views and plain-data reinterpretation (`as_bytes`,
//!   `as_slice_of`) of contiguous host memory, whatever the format;
//! - `iter`: `iter` / `iter_mut`, the items in C order for any strides;
//! - `layout`: layout questions the iterators and ndarray views share;
//! - `ndim`: [`PyXBufferN`] (`PyXBuffer1`, `PyXBuffer2`), a buffer of a
//!   number of dimensions known when compiling;
//! - `owned`: [`PyXBufferOwned`], a `Send` handle for `#[pyclass]`es;
//! - `device_access`: device, device pointer, waits, `to_device`;
//! - `ndarray_views`: `as_array` / `as_array_mut` (feature `ndarray`).

mod bytes;
mod device_access;
mod grants;
mod host;
mod iter;
mod layout;
#[cfg(feature = "ndarray")]
mod ndarray_views;
mod ndim;
mod owned;
mod request;
mod slot;
mod typed;
mod view;

pub use grants::{Grants, Path};
pub use host::ReadOnlyCell;
pub use iter::{Iter, IterMut};
pub use ndim::{PyXBuffer1, PyXBuffer2, PyXBufferN};
pub use owned::PyXBufferOwned;
pub use request::{BorrowMode, Exclusive, Request, Shared, Untyped};
pub use typed::PyXBuffer;
pub use view::PyXUntypedBuffer;

use view::type_name;

/// `FromPyObject` through `Self::get` (what a `#[pyfunction]` argument
/// acquires), with the stub type of `experimental-inspect`.
macro_rules! from_py_object_via_get {
    (impl[$($g:tt)*] for $ty:ty) => {
        impl<'a, 'py, $($g)*> pyo3::FromPyObject<'a, 'py> for $ty {
            type Error = pyo3::PyErr;

            #[cfg(feature = "experimental-inspect")]
            const INPUT_TYPE: pyo3::inspect::PyStaticExpr = super::INPUT_TYPE;

            #[inline]
            fn extract(obj: pyo3::Borrowed<'a, 'py, pyo3::PyAny>) -> pyo3::PyResult<Self> {
                Self::get(&obj)
            }
        }
    };
}
use from_py_object_via_get;

/// The stub type of a buffer argument under PyO3's `experimental-inspect`
/// (feature `experimental-inspect`): the buffer protocol's ABC, as PyO3's own
/// `PyBuffer` says -- `collections.abc.Buffer` from Python 3.12 on,
/// `typing_extensions.Buffer` before. Typing has no protocol for DLPack, the
/// CUDA Array Interface or `__array_interface__`, which pyxbuf reads too, to
/// add to it.
#[cfg(feature = "experimental-inspect")]
const INPUT_TYPE: pyo3::inspect::PyStaticExpr = if cfg!(Py_3_12) {
    pyo3::type_hint_identifier!("collections.abc", "Buffer")
} else {
    pyo3::type_hint_identifier!("typing_extensions", "Buffer")
};
