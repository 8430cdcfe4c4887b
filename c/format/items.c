/* items.c -- the parser's grammar and layout: a format is a sequence of
 * items (a prefix, a shape, a count, '&', 'Z', then a type code, a T{...}
 * struct or an [id$payload;...] custom type, then a name), laid out as
 * parse.c's rules say, into nodes when there is a descriptor to fill. Here
 * is every format past the single scalars parse.c answers at once; the
 * builder (write.c) lays its nodes out through the same code. */
#include "format/format.h"

/* ------------------------------------------------------------------------- */
/* Characters and numbers                                                    */
/* ------------------------------------------------------------------------- */

static void skip_ws(pyxbuf__fmt_parser *p) {
    /* Every whitespace byte is <= ' ': one compare passes the rest. */
    while (p->s < p->end && (unsigned char)*p->s <= ' ' && pyxbuf__fmt_is_ws((unsigned char)*p->s))
        p->s++;
}

/* A decimal number at p->s (at least one digit there). */
static int parse_number(pyxbuf__fmt_parser *p, const char *what, int64_t *value) {
    const char *start = p->s;
    int64_t v = 0;
    while (p->s < p->end && pyxbuf__fmt_is_digit(*p->s)) {
        int d = *p->s - '0';
        if (v > INT64_MAX / 10 || (v == INT64_MAX / 10 && d > INT64_MAX % 10))
            return pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, start,
                                    "%s at position %lld does not fit in 64 bits", what,
                                    PYXBUF__POS(p, start));
        v = v * 10 + d;
        p->s++;
    }
    *value = v;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Layout                                                                    */
/* ------------------------------------------------------------------------- */

static pyxbuf_format_node *node_at(pyxbuf__fmt_parser *p, int32_t i) {
    return &pyxbuf__fmt_nodes(p->out)[i];
}

/* Padding `it` merges into the previous padding: "xxx" is one 3-byte gap. */
static bool merge_padding(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q, const pyxbuf__fmt_item *it) {
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
static PYXBUF_ALWAYS_INLINE int place_field(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q,
                                            int64_t nbytes, int64_t align, const char *start,
                                            int64_t *offset) {
    *offset = -1;
    if (q->offset >= 0) {
        if (!pyxbuf__fmt_align_up_ok(q->offset, align, offset))
            return pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, start,
                                    "the offset of the item at position %lld exceeds 2**63 bytes",
                                    PYXBUF__POS(p, start));
        if (nbytes < 0) q->offset = -1;
        else if (!PYXBUF__ADD_OK(*offset, nbytes, &q->offset))
            return pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, start,
                                    "the format is larger than 2**63 bytes at position %lld",
                                    PYXBUF__POS(p, start));
    }
    if (align > q->align) q->align = align;
    return 0;
}

/* Makes node `idx` the last member of `q`. */
static PYXBUF_ALWAYS_INLINE void link_node(pyxbuf__fmt_seq *q, pyxbuf_format_node *nodes,
                                           int32_t idx) {
    if (q->last >= 0) nodes[q->last].next = idx;
    else q->first = idx;
    q->last = idx;
    q->count++;
}

/* Stores `it`, placed at `offset` as `nbytes` aligned to `align`, into node
 * `idx` of `q`. Field by field: a compound literal is built on the stack and
 * copied. */
static PYXBUF_ALWAYS_INLINE void store_item(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q,
                                            const pyxbuf__fmt_item *it, int32_t idx,
                                            int64_t align, int64_t offset, int64_t nbytes) {
    pyxbuf_format_node *nodes = pyxbuf__fmt_nodes(p->out), *n = &nodes[idx];
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
}

/* Place `it` after what `q` holds and record its node. */
static PYXBUF_ALWAYS_INLINE int emit_item(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q,
                                          pyxbuf__fmt_item *it) {
    /* A struct aligns as its members do, whatever mode its "T{" found. */
    bool aligned = it->mode == '@' ||
                   (it->kind == PYXBUF_FMT_STRUCT && !(it->flags & PYXBUF_FMTN_POINTER));
    int64_t align = aligned ? it->align : 1; /* an opaque type has align 1 */
    int64_t nbytes = -1, offset;
    if (it->size >= 0 && (!PYXBUF__MUL_OK(it->size, it->repeat, &nbytes) ||
                          !PYXBUF__MUL_OK(nbytes, it->dims_prod, &nbytes)))
        return pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, it->count_at,
                                "the item counted at position %lld is larger than 2**63 bytes",
                                PYXBUF__POS(p, it->count_at));
    int rc = place_field(p, q, nbytes, align, it->start, &offset);
    if (rc < 0) return rc;
    if (p->out == NULL || (it->kind == PYXBUF_FMT_PADDING && merge_padding(p, q, it))) return 0;
    int32_t idx = it->node;
    if (idx < 0 && (idx = pyxbuf__fmt_node_alloc(p->out)) < 0) return pyxbuf__fmt_fail_nomem(p);
    store_item(p, q, it, idx, align, offset, nbytes);
    return 0;
}

int pyxbuf__fmt_emit_item(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q, pyxbuf__fmt_item *it) {
    return emit_item(p, q, it);
}

/* An item that is a pointer ('&') has a pointer's size and alignment. */
static void as_pointer(pyxbuf__fmt_item *it) {
    it->size = (int64_t)sizeof(void *);
    it->align = (int64_t)_Alignof(void *);
}

/* ------------------------------------------------------------------------- */
/* Custom types                                                              */
/* ------------------------------------------------------------------------- */

static int parse_sequence(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q, int closer,
                          const char *opener);

/* The parser's state that a payload changes, saved around it. */
typedef struct payload_saved {
    const char *s, *end, *seq_start;
    int mode;
    bool struct_only, in_payload;
} payload_saved;

/* Parses a payload [from, to) as a format of its own, children of it->node. */
static int parse_payload(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *from,
                         const char *to, bool struct_only) {
    if (++p->depth > PYXBUF_FORMAT_MAX_DEPTH)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, from,
                                "custom type payload at position %lld nests deeper than %d levels",
                                PYXBUF__POS(p, from), PYXBUF_FORMAT_MAX_DEPTH);
    payload_saved saved = {p->s, p->end, p->seq_start, p->mode, p->struct_only, p->in_payload};
    p->s = p->seq_start = from;
    p->end = to;
    p->mode = '@'; /* a payload is a format of its own: no outer prefix reaches it */
    p->struct_only = struct_only;
    p->in_payload = true;
    pyxbuf__fmt_seq q;
    pyxbuf__fmt_seq_init(&q, it->node);
    int rc = parse_sequence(p, &q, 0, NULL);
    if (rc < 0) return rc;
    pyxbuf__fmt_seq_close(&q, false, &it->size, &it->align);
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

/* A struct$/buffer$ alternative after the one understood: checked as fully as
 * if it came first (a string's validity must not depend on which custom types
 * a consumer knows), laid out, and forgotten. */
static int check_payload(pyxbuf__fmt_parser *p, const char *from, const char *to,
                         bool struct_only) {
    pyxbuf_format *out = p->out;
    int32_t fflags = p->fflags;
    pyxbuf__fmt_item scratch;
    pyxbuf__fmt_item_init(&scratch, from);
    p->out = NULL;
    int rc = parse_payload(p, &scratch, from, to, struct_only);
    p->out = out;
    p->fflags = fflags;
    return rc;
}

/* One alternative "id$payload" at p->s, checked character by character up
 * to the ';', the ']' (bracketed) or the end; *dollar is where its id ends.
 * `first`: the first alternative, `opener` its '['. The loops are here, the
 * messages out of line (messages.c). */
static int scan_alternative(pyxbuf__fmt_parser *p, const char *opener, bool bracketed,
                            bool first, const char **dollar) {
    const char *alt = p->s;
    while (p->s < p->end && pyxbuf__custom_type_char((unsigned char)*p->s)) p->s++;
    if (pyxbuf__fmt_peek(p) != '$' || p->s == alt)
        return pyxbuf__fmt_fail_custom_id(p, alt, opener, bracketed, first);
    *dollar = p->s;
    bool reserved = pyxbuf__fmt_reserved_id(alt, (size_t)(p->s - alt));
    const char *nested = NULL; /* a '[' in a struct$/buffer$ payload */
    for (p->s++; p->s < p->end && *p->s != ']' && *p->s != ';'; p->s++) {
        if (*p->s == '[' && reserved && nested == NULL) nested = p->s;
        if (!pyxbuf__custom_type_char((unsigned char)*p->s))
            return pyxbuf__fmt_fail_custom_payload(p, alt, nested);
    }
    if (nested != NULL) return pyxbuf__fmt_fail_nested_custom(p, alt, nested);
    if (p->s == p->end ? bracketed : (!bracketed && *p->s == ']'))
        return pyxbuf__fmt_fail_custom_end(p, opener, bracketed);
    return 0;
}

/* Tries one alternative "id$payload"; 1 if understood (it->size set). */
static int understand(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *alt,
                      const char *dollar, const char *end) {
    size_t id_len = (size_t)(dollar - alt);
    if (pyxbuf__fmt_reserved_id(alt, id_len)) {
        int rc = parse_payload(p, it, dollar + 1, end, alt[0] == 's');
        return rc < 0 ? rc : 1;
    }
    int64_t size, align;
    if (!pyxbuf__dtype_lookup(alt, (size_t)(end - alt), id_len, &size, &align)) return 0;
    it->size = size;
    it->align = align;
    return 1;
}

/* The alternative [alt, end) stands for the type (id up to `dollar`). */
static void stand_for(pyxbuf__fmt_item *it, const char *alt, const char *dollar,
                      const char *end) {
    it->custom = alt;
    it->custom_len = (int32_t)(end - alt);
    it->custom_id_len = (int32_t)(dollar - alt);
}

/* The alternative [alt, p->s) just scanned: the first stands for the type
 * until one is understood; the first understood resolves it; a struct$ or
 * buffer$ one after that is still checked. */
static int resolve_alternative(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *alt,
                               const char *dollar, bool *resolved) {
    const char *end = p->s;
    if (it->custom == NULL) stand_for(it, alt, dollar, end);
    if (*resolved)
        return pyxbuf__fmt_reserved_id(alt, (size_t)(dollar - alt))
                   ? check_payload(p, dollar + 1, end, alt[0] == 's')
                   : 0;
    int rc = understand(p, it, alt, dollar, end);
    if (rc == 1) {
        *resolved = true;
        stand_for(it, alt, dollar, end);
    }
    return rc < 0 ? rc : 0;
}

/* No alternative is understood: the item's size is unknown; the first such
 * type is the one pyxbuf_format_itemsize names. */
static void mark_opaque(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *opener) {
    it->flags |= PYXBUF_FMTN_OPAQUE;
    if (p->opaque_at != NULL) return;
    p->opaque_at = opener;
    p->opaque_alts = it->alts;
    p->opaque_len = it->alts_len;
}

int pyxbuf__fmt_parse_alternatives(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it,
                                   const char *opener, bool bracketed) {
    bool resolved = false;
    it->alts = p->s;
    it->custom = NULL;
    it->size = -1;
    it->align = 1;
    for (;;) {
        const char *alt = p->s, *dollar = NULL;
        int rc = scan_alternative(p, opener, bracketed, alt == it->alts, &dollar);
        if (rc < 0 || (rc = resolve_alternative(p, it, alt, dollar, &resolved)) < 0) return rc;
        if (p->s == p->end || *p->s == ']') break;
        p->s++; /* ';' */
    }
    it->alts_len = (int32_t)(p->s - it->alts);
    if (bracketed) p->s++;
    if (!resolved) mark_opaque(p, it, opener);
    p->fflags |= PYXBUF_FMTF_HAS_CUSTOM;
    return 0;
}

int pyxbuf__fmt_custom_size(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *at) {
    if (it->flags & PYXBUF_FMTN_POINTER) as_pointer(it);
    else if ((it->flags & PYXBUF_FMTN_COMPLEX) && it->size > 0 &&
             !PYXBUF__MUL_OK(it->size, 2, &it->size))
        return at ? pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, at,
                                     "custom type at position %lld is too large",
                                     PYXBUF__POS(p, at))
                  : pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, NULL, "a custom type is too large");
    return 0;
}

/* "[...]" at p->s, after any '&' or 'Z'. */
static int parse_custom(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it) {
    if (p->in_payload)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                "custom type at position %lld inside a buffer$ payload: custom "
                                "types are not allowed in buffer$ (a payload cannot hold ']', ';' "
                                "or '$'); put the custom type outside, or list it as another "
                                "alternative",
                                PYXBUF__POS(p, p->s));
    const char *opener = p->s++;
    it->kind = PYXBUF_FMT_CUSTOM;
    if (p->out && (it->node = pyxbuf__fmt_node_alloc(p->out)) < 0)
        return pyxbuf__fmt_fail_nomem(p);
    int rc = pyxbuf__fmt_parse_alternatives(p, it, opener, true);
    return rc < 0 ? rc : pyxbuf__fmt_custom_size(p, it, opener);
}

/* ------------------------------------------------------------------------- */
/* Shapes, prefixes, names                                                   */
/* ------------------------------------------------------------------------- */

/* "'(' at position N is never closed". */
static int fail_shape_unclosed(pyxbuf__fmt_parser *p, const char *open) {
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, open,
                            "'(' at position %lld is never closed: add ')' after the sub-array "
                            "shape",
                            PYXBUF__POS(p, open));
}

/* One dimension of the shape opened at `open`, at p->s. */
static int parse_dim(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *open) {
    char cb[16];
    const char *at = p->s;
    int c = pyxbuf__fmt_peek(p);
    if (c == 0) return fail_shape_unclosed(p, open);
    if (c == ')' && it->ndim == 0)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, open,
                                "empty sub-array shape '()' at position %lld: give at least one "
                                "dimension",
                                PYXBUF__POS(p, open));
    if (!pyxbuf__fmt_is_digit(c))
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                "%s at position %lld in a sub-array shape: dimensions are "
                                "non-negative integers separated by ','",
                                pyxbuf__fmt_char_desc(c, cb), PYXBUF__POS(p, at));
    int64_t d = 0;
    int rc = parse_number(p, "sub-array dimension", &d);
    if (rc < 0) return rc;
    if (it->ndim == PYXBUF_MAX_NDIM)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                "sub-array dimension at position %lld is one more than %d, the "
                                "most a shape may have",
                                PYXBUF__POS(p, at), PYXBUF_MAX_NDIM);
    if (!PYXBUF__MUL_OK(it->dims_prod, d, &it->dims_prod))
        return pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, at,
                                "sub-array dimension at position %lld makes the shape larger than "
                                "2**63 elements",
                                PYXBUF__POS(p, at));
    if (p->out && !pyxbuf__fmt_dim_push(p->out, d)) return pyxbuf__fmt_fail_nomem(p);
    it->ndim++;
    return 0;
}

/* "(2,3)" at p->s. */
static int parse_dims(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it) {
    const char *open = p->s++;
    it->dims_start = p->out ? p->out->ndims : 0;
    for (;;) {
        skip_ws(p);
        int rc = parse_dim(p, it, open);
        if (rc < 0) return rc;
        skip_ws(p);
        int c = pyxbuf__fmt_peek(p);
        if (c == ')') break;
        if (c == 0) return fail_shape_unclosed(p, open);
        if (c != ',') {
            char cb[16];
            return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                    "%s at position %lld in a sub-array shape: expected ',' or ')'",
                                    pyxbuf__fmt_char_desc(c, cb), PYXBUF__POS(p, p->s));
        }
        p->s++;
    }
    p->s++;
    return 0;
}

/* A byte-order prefix at p->s: sets the mode. `skip_space` skips whitespace
 * after it (struct allows "< i" at the start of an item); another prefix
 * after it is refused. */
static PYXBUF_ALWAYS_INLINE int prefix_at(pyxbuf__fmt_parser *p, bool skip_space) {
    if (PYXBUF_UNLIKELY(p->struct_only)) {
        int rc = pyxbuf__fmt_struct_prefix_check(p);
        if (rc != 0) return rc;
    }
    int c = (unsigned char)*p->s++;
    p->mode = c;
    if (skip_space) skip_ws(p);
    int d = pyxbuf__fmt_peek(p);
    if (PYXBUF_UNLIKELY(pyxbuf__fmt_is_order(d)))
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                "two byte-order prefixes in a row ('%c' then '%c') at position "
                                "%lld: keep one",
                                c, d, PYXBUF__POS(p, p->s));
    return 0;
}

/* An optional prefix slot: sets the mode. */
static inline int prefix_slot(pyxbuf__fmt_parser *p) {
    return pyxbuf__fmt_is_order(pyxbuf__fmt_peek(p)) ? prefix_at(p, false) : 0;
}

/* ":name:" after an item: the name, then no second one. */
static PYXBUF_ALWAYS_INLINE int parse_name(pyxbuf__fmt_parser *p, const char **name_out,
                                           int32_t *len_out) {
    const char *open = p->s++;
    const char *name = p->s;
    while (p->s < p->end && *p->s != ':') p->s++;
    if (p->s == p->end)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, open,
                                "name starting at position %lld has no closing ':'",
                                PYXBUF__POS(p, open));
    if (p->s == name)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, open, "empty name '::' at position %lld",
                                PYXBUF__POS(p, open));
    if (p->s - name > INT32_MAX)
        return pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, open, "name at position %lld is too long",
                                PYXBUF__POS(p, open));
    *name_out = name;
    *len_out = (int32_t)(p->s - name);
    p->s++;
    if (pyxbuf__fmt_peek(p) == ':')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                "second name at position %lld: an item has one name",
                                PYXBUF__POS(p, p->s));
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Items and sequences                                                       */
/* ------------------------------------------------------------------------- */

/* An item that is one type code (not padding) with an optional name, after
 * any prefix: "i", "<d:y:". The common item, so it is laid out and stored
 * straight into its node, without the general item. */
static PYXBUF_ALWAYS_INLINE int parse_plain(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q,
                                            const char *start, int c) {
    int32_t flags =
        (pyxbuf__fmt_codes[c].flags & PYXBUF__CI_COMPLEX_ALIAS) ? PYXBUF_FMTN_COMPLEX : 0;
    int64_t size, align, offset;
    pyxbuf__fmt_scalar_layout(c, p->mode, flags, &size, &align);
    if (p->mode != '@') align = 1;
    p->s++;
    const char *name = NULL;
    int32_t name_len = 0;
    int rc;
    if (pyxbuf__fmt_peek(p) == ':' && (rc = parse_name(p, &name, &name_len)) < 0) return rc;
    if ((rc = place_field(p, q, size, align, start, &offset)) < 0) return rc;
    if (p->out == NULL) return 0;
    int32_t idx = pyxbuf__fmt_node_alloc(p->out);
    if (idx < 0) return pyxbuf__fmt_fail_nomem(p);
    pyxbuf_format_node *nodes = pyxbuf__fmt_nodes(p->out), *n = &nodes[idx];
    pyxbuf__fmt_node_set(n, PYXBUF_FMT_SCALAR, PYXBUF__COMPONENT_CODE(c), p->mode, flags,
                         q->parent, -1, 0, align, size);
    n->offset = offset;
    n->name = name;
    n->name_len = name_len;
    link_node(q, nodes, idx);
    return 0;
}

static PYXBUF_NOINLINE int parse_compound(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q,
                                          const char *start, bool had_prefix);

/* One item: a prefix, then a plain code or what parse_compound reads. */
static int parse_item(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q) {
    const char *start = p->s;
    bool had_prefix = pyxbuf__fmt_is_order(pyxbuf__fmt_peek(p));
    if (had_prefix) {
        int rc = prefix_at(p, true);
        if (rc != 0) return rc < 0 ? rc : 0; /* 1: a struct$ prefix alone */
    }
    int c = pyxbuf__fmt_peek(p);
    /* The code table is 0 for padding 'x' (which merges) and for non-codes. */
    if (PYXBUF_LIKELY(pyxbuf__fmt_code_at[c] != 0 && !p->struct_only))
        return parse_plain(p, q, start, c);
    return parse_compound(p, q, start, had_prefix);
}

/* What may stand before an item's code: a shape (and a prefix after it), a
 * count, '&' (and a prefix after it), 'Z'. */
static int parse_modifiers(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, bool *had_count,
                           bool *had_prefix) {
    int rc;
    if (pyxbuf__fmt_peek(p) == '(') {
        if ((rc = parse_dims(p, it)) < 0) return rc;
        *had_prefix |= pyxbuf__fmt_is_order(pyxbuf__fmt_peek(p));
        if ((rc = prefix_slot(p)) < 0) return rc;
    }
    if (pyxbuf__fmt_is_digit(pyxbuf__fmt_peek(p))) {
        it->count_at = p->s;
        *had_count = true;
        if ((rc = parse_number(p, "repeat count", &it->repeat)) < 0) return rc;
    }
    if (pyxbuf__fmt_peek(p) == '&') {
        it->flags |= PYXBUF_FMTN_POINTER;
        p->s++;
        if ((rc = prefix_slot(p)) < 0) return rc; /* ctypes: "&<i" */
    }
    if (pyxbuf__fmt_peek(p) == 'Z') {
        it->flags |= PYXBUF_FMTN_COMPLEX;
        p->s++;
        int c = pyxbuf__fmt_peek(p);
        const pyxbuf__fmt_code *ci = pyxbuf__fmt_code_of(c);
        if (c != '[' && !(ci && (ci->flags & PYXBUF__CI_COMPLEX)))
            return pyxbuf__fmt_bad_code(p, it, *had_count, *had_prefix);
    }
    return 0;
}

/* The type code `c` at p->s (a complex alias already made its component). */
static int parse_code(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, int c, bool had_count) {
    it->kind = c == 'x' ? PYXBUF_FMT_PADDING : PYXBUF_FMT_SCALAR;
    it->code = c;
    if (c == 'x' && (it->flags & PYXBUF_FMTN_POINTER))
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                "'&' before padding 'x' at position %lld: padding has no address",
                                PYXBUF__POS(p, p->s));
    pyxbuf__fmt_scalar_layout(c, it->mode, it->flags, &it->size, &it->align);
    p->s++;
    /* NumPy pads with runs of 'x': take them at once (a named one ends it). */
    if (c == 'x' && !had_count && it->ndim == 0 && it->flags == 0)
        while (p->s < p->end && *p->s == 'x' && (p->s + 1 == p->end || p->s[1] != ':')) {
            it->repeat++;
            p->s++;
        }
    return 0;
}

static int parse_struct_body(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it);

/* What follows the modifiers: a code, a struct or a custom type. */
static int parse_type(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, bool had_count,
                      bool had_prefix) {
    int c = pyxbuf__fmt_peek(p), rc;
    if (p->struct_only && (rc = pyxbuf__fmt_struct_only_check(p, it, c)) < 0) return rc;
    const pyxbuf__fmt_code *ci = pyxbuf__fmt_code_of(c);
    if (ci && (ci->flags & PYXBUF__CI_COMPLEX_ALIAS)) {
        it->flags |= PYXBUF_FMTN_COMPLEX; /* 'Z' before it was refused */
        c = PYXBUF__COMPONENT_CODE(c);
    }
    if (ci) return parse_code(p, it, c, had_count);
    if (c == 'T') return parse_struct_body(p, it);
    if (c == '[') return parse_custom(p, it);
    return pyxbuf__fmt_bad_code(p, it, had_count, had_prefix);
}

/* The rest of an item: shape, count, '&', 'Z', padding, a struct or a custom
 * type, a name. */
static PYXBUF_NOINLINE int parse_compound(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q,
                                          const char *start, bool had_prefix) {
    pyxbuf__fmt_item it;
    pyxbuf__fmt_item_init(&it, start);
    bool had_count = false;
    int rc = parse_modifiers(p, &it, &had_count, &had_prefix);
    if (rc < 0) return rc;
    it.mode = p->mode;
    if ((rc = parse_type(p, &it, had_count, had_prefix)) < 0) return rc;
    if (pyxbuf__fmt_peek(p) == ':') {
        if (p->struct_only)
            return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                    "name at position %lld in a struct$ payload: the struct "
                                    "module has no names; use buffer$",
                                    PYXBUF__POS(p, p->s));
        if ((rc = parse_name(p, &it.name, &it.name_len)) < 0) return rc;
    }
    return emit_item(p, q, &it);
}

/* Inline here (a struct's every parse), out of line for the builder. */
static PYXBUF_ALWAYS_INLINE int open_struct(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it,
                                            const char *at) {
    if (++p->depth > PYXBUF_FORMAT_MAX_DEPTH)
        return at ? pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                     "T{ at position %lld nests deeper than %d levels",
                                     PYXBUF__POS(p, at), PYXBUF_FORMAT_MAX_DEPTH)
                  : pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, NULL, "structs nest deeper than %d levels",
                                     PYXBUF_FORMAT_MAX_DEPTH);
    it->kind = PYXBUF_FMT_STRUCT;
    p->fflags |= PYXBUF_FMTF_HAS_STRUCT;
    if (p->out && (it->node = pyxbuf__fmt_node_alloc(p->out)) < 0)
        return pyxbuf__fmt_fail_nomem(p);
    return 0;
}

static PYXBUF_ALWAYS_INLINE void close_struct(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it,
                                              const pyxbuf__fmt_seq *q) {
    p->depth--;
    pyxbuf__fmt_seq_close(q, true, &it->size, &it->align);
    it->first_child = q->first;
    it->nchildren = q->count;
    if (it->flags & PYXBUF_FMTN_POINTER) as_pointer(it);
}

int pyxbuf__fmt_open_struct(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it, const char *at) {
    return open_struct(p, it, at);
}

void pyxbuf__fmt_close_struct(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it,
                              const pyxbuf__fmt_seq *q) {
    close_struct(p, it, q);
}

/* "T{...}" at p->s: members are children of a node reserved now. */
static int parse_struct_body(pyxbuf__fmt_parser *p, pyxbuf__fmt_item *it) {
    const char *t = p->s;
    if (p->s + 1 >= p->end || p->s[1] != '{')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, t,
                                "'T' at position %lld must be followed by '{' (structs are "
                                "T{...})",
                                PYXBUF__POS(p, t));
    int rc = open_struct(p, it, t);
    if (rc < 0) return rc;
    p->s += 2;
    pyxbuf__fmt_seq q;
    pyxbuf__fmt_seq_init(&q, it->node);
    if ((rc = parse_sequence(p, &q, '}', t)) < 0) return rc;
    close_struct(p, it, &q);
    return 0;
}

/* Items until `closer` ('}') or the end (closer 0). */
static int parse_sequence(pyxbuf__fmt_parser *p, pyxbuf__fmt_seq *q, int closer,
                          const char *opener) {
    for (;;) {
        skip_ws(p);
        if (p->s == p->end) {
            if (closer == 0) return 0;
            return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, opener,
                                    "T{ at position %lld is never closed: add '}' after its "
                                    "members",
                                    PYXBUF__POS(p, opener));
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
/* Whole formats                                                             */
/* ------------------------------------------------------------------------- */

void pyxbuf__fmt_close_root(pyxbuf__fmt_parser *p, const pyxbuf__fmt_seq *q, int64_t size,
                            int64_t align) {
    pyxbuf_format *f = p->out;
    pyxbuf_format_node *nodes = pyxbuf__fmt_nodes(f);
    pyxbuf__fmt_node_set(&nodes[0], PYXBUF_FMT_ROOT, 0, '@', 0, -1, q->first, q->count, align,
                         size);
    f->itemsize = size;
    f->alignment = align;
    f->flags = p->fflags | (size < 0 ? PYXBUF_FMTF_HAS_OPAQUE : 0);
    if (f->nnodes == 2 && nodes[1].kind == PYXBUF_FMT_SCALAR && nodes[1].repeat == 1 &&
        nodes[1].ndim == 0 && !(nodes[1].flags & PYXBUF_FMTN_POINTER))
        f->flags |= PYXBUF_FMTF_SINGLE_SCALAR;
}

/* Parses [p->s, p->end) as a whole format into p->out (if any). */
static int parse_root(pyxbuf__fmt_parser *p, int64_t *itemsize, int64_t *alignment) {
    int32_t root = -1;
    if (p->out && (root = pyxbuf__fmt_node_alloc(p->out)) < 0) return pyxbuf__fmt_fail_nomem(p);
    pyxbuf__fmt_seq q;
    pyxbuf__fmt_seq_init(&q, root);
    int rc = parse_sequence(p, &q, 0, NULL);
    if (rc < 0) return rc;
    pyxbuf__fmt_seq_close(&q, false, itemsize, alignment);
    if (p->out) pyxbuf__fmt_close_root(p, &q, *itemsize, *alignment);
    return 0;
}

/* Out of line, so that pyxbuf_format_parse's fast path sets up no parser
 * frame. */
PYXBUF_NOINLINE int pyxbuf__fmt_parse_general(const char *fmt, pyxbuf_format *out,
                                              pyxbuf_error *err) {
    pyxbuf__fmt_reset(out, fmt);
    pyxbuf__fmt_parser p;
    pyxbuf__fmt_parser_init(&p, fmt, strlen(fmt), out, err);
    int64_t size, align;
    int rc = parse_root(&p, &size, &align);
    if (rc < 0) pyxbuf_format_clear(out);
    return rc;
}

/* Out of line, so that pyxbuf_format_itemsize's fast path keeps no frame
 * for the parser. */
PYXBUF_NOINLINE int pyxbuf__fmt_itemsize_general(const char *fmt, int64_t *itemsize,
                                                 int64_t *alignment, pyxbuf_error *err) {
    int64_t size, align;
    pyxbuf__fmt_parser p;
    pyxbuf__fmt_parser_init(&p, fmt, strlen(fmt), NULL, err);
    int rc = parse_root(&p, &size, &align);
    if (rc < 0) return rc;
    if (p.opaque_at != NULL && size < 0) return pyxbuf__fmt_fail_opaque(&p);
    *itemsize = size;
    if (alignment) *alignment = align;
    return PYXBUF_OK;
}
