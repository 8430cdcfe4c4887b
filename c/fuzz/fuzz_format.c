/* fuzz_format.c -- the format parser and writer on arbitrary strings.
 *
 * For every input: parsing returns 0 or a documented negative code with a
 * message and a position inside the string; a parsed descriptor is a
 * well-formed tree whose names and custom ids point into the string, whose
 * custom types keep the proposal's character rules (no '$' in a payload); its
 * canonical form parses to the same size and alignment and is a fixed point
 * of the writer; pyxbuf_format_itemsize agrees with the parser; and where
 * Python's struct module accepts the string with a non-zero size, pyxbuf does
 * too, with the same size (struct's grammar is a subset of pyxbuf's). Zero
 * sizes are left out: struct accepts "" and a bare ">" as 0 bytes, pyxbuf
 * refuses a prefix without a type code, and no buffer has 0-byte items. */
#include "fuzz_common.h"

fuzz_outcome_counts fuzz_outcomes;
static PyObject *calcsize; /* struct.calcsize */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_start_python();
    PyObject *mod = PyImport_ImportModule("struct");
    FUZZ_CHECK(mod != NULL, "import struct");
    calcsize = PyObject_GetAttrString(mod, "calcsize");
    Py_DECREF(mod);
    FUZZ_CHECK(calcsize != NULL, "struct.calcsize");
    return 0;
}

static int in_string(const char *p, int32_t n, const char *s, size_t len) {
    return p != NULL && n >= 0 && p >= s && p + n <= s + len;
}

/* Whether the members of node i may lack offsets: it, or a struct around
 * it, has an unknown size, or is the target of a pointer ("&T{...}", whose
 * layout does not enter the item's). */
static int layout_unknown(const pyxbuf_format_node *nodes, int32_t i) {
    for (; i >= 0; i = nodes[i].parent)
        if (nodes[i].itemsize == -1 || (nodes[i].flags & PYXBUF_FMTN_POINTER)) return 1;
    return 0;
}

/* The custom-dtype proposal's character rules, on what the parser accepted:
 * every alternative is "id$payload", the id non-empty, and id and payload
 * printable ASCII without ']', ';' or '$' (so exactly one '$' each). */
static void check_custom_syntax(const pyxbuf_format_node *n, int32_t i) {
    const char *a = n->alternatives, *end = a + n->alternatives_len;
    FUZZ_CHECK(n->alternatives_len > 0, "node %d: empty alternatives", i);
    while (a <= end) {
        const char *alt = a;
        int dollars = 0;
        while (a < end && *a != ';') {
            unsigned char c = (unsigned char)*a;
            if (c == '$') {
                FUZZ_CHECK(a > alt, "node %d: empty custom id", i);
                dollars++;
            } else {
                FUZZ_CHECK(c >= 0x20 && c <= 0x7e && c != ']', "node %d: byte 0x%02X in '%.*s'",
                           i, c, n->alternatives_len, n->alternatives);
            }
            a++;
        }
        FUZZ_CHECK(dollars == 1, "node %d: alternative '%.*s' has %d '$' (a payload may hold none)",
                   i, (int)(a - alt), alt, dollars);
        a++; /* past ';' or the end */
    }
}

static void check_tree(const pyxbuf_format *f, const char *s, size_t len) {
    const pyxbuf_format_node *nodes = pyxbuf_format_nodes(f);
    FUZZ_CHECK(f->nnodes >= 1 && nodes != NULL, "no root node");
    FUZZ_CHECK(f->itemsize >= -1, "itemsize %lld", (long long)f->itemsize);
    FUZZ_CHECK(f->alignment >= 1 && (f->alignment & (f->alignment - 1)) == 0, "alignment %lld",
               (long long)f->alignment);
    FUZZ_CHECK((f->itemsize == -1) == ((f->flags & PYXBUF_FMTF_HAS_OPAQUE) != 0),
               "opaque flag and itemsize -1 disagree");
    for (int32_t i = 0; i < f->nnodes; i++) {
        const pyxbuf_format_node *n = &nodes[i];
        FUZZ_CHECK(i == 0 ? n->parent == -1 : (n->parent >= 0 && n->parent < i),
                   "node %d has parent %d", i, n->parent);
        FUZZ_CHECK(n->next == -1 || (n->next > i && n->next < f->nnodes), "node %d next %d", i,
                   n->next);
        FUZZ_CHECK(n->first_child == -1 || n->nchildren == 0 ||
                       (n->first_child > i && n->first_child < f->nnodes),
                   "node %d first_child %d", i, n->first_child);
        FUZZ_CHECK(n->ndim >= 0 && n->ndim <= PYXBUF_MAX_NDIM, "node %d ndim %d", i, n->ndim);
        FUZZ_CHECK(n->ndim == 0 || (n->dims_start >= 0 && n->dims_start + n->ndim <= f->ndims),
                   "node %d dims [%d, +%d) of %d", i, n->dims_start, n->ndim, f->ndims);
        FUZZ_CHECK(n->name == NULL || in_string(n->name, n->name_len, s, len),
                   "node %d name outside the string", i);
        FUZZ_CHECK(n->custom == NULL || in_string(n->custom, n->custom_len, s, len),
                   "node %d custom id outside the string", i);
        FUZZ_CHECK(n->alternatives == NULL || in_string(n->alternatives, n->alternatives_len, s, len),
                   "node %d alternatives outside the string", i);
        if (n->kind == PYXBUF_FMT_CUSTOM) check_custom_syntax(n, i);
        FUZZ_CHECK(n->itemsize >= -1 && n->nbytes >= -1 && n->offset >= -1,
                   "node %d sizes %lld/%lld at %lld", i, (long long)n->itemsize,
                   (long long)n->nbytes, (long long)n->offset);
        FUZZ_CHECK(n->offset >= 0 || layout_unknown(nodes, n->parent),
                   "node %d has no offset in a struct of known layout", i);
        FUZZ_CHECK(f->itemsize == -1 || n->parent != 0 || n->nbytes == -1 ||
                       n->offset + n->nbytes <= f->itemsize,
                   "node %d [%lld, +%lld) outside the item of %lld", i, (long long)n->offset,
                   (long long)n->nbytes, (long long)f->itemsize);
    }
}

/* The canonical string of f (malloc'd), checked to be complete. */
static char *canonical(const pyxbuf_format *f) {
    size_t need = 0;
    pyxbuf_error err;
    int rc = pyxbuf_format_write(f, NULL, 0, &need, &err);
    FUZZ_CHECK(rc == PYXBUF_ENOSPACE || rc == 0, "write size: %d %s", rc, err.message);
    char *out = malloc(need + 1);
    FUZZ_CHECK(out != NULL, "out of memory");
    size_t len = 0;
    rc = pyxbuf_format_write(f, out, need + 1, &len, &err);
    FUZZ_CHECK(rc == 0 && len == need && strlen(out) == len, "write: %d %s", rc, err.message);
    return out;
}

static void check_round_trip(const pyxbuf_format *f, const char *s) {
    char *once = canonical(f);
    pyxbuf_format g;
    pyxbuf_error err;
    int rc = pyxbuf_format_parse(once, &g, &err);
    FUZZ_CHECK(rc == 0, "canonical '%s' of '%s' does not parse: %s", once, s, err.message);
    FUZZ_CHECK(g.itemsize == f->itemsize && g.alignment == f->alignment,
               "'%s' is %lld/%lld bytes, its canonical '%s' %lld/%lld", s, (long long)f->itemsize,
               (long long)f->alignment, once, (long long)g.itemsize, (long long)g.alignment);
    char *twice = canonical(&g);
    FUZZ_CHECK(strcmp(once, twice) == 0, "canonical form not a fixed point: '%s' -> '%s'", once,
               twice);
    pyxbuf_format_clear(&g);
    free(once);
    free(twice);
}

/* struct.calcsize(s), or -1 when struct refuses it. */
static int64_t struct_size(const char *s, size_t len) {
    PyObject *arg = PyBytes_FromStringAndSize(s, (Py_ssize_t)len);
    FUZZ_CHECK(arg != NULL, "bytes");
    PyObject *r = PyObject_CallOneArg(calcsize, arg);
    Py_DECREF(arg);
    int64_t size = -1;
    if (r != NULL) {
        size = PyLong_AsLongLong(r);
        Py_DECREF(r);
    }
    PyErr_Clear(); /* struct.error, or OverflowError for a huge size */
    return size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0; /* longer strings add time, not paths */
    char *s = malloc(size + 1);
    FUZZ_CHECK(s != NULL, "out of memory");
    memcpy(s, data, size);
    s[size] = '\0';
    size_t len = strlen(s); /* an embedded NUL ends the format, as in C */

    pyxbuf_format f;
    pyxbuf_error err;
    memset(&err, 0, sizeof err);
    int rc = pyxbuf_format_parse(s, &f, &err);
    int64_t parsed = rc == 0 ? f.itemsize : -2, itemsize = 0;
    pyxbuf_error err2;
    int rc2 = pyxbuf_format_itemsize(s, &itemsize, NULL, &err2);
    if (rc < 0) {
        fuzz_outcomes.refused++;
        FUZZ_CHECK(rc >= PYXBUF_EDRIVER && rc == err.code, "code %d, error says %d", rc, err.code);
        FUZZ_CHECK(err.message[0] != '\0', "refusal without a message");
        FUZZ_CHECK(err.position >= -1 && err.position <= (int64_t)len, "position %lld of %zu",
                   (long long)err.position, len);
        FUZZ_CHECK(f.nnodes == 0 && f.heap_nodes == NULL && f.heap_dims == NULL,
                   "a failed parse left a descriptor behind");
        FUZZ_CHECK(rc2 < 0, "itemsize accepts '%s' that parse refuses (%s)", s, err.message);
    } else {
        fuzz_outcomes.accepted++;
        check_tree(&f, s, len);
        check_round_trip(&f, s);
        if (f.itemsize >= 0)
            FUZZ_CHECK(rc2 == 0 && itemsize == f.itemsize, "itemsize %lld, parse %lld",
                       (long long)itemsize, (long long)f.itemsize);
        else
            FUZZ_CHECK(rc2 == PYXBUF_EUNSUPPORTED, "opaque format: itemsize gave %d", rc2);
        pyxbuf_format_clear(&f);
    }

    int64_t expected = struct_size(s, len);
    if (expected > 0) {
        FUZZ_CHECK(rc == 0 && parsed == expected,
                   "struct.calcsize('%s') = %lld; pyxbuf: %d, %lld (%s)", s, (long long)expected,
                   rc, (long long)parsed, rc < 0 ? err.message : "");
        fuzz_outcomes.compared++;
    }
    FUZZ_CHECK(!PyErr_Occurred(), "exception left set");
    free(s);
    return 0;
}
