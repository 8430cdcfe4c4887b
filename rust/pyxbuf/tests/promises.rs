//! Issue 25, "promises kept": cells need a grant, `require_enforced`
//! refuses anything weaker than an enforced grant, extents are non-negative
//! and bounded before any slice or cell is formed, suboffsets make a view
//! non-contiguous, and the owner's guard holds its check across its act.
//! (Dropping an owned handle while the interpreter finalizes is in
//! tests/finalize.rs; the `Send`/`Sync` bounds in tests/compile_fail.)

mod common;

use std::os::raw::c_int;
use std::ptr;

use common::{eval, run};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyxbuf::export::{self, HostArray};
use pyxbuf::{Exclusive, PyXBuffer, PyXUntypedBuffer};

/// A producer that hands out whatever shape, strides and `len` it was built
/// with, over four `u32`s: the producer that lies about its extents.
/// `Shaped` is a classic producer (pyxbuf's registry tracks a borrow of
/// it); `ShapedNative` declares the extended flags and ignores borrow
/// requests, so nothing but the Rust layer looks at its extents.
macro_rules! shaped_producer {
    ($name:ident) => {
        #[pyclass]
        struct $name {
            data: [u32; 4],
            shape: Vec<ffi::Py_ssize_t>,
            strides: Option<Vec<ffi::Py_ssize_t>>,
            len: ffi::Py_ssize_t,
        }

        #[pymethods]
        impl $name {
            unsafe fn __getbuffer__(
                slf: Bound<'_, Self>,
                view: *mut ffi::Py_buffer,
                _flags: c_int,
            ) -> PyResult<()> {
                let mut this = slf.borrow_mut();
                let strides = this
                    .strides
                    .as_mut()
                    .map_or(ptr::null_mut(), |s| s.as_mut_ptr());
                // SAFETY: bf_getbuffer's view; every pointer points into
                // `this`, which the view keeps alive through `obj` and which
                // nothing moves or changes while views live.
                unsafe {
                    (*view).obj = slf.clone().into_any().into_ptr();
                    (*view).buf = this.data.as_mut_ptr().cast();
                    (*view).len = this.len;
                    (*view).itemsize = 4;
                    (*view).readonly = 1;
                    (*view).ndim = this.shape.len() as c_int;
                    (*view).format = c"I".as_ptr().cast_mut();
                    (*view).shape = this.shape.as_mut_ptr();
                    (*view).strides = strides;
                    (*view).suboffsets = ptr::null_mut();
                    (*view).internal = ptr::null_mut();
                }
                Ok(())
            }
        }

        impl $name {
            fn make<'py>(
                py: Python<'py>,
                shape: &[isize],
                strides: Option<&[isize]>,
                len: isize,
            ) -> Bound<'py, PyAny> {
                let s = $name {
                    data: [1, 2, 3, 4],
                    shape: shape.to_vec(),
                    strides: strides.map(<[isize]>::to_vec),
                    len,
                };
                Bound::new(py, s).unwrap().into_any()
            }
        }
    };
}

shaped_producer!(Shaped);
shaped_producer!(ShapedNative);

/// Both producers of `shape`, the native one declared as such.
fn shaped<'py>(
    py: Python<'py>,
    shape: &[isize],
    strides: Option<&[isize]>,
    len: isize,
) -> [Bound<'py, PyAny>; 2] {
    export::declare_supported::<ShapedNative>(py).unwrap();
    [
        Shaped::make(py, shape, strides, len),
        ShapedNative::make(py, shape, strides, len),
    ]
}

/// Item 5: a negative extent is refused at acquisition, naming the dimension
/// and the value -- even when another extent is 0 (len 0 agrees with the
/// shape's product, so the len check alone let it through).
#[test]
fn negative_extents_are_refused() {
    Python::attach(|py| {
        for strides in [None, Some(&[20isize, 4][..])] {
            let [classic, native] = shaped(py, &[0, -5], strides, 0);
            // The classic path: only the Rust layer looks.
            let err = PyXBuffer::<u32>::get(&classic).unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
            let msg = err.to_string();
            assert!(
                msg.contains("'Shaped'") && msg.contains("negative extent -5 in dimension 1"),
                "{msg}"
            );
            // The untyped path checks the same.
            let err = PyXUntypedBuffer::get(&classic).unwrap_err();
            assert!(err.to_string().contains("in dimension 1"), "{err}");
            // A native producer's extents are checked by pyxbuf_get itself.
            let err = PyXBuffer::<u32>::get(&native).unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
            assert!(
                err.to_string().contains("shape[1] = -5 is negative"),
                "{err}"
            );
        }
        // Empty arrays with non-negative extents are fine.
        for obj in shaped(py, &[0, 5], Some(&[20, 4]), 0) {
            let buf = PyXBuffer::<u32>::get(&obj).unwrap();
            assert_eq!(buf.shape(), [0, 5]);
            assert_eq!(buf.item_count(), 0);
            assert!(buf.is_c_contiguous());
            // An empty slice, under the classic one's tracked grant.
            let granted = buf.grants().any();
            assert_eq!(buf.as_slice(), granted.then_some(&[][..]));
        }
    });
}

/// Item 5: extents whose product (zeros left out) times the item size does
/// not fit in `isize` are refused before anything multiplies them: the
/// fallback strides (a producer that gives none) and the contiguity and
/// ndarray checks (one that does) overflowed, a panic in debug builds.
#[test]
fn overflowing_extents_are_refused() {
    Python::attach(|py| {
        let big = 1isize << 40;
        for (shape, strides) in [
            (vec![0, big, big], None),
            (vec![0, big, big], Some(vec![8isize, 8, 4])),
            (vec![big, big, 0], Some(vec![8, 8, 4])),
            (vec![0, isize::MAX / 2, 3], Some(vec![8, 8, 4])),
        ] {
            let [classic, native] = shaped(py, &shape, strides.as_deref(), 0);
            // The classic one: the registry refuses to track a borrow whose
            // byte span overflows, the Rust layer the rest.
            let err = PyXBuffer::<u32>::get(&classic).unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{shape:?}: {err}");
            let msg = err.to_string();
            assert!(
                msg.contains("Shaped'")
                    && (msg.contains("shape and strides overflow")
                        || msg.contains("does not fit in memory")),
                "{shape:?}: {msg}"
            );
            // The native one: pyxbuf_get multiplies its extents in order and
            // so catches an overflow before a zero extent; after one (shape
            // [0, ...]) only the Rust layer does.
            let err = PyXBuffer::<u32>::get(&native).unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{shape:?}: {err}");
            let msg = err.to_string();
            let rust_layer = msg.contains(&format!("has shape {shape:?} of 4-byte items"))
                && msg.contains("does not fit in memory");
            assert!(
                msg.contains("ShapedNative'")
                    && (rust_layer || (shape[0] != 0 && msg.contains("overflows"))),
                "{shape:?}: {msg}"
            );
        }
    });
}

/// Item 7: suboffsets make a view non-contiguous, as CPython's
/// `PyBuffer_IsContiguous` and PyO3 answer, even where the strides alone
/// look contiguous.
#[test]
fn suboffsets_are_never_contiguous() {
    Python::attach(|py| {
        // 1-D, 8-byte items: the pointer array's stride (8) equals the item
        // size, so the strides alone say contiguous.
        let pil = eval(
            py,
            "__import__('_testbuffer').ndarray([1, 2, 3, 4], shape=[4], format='Q', \
             flags=__import__('_testbuffer').ND_PIL)",
            &[],
        );
        let mv = eval(
            py,
            "(memoryview(a).c_contiguous, memoryview(a).f_contiguous)",
            &[("a", &pil)],
        );
        assert_eq!(mv.extract::<(bool, bool)>().unwrap(), (false, false));
        // A borrow of a view with suboffsets is refused (issue 38, item 3:
        // pyxbuf's registry would record the pointer table, not the items).
        let err = PyXBuffer::<u64>::request()
            .indirect()
            .get(&pil)
            .unwrap_err();
        assert!(
            err.is_instance_of::<pyo3::exceptions::PyBufferError>(py)
                && err.to_string().contains("suboffsets"),
            "{err}"
        );
        let buf = PyXBuffer::<u64>::request()
            .indirect()
            .without_borrow()
            .get(&pil)
            .unwrap();
        assert!(!buf.grants().any());
        assert!(buf.suboffsets().is_some());
        assert_eq!(buf.strides(), [8]);
        assert!(!buf.is_c_contiguous(), "suboffsets: not C-contiguous");
        assert!(!buf.is_fortran_contiguous(), "suboffsets: not F-contiguous");
        assert!(buf.as_slice().is_none() && buf.as_slice_ptr().is_none());
        // The pointers are followed: item 2 is 3.
        // SAFETY: get_ptr followed the suboffsets to an in-bounds u64 item
        // of host memory the view keeps alive.
        assert_eq!(
            unsafe { buf.get_ptr(&[2]).cast::<u64>().read_unaligned() },
            3
        );
        drop(buf);

        // 2-D, both orders.
        let pil2 = eval(
            py,
            "__import__('_testbuffer').ndarray(list(range(6)), shape=[2, 3], format='B', \
             flags=__import__('_testbuffer').ND_PIL)",
            &[],
        );
        let buf = PyXBuffer::<u8>::request()
            .indirect()
            .without_borrow()
            .get(&pil2)
            .unwrap();
        assert!(!buf.is_c_contiguous() && !buf.is_fortran_contiguous());
    });
}

/// A native producer (it declares the extended flags) that ignores borrow
/// requests: its views carry no grant at all.
#[pyclass(frozen)]
struct NoGrants {
    data: Box<[u8]>,
}

#[pymethods]
impl NoGrants {
    #[classattr]
    #[allow(non_upper_case_globals)]
    const __pyxbuf_supported_flags__: i32 = export::SUPPORTED_FLAGS;

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        // SAFETY: bf_getbuffer's view; the items live in the object, which
        // the view keeps alive, and are never written (read-only export).
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                this.data.as_ptr().cast_mut().cast(),
                this.data.len() as ffi::Py_ssize_t,
                1,
                flags & !(pyxbuf::sys::PYXBUF_EXTENDED_FLAGS),
            )
        };
        if rc < 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}

fn no_grants(py: Python<'_>) -> Bound<'_, NoGrants> {
    let data = vec![3u8, 1, 4, 1].into_boxed_slice();
    Bound::new(py, NoGrants { data }).unwrap()
}

host_exporter!(Enforcing, f64);

/// Item 3: without a grant, cells are not handed out by safe code (another
/// thread may write the memory meanwhile: a data race no cell prevents);
/// `unsafe` code that promises no other thread writes gets them.
#[test]
fn cells_need_a_grant() {
    Python::attach(|py| {
        let obj = no_grants(py);
        let buf = PyXBuffer::<u8>::get(&obj).unwrap();
        assert!(!buf.grants().any(), "{:?}", buf.grants());
        assert!(buf.as_cells().is_none(), "cells without a grant");
        assert!(buf.as_fortran_cells().is_none());
        assert!(buf.as_slice().is_none());
        // SAFETY: no other thread runs while this test reads the items.
        let cells = unsafe { buf.as_cells_unchecked() }.unwrap();
        assert_eq!(
            cells.iter().map(|c| c.get()).collect::<Vec<_>>(),
            [3, 1, 4, 1]
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { buf.as_fortran_cells_unchecked() }.unwrap().len(),
            4
        );
        drop(buf);

        // With a grant (tracked, here) the safe path stays.
        let a = eval(py, "np.arange(3.0)", &[]);
        let buf = PyXBuffer::<f64>::get(&a).unwrap();
        assert!(buf.grants().tracked());
        assert_eq!(buf.as_cells().unwrap()[2].get(), 2.0);
    });
}

/// Item 3: `require_enforced` refuses a tracked grant and no grant with
/// `BufferError` naming what was granted, and accepts an enforced one.
#[test]
fn require_enforced_refuses_weaker_grants() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(4.0)", &[]);
        let err = PyXBuffer::<f64>::request()
            .require_enforced()
            .get(&a)
            .unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("'numpy.ndarray'")
                && msg.contains("require_enforced")
                && msg.contains("a tracked shared borrow"),
            "{msg}"
        );
        // Refused and released: an exclusive borrow is free again.
        assert!(PyXBuffer::<f64, Exclusive>::get(&a).is_ok());
        let err = PyXUntypedBuffer::request()
            .borrow_exclusive()
            .require_enforced()
            .get_untyped(&a)
            .unwrap_err();
        assert!(
            err.to_string().contains("a tracked exclusive borrow"),
            "{err}"
        );

        let obj = no_grants(py);
        let err = PyXBuffer::<u8>::request()
            .require_enforced()
            .get(&obj)
            .unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        assert!(err.to_string().contains("no borrow"), "{err}");

        let e = Bound::new(
            py,
            Enforcing {
                data: HostArray::from_vec(vec![1.0, 2.0]),
            },
        )
        .unwrap();
        let buf = PyXBuffer::<f64>::request()
            .require_enforced()
            .get(e.as_any())
            .unwrap();
        assert!(buf.grants().is_enforced());
        assert_eq!(buf.as_slice(), Some(&[1.0, 2.0][..]));
    });
}

/// Item 3, what a tracked grant cannot stop: Python code that bypasses
/// pyxbuf writes the memory anyway (here on this thread; a free-threaded
/// interpreter or a ufunc that released the GIL does it from another).
#[test]
fn a_tracked_grant_does_not_stop_python() {
    Python::attach(|py| {
        let a = eval(py, "np.zeros(2)", &[]);
        let buf = PyXBuffer::<f64>::get(&a).unwrap();
        assert!(buf.grants().shared() && buf.grants().tracked());
        run(py, "a[0] = 5.0", &[("a", &a)]);
        // Cells tolerate writes from this thread (a plain slice would not).
        assert_eq!(buf.as_cells().unwrap()[0].get(), 5.0);
    });
}

/// Item 8: the owner's guard holds its check across its act: while held,
/// every request is refused (an exclusive guard) or writers are (a shared
/// one); `ensure_no_views` alone is only a check.
#[test]
fn owner_guard_holds_the_check_across_the_act() {
    Python::attach(|py| {
        let e = Bound::new(
            py,
            Enforcing {
                data: HostArray::from_vec(vec![1.0, 2.0]),
            },
        )
        .unwrap();
        let counter = e.get().data.borrows();
        {
            let _guard = counter.exclusive_guard("resize the array").unwrap();
            assert_eq!(counter.views(), 1, "the guard counts as a borrow");
            let err = PyXBuffer::<f64>::get(e.as_any()).unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
            let err = counter.ensure_no_views("reshape the array").unwrap_err();
            assert!(
                err.to_string().contains("cannot reshape the array"),
                "{err}"
            );
        }
        assert_eq!(counter.views(), 0);
        {
            let _guard = counter.shared_guard("read the array").unwrap();
            assert!(PyXBuffer::<f64>::get(e.as_any()).is_ok(), "readers share");
            let err = PyXBuffer::<f64, Exclusive>::get(e.as_any()).unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        }
        // A live view refuses the guard, naming the act and what is live.
        let view = PyXBuffer::<f64>::get(e.as_any()).unwrap();
        let err = counter.exclusive_guard("resize the array").unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("cannot resize the array") && msg.contains("1 view of the memory is live"),
            "{msg}"
        );
        assert!(counter.shared_guard("read the array").is_ok());
        drop(view);
        let mut w = PyXBuffer::<f64, Exclusive>::get(e.as_any()).unwrap();
        w.as_mut_slice().unwrap()[0] = 7.0;
        let err = counter.shared_guard("read the array").unwrap_err();
        assert!(err.to_string().contains("cannot read the array"), "{err}");
        drop(w);
        assert_eq!(counter.views(), 0);
    });
}

/// Item 8: `HostArray::new` multiplies its shape with checked arithmetic:
/// extents whose product overflows, or does not fit in memory, are a
/// `ValueError` naming the shape, never a panic or a wrapped count.
#[test]
fn host_array_refuses_overflowing_shapes() {
    let big = 1usize << 40;
    for shape in [
        vec![big, big, 0],
        vec![0, big, big],
        vec![usize::MAX, 0],
        vec![1usize << 62, 0],
    ] {
        let err = HostArray::<u64>::new(vec![], &shape).unwrap_err();
        Python::attach(|py| {
            assert!(err.is_instance_of::<PyValueError>(py), "{shape:?}: {err}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("{shape:?}")) && msg.contains("does not fit in memory"),
                "{shape:?}: {msg}"
            );
        });
    }
    // Empty shapes that fit are fine, with C-order strides.
    let ok = HostArray::<u64>::new(vec![], &[0, 3]).unwrap();
    assert_eq!(ok.shape(), [0, 3]);
    let err = HostArray::<u64>::new(vec![1, 2], &[3]).unwrap_err();
    assert!(
        err.to_string().contains("2 items cannot have shape [3]"),
        "{err}"
    );
}

/// Issue 38, part 2: pyxbuf's own array with a NumPy view of it alive. The
/// default request is granted tracked (not refused) while the view lives and
/// enforced after; `require_enforced` still refuses, naming the live views.
#[test]
fn own_exporter_with_a_numpy_view_is_tracked_then_enforced() {
    Python::attach(|py| {
        let e = export::new_exporter::<f32>(py, &[4], pyxbuf::Device::Cpu).unwrap();
        let seen = eval(py, "np.asarray(e)", &[("e", &e)]);
        let buf = PyXBuffer::<f32>::get(&e).unwrap();
        assert!(buf.grants().tracked() && buf.grants().shared());
        assert_eq!(buf.as_slice(), Some(&[0.0f32; 4][..]));
        // Borrowers still exclude each other.
        assert!(PyXBuffer::<f32, Exclusive>::get(&e).is_err());
        drop(buf);
        let mut x = PyXBuffer::<f32, Exclusive>::get(&e).unwrap();
        assert!(x.grants().tracked() && x.grants().exclusive());
        x.as_mut_slice().unwrap()[0] = 2.0;
        drop(x);
        let err = PyXBuffer::<f32>::request()
            .require_enforced()
            .get(&e)
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            err.is_instance_of::<PyBufferError>(py)
                && msg.contains("a tracked shared borrow")
                && msg.contains("1 other view (1 writable) is live")
                && msg.contains("NumPy array"),
            "{msg}"
        );
        assert_eq!(
            eval(py, "float(seen[0])", &[("seen", &seen)])
                .extract::<f64>()
                .unwrap(),
            2.0
        );
        drop(seen);
        let buf = PyXBuffer::<f32>::request()
            .require_enforced()
            .get(&e)
            .unwrap();
        assert!(buf.grants().is_enforced() && !buf.grants().tracked());
    });
}
