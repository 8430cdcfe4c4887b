//! Where an acquired view lives: a [`ViewSlot`], storage that never moves
//! while the view is held, taken from a small stock of spare slots and
//! returned to it on release.
//!
//! Why not inline in the buffer: producers point a view's `shape` and
//! `strides` into the view itself (CPython's `PyBuffer_FillInfo` at its own
//! `len`/`itemsize`, pyxbuf's bridges at `inline_dims`), and the view's
//! address escapes to C, so the compiler must keep every copy of a ~370-byte
//! value moved through `Result`s and returns: twelve `memcpy` calls per
//! acquisition and drop of a `#[pyfunction]` argument, more than the rest of
//! the Rust layer together (bench/analysis.md). A slot is one pointer to move,
//! needs no rebasing of interior pointers, and in the steady state costs no
//! allocation: the last buffers' slots are reused.
//!
//! Where the stock lives: with the GIL, one stock for the process, which the
//! GIL guards; under free-threaded CPython (`Py_GIL_DISABLED`), one per
//! thread. A thread-local costs a `__tls_get_addr` call in an extension
//! module (a shared library) on every take and return: about 11
//! instructions each and a dependent load chain, a third of what separated
//! `PyXBuffer<f32>` from PyO3's `PyBuffer<f32>` on a memoryview in wall clock
//! (bench/analysis.md).

use std::cell::Cell;
use std::ptr::NonNull;

use pyxbuf_sys as sys;

/// The acquired C view and what the Rust layer derives from it once.
pub(super) struct Slot {
    pub(super) view: sys::pyxbuf_view,
    /// C-order strides when the producer gave none (ctypes does that).
    pub(super) fallback_strides: [sys::Py_ssize_t; sys::PYXBUF_INLINE_NDIM],
}

/// Spare slots per thread: enough for the buffers one call takes.
const SPARES: usize = 4;

/// Spare slots. A thread's stock (free-threaded builds) is dropped at thread
/// exit, freeing them; the process's stock (GIL builds) lives until exit.
struct Spares {
    count: Cell<usize>,
    slots: [Cell<Option<NonNull<Slot>>>; SPARES],
}

impl Drop for Spares {
    fn drop(&mut self) {
        for s in &self.slots {
            if let Some(p) = s.take() {
                // SAFETY: every spare came from Box::into_raw (alloc_fresh)
                // and is owned by this stock alone.
                drop(unsafe { Box::from_raw(p.as_ptr()) });
            }
        }
    }
}

const fn empty_stock() -> Spares {
    Spares {
        count: Cell::new(0),
        slots: [const { Cell::new(None) }; SPARES],
    }
}

/// The process's stock, guarded by the GIL.
#[cfg(not(Py_GIL_DISABLED))]
struct GilGuarded(Spares);

// SAFETY: the stock is touched only by `with_stock`, which only
// `ViewSlot::take` and `ViewSlot::drop` call, and both run on a thread
// attached to the interpreter: `take` from `PyXUntypedBuffer::acquire`,
// which holds a `Python<'py>`; a slot is dropped by the buffer that owns it,
// which is either `!Send` and bound to its `Python<'py>` (PyXUntypedBuffer,
// PyXBuffer) or attaches first (`PyXBufferOwned::drop` inside
// `Python::try_attach`, leaking the slot when it cannot). In a build with
// the GIL one thread is attached at a time, so the GIL orders every access,
// as a mutex would. Sub-interpreters do not change that: PyO3 0.30 imports a
// top-level `#[pymodule]` into a legacy sub-interpreter, which shares the main
// GIL; an interpreter with its own GIL -- the one way two threads of a GIL
// build run Python at once -- refuses the module, which does not declare
// `Py_MOD_PER_INTERPRETER_GIL_SUPPORTED` (CPython's default for a module
// without the `Py_mod_multiple_interpreters` slot).
#[cfg(not(Py_GIL_DISABLED))]
unsafe impl Sync for GilGuarded {}

#[cfg(not(Py_GIL_DISABLED))]
static STOCK: GilGuarded = GilGuarded(empty_stock());

/// `f` on this thread's view of the stock; `None` when there is none (a
/// thread's stock already dropped at its exit).
#[cfg(not(Py_GIL_DISABLED))]
#[inline(always)]
fn with_stock<R>(f: impl FnOnce(&Spares) -> R) -> Option<R> {
    Some(f(&STOCK.0))
}

#[cfg(Py_GIL_DISABLED)]
thread_local! {
    static STOCK: Spares = const { empty_stock() };
}

#[cfg(Py_GIL_DISABLED)]
#[inline(always)]
fn with_stock<R>(f: impl FnOnce(&Spares) -> R) -> Option<R> {
    STOCK.try_with(f).ok()
}

/// An owned slot: the unique owner of a `Slot` allocation, whose contents
/// are always initialised (zeroed when first allocated, a released view's
/// leftovers when reused: plain integers and pointers either way).
pub(super) struct ViewSlot(NonNull<Slot>);

// SAFETY: a ViewSlot is a uniquely owned heap allocation of plain data,
// like a Box<Slot>; what may be done with the view inside is decided by the
// buffer that holds it (PyXBuffer is !Send through its Python<'py>;
// PyXBufferOwned states its own contract).
unsafe impl Send for ViewSlot {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for ViewSlot {}

#[cold]
#[inline(never)]
fn alloc_fresh() -> NonNull<Slot> {
    // SAFETY: Slot is plain integers and pointers, for which all-zero bytes
    // are valid values.
    let b: Box<Slot> = Box::new(unsafe { std::mem::zeroed() });
    NonNull::from(Box::leak(b))
}

impl ViewSlot {
    /// A slot from the spares, or a fresh one. Only on an attached thread
    /// (see `GilGuarded`).
    #[inline]
    pub(super) fn take() -> Self {
        let spare = with_stock(|s| {
            let n = s.count.get();
            if n == 0 {
                return None;
            }
            s.count.set(n - 1);
            s.slots[n - 1].take()
        })
        .flatten();
        ViewSlot(spare.unwrap_or_else(alloc_fresh))
    }

    /// The C view's address: stable until this slot is dropped.
    #[inline]
    pub(super) fn view_ptr(&self) -> *mut sys::pyxbuf_view {
        // SAFETY: self.0 points to a live Slot (unique owner).
        unsafe { std::ptr::addr_of_mut!((*self.0.as_ptr()).view) }
    }

    #[inline]
    pub(super) fn get(&self) -> &Slot {
        // SAFETY: unique owner of a live, initialised Slot; the borrow of
        // self bounds the reference.
        unsafe { self.0.as_ref() }
    }

    #[inline]
    pub(super) fn get_mut(&mut self) -> &mut Slot {
        // SAFETY: as `get`, and `&mut self` makes the access unique.
        unsafe { self.0.as_mut() }
    }
}

impl Drop for ViewSlot {
    /// Back to the spares (freed when they are full, or when a thread's
    /// stock is already gone at its exit). The view in it must have been
    /// released by its owner first, on an attached thread (see `GilGuarded`).
    #[inline]
    fn drop(&mut self) {
        let p = self.0;
        let kept = with_stock(|s| {
            let n = s.count.get();
            if n == SPARES {
                return false;
            }
            s.slots[n].set(Some(p));
            s.count.set(n + 1);
            true
        })
        .unwrap_or(false);
        if !kept {
            // SAFETY: p came from Box (alloc_fresh) and nobody else owns it.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}
