//! The static library links and works: pure-C entry points, then a round
//! trip through an embedded interpreter with the raw API.

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::ptr;

use pyxbuf_sys::*;

#[test]
fn version_and_layout() {
    // SAFETY: pure C functions without preconditions.
    unsafe {
        assert_eq!(pyxbuf_abi_version(), PYXBUF_ABI_VERSION);
        let v = CStr::from_ptr(pyxbuf_version_string()).to_str().unwrap();
        let want = format!("{PYXBUF_VERSION_MAJOR}.{PYXBUF_VERSION_MINOR}.{PYXBUF_VERSION_PATCH}");
        assert_eq!(v, want);
    }
    #[cfg(target_pointer_width = "64")]
    assert_eq!(std::mem::size_of::<pyxbuf_view>(), 296);
    assert_eq!(
        std::mem::offset_of!(pyxbuf_view, flags),
        std::mem::size_of::<Py_buffer>()
    );
}

#[test]
fn format_parse_without_python() {
    let mut f = MaybeUninit::<pyxbuf_format>::zeroed();
    let mut err = pyxbuf_error::default();
    // SAFETY: a NUL-terminated format, an output descriptor and an error
    // struct that outlive the calls; the descriptor is cleared once.
    unsafe {
        let rc = pyxbuf_format_parse(c"<d".as_ptr(), f.as_mut_ptr(), &mut err);
        assert_eq!(rc, 0);
        let f = f.assume_init_mut();
        assert_eq!(f.itemsize, 8);
        let node = &*pyxbuf_format_nodes(f).add(1);
        assert_eq!(node.kind, PYXBUF_FMT_SCALAR);
        assert_eq!(node.code, b'd' as i32);
        assert_eq!(node.byte_order, PYXBUF_ORDER_LITTLE as i32);
        pyxbuf_format_clear(f);
        let rc = pyxbuf_format_parse(c"T{".as_ptr(), f, &mut err);
        assert_eq!(rc, PYXBUF_EFORMAT);
    }
    let msg = CStr::from_bytes_until_nul(unsafe {
        // SAFETY: c_char and u8 have the same layout.
        &*(&err.message[..] as *const [std::os::raw::c_char] as *const [u8])
    })
    .unwrap();
    assert!(!msg.to_bytes().is_empty());
}

#[test]
fn exporter_round_trip_in_an_embedded_interpreter() {
    // SAFETY: the interpreter is initialised once in this test binary (this is
    // its only test that touches Python) and every call below runs with the
    // GIL held by this thread; the view is released once.
    unsafe {
        pyo3_ffi::Py_InitializeEx(0);
        let shape: [Py_ssize_t; 2] = [2, 3];
        let e = pyxbuf_exporter_new(c"<f".as_ptr(), 2, shape.as_ptr(), 0, ptr::null());
        assert!(!e.is_null());
        let mut view = MaybeUninit::<pyxbuf_view>::zeroed();
        let flags = pyo3_ffi::PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED;
        assert_eq!(pyxbuf_get(e, view.as_mut_ptr(), flags), 0);
        let v = view.assume_init_mut();
        assert_eq!(v.path, PYXBUF_PATH_NATIVE);
        assert_eq!(v.ext_flags, PYXBUF_EXT_SHARED);
        assert_eq!(v.base.itemsize, 4);
        assert_eq!(*v.base.shape.add(1), 3);
        assert_eq!(pyxbuf_view_is_acquired(v), 1);
        pyxbuf_release(v);
        assert_eq!(pyxbuf_view_is_acquired(v), 0);
        pyo3_ffi::Py_DecRef(e);
    }
}

#[cfg(feature = "emulated-device")]
#[test]
fn emulated_registers() {
    let mut err = pyxbuf_error::default();
    // SAFETY: registration needs no GIL; err outlives the call.
    let rc = unsafe { emulated::pyxbuf_emulated_register(&mut err) };
    assert_eq!(rc, 0);
    let mut b = MaybeUninit::<pyxbuf_backend>::zeroed();
    // SAFETY: out-pointer valid for the call.
    let rc = unsafe { pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, b.as_mut_ptr(), &mut err) };
    assert_eq!(rc, 0);
}
