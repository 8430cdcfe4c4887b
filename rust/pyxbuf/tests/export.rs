//! The producer side: #[pyclass]es exporting through pyxbuf, consumed by
//! PyXBuffer and by NumPy.

mod common;

use std::os::raw::c_int;

use common::{eval, run};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyxbuf::export::{self, BorrowCounter, ExportBuffer, ExportDesc, HostArray};
use pyxbuf::{Exclusive, Path, PyXBuffer};

#[pyclass(frozen)]
struct Grid {
    data: HostArray<f64>,
}

// SAFETY: HostArray keeps memory, shape and strides in place while views live.
unsafe impl ExportBuffer for Grid {
    fn export_desc(&self) -> ExportDesc<'_> {
        self.data.desc()
    }
    fn borrow_counter(&self) -> &BorrowCounter {
        self.data.borrows()
    }
}

// The buffer slots come from the macro; the class's own methods (DLPack's
// protocol included) sit in the same #[pymethods] block.
pyxbuf::export_pymethods! {
    impl Grid {
        fn set(&self, i: usize, v: f64) -> PyResult<()> {
            self.data.write(|x| x[i] = v)
        }

        #[pyo3(signature = (**kwargs))]
        fn __dlpack__<'py>(
            slf: &Bound<'py, Self>,
            kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
        ) -> PyResult<Bound<'py, PyAny>> {
            export::dlpack(slf, kwargs)
        }

        fn __dlpack_device__(&self) -> (i32, i32) {
            export::dlpack_device(self)
        }
    }
}

fn grid(py: Python<'_>) -> Bound<'_, Grid> {
    let data = HostArray::new((0..6).map(f64::from).collect(), &[2, 3]).unwrap();
    Bound::new(py, Grid { data }).unwrap()
}

#[test]
fn pyclass_exports_with_enforced_borrows() {
    Python::attach(|py| {
        let g = grid(py);
        let any = g.as_any();
        let r = PyXBuffer::<f64>::get(any).unwrap();
        assert_eq!(r.path(), Path::Native);
        assert!(r.grants().shared() && r.grants().is_enforced());
        assert_eq!(r.shape(), [2, 3]);
        assert_eq!(r.strides(), [24, 8]);
        assert_eq!(r.as_slice().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        // The owner may read, not write, while a shared borrow lives.
        assert_eq!(g.get().data.read(|x| x[5]).unwrap(), 5.0);
        let err = g.call_method1("set", (0, 9.0)).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        // Writers are refused, readers share.
        assert!(PyXBuffer::<f64, Exclusive>::get(any).is_err());
        let r2 = PyXBuffer::<f64>::get(any).unwrap();
        assert_eq!(g.get().data.borrows().counts().shared, 2);
        drop((r, r2));
        g.call_method1("set", (0, 9.0)).unwrap();

        let mut w = PyXBuffer::<f64, Exclusive>::get(any).unwrap();
        assert!(w.grants().exclusive() && w.grants().is_enforced());
        w.as_mut_slice().unwrap()[1] = -1.0;
        // Nobody else, not even a plain NumPy view or the owner, meanwhile.
        let err = g.get().data.read(|x| x[0]).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py));
        let np_err = eval(py, "__import__('builtins').memoryview", &[]).call1((any,));
        assert!(np_err.is_err());
        drop(w);
        assert_eq!(g.get().data.read(|x| x[..2].to_vec()).unwrap(), [9.0, -1.0]);
        assert_eq!(g.get().data.borrows().views(), 0);
    });
}

#[test]
fn numpy_reads_a_pyclass_export() {
    Python::attach(|py| {
        let g = grid(py);
        let a = eval(py, "np.asarray(g)", &[("g", g.as_any())]);
        assert_eq!(
            eval(py, "a.shape", &[("a", &a)])
                .extract::<(usize, usize)>()
                .unwrap(),
            (2, 3)
        );
        assert_eq!(
            eval(py, "float(a.sum())", &[("a", &a)])
                .extract::<f64>()
                .unwrap(),
            15.0
        );
        // NumPy's view is a plain, writable one the exporter cannot stop: a
        // shared borrow is now only tracked (issue 38, part 2),
        let b = PyXBuffer::<f64>::get(g.as_any()).unwrap();
        assert!(b.grants().tracked() && b.grants().shared());
        drop(b);
        // and the owner's reads and writes fail (it borrows like anyone, and
        // as the owner it must know nobody writes).
        assert!(g.get().data.read(|x| x[0]).is_err());
        let err = g.call_method1("set", (0, 100.0)).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        // NumPy writes through its view instead.
        common::run(py, "a[0, 0] = 100.0", &[("a", &a)]);
        drop(a);
        assert_eq!(g.get().data.borrows().views(), 0);
        assert_eq!(g.get().data.read(|x| x[0]).unwrap(), 100.0);
        assert!(PyXBuffer::<f64>::get(g.as_any()).is_ok());
    });
}

#[pyclass(frozen)]
struct Undeclared {
    data: HostArray<u8>,
}

// SAFETY: as for Grid.
unsafe impl ExportBuffer for Undeclared {
    fn export_desc(&self) -> ExportDesc<'_> {
        self.data.desc()
    }
    fn borrow_counter(&self) -> &BorrowCounter {
        self.data.borrows()
    }
}

// Forwarded by hand, not through export_pymethods!: the macro declares the
// supported flags, and this class must not, so that declare_supported is
// what turns it into an extended producer.
#[pymethods]
impl Undeclared {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        // SAFETY: bf_getbuffer's arguments.
        unsafe { export::getbuffer(&slf, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: a view getbuffer filled.
        unsafe { export::releasebuffer(self, view) }
    }
}

#[test]
fn supported_flags_decide_the_path() {
    Python::attach(|py| {
        let u = Bound::new(
            py,
            Undeclared {
                data: HostArray::from_vec(vec![1, 2, 3]),
            },
        )
        .unwrap();
        // Not declared: a classic producer, borrows tracked by the registry.
        let b = PyXBuffer::<u8>::get(u.as_any()).unwrap();
        assert_eq!(b.path(), Path::Classic);
        assert!(b.grants().tracked());
        drop(b);
        export::declare_supported::<Undeclared>(py).unwrap();
        let b = PyXBuffer::<u8>::get(u.as_any()).unwrap();
        assert_eq!(b.path(), Path::Native);
        assert!(b.grants().is_enforced());
        assert_eq!(b.as_slice().unwrap(), [1, 2, 3]);
    });
}

#[test]
fn read_only_exports() {
    Python::attach(|py| {
        let data = HostArray::new(vec![1.0, 2.0], &[2])
            .unwrap()
            .with_readonly(true);
        let g = Bound::new(py, Grid { data }).unwrap();
        assert!(PyXBuffer::<f64>::get(g.as_any()).unwrap().readonly());
        let err = PyXBuffer::<f64, Exclusive>::get(g.as_any()).unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
        assert_eq!(g.get().data.borrows().views(), 0);
    });
}

#[cfg(feature = "emulated-device")]
mod device_export {
    use super::*;
    use pyxbuf::export::DeviceInfo;
    use pyxbuf::sys;
    use pyxbuf::Device;

    /// Device memory allocated through the emulated device's backend.
    #[pyclass(frozen)]
    struct DeviceVec {
        ptr: usize,
        shape: [isize; 1],
        info: DeviceInfo,
        borrows: BorrowCounter,
    }

    // SAFETY: the allocation lives until Drop (after every view, which keeps
    // the object alive) and never moves; shape and info are fields.
    unsafe impl ExportBuffer for DeviceVec {
        fn export_desc(&self) -> ExportDesc<'_> {
            ExportDesc::new(self.ptr as *mut f32, &self.shape).on_device(&self.info)
        }
        fn borrow_counter(&self) -> &BorrowCounter {
            &self.borrows
        }
    }

    pyxbuf::export_pymethods! {
        impl DeviceVec {
            #[pyo3(signature = (**kwargs))]
            fn __dlpack__<'py>(
                slf: &Bound<'py, Self>,
                kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                export::dlpack(slf, kwargs)
            }

            fn __dlpack_device__(&self) -> (i32, i32) {
                export::dlpack_device(self)
            }
        }
    }

    fn backend() -> sys::pyxbuf_backend {
        let mut b = sys::pyxbuf_backend::default();
        // SAFETY: out-pointer valid for the call.
        assert_eq!(
            unsafe {
                sys::pyxbuf_backend_get(sys::PYXBUF_DL_EXT_DEV, &mut b, std::ptr::null_mut())
            },
            0
        );
        b
    }

    impl Drop for DeviceVec {
        fn drop(&mut self) {
            let b = backend();
            // SAFETY: memory this object allocated on device 0, freed once.
            unsafe { b.free.unwrap()(b.ctx, 0, self.ptr as *mut _, std::ptr::null_mut()) };
        }
    }

    #[test]
    fn pyclass_exports_device_memory() {
        pyxbuf::emulated::register().unwrap();
        let live = pyxbuf::emulated::live_allocations();
        Python::attach(|py| {
            let b = backend();
            let mut ptr = std::ptr::null_mut();
            let values = [1.0f32, 2.0, 3.0];
            // SAFETY: allocation and upload of 12 bytes on emulated device 0.
            unsafe {
                assert_eq!(
                    b.alloc.unwrap()(b.ctx, 0, 12, &mut ptr, std::ptr::null_mut()),
                    0
                );
                let rc = b.copy_from_host.unwrap()(
                    b.ctx,
                    0,
                    ptr,
                    values.as_ptr().cast(),
                    12,
                    0,
                    std::ptr::null_mut(),
                );
                assert_eq!(rc, 0);
            }
            let info = DeviceInfo::new(Device::Emulated { id: 0 });
            let v = Bound::new(
                py,
                DeviceVec {
                    ptr: ptr as usize,
                    shape: [3],
                    info,
                    borrows: BorrowCounter::new(),
                },
            )
            .unwrap();
            let err = PyXBuffer::<f32>::get(v.as_any()).unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
            let buf = PyXBuffer::<f32>::request()
                .device()
                .get(v.as_any())
                .unwrap();
            assert_eq!(buf.device(), Device::Emulated { id: 0 });
            assert!(buf.grants().is_enforced());
            assert!(buf.as_slice().is_none());
            assert_eq!(buf.device_ptr().unwrap().addr(), ptr as u64);
            assert_eq!(buf.copy_to_host().unwrap(), values);
            let host = buf.to_device(Device::Cpu).unwrap();
            assert_eq!(
                PyXBuffer::<f32>::get(&host).unwrap().as_slice().unwrap(),
                values
            );
            drop(buf);
            // DLPack from the producer trait, device memory: the capsule names
            // the emulated device and pyxbuf reads it back through DLPack.
            assert_eq!(
                eval(py, "v.__dlpack_device__()", &[("v", v.as_any())])
                    .extract::<(i32, i32)>()
                    .unwrap(),
                (sys::PYXBUF_DL_EXT_DEV, 0)
            );
            let only_dlpack = eval(
                py,
                "type('DL', (), {'__dlpack__': lambda s, **k: v.__dlpack__(**k), \
                 '__dlpack_device__': lambda s: v.__dlpack_device__()})()",
                &[("v", v.as_any())],
            );
            let back = PyXBuffer::<f32>::request()
                .device()
                .get(&only_dlpack)
                .unwrap();
            assert_eq!(back.path(), pyxbuf::Path::Dlpack);
            assert_eq!(back.device(), Device::Emulated { id: 0 });
            assert_eq!(back.copy_to_host().unwrap(), values);
            drop(back);
            assert_eq!(v.get().borrows.views(), 0);
            // The wrapper class's lambdas hold `v` in a reference cycle.
            drop(only_dlpack);
            drop(v);
            // Free-threaded CPython frees functions (deferred reference
            // counts) and objects whose counts other threads touched only at
            // a later collection: collect until the memory is back, and fail
            // only if it never comes back (a real leak).
            for _ in 0..50 {
                run(py, "import gc; gc.collect()", &[]);
                if pyxbuf::emulated::live_allocations() == live {
                    break;
                }
                py.detach(|| std::thread::sleep(std::time::Duration::from_millis(10)));
            }
        });
        assert_eq!(pyxbuf::emulated::live_allocations(), live);
    }
}

/// DLPack export from the producer trait: NumPy reads a #[pyclass]'s memory
/// through `__dlpack__`, read-only, and the capsule's tensor holds a shared
/// borrow until NumPy lets go of it -- the owner cannot write meanwhile.
#[test]
fn pyclass_exports_through_dlpack_with_its_borrow_rules() {
    Python::attach(|py| {
        let g = grid(py);
        assert_eq!(
            eval(py, "g.__dlpack_device__()", &[("g", g.as_any())])
                .extract::<(i32, i32)>()
                .unwrap(),
            (pyxbuf::sys::PYXBUF_DL_CPU, 0)
        );
        if !common::numpy_dlpack_1(py) {
            // NumPy 1 asks for a legacy capsule, which cannot say read-only:
            // pyxbuf refuses to export this read-only tensor through it.
            let err = py
                .eval(
                    c"np.from_dlpack(g)",
                    None,
                    Some(&{
                        let d = pyo3::types::PyDict::new(py);
                        d.set_item("np", common::numpy(py)).unwrap();
                        d.set_item("g", &g).unwrap();
                        d
                    }),
                )
                .unwrap_err();
            assert!(err
                .to_string()
                .contains("cannot be exported as a legacy DLPack capsule"));
            return;
        }
        let a = eval(py, "np.from_dlpack(g)", &[("g", g.as_any())]);
        assert_eq!(
            eval(py, "a.tolist()", &[("a", &a)])
                .extract::<Vec<Vec<f64>>>()
                .unwrap(),
            [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        );
        assert!(!eval(py, "a.flags.writeable", &[("a", &a)])
            .extract::<bool>()
            .unwrap());
        // NumPy's array holds the tensor, which holds a shared borrow.
        let err = g.call_method1("set", (0, 9.0)).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        assert!(PyXBuffer::<f64, Exclusive>::get(g.as_any()).is_err());
        assert!(PyXBuffer::<f64>::get(g.as_any()).is_ok(), "readers share");
        drop(a);
        run(py, "import gc; gc.collect()", &[]);
        g.call_method1("set", (0, 9.0)).unwrap();
        assert_eq!(g.get().data.borrows().views(), 0);
        // A versioned capsule through pyxbuf's own DLPack import, too.
        let only_dlpack = eval(
            py,
            "type('DL', (), {'__dlpack__': lambda s, **k: g.__dlpack__(**k), \
             '__dlpack_device__': lambda s: g.__dlpack_device__()})()",
            &[("g", g.as_any())],
        );
        let back = PyXBuffer::<f64>::get(&only_dlpack).unwrap();
        assert_eq!(back.path(), Path::Dlpack);
        assert_eq!(back.to_vec().unwrap(), [9.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    });
}

/// DLPack's C exchange table on a #[pyclass]: a consumer framework's call
/// through the function pointer gives an owning tensor of the class's
/// memory, which holds a view (and so a borrow) until its deleter runs.
#[test]
fn pyclass_gets_the_dlpack_c_exchange_table() {
    #[repr(C)]
    struct DLTensor {
        data: *mut std::ffi::c_void,
        device: [i32; 2],
        ndim: i32,
        dtype: [u8; 4],
        shape: *const i64,
        strides: *const i64,
        byte_offset: u64,
    }
    #[repr(C)]
    struct Managed {
        version: [u32; 2],
        manager_ctx: *mut std::ffi::c_void,
        deleter: Option<unsafe extern "C" fn(*mut Managed)>,
        flags: u64,
        tensor: DLTensor,
    }
    type FromPy = unsafe extern "C" fn(*mut ffi::PyObject, *mut *mut Managed) -> c_int;
    #[repr(C)]
    struct Table {
        version: [u32; 2],
        prev: *const std::ffi::c_void,
        allocator: *const std::ffi::c_void,
        from_py: Option<FromPy>,
        rest: [*const std::ffi::c_void; 3],
    }

    Python::attach(|py| {
        export::declare_dlpack_exchange_api::<Grid>(py).unwrap();
        let g = grid(py);
        let capsule = g.get_type().getattr("__dlpack_c_exchange_api__").unwrap();
        // SAFETY: the capsule pyxbuf installed, named as DLPack says; its
        // table lives for the process and has the layout declared above.
        let table = unsafe {
            &*ffi::PyCapsule_GetPointer(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr())
                .cast::<Table>()
        };
        assert_eq!(table.version, [1, 3]);
        let mut m: *mut Managed = std::ptr::null_mut();
        // SAFETY: a live object of the type the table came from, attached.
        assert_eq!(unsafe { table.from_py.unwrap()(g.as_ptr(), &mut m) }, 0);
        // SAFETY: a valid tensor the table just made; shape has ndim items.
        let t = unsafe { &(*m).tensor };
        assert_eq!((t.ndim, t.dtype), (2, [2, 64, 1, 0]));
        // SAFETY: as above.
        assert_eq!(unsafe { std::slice::from_raw_parts(t.shape, 2) }, [2, 3]);
        assert_eq!(g.get().data.borrows().views(), 1, "the tensor holds a view");
        // The tensor's writes cannot be stopped: an exclusive borrow is only
        // tracked while it lives (issue 38, part 2).
        let x = PyXBuffer::<f64, Exclusive>::get(g.as_any()).unwrap();
        assert!(x.grants().tracked() && x.grants().exclusive());
        drop(x);
        // SAFETY: the tensor's own deleter, called once.
        unsafe { (*m).deleter.unwrap()(m) };
        assert_eq!(g.get().data.borrows().views(), 0);
    });
}

/// Issue 25, item 1: a zero-copy wrapper over tracked memory (NumPy) must not
/// hand out enforced grants. Before the fix `PyXBuffer` of the wrapper said
/// `is_enforced()` while NumPy's `a[0] = 99.0` changed the live `&[f64]`.
#[test]
fn a_wrapper_never_grants_more_than_it_holds() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(4.0)", &[]);
        let w = export::wrap(&a, false, None).unwrap();
        let r = PyXBuffer::<f64>::get(&w).unwrap();
        assert!(
            r.grants().shared() && r.grants().tracked(),
            "{:?}",
            r.grants()
        );
        assert!(!r.grants().is_enforced());
        // What a tracked grant cannot stop: the source's own writes.
        run(py, "a[0] = 99.0", &[("a", &a)]);
        assert_eq!(r.as_slice().unwrap()[0], 99.0);
        drop(r);
        let rw = export::wrap(&eval(py, "np.zeros(3)", &[]), true, None).unwrap();
        let x = PyXBuffer::<f64, Exclusive>::get(&rw).unwrap();
        assert!(x.grants().exclusive() && x.grants().tracked());
        drop(x);
        // Over an enforcing producer (a pyclass exporter) the wrapper's grants
        // are enforced too.
        let g = grid(py);
        let wg = export::wrap(g.as_any(), false, None).unwrap();
        let r = PyXBuffer::<f64>::get(&wg).unwrap();
        assert!(r.grants().is_enforced(), "{:?}", r.grants());
    });
}
