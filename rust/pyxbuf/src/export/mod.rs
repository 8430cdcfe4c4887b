//! The producer side: export a `#[pyclass]`'s host or device memory through
//! the extended buffer protocol, with borrows counted for it.
//!
//! A class implements [`ExportBuffer`] (what it exports, and where its
//! [`BorrowCounter`] is) and writes its `#[pymethods]` block through
//! [`export_pymethods!`](crate::export_pymethods), which forwards PyO3's
//! `__getbuffer__` and `__releasebuffer__` to [`getbuffer`] and
//! [`releasebuffer`] and declares that the class speaks the extended
//! protocol (the class attribute `__pyxbuf_supported_flags__`; or
//! [`declare_supported`]). [`HostArray`] is ready-made storage that does the
//! bookkeeping for host memory. Forwarding `__dlpack__` and
//! `__dlpack_device__` to [`dlpack`] and [`dlpack_device`] exports the same
//! memory through DLPack under the same borrow rules
//! ([`declare_dlpack_exchange_api`] adds DLPack's C exchange table), and
//! [`wrap`] makes a zero-copy `pyxbuf.Exporter` of any object's memory.
//!
//! - `desc`: [`ExportDesc`], [`DeviceInfo`] and the `unsafe` trait
//!   [`ExportBuffer`], what a class exports and promises;
//! - `counter`: [`BorrowCounter`] and the owner's [`OwnerBorrow`];
//! - `getbuffer`: [`getbuffer`] / [`releasebuffer`], the buffer slots;
//! - `pymethods`: [`export_pymethods!`](crate::export_pymethods), the
//!   class's `#[pymethods]` block with those slots forwarded;
//! - `declare`: [`SUPPORTED_FLAGS`], [`declare_supported`],
//!   [`declare_dlpack_exchange_api`], set on the type object;
//! - `host_array`: [`HostArray`], ready-made host storage;
//! - `dlpack`: [`dlpack`] / [`dlpack_device`], DLPack's Python protocol;
//! - `exporter`: [`new_exporter`], [`wrap`] and [`exporter_over`], `pyxbuf.Exporter`s.
//!
//! ```
//! use pyo3::prelude::*;
//! use pyxbuf::export::{BorrowCounter, ExportBuffer, ExportDesc, HostArray};
//! use pyxbuf::PyXBuffer;
//!
//! #[pyclass(frozen)]
//! struct Samples {
//!     data: HostArray<f32>,
//! }
//!
//! // SAFETY: HostArray keeps its memory, shape and strides in place and
//! // unchanged while views exist.
//! unsafe impl ExportBuffer for Samples {
//!     fn export_desc(&self) -> ExportDesc<'_> {
//!         self.data.desc()
//!     }
//!     fn borrow_counter(&self) -> &BorrowCounter {
//!         self.data.borrows()
//!     }
//! }
//!
//! // The class's #[pymethods] block, buffer slots and supported flags added.
//! pyxbuf::export_pymethods! {
//!     impl Samples {}
//! }
//!
//! Python::attach(|py| -> PyResult<()> {
//!     let samples = Bound::new(py, Samples { data: HostArray::from_vec(vec![1.0, 2.0, 3.0]) })?;
//!     let buf = PyXBuffer::<f32>::get(samples.as_any())?;
//!     assert!(buf.grants().is_enforced()); // granted by the producer itself
//!     assert_eq!(buf.as_slice(), Some(&[1.0, 2.0, 3.0][..]));
//!     // A writer is refused while the shared borrow lives ...
//!     assert!(PyXBuffer::<f32>::request().writable().get(samples.as_any()).is_err());
//!     drop(buf);
//!     // ... and granted afterwards.
//!     let mut w = PyXBuffer::<f32>::request().writable().get(samples.as_any())?;
//!     w.as_mut_slice().unwrap()[0] = 10.0;
//!     drop(w);
//!     assert_eq!(samples.get().data.read(|x| x[0])?, 10.0);
//!     Ok(())
//! })
//! .unwrap();
//! ```

mod counter;
mod declare;
mod desc;
mod dlpack;
mod exporter;
mod getbuffer;
mod host_array;
mod pymethods;

pub use counter::{BorrowCounter, OwnerBorrow};
pub use declare::{declare_dlpack_exchange_api, declare_supported, SUPPORTED_FLAGS};
pub use desc::{DeviceInfo, ExportBuffer, ExportDesc};
pub use dlpack::{dlpack, dlpack_device};
pub use exporter::{exporter_over, new_exporter, wrap};
pub use getbuffer::{getbuffer, numpy_array, releasebuffer};
pub use host_array::HostArray;
