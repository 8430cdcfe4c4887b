# cython: language_level=3
# c_api.pxd -- Cython declarations of pyxbuf.h, the whole public C ABI of
# libpyxbuf (shipped in the wheel beside it, as NumPy ships __init__.pxd).
#
#     from pyxbuf cimport pyxbuf_view, pyxbuf_get, pyxbuf_release
#     from pyxbuf.c_api cimport *          # the same names
#
# Build the extension with include_dirs=[pyxbuf.get_include()],
# library_dirs=[pyxbuf.get_library_dir()], libraries=["pyxbuf"] and the macro
# PYXBUF_STATIC. The structs are declared with the fixed-width fields of the
# header; fields Cython code has no business with (pyxbuf's bookkeeping) are
# declared too, for completeness: read `path`, leave the rest alone.
#
# Exceptions: functions that answer -1 (or NULL) with a Python exception set
# are declared `except -1` (`except? NULL`, or returning `object`), so Cython
# raises it; functions that return a PYXBUF_E* code and fill a pyxbuf_error
# are `noexcept` (raise with pyxbuf_error_raise).

from cpython.object cimport PyObject, PyTypeObject
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t


cdef extern from "pyxbuf.h":
    # 1. Versioning
    enum:
        PYXBUF_VERSION_MAJOR
        PYXBUF_VERSION_MINOR
        PYXBUF_VERSION_PATCH
        PYXBUF_ABI_VERSION
    uint32_t pyxbuf_abi_version() noexcept nogil
    const char *pyxbuf_version_string() noexcept nogil
    int pyxbuf_native_protocol() noexcept nogil

    # 2. Errors
    enum:
        PYXBUF_OK
        PYXBUF_EINVAL
        PYXBUF_EFORMAT
        PYXBUF_EUNSUPPORTED
        PYXBUF_EOVERFLOW
        PYXBUF_ENOMEM
        PYXBUF_EBUFFER
        PYXBUF_EBORROW
        PYXBUF_EDEVICE
        PYXBUF_EPYTHON
        PYXBUF_ENOSPACE
        PYXBUF_EDRIVER
        PYXBUF_ERROR_MESSAGE_SIZE

    ctypedef struct pyxbuf_error:
        int32_t code
        int32_t reserved0
        int64_t position
        int64_t reserved[2]
        char message[480]

    int pyxbuf_error_raise(const pyxbuf_error *err) except -1
    # pyxbuf.ItemTypeError (a TypeError and a BufferError), borrowed:
    # raise <object>pyxbuf_item_type_error()(message)
    PyObject *pyxbuf_item_type_error() except NULL
    # The binding whose users read this copy's messages (pyxbuf_xview.pxi
    # sets Cython's at import): the first PYXBUF_BINDING_* value wins.
    enum:
        PYXBUF_BINDING_C
        PYXBUF_BINDING_CXX
        PYXBUF_BINDING_CYTHON
        PYXBUF_BINDING_RUST
        PYXBUF_BINDING_PYTHON
    int32_t pyxbuf_message_binding(int32_t binding)

    # 3. Request flags, grants, supported flags
    enum:
        PYXBUF_CLASSIC_FLAGS
        PYXBUF_NATIVE_PROTOCOL
        PYXBUF_DEVICE
        PYXBUF_BORROW_SHARED
        PYXBUF_BORROW_EXCLUSIVE
        PYXBUF_TEMPORARY
        PYXBUF_EXTENDED_FLAGS
        PYXBUF_EXTENDED_FORMAT
        PYXBUF_REQUIRED_FLAGS
        PYXBUF_EXT_SHARED
        PYXBUF_EXT_EXCLUSIVE
        PYXBUF_EXT_TRACKED
        PYXBUF_EXT_ALL
        PYXBUF_SUPPORTS_CLASSIC
        PYXBUF_SUPPORTS_SIMPLE_ONLY
        PYXBUF_SUPPORTED_FLAGS_MAX
    const char *PYXBUF_SUPPORTED_FLAGS_ATTR

    int pyxbuf_type_set_supported_flags(PyTypeObject *type, int32_t flags) except -1
    int pyxbuf_type_supported_flags(PyTypeObject *type, int32_t *supported) except -1
    int pyxbuf_check_supports(object obj, int32_t flags) except -1

    # 4. The extended view and acquisition
    enum:
        PYXBUF_PATH_NONE
        PYXBUF_PATH_NATIVE
        PYXBUF_PATH_DLPACK_C
        PYXBUF_PATH_DLPACK
        PYXBUF_PATH_CAI
        PYXBUF_PATH_CLASSIC
        PYXBUF_PATH_ARRAY_INTERFACE
        PYXBUF_PATH_NUMPY
        PYXBUF_INLINE_NDIM
        PYXBUF_MAX_NDIM

    ctypedef struct pyxbuf_view:
        Py_buffer base
        int32_t flags
        int32_t ext_flags
        const char *device
        void *device_info
        int32_t path
        int32_t requested
        uint32_t state
        int32_t reserved0
        PyObject *owner
        void *bridge_data
        Py_ssize_t inline_dims[16]
        int64_t borrow_token
        int64_t reserved[3]

    int pyxbuf_get(object obj, pyxbuf_view *view, int32_t flags) except -1
    int pyxbuf_get_stream(object obj, pyxbuf_view *view, int32_t flags,
                          int64_t consumer_stream) except -1
    void pyxbuf_release(pyxbuf_view *view) noexcept

    const char *PYXBUF_SHARED_MODULE
    const char *PYXBUF_SHARED_CAPSULE
    enum:
        PYXBUF_SHARED_API_VERSION

    ctypedef struct pyxbuf_borrow_range:
        int32_t device_type
        int32_t device_id
        uint64_t lo
        uint64_t hi

    ctypedef struct pyxbuf_borrow_key:
        pyxbuf_borrow_range range
        uint64_t first
        uint64_t stride_gcd
        uint64_t itemsize

    ctypedef struct pyxbuf_shared_api:
        uint32_t version
        uint32_t size
        const char *installer_version
        int (*borrow_acquire)(const pyxbuf_borrow_range *range, int32_t exclusive,
                              int64_t *token, char *why, size_t why_cap) noexcept nogil
        void (*borrow_release)(int64_t token) noexcept nogil
        int64_t (*borrow_live)() noexcept nogil
        int (*borrow_acquire_key)(const pyxbuf_borrow_key *key, int32_t exclusive,
                                  int64_t *token, char *why, size_t why_cap) noexcept nogil

    const pyxbuf_shared_api *pyxbuf_shared_api_get() except NULL
    int pyxbuf_view_is_acquired(const pyxbuf_view *view) noexcept nogil
    int pyxbuf_view_is_host(const pyxbuf_view *view) noexcept nogil
    const char *pyxbuf_path_name(int32_t path) noexcept nogil

    # 5. Devices
    const char *PYXBUF_DEVICE_DLPACK
    const char *PYXBUF_DEVICE_CPU
    enum:
        PYXBUF_DL_CPU
        PYXBUF_DL_CUDA
        PYXBUF_DL_CUDA_HOST
        PYXBUF_DL_OPENCL
        PYXBUF_DL_VULKAN
        PYXBUF_DL_METAL
        PYXBUF_DL_VPI
        PYXBUF_DL_ROCM
        PYXBUF_DL_ROCM_HOST
        PYXBUF_DL_EXT_DEV
        PYXBUF_DL_CUDA_MANAGED
        PYXBUF_DL_ONEAPI
        PYXBUF_DL_WEBGPU
        PYXBUF_DL_HEXAGON
        PYXBUF_DL_MAIA
        PYXBUF_DL_FLAG_READ_ONLY
        PYXBUF_DL_FLAG_IS_COPIED
        PYXBUF_STREAM_DEFAULT
        PYXBUF_STREAM_NONE

    ctypedef struct pyxbuf_device_info:
        uint32_t size
        int32_t device_type
        int32_t device_id
        int32_t reserved0
        void *sync_event
        int64_t stream
        uint64_t dl_flags
        int64_t reserved[3]

    ctypedef struct pyxbuf_device:
        int32_t device_type
        int32_t device_id

    int pyxbuf_device_equal(const char *a, const char *b) noexcept nogil
    int pyxbuf_device_same(const pyxbuf_device *a, const pyxbuf_device *b) noexcept nogil
    const char *pyxbuf_device_type_name(int32_t device_type) noexcept nogil
    int pyxbuf_device_format(const pyxbuf_device *device, char *buf, size_t cap) noexcept nogil

    ctypedef struct pyxbuf_backend:
        uint32_t size
        int32_t device_type
        const char *name
        void *ctx
        int (*copy_to_host)(void *ctx, int32_t device_id, void *dst, const void *src, size_t n,
                            int64_t stream, pyxbuf_error *err) noexcept nogil
        int (*copy_from_host)(void *ctx, int32_t device_id, void *dst, const void *src,
                              size_t n, int64_t stream, pyxbuf_error *err) noexcept nogil
        int (*copy_on_device)(void *ctx, int32_t dst_id, void *dst, int32_t src_id,
                              const void *src, size_t n, int64_t stream,
                              pyxbuf_error *err) noexcept nogil
        int (*alloc)(void *ctx, int32_t device_id, size_t n, void **ptr,
                     pyxbuf_error *err) noexcept nogil
        int (*free)(void *ctx, int32_t device_id, void *ptr, pyxbuf_error *err) noexcept nogil
        int (*event_wait)(void *ctx, int32_t device_id, void *event, int64_t stream,
                          pyxbuf_error *err) noexcept nogil
        int (*event_record)(void *ctx, int32_t device_id, int64_t stream, void **event,
                            pyxbuf_error *err) noexcept nogil
        int (*event_destroy)(void *ctx, int32_t device_id, void *event,
                             pyxbuf_error *err) noexcept nogil
        int (*pointer_query)(void *ctx, const void *ptr, pyxbuf_device *device,
                             pyxbuf_error *err) noexcept nogil
        int (*synchronize)(void *ctx, int32_t device_id, int64_t stream,
                           pyxbuf_error *err) noexcept nogil
        int (*host_alloc)(void *ctx, int32_t device_id, size_t n, void **ptr,
                          pyxbuf_error *err) noexcept nogil
        int (*host_free)(void *ctx, int32_t device_id, void *ptr,
                         pyxbuf_error *err) noexcept nogil
        int (*copy_async)(void *ctx, int32_t device_id, int32_t to_host, void *dst,
                          const void *src, size_t n, int64_t stream,
                          pyxbuf_error *err) noexcept nogil
        int (*event_query)(void *ctx, int32_t device_id, void *event, int32_t block,
                           pyxbuf_error *err) noexcept nogil
        int (*alloc_async)(void *ctx, int32_t device_id, size_t n, int64_t stream, void **ptr,
                           pyxbuf_error *err) noexcept nogil
        int (*free_async)(void *ctx, int32_t device_id, void *ptr, int64_t stream,
                          pyxbuf_error *err) noexcept nogil
        int (*pool_trim)(void *ctx, int32_t device_id, uint64_t keep_bytes,
                         pyxbuf_error *err) noexcept nogil
        int (*ipc_export)(void *ctx, int32_t device_id, const void *ptr, void *handle,
                          size_t *handle_len, int *fd, pyxbuf_error *err) noexcept nogil
        int (*ipc_open)(void *ctx, int32_t device_id, const void *handle, size_t handle_len,
                        int fd, void **ptr, pyxbuf_error *err) noexcept nogil
        int (*ipc_close)(void *ctx, int32_t device_id, void *ptr,
                         pyxbuf_error *err) noexcept nogil

    enum:
        PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD_DEFAULT
        PYXBUF_IPC_HANDLE_MAX
        PYXBUF_IPC_BACKEND_HANDLE_MAX

    ctypedef struct pyxbuf_transfer_config:
        uint32_t size
        int32_t enabled
        int32_t threads
        int32_t buffers
        uint64_t threshold
        uint64_t chunk
        uint64_t pool_cap
        int32_t device_pool_off
        int32_t device_pool_shareable
        uint64_t device_pool_release_threshold
        int64_t reserved[2]

    void pyxbuf_transfer_config_get(pyxbuf_transfer_config *out) noexcept nogil
    int pyxbuf_transfer_config_set(const pyxbuf_transfer_config *config,
                                   pyxbuf_error *err) noexcept nogil
    int pyxbuf_transfer_config_check(pyxbuf_error *err) noexcept nogil

    ctypedef struct pyxbuf_pinned_pool_stats:
        uint64_t held_bytes
        uint64_t used_bytes
        uint64_t allocations
        uint64_t reuses
        uint64_t fill_threads
        uint64_t background_allocations
        uint64_t background_pending
        int64_t reserved[1]

    void pyxbuf_pinned_pool_stats_get(pyxbuf_pinned_pool_stats *out) noexcept nogil
    void pyxbuf_pinned_pool_trim() noexcept nogil

    int pyxbuf_backend_register(const pyxbuf_backend *backend, pyxbuf_error *err) noexcept
    int pyxbuf_backend_unregister(int32_t device_type) noexcept
    int pyxbuf_backend_get(int32_t device_type, pyxbuf_backend *out,
                           pyxbuf_error *err) noexcept
    int pyxbuf_view_device(const pyxbuf_view *view, pyxbuf_device *out,
                           pyxbuf_error *err) noexcept
    int pyxbuf_same_device(const pyxbuf_view *a, const pyxbuf_view *b) except -1
    int pyxbuf_device_wait(const pyxbuf_view *view, int64_t consumer_stream) except -1
    int pyxbuf_copy_to_host(const pyxbuf_view *view, void *dst, size_t nbytes) except -1
    object pyxbuf_to_device(const pyxbuf_view *view, const pyxbuf_device *target,
                            int64_t stream)

    void *pyxbuf_view_item_ptr(const pyxbuf_view *view, const Py_ssize_t *indices) except NULL
    object pyxbuf_view_memoryview(const pyxbuf_view *view)
    int pyxbuf_view_copy_contiguous(const pyxbuf_view *view, void *dst, size_t nbytes,
                                    char order) except -1

    # 6. Producer helpers
    ctypedef struct pyxbuf_export_desc:
        uint32_t size
        int32_t ndim
        void *buf
        const char *format
        Py_ssize_t itemsize
        Py_ssize_t *shape
        Py_ssize_t *strides
        int32_t readonly
        int32_t tracked
        const char *device
        void *device_info
        int64_t reserved[2]

    int pyxbuf_export_fill(Py_buffer *view, object exporter, int flags,
                           const pyxbuf_export_desc *desc) except -1

    ctypedef struct pyxbuf_borrow_counter:
        int64_t views
        int64_t writable
        int64_t shared
        int64_t exclusive

    int pyxbuf_borrow_acquire(pyxbuf_borrow_counter *counter, Py_buffer *view, int flags,
                              const char *owner_name) except -1
    void pyxbuf_borrow_release(pyxbuf_borrow_counter *counter, Py_buffer *view) noexcept

    # NumPy's __array__(dtype=None, copy=None) of an extended producer (NULL: None)
    object pyxbuf_numpy_array(object obj, PyObject *dtype, PyObject *copy)
    object pyxbuf_exporter_new(const char *format, int32_t ndim, const Py_ssize_t *shape,
                               int32_t readonly, const pyxbuf_device *device)
    int pyxbuf_exporter_device(object obj, pyxbuf_device *out) except -1
    int pyxbuf_exporter_set_event(object obj, void *event, int64_t stream) except -1
    object pyxbuf_exporter_wrap(const pyxbuf_export_desc *desc, void (*free_fn)(void *) noexcept,
                                void *free_ctx)
    enum:
        PYXBUF_OVER_READONLY
        PYXBUF_OVER_PROCESS_SHARED
    object pyxbuf_exporter_over(object base, Py_ssize_t offset, const char *format,
                                Py_ssize_t itemsize, int32_t ndim, const Py_ssize_t *shape,
                                const Py_ssize_t *strides, int32_t options)
    int pyxbuf_device_share(object obj, pyxbuf_device *device, void *handle,
                            size_t *handle_len, int *fd) except -1
    object pyxbuf_exporter_open_shared(const pyxbuf_device *device, const void *handle,
                                       size_t handle_len, int fd, const char *format,
                                       Py_ssize_t itemsize, int32_t ndim,
                                       const Py_ssize_t *shape, const Py_ssize_t *strides,
                                       int32_t readonly)
    int pyxbuf_type_set_dlpack_exchange_api(PyTypeObject *type) except -1
    void *pyxbuf_exporter_data(object obj) except? NULL
    PyTypeObject *pyxbuf_exporter_type() except NULL

    # 7. Format strings
    enum:
        PYXBUF_FMT_ROOT
        PYXBUF_FMT_SCALAR
        PYXBUF_FMT_STRUCT
        PYXBUF_FMT_CUSTOM
        PYXBUF_FMT_PADDING
        PYXBUF_FMTN_COMPLEX
        PYXBUF_FMTN_OPAQUE
        PYXBUF_FMTN_POINTER
        PYXBUF_ORDER_NATIVE
        PYXBUF_ORDER_STANDARD
        PYXBUF_ORDER_LITTLE
        PYXBUF_ORDER_BIG
        PYXBUF_ORDER_NETWORK
        PYXBUF_ORDER_UNALIGNED
        PYXBUF_FORMAT_MAX_DEPTH
        PYXBUF_FORMAT_INLINE_NODES
        PYXBUF_FORMAT_INLINE_DIMS
        PYXBUF_FMTF_SINGLE_SCALAR
        PYXBUF_FMTF_HAS_STRUCT
        PYXBUF_FMTF_HAS_CUSTOM
        PYXBUF_FMTF_HAS_OPAQUE

    ctypedef struct pyxbuf_format_node:
        int32_t kind
        int32_t code
        int32_t byte_order
        int32_t flags
        int32_t parent
        int32_t next
        int32_t first_child
        int32_t nchildren
        int32_t ndim
        int32_t dims_start
        int64_t alignment
        int64_t repeat
        int64_t offset
        int64_t itemsize
        int64_t nbytes
        const char *name
        int32_t name_len
        int32_t custom_id_len
        const char *custom
        int32_t custom_len
        int32_t alternatives_len
        const char *alternatives

    ctypedef struct pyxbuf_format:
        const char *source
        int64_t itemsize
        int64_t alignment
        int32_t nnodes
        int32_t ndims
        int32_t flags
        int32_t node_capacity
        int32_t dims_capacity
        int32_t reserved0
        pyxbuf_format_node *heap_nodes
        int64_t *heap_dims
        pyxbuf_format_node inline_nodes[4]
        int64_t inline_dims[4]

    pyxbuf_format_node *pyxbuf_format_nodes(const pyxbuf_format *f) noexcept nogil
    int64_t *pyxbuf_format_dims(const pyxbuf_format *f) noexcept nogil
    int pyxbuf_format_parse(const char *fmt, pyxbuf_format *out, pyxbuf_error *err) noexcept nogil
    void pyxbuf_format_clear(pyxbuf_format *f) noexcept nogil
    int pyxbuf_format_itemsize(const char *fmt, int64_t *itemsize, int64_t *alignment,
                               pyxbuf_error *err) noexcept nogil
    int pyxbuf_format_write(const pyxbuf_format *f, char *buf, size_t cap, size_t *len,
                            pyxbuf_error *err) noexcept nogil
    void pyxbuf_format_init(pyxbuf_format *f) noexcept nogil
    int pyxbuf_format_add_scalar(pyxbuf_format *f, int32_t parent, int32_t code,
                                 int32_t byte_order, int32_t node_flags, int64_t repeat,
                                 int32_t ndim, const int64_t *dims,
                                 const char *name) noexcept nogil
    int pyxbuf_format_add_struct(pyxbuf_format *f, int32_t parent, int32_t byte_order,
                                 int64_t repeat, int32_t ndim, const int64_t *dims,
                                 const char *name) noexcept nogil
    int pyxbuf_format_add_custom(pyxbuf_format *f, int32_t parent, const char *alternatives,
                                 int32_t byte_order, int32_t node_flags, int64_t repeat,
                                 int32_t ndim, const int64_t *dims,
                                 const char *name) noexcept nogil
    int pyxbuf_format_add_padding(pyxbuf_format *f, int32_t parent,
                                  int64_t nbytes) noexcept nogil
    int pyxbuf_format_finish(pyxbuf_format *f, pyxbuf_error *err) noexcept nogil

    ctypedef struct pyxbuf_dtype_spec:
        uint32_t size
        int32_t reserved0
        const char *key
        int64_t itemsize
        int64_t alignment
        int (*size_fn)(const char *payload, size_t payload_len, int64_t *itemsize,
                       int64_t *alignment, void *ctx) noexcept nogil
        void *ctx
        int64_t reserved[2]

    int pyxbuf_dtype_register(const pyxbuf_dtype_spec *spec) noexcept nogil
    int pyxbuf_dtype_unregister(const char *key) noexcept nogil
