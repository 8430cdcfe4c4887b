//! The soundness items of issue 11, each against a producer that breaks the
//! rule on purpose: a view pyxbuf must refuse, or an API that must not let
//! safe code alias memory. (The type-level ones are in tests/compile_fail.)

mod common;

use std::os::raw::c_int;
use std::ptr;

use common::run;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyxbuf::export::{self, BorrowCounter, ExportBuffer, ExportDesc, HostArray};
use pyxbuf::{Exclusive, PyXBuffer};

/// How [`Broken`] fills its classic view.
#[derive(Clone, Copy, PartialEq)]
enum Lie {
    /// `len` one byte short of `shape * itemsize`.
    ShortLen,
    /// Suboffsets (all -1) though nobody asked for PyBUF_INDIRECT.
    Suboffsets,
    /// Honest, with suboffsets, when asked for them (PyBUF_INDIRECT).
    IndirectWhenAsked,
}

/// A classic producer (no supported-flags declaration) that fills its
/// `Py_buffer` by hand: 4 `u32` items.
#[pyclass]
struct Broken {
    lie: Lie,
    data: [u32; 4],
    shape: [ffi::Py_ssize_t; 1],
    strides: [ffi::Py_ssize_t; 1],
    suboffsets: [ffi::Py_ssize_t; 1],
}

#[pymethods]
impl Broken {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let mut this = slf.borrow_mut();
        let indirect = flags & (ffi::PyBUF_INDIRECT & !ffi::PyBUF_STRIDES) != 0;
        let lie = this.lie;
        let len = if lie == Lie::ShortLen { 15 } else { 16 };
        let suboffsets = match lie {
            Lie::Suboffsets => this.suboffsets.as_mut_ptr(),
            Lie::IndirectWhenAsked if indirect => this.suboffsets.as_mut_ptr(),
            _ => ptr::null_mut(),
        };
        // SAFETY: bf_getbuffer's view; every pointer points into `this`,
        // which the view keeps alive through `obj` and which nothing moves
        // (a pyclass lives in its Python object).
        unsafe {
            (*view).obj = slf.clone().into_any().into_ptr();
            (*view).buf = this.data.as_mut_ptr().cast();
            (*view).len = len;
            (*view).itemsize = 4;
            (*view).readonly = 1;
            (*view).ndim = 1;
            (*view).format = c"I".as_ptr().cast_mut();
            (*view).shape = this.shape.as_mut_ptr();
            (*view).strides = this.strides.as_mut_ptr();
            (*view).suboffsets = suboffsets;
            (*view).internal = ptr::null_mut();
        }
        Ok(())
    }
}

fn broken(py: Python<'_>, lie: Lie) -> Bound<'_, Broken> {
    let b = Broken {
        lie,
        data: [1, 2, 3, 4],
        shape: [4],
        strides: [4],
        suboffsets: [-1],
    };
    Bound::new(py, b).unwrap()
}

/// Item 5: `item_count * size_of::<T>() == len` is checked at acquisition on
/// every path, not only the native one.
#[test]
fn classic_view_whose_len_disagrees_is_refused() {
    Python::attach(|py| {
        let obj = broken(py, Lie::ShortLen);
        let err = PyXBuffer::<u32>::get(&obj).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("len is 15 bytes") && msg.contains("needs 16"),
            "{msg}"
        );
    });
}

/// Item 5: suboffsets nobody asked for are refused; asked for with
/// `indirect()`, they are kept, reported, and followed by `get_ptr`.
#[test]
fn suboffsets_only_when_requested() {
    Python::attach(|py| {
        let obj = broken(py, Lie::Suboffsets);
        let err = PyXBuffer::<u32>::get(&obj).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        assert!(err.to_string().contains("suboffsets"), "{err}");

        let obj = broken(py, Lie::IndirectWhenAsked);
        let plain = PyXBuffer::<u32>::get(&obj).unwrap();
        assert_eq!(plain.suboffsets(), None);
        assert_eq!(plain.as_slice(), Some(&[1, 2, 3, 4][..]));
        drop(plain);
        let buf = PyXBuffer::<u32>::request().indirect().get(&obj).unwrap();
        assert_eq!(buf.suboffsets(), Some(&[-1isize][..]));
        // suboffset -1: no pointer to follow; the item is in place
        assert_eq!(buf.get_ptr(&[2]), buf.buf_ptr().wrapping_byte_add(8));
        // no plain slice over indirect memory
        assert!(buf.as_slice().is_none() && buf.as_cells().is_none());
    });
}

/// A native producer that answers an exclusive request with the weaker
/// shared grant (allowed by the protocol). It forwards by hand, not through
/// `export_pymethods!`, because it changes the view `getbuffer` filled.
#[pyclass(frozen)]
struct WeakGrants {
    data: HostArray<u8>,
}

#[pymethods]
impl WeakGrants {
    #[classattr]
    #[allow(non_upper_case_globals)]
    const __pyxbuf_supported_flags__: i32 = export::SUPPORTED_FLAGS;

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        // SAFETY: bf_getbuffer's arguments.
        unsafe { export::getbuffer(&slf, view, flags) }?;
        if flags & pyxbuf::sys::PYXBUF_BORROW_EXCLUSIVE != 0 {
            // Answer the exclusive request with the weaker shared grant (the
            // counter still counts an exclusive borrow, so nothing else gets in).
            // SAFETY: extended bits were passed, so the view is a pyxbuf_view.
            let x = unsafe { &mut *view.cast::<pyxbuf::sys::pyxbuf_view>() };
            x.ext_flags = pyxbuf::sys::PYXBUF_EXT_SHARED;
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: a view getbuffer filled.
        unsafe { export::releasebuffer(self, view) }
    }
}

// SAFETY: HostArray keeps memory, shape and strides in place while views live.
unsafe impl ExportBuffer for WeakGrants {
    fn export_desc(&self) -> ExportDesc<'_> {
        self.data.desc()
    }
    fn borrow_counter(&self) -> &BorrowCounter {
        self.data.borrows()
    }
}

/// Item 7: an `Exclusive` buffer carries an exclusive grant or is refused,
/// with the message saying what was granted -- also with `require_borrow`.
#[test]
fn exclusive_buffers_need_an_exclusive_grant() {
    Python::attach(|py| {
        let obj = Bound::new(
            py,
            WeakGrants {
                data: HostArray::from_vec(vec![1, 2, 3]),
            },
        )
        .unwrap();
        // The shared answer is fine for a shared request.
        assert!(PyXBuffer::<u8>::get(&obj).unwrap().grants().shared());
        for result in [
            PyXBuffer::<u8, Exclusive>::get(&obj).map(drop),
            PyXBuffer::<u8>::request()
                .borrow_exclusive()
                .require_borrow()
                .get(&obj)
                .map(drop),
        ] {
            let err = result.unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
            assert!(
                err.to_string().contains("granted only a shared borrow"),
                "{err}"
            );
        }
        assert_eq!(obj.get().data.borrows().views(), 0);
    });
}

/// Item 4: a `bool` buffer whose bytes are not all 0 or 1 is read through
/// cells over `MaybeUninit<bool>` (no reference to an invalid `bool`), each
/// non-zero byte reading as `true`; a plain slice is refused.
#[test]
fn bool_cells_over_any_bytes() {
    Python::attach(|py| {
        let bytes = pyo3::types::PyBytes::new(py, &[0, 1, 2, 255]);
        let view = common::eval(py, "memoryview(b).cast('?')", &[("b", bytes.as_any())]);
        let buf = PyXBuffer::<bool>::get(&view).unwrap();
        assert!(buf.as_slice().is_none());
        let cells = buf.as_cells().unwrap();
        let values: Vec<bool> = cells.iter().map(|c| c.get()).collect();
        assert_eq!(values, [false, true, true, true]);
        assert_eq!(buf.to_vec().unwrap(), [false, true, true, true]);
    });
}

host_exporter!(Counted, f64);

/// Item 6: no lock is held across a call that can run Python. A refused
/// request formats its exception; with the garbage collector armed, that
/// runs a finalizer (before CPython 3.12, which collects only between
/// bytecodes) which releases another view of the same object -- which
/// takes the counter's lock. Holding it across the refusal deadlocked here.
#[test]
fn refusal_may_release_a_view_of_the_same_object() {
    Python::attach(|py| {
        let obj = Bound::new(
            py,
            Counted {
                data: HostArray::from_vec(vec![1.0, 2.0]),
            },
        )
        .unwrap();
        let shared = PyXBuffer::<f64>::get(&obj).unwrap(); // a live shared borrow
        run(
            py,
            r#"
import gc
import struct

class Releaser:
    """Garbage in a cycle whose finalizer releases a view of `obj`."""
    def __del__(self):
        self.view.release()
        released.append(True)

released = []
threshold = gc.get_threshold()
gc.disable()
gc.set_threshold(1)
try:
    try:
        raise KeyError("a handled exception makes the refusal normalize at once")
    except KeyError:
        r = Releaser()
        r.view = memoryview(obj)  # handed out read-only: a shared borrow is live
        r.cycle = r
        del r
        # From here the next allocation of a tracked object collects the
        # cycle: the refusal's exception, made inside bf_getbuffer.
        gc.enable()
        try:
            struct.pack_into("d", obj, 0, 7.0)  # PyBUF_WRITABLE: refused while shared
            raise AssertionError("a writable view was handed out under a shared borrow")
        except TypeError:
            pass  # getargs turns the producer's BufferError into TypeError
        finalized_during_refusal = released == [True]
finally:
    gc.set_threshold(*threshold)
    gc.enable()
gc.collect()
assert released == [True], released
# The finalizer ran inside the refused bf_getbuffer, which is what this
# tests. From 3.12 the collector runs only between bytecodes (gh-97922), never
# inside an allocation, so no finalizer can run there and the refusal only
# has to leave the counter consistent.
import sys
assert finalized_during_refusal or sys.version_info >= (3, 12)
"#,
            &[("obj", obj.as_any())],
        );
        drop(shared);
        assert_eq!(obj.get().data.borrows().views(), 0);
    });
}
