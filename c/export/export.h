/* export.h -- the export layer's private interface: copies into new device
 * memory (transfer.c) and the exporters that hold it (exporter.c). */
#ifndef PYXBUF_EXPORT_EXPORT_H
#define PYXBUF_EXPORT_EXPORT_H

#include "bridges/bridges.h"
#include "device/device.h"

/* transfer.c, for pyxbuf_to_device (exporter.c): fill `dst`, memory of
 * `target`, from it in C order (call without the GIL); an event after that on
 * `target` (NULL when there is nothing to wait for). */
int pyxbuf__copy_view_into(const pyxbuf_view *view, const pyxbuf_device *src, void *dst,
                           const pyxbuf_device *target, int64_t stream, pyxbuf_error *err);
int pyxbuf__record_event(const pyxbuf_device *target, int64_t stream, void **event,
                         pyxbuf_error *err);
/* pyxbuf_exporter_new with the item size given (0 = from the format): a copy
 * keeps its source's itemsize even where the format disagrees (ctypes). */
PyObject *pyxbuf__exporter_new_sized(const char *format, Py_ssize_t itemsize, int32_t ndim,
                                     const Py_ssize_t *shape, int32_t readonly,
                                     const pyxbuf_device *device);
/* The exporter takes `event` (recorded after its memory was written) as the
 * one its consumers wait for; the caller knows `obj` is an exporter. */
void pyxbuf__exporter_adopt_event(PyObject *obj, void *event, int64_t stream);

#endif
