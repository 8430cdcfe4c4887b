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
//! - `owned`: [`PyXBufferOwned`], a `Send` handle for `#[pyclass]`es;
//! - `device_access`: device, device pointer, waits, `to_device`;
//! - `ndarray_views`: `as_array` / `as_array_mut` (feature `ndarray`).

mod device_access;
mod grants;
mod host;
#[cfg(feature = "ndarray")]
mod ndarray_views;
mod owned;
mod request;
mod slot;
mod typed;
mod view;

pub use grants::{Grants, Path};
pub use host::ReadOnlyCell;
pub use owned::PyXBufferOwned;
pub use request::{BorrowMode, Exclusive, Request, Shared, Untyped};
pub use typed::PyXBuffer;
pub use view::PyXUntypedBuffer;

use view::type_name;
