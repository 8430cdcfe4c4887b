//! What a producer granted ([`Grants`]) and which protocol answered ([`Path`]).

use std::fmt;

use pyxbuf_sys as sys;

/// The borrow grants a producer (or pyxbuf's cooperative registry) gave a
/// view, from its `ext_flags`.
///
/// - **shared**: nobody writes the memory while the view lives;
/// - **exclusive**: this view alone reads and writes it;
/// - **tracked**: the grant comes from pyxbuf's process-wide registry, not
///   the producer (NumPy, `bytearray`, DLPack tensors...): every pyxbuf
///   consumer in the process (all copies of the library) and rust-numpy
///   respect it, but code that bypasses pyxbuf does not, and the registry
///   cannot stop it. What a tracked grant **cannot stop**: a Python callback
///   you call while holding a slice writing `array[0] = 1`; and Python or C
///   code on *another thread* writing the memory at any moment — every
///   thread on free-threaded CPython, and on GIL builds C code that
///   released the GIL (a NumPy ufunc writing `out=`, as
///   `np.add(a, 1, out=a)` does). Staying attached (never calling
///   `py.detach`) does not prevent the second. A slice under a tracked grant
///   is sound only if no such write happens while you hold it; where you
///   cannot promise that, ask for
///   [`Request::require_enforced`](crate::Request::require_enforced) or copy.
///
/// A grant without `tracked` is enforced by the producer itself (pyxbuf's
/// exporters refuse every conflicting request, from any thread, until the
/// view is released): [`is_enforced`](Grants::is_enforced).
///
/// ```
/// use pyxbuf::Grants;
/// let g = Grants::from_bits(pyxbuf::sys::PYXBUF_EXT_SHARED | pyxbuf::sys::PYXBUF_EXT_TRACKED);
/// assert!(g.shared() && !g.exclusive() && g.tracked() && !g.is_enforced());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Grants(i32);

impl Grants {
    /// From `pyxbuf_view.ext_flags` alone, trusted as given.
    pub const fn from_bits(ext_flags: i32) -> Grants {
        Grants(ext_flags)
    }
    /// From a view's `flags` and `ext_flags`, as the proposal says a consumer
    /// must read them: a grant counts only when the request bit it answers is
    /// set in `flags` (exclusive needs `PYXBUF_BORROW_EXCLUSIVE`, shared either
    /// borrow bit). `pyxbuf_get` already refuses producers that break this;
    /// this is the check for views that came from elsewhere.
    ///
    /// ```
    /// use pyxbuf::{sys, Grants};
    /// let orphan = Grants::from_view(0, sys::PYXBUF_EXT_SHARED);
    /// assert!(!orphan.any());
    /// let g = Grants::from_view(sys::PYXBUF_BORROW_SHARED, sys::PYXBUF_EXT_EXCLUSIVE);
    /// assert!(!g.exclusive());
    /// let g = Grants::from_view(sys::PYXBUF_BORROW_EXCLUSIVE, sys::PYXBUF_EXT_EXCLUSIVE);
    /// assert!(g.exclusive());
    /// ```
    pub const fn from_view(flags: i32, ext_flags: i32) -> Grants {
        let mut backed = 0;
        if flags & (sys::PYXBUF_BORROW_SHARED | sys::PYXBUF_BORROW_EXCLUSIVE) != 0 {
            backed |= sys::PYXBUF_EXT_SHARED;
        }
        if flags & sys::PYXBUF_BORROW_EXCLUSIVE != 0 {
            backed |= sys::PYXBUF_EXT_EXCLUSIVE;
        }
        let grants = ext_flags & backed;
        if grants == 0 {
            return Grants(0);
        }
        Grants(grants | (ext_flags & sys::PYXBUF_EXT_TRACKED))
    }
    /// The raw `PYXBUF_EXT_*` bits.
    pub const fn bits(&self) -> i32 {
        self.0
    }
    /// Nobody writes while the view lives.
    pub const fn shared(&self) -> bool {
        self.0 & sys::PYXBUF_EXT_SHARED != 0
    }
    /// This view alone reads and writes.
    pub const fn exclusive(&self) -> bool {
        self.0 & sys::PYXBUF_EXT_EXCLUSIVE != 0
    }
    /// Granted by pyxbuf's cooperative registry rather than the producer.
    pub const fn tracked(&self) -> bool {
        self.0 & sys::PYXBUF_EXT_TRACKED != 0
    }
    /// Some borrow (shared or exclusive) was granted.
    pub const fn any(&self) -> bool {
        self.shared() || self.exclusive()
    }
    /// A borrow was granted and the producer itself enforces it.
    pub const fn is_enforced(&self) -> bool {
        self.any() && !self.tracked()
    }
}

impl fmt::Debug for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grants")
            .field("shared", &self.shared())
            .field("exclusive", &self.exclusive())
            .field("tracked", &self.tracked())
            .finish()
    }
}

/// Which protocol produced a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Path {
    /// The object's own extended buffer (e.g. pyxbuf's exporters).
    Native,
    /// The DLPack C exchange API.
    DlpackC,
    /// A `__dlpack__` capsule.
    Dlpack,
    /// `__cuda_array_interface__`.
    CudaArrayInterface,
    /// The classic buffer protocol.
    Classic,
    /// NumPy's `__array_interface__` (ml_dtypes arrays).
    ArrayInterface,
    /// A NumPy array's struct, read directly: the view NumPy's classic
    /// buffer would give, without its export (exact `numpy.ndarray`s of
    /// built-in numeric dtypes).
    Numpy,
    /// A path this version of the crate does not know.
    Other(i32),
}

impl Path {
    pub(super) fn from_raw(path: i32) -> Path {
        match path {
            sys::PYXBUF_PATH_NATIVE => Path::Native,
            sys::PYXBUF_PATH_DLPACK_C => Path::DlpackC,
            sys::PYXBUF_PATH_DLPACK => Path::Dlpack,
            sys::PYXBUF_PATH_CAI => Path::CudaArrayInterface,
            sys::PYXBUF_PATH_CLASSIC => Path::Classic,
            sys::PYXBUF_PATH_ARRAY_INTERFACE => Path::ArrayInterface,
            sys::PYXBUF_PATH_NUMPY => Path::Numpy,
            other => Path::Other(other),
        }
    }
}
