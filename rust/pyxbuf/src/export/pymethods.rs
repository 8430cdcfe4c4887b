//! [`export_pymethods!`](crate::export_pymethods): the `#[pymethods]` block
//! of an [`ExportBuffer`](super::ExportBuffer) class, with the buffer slots
//! forwarded to [`getbuffer`](super::getbuffer) and
//! [`releasebuffer`](super::releasebuffer) and the extended protocol declared.

/// The `#[pymethods]` block of an
/// [`ExportBuffer`](crate::export::ExportBuffer) class, with what exports its
/// memory added to the items you write in it:
///
/// - `__getbuffer__`, forwarding to [`getbuffer`](crate::export::getbuffer);
/// - `__releasebuffer__`, forwarding to
///   [`releasebuffer`](crate::export::releasebuffer);
/// - the class attribute `__pyxbuf_supported_flags__` =
///   [`SUPPORTED_FLAGS`](crate::export::SUPPORTED_FLAGS): the class speaks
///   the extended protocol (device memory, enforced borrows);
/// - `__array__(dtype=None, *, copy=None)`, forwarding to
///   [`numpy_array`](crate::export::numpy_array): `np.asarray(x)` of a
///   `bf16` or float8 class is an ndarray of ml_dtypes' dtype, zero-copy
///   (the class refuses `memoryview(x)` the format of custom items, as
///   `PYXBUF_EXTENDED_FORMAT` asks, so that NumPy comes here). A class that
///   needs its own `__array__` writes its `#[pymethods]` by hand.
///
/// ```text
/// pyxbuf::export_pymethods! {
///     $(#[attribute])*       // optional, e.g. #[cfg(..)]: put on the block
///     impl Class {
///         $(items)*          // what any #[pymethods] block holds
///     }
/// }
/// ```
///
/// # What the class promises
///
/// The macro adds no promise of its own, and so needs no `unsafe` at the
/// call site: the methods it writes call `getbuffer::<Self>` and
/// `releasebuffer::<Self>`, which compile only for a class that implements
/// the `unsafe` trait [`ExportBuffer`](crate::export::ExportBuffer). That
/// impl is the class's promise -- the memory, shape and strides it describes
/// stay valid, in place and unchanged while views are live, and the class
/// itself respects the borrows its counter grants -- and what makes the
/// export sound. Keep the class `#[pyclass(frozen)]`: `__releasebuffer__`
/// takes `&self`, which PyO3 could not lend while a `&mut self` method runs.
///
/// # Why it takes the whole block
///
/// PyO3 refuses macro invocations among the items of a `#[pymethods]` block
/// ("macros cannot be used as items in `#[pymethods]` impl blocks"), and
/// without its `multiple-pymethods` feature a class has one such block. So
/// the macro writes that block, `#[::pyo3::pymethods]` included, around your
/// items: write the class's other methods inside it, and no other
/// `#[pymethods]` block for the class. (Like the code PyO3's macros
/// generate, the expansion refers to the crate as `::pyo3`.) A class that
/// must forward differently -- change the view
/// [`getbuffer`](crate::export::getbuffer) filled, or fill it by hand --
/// writes its own `#[pymethods]` block with `__getbuffer__` and
/// `__releasebuffer__` as `unsafe fn`s, as this macro's source does.
///
/// ```
/// use pyo3::prelude::*;
/// use pyxbuf::export::{BorrowCounter, ExportBuffer, ExportDesc, HostArray};
/// use pyxbuf::PyXBuffer;
///
/// #[pyclass(frozen)]
/// struct Counts {
///     data: HostArray<u32>,
/// }
///
/// // SAFETY: HostArray keeps its memory, shape and strides in place and
/// // unchanged while views exist, and its owner reads and writes count as
/// // borrows.
/// unsafe impl ExportBuffer for Counts {
///     fn export_desc(&self) -> ExportDesc<'_> {
///         self.data.desc()
///     }
///     fn borrow_counter(&self) -> &BorrowCounter {
///         self.data.borrows()
///     }
/// }
///
/// pyxbuf::export_pymethods! {
///     impl Counts {
///         #[new]
///         fn new(n: usize) -> Counts {
///             Counts { data: HostArray::from_vec(vec![0; n]) }
///         }
///
///         fn bump(&self, i: usize) -> PyResult<()> {
///             self.data.write(|x| x[i] += 1)
///         }
///     }
/// }
///
/// Python::attach(|py| -> PyResult<()> {
///     let counts = py.get_type::<Counts>().call1((3,))?;
///     counts.call_method1("bump", (1,))?;
///     let flags: i32 = counts.getattr("__pyxbuf_supported_flags__")?.extract()?;
///     assert_eq!(flags, pyxbuf::export::SUPPORTED_FLAGS);
///     let buf = PyXBuffer::<u32>::get(&counts)?;
///     assert!(buf.grants().is_enforced());
///     assert_eq!(buf.as_slice(), Some(&[0, 1, 0][..]));
///     // The owner's write waits for the shared borrow to end.
///     assert!(counts.call_method1("bump", (1,)).is_err());
///     drop(buf);
///     counts.call_method1("bump", (1,))?;
///     Ok(())
/// })
/// .unwrap();
/// ```
#[macro_export]
macro_rules! export_pymethods {
    ($(#[$attr:meta])* impl $class:ty { $($item:tt)* }) => {
        $(#[$attr])*
        #[::pyo3::pymethods]
        impl $class {
            #[classattr]
            #[allow(non_upper_case_globals)]
            const __pyxbuf_supported_flags__: i32 = $crate::export::SUPPORTED_FLAGS;

            // `unsafe`: callers other than PyO3's bf_getbuffer slot owe
            // getbuffer's contract.
            unsafe fn __getbuffer__(
                slf: ::pyo3::Bound<'_, Self>,
                view: *mut ::pyo3::ffi::Py_buffer,
                flags: ::std::os::raw::c_int,
            ) -> ::pyo3::PyResult<()> {
                // SAFETY: PyO3 calls this from the type's bf_getbuffer slot
                // with the view and flags CPython or pyxbuf passed (a
                // Py_buffer inside a pyxbuf_view when the flags carry
                // extended bits): getbuffer's contract. What it exports is
                // sound by the class's ExportBuffer impl, which getbuffer's
                // bound requires.
                unsafe { $crate::export::getbuffer(&slf, view, flags) }
            }

            /// NumPy's conversion: a zero-copy ndarray of the memory, custom
            /// items (bfloat16, float8...) as their NumPy dtype.
            #[pyo3(signature = (dtype=None, *, copy=None))]
            fn __array__<'py>(
                slf: &::pyo3::Bound<'py, Self>,
                dtype: ::std::option::Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
                copy: ::std::option::Option<&::pyo3::Bound<'py, ::pyo3::PyAny>>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::PyAny>> {
                $crate::export::numpy_array(slf.as_any(), dtype, copy)
            }

            // `unsafe`: callers other than PyO3's bf_releasebuffer slot owe
            // releasebuffer's contract.
            unsafe fn __releasebuffer__(&self, view: *mut ::pyo3::ffi::Py_buffer) {
                // SAFETY: PyO3 calls this from the type's bf_releasebuffer
                // slot, once per view that __getbuffer__ above (getbuffer)
                // filled for this object: releasebuffer's contract.
                unsafe { $crate::export::releasebuffer(self, view) }
            }

            $($item)*
        }
    };
}
