//! How copies between pageable host memory and a device are made.
//!
//! A copy of pageable memory (a `Vec`, a NumPy array) at or above
//! [`TransferConfig::threshold`] goes through page-locked staging buffers
//! that [`TransferConfig::threads`] host threads fill (or drain) while the
//! device copies the previous chunk (a copy shorter than four chunks goes in
//! pieces of 2 MiB or more, so it overlaps too); one from 64 KiB up to the
//! threshold is filled by the calling thread (and from 512 KiB three fill
//! threads); results of
//! [`PyXBuffer::to_device`](crate::PyXBuffer::to_device) to the host of
//! 64 KiB and more live in pooled page-locked memory. On an H200 host that
//! moved a NumPy array to the device at 43-48 GB/s against 7 for the
//! driver's own pageable copy, and a device array into new host memory at
//! 55 GB/s against 1.4 (`bench/results/2026-11-27-h200-staging.md`). Only
//! idle pooled memory is used: a copy that finds none goes without (directly,
//! or into pageable memory) while the pool grows in the background for the
//! copies after it ([`PinnedPoolStats::background_allocations`]). Backends
//! without page-locked memory (and copies under 64 KiB) use the direct call.
//!
//! pyxbuf's own device memory (the results of
//! [`PyXBuffer::to_device`](crate::PyXBuffer::to_device) on a device, device
//! exporters) comes from the backend's stream-ordered pool (CUDA's
//! `cuMemAllocAsync` where the device has memory pools): allocated on the
//! request's stream and freed in its order when the exporter dies, after
//! every other stream a view of it was handed to, with no device-wide
//! synchronisation. [`TransferConfig::device_pool`] turns it off;
//! [`TransferConfig::device_pool_release_threshold`] is what a pool keeps
//! cached across a synchronisation.
//!
//! The configuration starts from the environment (`PYXBUF_STAGING=0` turns
//! staging off; `PYXBUF_STAGING_THRESHOLD`, `PYXBUF_STAGING_CHUNK`,
//! `PYXBUF_PINNED_POOL_CAP` in bytes with K/M/G suffixes;
//! `PYXBUF_STAGING_THREADS`). It is the process's: every copy of libpyxbuf
//! (each extension module links its own) uses the one transfer engine the
//! first copy that needed it published -- one configuration, one pinned pool,
//! one set of fill threads (pyxbuf.h, "one transfer engine").
//!
//! ```
//! use pyxbuf::TransferConfig;
//! let before = TransferConfig::current();
//! TransferConfig { threads: 4, ..before }.apply().unwrap();
//! assert_eq!(TransferConfig::current().threads, 4);
//! let err = TransferConfig { buffers: 1, ..before }.apply().unwrap_err();
//! assert!(err.to_string().contains("buffers is 1; it must be 2..16"));
//! before.apply().unwrap();
//! ```

use std::fmt;

use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

use pyxbuf_sys as sys;

/// The staging configuration (`pyxbuf_transfer_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferConfig {
    /// `false`: every copy is the backend's direct call.
    pub enabled: bool,
    /// Host threads that fill or drain one chunk, 1..=64 (default: the
    /// cores, at most 16).
    pub threads: u32,
    /// Staging buffers in flight per copy, 2..=16 (default 4).
    pub buffers: u32,
    /// Copies from this many bytes up are filled and drained by `threads`
    /// threads; smaller ones (from 64 KiB) by the calling thread and, from
    /// 512 KiB, three fill threads (default 2 MiB).
    pub threshold: u64,
    /// Bytes per staging buffer, at least 64 KiB (default 16 MiB).
    pub chunk: u64,
    /// Bytes of page-locked memory the pool may hold (default 1/16 of RAM,
    /// 256 MiB to 16 GiB); at least `chunk * buffers` while enabled.
    pub pool_cap: u64,
    /// `false`: every device allocation is the backend's own `alloc`/`free`
    /// (`cuMemAlloc`, `cuMemFree`) instead of its stream-ordered pool
    /// (default `true`).
    pub device_pool: bool,
    /// `true`: pyxbuf's device memory comes from pools other processes can
    /// open (`pyxbuf.multiprocessing`; on CUDA a pool of pyxbuf's own, with
    /// POSIX file-descriptor handles, instead of the device's default pool,
    /// which cannot be shared). CUDA gives such a pool's memory back only at
    /// exit: the release threshold and trimming do nothing there, which is
    /// why it is off by default.
    pub device_pool_shareable: bool,
    /// Bytes a device's pool keeps cached across a stream or event
    /// synchronisation; more goes back to the device then. 0 means the
    /// default (`PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD_DEFAULT`, 256 MiB);
    /// at most 2^63 - 1.
    pub device_pool_release_threshold: u64,
}

/// A configuration [`TransferConfig::apply`] refused: the message names the
/// field, its value and the range it must be in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferConfigError(String);

impl fmt::Display for TransferConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TransferConfigError {}

impl From<TransferConfigError> for PyErr {
    fn from(e: TransferConfigError) -> PyErr {
        PyValueError::new_err(e.0)
    }
}

impl TransferConfig {
    /// The configuration in force (the environment applied on first use).
    pub fn current() -> TransferConfig {
        let mut c = sys::pyxbuf_transfer_config {
            size: std::mem::size_of::<sys::pyxbuf_transfer_config>() as u32,
            ..Default::default()
        };
        // SAFETY: `c` is a writable config whose `size` says how much to fill;
        // the call takes no Python state.
        unsafe { sys::pyxbuf_transfer_config_get(&mut c) };
        TransferConfig {
            enabled: c.enabled != 0,
            threads: c.threads as u32,
            buffers: c.buffers as u32,
            threshold: c.threshold,
            chunk: c.chunk,
            pool_cap: c.pool_cap,
            device_pool: c.device_pool_off == 0,
            device_pool_shareable: c.device_pool_shareable != 0,
            device_pool_release_threshold: c.device_pool_release_threshold,
        }
    }

    /// Whether the configuration in force is valid: an error naming the
    /// environment variable (`PYXBUF_STAGING_CHUNK`, ...) that set a value
    /// out of range or malformed. Until [`apply`](Self::apply) replaces it,
    /// every copy fails with the same message; [`current`](Self::current)
    /// then reports the defaults.
    pub fn check() -> Result<(), TransferConfigError> {
        let mut err = sys::pyxbuf_error::default();
        // SAFETY: `err` is a writable error for the call; no Python state is used.
        if unsafe { sys::pyxbuf_transfer_config_check(&mut err) } == 0 {
            return Ok(());
        }
        // SAFETY: the C side wrote a NUL-terminated message into the buffer.
        let msg = unsafe { std::ffi::CStr::from_ptr(err.message.as_ptr()) };
        Err(TransferConfigError(msg.to_string_lossy().into_owned()))
    }

    /// Make this the configuration for every later copy (every field in
    /// range, checked by the C side: `chunk` 64 KiB..1 GiB, `pool_cap` at most
    /// the machine's memory and at least `chunk * buffers`, `threshold` and
    /// `device_pool_release_threshold` below 2^63).
    pub fn apply(&self) -> Result<(), TransferConfigError> {
        let field = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        let c = sys::pyxbuf_transfer_config {
            size: std::mem::size_of::<sys::pyxbuf_transfer_config>() as u32,
            enabled: i32::from(self.enabled),
            threads: field(self.threads),
            buffers: field(self.buffers),
            threshold: self.threshold,
            chunk: self.chunk,
            pool_cap: self.pool_cap,
            device_pool_off: i32::from(!self.device_pool),
            device_pool_shareable: i32::from(self.device_pool_shareable),
            device_pool_release_threshold: self.device_pool_release_threshold,
            ..Default::default()
        };
        let mut err = sys::pyxbuf_error::default();
        // SAFETY: both pointers are valid for the call; no Python state is used.
        let rc = unsafe { sys::pyxbuf_transfer_config_set(&c, &mut err) };
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: the C side wrote a NUL-terminated message into the buffer.
        let msg = unsafe { std::ffi::CStr::from_ptr(err.message.as_ptr()) };
        // In this binding's terms: the C entry point's name is not the caller's.
        let msg = msg.to_string_lossy().replacen(
            "pyxbuf_transfer_config_set:",
            "TransferConfig::apply:",
            1,
        );
        Err(TransferConfigError(msg))
    }
}

/// What the page-locked pool holds (`pyxbuf_pinned_pool_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinnedPoolStats {
    /// Bytes of page-locked memory held, idle or in use.
    pub held_bytes: u64,
    /// Bytes handed out now (staging buffers in a copy, host results alive).
    pub used_bytes: u64,
    /// Blocks allocated since the start.
    pub allocations: u64,
    /// Blocks handed out again since the start.
    pub reuses: u64,
    /// Host threads started to fill and drain staging buffers. The pool and
    /// the threads are the process's: every extension that links pyxbuf in
    /// one process shares them (and the configuration and device backends).
    pub fill_threads: u64,
    /// Of `allocations`, those made in the background: a copy that finds no
    /// idle block goes without one and asks the pool to grow for the next.
    pub background_allocations: u64,
    /// Requests to grow the pool not yet served.
    pub background_pending: u64,
}

impl PinnedPoolStats {
    /// The pool's state now.
    pub fn current() -> PinnedPoolStats {
        let mut s = sys::pyxbuf_pinned_pool_stats::default();
        // SAFETY: `s` is writable; the call takes no Python state.
        unsafe { sys::pyxbuf_pinned_pool_stats_get(&mut s) };
        PinnedPoolStats {
            held_bytes: s.held_bytes,
            used_bytes: s.used_bytes,
            allocations: s.allocations,
            reuses: s.reuses,
            fill_threads: s.fill_threads,
            background_allocations: s.background_allocations,
            background_pending: s.background_pending,
        }
    }
}

/// Free every idle block of the page-locked pool now (blocks in use go back
/// to the pool when their copy or host result is done).
pub fn pinned_pool_trim() {
    // SAFETY: no arguments; the pool has its own lock.
    unsafe { sys::pyxbuf_pinned_pool_trim() }
}
