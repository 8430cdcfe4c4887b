//! [`PyXBufferOwned`]: an acquired buffer that is `Send` and `Sync` (for
//! `Send + Sync` items) and needs no `Python<'py>` to be held, so it can
//! live in a `#[pyclass]` or cross threads; [`bind`](PyXBufferOwned::bind) lends it back as a
//! [`PyXBuffer<'py, T, M>`] for an attached thread.

use std::fmt;
use std::mem::{self, ManuallyDrop};

use pyo3::prelude::*;

use super::request::{BorrowMode, Shared};
use super::PyXBuffer;
use crate::element::Element;

/// An owned view, like PyO3's `PyBuffer<T>`: keep it as long as you like,
/// anywhere; reach its items through [`bind`](Self::bind) (or
/// [`bind_mut`](Self::bind_mut)) with a `Python<'py>`, and drop it from any
/// thread (dropping attaches to the interpreter to release the view).
///
/// Where no thread can attach -- the interpreter is finalizing or gone (a
/// handle dropped on a Rust thread during shutdown, or from a `Py_AtExit`
/// function), or the thread is inside a garbage collector's traversal --
/// dropping does not release the view: it is leaked (its producer stays
/// borrowed and referenced, which no longer matters once the interpreter is
/// going away), as PyO3's own `PyBuffer` does; `Debug` then prints
/// `<interpreter unavailable>` for the view. Neither panics.
///
/// It is `Send` and `Sync` when `T` is both: whichever thread binds it gets
/// `&T` (and, under an exclusive borrow, `&mut T`) to memory the producer's
/// thread holds too, as an `Arc<T>` shares its value.
///
/// ```
/// use pyo3::prelude::*;
/// use pyxbuf::{PyXBuffer, PyXBufferOwned};
///
/// #[pyclass]
/// struct Kept {
///     data: PyXBufferOwned<f64>,
/// }
///
/// Python::attach(|py| -> PyResult<()> {
///     let array = py.import("array")?.getattr("array")?.call1(("d", vec![1.0, 2.0]))?;
///     let kept = Kept { data: PyXBuffer::<f64>::get(&array)?.into_owned() };
///     // ... later, on any attached thread:
///     assert_eq!(kept.data.bind(py).as_slice(), Some(&[1.0, 2.0][..]));
///     // the shared borrow is held meanwhile: nobody may write `array`
///     assert!(PyXBuffer::<f64>::request().borrow_exclusive().get(&array).is_err());
///     Ok(())
/// })
/// .unwrap();
/// ```
pub struct PyXBufferOwned<T: Element, M: BorrowMode = Shared> {
    /// The buffer with its token's lifetime erased: the token is a
    /// zero-sized marker, never used except through `bind`, which shortens
    /// it to the caller's proof of attachment.
    inner: ManuallyDrop<PyXBuffer<'static, T, M>>,
}

// SAFETY: every use of the view goes through `bind`/`bind_mut`, which need a
// `Python<'py>` (an attached thread), or through Drop, which attaches first
// (or leaks the view); the view keeps its producer alive by a strong
// reference, and CPython lets any attached thread release a buffer. The view
// holds no thread-local state. The items are reached from the receiving
// thread as `&T` / `&mut T` while other threads may hold the same memory
// (the producer's, another handle's shared borrow), so T: Send + Sync, as
// for HostArray and Arc<T>.
unsafe impl<T: Element + Send + Sync, M: BorrowMode> Send for PyXBufferOwned<T, M> {}
// SAFETY: shared access only lends `&PyXBuffer` to attached threads, whose
// methods read the view; writing needs `&mut self` (`bind_mut`). Several
// threads then hold `&T` to the same items: T: Sync (and Send, as above).
unsafe impl<T: Element + Send + Sync, M: BorrowMode> Sync for PyXBufferOwned<T, M> {}

impl<'py, T: Element, M: BorrowMode> PyXBuffer<'py, T, M> {
    /// This buffer as an owned, `Send + Sync` handle (see
    /// [`PyXBufferOwned`]); the view and its grants are kept.
    pub fn into_owned(self) -> PyXBufferOwned<T, M> {
        // SAFETY: only the lifetime of the zero-sized Python token changes;
        // the handle never uses it without a caller's Python<'py> (above).
        let inner =
            unsafe { mem::transmute::<PyXBuffer<'py, T, M>, PyXBuffer<'static, T, M>>(self) };
        PyXBufferOwned {
            inner: ManuallyDrop::new(inner),
        }
    }
}

impl<T: Element, M: BorrowMode> PyXBufferOwned<T, M> {
    /// The buffer, for a thread attached to the interpreter.
    pub fn bind<'py>(&self, _py: Python<'py>) -> &PyXBuffer<'py, T, M> {
        // A shorter token lifetime: plain subtyping.
        &self.inner
    }

    /// The buffer for writing (`as_mut_slice` on an `Exclusive` one).
    pub fn bind_mut<'py>(&mut self, _py: Python<'py>) -> &mut PyXBuffer<'py, T, M> {
        // SAFETY: the two types differ only in the lifetime of a zero-sized
        // token; the caller holds a Python<'py>, and whatever is stored back
        // through the reference is released by Drop, which attaches.
        unsafe {
            &mut *(std::ptr::from_mut::<PyXBuffer<'static, T, M>>(&mut self.inner)
                .cast::<PyXBuffer<'py, T, M>>())
        }
    }

    /// Back to a borrowed buffer on an attached thread.
    pub fn into_bound(self, _py: Python<'_>) -> PyXBuffer<'_, T, M> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: taken once, and `this` is never dropped (ManuallyDrop).
        let inner = unsafe { ManuallyDrop::take(&mut this.inner) };
        // SAFETY: the token's lifetime shrinks to the caller's attachment.
        unsafe { mem::transmute::<PyXBuffer<'static, T, M>, PyXBuffer<'_, T, M>>(inner) }
    }
}

impl<T: Element, M: BorrowMode> Drop for PyXBufferOwned<T, M> {
    fn drop(&mut self) {
        // Releasing calls the producer: attach first (this may be any
        // thread). Where no thread can attach (the interpreter finalizing or
        // finalized, a GC traversal) `try_attach` declines instead of
        // panicking, and the view is leaked: `inner` is never dropped, so
        // neither the release nor the slot's free runs.
        let _released = Python::try_attach(|_py| {
            // SAFETY: dropped once, here, while attached.
            unsafe { ManuallyDrop::drop(&mut self.inner) }
        });
    }
}

impl<T: Element, M: BorrowMode> fmt::Debug for PyXBufferOwned<T, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Python::try_attach(|py| self.bind(py).inner.debug_as("PyXBufferOwned", f)).unwrap_or_else(
            || {
                f.debug_struct("PyXBufferOwned")
                    .field("view", &format_args!("<interpreter unavailable>"))
                    .finish()
            },
        )
    }
}
