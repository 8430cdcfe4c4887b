/* fuzz_cai.c -- the __cuda_array_interface__ import on arbitrary dicts.
 *
 * Input layout: i32 request flags (little-endian), u8 stream mode (0
 * pyxbuf_get, else pyxbuf_get_stream with stream = mode - 2, so -1, 0, 1 ...),
 * then the text of a Python literal (ast.literal_eval: dicts, tuples, lists,
 * strings, bytes, numbers, None, booleans) that the producer returns as its
 * __cuda_array_interface__. A 'data' tuple whose pointer is an int in
 * [0, 65536) points that many bytes into the emulated-device region (so the
 * fuzzer reaches real device memory without knowing its address); any other
 * value is passed as written.
 *
 * Checks: a refusal is an ordinary exception with a message; an acquired view
 * is on a device, self-consistent, and copies exactly the reference items
 * when it lies inside the region; the producer and its dict are freed, and
 * the emulated device's allocations are what they were. */
#include "fuzz_common.h"

fuzz_outcome_counts fuzz_outcomes;
static PyObject *make_producer; /* fuzz_cai_producer(text, base) */

static const char PRODUCER_SOURCE[] =
    "import ast\n"
    "class CAIProducer:\n"
    "    def __init__(self, iface):\n"
    "        self.iface = iface\n"
    "    @property\n"
    "    def __cuda_array_interface__(self):\n"
    "        return self.iface\n"
    "def fuzz_cai_producer(text, base):\n"
    "    iface = ast.literal_eval(text)\n"
    "    if isinstance(iface, dict):\n"
    "        data = iface.get('data')\n"
    "        if (isinstance(data, tuple) and data and type(data[0]) is int\n"
    "                and 0 <= data[0] < 65536):\n"
    "            iface['data'] = (base + data[0],) + data[1:]\n"
    "    return CAIProducer(iface)\n";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_start_python();
    PyObject *globals = PyDict_New();
    FUZZ_CHECK(globals != NULL, "globals");
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject *r = PyRun_String(PRODUCER_SOURCE, Py_file_input, globals, globals);
    FUZZ_CHECK(r != NULL, "producer source");
    Py_DECREF(r);
    make_producer = PyDict_GetItemString(globals, "fuzz_cai_producer");
    FUZZ_CHECK(make_producer != NULL, "fuzz_cai_producer");
    Py_INCREF(make_producer);
    Py_DECREF(globals);
    return 0;
}

/* PyWeakref_GetObject is deprecated from 3.13 on (-Werror there). */
static int weakref_is_dead(PyObject *ref) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target = NULL;
    if (PyWeakref_GetRef(ref, &target) < 0) return 0;
    Py_XDECREF(target);
    return target == NULL;
#else
    return PyWeakref_GetObject(ref) == Py_None;
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    fuzz_reader r = {data, size};
    int32_t request = fuzz_i32(&r);
    uint8_t stream_mode = fuzz_u8(&r);
    PyObject *text = PyUnicode_DecodeLatin1((const char *)r.p, (Py_ssize_t)r.left, NULL);
    FUZZ_CHECK(text != NULL, "text");
    PyObject *producer = PyObject_CallFunction(make_producer, "(OK)", text,
                                               (unsigned long long)(uintptr_t)fuzz_mem.device);
    Py_DECREF(text);
    if (producer == NULL) { /* not a literal: nothing to fuzz */
        PyErr_Clear();
        return 0;
    }
    PyObject *alive = PyWeakref_NewRef(producer, NULL);
    FUZZ_CHECK(alive != NULL, "weakref");
    int64_t allocations = pyxbuf_emulated_live_allocations();

    pyxbuf_view view;
    int rc = stream_mode == 0 ? pyxbuf_get(producer, &view, request)
                              : pyxbuf_get_stream(producer, &view, request,
                                                  (int64_t)stream_mode - 2);
    if (rc == 0) {
        FUZZ_CHECK(!PyErr_Occurred(), "success with an exception set");
        FUZZ_CHECK(view.path == PYXBUF_PATH_CAI, "path %s", pyxbuf_path_name(view.path));
        FUZZ_CHECK(view.device != NULL, "CAI memory described as host memory");
        fuzz_check_view(&view, request);
        if (pyxbuf_device_wait(&view, 0) == 0) fuzz_check_copy(&view);
        PyErr_Clear(); /* a wait on a stream the input invented may fail */
        pyxbuf_release(&view);
    } else {
        FUZZ_CHECK(rc == -1, "pyxbuf_get returned %d", rc);
        fuzz_check_refusal();
    }
    Py_DECREF(producer);
    FUZZ_CHECK(weakref_is_dead(alive), "the producer outlived its last reference");
    Py_DECREF(alive);
    FUZZ_CHECK(pyxbuf_emulated_live_allocations() == allocations, "emulated allocations leaked");
    return 0;
}
