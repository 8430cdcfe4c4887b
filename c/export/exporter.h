/* exporter.h -- pyxbuf.Exporter's object, private to the export layer:
 * exporter.c makes exporters (the only file that does), exporter_attrs.c
 * answers their Python attributes. */
#ifndef PYXBUF_EXPORT_EXPORTER_H
#define PYXBUF_EXPORT_EXPORTER_H

#include "export/export.h"
#include "borrow/borrow.h"
#include "format/format.h"

typedef struct pyxbuf__exporter {
    PyObject_HEAD
    pyxbuf_export_desc desc; /* shape, strides, format, device owned below */
    void (*free_fn)(void *);
    void *free_ctx;
    Py_ssize_t itemsize;
    Py_ssize_t nbytes;
    pyxbuf_borrow_counter borrows;
    pyxbuf_device device;           /* {PYXBUF_DL_CPU, 0} for host memory */
    pyxbuf_device_info device_info; /* for device memory: type, id, sync event */
    PyObject *weakreflist;
    /* Strides in items (DLPack's unit), after shape and strides in the same
     * block; NULL when a byte stride is not a whole number of items. */
    Py_ssize_t *item_strides;
    /* 1 when the format holds a custom type ("[id$payload]"): a request
     * for the format without PYXBUF_EXTENDED_FORMAT is refused (a classic
     * consumer cannot read it), and __array__ finds the type's NumPy dtype. */
    int custom_format;
    /* 1 when the memory is shared with other processes (a SharedMemory
     * block, pyxbuf_exporter_over's PYXBUF_OVER_PROCESS_SHARED): no borrow
     * is granted, since no counter or registry of this process can stop
     * another process's writes (pickle.c). */
    int process_shared;
    /* 1 when a request takes exporter_getbuffer's slow path: a custom
     * format or process-shared memory (one test on the fast path). */
    int slow_getbuffer;
    /* The multiprocessing.shared_memory.SharedMemory the memory lies in
     * (owned), which the exporter pickles by name; else NULL. */
    /* 1 when the exporter allocated its memory (pyxbuf_exporter_new,
     * to_device results): __sizeof__ counts the items then. */
    int owns_memory;
    PyObject *shared_memory;
    Py_ssize_t shared_memory_offset; /* of the first item in the block */
} pyxbuf__exporter;

/* Exporter attributes (exporter_attrs.c), for the type's tables. */
PyObject *pyxbuf__exporter_get_shape(PyObject *self, void *closure);
PyObject *pyxbuf__exporter_get_strides(PyObject *self, void *closure);
PyObject *pyxbuf__exporter_get_format(PyObject *self, void *closure);
PyObject *pyxbuf__exporter_get_device(PyObject *self, void *closure);
PyObject *pyxbuf__exporter_get_borrows(PyObject *self, void *closure);
/* __sizeof__(): the object, its dims and format, and its items when it owns
 * them (NumPy's rule for arrays). */
PyObject *pyxbuf__exporter_sizeof(PyObject *self, PyObject *unused);
/* __array__(dtype=None, copy=None): NumPy's conversion (exporter_attrs.c):
 * through the buffer protocol, or for custom items an ndarray of the type's
 * NumPy dtype over a view of the exporter. */
PyObject *pyxbuf__exporter_array(PyObject *self, PyObject *args, PyObject *kwargs);
/* __cuda_array_interface__ (v3) of CUDA memory; AttributeError elsewhere. */
PyObject *pyxbuf__exporter_get_cai(PyObject *self, void *closure);
/* "cpu", "cuda:1", "ext_dev:0" or a (device_type, device_id) tuple; -1 with
 * TypeError or ValueError. */
int pyxbuf__parse_device(PyObject *arg, pyxbuf_device *out);
/* Exporter.__reduce_ex__(protocol) (pickle.c, below exporter.c): pickle
 * protocol 5's out-of-band buffer of the items (bytes before protocol 5),
 * rebuilt by pyxbuf._pickle. */
PyObject *pyxbuf__exporter_reduce_ex(PyObject *self, PyObject *protocol);

#endif
