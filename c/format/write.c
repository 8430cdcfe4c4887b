/* write.c -- formats written and built: the string builder every format
 * string is written with (here and by bridges/cai.c), pyxbuf_format_write's
 * canonical form of a node tree, and the builder (pyxbuf_format_add_*), whose
 * finish step lays its nodes out through the parser's code (items.c), so
 * built and parsed formats cannot disagree. */
#include "format/format.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------- */
/* The string builder                                                        */
/* ------------------------------------------------------------------------- */

void pyxbuf__fmtbuf_init(pyxbuf__fmtbuf *b) {
    b->p = b->local;
    b->len = 0;
    b->cap = sizeof b->local;
    b->grows = true;
    b->failed = false;
    b->local[0] = '\0';
}

/* Into the caller's `buf` of `cap` bytes: what does not fit is counted. */
static void fmtbuf_fixed(pyxbuf__fmtbuf *b, char *buf, size_t cap) {
    b->p = buf;
    b->len = 0;
    b->cap = cap;
    b->grows = false;
    b->failed = false;
}

void pyxbuf__fmtbuf_free(pyxbuf__fmtbuf *b) {
    if (b->p != b->local) free(b->p);
    pyxbuf__fmtbuf_init(b);
}

/* Room in a growing buffer for `n` more bytes and the NUL; false (and
 * `failed` set) once out of memory. */
static bool make_room(pyxbuf__fmtbuf *b, size_t n) {
    size_t need;
    if (b->failed || !PYXBUF__ADD_OK(b->len, n, &need) || !PYXBUF__ADD_OK(need, 1, &need)) {
        b->failed = true;
        return false;
    }
    if (need <= b->cap) return true;
    size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
    char *p = b->p == b->local ? malloc(cap) : realloc(b->p, cap);
    if (p == NULL) {
        b->failed = true;
        return false;
    }
    if (b->p == b->local) memcpy(p, b->local, b->len + 1);
    b->p = p;
    b->cap = cap;
    return true;
}

void pyxbuf__fmtbuf_put(pyxbuf__fmtbuf *b, const char *s, size_t n) {
    if (b->grows) {
        if (!make_room(b, n)) return;
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = '\0';
        return;
    }
    if (b->len < b->cap && n > 0) {
        size_t room = b->cap - b->len;
        memcpy(b->p + b->len, s, n < room ? n : room);
    }
    b->len += n;
}

void pyxbuf__fmtbuf_puts(pyxbuf__fmtbuf *b, const char *s) { pyxbuf__fmtbuf_put(b, s, strlen(s)); }

void pyxbuf__fmtbuf_char(pyxbuf__fmtbuf *b, char c) { pyxbuf__fmtbuf_put(b, &c, 1); }

void pyxbuf__fmtbuf_int(pyxbuf__fmtbuf *b, int64_t v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    pyxbuf__fmtbuf_put(b, tmp, (size_t)n);
}

void pyxbuf__fmtbuf_shape(pyxbuf__fmtbuf *b, const int64_t *dims, int32_t ndim) {
    pyxbuf__fmtbuf_char(b, '(');
    for (int32_t d = 0; d < ndim; d++) {
        if (d) pyxbuf__fmtbuf_char(b, ',');
        pyxbuf__fmtbuf_int(b, dims[d]);
    }
    pyxbuf__fmtbuf_char(b, ')');
}

void pyxbuf__fmtbuf_name(pyxbuf__fmtbuf *b, const char *name, size_t len) {
    pyxbuf__fmtbuf_char(b, ':');
    pyxbuf__fmtbuf_put(b, name, len);
    pyxbuf__fmtbuf_char(b, ':');
}

/* ------------------------------------------------------------------------- */
/* The canonical form                                                        */
/* ------------------------------------------------------------------------- */

static int write_seq(pyxbuf__fmtbuf *w, const pyxbuf_format *f, int32_t parent, int *cur,
                     bool in_struct, int depth, pyxbuf_error *err);

/* What node `n` is: its code, T{members}, or [alternatives]. */
static int write_type(pyxbuf__fmtbuf *w, const pyxbuf_format *f, const pyxbuf_format_node *n,
                      int *cur, bool *force, int depth, pyxbuf_error *err) {
    switch (n->kind) {
    case PYXBUF_FMT_SCALAR:
    case PYXBUF_FMT_PADDING:
        pyxbuf__fmtbuf_char(w, n->kind == PYXBUF_FMT_PADDING ? 'x' : (char)n->code);
        return 0;
    case PYXBUF_FMT_STRUCT: {
        pyxbuf__fmtbuf_put(w, "T{", 2);
        int rc = write_seq(w, f, (int32_t)(n - pyxbuf__fmt_nodes(f)), cur, true, depth + 1, err);
        if (rc < 0) return rc;
        pyxbuf__fmtbuf_char(w, '}');
        /* Make the next item's mode explicit for readers that restore it at '}'. */
        if (*cur != n->byte_order) *force = true;
        return 0;
    }
    case PYXBUF_FMT_CUSTOM:
        pyxbuf__fmtbuf_char(w, '[');
        pyxbuf__fmtbuf_put(w, n->alternatives, (size_t)n->alternatives_len);
        pyxbuf__fmtbuf_char(w, ']');
        return 0;
    default:
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_format_write: node of unknown kind %d", (int)n->kind);
    }
}

static int write_node(pyxbuf__fmtbuf *w, const pyxbuf_format *f, const pyxbuf_format_node *n,
                      int *cur, bool *force, int depth, pyxbuf_error *err) {
    if (!pyxbuf__fmt_is_order(n->byte_order))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_format_write: node %d has no byte order; call "
                             "pyxbuf_format_finish before writing a built format",
                             (int)(n - pyxbuf__fmt_nodes(f)));
    if (*force || n->byte_order != *cur) pyxbuf__fmtbuf_char(w, (char)n->byte_order);
    *cur = n->byte_order;
    *force = false;
    if (n->ndim > 0) pyxbuf__fmtbuf_shape(w, pyxbuf_format_dims(f) + n->dims_start, n->ndim);
    if (n->repeat != 1) pyxbuf__fmtbuf_int(w, n->repeat);
    if (n->flags & PYXBUF_FMTN_POINTER) pyxbuf__fmtbuf_char(w, '&');
    if (n->flags & PYXBUF_FMTN_COMPLEX) pyxbuf__fmtbuf_char(w, 'Z');
    int rc = write_type(w, f, n, cur, force, depth, err);
    if (rc < 0) return rc;
    if (n->name) pyxbuf__fmtbuf_name(w, n->name, (size_t)n->name_len);
    return 0;
}

static int write_seq(pyxbuf__fmtbuf *w, const pyxbuf_format *f, int32_t parent, int *cur,
                     bool in_struct, int depth, pyxbuf_error *err) {
    const pyxbuf_format_node *nodes = pyxbuf__fmt_nodes(f);
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
    pyxbuf__fmtbuf w;
    fmtbuf_fixed(&w, buf, cap);
    int cur = '@';
    if (f->nnodes > 0) {
        int rc = write_seq(&w, f, 0, &cur, false, 0, err);
        if (rc < 0) return rc;
    }
    if (len) *len = w.len;
    if (w.len >= cap) {
        if (cap > 0) buf[0] = '\0';
        return pyxbuf__error(err, PYXBUF_ENOSPACE, -1,
                             "pyxbuf_format_write: the format needs %zu %s plus the NUL, the "
                             "buffer holds %zu",
                             w.len, PYXBUF__PLURAL(w.len, "byte", "bytes"), cap);
    }
    buf[w.len] = '\0';
    return PYXBUF_OK;
}

/* ------------------------------------------------------------------------- */
/* The builder                                                               */
/* ------------------------------------------------------------------------- */

void pyxbuf_format_init(pyxbuf_format *f) {
    pyxbuf__fmt_reset(f, NULL);
    f->nnodes = 1;
    pyxbuf__fmt_node_set(&f->inline_nodes[0], PYXBUF_FMT_ROOT, 0, '@', 0, -1, -1, 0, 1, 0);
}

/* Whether a member's byte order, repeat, shape and name can be added. */
static bool member_ok(int32_t byte_order, int64_t repeat, int32_t ndim, const int64_t *dims,
                      const char *name, size_t name_len) {
    if ((byte_order != 0 && !pyxbuf__fmt_is_order(byte_order)) || repeat < 0 || ndim < 0 ||
        ndim > PYXBUF_MAX_NDIM || (ndim > 0 && dims == NULL))
        return false;
    for (int32_t d = 0; d < ndim; d++)
        if (dims[d] < 0) return false;
    return !name || (name_len > 0 && name_len <= INT32_MAX && !memchr(name, ':', name_len));
}

/* Links node `idx` as the last child of `parent`. */
static void append_child(pyxbuf_format_node *nodes, int32_t parent, int32_t idx) {
    pyxbuf_format_node *par = &nodes[parent];
    if (par->first_child < 0) {
        par->first_child = idx;
    } else {
        int32_t last = par->first_child;
        while (nodes[last].next >= 0) last = nodes[last].next;
        nodes[last].next = idx;
    }
    par->nchildren++;
}

/* A new child of `parent`, linked last. Returns its index or a negative code. */
static int add_node(pyxbuf_format *f, int32_t parent, int32_t kind, int32_t byte_order,
                    int64_t repeat, int32_t ndim, const int64_t *dims, const char *name) {
    if (f == NULL || parent < 0 || parent >= f->nnodes) return PYXBUF_EINVAL;
    pyxbuf_format_node *nodes = pyxbuf__fmt_nodes(f);
    if (nodes[parent].kind != PYXBUF_FMT_ROOT && nodes[parent].kind != PYXBUF_FMT_STRUCT)
        return PYXBUF_EINVAL;
    size_t name_len = name ? strlen(name) : 0;
    if (!member_ok(byte_order, repeat, ndim, dims, name, name_len)) return PYXBUF_EINVAL;
    int32_t dims_start = f->ndims;
    for (int32_t d = 0; d < ndim; d++)
        if (!pyxbuf__fmt_dim_push(f, dims[d])) return PYXBUF_ENOMEM;
    int32_t idx = pyxbuf__fmt_node_alloc(f);
    if (idx < 0) return PYXBUF_ENOMEM;
    nodes = pyxbuf__fmt_nodes(f);
    nodes[idx] = (pyxbuf_format_node){
        .kind = kind, .byte_order = byte_order, .parent = parent, .next = -1,
        .first_child = -1, .ndim = ndim, .dims_start = ndim ? dims_start : 0, .alignment = 1,
        .repeat = repeat, .offset = -1, .itemsize = -1, .nbytes = -1, .name = name,
        .name_len = (int32_t)name_len};
    append_child(nodes, parent, idx);
    return idx;
}

int pyxbuf_format_add_scalar(pyxbuf_format *f, int32_t parent, int32_t code, int32_t byte_order,
                             int32_t node_flags, int64_t repeat, int32_t ndim,
                             const int64_t *dims, const char *name) {
    const pyxbuf__fmt_code *ci = pyxbuf__fmt_code_of(code);
    if (ci && (ci->flags & PYXBUF__CI_COMPLEX_ALIAS)) {
        if (node_flags & PYXBUF_FMTN_COMPLEX) return PYXBUF_EINVAL;
        node_flags |= PYXBUF_FMTN_COMPLEX;
        code = PYXBUF__COMPONENT_CODE(code);
        ci = pyxbuf__fmt_code_of(code);
    }
    if (ci == NULL || (node_flags & ~(PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER)) ||
        ((node_flags & PYXBUF_FMTN_COMPLEX) && !(ci->flags & PYXBUF__CI_COMPLEX)) ||
        (code == 'x' && node_flags))
        return PYXBUF_EINVAL;
    int idx = add_node(f, parent, code == 'x' ? PYXBUF_FMT_PADDING : PYXBUF_FMT_SCALAR,
                       byte_order, repeat, ndim, dims, name);
    if (idx < 0) return idx;
    pyxbuf__fmt_nodes(f)[idx].code = code;
    pyxbuf__fmt_nodes(f)[idx].flags = node_flags;
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
    pyxbuf_format_node *node = &pyxbuf__fmt_nodes(f)[idx];
    node->flags = node_flags;
    node->alternatives = alternatives;
    node->alternatives_len = (int32_t)n;
    return idx;
}

int pyxbuf_format_add_padding(pyxbuf_format *f, int32_t parent, int64_t nbytes) {
    return pyxbuf_format_add_scalar(f, parent, 'x', 0, 0, nbytes, 0, NULL, NULL);
}

/* The builder's node `sn` of `src` is copied into p->out through the
 * parser's layout code, its subtree in pre-order. */

/* Its shape, into p->out's dimensions. */
static int build_dims(pyxbuf__fmt_parser *p, const pyxbuf_format *src,
                      const pyxbuf_format_node *sn, pyxbuf__fmt_item *it) {
    it->dims_start = p->out->ndims;
    it->ndim = sn->ndim;
    for (int32_t d = 0; d < sn->ndim; d++) {
        int64_t dim = pyxbuf_format_dims(src)[sn->dims_start + d];
        if (!PYXBUF__MUL_OK(it->dims_prod, dim, &it->dims_prod))
            return pyxbuf__fmt_fail(p, PYXBUF_EOVERFLOW, NULL,
                                    "a sub-array shape has more than 2**63 elements");
        if (!pyxbuf__fmt_dim_push(p->out, dim)) return pyxbuf__fmt_fail_nomem(p);
    }
    return 0;
}

static int build_seq(pyxbuf__fmt_parser *p, const pyxbuf_format *src, int32_t parent,
                     pyxbuf__fmt_seq *q, int mode);

/* A struct: its members, node `si` of `src`. */
static int build_struct(pyxbuf__fmt_parser *p, const pyxbuf_format *src, int32_t si,
                        pyxbuf__fmt_item *it) {
    int rc = pyxbuf__fmt_open_struct(p, it, NULL);
    if (rc < 0) return rc;
    pyxbuf__fmt_seq inner;
    pyxbuf__fmt_seq_init(&inner, it->node);
    if ((rc = build_seq(p, src, si, &inner, it->mode)) < 0) return rc;
    pyxbuf__fmt_close_struct(p, it, &inner);
    return 0;
}

/* A custom type: its alternatives, parsed as in a format; messages quote
 * them, positions are within them. */
static int build_custom(pyxbuf__fmt_parser *p, const pyxbuf_format_node *sn,
                        pyxbuf__fmt_item *it) {
    pyxbuf__fmt_parser sub = *p;
    sub.src = sub.s = sub.seq_start = sn->alternatives;
    sub.src_end = sub.end = sn->alternatives + sn->alternatives_len;
    sub.label = "custom type";
    if ((it->node = pyxbuf__fmt_node_alloc(p->out)) < 0) return pyxbuf__fmt_fail_nomem(p);
    int rc = pyxbuf__fmt_parse_alternatives(&sub, it, sub.s, false);
    if (rc < 0) return rc;
    p->fflags = sub.fflags;
    return pyxbuf__fmt_custom_size(p, it, NULL);
}

/* Node `si` of `src`; `parent_mode` is the mode of nodes added with byte
 * order 0. */
static int build_node(pyxbuf__fmt_parser *p, const pyxbuf_format *src, int32_t si,
                      pyxbuf__fmt_seq *q, int parent_mode) {
    const pyxbuf_format_node *sn = &pyxbuf__fmt_nodes(src)[si];
    pyxbuf__fmt_item it;
    pyxbuf__fmt_item_init(&it, NULL);
    it.kind = sn->kind;
    it.code = sn->code;
    it.flags = sn->flags & (PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER);
    it.mode = sn->byte_order ? sn->byte_order : parent_mode;
    it.repeat = sn->repeat;
    it.name = sn->name;
    it.name_len = sn->name_len;
    int rc = build_dims(p, src, sn, &it);
    if (rc < 0) return rc;
    switch (sn->kind) {
    case PYXBUF_FMT_SCALAR:
    case PYXBUF_FMT_PADDING:
        pyxbuf__fmt_scalar_layout(sn->code, it.mode, it.flags, &it.size, &it.align);
        break;
    case PYXBUF_FMT_STRUCT: rc = build_struct(p, src, si, &it); break;
    case PYXBUF_FMT_CUSTOM: rc = build_custom(p, sn, &it); break;
    default:
        return pyxbuf__fmt_fail(p, PYXBUF_EINVAL, NULL, "node %d has kind %d, not a member kind",
                                (int)si, (int)sn->kind);
    }
    return rc < 0 ? rc : pyxbuf__fmt_emit_item(p, q, &it);
}

static int build_seq(pyxbuf__fmt_parser *p, const pyxbuf_format *src, int32_t parent,
                     pyxbuf__fmt_seq *q, int mode) {
    const pyxbuf_format_node *nodes = pyxbuf__fmt_nodes(src);
    for (int32_t i = nodes[parent].first_child; i >= 0; i = nodes[i].next) {
        if (i >= src->nnodes)
            return pyxbuf__fmt_fail(p, PYXBUF_EINVAL, NULL, "corrupt node links");
        int rc = build_node(p, src, i, q, mode);
        if (rc < 0) return rc;
    }
    return 0;
}

int pyxbuf_format_finish(pyxbuf_format *f, pyxbuf_error *err) {
    if (f == NULL || f->nnodes < 1 || pyxbuf__fmt_nodes(f)[0].kind != PYXBUF_FMT_ROOT)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_format_finish: not a format started with pyxbuf_format_init");
    pyxbuf_format built;
    pyxbuf__fmt_reset(&built, NULL);
    pyxbuf__fmt_parser p;
    pyxbuf__fmt_parser_init(&p, "", 0, &built, err);
    p.label = "built format";
    pyxbuf__fmt_seq q;
    pyxbuf__fmt_seq_init(&q, pyxbuf__fmt_node_alloc(&built));
    int rc = build_seq(&p, f, 0, &q, '@');
    if (rc < 0) {
        pyxbuf_format_clear(&built);
        return rc;
    }
    int64_t size, align;
    pyxbuf__fmt_seq_close(&q, false, &size, &align);
    pyxbuf__fmt_close_root(&p, &q, size, align);
    pyxbuf_format_clear(f);
    *f = built;
    return PYXBUF_OK;
}
