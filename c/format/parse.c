/* parse.c -- buffer format strings: the struct module's syntax, the PEP 3118
 * additions, and custom types ("[id$payload;alt$payload]"). One parser (items.c)
 * serves pyxbuf_format_parse (which records a node tree) and
 * pyxbuf_format_itemsize (which only lays out), here; the builder's finish step
 * (write.c) feeds its nodes through the same layout code, so built and parsed
 * formats cannot disagree.
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
 *   A struct$ payload is what the struct module says it is: "[struct$<]" is 0
 *   bytes (CPython's memoryview reads struct$ payloads with struct itself).
 * - Whitespace is allowed between items and after a prefix, never between a
 *   count and its code or before a name; prefixes: one per slot, in the slots
 *   NumPy and ctypes use: "<(2)3f", "(2)<3f", "(3)&<i".
 */
#include "format/format.h"

/* One item of the shared pairs: 'F' is two floats; only '@' aligns. */
#define SINGLE_SIZE(m, nsize, ssize, fl)                                                           \
    ((PYXBUF__NATIVE_SIZED(m, fl) ? (int64_t)(nsize) : (int64_t)(ssize)) *                         \
     (((fl) & PYXBUF__CI_COMPLEX_ALIAS) ? 2 : 1))
#define SINGLE_ALIGN(m, nalign) ((m) == '@' ? (int64_t)(nalign) : 1)
#define SINGLE_PAIR(m, name, ch, nsize, nalign, ssize, fl)                                         \
    {{.kind = PYXBUF_FMT_ROOT, .byte_order = '@', .parent = -1, .next = -1, .first_child = 1,      \
      .nchildren = 1, .alignment = SINGLE_ALIGN(m, nalign), .repeat = 1,                           \
      .itemsize = SINGLE_SIZE(m, nsize, ssize, fl), .nbytes = SINGLE_SIZE(m, nsize, ssize, fl)},   \
     {.kind = PYXBUF_FMT_SCALAR, .code = PYXBUF__COMPONENT_CODE(ch), .byte_order = (m),            \
      .flags = ((fl) & PYXBUF__CI_COMPLEX_ALIAS) ? PYXBUF_FMTN_COMPLEX : 0, .parent = 0,           \
      .next = -1, .first_child = -1, .alignment = SINGLE_ALIGN(m, nalign), .repeat = 1,            \
      .itemsize = SINGLE_SIZE(m, nsize, ssize, fl), .nbytes = SINGLE_SIZE(m, nsize, ssize, fl)}},
#define SINGLE_MODE(i, m) [i] = {PYXBUF__CODE_LIST(SINGLE_PAIR, m)},
/* The single scalars' nodes (format.h says how they are found). */
static const pyxbuf_format_node SINGLES[PYXBUF__NMODES][PYXBUF__NSLOTS][2] = {
    PYXBUF__MODE_LIST(SINGLE_MODE)};
/* The offsets of the complex aliases' pairs: what 'Z' and a code stand for. */
static const uint16_t COMPLEX_AT[256] = {['f'] = PYXBUF__SLOT_F * PYXBUF__PAIR_BYTES,
                                         ['d'] = PYXBUF__SLOT_D * PYXBUF__PAIR_BYTES,
                                         ['g'] = PYXBUF__SLOT_G * PYXBUF__PAIR_BYTES};

/* The shared nodes of `fmt` when it is exactly one scalar with an optional
 * order character and 'Z', else NULL (the parser does the rest); NULL means
 * "B" (known here at compile time). Reads no byte past the NUL: s[1] is read
 * only once s[0] is a code. */
static inline const pyxbuf_format_node *single_nodes(const char *fmt) {
    if (fmt == NULL) return SINGLES[0][PYXBUF__SLOT_B];
    const unsigned char *s = (const unsigned char *)fmt;
    unsigned mode = pyxbuf__fmt_mode_at[s[0]];
    s += mode & 1;
    unsigned code = s[0] == 'Z' ? COMPLEX_AT[*++s] : pyxbuf__fmt_code_at[s[0]];
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

int pyxbuf_format_parse(const char *fmt, pyxbuf_format *out, pyxbuf_error *err) {
    if (out == NULL)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1, "pyxbuf_format_parse: out is NULL");
    if (fmt == NULL) fmt = "B";
    if (PYXBUF_LIKELY(parse_single(fmt, out) == 0)) return PYXBUF_OK;
    return pyxbuf__fmt_parse_general(fmt, out, err);
}

int pyxbuf__format_holds_custom(const char *format) {
    if (format == NULL || strchr(format, '[') == NULL) return 0; /* no custom type without one */
    pyxbuf_format f;
    if (pyxbuf_format_parse(format, &f, NULL) < 0) return 1;
    int custom = (f.flags & PYXBUF_FMTF_HAS_CUSTOM) != 0;
    pyxbuf_format_clear(&f);
    return custom;
}

int pyxbuf_format_itemsize(const char *fmt, int64_t *itemsize, int64_t *alignment,
                           pyxbuf_error *err) {
    if (itemsize == NULL)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1, "pyxbuf_format_itemsize: itemsize is NULL");
    const pyxbuf_format_node *nodes = single_nodes(fmt);
    if (PYXBUF_LIKELY(nodes != NULL)) {
        *itemsize = nodes[0].itemsize;
        if (alignment) *alignment = nodes[0].alignment;
        return PYXBUF_OK;
    }
    return pyxbuf__fmt_itemsize_general(fmt, itemsize, alignment, err);
}
