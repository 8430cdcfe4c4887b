/* format.h -- the format layer's private interface (c/format/), for its own
 * files and the layers above (never installed):
 *
 * - for the layers above: the custom-type character rule, the registry's
 *   generation counter, and the one growable string builder of formats;
 * - inside the layer: the type-code table, the parser's state, its items and
 *   sequences, node storage, and the messages, shared by the parser
 *   (items.c, parse.c) and the builder (write.c).
 *
 * Files of the layer, bottom first (no call loop between them): tables.c
 * (the type-code tables), nodes.c (node storage), messages.c (the parser's
 * messages), dtypes.c (the custom-type registry), items.c (the parser's
 * grammar and layout), parse.c (pyxbuf_format_parse and
 * pyxbuf_format_itemsize, their single-scalar fast paths), write.c
 * (canonical forms and the builder). */
#ifndef PYXBUF_FORMAT_FORMAT_H
#define PYXBUF_FORMAT_FORMAT_H

#include "base/base.h" /* Python.h first, as the C API asks */

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* For the layers above                                                      */
/* ------------------------------------------------------------------------- */

/* The one character rule of custom types ("[id$payload;id$payload]"), for
 * the parser, the registry's keys and the bridges that name types. The
 * custom-dtype proposal (custom-dtype-formats.md, Specification): "All
 * characters within the [] must be printable ASCII characters characters
 * excluding ];$ and specifications must e.g. use base64 encoding for
 * arbitrary data." Printable ASCII is 0x20 (space) to 0x7E, so an id may hold
 * a space or '[' like any payload; ']' closes the type, ';' separates
 * alternatives and '$' ends the id (so a payload cannot hold a custom type). */
static inline bool pyxbuf__custom_type_char(int c) {
    return c >= 0x20 && c <= 0x7e && c != ']' && c != ';' && c != '$';
}

/* The first byte of s[0..len) that pyxbuf__custom_type_char refuses, or
 * NULL when every byte is allowed. */
static inline const char *pyxbuf__custom_type_bad_char(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!pyxbuf__custom_type_char((unsigned char)s[i])) return s + i;
    return NULL;
}

/* Whether a format holds a custom type anywhere ("[ml_dtypes$bfloat16]",
 * in a struct too); a format the parser refuses is judged by its '['. What
 * a producer declaring PYXBUF_EXTENDED_FORMAT asks before refusing a classic
 * consumer the format (export/exporter.c; pyxbuf_numpy_array). */
int pyxbuf__format_holds_custom(const char *format);

/* The format "[key]" of a custom type pyxbuf knows without registration
 * (ml_dtypes' types, dtypes.c), as a string that lives as long as the
 * process; NULL for any other key (not NUL-terminated: key[0..len)). */
const char *pyxbuf__dtype_builtin_format(const char *key, size_t len);

/* Bumped by every pyxbuf_dtype_register/unregister (dtypes.c): caches of
 * registry answers (bridges/array_interface.c's dtype table) compare it. */
extern PYXBUF_HIDDEN atomic_uint_fast64_t pyxbuf__dtype_registry_generation;

/* A format string being built: into a caller's buffer of `cap` bytes, where
 * what does not fit is only counted (pyxbuf_format_write's contract), or
 * growing on the heap from `local` (pyxbuf__fmtbuf_init), where `failed`
 * records running out of memory; every put then does nothing, so a caller
 * checks once at the end. `len` counts every byte put. */
typedef struct pyxbuf__fmtbuf {
    char *p;
    size_t len, cap;
    bool grows, failed;
    char local[64];
} pyxbuf__fmtbuf;

/* A growing, empty, NUL-terminated buffer. */
void pyxbuf__fmtbuf_init(pyxbuf__fmtbuf *b);
/* Frees what a growing buffer took from the heap; leaves it empty. */
void pyxbuf__fmtbuf_free(pyxbuf__fmtbuf *b);
void pyxbuf__fmtbuf_put(pyxbuf__fmtbuf *b, const char *s, size_t n);
void pyxbuf__fmtbuf_puts(pyxbuf__fmtbuf *b, const char *s);
void pyxbuf__fmtbuf_char(pyxbuf__fmtbuf *b, char c);
void pyxbuf__fmtbuf_int(pyxbuf__fmtbuf *b, int64_t v);
/* A sub-array shape "(2,3)" and an item's name ":name:", as formats write
 * them. */
void pyxbuf__fmtbuf_shape(pyxbuf__fmtbuf *b, const int64_t *dims, int32_t ndim);
void pyxbuf__fmtbuf_name(pyxbuf__fmtbuf *b, const char *name, size_t len);

/* ------------------------------------------------------------------------- */
/* Type codes                                                                */
/* ------------------------------------------------------------------------- */

#define PYXBUF__CI_VALID 0x01
#define PYXBUF__CI_STRUCT 0x02        /* the struct module accepts it */
#define PYXBUF__CI_NATIVE_ONLY 0x04   /* no standard size: native size in every mode */
#define PYXBUF__CI_COMPLEX 0x08       /* may follow 'Z' */
#define PYXBUF__CI_STRING 0x10        /* 's', 'p': the count is the length of one item */
#define PYXBUF__CI_COMPLEX_ALIAS 0x20 /* 'F' 'D' 'G': the same item as "Zf" "Zd" "Zg" */

typedef struct pyxbuf__fmt_code {
    uint8_t native_size;
    uint8_t native_align;
    uint8_t std_size;
    uint8_t flags;
} pyxbuf__fmt_code;

/* Every code: X(arg, name, char, native size, native alignment, standard
 * size, flags). One list feeds the code table, the slot numbers and the
 * shared single-scalar nodes, so they cannot disagree. Native sizes come
 * from this compiler, as the struct module's do. */
#define PYXBUF__CODE_LIST(X, arg)                                                                  \
    X(arg, x, 'x', 1, 1, 1, PYXBUF__CI_STRUCT)                                                     \
    X(arg, c, 'c', sizeof(char), _Alignof(char), 1, PYXBUF__CI_STRUCT)                             \
    X(arg, b, 'b', sizeof(signed char), _Alignof(signed char), 1, PYXBUF__CI_STRUCT)               \
    X(arg, B, 'B', sizeof(unsigned char), _Alignof(unsigned char), 1, PYXBUF__CI_STRUCT)           \
    X(arg, qmark, '?', sizeof(_Bool), _Alignof(_Bool), 1, PYXBUF__CI_STRUCT)                       \
    X(arg, h, 'h', sizeof(short), _Alignof(short), 2, PYXBUF__CI_STRUCT)                           \
    X(arg, H, 'H', sizeof(unsigned short), _Alignof(unsigned short), 2, PYXBUF__CI_STRUCT)         \
    X(arg, i, 'i', sizeof(int), _Alignof(int), 4, PYXBUF__CI_STRUCT)                               \
    X(arg, I, 'I', sizeof(unsigned int), _Alignof(unsigned int), 4, PYXBUF__CI_STRUCT)             \
    X(arg, l, 'l', sizeof(long), _Alignof(long), 4, PYXBUF__CI_STRUCT)                             \
    X(arg, L, 'L', sizeof(unsigned long), _Alignof(unsigned long), 4, PYXBUF__CI_STRUCT)           \
    X(arg, q, 'q', sizeof(long long), _Alignof(long long), 8, PYXBUF__CI_STRUCT)                   \
    X(arg, Q, 'Q', sizeof(unsigned long long), _Alignof(unsigned long long), 8,                    \
      PYXBUF__CI_STRUCT)                                                                           \
    X(arg, n, 'n', sizeof(Py_ssize_t), _Alignof(Py_ssize_t), 0,                                    \
      PYXBUF__CI_STRUCT | PYXBUF__CI_NATIVE_ONLY)                                                  \
    X(arg, N, 'N', sizeof(size_t), _Alignof(size_t), 0,                                            \
      PYXBUF__CI_STRUCT | PYXBUF__CI_NATIVE_ONLY)                                                  \
    /* struct aligns a native half float like a short */                                           \
    X(arg, e, 'e', 2, _Alignof(short), 2, PYXBUF__CI_STRUCT)                                       \
    X(arg, f, 'f', sizeof(float), _Alignof(float), 4, PYXBUF__CI_STRUCT | PYXBUF__CI_COMPLEX)      \
    X(arg, d, 'd', sizeof(double), _Alignof(double), 8, PYXBUF__CI_STRUCT | PYXBUF__CI_COMPLEX)    \
    X(arg, s, 's', 1, 1, 1, PYXBUF__CI_STRUCT | PYXBUF__CI_STRING)                                 \
    X(arg, p, 'p', 1, 1, 1, PYXBUF__CI_STRUCT | PYXBUF__CI_STRING)                                 \
    X(arg, P, 'P', sizeof(void *), _Alignof(void *), 0,                                            \
      PYXBUF__CI_STRUCT | PYXBUF__CI_NATIVE_ONLY)                                                  \
    X(arg, g, 'g', sizeof(long double), _Alignof(long double), 0,                                  \
      PYXBUF__CI_NATIVE_ONLY | PYXBUF__CI_COMPLEX)                                                 \
    X(arg, O, 'O', sizeof(PyObject *), _Alignof(PyObject *), 0, PYXBUF__CI_NATIVE_ONLY)            \
    X(arg, w, 'w', sizeof(Py_UCS4), _Alignof(Py_UCS4), 4, 0)                                       \
    X(arg, u, 'u', sizeof(Py_UCS2), _Alignof(Py_UCS2), 2, 0)                                       \
    /* struct's complex codes (CPython 3.14; ctypes 3.14 also writes 'G'). They                    \
     * parse to the node of "Zf" / "Zd" / "Zg": one item, two components. */                       \
    X(arg, F, 'F', sizeof(float), _Alignof(float), 4,                                              \
      PYXBUF__CI_STRUCT | PYXBUF__CI_COMPLEX_ALIAS)                                                \
    X(arg, D, 'D', sizeof(double), _Alignof(double), 8,                                            \
      PYXBUF__CI_STRUCT | PYXBUF__CI_COMPLEX_ALIAS)                                                \
    X(arg, G, 'G', sizeof(long double), _Alignof(long double), 0,                                  \
      PYXBUF__CI_NATIVE_ONLY | PYXBUF__CI_COMPLEX_ALIAS)

/* The byte-order modes: X(index, character). */
#define PYXBUF__MODE_LIST(X) X(0, '@') X(1, '^') X(2, '=') X(3, '<') X(4, '>') X(5, '!')

/* Single scalars ("f", "<d", "Zf", "=D") are the common case of every
 * consumer. Their descriptors point at nodes built at compile time
 * (parse.c's SINGLES), one root-and-scalar pair per byte-order mode and
 * code, so parsing one writes only the descriptor's header. These tables
 * find the pair as byte offsets into SINGLES (the hot path adds them, no
 * multiplying): of each code that can stand alone ('x', slot 0, cannot: 0
 * means no), and of each mode (its order character, plus 1 to say the
 * format starts with one; no character means '@'). The mode table also
 * answers pyxbuf__fmt_is_order. Defined in tables.c. */
#define PYXBUF__SLOT_NAME(arg, name, ch, nsize, nalign, ssize, fl) PYXBUF__SLOT_##name,
enum { PYXBUF__CODE_LIST(PYXBUF__SLOT_NAME, 0) PYXBUF__NSLOTS };
enum { PYXBUF__NMODES = 6 };
#define PYXBUF__PAIR_BYTES (2 * sizeof(pyxbuf_format_node))
#define PYXBUF__MODE_BYTES (PYXBUF__NSLOTS * PYXBUF__PAIR_BYTES)

extern PYXBUF_HIDDEN const pyxbuf__fmt_code pyxbuf__fmt_codes[128];
extern PYXBUF_HIDDEN const uint16_t pyxbuf__fmt_code_at[256];
extern PYXBUF_HIDDEN const uint16_t pyxbuf__fmt_mode_at[256];

/* The struct module's size rule: '@' and '^' use native sizes, the other
 * modes standard ones, except for codes that have none. */
#define PYXBUF__NATIVE_SIZED(mode, fl)                                                             \
    ((mode) == '@' || (mode) == '^' || ((fl) & PYXBUF__CI_NATIVE_ONLY))
/* The component code of a complex alias ('F' -> 'f'), else `ch`. */
#define PYXBUF__COMPONENT_CODE(ch)                                                                 \
    ((ch) == 'F' ? 'f' : (ch) == 'D' ? 'd' : (ch) == 'G' ? 'g' : (ch))

static inline const pyxbuf__fmt_code *pyxbuf__fmt_code_of(int c) {
    if (c <= 0 || c >= 128 || !(pyxbuf__fmt_codes[c].flags & PYXBUF__CI_VALID)) return NULL;
    return &pyxbuf__fmt_codes[c];
}

static inline bool pyxbuf__fmt_is_order(int c) {
    return c >= 0 && c < 256 && (pyxbuf__fmt_mode_at[c] & 1);
}

static inline bool pyxbuf__fmt_is_ws(int c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static inline bool pyxbuf__fmt_is_digit(int c) { return c >= '0' && c <= '9'; }

/* Size and natural alignment of one scalar element in `mode`. */
static inline void pyxbuf__fmt_scalar_layout(int code, int mode, int32_t flags, int64_t *size,
                                             int64_t *align) {
    const pyxbuf__fmt_code *ci = &pyxbuf__fmt_codes[code];
    if (flags & PYXBUF_FMTN_POINTER) {
        *size = (int64_t)sizeof(void *);
        *align = (int64_t)_Alignof(void *);
        return;
    }
    *size = PYXBUF__NATIVE_SIZED(mode, ci->flags) ? ci->native_size : ci->std_size;
    *align = ci->native_align;
    if (flags & PYXBUF_FMTN_COMPLEX) *size *= 2;
}

/* Alignments are powers of two (C's are; registry entries are checked);
 * sizes are non-negative (base/checked.h does the rest). */
static inline bool pyxbuf__fmt_align_up_ok(int64_t off, int64_t align, int64_t *r) {
    if (!PYXBUF__ADD_OK(off, align - 1, r)) return false;
    *r &= ~(align - 1);
    return true;
}

static inline bool pyxbuf__fmt_is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* ------------------------------------------------------------------------- */
/* Node storage (nodes.c)                                                    */
/* ------------------------------------------------------------------------- */

static inline pyxbuf_format_node *pyxbuf__fmt_nodes(const pyxbuf_format *f) {
    return f->heap_nodes ? f->heap_nodes : (pyxbuf_format_node *)f->inline_nodes;
}

/* An empty format of `source`, with nothing on the heap. */
static inline void pyxbuf__fmt_reset(pyxbuf_format *f, const char *source) {
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

/* pyxbuf__fmt_node_alloc past the capacity (rare). */
int32_t pyxbuf__fmt_node_grow(pyxbuf_format *f);

/* Index of a new node, or -1 when out of memory. */
static inline int32_t pyxbuf__fmt_node_alloc(pyxbuf_format *f) {
    if (PYXBUF_LIKELY(f->nnodes < f->node_capacity)) return f->nnodes++;
    return pyxbuf__fmt_node_grow(f);
}

/* Room for one more dimension past the capacity (rare); false when out of
 * memory. */
bool pyxbuf__fmt_dim_grow(pyxbuf_format *f);

/* Appends a dimension; false when out of memory. Inline: a sub-array's
 * dimensions are pushed on the parser's hot path. */
static inline bool pyxbuf__fmt_dim_push(pyxbuf_format *f, int64_t d) {
    if (PYXBUF_UNLIKELY(f->ndims == f->dims_capacity) && !pyxbuf__fmt_dim_grow(f)) return false;
    (f->heap_dims ? f->heap_dims : (int64_t *)f->inline_dims)[f->ndims++] = d;
    return true;
}

/* A node with no name, shape or custom type; every field written (explicit
 * stores: a compound literal or struct copy compiles to `rep stos`, which
 * costs one instruction per word on the single-item fast path). */
static inline void pyxbuf__fmt_node_set(pyxbuf_format_node *n, int32_t kind, int32_t code,
                                        int32_t order, int32_t flags, int32_t parent,
                                        int32_t first_child, int32_t nchildren, int64_t align,
                                        int64_t size) {
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

/* ------------------------------------------------------------------------- */
/* The parser                                                                */
/* ------------------------------------------------------------------------- */

typedef struct pyxbuf__fmt_parser {
    const char *src;       /* the whole string: positions and messages refer to it */
    const char *src_end;
    const char *label;     /* "format", or "custom type" for the builder */
    const char *s;         /* cursor */
    const char *end;       /* end of what is being parsed (a payload ends early) */
    const char *seq_start; /* first char of the current (payload) sequence */
    pyxbuf_format *out;    /* NULL: layout only */
    pyxbuf_error *err;
    int32_t fflags;        /* PYXBUF_FMTF_* seen so far */
    int depth;
    int mode;              /* byte-order mode in effect */
    bool struct_only;      /* inside "[struct$...]": the struct module's syntax */
    bool in_payload;       /* inside a struct$ or buffer$ payload */
    /* The first opaque custom type, for pyxbuf_format_itemsize's message. */
    const char *opaque_at;
    const char *opaque_alts;
    int32_t opaque_len;
} pyxbuf__fmt_parser;

/* The position of `at` in the source, for messages (-1: none). */
#define PYXBUF__POS(p, at) ((at) ? (long long)((at) - (p)->src) : -1LL)

static inline void pyxbuf__fmt_parser_init(pyxbuf__fmt_parser *p, const char *fmt, size_t len,
                                           pyxbuf_format *out, pyxbuf_error *err) {
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

static inline int pyxbuf__fmt_peek(const pyxbuf__fmt_parser *p) {
    return p->s < p->end ? (unsigned char)*p->s : 0;
}

/* One item being parsed (or copied by the builder). */
typedef struct pyxbuf__fmt_item {
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
} pyxbuf__fmt_item;

/* Every field set one by one: a zeroing initializer compiles to "rep stos",
 * which costs more than the whole parse of "f" on some machines. */
static inline void pyxbuf__fmt_item_init(pyxbuf__fmt_item *it, const char *start) {
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

/* Members being laid out: a root, a struct, or a custom type's payload. */
typedef struct pyxbuf__fmt_seq {
    int64_t offset; /* -1 once an item of unknown size was placed */
    int64_t align;
    int32_t parent, first, last, count;
} pyxbuf__fmt_seq;

static inline void pyxbuf__fmt_seq_init(pyxbuf__fmt_seq *q, int32_t parent) {
    q->offset = 0;
    q->align = 1;
    q->parent = parent;
    q->first = q->last = -1;
    q->count = 0;
}

/* Size and alignment of a finished sequence: a struct is padded to its
 * alignment (1 when every member is packed); whole formats and payloads are
 * not, as struct.calcsize does not pad "ix". */
static inline void pyxbuf__fmt_seq_close(const pyxbuf__fmt_seq *q, bool pad, int64_t *size,
                                         int64_t *align) {
    *align = q->align;
    *size = q->offset;
    if (pad && q->offset >= 0) {
        int64_t padded;
        if (pyxbuf__fmt_align_up_ok(q->offset, q->align, &padded)) *size = padded;
    }
}

/* messages.c: every message is "<label> '<source>': <what>" with the
 * position of `at`; each returns `code` (or the error's). */
int pyxbuf__fmt_fail(pyxbuf__fmt_parser *p, int32_t code, const char *at, const char *fmt, ...)
    PYXBUF_PRINTF(4, 5);
int pyxbuf__fmt_fail_nomem(pyxbuf__fmt_parser *p);
/* A character for a message: 'c', or byte 0xNN. */
const char *pyxbuf__fmt_char_desc(int c, char buf[16]);
/* The error for the character at p->s where a type code should be. */
int pyxbuf__fmt_bad_code(pyxbuf__fmt_parser *p, const pyxbuf__fmt_item *it, bool had_count,
                         bool had_prefix);
/* What the struct module refuses of the prefix at p->s (struct$ payloads):
 * a negative code; 1 when the prefix is the whole payload (it is consumed); else 0. */
int pyxbuf__fmt_struct_prefix_check(pyxbuf__fmt_parser *p);
/* What the struct module refuses of the item `it` with code `c` there. */
int pyxbuf__fmt_struct_only_check(pyxbuf__fmt_parser *p, const pyxbuf__fmt_item *it, int c);
/* The custom type alternative `alt` at p->s (its '[' at `opener`; `first`
 * of its type) refused: its id ends at p->s but not in a '$'; a character of
 * its payload (`nested`: a '[' seen in a struct$ or buffer$ payload); what
 * ends it: the format's end (`bracketed`) or a ']' (the builder's). */
int pyxbuf__fmt_fail_custom_id(pyxbuf__fmt_parser *p, const char *alt, const char *opener,
                               bool bracketed, bool first);
int pyxbuf__fmt_fail_custom_payload(pyxbuf__fmt_parser *p, const char *alt, const char *nested);
int pyxbuf__fmt_fail_custom_end(pyxbuf__fmt_parser *p, const char *opener, bool bracketed);
/* A custom type inside a struct$ (alt "struct") or buffer$ payload at `open`. */
int pyxbuf__fmt_fail_nested_custom(pyxbuf__fmt_parser *p, const char *alt, const char *open);
/* A format whose size depends on an unknown custom type (p->opaque_at). */
int pyxbuf__fmt_fail_opaque(pyxbuf__fmt_parser *p);

/* dtypes.c: the size of the custom type "id$payload" (alt, len; the id is
 * id_len bytes), or false when no one registered it. */
bool pyxbuf__dtype_lookup(const char *alt, size_t len, size_t id_len, int64_t *size,
                          int64_t *align);

/* struct$ and buffer$: understood by the parser itself. */
static inline bool pyxbuf__fmt_reserved_id(const char *alt, size_t id_len) {
    return id_len == 6 && (memcmp(alt, "struct", 6) == 0 || memcmp(alt, "buffer", 6) == 0);
}

/* items.c: the alternatives at p->s, up to ']' (bracketed) or the end, into
 * `it`: all checked, the first understood one resolved. */
int pyxbuf__fmt_parse_alternatives(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it,
                                   const char *opener, bool bracketed);
/* A custom type's size once its alternatives are parsed: a pointer's, or
 * twice the type's after 'Z'. `at`: its '[' (NULL: the builder's, which has
 * no position). */
int pyxbuf__fmt_custom_size(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *at);
/* A struct item: open checks the depth and reserves its node (`at`: its
 * 'T', NULL for the builder's); close takes the laid-out members `q`. */
int pyxbuf__fmt_open_struct(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *at);
void pyxbuf__fmt_close_struct(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it,
                              const pyxbuf__fmt_seq *q);
/* Places `it` after what `q` holds and records its node. */
int pyxbuf__fmt_emit_item(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q, pyxbuf__fmt_item *it);
/* pyxbuf_format_parse and pyxbuf_format_itemsize past a single scalar. */
int pyxbuf__fmt_parse_general(const char *fmt, pyxbuf_format *out, pyxbuf_error *err);
int pyxbuf__fmt_itemsize_general(const char *fmt, int64_t *itemsize, int64_t *alignment,
                                 pyxbuf_error *err);
/* Writes the root node and the summary of a parsed or built format. */
void pyxbuf__fmt_close_root(pyxbuf__fmt_parser *p, const pyxbuf__fmt_seq *q, int64_t size,
                            int64_t align);

#endif
