//! The `pyxbuf` Python module: what libpyxbuf sees in any object
//! (`inspect`), Array-API device moves (`to_device`), zero-copy imports
//! (`from_dlpack`), and test producers (`exporter`: pyxbuf's borrow-counting
//! exporter on the host or, with the `emulated-device` feature, on the
//! guarded emulated device).
//!
//! ```python
//! import numpy as np, pyxbuf
//! pyxbuf.inspect(np.arange(6, dtype=np.float32).reshape(2, 3))["format_parsed"]["itemsize"]  # 4
//! d = pyxbuf.to_device(np.ones(4, np.float32), "ext_dev:0")    # emulated-device copy
//! pyxbuf.inspect(d)["device"]                                  # 'ext_dev:0'
//! ```

use std::ffi::{c_char, CStr};
use std::mem::MaybeUninit;
use std::ptr;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use pyxbuf::sys;

/// The default request of `inspect` and friends: strides, format, device
/// memory accepted, read-only, no borrow.
const DEFAULT_FLAGS: i32 = ffi::PyBUF_RECORDS_RO | sys::PYXBUF_DEVICE;

/// Releases the view it guards, also when the code using it panics.
struct Held<'a>(&'a mut sys::pyxbuf_view);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // SAFETY: the view was acquired in place and is released once, here,
        // with the thread attached (we are inside a #[pyfunction]).
        unsafe { sys::pyxbuf_release(self.0) };
    }
}

/// Acquire a view of `obj` in place (it never moves, so self-referential
/// views stay valid), run `f`, release.
fn with_view<R>(
    obj: &Bound<'_, PyAny>,
    flags: i32,
    stream: Option<i64>,
    f: impl FnOnce(&sys::pyxbuf_view) -> PyResult<R>,
) -> PyResult<R> {
    let mut view = MaybeUninit::<sys::pyxbuf_view>::zeroed();
    // SAFETY: a live object, writable storage for the view, attached thread.
    let rc = unsafe {
        match stream {
            None => sys::pyxbuf_get(obj.as_ptr(), view.as_mut_ptr(), flags),
            Some(s) => sys::pyxbuf_get_stream(obj.as_ptr(), view.as_mut_ptr(), flags, s),
        }
    };
    if rc != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    // SAFETY: zeroed, then filled by a successful pyxbuf_get.
    let held = Held(unsafe { view.assume_init_mut() });
    f(held.0)
}

fn cstr(p: *const c_char) -> Option<String> {
    // SAFETY: NULL or a NUL-terminated string owned by the view or the library.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The view's device as DLPack integers ({CPU, 0} for host memory), or None
/// when its identifier is not one pyxbuf reads (a foreign producer's own,
/// such as "my_accel:0"): pyxbuf cannot tell which device that is.
fn device_of(v: &sys::pyxbuf_view) -> Option<(i32, i32)> {
    let mut d = sys::pyxbuf_device {
        device_type: sys::PYXBUF_DL_CPU,
        device_id: 0,
    };
    // SAFETY: an acquired view, an out-pointer and no error record (NULL).
    let rc = unsafe { sys::pyxbuf_view_device(v, &mut d, ptr::null_mut()) };
    (rc == 0).then_some((d.device_type, d.device_id))
}

fn device_name(device_type: i32, device_id: i32) -> String {
    pyxbuf::Device::from_dlpack(device_type, device_id).to_string()
}

/// "cpu", "cuda", "cuda:1", "ext_dev:0", ... or a (device_type, device_id) tuple.
fn parse_device(arg: &Bound<'_, PyAny>) -> PyResult<sys::pyxbuf_device> {
    if let Ok((device_type, device_id)) = arg.extract::<(i32, i32)>() {
        return Ok(sys::pyxbuf_device {
            device_type,
            device_id,
        });
    }
    let text: String = arg.str()?.extract()?;
    let (name, id) = match text.split_once(':') {
        Some((n, i)) => (
            n,
            i.parse::<i32>().map_err(|_| {
                PyValueError::new_err(format!("pyxbuf: bad device ordinal in '{text}'"))
            })?,
        ),
        None => (text.as_str(), 0),
    };
    for t in 1..64 {
        // SAFETY: returns a static string for any integer.
        let known = unsafe { CStr::from_ptr(sys::pyxbuf_device_type_name(t)) };
        if known.to_bytes() == name.as_bytes() && name != "unknown" {
            return Ok(sys::pyxbuf_device {
                device_type: t,
                device_id: id,
            });
        }
    }
    Err(PyValueError::new_err(format!(
        "pyxbuf: unknown device '{text}'; write it as 'cpu', 'cuda:0', 'ext_dev:0', ... or a \
         (device_type, device_id) tuple"
    )))
}

fn order_name(order: i32) -> String {
    char::from_u32(order as u32).map_or_else(String::new, String::from)
}

/// The parsed form of a format: item size, alignment, canonical string and
/// its fields (kind, code, byte order, offset, size, count, sub-array shape,
/// name, custom type).
fn parsed_format<'py>(py: Python<'py>, format: *const c_char) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let mut f = MaybeUninit::<sys::pyxbuf_format>::zeroed();
    let mut err = sys::pyxbuf_error::default();
    // SAFETY: a NUL-terminated string (or NULL = "B") alive for the call; on
    // failure nothing needs freeing.
    let rc = unsafe { sys::pyxbuf_format_parse(format, f.as_mut_ptr(), &mut err) };
    if rc != 0 {
        let msg: Vec<u8> = err
            .message
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        out.set_item("error", String::from_utf8_lossy(&msg))?;
        return Ok(out);
    }
    // SAFETY: parse succeeded.
    let f = unsafe { f.assume_init_mut() };
    let mut text = [0u8; 512];
    let mut len = 0usize;
    // SAFETY: a parsed descriptor and a buffer of the stated capacity.
    if unsafe {
        sys::pyxbuf_format_write(
            f,
            text.as_mut_ptr().cast(),
            text.len(),
            &mut len,
            ptr::null_mut(),
        )
    } == 0
    {
        out.set_item("canonical", String::from_utf8_lossy(&text[..len]))?;
    }
    out.set_item("itemsize", f.itemsize)?;
    out.set_item("alignment", f.alignment)?;
    // SAFETY: the descriptor's nodes and dims, alive until it is cleared.
    let (nodes, dims) = unsafe {
        (
            std::slice::from_raw_parts(sys::pyxbuf_format_nodes(f), f.nnodes as usize),
            std::slice::from_raw_parts(sys::pyxbuf_format_dims(f), f.ndims as usize),
        )
    };
    let kinds = ["root", "scalar", "struct", "custom", "padding"];
    let fields = PyList::empty(py);
    for n in nodes.iter().skip(1) {
        let d = PyDict::new(py);
        d.set_item("kind", kinds.get(n.kind as usize).copied().unwrap_or("?"))?;
        if n.kind == sys::PYXBUF_FMT_SCALAR {
            d.set_item("code", order_name(n.code))?;
        }
        d.set_item("byte_order", order_name(n.byte_order))?;
        d.set_item("parent", n.parent)?;
        d.set_item("offset", n.offset)?;
        d.set_item("itemsize", n.itemsize)?;
        d.set_item("repeat", n.repeat)?;
        d.set_item("complex", n.flags & sys::PYXBUF_FMTN_COMPLEX != 0)?;
        let shape: Vec<i64> = dims
            .get(n.dims_start.max(0) as usize..)
            .map(|d| d.iter().take(n.ndim.max(0) as usize).copied().collect())
            .unwrap_or_default();
        d.set_item("shape", PyTuple::new(py, shape)?)?;
        let slice = |p: *const c_char, len: i32| -> Option<String> {
            // SAFETY: the descriptor points into the parsed string for `len`
            // bytes while it lives.
            (!p.is_null() && len > 0).then(|| {
                String::from_utf8_lossy(unsafe {
                    std::slice::from_raw_parts(p.cast::<u8>(), len as usize)
                })
                .into_owned()
            })
        };
        d.set_item("name", slice(n.name, n.name_len))?;
        if n.kind == sys::PYXBUF_FMT_CUSTOM {
            d.set_item("custom", slice(n.custom, n.custom_len))?;
            d.set_item("opaque", n.flags & sys::PYXBUF_FMTN_OPAQUE != 0)?;
        }
        fields.append(d)?;
    }
    out.set_item("fields", fields)?;
    // SAFETY: parsed above, cleared once.
    unsafe { sys::pyxbuf_format_clear(f) };
    Ok(out)
}

/// Acquire `obj` through pyxbuf and describe the view.
///
/// `flags` is the request: PyBUF_* and PYXBUF_* bits of this module; None
/// asks for PyBUF_RECORDS_RO | PYXBUF_DEVICE (strides, format, device memory
/// accepted, read-only, no borrow). `stream` is the consumer's stream for
/// device memory, in DLPack's integer convention (None: no stream, so
/// producers order their work before the default stream).
///
/// Returns a dict: `path` (the protocol pyxbuf read), `device` ('cpu',
/// 'cuda:0', 'ext_dev:0', ..., or a foreign producer's own identifier as it
/// gave it), `device_identifier` (the view's raw identifier, None for host
/// memory), `device_type` and `device_id` (DLPack's integers; None when the
/// identifier is foreign), `format`, `format_parsed`, `itemsize`, `ndim`,
/// `data` (the first item's address, host or device), `len`, `readonly`,
/// `shape`, `strides`, `requested_flags` (the request:
/// `flags` or its default), `honoured_extended_flags` (the extended request
/// bits the producer honoured: PYXBUF_DEVICE when it set a device,
/// PYXBUF_BORROW_*, PYXBUF_TEMPORARY), `grant_flags` (PYXBUF_EXT_* bits) and
/// `grants` (the same as booleans); for a DLPack device view also
/// `sync_event` and `producer_stream`.
#[pyfunction]
#[pyo3(signature = (obj, flags = None, stream = None))]
fn inspect<'py>(
    obj: &Bound<'py, PyAny>,
    flags: Option<i32>,
    stream: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let py = obj.py();
    with_view(obj, flags.unwrap_or(DEFAULT_FLAGS), stream, |v| {
        let d = PyDict::new(py);
        // SAFETY: returns a static string.
        d.set_item("path", cstr(unsafe { sys::pyxbuf_path_name(v.path) }))?;
        let identifier = cstr(v.device);
        let dlpack = device_of(v);
        let device = match (&identifier, dlpack) {
            (None, _) => "cpu".to_owned(),
            (Some(_), Some((device_type, device_id))) => device_name(device_type, device_id),
            (Some(foreign), None) => foreign.clone(),
        };
        d.set_item("device", device)?;
        d.set_item("device_identifier", &identifier)?;
        d.set_item("device_type", dlpack.map(|(t, _)| t))?;
        d.set_item("device_id", dlpack.map(|(_, i)| i))?;
        let b = &v.base;
        d.set_item("format", cstr(b.format).unwrap_or_else(|| "B".to_owned()))?;
        d.set_item("format_parsed", parsed_format(py, b.format)?)?;
        d.set_item("itemsize", b.itemsize)?;
        d.set_item("ndim", b.ndim)?;
        d.set_item("data", b.buf as usize)?;
        d.set_item("len", b.len)?;
        d.set_item("readonly", b.readonly != 0)?;
        let ndim = b.ndim.max(0) as usize;
        // SAFETY: an acquired view's shape/strides have ndim entries (or are
        // NULL); the view has not moved since the producer filled it.
        let (shape, strides) = unsafe {
            (
                (!b.shape.is_null()).then(|| std::slice::from_raw_parts(b.shape, ndim).to_vec()),
                (!b.strides.is_null())
                    .then(|| std::slice::from_raw_parts(b.strides, ndim).to_vec()),
            )
        };
        d.set_item("shape", shape.map(|s| PyTuple::new(py, s)).transpose()?)?;
        d.set_item("strides", strides.map(|s| PyTuple::new(py, s)).transpose()?)?;
        d.set_item("requested_flags", v.requested)?;
        d.set_item("honoured_extended_flags", v.flags)?;
        d.set_item("grant_flags", v.ext_flags)?;
        let g = pyxbuf::Grants::from_view(v.flags, v.ext_flags);
        let grants = PyDict::new(py);
        grants.set_item("shared", g.shared())?;
        grants.set_item("exclusive", g.exclusive())?;
        grants.set_item("tracked", g.tracked())?;
        d.set_item("grants", grants)?;
        if !v.device_info.is_null() && identifier.as_deref() == Some("pyxbuf.dlpack") {
            // SAFETY: a "pyxbuf.dlpack" device's info is a pyxbuf_device_info.
            let info = unsafe { &*v.device_info.cast::<sys::pyxbuf_device_info>() };
            d.set_item("sync_event", !info.sync_event.is_null())?;
            d.set_item("producer_stream", info.stream)?;
        }
        Ok(d)
    })
}

/// The Array API's `to_device`: `obj` itself when it already lives on
/// `device`, else a new `pyxbuf.Exporter` holding a C-order copy there.
///
/// `device` is 'cpu', 'cuda', 'cuda:1', 'ext_dev:0', ... or a (device_type,
/// device_id) tuple of DLPack's integers. `stream` is the stream the copy
/// runs on (None: the device's default stream); a device result's memory is
/// freed in that stream's order when it dies, so the stream must outlive it.
#[pyfunction]
#[pyo3(signature = (obj, device, stream = None))]
fn to_device<'py>(
    obj: &Bound<'py, PyAny>,
    device: &Bound<'py, PyAny>,
    stream: Option<i64>,
) -> PyResult<Bound<'py, PyAny>> {
    let target = parse_device(device)?;
    let stream = stream.unwrap_or(sys::PYXBUF_STREAM_DEFAULT);
    with_view(obj, DEFAULT_FLAGS, None, |v| {
        // SAFETY: an acquired view and a device; new reference or NULL + error.
        unsafe { Bound::from_owned_ptr_or_err(obj.py(), sys::pyxbuf_to_device(v, &target, stream)) }
    })
}

/// A zero-copy `pyxbuf.Exporter` over `obj`'s memory (host or device), from
/// whatever protocol pyxbuf reads it through (DLPack, the CUDA Array
/// Interface, the classic buffer, `__array_interface__`). The exporter keeps
/// `obj`'s view alive and exports it through the extended protocol with
/// borrow counting.
///
/// The exporter holds a borrow of `obj`'s memory for its whole life: shared
/// when `writable` is false (the exporter is then read-only, whatever `obj`
/// allows), exclusive when it is true. So no pyxbuf consumer can write `obj`
/// while the exporter hands out shared borrows, nor touch it at all while it
/// hands out an exclusive one. When `obj`'s producer enforces borrows
/// (pyxbuf's exporters), nobody can; when the borrow is tracked (NumPy and
/// other classic producers), Python code that bypasses pyxbuf still can, as
/// for any tracked grant. A producer that grants no borrow is refused.
///
/// `stream` is the consumer's stream for device memory, in DLPack's integer
/// convention (None: no stream, so producers order their work before the
/// default stream).
#[pyfunction]
#[pyo3(signature = (obj, writable = false, stream = None))]
fn from_dlpack<'py>(
    obj: &Bound<'py, PyAny>,
    writable: bool,
    stream: Option<i64>,
) -> PyResult<Bound<'py, PyAny>> {
    pyxbuf::export::wrap(obj, writable, stream)
}

/// A test producer: a new `pyxbuf.Exporter` owning zeroed host memory (or,
/// on a device, backend-allocated memory whose contents are undefined — the
/// emulated device fills it with 0xDB), exporting it through the extended
/// protocol with borrow counting.
///
/// `shape` is a sequence of item counts, `format` a buffer format string of
/// one item, `device` 'cpu', 'cuda:0', 'ext_dev:0', ... or a (device_type,
/// device_id) tuple, `readonly` whether the exporter refuses writable views.
#[pyfunction]
#[pyo3(
    signature = (shape, format = "B", device = None, readonly = false),
    text_signature = "(shape, format='B', device='cpu', readonly=False)"
)]
fn exporter<'py>(
    py: Python<'py>,
    shape: Vec<isize>,
    format: &str,
    device: Option<&Bound<'py, PyAny>>,
    readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let device = match device {
        Some(d) => parse_device(d)?,
        None => sys::pyxbuf_device {
            device_type: sys::PYXBUF_DL_CPU,
            device_id: 0,
        },
    };
    let format =
        std::ffi::CString::new(format).map_err(|_| PyTypeError::new_err("format contains NUL"))?;
    // SAFETY: a NUL-terminated format, shape.len() dims, a device; new
    // reference or NULL with an exception set.
    unsafe {
        let e = sys::pyxbuf_exporter_new(
            format.as_ptr(),
            shape.len() as i32,
            shape.as_ptr(),
            i32::from(readonly),
            &device,
        );
        Bound::from_owned_ptr_or_err(py, e)
    }
}

/// A zero-copy `pyxbuf.Exporter` over another object's memory: items of
/// `format` with `shape` (None: as many as fit after `offset`, 1-D) and byte
/// `strides` (None: C order), the first one `offset` bytes in; `itemsize`
/// bytes each (0: the format's size; given, a custom type this process has
/// not registered is held too, as unpickling needs). The exporter
/// holds a view of `buffer` while it lives, and is writable when `buffer` is
/// and `readonly` is false.
///
/// `buffer` is any buffer (bytes, bytearray, memoryview, mmap, a NumPy array)
/// or a `multiprocessing.shared_memory.SharedMemory`, which the exporter
/// pickles by its name, so that worker processes fill one array in place.
/// Memory shared with other processes (a SharedMemory, or
/// `process_shared` true) gets no borrow grant: nothing in one process can
/// stop another's writes.
#[pyfunction]
#[pyo3(
    signature = (buffer, format = "B", shape = None, *, offset = 0, strides = None, itemsize = 0, readonly = false, process_shared = false),
    text_signature = "(buffer, format='B', shape=None, *, offset=0, strides=None, itemsize=0, readonly=False, process_shared=False)"
)]
#[allow(clippy::too_many_arguments)]
fn frombuffer<'py>(
    py: Python<'py>,
    buffer: &Bound<'py, PyAny>,
    format: &str,
    shape: Option<Vec<isize>>,
    offset: isize,
    strides: Option<Vec<isize>>,
    itemsize: isize,
    readonly: bool,
    process_shared: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let cformat =
        std::ffi::CString::new(format).map_err(|_| PyTypeError::new_err("format contains NUL"))?;
    // No shape: 1-D, as many items as fit (libpyxbuf counts them).
    let ndim = shape.as_ref().map_or(1, Vec::len);
    if let Some(s) = &strides {
        if s.len() != ndim {
            return Err(PyValueError::new_err(format!(
                "pyxbuf.frombuffer: {} strides for {} dimensions; give one stride per dimension",
                s.len(),
                ndim
            )));
        }
    }
    let mut options = 0;
    if readonly {
        options |= sys::PYXBUF_OVER_READONLY;
    }
    if process_shared {
        options |= sys::PYXBUF_OVER_PROCESS_SHARED;
    }
    // SAFETY: a live object, a NUL-terminated format, ndim dims of shape (or
    // NULL at ndim 1) and as many strides (or NULL); new reference or NULL
    // with an exception set.
    unsafe {
        let e = sys::pyxbuf_exporter_over(
            buffer.as_ptr(),
            offset,
            cformat.as_ptr(),
            itemsize,
            ndim as i32,
            shape.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
            strides.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
            options,
        );
        Bound::from_owned_ptr_or_err(py, e)
    }
}

/// `obj`'s device memory shared with another process on this machine, no
/// copy: `(device, handle, fd)`, the handle's bytes naming the allocation
/// (the backend's IPC: CUDA's handles, the emulated device's memfd) and `fd`
/// a descriptor that must travel with them (a duplicate, sent by SCM_RIGHTS;
/// pyxbuf keeps this one open), or -1. The host first waits for the
/// producer's event, so its writes happen before the handle leaves. What
/// `pyxbuf.multiprocessing` sends for a device array; the exporting process
/// keeps `obj` alive while the other process uses it.
#[pyfunction]
fn _share_device<'py>(obj: &Bound<'py, PyAny>) -> PyResult<(String, Bound<'py, PyBytes>, i32)> {
    let py = obj.py();
    let mut device = sys::pyxbuf_device {
        device_type: 0,
        device_id: 0,
    };
    let mut handle = [0u8; sys::PYXBUF_IPC_HANDLE_MAX as usize];
    let mut len: usize = 0;
    let mut fd: i32 = -1;
    // SAFETY: a live object; out-pointers valid for the call, `handle` holds
    // PYXBUF_IPC_HANDLE_MAX bytes; -1 means an exception is set.
    let rc = unsafe {
        sys::pyxbuf_device_share(
            obj.as_ptr(),
            &mut device,
            handle.as_mut_ptr().cast(),
            &mut len,
            &mut fd,
        )
    };
    if rc != 0 {
        return Err(PyErr::fetch(py));
    }
    let mut name = [0 as c_char; 64];
    // SAFETY: a valid device and a 64-byte buffer it writes a NUL-terminated name into.
    unsafe { sys::pyxbuf_device_format(&device, name.as_mut_ptr(), name.len()) };
    // SAFETY: pyxbuf_device_format wrote a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Ok((name, PyBytes::new(py, &handle[..len.min(handle.len())]), fd))
}

/// A `pyxbuf.Exporter` over the device memory another process shared
/// (`_share_device`'s `handle`, with `fd` the descriptor that arrived with
/// it or -1; not kept or closed here), laid out as given; it closes the
/// handle when it dies and grants no borrow (the other process writes it too).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn _open_shared_device<'py>(
    py: Python<'py>,
    device: &Bound<'py, PyAny>,
    handle: &[u8],
    fd: i32,
    format: &str,
    itemsize: isize,
    shape: Vec<isize>,
    strides: Vec<isize>,
    readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let device = parse_device(device)?;
    let format =
        std::ffi::CString::new(format).map_err(|_| PyTypeError::new_err("format contains NUL"))?;
    if strides.len() != shape.len() {
        return Err(PyValueError::new_err(format!(
            "pyxbuf._open_shared_device: {} strides for {} dimensions",
            strides.len(),
            shape.len()
        )));
    }
    // SAFETY: a valid device; `handle` and its length; a NUL-terminated
    // format; shape.len() dims and as many strides; new reference or NULL
    // with an exception set.
    unsafe {
        let e = sys::pyxbuf_exporter_open_shared(
            &device,
            handle.as_ptr().cast(),
            handle.len(),
            fd,
            format.as_ptr(),
            itemsize,
            shape.len() as i32,
            shape.as_ptr(),
            strides.as_ptr(),
            i32::from(readonly),
        );
        Bound::from_owned_ptr_or_err(py, e)
    }
}

/// The proposal's PyObject_CheckBufferSupports, answered without calling
/// the producer: whether `obj` speaks a protocol pyxbuf reads and advertises
/// every bit of `flags`, soft ones included (PYXBUF_DEVICE asked of a
/// host-only producer is False). `pyxbuf_get` itself refuses only required
/// flags a type lacks.
#[pyfunction]
fn check_supports(obj: &Bound<'_, PyAny>, flags: i32) -> PyResult<bool> {
    // SAFETY: a live object, attached thread; -1 means an exception is set.
    match unsafe { sys::pyxbuf_check_supports(obj.as_ptr(), flags) } {
        -1 => Err(PyErr::fetch(obj.py())),
        r => Ok(r == 1),
    }
}

/// The number of live cooperative (tracked) borrows in the process, in all
/// copies of libpyxbuf.
#[pyfunction]
fn live_borrows(py: Python<'_>) -> PyResult<i64> {
    // SAFETY: attached thread; NULL means an exception is set.
    let api = unsafe { sys::pyxbuf_shared_api_get() };
    if api.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a valid table whose borrow_live is always present (version 1).
    Ok(unsafe { (*api).borrow_live.map_or(0, |f| f()) })
}

/// The ABI version of the libpyxbuf linked into this module (`pyxbuf_abi_version()`). A C extension built against the wheel's
/// `pyxbuf.h` compares it with its own `PYXBUF_ABI_VERSION`.
#[pyfunction]
fn abi_version() -> u32 {
    // SAFETY: reads a constant; no Python state involved.
    unsafe { sys::pyxbuf_abi_version() }
}

fn config_dict<'py>(py: Python<'py>, c: &pyxbuf::TransferConfig) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("enabled", c.enabled)?;
    d.set_item("threads", c.threads)?;
    d.set_item("buffers", c.buffers)?;
    d.set_item("threshold", c.threshold)?;
    d.set_item("chunk", c.chunk)?;
    d.set_item("pool_cap", c.pool_cap)?;
    d.set_item("device_pool", c.device_pool)?;
    d.set_item("device_pool_shareable", c.device_pool_shareable)?;
    d.set_item(
        "device_pool_release_threshold",
        c.device_pool_release_threshold,
    )?;
    Ok(d)
}

/// How large copies between pageable host memory and a device are made
/// (pyxbuf_transfer_config): returns the configuration in force as a dict;
/// with keyword arguments, replaces those fields first (ValueError naming a
/// field out of range, and nothing changed). `enabled`: False turns pinned
/// staging off; `threads`: host threads filling a chunk (1..64); `buffers`:
/// staging buffers in flight (2..16); `threshold`: bytes from which a copy
/// is pipelined through `threads` threads (from 64 KiB up to it, the calling
/// thread fills one buffer); `chunk`: bytes per staging buffer; `pool_cap`: bytes of
/// page-locked memory the pool may hold; `device_pool`: False makes every
/// device allocation (to_device results, device exporters) the backend's
/// own instead of its stream-ordered pool; `device_pool_shareable`: True
/// takes it from pools other processes can open (pyxbuf.multiprocessing; on
/// CUDA a pool of pyxbuf's own, never trimmed before exit);
/// `device_pool_release_threshold`: bytes a device's pool keeps cached across
/// a synchronisation (0: the default, 256 MiB). Without arguments, a ValueError
/// naming the environment variable (PYXBUF_STAGING_CHUNK, ...) that set a
/// value out of range; setting the configuration replaces the environment's.
#[pyfunction]
#[pyo3(signature = (*, enabled=None, threads=None, buffers=None, threshold=None, chunk=None, pool_cap=None, device_pool=None, device_pool_shareable=None, device_pool_release_threshold=None))]
#[allow(clippy::too_many_arguments)]
fn transfer_config<'py>(
    py: Python<'py>,
    enabled: Option<bool>,
    threads: Option<u32>,
    buffers: Option<u32>,
    threshold: Option<u64>,
    chunk: Option<u64>,
    pool_cap: Option<u64>,
    device_pool: Option<bool>,
    device_pool_shareable: Option<bool>,
    device_pool_release_threshold: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let c = pyxbuf::TransferConfig::current();
    let asked = [threads, buffers].iter().any(Option::is_some)
        || [threshold, chunk, pool_cap, device_pool_release_threshold]
            .iter()
            .any(Option::is_some)
        || [enabled, device_pool, device_pool_shareable]
            .iter()
            .any(Option::is_some);
    if !asked {
        pyxbuf::TransferConfig::check()?; // a bad environment variable, named
    }
    let new = pyxbuf::TransferConfig {
        enabled: enabled.unwrap_or(c.enabled),
        threads: threads.unwrap_or(c.threads),
        buffers: buffers.unwrap_or(c.buffers),
        threshold: threshold.unwrap_or(c.threshold),
        chunk: chunk.unwrap_or(c.chunk),
        pool_cap: pool_cap.unwrap_or(c.pool_cap),
        device_pool: device_pool.unwrap_or(c.device_pool),
        device_pool_shareable: device_pool_shareable.unwrap_or(c.device_pool_shareable),
        device_pool_release_threshold: device_pool_release_threshold
            .unwrap_or(c.device_pool_release_threshold),
    };
    // Applied whenever a field is given, equal or not: setting the
    // configuration is also how a bad environment variable is replaced.
    if asked {
        new.apply().map_err(|e| {
            PyValueError::new_err(e.to_string().replacen(
                "TransferConfig::apply:",
                "pyxbuf.transfer_config:",
                1,
            ))
        })?;
    }
    config_dict(py, &new)
}

/// The page-locked pool's state: held_bytes, used_bytes, allocations, reuses,
/// fill_threads, background_allocations, background_pending.
#[pyfunction]
fn pinned_pool_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = pyxbuf::PinnedPoolStats::current();
    let d = PyDict::new(py);
    d.set_item("held_bytes", s.held_bytes)?;
    d.set_item("used_bytes", s.used_bytes)?;
    d.set_item("allocations", s.allocations)?;
    d.set_item("reuses", s.reuses)?;
    d.set_item("fill_threads", s.fill_threads)?;
    d.set_item("background_allocations", s.background_allocations)?;
    d.set_item("background_pending", s.background_pending)?;
    Ok(d)
}

/// Free every idle block of the page-locked pool now.
#[pyfunction]
fn pinned_pool_trim() {
    pyxbuf::pinned_pool_trim()
}

// libpyxbuf synchronises its own state on free-threaded builds (DESIGN.md,
// Interpreters), and this module keeps none of its own outside pyclasses,
// whose borrows PyO3 checks atomically: it runs with the GIL off, as
// `make test-matrix` tests on 3.14t.
#[pymodule(gil_used = false)]
#[pyo3(name = "pyxbuf")]
fn pyxbuf_python(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // This copy of libpyxbuf serves Python users: its messages name the
    // module's fixes (pyxbuf.to_device(x, "cpu")), set before anything else
    // runs here so that the Rust layer's own claim finds it taken.
    // SAFETY: a plain setter of one atomic word.
    unsafe { sys::pyxbuf_message_binding(sys::PYXBUF_BINDING_PYTHON) };
    #[cfg(feature = "emulated-device")]
    pyxbuf::emulated::register()?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(to_device, m)?)?;
    m.add_function(wrap_pyfunction!(from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(exporter, m)?)?;
    m.add_function(wrap_pyfunction!(frombuffer, m)?)?;
    m.add_function(wrap_pyfunction!(_share_device, m)?)?;
    m.add_function(wrap_pyfunction!(_open_shared_device, m)?)?;
    m.add_function(wrap_pyfunction!(check_supports, m)?)?;
    m.add_function(wrap_pyfunction!(live_borrows, m)?)?;
    m.add_function(wrap_pyfunction!(abi_version, m)?)?;
    m.add_function(wrap_pyfunction!(transfer_config, m)?)?;
    m.add_function(wrap_pyfunction!(pinned_pool_stats, m)?)?;
    m.add_function(wrap_pyfunction!(pinned_pool_trim, m)?)?;
    // SAFETY: attached thread; a borrowed reference to the type (kept by the
    // library for the process) or NULL with an exception.
    let tp = unsafe { sys::pyxbuf_exporter_type() };
    if tp.is_null() {
        return Err(PyErr::fetch(m.py()));
    }
    // SAFETY: as above; a type object is a Python object.
    m.add("Exporter", unsafe {
        Bound::from_borrowed_ptr(m.py(), tp.cast())
    })?;
    // The process's one class of item-type refusals (a TypeError and a
    // BufferError), whichever copy of libpyxbuf made it first.
    m.add("ItemTypeError", pyxbuf::item_type_error_class(m.py())?)?;
    m.add("__version__", pyxbuf::library_version())?;
    // The emulated device's name where this build has it (a development
    // install: `to_device(x, pyxbuf.EMULATED_DEVICE)` works), else None (the
    // release wheel never carries it).
    let emulated: Option<&str> = cfg!(feature = "emulated-device").then_some("ext_dev:0");
    m.add("EMULATED_DEVICE", emulated)?;
    for (name, value) in [
        ("PyBUF_SIMPLE", ffi::PyBUF_SIMPLE),
        ("PyBUF_WRITABLE", ffi::PyBUF_WRITABLE),
        ("PyBUF_FORMAT", ffi::PyBUF_FORMAT),
        ("PyBUF_ND", ffi::PyBUF_ND),
        ("PyBUF_STRIDES", ffi::PyBUF_STRIDES),
        ("PyBUF_C_CONTIGUOUS", ffi::PyBUF_C_CONTIGUOUS),
        ("PyBUF_F_CONTIGUOUS", ffi::PyBUF_F_CONTIGUOUS),
        ("PyBUF_RECORDS", ffi::PyBUF_RECORDS),
        ("PyBUF_RECORDS_RO", ffi::PyBUF_RECORDS_RO),
        ("PYXBUF_DEVICE", sys::PYXBUF_DEVICE),
        ("PYXBUF_BORROW_SHARED", sys::PYXBUF_BORROW_SHARED),
        ("PYXBUF_BORROW_EXCLUSIVE", sys::PYXBUF_BORROW_EXCLUSIVE),
        ("PYXBUF_TEMPORARY", sys::PYXBUF_TEMPORARY),
        ("PYXBUF_EXTENDED_FORMAT", sys::PYXBUF_EXTENDED_FORMAT),
        ("PYXBUF_EXT_SHARED", sys::PYXBUF_EXT_SHARED),
        ("PYXBUF_EXT_EXCLUSIVE", sys::PYXBUF_EXT_EXCLUSIVE),
        ("PYXBUF_EXT_TRACKED", sys::PYXBUF_EXT_TRACKED),
        ("PYXBUF_SUPPORTED_FLAGS", pyxbuf::export::SUPPORTED_FLAGS),
    ] {
        m.add(name, value)?;
    }
    Ok(())
}
