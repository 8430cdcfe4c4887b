//! pyxbuf's Criterion suite: every pyxbuf figure beside its peer, measured in
//! the same process on the same objects (see bench/README.md for the groups
//! and `make bench` for the results file).

use std::ffi::{c_void, CStr, CString};
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyxbuf::PyXBuffer;
use pyxbuf_bench::{
    emulated, exporter, exporter_data, fixtures, note, path_of, register_emulated, setup_python,
    write_notes, DEVICE_VIEW, RECORDS_RO,
};
use pyxbuf_sys as sys;

/// Acquire and release `obj` through pyxbuf_get.
fn pyxbuf_cycle(obj: *mut pyo3_ffi::PyObject, view: &mut sys::pyxbuf_view, flags: i32) {
    // SAFETY: GIL held by the caller; the view is released right after.
    unsafe {
        let rc = sys::pyxbuf_get(obj, view, flags);
        assert_eq!(rc, 0, "pyxbuf_get failed");
        black_box(view.base.buf);
        sys::pyxbuf_release(view);
    }
}

/// Acquire and release `obj` through the classic calls.
fn classic_cycle(obj: *mut pyo3_ffi::PyObject, view: &mut pyo3_ffi::Py_buffer, flags: i32) {
    // SAFETY: GIL held by the caller; the view is released right after.
    unsafe {
        let rc = pyo3_ffi::PyObject_GetBuffer(obj, view, flags);
        assert_eq!(rc, 0, "PyObject_GetBuffer failed");
        black_box(view.buf);
        pyo3_ffi::PyBuffer_Release(view);
    }
}

/// One call of a Python callable with one argument, result dropped.
fn call1(f: *mut pyo3_ffi::PyObject, arg: *mut pyo3_ffi::PyObject) {
    // SAFETY: GIL held by the caller; both are live objects.
    unsafe {
        let r = pyo3_ffi::PyObject_CallOneArg(f, arg);
        assert!(!r.is_null(), "Python call failed");
        pyo3_ffi::Py_DECREF(r);
    }
}

/// Whether `f(obj)` works; the error text otherwise.
fn try_call(f: &Bound<'_, PyAny>, obj: &Bound<'_, PyAny>) -> Result<(), String> {
    f.call1((obj,)).map(drop).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------
// 1. Acquisition + release: pyxbuf_get vs PyObject_GetBuffer, PyXBuffer vs PyO3
// ---------------------------------------------------------------------------

fn acquisition(py: Python<'_>, c: &mut Criterion) -> PyResult<()> {
    let np = py.import("numpy")?;
    let array = np.call_method1("zeros", ((64, 64), "float32"))?;
    let bytes = pyo3::types::PyBytes::new(py, &[7u8; 4096]).into_any();
    let mview = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((&array,))?;
    let mut g = c.benchmark_group("acquire");
    for (name, obj) in [
        ("numpy_f32_2d", &array),
        ("bytes", &bytes),
        ("memoryview", &mview),
    ] {
        match path_of(obj, DEVICE_VIEW) {
            Ok(p) => note("path", &format!("acquire/{name}"), &p),
            Err(e) => note("skip", &format!("acquire/{name}"), &e),
        }
        let ptr = obj.as_ptr();
        g.bench_function(BenchmarkId::new("PyObject_GetBuffer", name), |b| {
            let mut view = pyo3_ffi::Py_buffer::new();
            b.iter(|| classic_cycle(ptr, &mut view, RECORDS_RO))
        });
        g.bench_function(BenchmarkId::new("pyxbuf_get", name), |b| {
            let mut view = sys::pyxbuf_view::default();
            b.iter(|| pyxbuf_cycle(ptr, &mut view, DEVICE_VIEW))
        });
        g.bench_function(BenchmarkId::new("pyxbuf_get_borrow_shared", name), |b| {
            let mut view = sys::pyxbuf_view::default();
            b.iter(|| pyxbuf_cycle(ptr, &mut view, DEVICE_VIEW | sys::PYXBUF_BORROW_SHARED))
        });
        if name == "bytes" {
            g.bench_function(BenchmarkId::new("pyo3_PyBuffer_get", name), |b| {
                b.iter(|| {
                    drop(black_box(
                        pyo3::buffer::PyBuffer::<u8>::get(obj).expect("PyBuffer<u8>"),
                    ))
                })
            });
            g.bench_function(BenchmarkId::new("PyXBuffer_get", name), |b| {
                b.iter(|| drop(black_box(PyXBuffer::<u8>::get(obj).expect("PyXBuffer<u8>"))))
            });
        } else {
            g.bench_function(BenchmarkId::new("pyo3_PyBuffer_get", name), |b| {
                b.iter(|| {
                    drop(black_box(
                        pyo3::buffer::PyBuffer::<f32>::get(obj).expect("PyBuffer<f32>"),
                    ))
                })
            });
            g.bench_function(BenchmarkId::new("PyXBuffer_get", name), |b| {
                b.iter(|| {
                    drop(black_box(
                        PyXBuffer::<f32>::get(obj).expect("PyXBuffer<f32>"),
                    ))
                })
            });
        }
    }
    g.finish();
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. DLPack import vs np.from_dlpack (and the C exchange table)
// ---------------------------------------------------------------------------

fn dlpack(py: Python<'_>, c: &mut Criterion, fx: &Bound<'_, PyModule>) -> PyResult<()> {
    let np = py.import("numpy")?;
    let from_dlpack = np.getattr("from_dlpack")?;
    let mut objects: Vec<(String, Bound<'_, PyAny>)> = Vec::new();

    // ml_dtypes bfloat16: NumPy exports it by neither buffer nor DLPack; pyxbuf
    // reads it through __array_interface__.
    match py.import("ml_dtypes") {
        Ok(ml) => {
            let bf16 = ml.getattr("bfloat16")?;
            objects.push((
                "ml_dtypes_bf16".into(),
                np.call_method1("ones", ((64, 64), bf16))?,
            ));
        }
        Err(e) => note(
            "skip",
            "dlpack/ml_dtypes_bf16",
            &format!("no ml_dtypes: {e}"),
        ),
    }

    // A NumPy float32 array behind a DLPack-only wrapper (pyxbuf would take
    // the classic buffer of the array itself).
    let host = np.call_method1("ones", ((64, 64), "float32"))?;
    objects.push((
        "numpy_f32_dlpack_only".into(),
        fx.getattr("DLPackOnly")?.call1((&host,))?,
    ));

    // The emulated device: a pyxbuf.Exporter there, and a DLPack-only wrapper.
    let dev = exporter(py, c"f", &[64, 64], Some(emulated(0)))?;
    objects.push(("emulated_exporter_native".into(), dev.clone()));
    objects.push((
        "emulated_dlpack_only".into(),
        fx.getattr("DLPackOnly")?.call1((&dev,))?,
    ));

    // JAX CPU arrays (bfloat16 and float32).
    match py.import("jax.numpy") {
        Ok(jnp) => {
            for (name, dtype) in [("jax_cpu_bf16", "bfloat16"), ("jax_cpu_f32", "float32")] {
                let a = jnp.call_method1("ones", ((64, 64), jnp.getattr(dtype)?))?;
                a.call_method0("block_until_ready")?;
                if name == "jax_cpu_f32" {
                    // JAX CPU float32 has a classic buffer, which pyxbuf
                    // prefers; force DLPack with a forwarding wrapper (both
                    // sides of the comparison pay for the forwarding).
                    objects.push((
                        "jax_cpu_f32_dlpack_only".into(),
                        fx.getattr("DLPackOnly")?.call1((&a,))?,
                    ));
                }
                objects.push((name.into(), a));
            }
        }
        Err(e) => note("skip", "dlpack/jax", &format!("JAX not importable: {e}")),
    }

    // The C test extension's producers over a NumPy float32 array: __dlpack__
    // only, and __dlpack__ plus the DLPack 1.3 C exchange table.
    match py.import("_pyxbuf_testext") {
        Ok(t) => {
            let host = np.call_method1("ones", ((64, 64), "float32"))?;
            objects.push((
                "testext_DLPackProducer".into(),
                t.getattr("DLPackProducer")?.call1((&host,))?,
            ));
            objects.push((
                "testext_DLPackCProducer".into(),
                t.getattr("DLPackCProducer")?.call1((&host,))?,
            ));
        }
        Err(e) => note(
            "skip",
            "dlpack/testext",
            &format!(
                "the C test extension (_pyxbuf_testext, built by `make build` into build/python) \
                 is not importable, so the DLPack C exchange API path is not measured: {e}"
            ),
        ),
    }

    let mut g = c.benchmark_group("dlpack");
    for (name, obj) in &objects {
        let ptr = obj.as_ptr();
        match path_of(obj, DEVICE_VIEW) {
            Ok(p) => {
                note("path", &format!("dlpack/{name}"), &p);
                g.bench_function(BenchmarkId::new("pyxbuf_get", name), |b| {
                    let mut view = sys::pyxbuf_view::default();
                    b.iter(|| pyxbuf_cycle(ptr, &mut view, DEVICE_VIEW))
                });
            }
            Err(e) => note("skip", &format!("dlpack/pyxbuf_get/{name}"), &e),
        }
        match try_call(&from_dlpack, obj) {
            Ok(()) => {
                let f = from_dlpack.as_ptr();
                g.bench_function(BenchmarkId::new("np_from_dlpack", name), |b| {
                    b.iter(|| call1(f, ptr))
                });
            }
            Err(e) => note(
                "skip",
                &format!("dlpack/np_from_dlpack/{name}"),
                &format!("np.from_dlpack refuses it: {e}"),
            ),
        }
        if name == "ml_dtypes_bf16" {
            // What pyxbuf's bridge reads, as Python would read it.
            g.bench_function(BenchmarkId::new("getattr_array_interface", name), |b| {
                b.iter(|| drop(black_box(obj.getattr("__array_interface__").expect("attr"))))
            });
        }
    }
    g.finish();
    Ok(())
}

// ---------------------------------------------------------------------------
// 3. __cuda_array_interface__ import vs DLPack import of the same memory
// ---------------------------------------------------------------------------

fn cai(py: Python<'_>, c: &mut Criterion, fx: &Bound<'_, PyModule>) -> PyResult<()> {
    let dev = exporter(py, c"f", &[64, 64], Some(emulated(0)))?;
    let dptr = exporter_data(&dev);
    let cai = fx.getattr("CAI")?.call1((&dev, dptr, (64, 64), "<f4"))?;
    let dl = fx.getattr("DLPackOnly")?.call1((&dev,))?;
    let mut g = c.benchmark_group("cai");
    for (name, obj) in [
        ("cai_dict", &cai),
        ("dlpack_only", &dl),
        ("exporter_native", &dev),
    ] {
        match path_of(obj, DEVICE_VIEW) {
            Ok(p) => note("path", &format!("cai/{name}"), &p),
            Err(e) => {
                note("skip", &format!("cai/{name}"), &e);
                continue;
            }
        }
        let ptr = obj.as_ptr();
        g.bench_function(BenchmarkId::new("pyxbuf_get", name), |b| {
            let mut view = sys::pyxbuf_view::default();
            b.iter(|| pyxbuf_cycle(ptr, &mut view, DEVICE_VIEW))
        });
    }
    // The producer side alone: building the CAI dict, making the capsule.
    g.bench_function(BenchmarkId::new("python", "getattr_cai_dict"), |b| {
        b.iter(|| {
            drop(black_box(
                cai.getattr("__cuda_array_interface__").expect("cai"),
            ))
        })
    });
    g.bench_function(BenchmarkId::new("python", "exporter___dlpack__"), |b| {
        b.iter(|| drop(black_box(dev.call_method0("__dlpack__").expect("capsule"))))
    });
    g.finish();
    Ok(())
}

// ---------------------------------------------------------------------------
// 4. Format parsing vs struct.calcsize (uncached) and NumPy's PEP 3118 parser
// ---------------------------------------------------------------------------

/// Parse into an uninitialised descriptor, as a C caller's stack variable
/// would be (`pyxbuf_format_parse` initialises what it uses; zeroing the
/// ~600-byte struct first would add a memset to every measurement).
fn parse_clear(fmt: &CStr) -> i64 {
    let mut f = std::mem::MaybeUninit::<sys::pyxbuf_format>::uninit();
    // SAFETY: fmt is NUL-terminated and outlives the descriptor; parse
    // initialises the descriptor's header and nodes before they are read.
    unsafe {
        let rc = sys::pyxbuf_format_parse(fmt.as_ptr(), f.as_mut_ptr(), std::ptr::null_mut());
        assert_eq!(rc, 0, "pyxbuf_format_parse({fmt:?})");
        let size = (*f.as_ptr()).itemsize;
        sys::pyxbuf_format_clear(f.as_mut_ptr());
        size
    }
}

fn itemsize(fmt: &CStr) -> i64 {
    let mut size = 0i64;
    // SAFETY: fmt is NUL-terminated; NULL alignment and error are allowed.
    let rc = unsafe {
        sys::pyxbuf_format_itemsize(
            fmt.as_ptr(),
            &mut size,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "pyxbuf_format_itemsize({fmt:?})");
    size
}

/// Distinct strings cycled through so `struct`'s cache (100 entries, cleared
/// when full) never holds the one asked for.
const FRESH: usize = 1024;

fn formats(py: Python<'_>, c: &mut Criterion, fx: &Bound<'_, PyModule>) -> PyResult<()> {
    let np = py.import("numpy")?;
    let calcsize = py.import("struct")?.getattr("calcsize")?;
    let pep3118 = py
        .import("numpy._core._internal")?
        .getattr("_dtype_from_pep3118")?;
    let memoryview = py.import("builtins")?.getattr("memoryview")?;
    let numpy_struct_format = |n: usize| -> PyResult<String> {
        let dt = fx.getattr("struct_dtype")?.call1((n,))?;
        let a = np.call_method1("zeros", (1, dt))?;
        memoryview.call1((a,))?.getattr("format")?.extract()
    };
    let twenty = numpy_struct_format(20)?;
    note("format", "format/numpy_20_fields", &twenty);

    let mut g = c.benchmark_group("format");
    // Single items: pyxbuf alone (the ≤ 5 ns target), parse+clear and itemsize.
    for fmt in ["f", "<d", "B", "Zd", "?"] {
        let cf = CString::new(fmt).expect("no NUL");
        g.bench_function(BenchmarkId::new("pyxbuf_parse", fmt), |b| {
            b.iter(|| parse_clear(black_box(&cf)))
        });
        g.bench_function(BenchmarkId::new("pyxbuf_itemsize", fmt), |b| {
            b.iter(|| itemsize(black_box(&cf)))
        });
    }

    // Against struct.calcsize on fresh (uncached) strings: "<{k}f" and a
    // flat 20-item struct-module format, k cycling over FRESH values.
    let flat20 = "dihBdfihBdfihBdfihBd"; // 20 items, every kind NumPy's struct uses
    for (label, stem) in [("single", "f"), ("flat20", flat20)] {
        let strs: Vec<String> = (1..=FRESH).map(|k| format!("<{k}{stem}")).collect();
        let cstrs: Vec<CString> = strs
            .iter()
            .map(|s| CString::new(s.as_str()).expect("no NUL"))
            .collect();
        let pystrs: Vec<Bound<'_, PyAny>> = strs
            .iter()
            .map(|s| pyo3::types::PyString::new(py, s).into_any())
            .collect();
        let f = calcsize.as_ptr();
        g.bench_function(BenchmarkId::new("struct_calcsize_fresh", label), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = (i + 1) % FRESH;
                call1(f, pystrs[i].as_ptr())
            })
        });
        g.bench_function(BenchmarkId::new("pyxbuf_itemsize_fresh", label), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = (i + 1) % FRESH;
                itemsize(&cstrs[i])
            })
        });
        g.bench_function(BenchmarkId::new("pyxbuf_parse_fresh", label), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = (i + 1) % FRESH;
                parse_clear(&cstrs[i])
            })
        });
    }

    // PEP 3118 formats against NumPy's parser.
    let custom = "[acme$quaternion;struct$<4f]";
    for (label, fmt) in [
        ("single_f", "f".to_owned()),
        ("T_xyz", "T{<i:x:<d:y:(2)f:z:}".to_owned()),
        ("numpy_20_fields", twenty.clone()),
        ("custom_alternatives", custom.to_owned()),
    ] {
        let cf = CString::new(fmt.as_str()).expect("no NUL");
        g.bench_function(BenchmarkId::new("pyxbuf_parse", label), |b| {
            b.iter(|| parse_clear(black_box(&cf)))
        });
        g.bench_function(BenchmarkId::new("pyxbuf_itemsize", label), |b| {
            b.iter(|| itemsize(black_box(&cf)))
        });
        let s = pyo3::types::PyString::new(py, &fmt).into_any();
        match try_call(&pep3118, &s) {
            Ok(()) => {
                let f = pep3118.as_ptr();
                let p = s.as_ptr();
                g.bench_function(BenchmarkId::new("numpy_pep3118", label), |b| {
                    b.iter(|| call1(f, p))
                });
            }
            Err(e) => note(
                "skip",
                &format!("format/numpy_pep3118/{label}"),
                &format!("NumPy's parser refuses {fmt:?}: {e}"),
            ),
        }
    }
    g.finish();

    // 6b. Growth with the number of struct fields.
    let mut g = c.benchmark_group("format_fields");
    for n in [1usize, 2, 4, 8, 16, 32, 64] {
        let fmt = numpy_struct_format(n)?;
        let cf = CString::new(fmt.as_str()).expect("no NUL");
        g.bench_function(BenchmarkId::new("pyxbuf_parse", n), |b| {
            b.iter(|| parse_clear(black_box(&cf)))
        });
        let s = pyo3::types::PyString::new(py, &fmt).into_any();
        let (f, p) = (pep3118.as_ptr(), s.as_ptr());
        g.bench_function(BenchmarkId::new("numpy_pep3118", n), |b| {
            b.iter(|| call1(f, p))
        });
    }
    g.finish();
    Ok(())
}

// ---------------------------------------------------------------------------
// 5. Copies on the emulated device vs memcpy; CUDA when a driver is present
// ---------------------------------------------------------------------------

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const COPY_SIZES: [usize; 6] = [4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB, 256 * MIB];

fn size_label(n: usize) -> String {
    if n >= MIB {
        format!("{}MiB", n / MIB)
    } else {
        format!("{}KiB", n / KIB)
    }
}

/// Fewer samples for the big sizes (seconds per run otherwise).
fn size_config(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, n: usize) {
    if n >= 16 * MIB {
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
    } else {
        g.sample_size(50)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
    }
}

/// The staging configuration for one bench: direct copies (`threads` None),
/// or pinned staging with that many fill threads (16 MiB chunks from 8 MiB).
fn staging(threads: Option<u32>) {
    let c = pyxbuf::TransferConfig::current();
    pyxbuf::TransferConfig {
        enabled: threads.is_some(),
        threads: threads.unwrap_or(c.threads),
        threshold: 8 << 20,
        chunk: 16 << 20,
        ..c
    }
    .apply()
    .expect("a valid staging configuration");
}

fn copies(py: Python<'_>, c: &mut Criterion) -> PyResult<()> {
    let saved = pyxbuf::TransferConfig::current();
    let mut g = c.benchmark_group("copy");
    for n in COPY_SIZES {
        // pyxbuf_to_device and pyxbuf_copy_to_host are the direct path (the
        // emulated device has no link to outrun: staging there is two
        // copies); staged_* below are the staging pipeline's CPU side.
        staging(None);
        size_config(&mut g, n);
        g.throughput(Throughput::Bytes(n as u64));
        let label = size_label(n);
        let src = vec![1u8; n];
        let mut dst = vec![0u8; n];
        g.bench_function(BenchmarkId::new("memcpy", &label), |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&src));
                black_box(dst.as_ptr());
            })
        });
        // memcpy into fresh memory: what to_device's allocation adds on the host side.
        g.bench_function(BenchmarkId::new("alloc_memcpy", &label), |b| {
            b.iter(|| black_box(black_box(&src[..]).to_vec()))
        });

        // Host exporter -> emulated device (allocates device memory, copies
        // into it -- a covering write, so the emulated device's lazy poison
        // writes nothing -- and wraps it in a new Exporter; freed on drop).
        let host = exporter(py, c"B", &[n as isize], None)?;
        let mut host_view = sys::pyxbuf_view::default();
        let target = emulated(0);
        // SAFETY: GIL held; released below.
        unsafe {
            assert_eq!(
                sys::pyxbuf_get(host.as_ptr(), &mut host_view, RECORDS_RO),
                0
            );
        }
        g.bench_function(BenchmarkId::new("pyxbuf_to_device", &label), |b| {
            b.iter(|| {
                // SAFETY: GIL held; the view is live; the result is a new reference.
                unsafe {
                    let obj = sys::pyxbuf_to_device(&host_view, &target, 0);
                    assert!(!obj.is_null(), "pyxbuf_to_device failed");
                    pyo3_ffi::Py_DECREF(obj);
                }
            })
        });
        // SAFETY: acquired above.
        unsafe { sys::pyxbuf_release(&mut host_view) };

        // Emulated device -> host buffer.
        let dev = exporter(py, c"B", &[n as isize], Some(target))?;
        let mut dev_view = sys::pyxbuf_view::default();
        // SAFETY: GIL held; released below.
        unsafe {
            assert_eq!(sys::pyxbuf_get(dev.as_ptr(), &mut dev_view, DEVICE_VIEW), 0);
        }
        g.bench_function(BenchmarkId::new("pyxbuf_copy_to_host", &label), |b| {
            b.iter(|| {
                // SAFETY: dst holds exactly n bytes; the view is live.
                let rc = unsafe {
                    sys::pyxbuf_copy_to_host(&dev_view, dst.as_mut_ptr().cast::<c_void>(), n)
                };
                assert_eq!(rc, 0, "pyxbuf_copy_to_host failed");
            })
        });
        // The staging pipeline on the CPU side (issue 40): page-locked pool
        // buffers filled (or drained) by N threads while the emulated device
        // copies the previous chunk; against `memcpy` it shows what the fill
        // threads cost and gain on this machine's cores.
        if n >= 16 * MIB {
            // SAFETY: GIL held; released below.
            unsafe {
                assert_eq!(
                    sys::pyxbuf_get(host.as_ptr(), &mut host_view, RECORDS_RO),
                    0
                );
            }
            for threads in [1, 2] {
                staging(Some(threads));
                g.bench_function(
                    BenchmarkId::new(format!("staged_to_device_{threads}t"), &label),
                    |b| {
                        b.iter(|| {
                            // SAFETY: GIL held; the view is live; a new reference.
                            unsafe {
                                let obj = sys::pyxbuf_to_device(&host_view, &target, 0);
                                assert!(!obj.is_null(), "pyxbuf_to_device failed");
                                pyo3_ffi::Py_DECREF(obj);
                            }
                        })
                    },
                );
            }
            // SAFETY: acquired above.
            unsafe { sys::pyxbuf_release(&mut host_view) };
            // SAFETY: GIL held; released below.
            unsafe {
                assert_eq!(sys::pyxbuf_get(dev.as_ptr(), &mut dev_view, DEVICE_VIEW), 0);
            }
            for threads in [1, 2] {
                staging(Some(threads));
                g.bench_function(
                    BenchmarkId::new(format!("staged_copy_to_host_{threads}t"), &label),
                    |b| {
                        b.iter(|| {
                            // SAFETY: dst holds exactly n bytes; the view is live.
                            let rc = unsafe {
                                sys::pyxbuf_copy_to_host(
                                    &dev_view,
                                    dst.as_mut_ptr().cast::<c_void>(),
                                    n,
                                )
                            };
                            assert_eq!(rc, 0, "pyxbuf_copy_to_host failed");
                        })
                    },
                );
            }
            // SAFETY: acquired above.
            unsafe { sys::pyxbuf_release(&mut dev_view) };
        }
    }
    g.finish();
    saved.apply().expect("the saved configuration");
    cuda_copies(py, c)
}

/// The CUDA Driver API calls the raw peer needs.
struct Cuda {
    _lib: libloading::Library,
    memcpy_htod: unsafe extern "C" fn(u64, *const c_void, usize) -> i32,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> i32,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> i32,
    mem_free: unsafe extern "C" fn(u64) -> i32,
}

fn load_cuda() -> Result<Cuda, String> {
    // SAFETY: loading the CUDA driver runs its initialisers, as pyxbuf's own
    // backend does; the symbols are the documented Driver API signatures.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1")
            .map_err(|e| format!("no CUDA driver (libcuda.so.1: {e})"))?;
        let init: libloading::Symbol<'_, unsafe extern "C" fn(u32) -> i32> =
            lib.get(b"cuInit\0").map_err(|e| e.to_string())?;
        let rc = init(0);
        if rc != 0 {
            return Err(format!("cuInit failed with CUresult {rc}"));
        }
        let device_get: libloading::Symbol<'_, unsafe extern "C" fn(*mut i32, i32) -> i32> =
            lib.get(b"cuDeviceGet\0").map_err(|e| e.to_string())?;
        let mut dev = 0i32;
        let rc = device_get(&mut dev, 0);
        if rc != 0 {
            return Err(format!("cuDeviceGet(0) failed with CUresult {rc}"));
        }
        let retain: libloading::Symbol<'_, unsafe extern "C" fn(*mut *mut c_void, i32) -> i32> =
            lib.get(b"cuDevicePrimaryCtxRetain\0")
                .map_err(|e| e.to_string())?;
        let mut ctx = std::ptr::null_mut();
        let rc = retain(&mut ctx, dev);
        if rc != 0 {
            return Err(format!(
                "cuDevicePrimaryCtxRetain failed with CUresult {rc}"
            ));
        }
        let set: libloading::Symbol<'_, unsafe extern "C" fn(*mut c_void) -> i32> =
            lib.get(b"cuCtxSetCurrent\0").map_err(|e| e.to_string())?;
        set(ctx);
        let memcpy_htod = *lib.get(b"cuMemcpyHtoD_v2\0").map_err(|e| e.to_string())?;
        let memcpy_dtoh = *lib.get(b"cuMemcpyDtoH_v2\0").map_err(|e| e.to_string())?;
        let mem_alloc = *lib.get(b"cuMemAlloc_v2\0").map_err(|e| e.to_string())?;
        let mem_free = *lib.get(b"cuMemFree_v2\0").map_err(|e| e.to_string())?;
        Ok(Cuda {
            _lib: lib,
            memcpy_htod,
            memcpy_dtoh,
            mem_alloc,
            mem_free,
        })
    }
}

fn cuda_copies(py: Python<'_>, c: &mut Criterion) -> PyResult<()> {
    let cuda = match load_cuda() {
        Ok(cuda) => cuda,
        Err(why) => {
            note("skip", "cuda_copy", &why);
            return Ok(());
        }
    };
    let target = sys::pyxbuf_device {
        device_type: sys::PYXBUF_DL_CUDA,
        device_id: 0,
    };
    let mut g = c.benchmark_group("cuda_copy");
    for n in [4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB, 1024 * MIB] {
        size_config(&mut g, n);
        g.throughput(Throughput::Bytes(n as u64));
        let label = size_label(n);
        let src = vec![1u8; n];
        let mut dst = vec![0u8; n];
        let mut dptr = 0u64;
        // SAFETY: a current context was set by load_cuda.
        let rc = unsafe { (cuda.mem_alloc)(&mut dptr, n) };
        if rc != 0 {
            note(
                "skip",
                &format!("cuda_copy/{label}"),
                &format!("cuMemAlloc: {rc}"),
            );
            continue;
        }
        g.bench_function(BenchmarkId::new("cuMemAlloc_HtoD_Free", &label), |b| {
            b.iter(|| {
                let mut p = 0u64;
                // SAFETY: sizes match; p is freed at once.
                unsafe {
                    assert_eq!((cuda.mem_alloc)(&mut p, n), 0);
                    assert_eq!((cuda.memcpy_htod)(p, src.as_ptr().cast(), n), 0);
                    assert_eq!((cuda.mem_free)(p), 0);
                }
            })
        });
        g.bench_function(BenchmarkId::new("cuMemcpyHtoD", &label), |b| {
            // SAFETY: dptr holds n bytes.
            b.iter(|| unsafe { assert_eq!((cuda.memcpy_htod)(dptr, src.as_ptr().cast(), n), 0) })
        });
        g.bench_function(BenchmarkId::new("cuMemcpyDtoH", &label), |b| {
            // SAFETY: dptr holds n bytes, dst too.
            b.iter(|| unsafe {
                assert_eq!((cuda.memcpy_dtoh)(dst.as_mut_ptr().cast(), dptr, n), 0)
            })
        });
        // SAFETY: allocated above.
        unsafe { (cuda.mem_free)(dptr) };

        let host = exporter(py, c"B", &[n as isize], None)?;
        let mut host_view = sys::pyxbuf_view::default();
        // SAFETY: GIL held; released below.
        unsafe {
            assert_eq!(
                sys::pyxbuf_get(host.as_ptr(), &mut host_view, RECORDS_RO),
                0
            )
        };
        g.bench_function(BenchmarkId::new("pyxbuf_to_device", &label), |b| {
            b.iter(|| {
                // SAFETY: GIL held; the view is live; the result is a new reference.
                unsafe {
                    let obj = sys::pyxbuf_to_device(&host_view, &target, 0);
                    assert!(!obj.is_null(), "pyxbuf_to_device failed");
                    pyo3_ffi::Py_DECREF(obj);
                }
            })
        });
        // SAFETY: GIL held; the result is a new reference.
        let dev = unsafe {
            Bound::from_owned_ptr_or_err(py, sys::pyxbuf_to_device(&host_view, &target, 0))?
        };
        // SAFETY: acquired above.
        unsafe { sys::pyxbuf_release(&mut host_view) };
        let mut dev_view = sys::pyxbuf_view::default();
        // SAFETY: GIL held; released below.
        unsafe { assert_eq!(sys::pyxbuf_get(dev.as_ptr(), &mut dev_view, DEVICE_VIEW), 0) };
        g.bench_function(BenchmarkId::new("pyxbuf_copy_to_host", &label), |b| {
            b.iter(|| {
                // SAFETY: dst holds exactly n bytes; the view is live.
                let rc = unsafe {
                    sys::pyxbuf_copy_to_host(&dev_view, dst.as_mut_ptr().cast::<c_void>(), n)
                };
                assert_eq!(rc, 0, "pyxbuf_copy_to_host failed");
            })
        });
        // SAFETY: acquired above.
        unsafe { sys::pyxbuf_release(&mut dev_view) };
    }
    g.finish();
    Ok(())
}

// ---------------------------------------------------------------------------
// 6a. Growth of acquisition with ndim
// ---------------------------------------------------------------------------

fn ndim(py: Python<'_>, c: &mut Criterion) -> PyResult<()> {
    let np = py.import("numpy")?;
    let mut g = c.benchmark_group("acquire_ndim");
    for n in [1usize, 2, 4, 8, 9, 16, 32, 64] {
        let shape = PyTuple::new(py, std::iter::repeat_n(1usize, n))?;
        let a = np.call_method1("zeros", (shape, "float32"))?;
        let ptr = a.as_ptr();
        g.bench_function(BenchmarkId::new("PyObject_GetBuffer", n), |b| {
            let mut view = pyo3_ffi::Py_buffer::new();
            b.iter(|| classic_cycle(ptr, &mut view, RECORDS_RO))
        });
        g.bench_function(BenchmarkId::new("pyxbuf_get", n), |b| {
            let mut view = sys::pyxbuf_view::default();
            b.iter(|| pyxbuf_cycle(ptr, &mut view, DEVICE_VIEW))
        });
    }
    g.finish();
    Ok(())
}

fn main() {
    register_emulated();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
        .configure_from_args();
    let r = Python::attach(|py| -> PyResult<()> {
        setup_python(py)?;
        let fx = fixtures(py)?;
        // PYXBUF_BENCH_GROUPS=acquire,format skips the other groups' setup
        // too (Criterion's filter skips only their measurement): for
        // profiling one benchmark under valgrind.
        let only = std::env::var("PYXBUF_BENCH_GROUPS").ok();
        let want = |g: &str| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == g));
        if want("acquire") {
            acquisition(py, &mut c)?;
        }
        if want("dlpack") {
            dlpack(py, &mut c, &fx)?;
        }
        if want("cai") {
            cai(py, &mut c, &fx)?;
        }
        if want("format") {
            formats(py, &mut c, &fx)?;
        }
        if want("acquire_ndim") {
            ndim(py, &mut c)?;
        }
        if want("copy") {
            copies(py, &mut c)?;
        }
        Ok(())
    });
    write_notes();
    if let Err(e) = r {
        panic!("benchmark setup failed: {e}");
    }
    c.final_summary();
}
