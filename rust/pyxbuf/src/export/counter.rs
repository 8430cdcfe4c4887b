//! [`BorrowCounter`], an exporter's live views and borrows, which decides
//! every request, and [`OwnerBorrow`], the owner's own borrow of its memory
//! under the same rules.

use crate::words::count;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyxbuf_sys as sys;

/// Live views and borrows of an exporter (`pyxbuf_borrow_counter` behind a
/// lock, so the class stays `Sync`).
///
/// pyxbuf's rules: an exclusive borrow only when no other view is live; a
/// shared borrow only when no exclusive borrow and no writable view is live;
/// plain requests refused while an exclusive borrow is live, and handed out
/// read-only while a shared borrow is.
#[derive(Debug, Default)]
pub struct BorrowCounter(Mutex<sys::pyxbuf_borrow_counter>);

impl BorrowCounter {
    /// No views.
    pub const fn new() -> BorrowCounter {
        BorrowCounter(Mutex::new(sys::pyxbuf_borrow_counter {
            views: 0,
            writable: 0,
            shared: 0,
            exclusive: 0,
        }))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, sys::pyxbuf_borrow_counter> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A snapshot: live views, writable views, shared and exclusive borrows.
    pub fn counts(&self) -> sys::pyxbuf_borrow_counter {
        *self.lock()
    }

    /// Live views of any kind.
    pub fn views(&self) -> i64 {
        self.lock().views
    }

    /// `BufferError` while any view is live (like `bytearray`'s "Existing
    /// exports of data: object cannot be re-sized").
    ///
    /// Only a check: a view may be taken right after it answers (by Python
    /// code the act runs, or another thread), so to *act* on the answer --
    /// reallocate, resize, reshape or write exported memory -- hold
    /// [`exclusive_guard`](BorrowCounter::exclusive_guard) across the act
    /// instead.
    pub fn ensure_no_views(&self, what: &str) -> PyResult<()> {
        let c = self.counts();
        if c.views == 0 {
            return Ok(());
        }
        Err(no_views_error(what, &c))
    }

    /// Borrow the memory as its owner, exclusively, for as long as the
    /// guard lives: `BufferError` while any view is live (the message names
    /// `what` and the live views), and while the guard lives every request
    /// is refused -- so the check holds across what the owner then does
    /// (reallocate, resize, reshape, write). The guard counts as one view
    /// with an exclusive borrow ([`views`](BorrowCounter::views) says 1).
    ///
    /// ```
    /// use pyxbuf::export::BorrowCounter;
    /// let counter = BorrowCounter::new();
    /// {
    ///     let _guard = counter.exclusive_guard("resize the array").unwrap();
    ///     // ... reallocate: no consumer can acquire a view meanwhile.
    ///     assert_eq!(counter.views(), 1);
    /// }
    /// assert_eq!(counter.views(), 0);
    /// ```
    pub fn exclusive_guard(&self, what: &str) -> PyResult<OwnerBorrow<'_>> {
        self.owner_borrow(true, what)
    }

    /// Borrow the memory as its owner, shared, for as long as the guard
    /// lives: `BufferError` while a writable view or an exclusive borrow is
    /// live; while the guard lives, writable and exclusive requests are
    /// refused and shared ones granted -- so the owner may read the memory
    /// knowing nobody writes it.
    pub fn shared_guard(&self, what: &str) -> PyResult<OwnerBorrow<'_>> {
        self.owner_borrow(false, what)
    }

    fn owner_borrow(&self, exclusive: bool, what: &str) -> PyResult<OwnerBorrow<'_>> {
        let mut c = self.lock();
        // The owner is one more borrower, under the consumers' rules: reading
        // is a shared borrow (no exclusive borrow, no writable view), writing
        // an exclusive one (no other view at all).
        let conflict = if exclusive {
            c.views > 0
        } else {
            c.exclusive > 0 || c.writable > 0
        };
        if conflict {
            let counts = *c;
            // Format the error without the lock: it can run Python (a
            // finalizer releasing another view takes the lock).
            drop(c);
            return Err(if exclusive {
                no_views_error(what, &counts)
            } else {
                PyBufferError::new_err(format!(
                    "pyxbuf: cannot {what}: a writable view or an exclusive borrow of the memory \
                     is live ({}, {} writable, {}); release it first",
                    count(counts.views as u64, "view", "views"),
                    counts.writable,
                    count(
                        counts.exclusive as u64,
                        "exclusive borrow",
                        "exclusive borrows"
                    )
                ))
            });
        }
        c.views += 1;
        if exclusive {
            c.exclusive += 1;
        } else {
            c.shared += 1;
        }
        Ok(OwnerBorrow {
            counter: self,
            exclusive,
        })
    }
}

fn no_views_error(what: &str, c: &sys::pyxbuf_borrow_counter) -> PyErr {
    let live = if c.views == 1 { "is" } else { "are" };
    PyBufferError::new_err(format!(
        "pyxbuf: cannot {what}: {} of the memory {live} live ({} shared, {}); release \
         them first",
        count(c.views as u64, "view", "views"),
        c.shared,
        count(c.exclusive as u64, "exclusive borrow", "exclusive borrows")
    ))
}

/// The owner's borrow of its exported memory, from
/// [`BorrowCounter::exclusive_guard`] or [`BorrowCounter::shared_guard`]:
/// counted as a view with a borrow until dropped, so consumers' requests
/// are decided as if a consumer held it.
#[must_use = "the borrow ends when the guard is dropped"]
#[derive(Debug)]
pub struct OwnerBorrow<'a> {
    counter: &'a BorrowCounter,
    exclusive: bool,
}

impl OwnerBorrow<'_> {
    /// Whether this is an exclusive borrow (else shared).
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }
}

impl Drop for OwnerBorrow<'_> {
    fn drop(&mut self) {
        let mut c = self.counter.lock();
        c.views -= 1;
        if self.exclusive {
            c.exclusive -= 1;
        } else {
            c.shared -= 1;
        }
    }
}
