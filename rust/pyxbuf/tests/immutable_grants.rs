//! Issue 50, item 2: the GIL-release path of a crate that hashes buffers.
//! Memory that lies in an exact `bytes` object (the bytes, a read-only
//! memoryview of them, `np.frombuffer(b)`) gets an *enforced* shared grant,
//! so `require_enforced` accepts it and the slice may be read with the GIL
//! released; every mutable producer (and the read-only views of one, a
//! bytes subclass, a read-only mmap) keeps a tracked grant, which
//! `require_enforced` refuses.

mod common;

use common::{eval, numpy_2};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyxbuf::PyXBuffer;

/// What a hashing crate does: an enforced borrow, then the bytes read with
/// the GIL released.
fn checksum_detached(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    let buf = PyXBuffer::<u8>::request().require_enforced().get(obj)?;
    let bytes = buf.as_slice().expect("an enforced grant gives a slice");
    Ok(obj
        .py()
        .detach(|| bytes.iter().map(|&b| u64::from(b)).sum()))
}

#[test]
fn immutable_memory_is_enforced_and_read_without_the_gil() {
    Python::attach(|py| {
        let b = eval(py, "bytes(range(200))", &[]);
        let want: u64 = (0..200u64).sum();
        let mut cases = vec![
            ("b", b.clone()),
            ("memoryview(b)", eval(py, "memoryview(b)", &[("b", &b)])),
            (
                "memoryview(b).toreadonly()",
                eval(py, "memoryview(b).toreadonly()", &[("b", &b)]),
            ),
        ];
        if numpy_2(py) {
            cases.push((
                "np.frombuffer(b)",
                eval(py, "np.frombuffer(b, np.uint8)", &[("b", &b)]),
            ));
            cases.push((
                "memoryview(np.frombuffer(b))",
                eval(py, "memoryview(np.frombuffer(b, np.uint8))", &[("b", &b)]),
            ));
        }
        for (name, obj) in cases {
            let buf = PyXBuffer::<u8>::request()
                .require_enforced()
                .get(&obj)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let g = buf.grants();
            assert!(g.shared() && g.is_enforced() && !g.tracked(), "{name}");
            drop(buf);
            assert_eq!(checksum_detached(&obj).unwrap(), want, "{name}");
        }
    });
}

#[test]
fn mutable_memory_stays_tracked_and_require_enforced_refuses_it() {
    Python::attach(|py| {
        let dir = std::env::temp_dir().join(format!("pyxbuf-immutable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data.bin");
        std::fs::write(&path, vec![7u8; 64]).unwrap();
        let cases = [
            "bytearray(64)",
            "array.array('B', bytes(64))",
            "Sub(bytes(64))",
            "memoryview(bytearray(64)).toreadonly()",
            "np.frombuffer(bytearray(64), np.uint8)",
            "m",
        ];
        let setup = "import array, mmap\nclass Sub(bytes): pass\n\
                     f = open(path, 'rb')\n\
                     m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n";
        let globals = PyDict::new(py);
        globals.set_item("np", py.import("numpy").unwrap()).unwrap();
        globals.set_item("path", path.to_str().unwrap()).unwrap();
        py.run(
            &std::ffi::CString::new(setup).unwrap(),
            Some(&globals),
            None,
        )
        .unwrap();
        for expr in cases {
            let obj = py
                .eval(&std::ffi::CString::new(expr).unwrap(), Some(&globals), None)
                .unwrap();
            let buf = PyXBuffer::<u8>::get(&obj).unwrap_or_else(|e| panic!("{expr}: {e}"));
            assert!(buf.grants().tracked(), "{expr}");
            drop(buf);
            let err = PyXBuffer::<u8>::request()
                .require_enforced()
                .get(&obj)
                .unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py), "{expr}: {err}");
            assert!(
                err.to_string().contains("a tracked shared borrow"),
                "{expr}: {err}"
            );
        }
        let m = globals.get_item("m").unwrap().unwrap();
        m.call_method0("close").unwrap();
        let f = globals.get_item("f").unwrap().unwrap();
        f.call_method0("close").unwrap();
        std::fs::remove_dir_all(&dir).ok();
    });
}
