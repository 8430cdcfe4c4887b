/* fixes.c -- each fix a message names, per binding (fixes.h), and the
 * binding this copy of the library serves.
 *
 * Why per copy: every extension links its own static copy (hidden symbols),
 * so a copy's code runs for one binding's users. The copy's binding is set
 * once, by the first pyxbuf_message_binding call: the pyxbuf module's init
 * (Python), the Rust crate's first acquisition, pyxbuf.hpp's load (C++),
 * pyxbuf_xview.pxi's import (Cython); a C extension sets nothing and reads C.
 * Phrases of the compiled bindings also name Python's fix: the person who
 * reads the message is often the Python user calling the extension. */
#include "base/fixes.h"

/* PYXBUF_BINDING_* + 1, 0 while unset (read as C): one atomic word, set by
 * the first call only. */
static int32_t binding_plus_one;

int32_t pyxbuf_message_binding(int32_t binding) {
    if (binding >= PYXBUF_BINDING_C && binding <= PYXBUF_BINDING_PYTHON) {
        int32_t unset = 0;
        __atomic_compare_exchange_n(&binding_plus_one, &unset, binding + 1, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    }
    int32_t now = __atomic_load_n(&binding_plus_one, __ATOMIC_RELAXED);
    return now == 0 ? PYXBUF_BINDING_C : now - 1;
}

#define PY_HOST "in Python, pass host memory: pyxbuf.to_device(x, \"cpu\")"

/* [fix][binding]: C, C++, Cython, Rust, Python (PYXBUF_BINDING_* order). */
static const char *const phrases[PYXBUF__FIX_COUNT][PYXBUF_BINDING_PYTHON + 1] = {
    [PYXBUF__FIX_DEVICE_VIEW] = {
        "request PYXBUF_DEVICE and read view->device, or copy it to the host first "
        "(pyxbuf_copy_to_host)",
        "acquire it with PYXBUF_DEVICE in the flags (pyxbuf::view<T>::get(obj, "
        "PyBUF_RECORDS_RO | PYXBUF_DEVICE)) and read device(), or copy it to the host "
        "first; " PY_HOST,
        "acquire it with PYXBUF_DEVICE in the flags (XView(obj, PyBUF_RECORDS_RO | "
        "PYXBUF_DEVICE)) and read .device, or copy it to the host first (.to_host()); " PY_HOST,
        "accept device memory with PyXBuffer::<T>::request().device().get(obj) and read "
        ".device(), or copy it to the host first (copy_to_host()); " PY_HOST,
        "copy it to the host first: pyxbuf.to_device(x, \"cpu\") (a pyxbuf array: "
        "x.to_device(\"cpu\"))",
    },
    [PYXBUF__FIX_NO_BACKEND] = {
        "register one with pyxbuf_backend_register or copy the data to the host where it "
        "lives",
        "register one with pyxbuf_backend_register or copy the data to the host where it "
        "lives",
        "register one with pyxbuf_backend_register (c_api.pxd) or copy the data to the host "
        "where it lives",
        "pyxbuf serves the host, CUDA where a driver loads and, with the emulated-device "
        "feature, Device::Emulated after pyxbuf::emulated::register(); register another "
        "through pyxbuf::sys::pyxbuf_backend_register, or copy the data to the host where "
        "it lives",
        "this pyxbuf serves \"cpu\", \"cuda:N\" where a CUDA driver loads and, in a build with "
        "the emulated device, pyxbuf.EMULATED_DEVICE; copy the data to the host where it "
        "lives (its library's own conversion, e.g. .cpu() or np.asarray)",
    },
    [PYXBUF__FIX_REGISTER_DTYPE] = {
        "register it with pyxbuf_dtype_register or use a format with a known size",
        "register it with pyxbuf_dtype_register or use a format with a known size",
        "register it with pyxbuf_dtype_register (c_api.pxd) or use a format with a known size",
        "register it with pyxbuf::register_custom::<T>() (a custom_element! type of that "
        "key) or use a format with a known size",
        "import the library that defines it in the extension reading it, which registers "
        "it (C: pyxbuf_dtype_register; Rust: pyxbuf::register_custom), or use a format with "
        "a known size",
    },
    [PYXBUF__FIX_REGISTER_DTYPE_CALL] = {
        "pyxbuf_dtype_register",
        "pyxbuf_dtype_register",
        "pyxbuf_dtype_register (c_api.pxd)",
        "pyxbuf::register_custom::<T>() of a custom_element! type",
        "in the extension reading it, C's pyxbuf_dtype_register or Rust's "
        "pyxbuf::register_custom,",
    },
    [PYXBUF__FIX_MOVE_FIRST] = {
        "move one with pyxbuf_to_device first",
        "move one with pyxbuf_to_device first",
        "move one with pyxbuf_to_device first (XView.to_host() for the host)",
        "move one with PyXBuffer::to_device(device) first",
        "move one with pyxbuf.to_device(x, device) first",
    },
    [PYXBUF__FIX_WRITE_EXCLUSIVE] = {
        "ask for PYXBUF_BORROW_EXCLUSIVE to write",
        "take a pyxbuf::view<T> (not view<const T>), which asks for PYXBUF_BORROW_EXCLUSIVE, "
        "to write",
        "ask for PYXBUF_BORROW_EXCLUSIVE to write",
        "take PyXBuffer<T, Exclusive> (or request().borrow_exclusive()) to write",
        "ask for pyxbuf.PYXBUF_BORROW_EXCLUSIVE to write",
    },
    [PYXBUF__FIX_WITHOUT_BORROW] = {
        "ask without PYXBUF_BORROW_SHARED/PYXBUF_BORROW_EXCLUSIVE",
        "acquire it without PYXBUF_BORROW_SHARED/PYXBUF_BORROW_EXCLUSIVE (pyxbuf::view<T>::get "
        "with flags of your own)",
        "acquire it without PYXBUF_BORROW_SHARED/PYXBUF_BORROW_EXCLUSIVE in the XView flags",
        "ask without a borrow (request().without_borrow())",
        "ask without pyxbuf.PYXBUF_BORROW_SHARED/PYXBUF_BORROW_EXCLUSIVE",
    },
};

const char *pyxbuf__fix(pyxbuf__fix_id id) {
    if ((unsigned)id >= PYXBUF__FIX_COUNT) return "";
    return phrases[id][pyxbuf_message_binding(-1)];
}
