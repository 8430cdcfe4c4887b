//! Where an acquired view lives: a [`ViewSlot`], storage that never moves
//! while the view is held, taken from a small per-thread stock of spare
//! slots and returned to it on release.
//!
//! Why not inline in the buffer: producers point a view's `shape` and
//! `strides` into the view itself (CPython's `PyBuffer_FillInfo` at its own
//! `len`/`itemsize`, pyxbuf's bridges at `inline_dims`), and the view's
//! address escapes to C, so the compiler must keep every copy of a ~370-byte
//! value moved through `Result`s and returns: twelve `memcpy` calls per
//! acquisition and drop of a `#[pyfunction]` argument, more than the rest of
//! the Rust layer together (bench/analysis.md). A slot is one pointer to move,
//! needs no rebasing of interior pointers, and in the steady state costs no
//! allocation: a thread reuses the slots its last buffers released.

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

/// A thread's spare slots. Dropped at thread exit, freeing them.
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

thread_local! {
    static STOCK: Spares = const {
        Spares {
            count: Cell::new(0),
            slots: [const { Cell::new(None) }; SPARES],
        }
    };
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
    /// A slot from this thread's spares, or a fresh one.
    #[inline]
    pub(super) fn take() -> Self {
        let spare = STOCK
            .try_with(|s| {
                let n = s.count.get();
                if n == 0 {
                    return None;
                }
                s.count.set(n - 1);
                s.slots[n - 1].take()
            })
            .ok()
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
    /// Back to this thread's spares (freed when they are full, or when the
    /// thread's stock is already gone at thread exit). The view in it must
    /// have been released by its owner first.
    #[inline]
    fn drop(&mut self) {
        let p = self.0;
        let kept = STOCK
            .try_with(|s| {
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
