//! Typed, zero-copy views of Python buffers for PyO3 — host **and device**
//! memory, with **borrow grants** that make plain `&[T]` / `&mut [T]`
//! possible, and **custom dtypes** such as bfloat16.
//!
//! `pyxbuf` is the safe layer over libpyxbuf (the C library implementing the
//! proposed extended Python buffer protocol; raw bindings in [`sys`]). One
//! call accepts a NumPy array, a `bytearray`, an `array.array`, a DLPack or
//! CUDA-Array-Interface tensor, an ml_dtypes bfloat16 array or a
//! `pyxbuf.Exporter`, and hands out a [`PyXBuffer<T>`] with its shape,
//! strides, device and grants.
//!
//! One code path serves every layout: [`iter`](PyXBuffer::iter) and
//! [`iter_mut`](PyXBuffer::iter_mut) walk the items in C order whatever the
//! strides (a slice iterator when they follow each other), without a copy,
//! and [`PyXBuffer1`] / [`PyXBuffer2`] fix the number of dimensions:
//!
//! ```
//! use pyo3::prelude::*;
//! use pyxbuf::{Exclusive, PyXBuffer, PyXBuffer1};
//!
//! #[pyfunction]
//! fn total(x: PyXBuffer<'_, f32>) -> PyResult<f32> {
//!     Ok(x.iter()?.sum())
//! }
//!
//! #[pyfunction]
//! fn scale(mut x: PyXBuffer1<'_, f32, Exclusive>, k: f32) -> PyResult<()> {
//!     for v in x.iter_mut()? {
//!         *v *= k;
//!     }
//!     Ok(())
//! }
//!
//! Python::attach(|py| -> PyResult<()> {
//!     let (total, scale) = (wrap_pyfunction!(total, py)?, wrap_pyfunction!(scale, py)?);
//!     let array = py.eval(c"__import__('array').array('f', [1, 2, 3, 4])", None, None)?;
//!     let view = py.eval(c"memoryview", None, None)?.call1((&array,))?;
//!     let every_other = view.get_item(pyo3::types::PySlice::new(py, 0, 4, 2))?; // strided
//!     scale.call1((&every_other, 2.0))?;
//!     assert_eq!(total.call1((&every_other,))?.extract::<f32>()?, 8.0);
//!     assert_eq!(total.call1((&array,))?.extract::<f32>()?, 14.0);
//!     Ok(())
//! })
//! .unwrap();
//! ```
//!
//! With NumPy, `scale(a[::2], 2.0)` doubles every other element of `a`;
//! `scale` of a 2-D array is a `TypeError` ("expected a 1-dimensional
//! array, found 2 dimensions (shape (2, 3)); ...", with PyO3's note "while
//! processing 'x'"), of the class [`item_type_error_class`] gives. The plain slices stay for contiguous memory:
//! [`as_slice`](PyXBuffer::as_slice), [`as_mut_slice`](PyXBuffer::as_mut_slice),
//! and `as_array` for ndarray views.
//!
//! # Porting from `pyo3::buffer::PyBuffer`
//!
//! The names are PyO3's where the meaning is the same — [`get`](PyXBuffer::get),
//! [`item_count`](PyXUntypedBuffer::item_count), [`item_size`](PyXUntypedBuffer::item_size),
//! [`len_bytes`](PyXUntypedBuffer::len_bytes), [`dimensions`](PyXUntypedBuffer::dimensions),
//! [`shape`](PyXUntypedBuffer::shape), [`strides`](PyXUntypedBuffer::strides),
//! [`readonly`](PyXUntypedBuffer::readonly), [`format`](PyXUntypedBuffer::format),
//! [`is_c_contiguous`](PyXUntypedBuffer::is_c_contiguous),
//! [`is_fortran_contiguous`](PyXUntypedBuffer::is_fortran_contiguous),
//! [`buf_ptr`](PyXUntypedBuffer::buf_ptr), [`get_ptr`](PyXUntypedBuffer::get_ptr),
//! [`to_vec`](PyXBuffer::to_vec), [`to_fortran_vec`](PyXBuffer::to_fortran_vec),
//! [`copy_to_slice`](PyXBuffer::copy_to_slice),
//! [`copy_to_fortran_slice`](PyXBuffer::copy_to_fortran_slice),
//! [`copy_from_slice`](PyXBuffer::copy_from_slice), [`release`](PyXUntypedBuffer::release),
//! [`as_slice_ptr`](PyXBuffer::as_slice_ptr),
//! [`as_fortran_slice_ptr`](PyXBuffer::as_fortran_slice_ptr)
//! — minus the `py` arguments (the buffer carries its `Python<'py>`). PyO3's
//! `as_slice` (cells, deprecated in PyO3 0.30 as unsound) is
//! [`as_cells`](PyXBuffer::as_cells) here, which needs a borrow grant, or
//! the `unsafe` [`as_cells_unchecked`](PyXBuffer::as_cells_unchecked)
//! without one (and its `as_fortran_slice` is
//! [`as_fortran_cells`](PyXBuffer::as_fortran_cells) /
//! [`as_fortran_cells_unchecked`](PyXBuffer::as_fortran_cells_unchecked));
//! [`as_slice`](PyXBuffer::as_slice) / [`as_fortran_slice`](PyXBuffer::as_fortran_slice)
//! give a plain `&[T]` under a borrow grant, and
//! [`as_mut_slice`](PyXBuffer::as_mut_slice) /
//! [`as_fortran_mut_slice`](PyXBuffer::as_fortran_mut_slice) a `&mut [T]`
//! under an exclusive one. [`suboffsets`](PyXUntypedBuffer::suboffsets),
//! [`copy_from_fortran_slice`](PyXBuffer::copy_from_fortran_slice) and
//! [`get_ptr`](PyXUntypedBuffer::get_ptr) with fewer indices than dimensions
//! are there too. PyO3's untyped buffer is [`PyXUntypedBuffer`]: acquire
//! once, read the format (or [`parsed_format`](PyXUntypedBuffer::parsed_format)),
//! then [`as_typed`](PyXUntypedBuffer::as_typed) or
//! [`into_typed`](PyXUntypedBuffer::into_typed) -- or probe with
//! [`is_of`](PyXUntypedBuffer::is_of) / [`try_typed`](PyXUntypedBuffer::try_typed),
//! which build no exception per miss; a `PyXBuffer<T>` derefs to
//! it for everything that does not depend on `T`. Items that are not `T`
//! (and a number of dimensions a [`PyXBuffer1`] fixes) raise
//! `pyxbuf.ItemTypeError` ([`item_type_error_class`]), which derives from
//! `TypeError`, by pyxbuf's rule, and from `BufferError`, which PyO3's
//! `PyBuffer::get` raises there: `except BufferError` written for PyO3 still
//! catches it. A failed `PyXBuffer`
//! argument keeps its exception and carries PyO3's note naming the
//! argument ("while processing 'x'"). With PyO3's `experimental-inspect`
//! (this crate's feature of that name), a buffer argument's stub type is the
//! buffer ABC, as for PyO3's `PyBuffer`.
//!
//! # Bytes and plain-data reinterpretation
//!
//! Where a port cast `buf_ptr()` to a slice of another type in an `unsafe`
//! block, [`as_bytes`](PyXUntypedBuffer::as_bytes) reads any contiguous host
//! buffer as `&[u8]` whatever its format and item size, and
//! [`as_slice_of::<U>`](PyXUntypedBuffer::as_slice_of) as `&[U]` for any
//! [`bytemuck::AnyBitPattern`] type (an `i8` buffer as `u8`, `u32` as
//! `f32`, `f16` as `u16`, bytes as `[u8; 4]`), checking that the bytes are
//! a whole number of `U`s at an address aligned for `U`; `bool`, not valid
//! for every byte, is refused when compiling. Both need the grant
//! [`as_slice`](PyXBuffer::as_slice) needs and borrow the buffer. Their
//! writable forms, [`as_bytes_mut`](PyXUntypedBuffer::as_bytes_mut) and
//! [`as_mut_slice_of`](PyXUntypedBuffer::as_mut_slice_of) (`U:`
//! [`bytemuck::Pod`]), exist only on `Exclusive` buffers. Refusals (device
//! memory, a strided layout, no grant, size or alignment) are `BufferError`s
//! naming the cause. The numeric element types are `Pod` (`f16`, `bf16`,
//! the float8 types and `Complex` through their crates' `bytemuck`
//! features; not `F4E2M1x2`, whose crate has none: read it as `u8`), and
//! [`bytemuck`] is re-exported for your own types.
//!
//! # Grants
//!
//! Every acquisition asks for a borrow: [`Shared`] by default (read-only,
//! nobody writes while the view lives) or [`Exclusive`] (writable, nobody
//! else reads or writes). pyxbuf's own exporters enforce the borrow
//! themselves, and memory that cannot be written (exact `bytes`, read-only
//! views of it) is enforced by construction; other producers (NumPy,
//! `bytearray`, DLPack tensors...) get a
//! *tracked* grant from pyxbuf's process-wide cooperative registry, which
//! every pyxbuf consumer in the process respects but code that bypasses
//! pyxbuf does not. [`Grants`] says which one a view holds, and
//! [`Request::require_enforced`] refuses anything weaker than an enforced
//! one.
//!
//! # Soundness
//!
//! Plain slices, iterators' references (and cells) are handed out only
//! under a borrow grant, and a grant is only as good as whoever keeps it. There are two kinds
//! ([`Grants::tracked`] tells them apart):
//!
//! - **Enforced** (no `tracked` bit): the producer itself refuses every
//!   request that would break the promise until the view is released —
//!   pyxbuf's exporters (`pyxbuf.Exporter`, the [`export`] module's
//!   `#[pyclass]`es) and any extended producer that grants borrows. There
//!   [`as_slice`](PyXBuffer::as_slice) and
//!   [`as_mut_slice`](PyXBuffer::as_mut_slice) are sound outright: no code
//!   that reaches the memory through the producer, on any thread, can write
//!   it while the slice lives. A zero-copy wrapper of another object's
//!   memory (`pyxbuf.from_dlpack`, [`export::wrap`]) holds a borrow of that
//!   memory for its whole life and its grants are never stronger than that
//!   borrow: enforced only over an enforcing producer, `tracked` over NumPy
//!   and every other tracked source.
//!   [`Request::require_enforced`] accepts only these.
//!
//!   Memory that cannot be written at all is enforced too, by construction
//!   and with no registry entry: the storage of an exact `bytes` object,
//!   reached directly, through read-only `memoryview`s (slices, casts) or
//!   through NumPy arrays whose base chain is read-only and ends in the
//!   bytes (`np.frombuffer(b)`, NumPy 2). pyxbuf checks that every byte the
//!   view's items touch lies in those bytes, so an exporter that names bytes
//!   but hands out other memory stays tracked. A `bytes` subclass (it may
//!   define its own `__buffer__`), a read-only view of mutable memory
//!   (`memoryview(bytearray).toreadonly()`, an array with its `writeable`
//!   flag cleared) and a read-only `mmap` (another process may write the
//!   file) stay tracked. This is what makes releasing the GIL sound for a
//!   crate that reads its input as bytes: `PyXBuffer::<u8>::request()
//!   .require_enforced()` accepts `bytes`, `memoryview(bytes)` and pyxbuf's
//!   arrays and refuses everything mutable (`docs/borrow-grants.md` in the
//!   repository has the table per producer).
//!
//!   An enforcing producer grants only what it can keep. While views it does
//!   not control are live -- a NumPy array or `memoryview` over its memory, a
//!   DLPack export a tensor holds (`np.from_dlpack`, `torch.from_dlpack`) --
//!   it cannot stop their writes, so a borrow asked then is granted
//!   **tracked**, taken in the same registry as NumPy's memory, instead of
//!   refused: passing a pyxbuf array back to Rust while Python looks at it
//!   works, and pyxbuf's consumers of those foreign views and of the
//!   exporter still refuse each other. Once the foreign views are gone,
//!   grants are enforced again; [`Request::require_enforced`] refuses
//!   meanwhile, naming how many views are live. A request for a borrow of a
//!   view with suboffsets is refused outright: what the registry records is a
//!   byte range, and such a view's range is its pointer table, not its items
//!   (read it with [`Request::without_borrow`]).
//! - **Tracked** (`tracked` bit): pyxbuf's process-wide cooperative registry
//!   granted it, for producers that know nothing of borrows (NumPy,
//!   `bytearray`, `array.array`, DLPack and CAI tensors). Every pyxbuf
//!   consumer in the process — all copies of the library, C or Rust —
//!   respects it: a conflicting `PyXBuffer`, `pyxbuf_get` or
//!   `pyxbuf.from_dlpack` is refused. For NumPy arrays so does rust-numpy:
//!   pyxbuf and rust-numpy's borrow checker share one registry through the
//!   `_RUST_NUMPY_BORROW_CHECKING_API` capsule in NumPy's multiarray module
//!   (whichever comes first installs it), so a `PyReadwriteArray` and a
//!   `PyXBuffer` of overlapping memory refuse each other in both directions
//!   (tests/rust_numpy_interop*.rs, with the real `numpy` crate).
//!
//!   **What a tracked grant cannot stop** is code that bypasses both:
//!   `array[0] = 1` from Python, a `memoryview` taken before or after, C
//!   code writing the array — on this thread *or on another*. Staying
//!   attached does not keep other threads out: on free-threaded CPython
//!   every thread runs Python at any time, and on GIL builds C code that
//!   released the GIL runs beside you (a NumPy ufunc writing its output,
//!   `np.add(a, 1, out=a)`, does). So a slice under a tracked grant is sound
//!   **only if no code outside pyxbuf writes the memory while you hold
//!   it** — the same promise rust-numpy's `PyReadonlyArray` relies on. On
//!   this thread you keep it by not calling Python code that may write the
//!   array between taking the slice and dropping it; other threads you
//!   cannot stop, so the promise is yours to make about the program: that
//!   no other thread writes the array meanwhile. Where you cannot make it,
//!   use [`Request::require_enforced`] (a tracked grant is then refused),
//!   or copy ([`to_vec`](PyXBuffer::to_vec)).
//!
//! Without a grant (a producer that ignores borrow requests) the safe API
//! hands out no reference to the memory: [`as_slice`](PyXBuffer::as_slice),
//! [`as_cells`](PyXBuffer::as_cells) and `as_array` return `None`,
//! [`iter`](PyXBuffer::iter) a `BufferError` saying so; copies
//! ([`to_vec`](PyXBuffer::to_vec)) still work. Cells without a grant are the
//! `unsafe` [`as_cells_unchecked`](PyXBuffer::as_cells_unchecked) (reads
//! that tolerate writes from *this* thread between them; you promise that
//! no other thread writes meanwhile, a data race no cell can prevent — why
//! PyO3 0.30 deprecated its safe cells), and the raw
//! [`as_slice_ptr`](PyXBuffer::as_slice_ptr) /
//! [`as_mut_slice_ptr`](PyXBuffer::as_mut_slice_ptr) (`NonNull<[T]>`)
//! leave every dereference to your `unsafe` block. What the type system
//! adds: `as_mut_slice` and `iter_mut` exist only on `PyXBuffer<T, Exclusive>`, whose
//! acquisition fails unless an exclusive grant was given; slices borrow the
//! buffer, the buffer borrows its `Python<'py>` and is `!Send`
//! ([`PyXBufferOwned`], the `Send` handle, only for `Send + Sync` items);
//! cells never form a reference to a `T` over bytes that may not be a valid
//! `T` (`bool`); [`Request::temporary`] is `unsafe` because safe code cannot
//! promise that no Python runs before release. Layouts are checked once, at
//! acquisition: a negative extent, or extents whose product does not fit in
//! memory, refuse the view before any slice, cell or ndarray view is sized
//! by them. [`iter_mut`](PyXBuffer::iter_mut) (as `as_array_mut`) refuses
//! layouts in which two indices reach the same bytes (a zero stride, as a
//! broadcast has): two `&mut` to one item would be undefined behaviour.
//!
//! # Design notes
//!
//! - **A view that never moves, in reused storage.** Views can be
//!   self-referential: CPython's `PyBuffer_FillInfo` (bytes, bytearray,
//!   mmap) points `shape`/`strides` at the view's own `len`/`itemsize`,
//!   pyxbuf's exporter does the same for 1-D exports without strides, and
//!   pyxbuf's bridges point them at the view's `inline_dims`. A
//!   [`PyXBuffer`] therefore holds its 296-byte C `pyxbuf_view` in a slot
//!   that stays put while the buffer moves (one pointer to move), taken from
//!   a per-thread stock of four spare slots and given back on drop: no
//!   allocation per acquisition in the steady state (PyO3's `PyBuffer`
//!   boxes its `Py_buffer` on every call). Holding the view inline instead
//!   cost twelve `memcpy` calls of the ~370-byte value per acquisition and
//!   drop of a `#[pyfunction]` argument (its address escapes to C, so the
//!   compiler keeps every copy through `Result`s and returns), about a third
//!   of the Rust layer's instructions (`make bench-ir`, bench/analysis.md).
//! - **Type-state for writing.** Whether a buffer may be written from safe
//!   code is decided by its type: only `PyXBuffer<T, Exclusive>` has
//!   `as_mut_slice` and `copy_from_slice`, and they take `&mut self`. A
//!   writable request without a borrow does not exist in the safe API:
//!   such a view would bypass the registry and could alias another
//!   consumer's `&[T]`.
//! - **Lifetime `'py`.** Releasing a view calls the producer and so needs an
//!   attached thread; the buffer carries `Python<'py>`, cannot outlive it and
//!   is `!Send`, so its `Drop` never re-attaches (PyO3's `PyBuffer` does).
//! - **Formats.** A format matches `T` when its one item is `T`'s kind in
//!   native byte order (`@ = ^`, and `<` on little-endian targets) and the
//!   view's `itemsize` is `size_of::<T>()`. The exact canonical string is
//!   recognised without parsing; anything else goes through pyxbuf's C
//!   parser (`pyxbuf_format_parse`), which also resolves `[struct$...]`
//!   payloads and custom-type alternatives. [`Format`] is that parser's
//!   answer in safe Rust: kind, sizes, byte order, struct fields and
//!   offsets, custom id and payload, the canonical string; formats compare
//!   by meaning (`"f"`, `"=f"`, `"<f"` are one format on a little-endian
//!   machine).
//! - **`bool`.** Only bytes 0 and 1 are valid `bool`s: `as_slice` checks
//!   them, copies normalise them and cells read them as bytes.
//!
//! # Features
//!
//! - `ndarray` (**on by default**): `PyXBuffer::as_array` /
//!   `PyXBuffer::as_array_mut`, `ndarray` views of borrowed host memory
//!   (strided, negative strides included), under the same grants as the
//!   slices; typed (`ArrayView1`, `ArrayView2`) on [`PyXBuffer1`] /
//!   [`PyXBuffer2`]. Opt out with `default-features = false`.
//! - `experimental-inspect`: PyO3's feature of that name (stub generation),
//!   with `PyXBuffer` arguments typed as the buffer ABC
//!   (`collections.abc.Buffer` from Python 3.12 on,
//!   `typing_extensions.Buffer` before), as PyO3's `PyBuffer` is.
//! - `emulated-device`: compile pyxbuf's guarded emulated device into the
//!   library and expose the `emulated` module (tests only).
//! - `float8` (**on by default**): the `float8` crate's `F8E4M3` and
//!   `F8E5M2` as element types (ml_dtypes' and PyTorch's float8_e4m3fn and
//!   float8_e5m2), re-exported as `pyxbuf::F8E4M3` and `pyxbuf::F8E5M2`.
//!   Their bits and `to_f32`/`from_f32` follow the OCP encodings (ml_dtypes
//!   agrees); their named constants do not all: in float8 0.7
//!   `F8E5M2::INFINITY` is 0x7B (57344, the largest finite value; infinity
//!   is 0x7C) and `F8E4M3::INFINITY` is 0x7E (448: E4M3FN has no infinity).
//!   Compare with values you built from bits or floats.
//! - `float4` (**on by default**): the `float4` crate's `F4E2M1x2`, two
//!   float4_e2m1fn values in one byte (PyTorch's float4_e2m1fn_x2, NVFP4 and
//!   MXFP4 weights), re-exported as `pyxbuf::F4E2M1x2`.
//! - bf16 / f16 items are [`half`]'s types, re-exported as `pyxbuf::bf16`
//!   and `pyxbuf::f16`: no `half` dependency of your own is needed.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod buffer;
mod device;
mod element;
#[cfg(feature = "emulated-device")]
pub mod emulated;
mod errors;
pub mod export;
mod format;
mod transfer;
mod words;

pub use buffer::{
    BorrowMode, Exclusive, Grants, Iter, IterMut, Path, PyXBuffer, PyXBuffer1, PyXBuffer2,
    PyXBufferN, PyXBufferOwned, PyXUntypedBuffer, ReadOnlyCell, Request, Shared, Untyped,
};
/// The `bytemuck` crate whose `AnyBitPattern` and `Pod` traits bound
/// [`as_slice_of`](PyXUntypedBuffer::as_slice_of) and
/// [`as_mut_slice_of`](PyXUntypedBuffer::as_mut_slice_of): implement (or
/// derive, with its `derive` feature) them for your own plain-data types.
pub use bytemuck;
pub use device::{Device, DevicePtr, SyncEvent};
pub use element::{register_custom, Element, ElementKind, RegisterCustomError};
pub use errors::item_type_error_class;
#[cfg(feature = "float4")]
pub use float4::F4E2M1x2;
#[cfg(feature = "float8")]
pub use float8::{F8E4M3, F8E5M2};
pub use format::{ByteOrder, Custom, Field, Format, FormatError, FormatKind};
/// The element types of the machine-learning dtypes, from the crates that
/// define them (their arithmetic and conversions are theirs).
pub use half::{bf16, f16};
/// The raw bindings (`pyxbuf-sys`), for what this crate does not wrap.
pub use pyxbuf_sys as sys;
pub use transfer::{pinned_pool_trim, PinnedPoolStats, TransferConfig, TransferConfigError};

/// The version of the libpyxbuf compiled into this crate (`"0.1.0"`).
///
/// ```
/// assert_eq!(pyxbuf::library_version(), env!("CARGO_PKG_VERSION"));
/// ```
pub fn library_version() -> &'static str {
    // SAFETY: returns a static NUL-terminated ASCII string.
    let v = unsafe { std::ffi::CStr::from_ptr(sys::pyxbuf_version_string()) };
    v.to_str().unwrap_or("unknown")
}
