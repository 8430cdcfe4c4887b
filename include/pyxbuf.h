/*
 * pyxbuf.h -- the extended Python buffer protocol, for producers and consumers.
 *
 * This is the whole public C ABI of libpyxbuf. Sections, in order:
 *   1. export macro and versioning
 *   2. errors
 *   3. request flags, grant bits, supported flags
 *   4. the extended view and acquisition (pyxbuf_get / pyxbuf_release)
 *   5. device description
 *   6. producer helpers: filling views, borrow counting, the ready-made exporter
 *   7. format strings: parser, descriptor, writer, custom-type registry
 *
 * ABI rules: every struct uses fixed-width integers (no enums); structs that may
 * grow either start with `uint32_t size` or end with zeroed reserved space; fields
 * are only ever appended. Everything not declared here is hidden.
 *
 * Extended request flags may only be passed together with a pyxbuf_view (whose
 * first member is the classic Py_buffer): a producer that honours them writes the
 * fields that follow the Py_buffer.
 *
 * Threads: "needs the GIL" below means an attached thread state; on a
 * free-threaded CPython (Py_GIL_DISABLED, the GIL off) any number of threads
 * may call every function at once, and the library's caches, borrow counters
 * and registries synchronise themselves (GIL builds pay nothing for it). One
 * pyxbuf_view belongs to one thread at a time: acquire it on one thread and
 * release it on another only with a hand-over between them (a queue, a lock).
 *
 * Interpreters: the library's state is process-wide (the type cache, interned
 * strings, the NumPy route's and the DLPack tables' state; the borrow registry
 * is locked and shared by design). On a GIL build it relies on one GIL
 * ordering every thread that runs Python: the main interpreter and legacy
 * sub-interpreters (which share the main GIL) are supported; interpreters with
 * their own GIL (PEP 684: concurrent.interpreters, _interpreters.create) are
 * not. A module using pyxbuf must not declare
 * Py_MOD_PER_INTERPRETER_GIL_SUPPORTED: CPython then refuses to import it into
 * such an interpreter (ImportError) instead of letting two GILs race here.
 */
#ifndef PYXBUF_H
#define PYXBUF_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* 1. Export macro and versioning                                            */
/* ------------------------------------------------------------------------- */

/* PYXBUF_API marks the public functions. Define PYXBUF_STATIC when linking the
 * static library so that nothing is exported from the final shared object
 * (each PyO3 extension keeps its own private copy). */
#if defined(PYXBUF_STATIC)
#define PYXBUF_API
#elif defined(_WIN32)
#if defined(PYXBUF_BUILDING)
#define PYXBUF_API __declspec(dllexport)
#else
#define PYXBUF_API __declspec(dllimport)
#endif
#else
#define PYXBUF_API __attribute__((visibility("default")))
#endif

/* The version of this header (pyxbuf_version_string: the library's). */
#define PYXBUF_VERSION_MAJOR 0
#define PYXBUF_VERSION_MINOR 1
#define PYXBUF_VERSION_PATCH 0
/* Bumped on any incompatible change of a struct layout or a function's meaning. */
#define PYXBUF_ABI_VERSION 1

/* The ABI version of the library actually loaded; compare with
 * PYXBUF_ABI_VERSION to detect a header/library mismatch. */
PYXBUF_API uint32_t pyxbuf_abi_version(void);
/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
PYXBUF_API const char *pyxbuf_version_string(void);
/* 1 when the library loaded was built against an interpreter with the
 * extended buffer protocol (PYXBUF_NATIVE_PROTOCOL below): it reads and sets
 * the interpreter's own declarations; 0 when it is the backport. The views
 * have one layout either way. */
PYXBUF_API int pyxbuf_native_protocol(void);

/* ------------------------------------------------------------------------- */
/* 2. Errors                                                                 */
/* ------------------------------------------------------------------------- */

/* Return codes: 0 is success, every failure is negative. */
#define PYXBUF_OK 0
#define PYXBUF_EINVAL (-1)       /* an argument is invalid (NULL, out of range) */
#define PYXBUF_EFORMAT (-2)      /* a format string is malformed */
#define PYXBUF_EUNSUPPORTED (-3) /* well formed, but needs what this build lacks */
#define PYXBUF_EOVERFLOW (-4)    /* a count or size does not fit */
#define PYXBUF_ENOMEM (-5)       /* allocation failed */
#define PYXBUF_EBUFFER (-6)      /* a buffer request was refused */
#define PYXBUF_EBORROW (-7)      /* a borrow conflicts with one already held */
#define PYXBUF_EDEVICE (-8)      /* device memory where host memory is required */
#define PYXBUF_EPYTHON (-9)      /* a Python exception is set */
#define PYXBUF_ENOSPACE (-10)    /* an output buffer is too small */
#define PYXBUF_EDRIVER (-11)     /* a device driver is missing or failed */

/* The bytes of pyxbuf_error.message, its terminating NUL included. */
#define PYXBUF_ERROR_MESSAGE_SIZE 480

/* Filled by functions that take an optional `pyxbuf_error *` (NULL = no detail
 * wanted). `position` is the byte offset in the input the error refers to
 * (format strings), or -1. */
typedef struct pyxbuf_error {
    int32_t code;
    int32_t reserved0;
    int64_t position;
    int64_t reserved[2];
    char message[PYXBUF_ERROR_MESSAGE_SIZE];
} pyxbuf_error;

/* Raise the Python exception that matches `err->code` (ValueError for format
 * errors and bad arguments, BufferError for refusals, borrows and device
 * memory where host memory is needed, MemoryError, OverflowError, RuntimeError
 * for driver failures and otherwise) with the message. Needs the GIL.
 * Returns -1. */
PYXBUF_API int pyxbuf_error_raise(const pyxbuf_error *err);

/* Which exception, in every binding: TypeError when an object is not
 * readable at all (pyxbuf_get) or its *item type* is not the one asked;
 * BufferError when pyxbuf reads the memory but cannot hand it out as asked
 * (read-only, device memory, layout, a borrow conflict, the producer's own
 * refusal); ValueError for arguments pyxbuf's API refuses. An item-type
 * refusal -- a format or itemsize that is not the consumer's type, or a
 * number of dimensions a typed consumer fixes -- is this class:
 * pyxbuf.ItemTypeError, deriving from both TypeError and BufferError, so
 * that code written for pyxbuf's rule and code written for PyO3's PyBuffer
 * (which raises BufferError there) both catch it. pyxbuf's Rust, C++ and
 * Cython layers raise it; raise it from C with
 * PyErr_SetString(pyxbuf_item_type_error(), message).
 *
 * One class for the process: the first copy of libpyxbuf that needs it makes
 * it and stores it as the attribute "ItemTypeError" of
 * sys.modules[PYXBUF_SHARED_MODULE]; every later copy (each PyO3 extension
 * has its own) finds it there, and the `pyxbuf` module exports it as
 * pyxbuf.ItemTypeError. Returns a borrowed reference, valid for the process
 * (the library keeps one), or NULL with an exception set (RuntimeError when
 * something else stands at that attribute). Needs the GIL; thread-safe. */
PYXBUF_API PyObject *pyxbuf_item_type_error(void);

/* ------------------------------------------------------------------------- */
/* 3. Request flags, grant bits, supported flags                             */
/* ------------------------------------------------------------------------- */

/* Every classic PyBUF_* request flag (PyBUF_WRITABLE .. PyBUF_INDIRECT; 0x2
 * is no flag): what a supported-flags value of 0 stands for, as CPython's
 * PyBUF_CLASSIC_FLAGS in the extended protocol. */
#define PYXBUF_CLASSIC_FLAGS 0x01FD

/* 1 when Python.h defines the extended buffer protocol itself (CPython with
 * cpython/'s patch series: PyBUF_DEVICE, the grown Py_buffer,
 * PyObject_CheckBufferSupports, the native supported flags): pyxbuf then
 * reads and sets the native declarations and its view's extended fields are
 * the native ones (one layout either way). */
#if defined(PyBUF_DEVICE) && defined(PyBUF_EXTENDED_FLAGS)
#define PYXBUF_NATIVE_PROTOCOL 1
#else
#define PYXBUF_NATIVE_PROTOCOL 0
#endif

/* Extended request flags (provisional until CPython assigns its own). Producers
 * in wide use ignore these bits; pyxbuf passes them only to producers whose type
 * advertises them. */
#define PYXBUF_DEVICE 0x0400           /* consumer accepts non-CPU memory */
#define PYXBUF_BORROW_SHARED 0x0800    /* nobody may write while the view is held */
#define PYXBUF_BORROW_EXCLUSIVE 0x1000 /* only this view may read or write */
#define PYXBUF_TEMPORARY 0x2000        /* released before control returns to Python */
#define PYXBUF_EXTENDED_FLAGS \
    (PYXBUF_DEVICE | PYXBUF_BORROW_SHARED | PYXBUF_BORROW_EXCLUSIVE | PYXBUF_TEMPORARY)
/* The custom-dtype proposal's PyBUF_EXTENDED_FORMAT (an open question there,
 * provisional here): the consumer reads formats with custom types
 * ("[ml_dtypes$bfloat16]"). A producer that declares it must refuse with
 * BufferError a request for the format (PyBUF_FORMAT) of custom items that
 * lacks it: a classic consumer (memoryview, bytes(), NumPy) cannot read them,
 * and NumPy, refused, falls back to the producer's __array__
 * (pyxbuf_numpy_array), which gives their NumPy dtype. pyxbuf_get passes it
 * to every type that declares it. Not in PYXBUF_EXTENDED_FLAGS: a producer
 * declaring only those never receives it. pyxbuf.Exporter and the Rust export
 * module's classes declare it. */
#define PYXBUF_EXTENDED_FORMAT 0x4000

/* Flags a producer may not ignore (the proposal's PyBUF_REQUIRED_FLAGS: "some
 * flags are soft request/capability flags. This is currently PyBUF_INDIRECT"):
 * every classic bit but INDIRECT's own -- PyBUF_WRITABLE (0x1), PyBUF_FORMAT
 * (0x4), PyBUF_ND (0x8), the strides bit of PyBUF_STRIDES (0x10) and the
 * contiguity bits of PyBUF_C/F/ANY_CONTIGUOUS (0x20, 0x40, 0x80). pyxbuf_get
 * refuses, before calling the producer, a request with one of these bits that
 * the producer's type does not support. Soft flags may be ignored, and the
 * consumer checks the answer: the INDIRECT bit 0x100 (a producer without
 * suboffsets answers NULL suboffsets, as NumPy answers FULL_RO) and every
 * extended flag (read view->flags and ext_flags). */
#define PYXBUF_REQUIRED_FLAGS 0x00FD

/* Grants, set by the producer in pyxbuf_view.ext_flags. */
#define PYXBUF_EXT_SHARED 0x1    /* nobody writes the memory while the view lives */
#define PYXBUF_EXT_EXCLUSIVE 0x2 /* this view alone reads and writes the memory */
/* Set beside SHARED or EXCLUSIVE: the grant is cooperative, not enforced.
 * Either pyxbuf's registry gave it (a producer that knows nothing of borrows)
 * or a producer whose own hold on the memory is cooperative (a zero-copy
 * wrapper of tracked memory) did. Other pyxbuf consumers respect it; code that
 * bypasses pyxbuf does not. A producer may set it, never without a grant.
 * pyxbuf_get leaves it clear (the grant enforced, no registry entry) for a
 * shared borrow of memory nobody can write: every byte the view reaches lies
 * in an exact bytes object, exported directly or through read-only
 * memoryviews or NumPy arrays whose base chain ends in it. */
#define PYXBUF_EXT_TRACKED 0x4
#define PYXBUF_EXT_ALL (PYXBUF_EXT_SHARED | PYXBUF_EXT_EXCLUSIVE | PYXBUF_EXT_TRACKED)

/* Supported-flags values (the bf_supported_flags backport). A type's value is
 * the class attribute `__pyxbuf_supported_flags__` (an int), set from C with
 * pyxbuf_type_set_supported_flags. Absent means 0. A mask may hold request
 * bits newer than pyxbuf (a producer backporting a future flag declares it and
 * receives it), below bit 29: bits 29 and 30 are pyxbuf's own, and the sign
 * bit is the proposal's (-1). A type whose mask has any bit outside
 * PYXBUF_CLASSIC_FLAGS speaks the extended protocol (pyxbuf's native path). */
#define PYXBUF_SUPPORTS_CLASSIC 0      /* every classic flag, no extended one */
#define PYXBUF_SUPPORTS_SIMPLE_ONLY (-1) /* PyBUF_SIMPLE only: the mask 0 */
#define PYXBUF_SUPPORTED_FLAGS_MAX 0x1FFFFFFF /* the widest mask a type may declare */
#define PYXBUF_SUPPORTED_FLAGS_ATTR "__pyxbuf_supported_flags__"

/* Record the flags `type` supports: 0, -1, or a mask of classic and extended
 * request flags. Works for static and heap types; the value lives in the type's
 * dict, so every copy of libpyxbuf in the process sees it. Needs the GIL.
 * Returns 0, or -1 with a Python exception set. */
PYXBUF_API int pyxbuf_type_set_supported_flags(PyTypeObject *type, int32_t flags);

/* The supported-flags value of `type` as a mask (0 and -1 expanded), cached per
 * type and invalidated when the type changes. Needs the GIL. Returns 0 with
 * *supported set, or -1 with a Python exception set (a non-int attribute). */
PYXBUF_API int pyxbuf_type_supported_flags(PyTypeObject *type, int32_t *supported);

/* The PyObject_CheckBufferSupports of the proposal, without calling the
 * producer: 1 if `obj` speaks a protocol pyxbuf reads (a buffer slot,
 * __dlpack__ or a DLPack C exchange table on its type,
 * __cuda_array_interface__) and advertises support for every bit of `flags`,
 * soft ones included (that is how a consumer that needs device memory skips
 * CPU-only producers); else 0. What an object advertises is its type's
 * supported flags, and for a type that does not speak the extended protocol
 * also what pyxbuf answers for it: PYXBUF_BORROW_SHARED/EXCLUSIVE (pyxbuf's
 * registry grants tracked borrows) and, when it speaks DLPack or the CUDA
 * Array Interface, PYXBUF_DEVICE (whether this object's memory is on a device
 * is known only once acquired: read view->device). A bit nobody advertises
 * (an unknown one, PYXBUF_TEMPORARY of an undeclared type) answers 0.
 * pyxbuf_get itself refuses only the PYXBUF_REQUIRED_FLAGS bits a type lacks.
 * The answer is per type and request: a producer may still refuse one object
 * (read-only memory for WRITABLE, a layout that is not contiguous). -1 with a
 * Python exception set on error. */
PYXBUF_API int pyxbuf_check_supports(PyObject *obj, int32_t flags);

/* ------------------------------------------------------------------------- */
/* 4. The extended view and acquisition                                      */
/* ------------------------------------------------------------------------- */

/* Which protocol produced a view (pyxbuf_view.path). */
#define PYXBUF_PATH_NONE 0
#define PYXBUF_PATH_NATIVE 1          /* the object's own extended buffer */
#define PYXBUF_PATH_DLPACK_C 2        /* DLPack C exchange API */
#define PYXBUF_PATH_DLPACK 3          /* __dlpack__ capsule */
#define PYXBUF_PATH_CAI 4             /* __cuda_array_interface__ */
#define PYXBUF_PATH_CLASSIC 5         /* classic buffer protocol */
#define PYXBUF_PATH_ARRAY_INTERFACE 6 /* NumPy __array_interface__ */
#define PYXBUF_PATH_NUMPY 7           /* a NumPy array's struct: its classic view, read */

/* Dimensions a bridge can describe without allocating. */
#define PYXBUF_INLINE_NDIM 8
/* The most dimensions pyxbuf accepts anywhere (NumPy 2's limit). */
#define PYXBUF_MAX_NDIM 64

/* A consumer's view. Allocate it anywhere (the stack is fine); pyxbuf_get fills
 * it and pyxbuf_release marks it released: its pointers are stale from then on
 * (builds with PYXBUF_DEBUG also clear them). sizeof(pyxbuf_view) is part of the ABI:
 * growth goes into `reserved`, with PYXBUF_ABI_VERSION bumped otherwise. */
typedef struct pyxbuf_view {
#if PYXBUF_NATIVE_PROTOCOL
    /* On an interpreter with the extended buffer protocol, Py_buffer itself
     * ends with flags, ext_flags, device and device_info: they are the four
     * fields below, the same bytes under two names (view.flags is
     * view.base.flags). Layout, size and offsets are the ones of the #else
     * branch: a binary built against either header reads the other's views,
     * and &view.base is a whole native Py_buffer for CPython's own
     * PyObject_GetBuffer(obj, &view.base, PyBUF_DEVICE | ...). */
    union {
        Py_buffer base;
        struct {
            char pyxbuf__classic_part[offsetof(Py_buffer, flags)];
            int32_t flags;
            int32_t ext_flags;
            const char *device;
            void *device_info;
        };
    };
#else
    Py_buffer base;      /* the classic view, its layout untouched */
    int32_t flags;       /* extended request flags the producer HONOURED */
    int32_t ext_flags;   /* grants: PYXBUF_EXT_* */
    const char *device;  /* NULL = CPU; else a unique UTF-8 device identifier */
    void *device_info;   /* interpreted per `device` (pyxbuf_device_info for
                            PYXBUF_DEVICE_DLPACK) */
#endif
    /* pyxbuf's own bookkeeping: read `path` freely, leave the rest alone. */
    int32_t path;        /* PYXBUF_PATH_* */
    int32_t requested;   /* the flags the consumer asked for */
    uint32_t state;      /* acquired / released marker */
    int32_t reserved0;
    PyObject *owner;     /* what a bridge keeps alive for the view, or NULL */
    void *bridge_data;   /* a bridge's private state, or NULL */
    Py_ssize_t inline_dims[2 * PYXBUF_INLINE_NDIM]; /* shape then strides */
    int64_t borrow_token; /* the cooperative registry's entry, when TRACKED */
    int64_t reserved[3];  /* [0]: the rust-numpy borrow a TRACKED view holds;
                             [1]: the device pool's mark of a view handed to a
                             consumer's stream (it moves with the view) */
} pyxbuf_view;

/* Acquire a view of `obj` for the classic and extended request `flags`.
 *
 * Extended fields are zeroed first; the producer's type's supported flags are
 * checked against `flags & PYXBUF_REQUIRED_FLAGS`; then the first protocol that
 * applies is used: the native extended buffer when the type advertises extended
 * flags; else the classic buffer when the type has one; then, when it has none
 * or cannot describe the object, the bridges in order: DLPack (C exchange table
 * first), CUDA Array Interface, __array_interface__. Request bits pyxbuf does
 * not know are not refused ("it is typical practice to ignore unknown flags"):
 * a native producer whose type advertises one receives it, other producers
 * never see it. What a producer returns is validated: a bit in `flags` that
 * was not requested, a device without PYXBUF_DEVICE, a grant that was not
 * asked for, or read-only memory for a writable request all raise BufferError.
 * PYXBUF_DEVICE set with a NULL device is CPU memory, as the proposal allows.
 * Needs the GIL.
 *
 * Returns 0, or -1 with a Python exception set (BufferError for refusals,
 * TypeError when the object speaks no buffer protocol pyxbuf knows). On
 * failure the view holds nothing and need not be released.
 *
 * A classic producer's view is what PyObject_GetBuffer of the running
 * interpreter returns for `flags & PYXBUF_CLASSIC_FLAGS`, on the first call
 * for a type and on every cached call after it. For an exact numpy.ndarray of
 * a built-in numeric dtype (native byte order, aligned, at most
 * PYXBUF_INLINE_NDIM dimensions) pyxbuf writes that same view from the array's
 * struct without calling NumPy's export (path PYXBUF_PATH_NUMPY, shape and
 * strides in the view's inline_dims); requests NumPy would refuse or warn
 * about still reach NumPy. On Python 3.13+ a request that
 * is PyBUF_READ or PyBUF_WRITE alone (PYXBUF_* bits aside) raises SystemError,
 * as PyObject_GetBuffer does there; older versions pass PyBUF_READ on.
 *
 * Differences from PyObject_GetBuffer, one line each with its reason (all else
 * agrees field by field, as python-tests/test_classic_differential.py checks):
 *  - a refusal is BufferError (cause: the producer's): producers vary, consumers catch one.
 *  - a request bit that is neither classic nor PYXBUF_* (PyBUF_WRITE too) reaches no classic
 *    producer: every producer ignores bits it does not know, so pyxbuf drops them for it.
 *  - on 3.13+, PyBUF_READ with only such bits beside it is refused too: the producer would get
 *    PyBUF_READ alone, which 3.13's PyBuffer_FillInfo refuses (bytearray then fills nothing).
 *  - an object whose classic buffer cannot describe it may be answered by a bridge: the aim.
 *  - read-only memory for a PyBUF_WRITABLE request is refused: the producer is broken.
 *  - PYXBUF_* bits reach only types that advertise them: the proposal's rule.
 * On the first: NumPy raises ValueError for contiguity, bytes BufferError for
 * writability. On the third: "cannot describe" is no buffer slot, or a refusal
 * of a dtype or layout (not the read-only refusal of a writable request); the
 * DLPack, CUDA Array Interface and __array_interface__ bridges then try in turn. */
PYXBUF_API int pyxbuf_get(PyObject *obj, pyxbuf_view *view, int32_t flags);

/* pyxbuf_get for a consumer working on `consumer_stream` (DLPack's integer
 * convention; PYXBUF_STREAM_NONE asks producers not to synchronise): the
 * DLPack bridge passes it to __dlpack__(stream=...) so the producer orders its
 * work before that stream; the CUDA Array Interface bridge records an event on
 * the producer's stream for pyxbuf_device_wait. pyxbuf_get passes no stream
 * (DLPack's None: producers order their work before the default stream only),
 * and the DLPack bridge then records an event on the default stream for the
 * view. Either way a NULL sync_event means ready for work on the request's
 * stream, never on any other: a consumer on another stream waits for the
 * event when there is one (pyxbuf_device_wait). */
PYXBUF_API int pyxbuf_get_stream(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                 int64_t consumer_stream);

/* Release a view acquired with pyxbuf_get. Exactly once: a second call is a
 * no-op (an assertion in debug builds, PYXBUF_DEBUG). Needs the GIL. */
PYXBUF_API void pyxbuf_release(pyxbuf_view *view);

/* The binding whose users read this copy's messages. Every extension links
 * its own copy of libpyxbuf; a message that names a fix names it in the terms
 * of that copy's binding (C: "request PYXBUF_DEVICE"; Rust:
 * "PyXBuffer::<T>::request().device()"; Python: "pyxbuf.to_device(x, "cpu")").
 * The first call with a PYXBUF_BINDING_* value sets it for the copy's life
 * (later values are ignored); any other value only asks. Returns the binding
 * in effect: PYXBUF_BINDING_C until one is set. The pyxbuf module, the Rust
 * crate, pyxbuf.hpp and pyxbuf_xview.pxi set theirs; a C extension need not
 * call it. */
#define PYXBUF_BINDING_C 0
#define PYXBUF_BINDING_CXX 1
#define PYXBUF_BINDING_CYTHON 2
#define PYXBUF_BINDING_RUST 3
#define PYXBUF_BINDING_PYTHON 4
PYXBUF_API int32_t pyxbuf_message_binding(int32_t binding);

/* Process-wide state shared by every copy of libpyxbuf in the process (each
 * PyO3 extension links its own static copy): a versioned table of C function
 * pointers in a PyCapsule named PYXBUF_SHARED_CAPSULE, stored as the attribute
 * "API" of the module sys.modules[PYXBUF_SHARED_MODULE]. The first copy that
 * needs it installs it; later copies use it. Fields are only ever appended:
 * check `size` before reading a field. Today it holds the cooperative borrow
 * registry (PYXBUF_EXT_TRACKED grants). */
#define PYXBUF_SHARED_MODULE "_pyxbuf_shared"
#define PYXBUF_SHARED_CAPSULE "_pyxbuf_shared.API"
#define PYXBUF_SHARED_API_VERSION 4

/* The bytes a borrow covers: [lo, hi) on one device. */
typedef struct pyxbuf_borrow_range {
    int32_t device_type; /* PYXBUF_DL_* */
    int32_t device_id;
    uint64_t lo;
    uint64_t hi;
} pyxbuf_borrow_range;

/* Which bytes of its range a strided borrow covers (version 2): items of
 * `itemsize` bytes, each starting at `first` plus a multiple of `stride_gcd`
 * (the gcd of the magnitudes of the strides of the dimensions with more than
 * one item). stride_gcd 0 means one item covering the whole range (a single
 * item, or a run that fills it): `first` and `itemsize` are then not read.
 * Two borrows overlap only if their ranges
 * overlap and an item of one can meet an item of the other, so interleaved
 * views -- a[::2] and a[1::2], the real and imaginary parts of complex data,
 * the columns of a C-ordered matrix -- do not conflict.
 * Version 3: bit 63 of `itemsize` says the key is dense -- every point of
 * its lattice within its range is an item (a 1-D view, or dimensions that
 * chain as a strided C or Fortran array's do) -- which lets the registry
 * decide two dense keys whose spacings divide one another exactly, where
 * the lattice alone must assume the items may meet. A copy of pyxbuf passes
 * a table older than version 3 keys without the bit. */
typedef struct pyxbuf_borrow_key {
    pyxbuf_borrow_range range;
    uint64_t first;
    uint64_t stride_gcd;
    uint64_t itemsize;
} pyxbuf_borrow_key;

/* The shared table's layout (see above): its version and size, then the
 * registry's functions, each field commented with the version that added it. */
typedef struct pyxbuf_shared_api {
    uint32_t version;              /* PYXBUF_SHARED_API_VERSION of the installer */
    uint32_t size;                 /* sizeof(pyxbuf_shared_api) as the installer knew it */
    const char *installer_version; /* pyxbuf_version_string() of the installer */
    /* Grant a borrow of `range` unless it overlaps an exclusive borrow (or, for
     * an exclusive request, any borrow): 0 and *token, or PYXBUF_EBORROW with a
     * description of the conflicting borrow in why[why_cap]. Thread-safe. */
    int (*borrow_acquire)(const pyxbuf_borrow_range *range, int32_t exclusive, int64_t *token,
                          char *why, size_t why_cap);
    void (*borrow_release)(int64_t token);
    int64_t (*borrow_live)(void); /* borrows held now, all copies together */
    /* Version 2: borrow_acquire for the items of a strided view (a version-1
     * range counts as one item covering all of it). */
    int (*borrow_acquire_key)(const pyxbuf_borrow_key *key, int32_t exclusive, int64_t *token,
                              char *why, size_t why_cap);
    /* Version 4: the installer's registry itself, for other copies of pyxbuf
     * built with the same private layout (`registry_layout`), which then work
     * on it inline under its lock instead of calling the functions above. Not
     * for other code: the layout is pyxbuf's own and changes with the number. */
    uint32_t registry_layout;
    void *registry;
} pyxbuf_shared_api;

/* The shared table (installed on first call). Needs the GIL the first time.
 * Returns NULL with an exception set if sys.modules holds an incompatible one. */
PYXBUF_API const pyxbuf_shared_api *pyxbuf_shared_api_get(void);

/* 1 if `view` currently holds an acquisition, else 0. */
PYXBUF_API int pyxbuf_view_is_acquired(const pyxbuf_view *view);

/* 1 if the view's memory may be dereferenced by the host (CPU memory). */
PYXBUF_API int pyxbuf_view_is_host(const pyxbuf_view *view);

/* A short name for a PYXBUF_PATH_* value ("native", "classic", ...). */
PYXBUF_API const char *pyxbuf_path_name(int32_t path);

/* ------------------------------------------------------------------------- */
/* 5. Device description                                                     */
/* ------------------------------------------------------------------------- */

/* The generic device identifier; its device_info is a pyxbuf_device_info. */
#define PYXBUF_DEVICE_DLPACK "pyxbuf.dlpack"
/* Reserved: never handed out as a device (NULL means CPU). */
#define PYXBUF_DEVICE_CPU "cpu"

/* DLPack DLDeviceType values, reused for pyxbuf_device_info.device_type. */
#define PYXBUF_DL_CPU 1
#define PYXBUF_DL_CUDA 2
#define PYXBUF_DL_CUDA_HOST 3
#define PYXBUF_DL_OPENCL 4
#define PYXBUF_DL_VULKAN 7
#define PYXBUF_DL_METAL 8
#define PYXBUF_DL_VPI 9
#define PYXBUF_DL_ROCM 10
#define PYXBUF_DL_ROCM_HOST 11
#define PYXBUF_DL_EXT_DEV 12 /* test devices: pyxbuf's emulated device */
#define PYXBUF_DL_CUDA_MANAGED 13
#define PYXBUF_DL_ONEAPI 14
#define PYXBUF_DL_WEBGPU 15
#define PYXBUF_DL_HEXAGON 16
#define PYXBUF_DL_MAIA 17

/* DLPack flag bits carried in pyxbuf_device_info.dl_flags. */
#define PYXBUF_DL_FLAG_READ_ONLY 0x1
#define PYXBUF_DL_FLAG_IS_COPIED 0x2

/* Where a view's memory lives and how to order work on it: what a producer
 * writes for PYXBUF_DEVICE_DLPACK (pyxbuf_export_desc.device_info) and what
 * pyxbuf_view_device reads; every field below says its part. */
typedef struct pyxbuf_device_info {
    uint32_t size;        /* sizeof as the writer knew it */
    int32_t device_type;  /* DLPack DLDeviceType (PYXBUF_DL_*) */
    int32_t device_id;    /* ordinal */
    int32_t reserved0;
    void *sync_event;     /* e.g. a CUevent to wait for before touching the
                             memory; NULL = the producer ordered its work
                             before the stream the request named
                             (pyxbuf_get_stream), or has none pending */
    int64_t stream;       /* producer's stream, informational (DLPack convention) */
    uint64_t dl_flags;    /* PYXBUF_DL_FLAG_* */
    int64_t reserved[3];  /* zero */
} pyxbuf_device_info;

/* Device identifiers are compared by pointer first, then by content. NULL and
 * "cpu" both mean the host. Returns 1 when equal. */
PYXBUF_API int pyxbuf_device_equal(const char *a, const char *b);

/* A device in the Array API's sense: a DLPack device type and an ordinal.
 * The host is {PYXBUF_DL_CPU, 0}. Devices compare with pyxbuf_device_same. */
typedef struct pyxbuf_device {
    int32_t device_type; /* PYXBUF_DL_* */
    int32_t device_id;   /* ordinal; 0 for the host */
} pyxbuf_device;

/* Streams are int64_t in DLPack's convention: for CUDA and ROCm, 0 is the
 * default (legacy) stream, 1 the legacy default stream, 2 the per-thread default
 * stream, anything else a stream handle. PYXBUF_STREAM_NONE asks for no
 * synchronisation at all. */
#define PYXBUF_STREAM_DEFAULT 0
#define PYXBUF_STREAM_NONE (-1)

/* 1 if both describe the same device. */
PYXBUF_API int pyxbuf_device_same(const pyxbuf_device *a, const pyxbuf_device *b);
/* "cpu", "cuda", "rocm", "ext_dev", ... for a DLPack device type ("unknown"
 * otherwise). */
PYXBUF_API const char *pyxbuf_device_type_name(int32_t device_type);
/* Write "cuda:0" (or "cpu") into buf; returns the length written, or a
 * negative code when it does not fit. */
PYXBUF_API int pyxbuf_device_format(const pyxbuf_device *device, char *buf, size_t cap);

/* A device backend: what pyxbuf needs to move bytes on one DLPack device type.
 * Every function returns 0 or a negative PYXBUF_E* code with `err` filled; none
 * needs the GIL (pyxbuf releases it around calls that may block). Copies are
 * of `n` contiguous bytes, ordered after the work already queued on `stream`,
 * and complete when they return. A copy between two devices runs on a stream of
 * the destination device. PYXBUF_STREAM_NONE: copies and event records use the
 * default stream, waits and synchronisation do nothing. */
typedef struct pyxbuf_backend {
    uint32_t size;       /* sizeof(pyxbuf_backend) as the registrant knew it */
    int32_t device_type; /* the DLPack device type served */
    const char *name;    /* for messages, e.g. "cuda" */
    void *ctx;           /* passed back to every function */
    int (*copy_to_host)(void *ctx, int32_t device_id, void *dst, const void *src, size_t n,
                        int64_t stream, pyxbuf_error *err);
    int (*copy_from_host)(void *ctx, int32_t device_id, void *dst, const void *src, size_t n,
                          int64_t stream, pyxbuf_error *err);
    int (*copy_on_device)(void *ctx, int32_t dst_id, void *dst, int32_t src_id, const void *src,
                          size_t n, int64_t stream, pyxbuf_error *err);
    int (*alloc)(void *ctx, int32_t device_id, size_t n, void **ptr, pyxbuf_error *err);
    int (*free)(void *ctx, int32_t device_id, void *ptr, pyxbuf_error *err);
    /* Make `stream` wait until `event` (recorded by a producer) has happened. */
    int (*event_wait)(void *ctx, int32_t device_id, void *event, int64_t stream,
                      pyxbuf_error *err);
    /* Record a new event on `stream` after the work queued so far. */
    int (*event_record)(void *ctx, int32_t device_id, int64_t stream, void **event,
                        pyxbuf_error *err);
    int (*event_destroy)(void *ctx, int32_t device_id, void *event, pyxbuf_error *err);
    /* The device holding `ptr`, or PYXBUF_EDEVICE when it is not device memory
     * this backend knows. */
    int (*pointer_query)(void *ctx, const void *ptr, pyxbuf_device *device, pyxbuf_error *err);
    /* Block the host until everything queued on `stream` has run. */
    int (*synchronize)(void *ctx, int32_t device_id, int64_t stream, pyxbuf_error *err);
    /* Optional, all four or none (NULL: every copy is the direct call above).
     * With them pyxbuf keeps a pool of page-locked host memory per backend
     * and moves large copies of pageable memory through it (see
     * pyxbuf_transfer_config). host_alloc: `n` bytes of host memory the
     * device copies to and from at the link's rate (cuMemHostAlloc). */
    int (*host_alloc)(void *ctx, int32_t device_id, size_t n, void **ptr, pyxbuf_error *err);
    int (*host_free)(void *ctx, int32_t device_id, void *ptr, pyxbuf_error *err);
    /* Enqueue a copy of `n` bytes between host_alloc memory and the device on
     * `stream` and return at once (to_host: device -> host); the host bytes
     * must stay untouched until an event recorded after it has happened. */
    int (*copy_async)(void *ctx, int32_t device_id, int32_t to_host, void *dst, const void *src,
                      size_t n, int64_t stream, pyxbuf_error *err);
    /* 1 when `event` has happened, 0 when not yet; with `block`, the host
     * first waits for it (so 1 or an error). */
    int (*event_query)(void *ctx, int32_t device_id, void *event, int32_t block,
                       pyxbuf_error *err);
    /* Optional: a stream-ordered pool of device memory (CUDA's
     * cuMemAllocAsync), which pyxbuf's own device allocations (to_device
     * results, device exporters) come from unless the configuration's
     * device_pool_off says otherwise. alloc_async and free_async come both or
     * neither, and with event_record, event_wait and event_destroy (pyxbuf
     * orders frees after other streams with them); pool_trim only beside
     * them. A registrant whose `size` predates them has none.
     * alloc_async: `n` bytes usable by work queued on `stream` after the call
     * (work on another stream first waits for an event recorded on `stream`
     * after it); memory freed on `stream` may come back at once. */
    int (*alloc_async)(void *ctx, int32_t device_id, size_t n, int64_t stream, void **ptr,
                       pyxbuf_error *err);
    /* Return alloc_async memory to the backend's pool once the work queued on
     * `stream` before the call has run, without blocking the host: later work
     * on `stream` may get it at once, other streams once the free has run.
     * Work on other streams that uses the memory must be ordered before the
     * call (pyxbuf makes `stream` wait for an event of each stream it handed
     * the memory to); the free must be ordered after the allocation. */
    int (*free_async)(void *ctx, int32_t device_id, void *ptr, int64_t stream, pyxbuf_error *err);
    /* Give memory the pool caches and no allocation uses back to the device
     * until the pool reserves at most `keep_bytes` (memory in use, and memory
     * whose free has not run yet, stays). */
    int (*pool_trim)(void *ctx, int32_t device_id, uint64_t keep_bytes, pyxbuf_error *err);
    /* Optional, all three or none (a registrant whose `size` predates them
     * has none): device memory shared with another process on this machine,
     * as CUDA's IPC shares it (cuIpcGetMemHandle, cuIpcOpenMemHandle,
     * cuIpcCloseMemHandle). ipc_export: at most *handle_len bytes (on entry
     * PYXBUF_IPC_BACKEND_HANDLE_MAX) into `handle`, *handle_len their number,
     * naming the live allocation holding `ptr` and ptr's place in it;
     * ipc_open, in another process: map it there, *ptr where `ptr` was (the
     * exporting process's own opens never reach it: pyxbuf serves them with
     * the memory it has); ipc_close: unmap what ipc_open mapped. The
     * exporter keeps the allocation alive while others use it.
     * A handle may need a file descriptor beside its bytes (a CUDA pool's
     * shareable handle, the emulated device's memfd): ipc_export sets *fd
     * (-1 on entry) to one the backend keeps open for the process's life,
     * and the caller sends a duplicate with the handle (SCM_RIGHTS:
     * multiprocessing.reduction.DupFd); ipc_open gets the descriptor that
     * arrived (-1: none), which it does not keep past the call (it
     * duplicates what it needs). */
    int (*ipc_export)(void *ctx, int32_t device_id, const void *ptr, void *handle,
                      size_t *handle_len, int *fd, pyxbuf_error *err);
    int (*ipc_open)(void *ctx, int32_t device_id, const void *handle, size_t handle_len,
                    int fd, void **ptr, pyxbuf_error *err);
    int (*ipc_close)(void *ctx, int32_t device_id, void *ptr, pyxbuf_error *err);
} pyxbuf_backend;
/* pyxbuf_device_share's handle: pyxbuf's 32 bytes (the exporting process,
 * and the address there), then the backend's. */
#define PYXBUF_IPC_HANDLE_MAX 256
#define PYXBUF_IPC_BACKEND_HANDLE_MAX 224

/* Register (or replace) the backend of backend->device_type; the struct is
 * copied. libpyxbuf registers its CPU and CUDA backends itself. The registry
 * is the process's (with the transfer configuration, the pinned pool and the
 * fill threads: one transfer engine, published in the shared module by the
 * first copy of libpyxbuf that needs it): a backend registered through any
 * extension serves every extension, and a device array made by one can be
 * moved by all. */
PYXBUF_API int pyxbuf_backend_register(const pyxbuf_backend *backend, pyxbuf_error *err);
/* Remove the backend of a device type; PYXBUF_EINVAL if none. */
PYXBUF_API int pyxbuf_backend_unregister(int32_t device_type);
/* Copy the backend of `device_type` into `out`; PYXBUF_EUNSUPPORTED with a
 * message naming the device type if none is registered. */
PYXBUF_API int pyxbuf_backend_get(int32_t device_type, pyxbuf_backend *out, pyxbuf_error *err);

/* pyxbuf_transfer_config.device_pool_release_threshold when it is 0 (below). */
#define PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD_DEFAULT ((uint64_t)256 << 20)

/* How pyxbuf moves copies between pageable host memory and a device whose
 * backend has host_alloc (CUDA's does): through a pool of page-locked
 * staging buffers: host threads fill (or drain) one while the device
 * copies the previous one, instead of the driver's one-thread staging (a
 * copy shorter than 4 chunks goes in smaller pieces, 2 MiB at least, so it
 * overlaps too). From `threshold` (default 2 MiB) `threads` host threads
 * fill each buffer; from 64 KiB to `threshold`, the calling thread (and
 * from 512 KiB three more). Results of pyxbuf_to_device(view, cpu) of 64 KiB and more live in
 * pooled page-locked memory (returned to the pool when the exporter dies).
 * Only idle pooled memory is used: a copy that finds none goes without
 * (directly, or into pageable memory) and the pool grows in the background
 * for the copies after it -- a result's block once its size has missed
 * twice -- so no copy waits for memory to be page-locked, except one of 4
 * chunks or more that finds no buffer at all, which page-locks two small
 * ones (4 MiB) and pipelines through them. Under 64 KiB every copy is the
 * backend's direct call.
 * Read once from the environment: PYXBUF_STAGING=0 turns it all off;
 * PYXBUF_STAGING_THRESHOLD, PYXBUF_STAGING_CHUNK, PYXBUF_PINNED_POOL_CAP
 * (bytes, suffixes K, M, G) and PYXBUF_STAGING_THREADS set the fields;
 * PYXBUF_STAGING_HUGE_PAGES=1 asks the kernel for transparent huge pages on
 * large destinations before draining into them (faster on some hosts);
 * PYXBUF_DEVICE_POOL=0 sets device_pool_off, PYXBUF_DEVICE_POOL=shareable
 * device_pool_shareable, and PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD (bytes)
 * device_pool_release_threshold.
 * Every variable is checked as pyxbuf_transfer_config_set checks its field:
 * one out of range or malformed leaves the defaults in force and makes every
 * copy fail naming it (pyxbuf_transfer_config_check) until the
 * configuration is set.
 *
 * pyxbuf's own device memory (to_device results, device exporters) comes
 * from the backend's stream-ordered pool where it has one (alloc_async:
 * CUDA's cuMemAllocAsync on devices with memory pools): allocated on the
 * request's stream (device exporters: the default stream) and freed in that
 * stream's order when the exporter dies, after every other stream the memory
 * was handed to (pyxbuf_get_stream, pyxbuf_device_wait, __dlpack__(stream=)),
 * with no device-wide synchronisation. device_pool_off = 1 makes every
 * device allocation the backend's alloc/free (cuMemAlloc, cuMemFree).
 * device_pool_release_threshold: bytes a device's pool keeps cached across a
 * synchronisation (CUDA's CU_MEMPOOL_ATTR_RELEASE_THRESHOLD); more is given
 * back to the device when a stream or event is synchronised. 0 means the
 * default, PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD_DEFAULT (256 MiB: pyxbuf
 * synchronises after every copy to the host, so CUDA's own default of 0
 * would hand a transfer loop's memory back each time and pay cuMemAlloc's
 * ~100 us again; 256 MiB keeps a loop of copies up to that size cached and
 * is 0.2% of an H200, 3% of an 8 GiB card). To keep next to nothing, set 1;
 * at most 2^63 - 1. A CUDA default pool that another library has set higher
 * (PyTorch's cudaMallocAsync backend sets it to keep everything) is left as
 * it is.
 * device_pool_shareable = 1: pyxbuf's device memory comes from pools other
 * processes can open (pyxbuf_device_share; pyxbuf.multiprocessing): on CUDA
 * a pool of pyxbuf's own per device, created with POSIX file-descriptor
 * handles, instead of the device's default pool, whose memory CUDA cannot
 * share. CUDA gives such a pool's memory back to the device only when the
 * process exits: the release threshold and pool_trim do nothing there (the
 * CUDA programming guide, "IPC Export Pool Limitations"), which is why it is
 * not the default. A device whose pools cannot have such handles
 * (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES) keeps the default
 * pool, and sharing its memory is refused naming that. Memory allocated
 * before a change stays in the pool it came from. */
typedef struct pyxbuf_transfer_config {
    uint32_t size;          /* sizeof(pyxbuf_transfer_config) */
    int32_t enabled;        /* 0: every copy is the backend's direct call */
    int32_t threads;        /* host threads filling or draining a chunk, 1..64 */
    int32_t buffers;        /* staging buffers in flight per copy, 2..16 */
    uint64_t threshold;     /* bytes: from here copies use `threads` and `buffers` */
    uint64_t chunk;         /* bytes per staging buffer, at least 64 KiB */
    uint64_t pool_cap;      /* bytes of page-locked memory the pool may hold */
    int32_t device_pool_off; /* 1: device allocations skip the stream-ordered pool;
                                0 (default): from it where the backend has one */
    int32_t device_pool_shareable; /* 1: from pools other processes can open;
                                      0 (default): the device's default pool */
    uint64_t device_pool_release_threshold; /* bytes cached across a sync; 0: default */
    int64_t reserved[2];
} pyxbuf_transfer_config;

/* The configuration in force (environment applied on first use). */
PYXBUF_API void pyxbuf_transfer_config_get(pyxbuf_transfer_config *out);
/* Replace it; PYXBUF_EINVAL naming the field when one is out of range. A
 * smaller pool_cap applies at the pool's next use, which frees idle blocks
 * beyond it (pyxbuf_pinned_pool_trim frees them all now). */
PYXBUF_API int pyxbuf_transfer_config_set(const pyxbuf_transfer_config *config,
                                          pyxbuf_error *err);
/* 0 when the configuration in force is valid; PYXBUF_EINVAL naming the
 * variable when the environment set one out of range or malformed (every
 * copy that consults the configuration then fails the same way, until
 * pyxbuf_transfer_config_set replaces it). */
PYXBUF_API int pyxbuf_transfer_config_check(pyxbuf_error *err);
/* The pool's state, for tests and tuning: bytes held and in use, and how
 * many blocks were allocated and reused since the start. A copy that finds
 * no idle block of its size goes without one (directly, or into pageable
 * memory) and the pool grows in the background, for the copies after it. */
typedef struct pyxbuf_pinned_pool_stats {
    uint64_t held_bytes, used_bytes;
    uint64_t allocations, reuses;
    uint64_t fill_threads; /* host threads the engine has started to fill and drain */
    uint64_t background_allocations; /* of `allocations`, made off the copies' path */
    uint64_t background_pending;     /* requests for blocks not yet served */
    int64_t reserved[1];
} pyxbuf_pinned_pool_stats;
PYXBUF_API void pyxbuf_pinned_pool_stats_get(pyxbuf_pinned_pool_stats *out);
/* Free every idle pooled block now (blocks in use are freed when returned
 * only if over the cap). */
PYXBUF_API void pyxbuf_pinned_pool_trim(void);

/* The device of a view: {PYXBUF_DL_CPU, 0} for host memory. Views whose
 * device is not PYXBUF_DEVICE_DLPACK fail with PYXBUF_EUNSUPPORTED. */
PYXBUF_API int pyxbuf_view_device(const pyxbuf_view *view, pyxbuf_device *out, pyxbuf_error *err);

/* The Array API's rule: operations on views on different devices are errors,
 * never implicit transfers. Returns 0, or -1 with ValueError naming both. */
PYXBUF_API int pyxbuf_same_device(const pyxbuf_view *a, const pyxbuf_view *b);

/* Make `consumer_stream` wait for the producer's sync event (no-op for host
 * memory and for views without an event). Returns 0, or -1 with RuntimeError. */
PYXBUF_API int pyxbuf_device_wait(const pyxbuf_view *view, int64_t consumer_stream);

/* Copy the view's items, in C order and packed, into host memory `dst` of
 * `nbytes` (exactly base.len). Waits for the producer's event first. Works for
 * host and device views, any strides. Returns 0, or -1 with an exception. */
PYXBUF_API int pyxbuf_copy_to_host(const pyxbuf_view *view, void *dst, size_t nbytes);

/* A new pyxbuf.Exporter on `target` holding the view's items in C order, or,
 * when the view already lives on `target`, a new reference to the view's
 * object (no copy). host->device, device->host and device->device go through
 * the backends on `stream`. Device memory from the stream-ordered pool (see
 * pyxbuf_transfer_config) is allocated on `stream` and freed in its order
 * when the exporter dies: `stream` must still exist then (as for
 * cuMemFreeAsync), or the memory is kept out of the pool for good. Returns
 * NULL with an exception on failure. */
PYXBUF_API PyObject *pyxbuf_to_device(const pyxbuf_view *view, const pyxbuf_device *target,
                                      int64_t stream);

/* Host-only operations. Each refuses a device view with BufferError saying to
 * copy to the host first (pyxbuf_copy_to_host / pyxbuf_to_device). */

/* Address of the item at `indices` (ndim of them), bounds-checked. */
PYXBUF_API void *pyxbuf_view_item_ptr(const pyxbuf_view *view, const Py_ssize_t *indices);
/* A memoryview of the view's object (a new classic acquisition). */
PYXBUF_API PyObject *pyxbuf_view_memoryview(const pyxbuf_view *view);
/* Copy the items into `dst` (exactly base.len bytes) in order 'C' or 'F'. */
PYXBUF_API int pyxbuf_view_copy_contiguous(const pyxbuf_view *view, void *dst, size_t nbytes,
                                           char order);

/* ------------------------------------------------------------------------- */
/* 6. Producer helpers                                                       */
/* ------------------------------------------------------------------------- */

/* What a producer exports; the input of pyxbuf_export_fill. */
typedef struct pyxbuf_export_desc {
    uint32_t size;            /* sizeof(pyxbuf_export_desc) */
    int32_t ndim;             /* 0 .. PYXBUF_MAX_NDIM */
    void *buf;                /* first element (host or device address) */
    const char *format;       /* NULL = "B"; must outlive every view */
    Py_ssize_t itemsize;      /* 0 = computed from `format` */
    Py_ssize_t *shape;        /* ndim entries; must outlive every view */
    Py_ssize_t *strides;      /* ndim entries in bytes, or NULL for C order */
    int32_t readonly;         /* nonzero: refuse PyBUF_WRITABLE */
    int32_t tracked;          /* nonzero: nothing enforces that the memory stays
                                 unwritten (a tracked borrow of it, or none is
                                 held), so every grant given for it is
                                 PYXBUF_EXT_TRACKED; read by pyxbuf_exporter_wrap */
    const char *device;       /* NULL = host memory; else a device identifier */
    void *device_info;        /* for `device`; must outlive every view */
    int64_t reserved[2];
} pyxbuf_export_desc;

/* Fill `view` (the Py_buffer a bf_getbuffer slot receives) for `exporter` from
 * `desc`, honouring the classic `flags` as CPython's producers do (shape only
 * with ND, strides only with STRIDES, contiguity checked, format only with
 * FORMAT; without ND one flat C-contiguous run: ndim 1, shape NULL, as
 * PyBuffer_FillInfo, array.array and memoryview answer (NumPy answers ndim 0);
 * at ndim 0 shape and strides NULL), and
 * the extended ones: device fields only when PYXBUF_DEVICE was requested, and
 * BufferError for device memory when it was not. Takes a reference to
 * `exporter` in view->obj. Returns 0, or -1 with BufferError set. */
PYXBUF_API int pyxbuf_export_fill(Py_buffer *view, PyObject *exporter, int flags,
                                  const pyxbuf_export_desc *desc);

/* Borrow counting for a producer's object: embed one, zero-initialised. */
typedef struct pyxbuf_borrow_counter {
    int64_t views;     /* live views of any kind */
    int64_t writable;  /* live views handed out writable */
    int64_t shared;    /* live shared borrows */
    int64_t exclusive; /* live exclusive borrows (0 or 1) */
} pyxbuf_borrow_counter;

/* Decide a request against the counter, called from bf_getbuffer after the
 * view is filled: an exclusive borrow only when no other borrow is live; a
 * shared borrow only when no exclusive borrow is live; a plain request refused
 * while an exclusive borrow is live, refused if writable while a shared borrow
 * is live, and handed out read-only then. A borrow asked while views the
 * counter cannot control are live (plain views: a NumPy array or memoryview
 * over the memory, a DLPack export held by PyTorch; for a shared borrow, the
 * writable ones) is granted TRACKED -- taken in the process-wide registry as
 * pyxbuf_get takes NumPy's, so pyxbuf's consumers of those views and of this
 * object see each other -- instead of refused; once they are gone, grants are
 * enforced again. A consumer that needs an enforced grant checks that
 * PYXBUF_EXT_TRACKED is clear in ext_flags. On success, records the grant in
 * view->internal (and the registry token of a tracked one) and, for extended
 * requests, view->ext_flags. Returns 0, or -1 with BufferError naming who holds
 * what. `owner_name` names the object in messages. On free-threaded builds the
 * counter is changed under a lock of the library's (two threads may run one
 * bf_getbuffer at once); read its fields yourself only where no other thread
 * can be acquiring. A caller that decides on a copy of the counter and drops
 * the decision (to decide again) calls pyxbuf_borrow_release on the copy, which
 * gives a tracked grant's registry borrow back. */
PYXBUF_API int pyxbuf_borrow_acquire(pyxbuf_borrow_counter *counter, Py_buffer *view,
                                     int flags, const char *owner_name);

/* Undo pyxbuf_borrow_acquire, from bf_releasebuffer. */
PYXBUF_API void pyxbuf_borrow_release(pyxbuf_borrow_counter *counter, Py_buffer *view);

/* NumPy's __array__(dtype=None, copy=None) for an extended producer (what
 * pyxbuf.Exporter and the Rust export module's classes answer): an ndarray
 * over obj's memory through a view of it, zero-copy unless `copy` is True or
 * `dtype` needs a conversion (NumPy 2's meaning of both; NULL reads None).
 * Custom items ("[module$name]") come as their NumPy dtype,
 * np.dtype(module.name) (ml_dtypes' types; a registered type whose module is
 * imported), strides and read-only flag kept, the view held until the array
 * is gone. The producer's refusal when it cannot hand out a plain view
 * (device memory, an exclusive borrow); pyxbuf.ItemTypeError when NumPy has
 * no dtype for the items. New reference, or NULL with an exception set. */
PYXBUF_API PyObject *pyxbuf_numpy_array(PyObject *obj, PyObject *dtype, PyObject *copy);

/* The ready-made exporter: a Python object (type "pyxbuf.Exporter") owning a
 * C-contiguous block of memory on `device` (NULL = host), exporting it through
 * the extended protocol with borrow counting. Host memory is zeroed; device
 * memory is allocated by the device's backend and its contents are undefined.
 * Device memory from the backend's stream-ordered pool (see
 * pyxbuf_transfer_config) is ready for work on the default stream; while that
 * stream still has work queued (a previous owner's, and its free), the
 * exporter carries an event recorded after the allocation, and work on ANY
 * other stream -- the caller's own filling it included -- must first wait for
 * it (pyxbuf_device_wait on a view of the exporter, or the device_info's
 * sync_event), as for any producer's memory. `format` NULL = "B". Needs the
 * GIL. Returns a new reference, or NULL with a Python exception set. */
PYXBUF_API PyObject *pyxbuf_exporter_new(const char *format, int32_t ndim,
                                         const Py_ssize_t *shape, int32_t readonly,
                                         const pyxbuf_device *device);

/* The exporter's device ({PYXBUF_DL_CPU, 0} for host memory). */
PYXBUF_API int pyxbuf_exporter_device(PyObject *obj, pyxbuf_device *out);

/* Hand the exporter the event its consumers must wait for (recorded by the
 * producer after its last write, on the exporter's device); the exporter owns
 * it from now on and destroys the previous one. NULL = ready now. */
PYXBUF_API int pyxbuf_exporter_set_event(PyObject *obj, void *event, int64_t stream);

/* An exporter over memory the caller allocated: `free_fn(free_ctx)` runs once
 * when the exporter dies (free_fn may be NULL). Its grants are never stronger
 * than the caller's hold on the memory: with `desc->tracked` set (a zero-copy
 * wrapper of another object's memory held through a tracked borrow, or through
 * none) every grant carries PYXBUF_EXT_TRACKED. `desc->shape`/`strides` and
 * `desc->format` are copied. For device PYXBUF_DEVICE_DLPACK the
 * pyxbuf_device_info is copied and the exporter owns its sync_event from then
 * on; other device identifiers' device_info is kept as given (it must outlive
 * the exporter). */
PYXBUF_API PyObject *pyxbuf_exporter_wrap(const pyxbuf_export_desc *desc,
                                          void (*free_fn)(void *), void *free_ctx);

/* An exporter over host memory inside `base`'s buffer: `ndim` dimensions of
 * `shape` (NULL with ndim 1: as many items as the bytes after `offset` hold,
 * a whole number of them), `strides` in bytes (NULL = C order), the first item `offset` bytes
 * into the buffer, items of `format` (NULL = "B") of `itemsize` bytes (0 = the
 * format's size; given, a custom type nobody registered here is held too:
 * unpickling needs no registration, reading the items does); every byte an index can
 * reach must lie inside the buffer (ValueError otherwise). No copy: the
 * exporter holds a contiguous view of `base` until it dies, so the memory
 * stays (a bytearray cannot resize, a SharedMemory cannot close). Writable
 * when `base` is and PYXBUF_OVER_READONLY is not given (as np.frombuffer).
 * `base` may also be a multiprocessing.shared_memory.SharedMemory (anything
 * that is no buffer but has a buffer `buf` and a `name`): the exporter views
 * its `buf` and pickles by the block's name, so that another process maps
 * the same memory. What pickle.loads builds for a pickled pyxbuf.Exporter.
 * Grants: `base`'s owner may still write its memory, so every grant carries
 * PYXBUF_EXT_TRACKED; memory shared with other processes (a SharedMemory, or
 * PYXBUF_OVER_PROCESS_SHARED) gets no grant at all -- no counter or registry
 * of one process can stop another's writes -- and a consumer that needs one
 * copies the items. Needs the GIL. New reference, or NULL with an exception
 * (TypeError for a `base` that is neither, the base's BufferError, ValueError
 * for a layout that does not fit). */
#define PYXBUF_OVER_READONLY 0x1       /* read-only even over writable memory */
#define PYXBUF_OVER_PROCESS_SHARED 0x2 /* other processes map the memory too */
PYXBUF_API PyObject *pyxbuf_exporter_over(PyObject *base, Py_ssize_t offset, const char *format,
                                          Py_ssize_t itemsize, int32_t ndim,
                                          const Py_ssize_t *shape, const Py_ssize_t *strides,
                                          int32_t options);

/* Device memory shared with another process on this machine, without a copy
 * (the backend's ipc_* functions: CUDA's IPC handles, the emulated device's
 * memfd). pyxbuf_device_share: the handle (at most PYXBUF_IPC_HANDLE_MAX
 * bytes into `handle`, *handle_len their number) of `obj`'s device memory,
 * and its device, after the host has waited for the producer's event (its
 * writes happen before the handle leaves); *fd: a file descriptor that must
 * travel with the handle (sent as a duplicate: SCM_RIGHTS, which
 * multiprocessing.reduction.DupFd does; pyxbuf keeps this one open), or -1
 * when the handle's bytes suffice. 0, or -1 with an exception
 * (ValueError for host memory, BufferError for a backend that cannot share).
 * pyxbuf_exporter_open_shared, in another process: an exporter over the
 * memory the handle names, laid out as given (strides in bytes, required
 * from 2 dimensions); `fd` is the descriptor that arrived with the handle
 * (-1: none; pyxbuf does not keep or close it); the exporter closes the
 * handle when it dies and grants no borrow (other processes write the
 * memory too). Opened in the process that made
 * it (a multiprocessing.Queue between two threads), the exporter is over
 * that process's own memory, mapped nowhere else: the same address. The exporting process keeps its
 * array alive until every process that opened it is done with it: nothing
 * counts the openers across processes (as with CUDA's IPC). New reference,
 * or NULL with an exception. */
PYXBUF_API int pyxbuf_device_share(PyObject *obj, pyxbuf_device *device, void *handle,
                                   size_t *handle_len, int *fd);
PYXBUF_API PyObject *pyxbuf_exporter_open_shared(const pyxbuf_device *device, const void *handle,
                                                 size_t handle_len, int fd, const char *format,
                                                 Py_ssize_t itemsize, int32_t ndim,
                                                 const Py_ssize_t *shape,
                                                 const Py_ssize_t *strides, int32_t readonly);

/* Give `type` the DLPack 1.3 C exchange table (`__dlpack_c_exchange_api__`, a
 * capsule named "dlpack_exchange_api" holding pyxbuf's table, which lives for
 * the process). The type's objects must export through the extended protocol
 * (pyxbuf.Exporter has the table already; a Rust #[pyclass] gets it from
 * pyxbuf::export::declare_dlpack_exchange_api):
 *   - managed_tensor_from_py_object_no_sync: an owning tensor that holds a view
 *     of the object (its borrow rules apply until the deleter runs), with the
 *     read-only and padded-sub-byte flags; device memory is ready on the
 *     device's default stream when it returns;
 *   - dltensor_from_py_object_no_sync: a non-owning DLTensor, for
 *     pyxbuf.Exporter objects (whose shape and item strides it points at) that
 *     are writable and need no flags; others get BufferError;
 *   - managed_tensor_to_py_object_no_sync: a pyxbuf.Exporter owning the tensor;
 *   - managed_tensor_allocator: a new pyxbuf.Exporter's memory, as a tensor;
 *   - current_work_stream: NULL (the default stream) for every device.
 * Works for static and heap types (written to the type's dict). Needs the GIL.
 * Returns 0, or -1 with a Python exception set. */
PYXBUF_API int pyxbuf_type_set_dlpack_exchange_api(PyTypeObject *type);

/* The exporter's data pointer, or NULL with TypeError set if `obj` is not one. */
PYXBUF_API void *pyxbuf_exporter_data(PyObject *obj);

/* The exporter type (created on first use). Borrowed reference. */
PYXBUF_API PyTypeObject *pyxbuf_exporter_type(void);

/* ------------------------------------------------------------------------- */
/* 7. Format strings                                                         */
/* ------------------------------------------------------------------------- */

/* Node kinds of a parsed format. */
#define PYXBUF_FMT_ROOT 0    /* node 0: the whole format, a sequence of fields */
#define PYXBUF_FMT_SCALAR 1  /* a struct / PEP 3118 code: `code` holds it */
#define PYXBUF_FMT_STRUCT 2  /* T{...}: children are the members */
#define PYXBUF_FMT_CUSTOM 3  /* [id$payload;...]: the first understood alternative */
#define PYXBUF_FMT_PADDING 4 /* x: `repeat` bytes of padding */

/* Node flags. */
#define PYXBUF_FMTN_COMPLEX 0x1 /* Z prefix: two components of the item */
#define PYXBUF_FMTN_OPAQUE 0x2  /* custom type whose size nobody knows */
#define PYXBUF_FMTN_POINTER 0x4 /* & prefix: a pointer to the item */

/* Byte-order / size / alignment modes, the prefix character itself. */
#define PYXBUF_ORDER_NATIVE '@'   /* native order, native sizes, aligned */
#define PYXBUF_ORDER_STANDARD '=' /* native order, standard sizes, packed */
#define PYXBUF_ORDER_LITTLE '<'
#define PYXBUF_ORDER_BIG '>'
#define PYXBUF_ORDER_NETWORK '!'
#define PYXBUF_ORDER_UNALIGNED '^' /* native order and sizes, packed */

/* The deepest nesting of T{...} and struct$/buffer$ payloads accepted. */
#define PYXBUF_FORMAT_MAX_DEPTH 32
/* Nodes and dimensions stored inside pyxbuf_format before it allocates. */
#define PYXBUF_FORMAT_INLINE_NODES 4
#define PYXBUF_FORMAT_INLINE_DIMS 4

/* One item of a format, in a tree stored as an array in pre-order. */
typedef struct pyxbuf_format_node {
    int32_t kind;        /* PYXBUF_FMT_* */
    int32_t code;        /* SCALAR: its character ('f', 'i', 's', 'w', ...) */
    int32_t byte_order;  /* PYXBUF_ORDER_* in effect for this node */
    int32_t flags;       /* PYXBUF_FMTN_* */
    int32_t parent;      /* index of the enclosing ROOT/STRUCT/CUSTOM, -1 for root */
    int32_t next;        /* next sibling, -1 if last */
    int32_t first_child; /* STRUCT, ROOT, CUSTOM with struct$/buffer$: first member */
    int32_t nchildren;
    int32_t ndim;        /* sub-array dimensions from "(2,3)", 0 if none */
    int32_t dims_start;  /* index of the first of them in the format's dims */
    int64_t alignment;   /* bytes; 1 in packed modes */
    int64_t repeat;      /* count before the code ("3f" = 3); 1 by default;
                            for 's' and 'p' the byte length of the one item */
    int64_t offset;      /* byte offset within the parent; -1 after an item
                            of unknown size (an opaque custom type) */
    int64_t itemsize;    /* bytes of one element; -1 when unknown (opaque) */
    int64_t nbytes;      /* bytes of the field: itemsize * repeat * prod(dims),
                            -1 when unknown */
    const char *name;    /* ":name:" (not NUL-terminated), or NULL */
    int32_t name_len;
    int32_t custom_id_len;      /* CUSTOM: length of the id in `custom` */
    const char *custom;         /* CUSTOM: the chosen "id$payload" (not NUL-
                                   terminated); the first alternative if none is
                                   understood */
    int32_t custom_len;
    int32_t alternatives_len;   /* CUSTOM: length of everything inside [ ] */
    const char *alternatives;   /* CUSTOM: everything inside [ ] */
} pyxbuf_format_node;

/* A parsed format. It borrows the parsed string (and the strings a builder
 * passed): keep them alive while the descriptor is used. Relocatable (it may be
 * moved or copied by value while it owns no heap memory, see heap_nodes). */
typedef struct pyxbuf_format {
    const char *source;   /* the string parsed, or NULL when built */
    int64_t itemsize;     /* bytes of one item; -1 when a custom type is opaque */
    int64_t alignment;
    int32_t nnodes;
    int32_t ndims;
    int32_t flags;        /* PYXBUF_FMTF_* summary */
    int32_t node_capacity; /* 0: heap_nodes are the library's shared nodes */
    int32_t dims_capacity;
    int32_t reserved0;
    /* NULL while the inline nodes suffice; else memory this descriptor owns,
     * or (node_capacity 0) the library's read-only nodes of a single scalar,
     * shared by every descriptor of that format: never write through it. */
    pyxbuf_format_node *heap_nodes;
    int64_t *heap_dims;             /* NULL while the inline dims suffice */
    pyxbuf_format_node inline_nodes[PYXBUF_FORMAT_INLINE_NODES];
    int64_t inline_dims[PYXBUF_FORMAT_INLINE_DIMS];
} pyxbuf_format;

/* Summary flags of a whole format. */
#define PYXBUF_FMTF_SINGLE_SCALAR 0x1 /* one scalar, no repeat, no sub-array */
#define PYXBUF_FMTF_HAS_STRUCT 0x2
#define PYXBUF_FMTF_HAS_CUSTOM 0x4
#define PYXBUF_FMTF_HAS_OPAQUE 0x8 /* itemsize is -1 */

/* The nodes of `f` (inline, heap or shared storage). Read-only: a parsed
 * format changes only through the builder calls below, which copy shared
 * nodes before they write. */
PYXBUF_API pyxbuf_format_node *pyxbuf_format_nodes(const pyxbuf_format *f);
/* The sub-array dimensions of `f` (index with node->dims_start). */
PYXBUF_API int64_t *pyxbuf_format_dims(const pyxbuf_format *f);

/* Parse `fmt` (NUL-terminated; NULL means "B") into `out`. Single-item formats
 * never allocate. On failure returns a negative PYXBUF_E* code, leaves `out`
 * empty, and fills `err` (if not NULL) with the byte position and a message.
 * Formats whose custom types are opaque parse successfully with itemsize -1. */
PYXBUF_API int pyxbuf_format_parse(const char *fmt, pyxbuf_format *out, pyxbuf_error *err);

/* Free what pyxbuf_format_parse or the builder allocated; `f` becomes empty. */
PYXBUF_API void pyxbuf_format_clear(pyxbuf_format *f);

/* Size and alignment of one item of `fmt` without building a descriptor. A
 * format using an opaque custom type fails with PYXBUF_EUNSUPPORTED and a
 * message naming the type. `alignment` may be NULL. */
PYXBUF_API int pyxbuf_format_itemsize(const char *fmt, int64_t *itemsize, int64_t *alignment,
                                      pyxbuf_error *err);

/* Write the canonical format string of `f` into `buf` (capacity `cap`,
 * NUL-terminated). `*len` (may be NULL) receives the length needed without the
 * NUL, also when PYXBUF_ENOSPACE is returned. Canonical: byte-order prefix only
 * where it changes (and at the start of every T{ whose mode is not native),
 * repeat counts merged, names and sub-arrays kept, padding as "Nx", custom
 * types with all their alternatives. Parsing the result gives the same layout. */
PYXBUF_API int pyxbuf_format_write(const pyxbuf_format *f, char *buf, size_t cap, size_t *len,
                                   pyxbuf_error *err);

/* Builder: start an empty format (its root is in native mode '@'). In the
 * add_* calls, byte_order 0 means the parent's mode. */
PYXBUF_API void pyxbuf_format_init(pyxbuf_format *f);
/* Append a scalar `code` to the struct node `parent` (0 = root). `name` may be
 * NULL; `dims` may be NULL when ndim is 0. Returns the new node's index, or a
 * negative PYXBUF_E* code. */
PYXBUF_API int pyxbuf_format_add_scalar(pyxbuf_format *f, int32_t parent, int32_t code,
                                        int32_t byte_order, int32_t node_flags, int64_t repeat,
                                        int32_t ndim, const int64_t *dims, const char *name);
/* Append an empty T{} to `parent`; returns its index, members go under it. */
PYXBUF_API int pyxbuf_format_add_struct(pyxbuf_format *f, int32_t parent, int32_t byte_order,
                                        int64_t repeat, int32_t ndim, const int64_t *dims,
                                        const char *name);
/* Append a custom type "[alternatives]" (e.g. "ml_dtypes$bfloat16"). */
PYXBUF_API int pyxbuf_format_add_custom(pyxbuf_format *f, int32_t parent, const char *alternatives,
                                        int32_t byte_order, int32_t node_flags, int64_t repeat,
                                        int32_t ndim, const int64_t *dims, const char *name);
/* Append `nbytes` of padding. */
PYXBUF_API int pyxbuf_format_add_padding(pyxbuf_format *f, int32_t parent, int64_t nbytes);
/* Compute offsets, sizes and alignment of everything added (as the parser
 * would for the canonical string). */
PYXBUF_API int pyxbuf_format_finish(pyxbuf_format *f, pyxbuf_error *err);

/* Custom-type registry. A key "id$payload" matches that type exactly; a key
 * ending in '$' ("mylib$") matches every payload of the id and, when
 * `size_fn` is set, asks it for the size. Entries belong to this copy of
 * libpyxbuf (each statically linked extension has its own registry):
 * register a type in the extension that reads it. */
typedef struct pyxbuf_dtype_spec {
    uint32_t size;       /* sizeof(pyxbuf_dtype_spec) */
    int32_t reserved0;
    const char *key;     /* copied */
    int64_t itemsize;
    int64_t alignment;
    /* Optional: size and alignment for `payload` (not NUL-terminated); return
     * 0, or a negative code to leave the type opaque. */
    int (*size_fn)(const char *payload, size_t payload_len, int64_t *itemsize,
                   int64_t *alignment, void *ctx);
    void *ctx;
    int64_t reserved[2];
} pyxbuf_dtype_spec;

/* Register (or replace) a custom type. Returns 0 or a negative code. */
PYXBUF_API int pyxbuf_dtype_register(const pyxbuf_dtype_spec *spec);
/* Remove the entry with this key. Returns 0, or PYXBUF_EINVAL if absent. */
PYXBUF_API int pyxbuf_dtype_unregister(const char *key);

#ifdef __cplusplus
}
#endif

#endif /* PYXBUF_H */
