/* format.c -- buffer format strings: the struct module's syntax, the PEP 3118
 * additions, and custom types ("[id$payload;alt$payload]"). One parser serves
 * pyxbuf_format_parse (which records a node tree) and pyxbuf_format_itemsize
 * (which only lays out); the builder's finish step feeds its nodes through the
 * same layout code, so built and parsed formats cannot disagree.
 *
 * Rules where producers or specifications disagree (tests document each):
 *
 * - Sizes and alignment follow the struct module. Native mode '@' aligns each
 *   item and adds no padding at the end of the whole format ("ix" is 5, as
 *   struct.calcsize says; NumPy's parser says 8). '=' '<' '>' '!' use standard
 *   sizes, packed. '^' is native sizes, packed (NumPy's "unaligned native").
 * - A byte-order prefix may appear before any item (PEP 3118), and the mode it
 *   sets lasts until the next prefix -- also across a closing '}'. NumPy's
 *   exporter and parser and Cython's checker all treat the mode as stream
 *   state: NumPy exports a packed struct holding a struct as
 *   "T{T{=i:x:B:y:}:n:h:z:}" (7 bytes, 'h' is '='-packed). The writer emits an
 *   explicit prefix after every '}' whose inner mode differs, so its output
 *   means the same to readers that restore the mode at '}'.
 * - T{...} is laid out as a C struct whose members say how they align: a
 *   member in native mode aligns to its natural alignment, a member in a packed
 *   mode to 1; the struct's alignment is the largest member alignment, the
 *   struct is placed at it and padded at its end to it ("T{ix}" is 8,
 *   "T{=i:a:B:b:}" is 5). The mode in effect at "T{" does not change this: with
 *   modes as stream state it is often a leftover of the previous field (NumPy
 *   writes an aligned struct after a '>' field as ">q:a:T{@q:f0:B:f1:}").
 *   Measured on random NumPy structured dtypes, this agrees with the exported
 *   itemsize more often than NumPy's own parser does (which pads when the mode
 *   at '}' is '@'). NumPy's exporter never writes a struct's trailing padding
 *   and writes an inner struct's as 'x' in the outer one, so some of its
 *   exports have no reading that gives its itemsize; the view's itemsize is
 *   authoritative there. "T{}" is accepted (0 bytes, as NumPy accepts it).
 * - 'n' 'N' 'P' (and 'g' 'O' '&', which have no standard size anywhere) keep
 *   their native size under a standard prefix: struct refuses "<P", but ctypes
 *   emits "<P" for c_void_p and "<g" for c_longdouble; inside "[struct$...]"
 *   the struct module's own refusal applies.
 * - 's' and 'p': the count is the length of ONE string; the node has itemsize 1
 *   and repeat = length, so nbytes = length. 'w' is 4 bytes, 'u' 2 (PEP 3118:
 *   UCS-2; ctypes' "<u" for a 4-byte wchar_t therefore disagrees).
 * - Runs of unnamed 'x' in one mode become one padding node ("xxx" == "3x").
 * - A lone prefix ("<") is an error (struct.calcsize says 0); "" is 0 bytes.
 * - Whitespace is allowed between items and after a prefix, never between a
 *   count and its code or before a name; prefixes: one per slot, in the slots
 *   NumPy and ctypes use: "<(2)3f", "(2)<3f", "(3)&<i".
 */
#include "base/type_cache.h" /* Python.h first, as the C API asks */

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Type codes                                                                */
/* ------------------------------------------------------------------------- */

#define CI_VALID 0x01
#define CI_STRUCT 0x02     /* the struct module accepts it */
#define CI_NATIVE_ONLY 0x04 /* no standard size: native size in every mode */
#define CI_COMPLEX 0x08    /* may follow 'Z' */
#define CI_STRING 0x10     /* 's', 'p': the count is the length of one item */
#define CI_COMPLEX_ALIAS 0x20 /* 'F' 'D' 'G': the same item as "Zf" "Zd" "Zg" */

typedef struct code_info {
    uint8_t native_size;
    uint8_t native_align;
    uint8_t std_size;
    uint8_t flags;
} code_info;

/* Every code: X(arg, name, char, native size, native alignment, standard
 * size, flags). One list feeds the code table, the slot numbers and the
 * shared single-scalar nodes, so they cannot disagree. Native sizes come
 * from this compiler, as the struct module's do. */
#define CODE_LIST(X, arg)                                                                          \
    X(arg, x, 'x', 1, 1, 1, CI_STRUCT)                                                             \
    X(arg, c, 'c', sizeof(char), _Alignof(char), 1, CI_STRUCT)                                     \
    X(arg, b, 'b', sizeof(signed char), _Alignof(signed char), 1, CI_STRUCT)                       \
    X(arg, B, 'B', sizeof(unsigned char), _Alignof(unsigned char), 1, CI_STRUCT)                   \
    X(arg, qmark, '?', sizeof(_Bool), _Alignof(_Bool), 1, CI_STRUCT)                               \
    X(arg, h, 'h', sizeof(short), _Alignof(short), 2, CI_STRUCT)                                   \
    X(arg, H, 'H', sizeof(unsigned short), _Alignof(unsigned short), 2, CI_STRUCT)                 \
    X(arg, i, 'i', sizeof(int), _Alignof(int), 4, CI_STRUCT)                                       \
    X(arg, I, 'I', sizeof(unsigned int), _Alignof(unsigned int), 4, CI_STRUCT)                     \
    X(arg, l, 'l', sizeof(long), _Alignof(long), 4, CI_STRUCT)                                     \
    X(arg, L, 'L', sizeof(unsigned long), _Alignof(unsigned long), 4, CI_STRUCT)                   \
    X(arg, q, 'q', sizeof(long long), _Alignof(long long), 8, CI_STRUCT)                           \
    X(arg, Q, 'Q', sizeof(unsigned long long), _Alignof(unsigned long long), 8, CI_STRUCT)         \
    X(arg, n, 'n', sizeof(Py_ssize_t), _Alignof(Py_ssize_t), 0, CI_STRUCT | CI_NATIVE_ONLY)        \
    X(arg, N, 'N', sizeof(size_t), _Alignof(size_t), 0, CI_STRUCT | CI_NATIVE_ONLY)                \
    /* struct aligns a native half float like a short */                                           \
    X(arg, e, 'e', 2, _Alignof(short), 2, CI_STRUCT)                                               \
    X(arg, f, 'f', sizeof(float), _Alignof(float), 4, CI_STRUCT | CI_COMPLEX)                      \
    X(arg, d, 'd', sizeof(double), _Alignof(double), 8, CI_STRUCT | CI_COMPLEX)                    \
    X(arg, s, 's', 1, 1, 1, CI_STRUCT | CI_STRING)                                                 \
    X(arg, p, 'p', 1, 1, 1, CI_STRUCT | CI_STRING)                                                 \
    X(arg, P, 'P', sizeof(void *), _Alignof(void *), 0, CI_STRUCT | CI_NATIVE_ONLY)                \
    X(arg, g, 'g', sizeof(long double), _Alignof(long double), 0, CI_NATIVE_ONLY | CI_COMPLEX)     \
    X(arg, O, 'O', sizeof(PyObject *), _Alignof(PyObject *), 0, CI_NATIVE_ONLY)                    \
    X(arg, w, 'w', sizeof(Py_UCS4), _Alignof(Py_UCS4), 4, 0)                                       \
    X(arg, u, 'u', sizeof(Py_UCS2), _Alignof(Py_UCS2), 2, 0)                                       \
    /* struct's complex codes (CPython 3.14; ctypes 3.14 also writes 'G'). They                    \
     * parse to the node of "Zf" / "Zd" / "Zg": one item, two components. */                       \
    X(arg, F, 'F', sizeof(float), _Alignof(float), 4, CI_STRUCT | CI_COMPLEX_ALIAS)                \
    X(arg, D, 'D', sizeof(double), _Alignof(double), 8, CI_STRUCT | CI_COMPLEX_ALIAS)              \
    X(arg, G, 'G', sizeof(long double), _Alignof(long double), 0, CI_NATIVE_ONLY | CI_COMPLEX_ALIAS)

#define CODE_ENTRY(arg, name, ch, nsize, nalign, ssize, fl) \
    [ch] = {(uint8_t)(nsize), (uint8_t)(nalign), (uint8_t)(ssize), CI_VALID | (fl)},
static const code_info CODES[128] = {CODE_LIST(CODE_ENTRY, 0)};

/* The struct module's size rule: '@' and '^' use native sizes, the other
 * modes standard ones, except for codes that have none. */
#define NATIVE_SIZED(mode, fl) ((mode) == '@' || (mode) == '^' || ((fl) & CI_NATIVE_ONLY))
/* The component code of a complex alias ('F' -> 'f'), else `ch`. */
#define COMPONENT_CODE(ch) ((ch) == 'F' ? 'f' : (ch) == 'D' ? 'd' : (ch) == 'G' ? 'g' : (ch))

static int complex_component(int c) { return COMPONENT_CODE(c); }

static const code_info *code_info_of(int c) {
    if (c <= 0 || c >= 128 || !(CODES[c].flags & CI_VALID)) return NULL;
    return &CODES[c];
}

/* Single scalars ("f", "<d", "Zf", "=D") are the common case of every
 * consumer. Their descriptors point at nodes built at compile time (SINGLES,
 * below), one root-and-scalar pair per byte-order mode and code, so parsing
 * one writes only the descriptor's header. These tables find the pair as
 * byte offsets into SINGLES (the hot path adds them, no multiplying): of each
 * code that can stand alone ('x', slot 0, cannot: 0 means no), of the complex
 * alias that is the same item as 'Z' and a code, and of each mode (its order
 * character, plus 1 to say the format starts with one; no character means
 * '@'). MODE_AT also answers is_order. */
#define SLOT_NAME(arg, name, ch, nsize, nalign, ssize, fl) SLOT_##name,
enum { CODE_LIST(SLOT_NAME, 0) NSLOTS };
#define MODE_LIST(X) X(0, '@') X(1, '^') X(2, '=') X(3, '<') X(4, '>') X(5, '!')
enum { NMODES = 6 };
#define PAIR_BYTES (2 * sizeof(pyxbuf_format_node))
#define MODE_BYTES (NSLOTS * PAIR_BYTES)
_Static_assert(NMODES * MODE_BYTES < 65536, "single-scalar offsets fit 16 bits");
#define CODE_AT_OF(arg, name, ch, nsize, nalign, ssize, fl) \
    [ch] = (uint16_t)(SLOT_##name * PAIR_BYTES),
static const uint16_t CODE_AT[256] = {CODE_LIST(CODE_AT_OF, 0)};
static const uint16_t COMPLEX_AT[256] = {['f'] = SLOT_F * PAIR_BYTES,
                                         ['d'] = SLOT_D * PAIR_BYTES,
                                         ['g'] = SLOT_G * PAIR_BYTES};
#define MODE_AT_OF(i, m) [m] = (uint16_t)((i) * MODE_BYTES + 1),
static const uint16_t MODE_AT[256] = {MODE_LIST(MODE_AT_OF)};

static bool is_order(int c) { return c >= 0 && c < 256 && (MODE_AT[c] & 1); }

static bool is_ws(int c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* The custom-dtype proposal: ids and payloads are printable ASCII except
 * ']' (closes the type), ';' (separates alternatives) and '$' (ends the id).
 * So a payload cannot hold a custom type of its own. */
static bool is_custom_char(int c) {
    return c >= 0x20 && c <= 0x7e && c != ']' && c != ';' && c != '$';
}

/* Size and natural alignment of one scalar element in `mode`. */
static void scalar_layout(int code, int mode, int32_t flags, int64_t *size, int64_t *align) {
    const code_info *ci = &CODES[code];
    if (flags & PYXBUF_FMTN_POINTER) {
        *size = (int64_t)sizeof(void *);
        *align = (int64_t)_Alignof(void *);
        return;
    }
    *size = NATIVE_SIZED(mode, ci->flags) ? ci->native_size : ci->std_size;
    *align = ci->native_align;
    if (flags & PYXBUF_FMTN_COMPLEX) *size *= 2;
}

/* ------------------------------------------------------------------------- */
/* Alignment on sizes (all non-negative; base/checked.h does the rest)     */
/* ------------------------------------------------------------------------- */

/* Alignments are powers of two (C's are; registry entries are checked). */
static bool align_up_ok(int64_t off, int64_t align, int64_t *r) {
    if (!PYXBUF__ADD_OK(off, align - 1, r)) return false;
    *r &= ~(align - 1);
    return true;
}

static bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* ------------------------------------------------------------------------- */
/* Custom-type registry                                                      */
/* ------------------------------------------------------------------------- */

typedef struct dtype_entry {
    char *key;
    size_t key_len;
    int64_t itemsize;
    int64_t alignment;
    int (*size_fn)(const char *, size_t, int64_t *, int64_t *, void *);
    void *ctx;
} dtype_entry;

/* Process-wide (per copy of the library); parsing may run without the GIL on
 * several threads, so every access holds the mutex. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static dtype_entry *registry;
static size_t registry_len, registry_cap;
/* registry_len, readable without the lock: while it is 0 a lookup needs only
 * the built-in table. */
static atomic_size_t registry_used;
/* Bumped by every registration and removal: caches of registry answers
 * (array_interface.c's dtype table) compare it. */
atomic_uint_fast64_t pyxbuf__dtype_registry_generation;

/* ml_dtypes' types, known to every consumer: ml_dtypes stores each sub-byte
 * type in one byte. */
typedef struct builtin_dtype {
    const char *key;
    uint8_t itemsize, alignment;
} builtin_dtype;

static const builtin_dtype BUILTIN_DTYPES[] = {
    {"ml_dtypes$bfloat16", 2, 2},        {"ml_dtypes$float8_e4m3fn", 1, 1},
    {"ml_dtypes$float8_e5m2", 1, 1},     {"ml_dtypes$float8_e4m3fnuz", 1, 1},
    {"ml_dtypes$float8_e5m2fnuz", 1, 1}, {"ml_dtypes$float8_e4m3b11fnuz", 1, 1},
    {"ml_dtypes$float8_e3m4", 1, 1},     {"ml_dtypes$float8_e4m3", 1, 1},
    {"ml_dtypes$float8_e8m0fnu", 1, 1},  {"ml_dtypes$float6_e2m3fn", 1, 1},
    {"ml_dtypes$float6_e3m2fn", 1, 1},   {"ml_dtypes$float4_e2m1fn", 1, 1},
    {"ml_dtypes$int2", 1, 1},            {"ml_dtypes$uint2", 1, 1},
    {"ml_dtypes$int4", 1, 1},            {"ml_dtypes$uint4", 1, 1},
    /* also in ml_dtypes 0.5+: complex of bfloat16 / float16, 1-bit ints */
    {"ml_dtypes$bcomplex32", 4, 2},      {"ml_dtypes$complex32", 4, 2},
    {"ml_dtypes$int1", 1, 1},            {"ml_dtypes$uint1", 1, 1},
};

static bool key_eq(const char *key, size_t key_len, const char *s, size_t n) {
    return key_len == n && memcmp(key, s, n) == 0;
}

static bool builtin_lookup(const char *alt, size_t len, int64_t *size, int64_t *align) {
    for (size_t b = 0; b < sizeof BUILTIN_DTYPES / sizeof *BUILTIN_DTYPES; b++) {
        const char *k = BUILTIN_DTYPES[b].key;
        if (strncmp(k, alt, len) == 0 && k[len] == '\0') {
            *size = BUILTIN_DTYPES[b].itemsize;
            *align = BUILTIN_DTYPES[b].alignment;
            return true;
        }
    }
    return false;
}

static ptrdiff_t registry_find(const char *key, size_t n) {
    for (size_t i = 0; i < registry_len; i++)
        if (key_eq(registry[i].key, registry[i].key_len, key, n)) return (ptrdiff_t)i;
    return -1;
}

/* Size of the custom type "id$payload" (alt, id_len), or false if unknown.
 * size_fn runs outside the lock so that it may use the registry itself. */
static bool registry_lookup(const char *alt, size_t len, size_t id_len, int64_t *size,
                            int64_t *align) {
    if (atomic_load_explicit(&registry_used, memory_order_acquire) == 0)
        return builtin_lookup(alt, len, size, align);
    dtype_entry hit = {0};
    bool found = false;
    pthread_mutex_lock(&registry_lock);
    ptrdiff_t i = registry_find(alt, len);
    if (i < 0) {
        if (builtin_lookup(alt, len, size, align)) {
            pthread_mutex_unlock(&registry_lock);
            return true;
        }
        i = registry_find(alt, id_len + 1); /* "id$": every payload of the id */
    }
    if (i >= 0) {
        hit = registry[i];
        found = true;
    }
    pthread_mutex_unlock(&registry_lock);
    if (!found) return false;
    if (hit.size_fn == NULL) {
        *size = hit.itemsize;
        *align = hit.alignment;
        return true;
    }
    int64_t s = -1, a = 1;
    if (hit.size_fn(alt + id_len + 1, len - id_len - 1, &s, &a, hit.ctx) < 0) return false;
    if (s < 0 || !is_pow2(a)) return false;
    *size = s;
    *align = a;
    return true;
}

/* Checks "id$payload" or "id$": returns the id length, or -1. */
static ptrdiff_t key_id_len(const char *key) {
    const char *dollar = strchr(key, '$');
    if (dollar == NULL || dollar == key) return -1;
    for (const char *c = key; c < dollar; c++)
        if (!is_custom_char((unsigned char)*c)) return -1;
    for (const char *c = dollar + 1; *c; c++)
        if (!is_custom_char((unsigned char)*c)) return -1;
    return dollar - key;
}

int pyxbuf_dtype_register(const pyxbuf_dtype_spec *spec) {
    if (spec == NULL || spec->size < offsetof(pyxbuf_dtype_spec, reserved) || spec->key == NULL)
        return PYXBUF_EINVAL;
    ptrdiff_t id_len = key_id_len(spec->key);
    if (id_len < 0) return PYXBUF_EINVAL;
    /* struct$ and buffer$ are understood by the parser itself. */
    if ((id_len == 6 && (memcmp(spec->key, "struct", 6) == 0 ||
                         memcmp(spec->key, "buffer", 6) == 0)))
        return PYXBUF_EINVAL;
    if (spec->size_fn == NULL &&
        (spec->itemsize < 0 || !is_pow2(spec->alignment)))
        return PYXBUF_EINVAL;
    size_t n = strlen(spec->key);
    char *key = malloc(n + 1);
    if (key == NULL) return PYXBUF_ENOMEM;
    memcpy(key, spec->key, n + 1);
    dtype_entry e = {key, n, spec->itemsize, spec->alignment, spec->size_fn, spec->ctx};

    pthread_mutex_lock(&registry_lock);
    ptrdiff_t i = registry_find(key, n);
    if (i >= 0) {
        free(registry[i].key);
        registry[i] = e;
        pthread_mutex_unlock(&registry_lock);
        return PYXBUF_OK;
    }
    if (registry_len == registry_cap) {
        size_t cap = registry_cap ? registry_cap * 2 : 8;
        dtype_entry *grown = realloc(registry, cap * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&registry_lock);
            free(key);
            return PYXBUF_ENOMEM;
        }
        registry = grown;
        registry_cap = cap;
    }
    registry[registry_len++] = e;
    atomic_store_explicit(&registry_used, registry_len, memory_order_release);
    atomic_fetch_add(&pyxbuf__dtype_registry_generation, 1);
    pthread_mutex_unlock(&registry_lock);
    return PYXBUF_OK;
}

int pyxbuf_dtype_unregister(const char *key) {
    if (key == NULL) return PYXBUF_EINVAL;
    pthread_mutex_lock(&registry_lock);
    ptrdiff_t i = registry_find(key, strlen(key));
    if (i >= 0) {
        free(registry[i].key);
        registry[i] = registry[--registry_len];
        atomic_store_explicit(&registry_used, registry_len, memory_order_release);
        atomic_fetch_add(&pyxbuf__dtype_registry_generation, 1);
    }
    pthread_mutex_unlock(&registry_lock);
    return i >= 0 ? PYXBUF_OK : PYXBUF_EINVAL;
}

/* ------------------------------------------------------------------------- */
/* Node storage                                                              */
/* ------------------------------------------------------------------------- */

pyxbuf_format_node *pyxbuf_format_nodes(const pyxbuf_format *f) {
    return f->heap_nodes ? f->heap_nodes : (pyxbuf_format_node *)f->inline_nodes;
}

int64_t *pyxbuf_format_dims(const pyxbuf_format *f) {
    return f->heap_dims ? f->heap_dims : (int64_t *)f->inline_dims;
}

static void format_reset(pyxbuf_format *f, const char *source) {
    f->source = source;
    f->itemsize = 0;
    f->alignment = 1;
    f->nnodes = 0;
    f->ndims = 0;
    f->flags = 0;
    f->node_capacity = PYXBUF_FORMAT_INLINE_NODES;
    f->dims_capacity = PYXBUF_FORMAT_INLINE_DIMS;
    f->reserved0 = 0;
    f->heap_nodes = NULL;
    f->heap_dims = NULL;
}

/* pyxbuf_format_clear of a format with memory of its own: out of line, so
 * the common case needs no frame. */
static PYXBUF_NOINLINE void clear_heap(pyxbuf_format *f) {
    if (f->node_capacity > 0) free(f->heap_nodes);
    free(f->heap_dims);
    format_reset(f, NULL);
}

/* With nothing on the heap (every single item, most formats), emptying is
 * a few stores: no nodes, no dimensions, the inline nodes again. The rest is
 * reset only after a free. */
void pyxbuf_format_clear(pyxbuf_format *f) {
    if (f == NULL) return;
    if (PYXBUF_UNLIKELY(f->heap_dims != NULL || (f->heap_nodes != NULL && f->node_capacity > 0))) {
        clear_heap(f);
        return;
    }
    f->nnodes = 0;
    f->ndims = 0;
    f->flags = 0;
    f->node_capacity = PYXBUF_FORMAT_INLINE_NODES;
    f->heap_nodes = NULL;
}

/* A parsed single scalar shares the library's read-only nodes (node_capacity
 * 0): the builder copies them inline before it changes anything. */
static void unshare_nodes(pyxbuf_format *f) {
    memcpy(f->inline_nodes, f->heap_nodes, (size_t)f->nnodes * sizeof *f->heap_nodes);
    f->heap_nodes = NULL;
    f->node_capacity = PYXBUF_FORMAT_INLINE_NODES;
}

/* node_alloc past the capacity: out of line, it is rare. */
static PYXBUF_NOINLINE int32_t node_grow(pyxbuf_format *f) {
    if (f->node_capacity == 0 && f->heap_nodes != NULL) {
        unshare_nodes(f);
        return f->nnodes++;
    }
    if (f->node_capacity > INT32_MAX / 2) return -1;
    /* 8 first: 960 bytes, which glibc serves from its per-thread cache (up
     * to 1032 bytes), unlike the general allocator for 16. */
    int32_t cap = f->node_capacity * 2 < 8 ? 8 : f->node_capacity * 2;
    pyxbuf_format_node *n;
    if (f->heap_nodes == NULL) {
        n = malloc((size_t)cap * sizeof *n);
        if (n) memcpy(n, f->inline_nodes, (size_t)f->nnodes * sizeof *n);
    } else {
        n = realloc(f->heap_nodes, (size_t)cap * sizeof *n);
    }
    if (n == NULL) return -1;
    f->heap_nodes = n;
    f->node_capacity = cap;
    return f->nnodes++;
}

/* Index of a new node, or -1 when out of memory. */
static inline int32_t node_alloc(pyxbuf_format *f) {
    if (PYXBUF_LIKELY(f->nnodes < f->node_capacity)) return f->nnodes++;
    return node_grow(f);
}

static bool dim_push(pyxbuf_format *f, int64_t d) {
    if (f->ndims == f->dims_capacity) {
        if (f->dims_capacity > INT32_MAX / 2) return false;
        int32_t cap = f->dims_capacity * 2 < 16 ? 16 : f->dims_capacity * 2;
        int64_t *n;
        if (f->heap_dims == NULL) {
            n = malloc((size_t)cap * sizeof *n);
            if (n) memcpy(n, f->inline_dims, sizeof f->inline_dims);
        } else {
            n = realloc(f->heap_dims, (size_t)cap * sizeof *n);
        }
        if (n == NULL) return false;
        f->heap_dims = n;
        f->dims_capacity = cap;
    }
    pyxbuf_format_dims(f)[f->ndims++] = d;
    return true;
}

/* ------------------------------------------------------------------------- */
/* Parser state and messages                                                 */
/* ------------------------------------------------------------------------- */

typedef struct parser {
    const char *src;     /* the whole string: positions and messages refer to it */
    const char *src_end;
    const char *label;   /* "format", or "custom type" for the builder */
    const char *s;       /* cursor */
    const char *end;     /* end of what is being parsed (a payload ends early) */
    const char *seq_start; /* first char of the current (payload) sequence */
    pyxbuf_format *out;  /* NULL: layout only */
    pyxbuf_error *err;
    int32_t fflags;      /* PYXBUF_FMTF_* seen so far */
    int depth;
    int mode;            /* byte-order mode in effect */
    bool struct_only;    /* inside "[struct$...]": the struct module's syntax */
    bool in_payload;     /* inside a struct$ or buffer$ payload */
    /* The first opaque custom type, for pyxbuf_format_itemsize's message. */
    const char *opaque_at;
    const char *opaque_alts;
    int32_t opaque_len;
} parser;

#define POS(p, at) ((at) ? (long long)((at) - (p)->src) : -1LL)

/* Quote the source for a message: whole if short, else the start and the
 * region around `at`; non-printable bytes as \xNN. */
static void quote_source(const parser *p, const char *at, char *buf, size_t cap) {
    size_t len = (size_t)(p->src_end - p->src), used = 0;
    size_t pos = at ? (size_t)(at - p->src) : 0;
    size_t head = len, tail_from = len;
    if (len > 160) {
        head = pos < 110 ? 130 : 40;
        tail_from = pos < 110 ? len : pos - 40;
    }
    for (size_t i = 0; i < len && used + 8 < cap; i++) {
        if (i == head && i < tail_from) {
            used += (size_t)snprintf(buf + used, cap - used, "...");
            i = tail_from - 1;
            continue;
        }
        if (i >= tail_from + 80) {
            used += (size_t)snprintf(buf + used, cap - used, "...");
            break;
        }
        unsigned char c = (unsigned char)p->src[i];
        if (c >= 0x20 && c < 0x7f) buf[used++] = (char)c;
        else used += (size_t)snprintf(buf + used, cap - used, "\\x%02X", c);
    }
    buf[used] = '\0';
}

/* Fill p->err: "<label> '<source>'<sep><message>". Returns `code`. */
static int vfail(parser *p, int32_t code, const char *at, const char *sep, const char *fmt,
                 va_list ap) {
    if (p->err == NULL) return code;
    char quoted[256], what[320];
    vsnprintf(what, sizeof what, fmt, ap);
    if (p->src == p->src_end) /* the builder: no string to quote */
        return pyxbuf__error(p->err, code, -1, "%s: %s", p->label, what);
    quote_source(p, at, quoted, sizeof quoted);
    return pyxbuf__error(p->err, code, at ? (int64_t)(at - p->src) : -1, "%s '%s'%s%s", p->label,
                         quoted, sep, what);
}

PYXBUF_PRINTF(4, 5)
static int fail(parser *p, int32_t code, const char *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(p, code, at, ": ", fmt, ap);
    va_end(ap);
    return rc;
}

/* As fail, for messages that read on from the quoted format. */
PYXBUF_PRINTF(4, 5)
static int fail_on(parser *p, int32_t code, const char *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(p, code, at, " ", fmt, ap);
    va_end(ap);
    return rc;
}

/* A character for a message: 'c', or byte 0xNN. */
static const char *char_desc(int c, char buf[16]) {
    if (c >= 0x20 && c < 0x7f) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02X", (unsigned)(unsigned char)c);
    return buf;
}

static int fail_nomem(parser *p) {
    return fail(p, PYXBUF_ENOMEM, NULL, "out of memory while storing the parsed format");
}

static void skip_ws(parser *p) {
    /* Every whitespace byte is <= ' ': one compare passes the rest. */
    while (p->s < p->end && (unsigned char)*p->s <= ' ' && is_ws((unsigned char)*p->s)) p->s++;
}

static int peek(const parser *p) { return p->s < p->end ? (unsigned char)*p->s : 0; }

/* A decimal number at p->s (at least one digit there). */
static int parse_number(parser *p, const char *what, int64_t *value) {
    const char *start = p->s;
    int64_t v = 0;
    while (p->s < p->end && is_digit(*p->s)) {
        int d = *p->s - '0';
        if (v > INT64_MAX / 10 || (v == INT64_MAX / 10 && d > INT64_MAX % 10))
            return fail(p, PYXBUF_EOVERFLOW, start,
                        "%s at position %lld does not fit in 64 bits", what, POS(p, start));
        v = v * 10 + d;
        p->s++;
    }
    *value = v;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Items and sequences                                                       */
/* ------------------------------------------------------------------------- */

/* One item being parsed (or copied by the builder). */
typedef struct item {
    const char *start;    /* first character, for messages */
    const char *count_at; /* where the count is (or start) */
    int32_t kind, code, flags, mode;
    int64_t repeat;
    int32_t ndim, dims_start;
    int64_t dims_prod;
    int64_t size, align;  /* one element; size -1 = unknown */
    int32_t node;         /* node reserved before the children, or -1 */
    int32_t first_child, nchildren;
    const char *name;
    int32_t name_len;
    const char *alts, *custom;
    int32_t alts_len, custom_len, custom_id_len;
} item;

/* Every field set one by one: a zeroing initializer compiles to "rep stos",
 * which costs more than the whole parse of "f" on some machines. */
static void item_init(item *it, const char *start) {
    it->start = it->count_at = start;
    it->kind = PYXBUF_FMT_SCALAR;
    it->code = it->flags = it->mode = 0;
    it->repeat = 1;
    it->ndim = it->dims_start = 0;
    it->dims_prod = 1;
    it->size = -1;
    it->align = 1;
    it->node = it->first_child = -1;
    it->nchildren = 0;
    it->name = it->alts = it->custom = NULL;
    it->name_len = it->alts_len = it->custom_len = it->custom_id_len = 0;
}

/* A node with no name, shape or custom type; every field written (explicit
 * stores: a compound literal or struct copy compiles to `rep stos`, which
 * costs one instruction per word on the single-item fast path). */
static inline void node_set(pyxbuf_format_node *n, int32_t kind, int32_t code, int32_t order,
                            int32_t flags, int32_t parent, int32_t first_child, int32_t nchildren,
                            int64_t align, int64_t size) {
    n->kind = kind;
    n->code = code;
    n->byte_order = order;
    n->flags = flags;
    n->parent = parent;
    n->next = -1;
    n->first_child = first_child;
    n->nchildren = nchildren;
    n->ndim = n->dims_start = 0;
    n->alignment = align;
    n->repeat = 1;
    n->offset = 0;
    n->itemsize = n->nbytes = size;
    /* name .. alternatives: NULLs and zero lengths, in wide stores. */
    memset(&n->name, 0, sizeof *n - offsetof(pyxbuf_format_node, name));
}

/* Members being laid out: a root, a struct, or a custom type's payload. */
typedef struct seq {
    int64_t offset; /* -1 once an item of unknown size was placed */
    int64_t align;
    int32_t parent, first, last, count;
} seq;

static void seq_init(seq *q, int32_t parent) {
    q->offset = 0;
    q->align = 1;
    q->parent = parent;
    q->first = q->last = -1;
    q->count = 0;
}

static pyxbuf_format_node *node_at(parser *p, int32_t i) { return &pyxbuf_format_nodes(p->out)[i]; }

/* Padding `it` merges into the previous padding: "xxx" is one 3-byte gap. */
static bool merge_padding(parser *p, seq *q, const item *it) {
    if (q->last < 0 || it->name || it->ndim || it->flags) return false;
    pyxbuf_format_node *prev = node_at(p, q->last);
    int64_t repeat;
    /* After an opaque item no offset is checked for overflow, so the sum can
     * exceed 2**63 ("[a$b]9223372036854775804xxxxx"): keep two nodes then. */
    if (prev->kind != PYXBUF_FMT_PADDING || prev->name || prev->ndim || prev->flags ||
        prev->byte_order != it->mode || !PYXBUF__ADD_OK(prev->repeat, it->repeat, &repeat))
        return false;
    prev->repeat = prev->nbytes = repeat;
    return true;
}

/* Places a field of `nbytes` (-1: unknown) aligned to `align` after what
 * `q` holds: its offset (-1 after an unknown size) into *offset. */
static PYXBUF_ALWAYS_INLINE int place_field(parser *p, seq *q, int64_t nbytes, int64_t align,
                                            const char *start, int64_t *offset) {
    *offset = -1;
    if (q->offset >= 0) {
        if (!align_up_ok(q->offset, align, offset))
            return fail(p, PYXBUF_EOVERFLOW, start,
                        "the offset of the item at position %lld exceeds 2**63 bytes",
                        POS(p, start));
        if (nbytes < 0) q->offset = -1;
        else if (!PYXBUF__ADD_OK(*offset, nbytes, &q->offset))
            return fail(p, PYXBUF_EOVERFLOW, start,
                        "the format is larger than 2**63 bytes at position %lld", POS(p, start));
    }
    if (align > q->align) q->align = align;
    return 0;
}

/* Makes node `idx` the last member of `q`. */
static PYXBUF_ALWAYS_INLINE void link_node(seq *q, pyxbuf_format_node *nodes, int32_t idx) {
    if (q->last >= 0) nodes[q->last].next = idx;
    else q->first = idx;
    q->last = idx;
    q->count++;
}

/* Place `it` after what `q` holds and record its node. */
static PYXBUF_ALWAYS_INLINE int emit_item(parser *p, seq *q, item *it) {
    /* A struct aligns as its members do, whatever mode its "T{" found. */
    bool aligned = it->mode == '@' ||
                   (it->kind == PYXBUF_FMT_STRUCT && !(it->flags & PYXBUF_FMTN_POINTER));
    int64_t align = aligned ? it->align : 1; /* an opaque type has align 1 */
    int64_t nbytes = -1, offset;
    if (it->size >= 0 && (!PYXBUF__MUL_OK(it->size, it->repeat, &nbytes) ||
                          !PYXBUF__MUL_OK(nbytes, it->dims_prod, &nbytes)))
        return fail(p, PYXBUF_EOVERFLOW, it->count_at,
                    "the item counted at position %lld is larger than 2**63 bytes",
                    POS(p, it->count_at));
    int rc = place_field(p, q, nbytes, align, it->start, &offset);
    if (rc < 0) return rc;
    if (p->out == NULL || (it->kind == PYXBUF_FMT_PADDING && merge_padding(p, q, it))) return 0;

    int32_t idx = it->node;
    if (idx < 0 && (idx = node_alloc(p->out)) < 0) return fail_nomem(p);
    pyxbuf_format_node *nodes = pyxbuf_format_nodes(p->out), *n = &nodes[idx];
    /* Field by field: a compound literal is built on the stack and copied. */
    n->kind = it->kind;
    n->code = it->code;
    n->byte_order = it->mode;
    n->flags = it->flags;
    n->parent = q->parent;
    n->next = -1;
    n->first_child = it->first_child;
    n->nchildren = it->nchildren;
    n->ndim = it->ndim;
    n->dims_start = it->dims_start;
    n->alignment = align;
    n->repeat = it->repeat;
    n->offset = offset;
    n->itemsize = it->size;
    n->nbytes = nbytes;
    n->name = it->name;
    n->name_len = it->name_len;
    n->custom_id_len = it->custom_id_len;
    n->custom = it->custom;
    n->custom_len = it->custom_len;
    n->alternatives_len = it->alts_len;
    n->alternatives = it->alts;
    link_node(q, nodes, idx);
    return 0;
}

/* Size and alignment of a finished sequence: a struct is padded to its
 * alignment (1 when every member is packed); whole formats and payloads are
 * not, as struct.calcsize does not pad "ix". */
static void seq_close(const seq *q, bool pad, int64_t *size, int64_t *align) {
    *align = q->align;
    *size = q->offset;
    if (pad && q->offset >= 0) {
        int64_t padded;
        if (align_up_ok(q->offset, q->align, &padded)) *size = padded;
    }
}

static int parse_sequence(parser *p, seq *q, int closer, const char *opener);

/* Parses a payload [from, to) as a format of its own, children of it->node. */
static int parse_payload(parser *p, item *it, const char *from, const char *to, bool struct_only) {
    if (++p->depth > PYXBUF_FORMAT_MAX_DEPTH)
        return fail(p, PYXBUF_EFORMAT, from,
                    "custom type payload at position %lld nests deeper than %d levels",
                    POS(p, from), PYXBUF_FORMAT_MAX_DEPTH);
    parser saved = *p;
    p->s = p->seq_start = from;
    p->end = to;
    p->mode = '@'; /* a payload is a format of its own: no outer prefix reaches it */
    p->struct_only = struct_only;
    p->in_payload = true;
    seq q;
    seq_init(&q, it->node);
    int rc = parse_sequence(p, &q, 0, NULL);
    if (rc < 0) return rc;
    int64_t size, align;
    seq_close(&q, false, &size, &align);
    it->size = size;
    it->align = align;
    it->first_child = q.first;
    it->nchildren = q.count;
    p->s = saved.s;
    p->end = saved.end;
    p->seq_start = saved.seq_start;
    p->mode = saved.mode;
    p->struct_only = saved.struct_only;
    p->in_payload = saved.in_payload;
    p->depth--;
    return 0;
}

static bool is_reserved_id(const char *alt, size_t id_len) {
    return id_len == 6 && (memcmp(alt, "struct", 6) == 0 || memcmp(alt, "buffer", 6) == 0);
}

/* A struct$/buffer$ alternative after the one understood: checked as fully as
 * if it came first (a string's validity must not depend on which custom types
 * a consumer knows), laid out, and forgotten. */
static int check_payload(parser *p, const char *from, const char *to, bool struct_only) {
    pyxbuf_format *out = p->out;
    int32_t fflags = p->fflags;
    item scratch;
    item_init(&scratch, from);
    p->out = NULL;
    int rc = parse_payload(p, &scratch, from, to, struct_only);
    p->out = out;
    p->fflags = fflags;
    return rc;
}

/* A '$', ']' or ';' inside a struct$/buffer$ payload after a '[': someone
 * nested a custom type, which the character rules make impossible. */
static int fail_nested_custom(parser *p, const char *alt, const char *open) {
    return fail(p, PYXBUF_EFORMAT, open,
                "custom type at position %lld inside a %.6s$ payload: custom types are not "
                "allowed in %.6s$ (a payload cannot hold ']', ';' or '$'); put the custom type "
                "outside, or list it as another alternative",
                POS(p, open), alt, alt);
}

/* Tries one alternative "id$payload"; 1 if understood (it->size set). */
static int understand(parser *p, item *it, const char *alt, const char *dollar, const char *end) {
    size_t id_len = (size_t)(dollar - alt);
    if (is_reserved_id(alt, id_len)) {
        int rc = parse_payload(p, it, dollar + 1, end, alt[0] == 's');
        return rc < 0 ? rc : 1;
    }
    int64_t size, align;
    if (!registry_lookup(alt, (size_t)(end - alt), id_len, &size, &align)) return 0;
    it->size = size;
    it->align = align;
    return 1;
}

/* The alternatives at p->s, up to ']' (bracketed) or the end. Validates all,
 * resolves the first understood. */
static int parse_alternatives(parser *p, item *it, const char *opener, bool bracketed) {
    char cb[16];
    bool resolved = false;
    it->alts = p->s;
    it->custom = NULL;
    it->size = -1;
    it->align = 1;
    for (;;) {
        const char *alt = p->s;
        while (p->s < p->end && is_custom_char((unsigned char)*p->s)) p->s++;
        const char *dollar = p->s;
        int c = peek(p);
        if (dollar == alt && (c == ']' || c == ';' || (c == 0 && !bracketed))) {
            if (c == ']' && alt == it->alts)
                return fail(p, PYXBUF_EFORMAT, opener,
                            "empty custom type '[]' at position %lld: write [id$payload]",
                            POS(p, opener));
            return fail(p, PYXBUF_EFORMAT, alt,
                        "empty custom type alternative at position %lld: each alternative "
                        "is id$payload",
                        POS(p, alt));
        }
        if (c == 0 && bracketed)
            return fail(p, PYXBUF_EFORMAT, opener,
                        "'[' at position %lld is never closed: add ']' after the custom type",
                        POS(p, opener));
        if (c == '$' && dollar == alt)
            return fail(p, PYXBUF_EFORMAT, alt,
                        "empty custom type id before '$' at position %lld", POS(p, alt));
        if (c != '$' && (c == ']' || c == ';' || c == 0))
            return fail(p, PYXBUF_EFORMAT, alt,
                        "custom type '%.*s' at position %lld has no '$': write id$payload "
                        "(e.g. 'ml_dtypes$bfloat16')",
                        (int)(dollar - alt > 60 ? 60 : dollar - alt), alt, POS(p, alt));
        if (c != '$')
            return fail(p, PYXBUF_EFORMAT, dollar,
                        "%s at position %lld is not allowed in a custom type id (printable "
                        "ASCII except ']', ';' and '$', then '$')",
                        char_desc(c, cb), POS(p, dollar));
        p->s++;
        bool reserved = is_reserved_id(alt, (size_t)(dollar - alt));
        const char *nested = NULL; /* a '[' in a struct$/buffer$ payload */
        while (p->s < p->end && *p->s != ']' && *p->s != ';') {
            if (*p->s == '[' && reserved && nested == NULL) nested = p->s;
            if (!is_custom_char((unsigned char)*p->s)) {
                if (nested != NULL && *p->s == '$') return fail_nested_custom(p, alt, nested);
                return fail(p, PYXBUF_EFORMAT, p->s,
                            "%s at position %lld is not allowed in a custom type payload "
                            "(printable ASCII except ']', ';' and '$')",
                            char_desc((unsigned char)*p->s, cb), POS(p, p->s));
            }
            p->s++;
        }
        if (nested != NULL) return fail_nested_custom(p, alt, nested);
        if (p->s == p->end && bracketed)
            return fail(p, PYXBUF_EFORMAT, opener,
                        "'[' at position %lld is never closed: add ']' after the custom type",
                        POS(p, opener));
        if (!bracketed && p->s < p->end && *p->s == ']')
            return fail(p, PYXBUF_EFORMAT, p->s,
                        "']' at position %lld is not allowed in a custom type payload",
                        POS(p, p->s));
        if (it->custom == NULL) {
            /* Until one is understood, the first stands for the type. */
            it->custom = alt;
            it->custom_len = (int32_t)(p->s - alt);
            it->custom_id_len = (int32_t)(dollar - alt);
        }
        if (!resolved) {
            const char *alt_end = p->s;
            int rc = understand(p, it, alt, dollar, alt_end);
            if (rc < 0) return rc;
            if (rc == 1) {
                resolved = true;
                it->custom = alt;
                it->custom_len = (int32_t)(alt_end - alt);
                it->custom_id_len = (int32_t)(dollar - alt);
            }
        } else if (reserved) {
            int rc = check_payload(p, dollar + 1, p->s, alt[0] == 's');
            if (rc < 0) return rc;
        }
        if (p->s == p->end || *p->s == ']') break;
        p->s++; /* ';' */
    }
    it->alts_len = (int32_t)(p->s - it->alts);
    if (bracketed) p->s++;
    if (!resolved) {
        it->flags |= PYXBUF_FMTN_OPAQUE;
        if (p->opaque_at == NULL) {
            p->opaque_at = opener;
            p->opaque_alts = it->alts;
            p->opaque_len = it->alts_len;
        }
    }
    p->fflags |= PYXBUF_FMTF_HAS_CUSTOM;
    return 0;
}

/* "(2,3)" at p->s. */
static int parse_dims(parser *p, item *it) {
    const char *open = p->s++;
    it->dims_start = p->out ? p->out->ndims : 0;
    for (;;) {
        skip_ws(p);
        const char *at = p->s;
        int c = peek(p);
        char cb[16];
        if (c == 0)
            return fail(p, PYXBUF_EFORMAT, open,
                        "'(' at position %lld is never closed: add ')' after the sub-array shape",
                        POS(p, open));
        if (c == ')' && it->ndim == 0)
            return fail(p, PYXBUF_EFORMAT, open,
                        "empty sub-array shape '()' at position %lld: give at least one "
                        "dimension",
                        POS(p, open));
        if (!is_digit(c))
            return fail(p, PYXBUF_EFORMAT, at,
                        "%s at position %lld in a sub-array shape: dimensions are "
                        "non-negative integers separated by ','",
                        char_desc(c, cb), POS(p, at));
        int64_t d = 0;
        int rc = parse_number(p, "sub-array dimension", &d);
        if (rc < 0) return rc;
        if (it->ndim == PYXBUF_MAX_NDIM)
            return fail(p, PYXBUF_EFORMAT, at,
                        "sub-array dimension at position %lld is one more than %d, the most a "
                        "shape may have",
                        POS(p, at), PYXBUF_MAX_NDIM);
        if (!PYXBUF__MUL_OK(it->dims_prod, d, &it->dims_prod))
            return fail(p, PYXBUF_EOVERFLOW, at,
                        "sub-array dimension at position %lld makes the shape larger than 2**63 "
                        "elements",
                        POS(p, at));
        if (p->out && !dim_push(p->out, d)) return fail_nomem(p);
        it->ndim++;
        skip_ws(p);
        c = peek(p);
        if (c == ')') break;
        if (c != ',') {
            if (c == 0)
                return fail(p, PYXBUF_EFORMAT, open,
                            "'(' at position %lld is never closed: add ')' after the "
                            "sub-array shape",
                            POS(p, open));
            return fail(p, PYXBUF_EFORMAT, p->s,
                        "%s at position %lld in a sub-array shape: expected ',' or ')'",
                        char_desc(c, cb), POS(p, p->s));
        }
        p->s++;
    }
    p->s++;
    return 0;
}

/* What the struct module refuses of the prefix at p->s (struct$ payloads). */
static PYXBUF_NOINLINE int struct_prefix_check(const parser *p) {
    if (p->s != p->seq_start)
        return fail((parser *)p, PYXBUF_EFORMAT, p->s,
                    "byte-order prefix '%c' at position %lld inside a struct$ payload: the "
                    "struct module takes one only at the start",
                    *p->s, POS(p, p->s));
    if (*p->s == '^')
        return fail((parser *)p, PYXBUF_EFORMAT, p->s,
                    "'^' at position %lld is not a struct-module prefix (struct$ payload); use "
                    "buffer$ for PEP 3118 syntax",
                    POS(p, p->s));
    return 0;
}

/* A byte-order prefix at p->s: sets the mode. `skip_space` skips whitespace
 * after it (struct allows "< i" at the start of an item); another prefix
 * after it is refused. */
static PYXBUF_ALWAYS_INLINE int prefix_at(parser *p, bool skip_space) {
    if (PYXBUF_UNLIKELY(p->struct_only)) {
        int rc = struct_prefix_check(p);
        if (rc < 0) return rc;
    }
    int c = (unsigned char)*p->s++;
    p->mode = c;
    if (skip_space) skip_ws(p);
    int d = peek(p);
    if (PYXBUF_UNLIKELY(is_order(d)))
        return fail(p, PYXBUF_EFORMAT, p->s,
                    "two byte-order prefixes in a row ('%c' then '%c') at position %lld: "
                    "keep one",
                    c, d, POS(p, p->s));
    return 0;
}

/* An optional prefix slot: sets the mode. */
static inline int prefix_slot(parser *p) { return is_order(peek(p)) ? prefix_at(p, false) : 0; }

/* The error for a character where a type code should be. */
static int bad_code(parser *p, const item *it, bool had_count, bool had_prefix) {
    int c = peek(p);
    char cb[16];
    const char *at = p->s;
    if (c == 0 || c == '}' || c == ']' || c == ')') {
        if (it->flags & PYXBUF_FMTN_COMPLEX)
            return fail(p, PYXBUF_EFORMAT, at - 1,
                        "'Z' at position %lld must be followed by 'f', 'd', 'g' or a custom type",
                        POS(p, at - 1));
        if (had_count)
            return fail(p, PYXBUF_EFORMAT, it->count_at,
                        "count at position %lld is not followed by a type code",
                        POS(p, it->count_at));
        if (it->flags & PYXBUF_FMTN_POINTER)
            return fail(p, PYXBUF_EFORMAT, it->start,
                        "'&' in the item at position %lld is not followed by a type code",
                        POS(p, it->start));
        if (it->ndim)
            return fail(p, PYXBUF_EFORMAT, it->start,
                        "sub-array shape at position %lld is not followed by a type code",
                        POS(p, it->start));
        if (had_prefix)
            return fail(p, PYXBUF_EFORMAT, it->start,
                        "byte-order prefix '%c' at position %lld is not followed by a type code",
                        p->mode, POS(p, it->start));
        if (c == ')')
            return fail(p, PYXBUF_EFORMAT, at, "unbalanced ')' at position %lld", POS(p, at));
        if (c == ']')
            return fail(p, PYXBUF_EFORMAT, at,
                        "unbalanced ']' at position %lld: no custom type is open", POS(p, at));
        return fail(p, PYXBUF_EFORMAT, at,
                    "unbalanced '}' at position %lld: no T{ struct is open", POS(p, at));
    }
    if (it->flags & PYXBUF_FMTN_COMPLEX)
        return fail(p, PYXBUF_EFORMAT, at - 1,
                    "'Z' at position %lld must be followed by 'f', 'd', 'g' or a custom type, "
                    "not %s",
                    POS(p, at - 1), char_desc(c, cb));
    if (is_ws(c) && (had_count || it->ndim || (it->flags & PYXBUF_FMTN_POINTER)))
        return fail(p, PYXBUF_EFORMAT, at,
                    "whitespace at position %lld inside an item: a count, shape or '&' must be "
                    "followed directly by its type code",
                    POS(p, at));
    if (c == ':')
        return fail(p, PYXBUF_EFORMAT, at,
                    "name at position %lld does not follow an item: names come right after "
                    "their item ('i:x:')",
                    POS(p, at));
    if (c == '(' && had_count)
        return fail(p, PYXBUF_EFORMAT, at,
                    "sub-array shape at position %lld after a count: write the shape first "
                    "('(2)3f')",
                    POS(p, at));
    if (c == '(' || c == '&')
        return fail(p, PYXBUF_EFORMAT, at, "unexpected '%c' at position %lld", c, POS(p, at));
    if (c == '{')
        return fail(p, PYXBUF_EFORMAT, at,
                    "'{' at position %lld without 'T' before it: structs are written T{...}",
                    POS(p, at));
    if (c == 't' || c == 'X')
        return fail(p, PYXBUF_EUNSUPPORTED, at,
                    "PEP 3118 %s '%c' at position %lld is not supported",
                    c == 't' ? "bit field" : "function pointer", c, POS(p, at));
    if (c >= 0x80)
        return fail(p, PYXBUF_EFORMAT, at,
                    "%s at position %lld is not ASCII: type codes are ASCII (only names may hold "
                    "other bytes)",
                    char_desc(c, cb), POS(p, at));
    return fail(p, PYXBUF_EFORMAT, at,
                "unknown type code %s at position %lld (expected a struct/PEP 3118 code such as "
                "'i', 'f', 'd', a T{...} struct or an [id$payload] custom type)",
                char_desc(c, cb), POS(p, at));
}

/* ":name:" after an item: the name, then no second one. */
static PYXBUF_ALWAYS_INLINE int parse_name(parser *p, const char **name_out, int32_t *len_out) {
    const char *open = p->s++;
    const char *name = p->s;
    while (p->s < p->end && *p->s != ':') p->s++;
    if (p->s == p->end)
        return fail(p, PYXBUF_EFORMAT, open,
                    "name starting at position %lld has no closing ':'", POS(p, open));
    if (p->s == name)
        return fail(p, PYXBUF_EFORMAT, open, "empty name '::' at position %lld", POS(p, open));
    if (p->s - name > INT32_MAX)
        return fail(p, PYXBUF_EOVERFLOW, open, "name at position %lld is too long", POS(p, open));
    *name_out = name;
    *len_out = (int32_t)(p->s - name);
    p->s++;
    if (peek(p) == ':')
        return fail(p, PYXBUF_EFORMAT, p->s,
                    "second name at position %lld: an item has one name", POS(p, p->s));
    return 0;
}

/* What the struct module refuses inside a struct$ payload. */
static int struct_only_check(parser *p, const item *it, int c) {
    char cb[16];
    const code_info *ci = code_info_of(c);
    if (it->ndim || (it->flags & (PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER)) || c == 'T' ||
        c == '[' || (ci && !(ci->flags & CI_STRUCT)))
        return fail(p, PYXBUF_EFORMAT, it->start,
                    "the item at position %lld is not struct-module syntax (%s), but the "
                    "payload of struct$ is a struct format: use buffer$ for PEP 3118 syntax",
                    POS(p, it->start),
                    it->ndim ? "a sub-array shape"
                    : (it->flags & PYXBUF_FMTN_COMPLEX) ? "'Z'"
                    : (it->flags & PYXBUF_FMTN_POINTER) ? "'&'"
                    : c == 'T' ? "a T{} struct"
                    : c == '[' ? "a custom type" : char_desc(c, cb));
    if (ci && (ci->flags & CI_NATIVE_ONLY) && p->mode != '@')
        return fail(p, PYXBUF_EFORMAT, p->s,
                    "'%c' at position %lld has no standard size, so the struct module refuses "
                    "it after '%c'",
                    c, POS(p, p->s), p->mode);
    return 0;
}

static int parse_struct_body(parser *p, item *it);

/* An item that is one type code (not padding) with an optional name, after
 * any prefix: "i", "<d:y:". The common item, so it is laid out and stored
 * straight into its node, without the general item. */
static PYXBUF_ALWAYS_INLINE int parse_plain(parser *p, seq *q, const char *start, int c) {
    int32_t flags = (CODES[c].flags & CI_COMPLEX_ALIAS) ? PYXBUF_FMTN_COMPLEX : 0;
    int64_t size, align, offset;
    scalar_layout(c, p->mode, flags, &size, &align);
    if (p->mode != '@') align = 1;
    p->s++;
    const char *name = NULL;
    int32_t name_len = 0;
    int rc;
    if (peek(p) == ':' && (rc = parse_name(p, &name, &name_len)) < 0) return rc;
    if ((rc = place_field(p, q, size, align, start, &offset)) < 0) return rc;
    if (p->out == NULL) return 0;
    int32_t idx = node_alloc(p->out);
    if (idx < 0) return fail_nomem(p);
    pyxbuf_format_node *nodes = pyxbuf_format_nodes(p->out), *n = &nodes[idx];
    node_set(n, PYXBUF_FMT_SCALAR, COMPONENT_CODE(c), p->mode, flags, q->parent, -1, 0, align,
             size);
    n->offset = offset;
    n->name = name;
    n->name_len = name_len;
    link_node(q, nodes, idx);
    return 0;
}

static PYXBUF_NOINLINE int parse_compound(parser *p, seq *q, const char *start,
                                           bool had_prefix);

/* One item: a prefix, then a plain code or what parse_compound reads. */
static int parse_item(parser *p, seq *q) {
    const char *start = p->s;
    bool had_prefix = is_order(peek(p));
    if (had_prefix) {
        int rc = prefix_at(p, true);
        if (rc < 0) return rc;
    }
    int c = peek(p);
    /* CODE_AT is 0 for padding 'x' (which merges) and for non-codes. */
    if (PYXBUF_LIKELY(CODE_AT[c] != 0 && !p->struct_only)) return parse_plain(p, q, start, c);
    return parse_compound(p, q, start, had_prefix);
}

/* The rest of an item: shape, count, '&', 'Z', padding, a struct or a custom
 * type, a name. */
static PYXBUF_NOINLINE int parse_compound(parser *p, seq *q, const char *start,
                                           bool had_prefix) {
    item it;
    item_init(&it, start);
    bool had_count = false;
    int rc;
    if (peek(p) == '(') {
        if ((rc = parse_dims(p, &it)) < 0) return rc;
        had_prefix |= is_order(peek(p));
        if ((rc = prefix_slot(p)) < 0) return rc;
    }
    if (is_digit(peek(p))) {
        it.count_at = p->s;
        had_count = true;
        if ((rc = parse_number(p, "repeat count", &it.repeat)) < 0) return rc;
    }
    if (peek(p) == '&') {
        it.flags |= PYXBUF_FMTN_POINTER;
        p->s++;
        if ((rc = prefix_slot(p)) < 0) return rc; /* ctypes: "&<i" */
    }
    if (peek(p) == 'Z') {
        it.flags |= PYXBUF_FMTN_COMPLEX;
        p->s++;
        int c = peek(p);
        const code_info *ci = code_info_of(c);
        if (c != '[' && !(ci && (ci->flags & CI_COMPLEX)))
            return bad_code(p, &it, had_count, had_prefix);
    }
    it.mode = p->mode;
    int c = peek(p);
    if (p->struct_only && (rc = struct_only_check(p, &it, c)) < 0) return rc;
    const code_info *ci = code_info_of(c);
    if (ci && (ci->flags & CI_COMPLEX_ALIAS)) {
        it.flags |= PYXBUF_FMTN_COMPLEX; /* 'Z' before it was refused above */
        c = complex_component(c);
    }
    if (ci) {
        it.kind = c == 'x' ? PYXBUF_FMT_PADDING : PYXBUF_FMT_SCALAR;
        it.code = c;
        if (c == 'x' && (it.flags & PYXBUF_FMTN_POINTER))
            return fail(p, PYXBUF_EFORMAT, p->s,
                        "'&' before padding 'x' at position %lld: padding has no address",
                        POS(p, p->s));
        scalar_layout(c, it.mode, it.flags, &it.size, &it.align);
        p->s++;
        /* NumPy pads with runs of 'x': take them at once (a named one ends it). */
        if (c == 'x' && !had_count && it.ndim == 0 && it.flags == 0)
            while (p->s < p->end && *p->s == 'x' && (p->s + 1 == p->end || p->s[1] != ':')) {
                it.repeat++;
                p->s++;
            }
    } else if (c == 'T') {
        if ((rc = parse_struct_body(p, &it)) < 0) return rc;
    } else if (c == '[') {
        if (p->in_payload)
            return fail(p, PYXBUF_EFORMAT, p->s,
                        "custom type at position %lld inside a buffer$ payload: custom types "
                        "are not allowed in buffer$ (a payload cannot hold ']', ';' or '$'); "
                        "put the custom type outside, or list it as another alternative",
                        POS(p, p->s));
        const char *opener = p->s++;
        it.kind = PYXBUF_FMT_CUSTOM;
        if (p->out && (it.node = node_alloc(p->out)) < 0) return fail_nomem(p);
        if ((rc = parse_alternatives(p, &it, opener, true)) < 0) return rc;
        if (it.flags & PYXBUF_FMTN_POINTER) {
            it.size = (int64_t)sizeof(void *);
            it.align = (int64_t)_Alignof(void *);
        } else if ((it.flags & PYXBUF_FMTN_COMPLEX) && it.size > 0 &&
                   !PYXBUF__MUL_OK(it.size, 2, &it.size)) {
            return fail(p, PYXBUF_EOVERFLOW, opener, "custom type at position %lld is too large",
                        POS(p, opener));
        }
    } else {
        return bad_code(p, &it, had_count, had_prefix);
    }
    if (peek(p) == ':') {
        if (p->struct_only)
            return fail(p, PYXBUF_EFORMAT, p->s,
                        "name at position %lld in a struct$ payload: the struct module has no "
                        "names; use buffer$",
                        POS(p, p->s));
        if ((rc = parse_name(p, &it.name, &it.name_len)) < 0) return rc;
    }
    return emit_item(p, q, &it);
}

/* "T{...}" at p->s: members are children of a node reserved now. */
static int parse_struct_body(parser *p, item *it) {
    const char *t = p->s;
    if (p->s + 1 >= p->end || p->s[1] != '{')
        return fail(p, PYXBUF_EFORMAT, t,
                    "'T' at position %lld must be followed by '{' (structs are T{...})",
                    POS(p, t));
    if (++p->depth > PYXBUF_FORMAT_MAX_DEPTH)
        return fail(p, PYXBUF_EFORMAT, t, "T{ at position %lld nests deeper than %d levels",
                    POS(p, t), PYXBUF_FORMAT_MAX_DEPTH);
    p->s += 2;
    it->kind = PYXBUF_FMT_STRUCT;
    p->fflags |= PYXBUF_FMTF_HAS_STRUCT;
    if (p->out && (it->node = node_alloc(p->out)) < 0) return fail_nomem(p);
    seq q;
    seq_init(&q, it->node);
    int rc = parse_sequence(p, &q, '}', t);
    if (rc < 0) return rc;
    p->depth--;
    seq_close(&q, true, &it->size, &it->align);
    it->first_child = q.first;
    it->nchildren = q.count;
    if (it->flags & PYXBUF_FMTN_POINTER) {
        it->size = (int64_t)sizeof(void *);
        it->align = (int64_t)_Alignof(void *);
    }
    return 0;
}

/* Items until `closer` ('}') or the end (closer 0). */
static int parse_sequence(parser *p, seq *q, int closer, const char *opener) {
    for (;;) {
        skip_ws(p);
        if (p->s == p->end) {
            if (closer == 0) return 0;
            return fail(p, PYXBUF_EFORMAT, opener,
                        "T{ at position %lld is never closed: add '}' after its members",
                        POS(p, opener));
        }
        if (closer != 0 && *p->s == closer) {
            p->s++;
            return 0;
        }
        int rc = parse_item(p, q);
        if (rc < 0) return rc;
    }
}

/* ------------------------------------------------------------------------- */
/* Parsing entry points                                                      */
/* ------------------------------------------------------------------------- */

static void parser_init(parser *p, const char *fmt, size_t len, pyxbuf_format *out,
                        pyxbuf_error *err) {
    p->src = p->s = p->seq_start = fmt;
    p->src_end = p->end = fmt + len;
    p->label = "format";
    p->out = out;
    p->err = err;
    p->fflags = 0;
    p->depth = 0;
    p->mode = '@';
    p->struct_only = false;
    p->in_payload = false;
    p->opaque_at = p->opaque_alts = NULL;
    p->opaque_len = 0;
}

/* Single scalars ("f", "<d", "Zf", "=D") are the common case of every
 * consumer. Their descriptors point at nodes built at compile time, one
 * root-and-scalar pair per byte-order mode and code, so parsing one writes
 * only the descriptor's header. */
/* One item of the shared pairs: 'F' is two floats; only '@' aligns. */
#define SINGLE_SIZE(m, nsize, ssize, fl)                                                  \
    ((NATIVE_SIZED(m, fl) ? (int64_t)(nsize) : (int64_t)(ssize)) *                         \
     (((fl) & CI_COMPLEX_ALIAS) ? 2 : 1))
#define SINGLE_ALIGN(m, nalign) ((m) == '@' ? (int64_t)(nalign) : 1)
#define SINGLE_PAIR(m, name, ch, nsize, nalign, ssize, fl)                                  \
    {{.kind = PYXBUF_FMT_ROOT, .byte_order = '@', .parent = -1, .next = -1,                 \
      .first_child = 1, .nchildren = 1, .alignment = SINGLE_ALIGN(m, nalign), .repeat = 1, \
      .itemsize = SINGLE_SIZE(m, nsize, ssize, fl), .nbytes = SINGLE_SIZE(m, nsize, ssize, fl)}, \
     {.kind = PYXBUF_FMT_SCALAR, .code = COMPONENT_CODE(ch), .byte_order = (m),                  \
      .flags = ((fl) & CI_COMPLEX_ALIAS) ? PYXBUF_FMTN_COMPLEX : 0, .parent = 0, .next = -1,  \
      .first_child = -1, .alignment = SINGLE_ALIGN(m, nalign), .repeat = 1,                 \
      .itemsize = SINGLE_SIZE(m, nsize, ssize, fl), .nbytes = SINGLE_SIZE(m, nsize, ssize, fl)}},
#define SINGLE_MODE(i, m) [i] = {CODE_LIST(SINGLE_PAIR, m)},
static const pyxbuf_format_node SINGLES[NMODES][NSLOTS][2] = {MODE_LIST(SINGLE_MODE)};

/* The shared nodes of `fmt` when it is exactly one scalar with an optional
 * order character and 'Z', else NULL (the parser does the rest). Reads no
 * byte past the NUL: s[1] is read only once s[0] is a code. */
static inline const pyxbuf_format_node *single_nodes(const char *fmt) {
    const unsigned char *s = (const unsigned char *)fmt;
    unsigned mode = MODE_AT[s[0]];
    s += mode & 1;
    unsigned code = s[0] == 'Z' ? COMPLEX_AT[*++s] : CODE_AT[s[0]];
    if (code == 0 || s[1] != '\0') return NULL;
    return (const pyxbuf_format_node *)((const char *)SINGLES + (mode & ~1u) + code);
}

/* The fast path of pyxbuf_format_parse: the header only. */
static inline int parse_single(const char *fmt, pyxbuf_format *out) {
    const pyxbuf_format_node *nodes = single_nodes(fmt);
    if (nodes == NULL) return 1;
    out->source = fmt;
    out->itemsize = nodes[0].itemsize;
    out->alignment = nodes[0].alignment;
    out->nnodes = 2;
    out->ndims = 0;
    out->flags = PYXBUF_FMTF_SINGLE_SCALAR;
    out->node_capacity = 0; /* shared: never written, never freed */
    out->dims_capacity = PYXBUF_FORMAT_INLINE_DIMS;
    out->reserved0 = 0;
    out->heap_nodes = (pyxbuf_format_node *)nodes;
    out->heap_dims = NULL;
    return 0;
}

/* Writes the root node and the summary of a parsed or built format. */
static void close_root(parser *p, const seq *q, int64_t size, int64_t align) {
    pyxbuf_format *f = p->out;
    pyxbuf_format_node *nodes = pyxbuf_format_nodes(f);
    node_set(&nodes[0], PYXBUF_FMT_ROOT, 0, '@', 0, -1, q->first, q->count, align, size);
    f->itemsize = size;
    f->alignment = align;
    f->flags = p->fflags | (size < 0 ? PYXBUF_FMTF_HAS_OPAQUE : 0);
    if (f->nnodes == 2 && nodes[1].kind == PYXBUF_FMT_SCALAR && nodes[1].repeat == 1 &&
        nodes[1].ndim == 0 && !(nodes[1].flags & PYXBUF_FMTN_POINTER))
        f->flags |= PYXBUF_FMTF_SINGLE_SCALAR;
}

/* Parses [p->s, p->end) as a whole format into p->out (if any). */
static int parse_root(parser *p, int64_t *itemsize, int64_t *alignment) {
    int32_t root = -1;
    if (p->out && (root = node_alloc(p->out)) < 0) return fail_nomem(p);
    seq q;
    seq_init(&q, root);
    int rc = parse_sequence(p, &q, 0, NULL);
    if (rc < 0) return rc;
    seq_close(&q, false, itemsize, alignment);
    if (p->out) close_root(p, &q, *itemsize, *alignment);
    return 0;
}

static int parse_general(const char *fmt, pyxbuf_format *out, pyxbuf_error *err);

int pyxbuf_format_parse(const char *fmt, pyxbuf_format *out, pyxbuf_error *err) {
    if (out == NULL)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1, "pyxbuf_format_parse: out is NULL");
    if (fmt == NULL) fmt = "B";
    if (PYXBUF_LIKELY(parse_single(fmt, out) == 0)) return PYXBUF_OK;
    return parse_general(fmt, out, err);
}

/* pyxbuf_format_parse past one scalar: out of line, so the fast path sets up
 * no parser frame. */
static PYXBUF_NOINLINE int parse_general(const char *fmt, pyxbuf_format *out, pyxbuf_error *err) {
    format_reset(out, fmt);
    parser p;
    parser_init(&p, fmt, strlen(fmt), out, err);
    int64_t size, align;
    int rc = parse_root(&p, &size, &align);
    if (rc < 0) pyxbuf_format_clear(out);
    return rc;
}

/* The message for a format whose size depends on an unknown custom type. */
static int fail_opaque(parser *p) {
    const char *alts = p->opaque_alts;
    int32_t n = p->opaque_len;
    const char *semi = memchr(alts, ';', (size_t)n);
    int32_t first = semi ? (int32_t)(semi - alts) : n;
    int shown = first > 80 ? 80 : first; /* the message must fit 480 bytes */
    return fail_on(p, PYXBUF_EUNSUPPORTED, p->opaque_at,
                "uses custom type '%.*s%s'%s which this consumer does not support (at position "
                "%lld); register it with pyxbuf_dtype_register or use a format with a known size",
                shown, alts, shown < first ? "..." : "",
                semi ? " (nor any of its alternatives)" : "", POS(p, p->opaque_at));
}

static int itemsize_parsed(const char *fmt, int64_t *itemsize, int64_t *alignment,
                           pyxbuf_error *err);

int pyxbuf_format_itemsize(const char *fmt, int64_t *itemsize, int64_t *alignment,
                           pyxbuf_error *err) {
    if (fmt == NULL) fmt = "B";
    if (itemsize == NULL)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1, "pyxbuf_format_itemsize: itemsize is NULL");
    const pyxbuf_format_node *nodes = single_nodes(fmt);
    if (PYXBUF_LIKELY(nodes != NULL)) {
        *itemsize = nodes[0].itemsize;
        if (alignment) *alignment = nodes[0].alignment;
        return PYXBUF_OK;
    }
    return itemsize_parsed(fmt, itemsize, alignment, err);
}

/* pyxbuf_format_itemsize of anything but one scalar: out of line, so the
 * fast path keeps no frame for the parser. */
static PYXBUF_NOINLINE int itemsize_parsed(const char *fmt, int64_t *itemsize,
                                           int64_t *alignment, pyxbuf_error *err) {
    int64_t size, align;
    parser p;
    parser_init(&p, fmt, strlen(fmt), NULL, err);
    int rc = parse_root(&p, &size, &align);
    if (rc < 0) return rc;
    if (p.opaque_at != NULL && size < 0) return fail_opaque(&p);
    *itemsize = size;
    if (alignment) *alignment = align;
    return PYXBUF_OK;
}

/* ------------------------------------------------------------------------- */
/* Writer                                                                    */
/* ------------------------------------------------------------------------- */

typedef struct writer {
    char *buf;
    size_t cap, len;
} writer;

static void put(writer *w, const char *s, size_t n) {
    if (w->len < w->cap && n > 0) {
        size_t room = w->cap - w->len;
        memcpy(w->buf + w->len, s, n < room ? n : room);
    }
    w->len += n;
}

static void put_char(writer *w, char c) { put(w, &c, 1); }

static void put_int(writer *w, int64_t v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    put(w, tmp, (size_t)n);
}

static int write_seq(writer *w, const pyxbuf_format *f, int32_t parent, int *cur, bool in_struct,
                     int depth, pyxbuf_error *err);

static int write_node(writer *w, const pyxbuf_format *f, const pyxbuf_format_node *n, int *cur,
                      bool *force, int depth, pyxbuf_error *err) {
    if (!is_order(n->byte_order))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_format_write: node %d has no byte order; call "
                             "pyxbuf_format_finish before writing a built format",
                             (int)(n - pyxbuf_format_nodes(f)));
    if (*force || n->byte_order != *cur) put_char(w, (char)n->byte_order);
    *cur = n->byte_order;
    *force = false;
    if (n->ndim > 0) {
        const int64_t *dims = pyxbuf_format_dims(f) + n->dims_start;
        put_char(w, '(');
        for (int32_t d = 0; d < n->ndim; d++) {
            if (d) put_char(w, ',');
            put_int(w, dims[d]);
        }
        put_char(w, ')');
    }
    if (n->repeat != 1) put_int(w, n->repeat);
    if (n->flags & PYXBUF_FMTN_POINTER) put_char(w, '&');
    if (n->flags & PYXBUF_FMTN_COMPLEX) put_char(w, 'Z');
    switch (n->kind) {
    case PYXBUF_FMT_SCALAR:
    case PYXBUF_FMT_PADDING:
        put_char(w, n->kind == PYXBUF_FMT_PADDING ? 'x' : (char)n->code);
        break;
    case PYXBUF_FMT_STRUCT: {
        put(w, "T{", 2);
        int rc = write_seq(w, f, (int32_t)(n - pyxbuf_format_nodes(f)), cur, true, depth + 1, err);
        if (rc < 0) return rc;
        put_char(w, '}');
        /* Make the next item's mode explicit for readers that restore it at '}'. */
        if (*cur != n->byte_order) *force = true;
        break;
    }
    case PYXBUF_FMT_CUSTOM:
        put_char(w, '[');
        put(w, n->alternatives, (size_t)n->alternatives_len);
        put_char(w, ']');
        break;
    default:
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_format_write: node of unknown kind %d", (int)n->kind);
    }
    if (n->name) {
        put_char(w, ':');
        put(w, n->name, (size_t)n->name_len);
        put_char(w, ':');
    }
    return 0;
}

static int write_seq(writer *w, const pyxbuf_format *f, int32_t parent, int *cur, bool in_struct,
                     int depth, pyxbuf_error *err) {
    const pyxbuf_format_node *nodes = pyxbuf_format_nodes(f);
    if (depth > PYXBUF_FORMAT_MAX_DEPTH)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_format_write: structs nest deeper than %d levels",
                             PYXBUF_FORMAT_MAX_DEPTH);
    bool force = false;
    for (int32_t i = nodes[parent].first_child; i >= 0; i = nodes[i].next) {
        if (i >= f->nnodes)
            return pyxbuf__error(err, PYXBUF_EINVAL, -1, "pyxbuf_format_write: corrupt node links");
        /* A struct's first member states its mode unless it is native. */
        if (in_struct && i == nodes[parent].first_child && nodes[i].byte_order != '@') force = true;
        int rc = write_node(w, f, &nodes[i], cur, &force, depth, err);
        if (rc < 0) return rc;
    }
    return 0;
}

int pyxbuf_format_write(const pyxbuf_format *f, char *buf, size_t cap, size_t *len,
                        pyxbuf_error *err) {
    if (f == NULL || (buf == NULL && cap > 0))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1, "pyxbuf_format_write: NULL argument");
    writer w = {buf, cap, 0};
    int cur = '@';
    if (f->nnodes > 0) {
        int rc = write_seq(&w, f, 0, &cur, false, 0, err);
        if (rc < 0) return rc;
    }
    if (len) *len = w.len;
    if (w.len >= cap) {
        if (cap > 0) buf[0] = '\0';
        return pyxbuf__error(err, PYXBUF_ENOSPACE, -1,
                             "pyxbuf_format_write: the format needs %zu bytes plus the NUL, the "
                             "buffer holds %zu",
                             w.len, cap);
    }
    buf[w.len] = '\0';
    return PYXBUF_OK;
}

/* ------------------------------------------------------------------------- */
/* Builder                                                                   */
/* ------------------------------------------------------------------------- */

void pyxbuf_format_init(pyxbuf_format *f) {
    format_reset(f, NULL);
    f->nnodes = 1;
    node_set(&f->inline_nodes[0], PYXBUF_FMT_ROOT, 0, '@', 0, -1, -1, 0, 1, 0);
}

/* A new child of `parent`, linked last. Returns its index or a negative code. */
static int add_node(pyxbuf_format *f, int32_t parent, int32_t kind, int32_t byte_order,
                    int64_t repeat, int32_t ndim, const int64_t *dims, const char *name) {
    if (f == NULL || parent < 0 || parent >= f->nnodes) return PYXBUF_EINVAL;
    pyxbuf_format_node *nodes = pyxbuf_format_nodes(f);
    if (nodes[parent].kind != PYXBUF_FMT_ROOT && nodes[parent].kind != PYXBUF_FMT_STRUCT)
        return PYXBUF_EINVAL;
    if ((byte_order != 0 && !is_order(byte_order)) || repeat < 0 || ndim < 0 ||
        ndim > PYXBUF_MAX_NDIM || (ndim > 0 && dims == NULL))
        return PYXBUF_EINVAL;
    for (int32_t d = 0; d < ndim; d++)
        if (dims[d] < 0) return PYXBUF_EINVAL;
    size_t name_len = name ? strlen(name) : 0;
    if (name && (name_len == 0 || name_len > INT32_MAX || memchr(name, ':', name_len)))
        return PYXBUF_EINVAL;
    int32_t dims_start = f->ndims;
    for (int32_t d = 0; d < ndim; d++)
        if (!dim_push(f, dims[d])) return PYXBUF_ENOMEM;
    int32_t idx = node_alloc(f);
    if (idx < 0) return PYXBUF_ENOMEM;
    nodes = pyxbuf_format_nodes(f);
    nodes[idx] = (pyxbuf_format_node){
        .kind = kind, .byte_order = byte_order, .parent = parent, .next = -1,
        .first_child = -1, .ndim = ndim, .dims_start = ndim ? dims_start : 0, .alignment = 1,
        .repeat = repeat, .offset = -1, .itemsize = -1, .nbytes = -1, .name = name,
        .name_len = (int32_t)name_len};
    pyxbuf_format_node *par = &nodes[parent];
    if (par->first_child < 0) par->first_child = idx;
    else {
        int32_t last = par->first_child;
        while (nodes[last].next >= 0) last = nodes[last].next;
        nodes[last].next = idx;
    }
    par->nchildren++;
    return idx;
}

int pyxbuf_format_add_scalar(pyxbuf_format *f, int32_t parent, int32_t code, int32_t byte_order,
                             int32_t node_flags, int64_t repeat, int32_t ndim,
                             const int64_t *dims, const char *name) {
    const code_info *ci = code_info_of(code);
    if (ci && (ci->flags & CI_COMPLEX_ALIAS)) {
        if (node_flags & PYXBUF_FMTN_COMPLEX) return PYXBUF_EINVAL;
        node_flags |= PYXBUF_FMTN_COMPLEX;
        code = complex_component(code);
        ci = code_info_of(code);
    }
    if (ci == NULL || (node_flags & ~(PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER)) ||
        ((node_flags & PYXBUF_FMTN_COMPLEX) && !(ci->flags & CI_COMPLEX)) ||
        (code == 'x' && node_flags))
        return PYXBUF_EINVAL;
    int idx = add_node(f, parent, code == 'x' ? PYXBUF_FMT_PADDING : PYXBUF_FMT_SCALAR,
                       byte_order, repeat, ndim, dims, name);
    if (idx < 0) return idx;
    pyxbuf_format_nodes(f)[idx].code = code;
    pyxbuf_format_nodes(f)[idx].flags = node_flags;
    return idx;
}

int pyxbuf_format_add_struct(pyxbuf_format *f, int32_t parent, int32_t byte_order, int64_t repeat,
                             int32_t ndim, const int64_t *dims, const char *name) {
    return add_node(f, parent, PYXBUF_FMT_STRUCT, byte_order, repeat, ndim, dims, name);
}

int pyxbuf_format_add_custom(pyxbuf_format *f, int32_t parent, const char *alternatives,
                             int32_t byte_order, int32_t node_flags, int64_t repeat,
                             int32_t ndim, const int64_t *dims, const char *name) {
    size_t n = alternatives ? strlen(alternatives) : 0;
    if (n == 0 || n > INT32_MAX || (node_flags & ~(PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER)))
        return PYXBUF_EINVAL;
    int idx = add_node(f, parent, PYXBUF_FMT_CUSTOM, byte_order, repeat, ndim, dims, name);
    if (idx < 0) return idx;
    pyxbuf_format_node *node = &pyxbuf_format_nodes(f)[idx];
    node->flags = node_flags;
    node->alternatives = alternatives;
    node->alternatives_len = (int32_t)n;
    return idx;
}

int pyxbuf_format_add_padding(pyxbuf_format *f, int32_t parent, int64_t nbytes) {
    return pyxbuf_format_add_scalar(f, parent, 'x', 0, 0, nbytes, 0, NULL, NULL);
}

/* Copies the builder's node `si` (and its subtree) into p->out through the
 * parser's layout code, in pre-order. `mode` is the parent's mode, for nodes
 * added with byte order 0. */
static int build_seq(parser *p, const pyxbuf_format *src, int32_t parent, seq *q, int mode);

static int build_node(parser *p, const pyxbuf_format *src, int32_t si, seq *q, int parent_mode) {
    const pyxbuf_format_node *sn = &pyxbuf_format_nodes(src)[si];
    item it;
    item_init(&it, NULL);
    it.kind = sn->kind;
    it.code = sn->code;
    it.flags = sn->flags & (PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER);
    it.mode = sn->byte_order ? sn->byte_order : parent_mode;
    it.repeat = sn->repeat;
    it.name = sn->name;
    it.name_len = sn->name_len;
    it.dims_start = p->out->ndims;
    it.ndim = sn->ndim;
    for (int32_t d = 0; d < sn->ndim; d++) {
        int64_t dim = pyxbuf_format_dims(src)[sn->dims_start + d];
        if (!PYXBUF__MUL_OK(it.dims_prod, dim, &it.dims_prod))
            return fail(p, PYXBUF_EOVERFLOW, NULL,
                        "a sub-array shape has more than 2**63 elements");
        if (!dim_push(p->out, dim)) return fail_nomem(p);
    }
    int rc = 0;
    switch (sn->kind) {
    case PYXBUF_FMT_SCALAR:
    case PYXBUF_FMT_PADDING:
        scalar_layout(sn->code, it.mode, it.flags, &it.size, &it.align);
        break;
    case PYXBUF_FMT_STRUCT: {
        if (++p->depth > PYXBUF_FORMAT_MAX_DEPTH)
            return fail(p, PYXBUF_EFORMAT, NULL, "structs nest deeper than %d levels",
                        PYXBUF_FORMAT_MAX_DEPTH);
        p->fflags |= PYXBUF_FMTF_HAS_STRUCT;
        if ((it.node = node_alloc(p->out)) < 0) return fail_nomem(p);
        seq inner;
        seq_init(&inner, it.node);
        if ((rc = build_seq(p, src, si, &inner, it.mode)) < 0) return rc;
        p->depth--;
        seq_close(&inner, true, &it.size, &it.align);
        it.first_child = inner.first;
        it.nchildren = inner.count;
        if (it.flags & PYXBUF_FMTN_POINTER) {
            it.size = (int64_t)sizeof(void *);
            it.align = (int64_t)_Alignof(void *);
        }
        break;
    }
    case PYXBUF_FMT_CUSTOM: {
        /* Messages quote the alternatives; positions are within them. */
        parser sub = *p;
        sub.src = sub.s = sub.seq_start = sn->alternatives;
        sub.src_end = sub.end = sn->alternatives + sn->alternatives_len;
        sub.label = "custom type";
        if ((it.node = node_alloc(p->out)) < 0) return fail_nomem(p);
        if ((rc = parse_alternatives(&sub, &it, sub.s, false)) < 0) return rc;
        p->fflags = sub.fflags;
        if (it.flags & PYXBUF_FMTN_POINTER) {
            it.size = (int64_t)sizeof(void *);
            it.align = (int64_t)_Alignof(void *);
        } else if ((it.flags & PYXBUF_FMTN_COMPLEX) && it.size > 0 &&
                   !PYXBUF__MUL_OK(it.size, 2, &it.size)) {
            return fail(p, PYXBUF_EOVERFLOW, NULL, "a custom type is too large");
        }
        break;
    }
    default:
        return fail(p, PYXBUF_EINVAL, NULL, "node %d has kind %d, not a member kind", (int)si,
                    (int)sn->kind);
    }
    return emit_item(p, q, &it);
}

static int build_seq(parser *p, const pyxbuf_format *src, int32_t parent, seq *q, int mode) {
    const pyxbuf_format_node *nodes = pyxbuf_format_nodes(src);
    for (int32_t i = nodes[parent].first_child; i >= 0; i = nodes[i].next) {
        if (i >= src->nnodes) return fail(p, PYXBUF_EINVAL, NULL, "corrupt node links");
        int rc = build_node(p, src, i, q, mode);
        if (rc < 0) return rc;
    }
    return 0;
}

int pyxbuf_format_finish(pyxbuf_format *f, pyxbuf_error *err) {
    if (f == NULL || f->nnodes < 1 || pyxbuf_format_nodes(f)[0].kind != PYXBUF_FMT_ROOT)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_format_finish: not a format started with pyxbuf_format_init");
    pyxbuf_format built;
    format_reset(&built, NULL);
    parser p;
    parser_init(&p, "", 0, &built, err);
    p.label = "built format";
    int32_t root = node_alloc(&built);
    seq q;
    seq_init(&q, root);
    int rc = build_seq(&p, f, 0, &q, '@');
    if (rc < 0) {
        pyxbuf_format_clear(&built);
        return rc;
    }
    int64_t size, align;
    seq_close(&q, false, &size, &align);
    close_root(&p, &q, size, align);
    pyxbuf_format_clear(f);
    *f = built;
    return PYXBUF_OK;
}
