/* test_format.c -- the format-string parser, writer, builder and registry. */
#include "pyxbuf.h"

#include <pthread.h>

#include "format/codes.h"
#include "testing.h"

/* The node at `i` of `f`. */
static const pyxbuf_format_node *node(const pyxbuf_format *f, int32_t i) {
    return &pyxbuf_format_nodes(f)[i];
}

/* 1 if node `n`'s name is `name`. */
static int name_is(const pyxbuf_format_node *n, const char *name) {
    if (name == NULL) return n->name == NULL;
    return n->name != NULL && (size_t)n->name_len == strlen(name) &&
           memcmp(n->name, name, strlen(name)) == 0;
}

static int span_is(const char *s, int32_t len, const char *want) {
    return s != NULL && (size_t)len == strlen(want) && memcmp(s, want, (size_t)len) == 0;
}

/* Parse `fmt`, expecting success. */
static int parse_ok(const char *fmt, pyxbuf_format *f) {
    pyxbuf_error err;
    int rc = pyxbuf_format_parse(fmt, f, &err);
    if (rc != 0) fprintf(stderr, "parse of '%s' failed: %s\n", fmt, err.message);
    CHECK_INT_EQ(rc, 0);
    return rc;
}

#define SZ(t) (int64_t) sizeof(t)
#define AL(t) (int64_t) _Alignof(t)

typedef struct valid_case {
    const char *fmt;
    int64_t itemsize, alignment;
} valid_case;

TEST_CASE(valid_formats) {
    const valid_case cases[] = {
        {"B", 1, 1},
        {NULL, 1, 1}, /* NULL means "B" */
        {"", 0, 1},
        {"   ", 0, 1},
        {"f", 4, AL(float)},
        {"<d", 8, 1},
        {"Zf", 8, AL(float)},
        {"Zd", 16, AL(double)},
        {"Zg", 2 * SZ(long double), AL(long double)},
        {"g", SZ(long double), AL(long double)},
        {"<g", SZ(long double), 1},
        {"ix", 5, 4},
        {"hd", 16, 8},
        {"ii0l", 8, AL(long)},
        {"c0i", 4, 4},
        {"c0s", 1, 1},
        {"0s", 0, 1},
        {"5s", 5, 1},
        {"3p", 3, 1},
        {"l", SZ(long), AL(long)},
        {"<l", 4, 1},
        {"=L", 4, 1},
        {"!q", 8, 1},
        {">e", 2, 1},
        {"e", 2, AL(short)},
        {"n", SZ(Py_ssize_t), AL(Py_ssize_t)},
        {"<n", SZ(Py_ssize_t), 1},
        {"<P", SZ(void *), 1},
        {"P", SZ(void *), AL(void *)},
        {"O", SZ(PyObject *), AL(PyObject *)},
        {"w", 4, 4},
        {"u", 2, 2},
        {"<u", 2, 1},
        {"3w", 12, 4},
        {"?", SZ(_Bool), AL(_Bool)},
        {"^ih", SZ(int) + SZ(short), 1},
        {"^bd", 9, 1},
        {"bd", 16, 8},
        {"< i", 4, 1},
        {"i\t\nh", 6, 4},
        {"T{ix}", 8, 4},
        {"T{i:a:B:b:}", 8, 4},
        {"T{=i:a:B:b:}", 5, 1},
        {"=T{@i:a:B:b:}", 8, 4}, /* members, not the mode at T{, align a struct */
        {">q:a:T{@q:f0:B:f1:}:b:", 24, 8},
        {"T{@b:a:=h:b:}", 3, 1},
        {"T{>q:a:@H:b:=f:c:}", 14, 2},
        {"T{T{B:x:xxxxxxxd:y:}:n:h:z:}", 24, 8},
        {"T{i:f0:=d:f1:}", 12, 4},
        {"T{T{=i:x:B:y:}:n:h:z:}", 7, 1}, /* NumPy: the '=' lasts past '}' */
        {"T{}", 0, 1},
        {"bT{d}", 16, 8},
        {"b<T{d}", 9, 1},
        {"2T{ix}", 16, 4},
        {"(2,3)f", 24, 4},
        {"(2)<3f", 24, 1},
        {"<(2)3f", 24, 1},
        {"(2, 3)f", 24, 4},
        {"(3)T{bd}", 48, 8},
        {"&d", SZ(void *), AL(void *)},
        {"&<i", SZ(void *), 1},
        {"b&d", 2 * SZ(void *), AL(void *)},
        {"T{<i:a:<d:b:(3)<c:c:}", 15, 1}, /* ctypes < 3.12: 24 with its padding */
        {"T{<i:a:4x<d:b:(3)<c:c:5x}", 24, 1}, /* ctypes >= 3.12 writes it */
        {"[ml_dtypes$bfloat16]", 2, 2},
        {"Z[ml_dtypes$bfloat16]", 4, 2},
        {"b[ml_dtypes$bfloat16]", 4, 2},
        {"<b[ml_dtypes$bfloat16]", 3, 1},
        {"[ml_dtypes$float8_e4m3fn]", 1, 1},
        {"[ml_dtypes$int4]", 1, 1},
        {"[numpy$x;ml_dtypes$bfloat16]", 2, 2},
        {"[struct$<iq]", 12, 1},
        {"[struct$iq]", 16, 8},
        {"[struct$]", 0, 1},
        {"[struct$<]", 0, 1},
        {"[struct$Zf]", 8, 4},
        {"b[struct$iq]", 24, 8},
        {"[buffer$T{i:a:B:b:}]", 8, 4},
        {"[buffer$(2)Zd]", 32, 8},
        {"&[numpy$opaque]", SZ(void *), AL(void *)},
        {"3[ml_dtypes$bfloat16]:bf:", 6, 2},
        {"i:x:d:y:", 16, 8},
        {"xxxx", 4, 1},
        {"4xi", 8, 4},
        /* NumPy exports (0,)-shaped fields as "(0)I:a:": zero bytes. */
        {"(0)f", 0, 4},
        {"(2,0)d", 0, 8},
        {"T{(0)I:a:}", 0, 4},
        {"T{(0)I:a:f:b:}", 4, 4},
        /* struct's complex codes (CPython 3.14), the same items as Zf/Zd. */
        {"F", 8, AL(float)},
        {"D", 16, AL(double)},
        {"<F", 8, 1},
        {">D", 16, 1},
        {"bD", 24, AL(double)},
        /* ctypes repeats field names: names are labels, the layout is positional. */
        {"T{<i:a:<i:a:}", 8, 1},
        /* the proposal's fallback form; later alternatives are fully checked */
        {"[mymod$x;buffer$T{d:X:d:Y:}]", 16, 8},
        /* a payload is a format of its own: the outer '<' places the item
         * (packed), it does not reach inside */
        {"<[struct$>i]", 4, 1},
        {"<[struct$i]", 4, 1},
        {"[struct$i]", 4, 4},
        {"[buffer$ii]", 8, 4},
        {"<[buffer$ii]", 8, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const valid_case *c = &cases[i];
        pyxbuf_format f;
        pyxbuf_error err;
        int rc = pyxbuf_format_parse(c->fmt, &f, &err);
        if (rc != 0) {
            fprintf(stderr, "'%s': %s\n", c->fmt ? c->fmt : "(null)", err.message);
            CHECK_INT_EQ(rc, 0);
            continue;
        }
        if (f.itemsize != c->itemsize || f.alignment != c->alignment)
            fprintf(stderr, "'%s': itemsize %lld alignment %lld\n", c->fmt ? c->fmt : "(null)",
                    (long long)f.itemsize, (long long)f.alignment);
        CHECK_INT_EQ(f.itemsize, c->itemsize);
        CHECK_INT_EQ(f.alignment, c->alignment);
        CHECK_INT_EQ(node(&f, 0)->itemsize, c->itemsize);
        int64_t size = -2, align = -2;
        CHECK_INT_EQ(pyxbuf_format_itemsize(c->fmt, &size, &align, &err), 0);
        CHECK_INT_EQ(size, c->itemsize);
        CHECK_INT_EQ(align, c->alignment);
        pyxbuf_format_clear(&f);
    }
}

TEST_CASE(single_items_do_not_allocate) {
    const char *fmts[] = {"f", "<d", "B", "Zf", ">Zd", "?", "i:x:", "3f", "(2,3)f", "T{ix}",
                          "ix", "[ml_dtypes$bfloat16]", "  f  ", "T{i:a:B:b:}", "(1,2,3,4)d"};
    for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++) {
        pyxbuf_format f;
        if (parse_ok(fmts[i], &f) != 0) continue;
        /* no nodes of its own on the heap: inline, or the shared ones */
        CHECK(f.heap_nodes == NULL || f.node_capacity == 0);
        CHECK(f.heap_dims == NULL);
        CHECK(f.source == fmts[i]);
        pyxbuf_format_clear(&f);
    }
    pyxbuf_format f;
    if (parse_ok("<Zd", &f) == 0) {
        CHECK_INT_EQ(f.nnodes, 2);
        CHECK_INT_EQ(f.flags, PYXBUF_FMTF_SINGLE_SCALAR);
        CHECK_INT_EQ(node(&f, 1)->kind, PYXBUF_FMT_SCALAR);
        CHECK_INT_EQ(node(&f, 1)->code, 'd');
        CHECK_INT_EQ(node(&f, 1)->byte_order, '<');
        CHECK_INT_EQ(node(&f, 1)->flags, PYXBUF_FMTN_COMPLEX);
        CHECK_INT_EQ(node(&f, 1)->itemsize, 16);
        CHECK_INT_EQ(node(&f, 0)->first_child, 1);
        CHECK_INT_EQ(node(&f, 1)->parent, 0);
    }
    /* A relocated copy of a heap-free format reads the same. */
    pyxbuf_format moved = f;
    CHECK(pyxbuf_format_nodes(&moved) == pyxbuf_format_nodes(&f));
    CHECK_INT_EQ(node(&moved, 1)->code, 'd');
    pyxbuf_format_clear(&moved);
    CHECK(moved.heap_nodes == NULL && moved.nnodes == 0);
    CHECK(pyxbuf_format_nodes(&moved) == moved.inline_nodes);
    if (parse_ok(" f", &f) == 0) { /* the parser's own path: inline nodes */
        moved = f;
        CHECK(pyxbuf_format_nodes(&moved) == moved.inline_nodes);
        CHECK_INT_EQ(node(&moved, 1)->code, 'f');
        pyxbuf_format_clear(&moved);
    }
}

/* Compares every field of two nodes; says which differs. */
static void check_same_node(const char *fmt, int32_t i, const pyxbuf_format_node *a,
                            const pyxbuf_format_node *b) {
#define SAME(field)                                                                    \
    if (a->field != b->field) {                                                         \
        fprintf(stderr, "format '%s' node %d: " #field " %lld (shared) vs %lld (parser)\n", \
                fmt, (int)i, (long long)a->field, (long long)b->field);              \
        CHECK(a->field == b->field);                                                    \
    }
    SAME(kind) SAME(code) SAME(byte_order) SAME(flags) SAME(parent) SAME(next)
    SAME(first_child) SAME(nchildren) SAME(ndim) SAME(dims_start) SAME(alignment)
    SAME(repeat) SAME(offset) SAME(itemsize) SAME(nbytes) SAME(name_len)
    SAME(custom_id_len) SAME(custom_len) SAME(alternatives_len)
#undef SAME
    CHECK(a->name == NULL && b->name == NULL && a->custom == NULL && b->custom == NULL &&
          a->alternatives == NULL && b->alternatives == NULL);
}

/* The shared single-scalar nodes are exactly what the general parser builds
 * for the same item, in every mode, for every code, with and without 'Z'. */
TEST_CASE(single_scalars_share_what_the_parser_builds) {
    const char *modes[] = {"", "@", "^", "=", "<", ">", "!"};
    const char *codes = "cbB?hHiIlLqQnNefdspPgOwuFDG";
    int shared = 0;
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        for (const char *c = codes; *c; c++) {
            for (int z = 0; z < 2; z++) {
                if (z && !strchr("fdg", *c)) continue;
                char fmt[8], spaced[9];
                snprintf(fmt, sizeof fmt, "%s%s%c", modes[m], z ? "Z" : "", *c);
                snprintf(spaced, sizeof spaced, "%s ", fmt); /* defeats the fast path */
                pyxbuf_format fast, general;
                if (parse_ok(fmt, &fast) != 0) continue;
                if (parse_ok(spaced, &general) != 0) {
                    pyxbuf_format_clear(&fast);
                    continue;
                }
                shared += fast.node_capacity == 0;
                CHECK(general.node_capacity > 0 && general.heap_nodes == NULL);
                CHECK_INT_EQ(fast.nnodes, general.nnodes);
                CHECK_INT_EQ(fast.itemsize, general.itemsize);
                CHECK_INT_EQ(fast.alignment, general.alignment);
                CHECK_INT_EQ(fast.flags, general.flags);
                for (int32_t i = 0; i < fast.nnodes && i < general.nnodes; i++)
                    check_same_node(fmt, i, node(&fast, i), node(&general, i));
                int64_t size = 0, align = 0;
                CHECK_INT_EQ(pyxbuf_format_itemsize(fmt, &size, &align, NULL), 0);
                CHECK_INT_EQ(size, general.itemsize);
                CHECK_INT_EQ(align, general.alignment);
                pyxbuf_format_clear(&fast);
                pyxbuf_format_clear(&general);
            }
        }
    }
    CHECK_INT_EQ(shared, 7 * 27 + 7 * 3); /* every one took the shared nodes */
    /* Not single scalars: padding alone, two codes, a bare prefix or 'Z'. */
    const char *others[] = {"x", "ff", "<", "Z", "Zi", "<<f", "ZZf", "f:a:"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        pyxbuf_format f;
        if (pyxbuf_format_parse(others[i], &f, NULL) == 0) {
            CHECK(f.node_capacity > 0);
            pyxbuf_format_clear(&f);
        }
    }
}

/* The builder copies shared nodes before it writes: adding to a parsed
 * single scalar leaves every other descriptor of it as it was. */
TEST_CASE(builder_on_a_parsed_single_scalar_copies_first) {
    pyxbuf_format a, b;
    if (parse_ok("<d", &a) != 0 || parse_ok("<d", &b) != 0) return;
    CHECK(pyxbuf_format_nodes(&a) == pyxbuf_format_nodes(&b));
    CHECK(pyxbuf_format_add_scalar(&a, 0, 'i', 0, 0, 1, 0, NULL, "n") == 2);
    CHECK(pyxbuf_format_nodes(&a) != pyxbuf_format_nodes(&b));
    CHECK_INT_EQ(a.nnodes, 3);
    CHECK_INT_EQ(node(&a, 0)->nchildren, 2);
    CHECK_INT_EQ(node(&b, 0)->nchildren, 1);
    CHECK_INT_EQ(node(&b, 1)->next, -1);
    CHECK_INT_EQ(pyxbuf_format_finish(&a, NULL), 0);
    char buf[64];
    CHECK_INT_EQ(pyxbuf_format_write(&a, buf, sizeof buf, NULL, NULL), 0);
    CHECK_STR_EQ(buf, "<d@i:n:"); /* 0 is the root's mode, '@' */
    CHECK_INT_EQ(a.itemsize, 12);
    pyxbuf_format_clear(&a);
    pyxbuf_format_clear(&b);
    pyxbuf_format c;
    if (parse_ok("<d", &c) != 0) return;
    CHECK_INT_EQ(node(&c, 0)->nchildren, 1);
    CHECK_INT_EQ(c.itemsize, 8);
    pyxbuf_format_clear(&c);
}

TEST_CASE(struct_nodes) {
    pyxbuf_format f;
    if (parse_ok("T{>q:a:@H:b:=f:c:}", &f) != 0) return;
    CHECK_INT_EQ(f.nnodes, 5);
    CHECK_INT_EQ(f.flags, PYXBUF_FMTF_HAS_STRUCT);
    const pyxbuf_format_node *s = node(&f, 1);
    CHECK_INT_EQ(s->kind, PYXBUF_FMT_STRUCT);
    CHECK_INT_EQ(s->nchildren, 3);
    CHECK_INT_EQ(s->first_child, 2);
    CHECK_INT_EQ(s->itemsize, 14);
    const struct {
        int code, order;
        int64_t offset, itemsize;
        const char *name;
    } want[] = {{'q', '>', 0, 8, "a"}, {'H', '@', 8, 2, "b"}, {'f', '=', 10, 4, "c"}};
    for (int i = 0; i < 3; i++) {
        const pyxbuf_format_node *n = node(&f, 2 + i);
        CHECK_INT_EQ(n->kind, PYXBUF_FMT_SCALAR);
        CHECK_INT_EQ(n->code, want[i].code);
        CHECK_INT_EQ(n->byte_order, want[i].order);
        CHECK_INT_EQ(n->offset, want[i].offset);
        CHECK_INT_EQ(n->itemsize, want[i].itemsize);
        CHECK(name_is(n, want[i].name));
        CHECK_INT_EQ(n->parent, 1);
        CHECK_INT_EQ(n->next, i < 2 ? 3 + i : -1);
    }
    pyxbuf_format_clear(&f);
    CHECK(f.heap_nodes == NULL);
    CHECK_INT_EQ(f.nnodes, 0);

    /* NumPy's aligned nested struct: offsets inside and the padding node. */
    if (parse_ok("T{T{B:x:xxxxxxxd:y:}:n:h:z:}", &f) != 0) return;
    CHECK_INT_EQ(f.itemsize, 24);
    CHECK_INT_EQ(f.nnodes, 7);
    CHECK_INT_EQ(node(&f, 2)->kind, PYXBUF_FMT_STRUCT);
    CHECK(name_is(node(&f, 2), "n"));
    CHECK_INT_EQ(node(&f, 2)->itemsize, 16);
    CHECK_INT_EQ(node(&f, 4)->kind, PYXBUF_FMT_PADDING);
    CHECK_INT_EQ(node(&f, 4)->repeat, 7);
    CHECK_INT_EQ(node(&f, 4)->offset, 1);
    CHECK_INT_EQ(node(&f, 5)->offset, 8);
    CHECK(name_is(node(&f, 5), "y"));
    CHECK_INT_EQ(node(&f, 6)->offset, 16);
    CHECK(name_is(node(&f, 6), "z"));
    CHECK_INT_EQ(node(&f, 6)->parent, 1);
    pyxbuf_format_clear(&f);
}

TEST_CASE(subarray_nodes) {
    pyxbuf_format f;
    if (parse_ok("b(2,3)<4f:m:", &f) != 0) return;
    const pyxbuf_format_node *n = node(&f, 2);
    CHECK_INT_EQ(n->ndim, 2);
    CHECK_INT_EQ(pyxbuf_format_dims(&f)[n->dims_start], 2);
    CHECK_INT_EQ(pyxbuf_format_dims(&f)[n->dims_start + 1], 3);
    CHECK_INT_EQ(n->repeat, 4);
    CHECK_INT_EQ(n->byte_order, '<');
    CHECK_INT_EQ(n->itemsize, 4);
    CHECK_INT_EQ(n->nbytes, 96);
    CHECK_INT_EQ(n->offset, 1);
    CHECK(name_is(n, "m"));
    CHECK_INT_EQ(f.itemsize, 97);
    pyxbuf_format_clear(&f);

    /* More dimensions than fit inline go to the heap, and clear frees them. */
    if (parse_ok("(1,2,3,4,5)B", &f) != 0) return;
    CHECK(f.heap_dims != NULL);
    CHECK_INT_EQ(f.itemsize, 120);
    CHECK_INT_EQ(pyxbuf_format_dims(&f)[4], 5);
    pyxbuf_format_clear(&f);
    CHECK(f.heap_dims == NULL);
}

TEST_CASE(strings_count_length) {
    pyxbuf_format f;
    if (parse_ok("b5sp", &f) != 0) return;
    CHECK_INT_EQ(node(&f, 2)->code, 's');
    CHECK_INT_EQ(node(&f, 2)->repeat, 5);
    CHECK_INT_EQ(node(&f, 2)->itemsize, 1);
    CHECK_INT_EQ(node(&f, 2)->nbytes, 5);
    CHECK_INT_EQ(node(&f, 3)->repeat, 1);
    CHECK_INT_EQ(f.itemsize, 7);
    pyxbuf_format_clear(&f);
}

TEST_CASE(custom_nodes) {
    pyxbuf_format f;
    if (parse_ok(">[numpy$numpy.dtypes:StringDType;ml_dtypes$bfloat16]:s:", &f) != 0) return;
    const pyxbuf_format_node *n = node(&f, 1);
    CHECK_INT_EQ(n->kind, PYXBUF_FMT_CUSTOM);
    CHECK_INT_EQ(n->byte_order, '>');
    CHECK(span_is(n->custom, n->custom_len, "ml_dtypes$bfloat16"));
    CHECK_INT_EQ(n->custom_id_len, 9);
    CHECK(span_is(n->alternatives, n->alternatives_len,
                  "numpy$numpy.dtypes:StringDType;ml_dtypes$bfloat16"));
    CHECK_INT_EQ(n->itemsize, 2);
    CHECK(name_is(n, "s"));
    CHECK_INT_EQ(f.flags, PYXBUF_FMTF_HAS_CUSTOM);
    pyxbuf_format_clear(&f);

    /* Nobody understands it: opaque, size unknown, offsets after it too. */
    if (parse_ok("i[numpy$numpy.dtypes:StringDType:x.y]d", &f) != 0) return;
    CHECK_INT_EQ(f.itemsize, -1);
    CHECK_INT_EQ(f.flags, PYXBUF_FMTF_HAS_CUSTOM | PYXBUF_FMTF_HAS_OPAQUE);
    n = node(&f, 2);
    CHECK_INT_EQ(n->flags, PYXBUF_FMTN_OPAQUE);
    CHECK_INT_EQ(n->itemsize, -1);
    CHECK_INT_EQ(n->nbytes, -1);
    CHECK_INT_EQ(n->offset, 4);
    CHECK(span_is(n->custom, n->custom_len, "numpy$numpy.dtypes:StringDType:x.y"));
    CHECK_INT_EQ(n->custom_id_len, 5);
    CHECK_INT_EQ(node(&f, 3)->offset, -1);
    pyxbuf_format_clear(&f);

    /* struct$ and buffer$ payloads become children of the custom node. */
    if (parse_ok("b[struct$<iq]", &f) != 0) return;
    n = node(&f, 2);
    CHECK_INT_EQ(n->nchildren, 2);
    CHECK_INT_EQ(n->first_child, 3);
    CHECK_INT_EQ(node(&f, 3)->code, 'i');
    CHECK_INT_EQ(node(&f, 3)->byte_order, '<');
    CHECK_INT_EQ(node(&f, 4)->offset, 4);
    CHECK_INT_EQ(node(&f, 4)->parent, 2);
    CHECK(span_is(n->custom, n->custom_len, "struct$<iq"));
    CHECK_INT_EQ(f.itemsize, 13);
    pyxbuf_format_clear(&f);
}

TEST_CASE(opaque_itemsize_error) {
    int64_t size = 0;
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_format_itemsize("[numpy$numpy.dtypes:StringDType:]", &size, NULL, &err),
                 PYXBUF_EUNSUPPORTED);
    CHECK_CONTAINS(err.message, "format '[numpy$numpy.dtypes:StringDType:]' uses custom type "
                                "'numpy$numpy.dtypes:StringDType:' which this consumer does not "
                                "support");
    CHECK_CONTAINS(err.message, "pyxbuf_dtype_register");
    CHECK_INT_EQ(err.position, 0);
    /* A syntax error later in the string wins over the opaque type. */
    CHECK_INT_EQ(pyxbuf_format_itemsize("[a$b]3", &size, NULL, &err), PYXBUF_EFORMAT);
    /* A pointer to an opaque type has a size. */
    CHECK_INT_EQ(pyxbuf_format_itemsize("&[a$b]", &size, NULL, &err), 0);
    CHECK_INT_EQ(size, SZ(void *));
}

typedef struct bad_case {
    const char *fmt;
    int code;
    int64_t position;
    const char *message;
} bad_case;

TEST_CASE(malformed_formats) {
    const bad_case cases[] = {
        {"iQz", PYXBUF_EFORMAT, 2, "format 'iQz': unknown type code 'z' at position 2"},
        {"T{i", PYXBUF_EFORMAT, 0, "never closed"},
        {"i}", PYXBUF_EFORMAT, 1, "unbalanced '}'"},
        {"i]", PYXBUF_EFORMAT, 1, "unbalanced ']'"},
        {"i)", PYXBUF_EFORMAT, 1, "unbalanced ')'"},
        {"[a$b", PYXBUF_EFORMAT, 0, "'[' at position 0 is never closed"},
        {"(2,3f", PYXBUF_EFORMAT, 4, "expected ',' or ')'"},
        {"(2,3", PYXBUF_EFORMAT, 0, "never closed"},
        {"Ti", PYXBUF_EFORMAT, 0, "'T' at position 0 must be followed by '{'"},
        {"{i}", PYXBUF_EFORMAT, 0, "without 'T'"},
        {"i:a", PYXBUF_EFORMAT, 1, "no closing ':'"},
        {"i::", PYXBUF_EFORMAT, 1, "empty name"},
        {":a:i", PYXBUF_EFORMAT, 0, "does not follow an item"},
        {"T{:a:}", PYXBUF_EFORMAT, 2, "does not follow an item"},
        {"i:a::b:", PYXBUF_EFORMAT, 4, "second name"},
        {"99999999999999999999i", PYXBUF_EOVERFLOW, 0, "does not fit in 64 bits"},
        {"9223372036854775807q", PYXBUF_EOVERFLOW, 0, "larger than 2**63"},
        {"(-1)f", PYXBUF_EFORMAT, 1, "'-' at position 1"},
        {"()f", PYXBUF_EFORMAT, 0, "empty sub-array shape"},
        {"(2,)f", PYXBUF_EFORMAT, 3, "')' at position 3"},
        {"(99999999999999999999)f", PYXBUF_EOVERFLOW, 1, "does not fit"},
        {"[$x]", PYXBUF_EFORMAT, 1, "empty custom type id"},
        {"[abc]", PYXBUF_EFORMAT, 1, "has no '$'"},
        {"< >i", PYXBUF_EFORMAT, 2, "two byte-order prefixes"},
        {"[a$b\tc]", PYXBUF_EFORMAT, 4, "byte 0x09 at position 4"},
        {"[a\tb$c]", PYXBUF_EFORMAT, 2, "byte 0x09 at position 2 is not allowed in a custom type id"},
        {"[a$b$c]", PYXBUF_EFORMAT, 4, "'$' at position 4 is not allowed in a custom type payload"},
        {"[ml_dtypes$bfloat16;a$b$c]", PYXBUF_EFORMAT, 23, "'$' at position 23"},
        {"[ml_dtypes$bfloat16;struct$T{]", PYXBUF_EFORMAT, 27, "not struct-module syntax"},
        {"[ml_dtypes$bfloat16;buffer$T{]", PYXBUF_EFORMAT, 27, "never closed"},
        {"[buffer$[a$b]]", PYXBUF_EFORMAT, 8, "custom types are not allowed in buffer$"},
        {"[buffer$[x]]", PYXBUF_EFORMAT, 8, "custom types are not allowed in buffer$"},
        {"[buffer$T{[x]}]", PYXBUF_EFORMAT, 10, "custom types are not allowed in buffer$"},
        {"[]", PYXBUF_EFORMAT, 0, "empty custom type '[]'"},
        {"[a$b;;c$d]", PYXBUF_EFORMAT, 5, "empty custom type alternative"},
        {"[a$b;]", PYXBUF_EFORMAT, 5, "empty custom type alternative"},
        {"<", PYXBUF_EFORMAT, 0, "prefix '<' at position 0 is not followed by a type code"},
        {"3", PYXBUF_EFORMAT, 0, "count at position 0 is not followed"},
        {"i3", PYXBUF_EFORMAT, 1, "count at position 1"},
        {"Zi", PYXBUF_EFORMAT, 0, "'Z' at position 0 must be followed by 'f', 'd', 'g'"},
        {"Z", PYXBUF_EFORMAT, 0, "'Z' at position 0"},
        {"3 i", PYXBUF_EFORMAT, 1, "whitespace at position 1"},
        {"<>i", PYXBUF_EFORMAT, 1, "two byte-order prefixes"},
        {"[struct$T{i}]", PYXBUF_EFORMAT, 8, "not struct-module syntax"},
        {"[struct$Zg]", PYXBUF_EFORMAT, 8, "'Zg'"},
        {"[struct$i:a:]", PYXBUF_EFORMAT, 9, "struct module has no names"},
        {"[struct$(2)f]", PYXBUF_EFORMAT, 8, "sub-array"},
        {"[struct$i<i]", PYXBUF_EFORMAT, 9, "only at the start"},
        {"[struct$<P]", PYXBUF_EFORMAT, 9, "no standard size"},
        {"[struct$g]", PYXBUF_EFORMAT, 8, "'g'"},
        {"[buffer$iz]", PYXBUF_EFORMAT, 9, "unknown type code 'z' at position 9"},
        {"i\xc3\xa9", PYXBUF_EFORMAT, 1, "byte 0xC3 at position 1 is not ASCII"},
        {"3t", PYXBUF_EUNSUPPORTED, 1, "bit field"},
        {"&x", PYXBUF_EFORMAT, 1, "padding"},
        {"3(2)f", PYXBUF_EFORMAT, 1, "write the shape first"},
        {"<z", PYXBUF_EFORMAT, 1, "unknown type code 'z'"},
        {"<Z", PYXBUF_EFORMAT, 1, "'Z' at position 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bad_case *c = &cases[i];
        pyxbuf_format f;
        pyxbuf_error err;
        memset(&err, 0, sizeof err);
        int rc = pyxbuf_format_parse(c->fmt, &f, &err);
        if (rc != c->code || err.position != c->position || !strstr(err.message, c->message))
            fprintf(stderr, "case '%s': rc %d position %lld message: %s\n", c->fmt, rc,
                    (long long)err.position, err.message);
        CHECK_INT_EQ(rc, c->code);
        CHECK_INT_EQ(err.code, c->code);
        CHECK_INT_EQ(err.position, c->position);
        CHECK_CONTAINS(err.message, c->message);
        CHECK(f.heap_nodes == NULL && f.nnodes == 0);
        /* The whole format is quoted. */
        char quoted[64];
        snprintf(quoted, sizeof quoted, "format '%s'", c->fmt);
        if (strchr(c->fmt, '\t') == NULL && (unsigned char)c->fmt[strlen(c->fmt) - 1] < 0x80)
            CHECK_CONTAINS(err.message, quoted);
        int64_t size;
        CHECK_INT_EQ(pyxbuf_format_itemsize(c->fmt, &size, NULL, NULL), c->code);
    }
}

TEST_CASE(long_format_messages_are_truncated) {
    char fmt[2000];
    memset(fmt, 'i', sizeof fmt);
    fmt[1500] = 'z';
    fmt[sizeof fmt - 1] = '\0';
    pyxbuf_error err;
    pyxbuf_format f;
    CHECK_INT_EQ(pyxbuf_format_parse(fmt, &f, &err), PYXBUF_EFORMAT);
    CHECK_INT_EQ(err.position, 1500);
    CHECK_CONTAINS(err.message, "...");
    CHECK_CONTAINS(err.message, "iiiz");
    CHECK_CONTAINS(err.message, "unknown type code 'z' at position 1500");
}

TEST_CASE(nesting_depth) {
    char fmt[512];
    size_t n = 0;
    for (int i = 0; i < PYXBUF_FORMAT_MAX_DEPTH; i++) n += (size_t)sprintf(fmt + n, "T{");
    n += (size_t)sprintf(fmt + n, "d");
    for (int i = 0; i < PYXBUF_FORMAT_MAX_DEPTH; i++) n += (size_t)sprintf(fmt + n, "}");
    pyxbuf_format f;
    if (parse_ok(fmt, &f) == 0) {
        CHECK_INT_EQ(f.itemsize, 8);
        CHECK(f.heap_nodes != NULL);
        pyxbuf_format_clear(&f);
        CHECK(f.heap_nodes == NULL);
    }
    char deeper[520];
    snprintf(deeper, sizeof deeper, "T{%s}", fmt);
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_format_parse(deeper, &f, &err), PYXBUF_EFORMAT);
    CHECK_CONTAINS(err.message, "deeper than 32");
}

static int payload_size(const char *payload, size_t n, int64_t *itemsize, int64_t *alignment,
                        void *ctx) {
    int *calls = ctx;
    (*calls)++;
    if (n != 1 || payload[0] < '1' || payload[0] > '9') return PYXBUF_EFORMAT;
    *itemsize = payload[0] - '0';
    *alignment = 1;
    return 0;
}

TEST_CASE(registry) {
    pyxbuf_dtype_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.size = sizeof spec;
    char key[] = "mylib$point3";
    spec.key = key;
    spec.itemsize = 12;
    spec.alignment = 4;
    int64_t size = 0, align = 0;
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_format_itemsize("[mylib$point3]", &size, &align, &err),
                 PYXBUF_EUNSUPPORTED);
    CHECK_INT_EQ(pyxbuf_dtype_register(&spec), 0);
    key[0] = 'X'; /* the key was copied */
    CHECK_INT_EQ(pyxbuf_format_itemsize("b[mylib$point3]", &size, &align, &err), 0);
    CHECK_INT_EQ(size, 16);
    CHECK_INT_EQ(align, 4);
    spec.key = "mylib$point3";
    spec.itemsize = 24;
    spec.alignment = 8;
    CHECK_INT_EQ(pyxbuf_dtype_register(&spec), 0); /* replaces */
    CHECK_INT_EQ(pyxbuf_format_itemsize("[mylib$point3]", &size, &align, &err), 0);
    CHECK_INT_EQ(size, 24);
    CHECK_INT_EQ(pyxbuf_dtype_unregister("mylib$point3"), 0);
    CHECK_INT_EQ(pyxbuf_dtype_unregister("mylib$point3"), PYXBUF_EINVAL);
    CHECK_INT_EQ(pyxbuf_format_itemsize("[mylib$point3]", &size, &align, &err),
                 PYXBUF_EUNSUPPORTED);

    /* "id$" matches every payload and asks size_fn. */
    int calls = 0;
    spec.key = "sized$";
    spec.itemsize = 0;
    spec.alignment = 1;
    spec.size_fn = payload_size;
    spec.ctx = &calls;
    CHECK_INT_EQ(pyxbuf_dtype_register(&spec), 0);
    CHECK_INT_EQ(pyxbuf_format_itemsize("[sized$3]2[sized$5]", &size, &align, &err), 0);
    CHECK_INT_EQ(size, 13);
    CHECK_INT_EQ(calls, 2);
    /* size_fn refusing leaves it opaque; the next alternative is tried. */
    CHECK_INT_EQ(pyxbuf_format_itemsize("[sized$x]", &size, &align, &err), PYXBUF_EUNSUPPORTED);
    CHECK_INT_EQ(pyxbuf_format_itemsize("[sized$x;sized$7]", &size, &align, &err), 0);
    CHECK_INT_EQ(size, 7);
    /* An exact key wins over the id-wide one. */
    spec.key = "sized$x";
    spec.size_fn = NULL;
    spec.itemsize = 40;
    spec.alignment = 8;
    CHECK_INT_EQ(pyxbuf_dtype_register(&spec), 0);
    CHECK_INT_EQ(pyxbuf_format_itemsize("[sized$x]", &size, &align, &err), 0);
    CHECK_INT_EQ(size, 40);
    CHECK_INT_EQ(pyxbuf_dtype_unregister("sized$x"), 0);
    CHECK_INT_EQ(pyxbuf_dtype_unregister("sized$"), 0);

    /* Built-ins stay; an override shadows them until removed. */
    CHECK_INT_EQ(pyxbuf_dtype_unregister("ml_dtypes$bfloat16"), PYXBUF_EINVAL);
    spec.key = "ml_dtypes$bfloat16";
    spec.itemsize = 4;
    spec.alignment = 4;
    CHECK_INT_EQ(pyxbuf_dtype_register(&spec), 0);
    CHECK_INT_EQ(pyxbuf_format_itemsize("[ml_dtypes$bfloat16]", &size, &align, &err), 0);
    CHECK_INT_EQ(size, 4);
    CHECK_INT_EQ(pyxbuf_dtype_unregister("ml_dtypes$bfloat16"), 0);
    CHECK_INT_EQ(pyxbuf_format_itemsize("[ml_dtypes$bfloat16]", &size, &align, &err), 0);
    CHECK_INT_EQ(size, 2);

    /* Refused keys and specs. */
    const char *bad_keys[] = {"nodollar", "$x",    "struct$", "buffer$i", "a\tb$c",
                              "a$b]",     "a$b;c", "a$b$c",   "a$\x80"};
    for (size_t i = 0; i < sizeof bad_keys / sizeof *bad_keys; i++) {
        spec.key = bad_keys[i];
        CHECK_INT_EQ(pyxbuf_dtype_register(&spec), PYXBUF_EINVAL);
    }
    spec.key = "ok$a";
    spec.alignment = 3;
    CHECK_INT_EQ(pyxbuf_dtype_register(&spec), PYXBUF_EINVAL);
    spec.alignment = 1;
    spec.size = 8;
    CHECK_INT_EQ(pyxbuf_dtype_register(&spec), PYXBUF_EINVAL);
    CHECK_INT_EQ(pyxbuf_dtype_register(NULL), PYXBUF_EINVAL);
}

static void *parse_many(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        pyxbuf_format f;
        if (pyxbuf_format_parse("T{i:a:[thr$x;ml_dtypes$bfloat16]:b:}", &f, NULL) != 0 ||
            f.itemsize != 8)
            return (void *)1;
        pyxbuf_format_clear(&f);
    }
    return NULL;
}

TEST_CASE(registry_threads) {
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        CHECK_INT_EQ(pthread_create(&threads[i], NULL, parse_many, NULL), 0);
    pyxbuf_dtype_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.size = sizeof spec;
    spec.itemsize = 2;
    spec.alignment = 2;
    char key[32];
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof key, "thr$k%d", i % 7);
        spec.key = key;
        CHECK_INT_EQ(pyxbuf_dtype_register(&spec), 0);
        if (i % 2) CHECK_INT_EQ(pyxbuf_dtype_unregister(key), 0);
    }
    for (int i = 0; i < 3; i++) {
        void *res;
        pthread_join(threads[i], &res);
        CHECK(res == NULL);
    }
    for (int i = 0; i < 7; i++) {
        snprintf(key, sizeof key, "thr$k%d", i);
        pyxbuf_dtype_unregister(key);
    }
}

/* write(parse(s)) == want, and parsing it again gives the same layout. */
static void check_write(const char *fmt, const char *want) {
    pyxbuf_format f, g;
    if (parse_ok(fmt, &f) != 0) return;
    char buf[256];
    size_t len = 0;
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_format_write(&f, buf, sizeof buf, &len, &err), 0);
    CHECK_STR_EQ(buf, want);
    CHECK_INT_EQ(len, strlen(want));
    if (parse_ok(buf, &g) == 0) {
        CHECK_INT_EQ(g.itemsize, f.itemsize);
        CHECK_INT_EQ(g.alignment, f.alignment);
        CHECK_INT_EQ(g.nnodes, f.nnodes);
        for (int32_t i = 0; i < f.nnodes && i < g.nnodes; i++) {
            const pyxbuf_format_node *a = node(&f, i), *b = node(&g, i);
            CHECK_INT_EQ(a->kind, b->kind);
            CHECK_INT_EQ(a->code, b->code);
            CHECK_INT_EQ(a->byte_order, b->byte_order);
            CHECK_INT_EQ(a->offset, b->offset);
            CHECK_INT_EQ(a->nbytes, b->nbytes);
            CHECK_INT_EQ(a->parent, b->parent);
            CHECK_INT_EQ(a->name_len, b->name_len);
        }
        pyxbuf_format_clear(&g);
    }
    pyxbuf_format_clear(&f);
}

TEST_CASE(writer) {
    check_write("f", "f");
    check_write("<d", "<d");
    check_write("  i  x ", "ix");
    check_write("xxxxi", "4xi");
    check_write("<ii", "<ii");
    check_write("<i<i", "<ii");
    check_write("!i", "!i");
    check_write("(2)<3f", "<(2)3f");
    check_write("&<i", "<&i");
    check_write("T{T{B:x:xxxxxxxd:y:}:n:h:z:}", "T{T{B:x:7xd:y:}:n:h:z:}");
    check_write("T{>q:a:@H:b:=f:c:}", "T{>q:a:@H:b:=f:c:}");
    check_write("<T{i:a:}", "<T{<i:a:}");
    /* The mode set inside lasts past '}'; the writer states it again. */
    check_write("T{T{=i:x:B:y:}:n:h:z:}", "T{T{=i:x:B:y:}:n:=h:z:}");
    check_write("Z[ml_dtypes$bfloat16]", "Z[ml_dtypes$bfloat16]");
    check_write("[a$x;b$y]", "[a$x;b$y]");
    check_write("[struct$<iq]i", "[struct$<iq]i");
    check_write("", "");
    check_write("T{}", "T{}");

    /* Too small: the length is still reported. */
    pyxbuf_format f;
    if (parse_ok("T{i:a:d:b:}", &f) != 0) return;
    char small[4];
    size_t len = 0;
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_format_write(&f, small, sizeof small, &len, &err), PYXBUF_ENOSPACE);
    CHECK_INT_EQ(len, 11);
    CHECK_INT_EQ(pyxbuf_format_write(&f, NULL, 0, &len, NULL), PYXBUF_ENOSPACE);
    CHECK_INT_EQ(len, 11);
    char exact[12];
    CHECK_INT_EQ(pyxbuf_format_write(&f, exact, sizeof exact, &len, &err), 0);
    CHECK_STR_EQ(exact, "T{i:a:d:b:}");
    pyxbuf_format_clear(&f);
}

/* Builder output == parse(write(builder output)). */
static void check_built(pyxbuf_format *f, const char *want, int64_t itemsize) {
    pyxbuf_error err;
    int rc = pyxbuf_format_finish(f, &err);
    if (rc != 0) fprintf(stderr, "finish: %s\n", err.message);
    CHECK_INT_EQ(rc, 0);
    char buf[256];
    CHECK_INT_EQ(pyxbuf_format_write(f, buf, sizeof buf, NULL, &err), 0);
    CHECK_STR_EQ(buf, want);
    CHECK_INT_EQ(f->itemsize, itemsize);
    pyxbuf_format g;
    if (parse_ok(buf, &g) != 0) return;
    CHECK_INT_EQ(g.nnodes, f->nnodes);
    CHECK_INT_EQ(g.itemsize, f->itemsize);
    CHECK_INT_EQ(g.alignment, f->alignment);
    CHECK_INT_EQ(g.flags, f->flags);
    for (int32_t i = 0; i < f->nnodes && i < g.nnodes; i++) {
        const pyxbuf_format_node *a = node(f, i), *b = node(&g, i);
        CHECK_INT_EQ(a->kind, b->kind);
        CHECK_INT_EQ(a->code, b->code);
        CHECK_INT_EQ(a->byte_order, b->byte_order);
        CHECK_INT_EQ(a->flags, b->flags);
        CHECK_INT_EQ(a->parent, b->parent);
        CHECK_INT_EQ(a->next, b->next);
        CHECK_INT_EQ(a->first_child, b->first_child);
        CHECK_INT_EQ(a->nchildren, b->nchildren);
        CHECK_INT_EQ(a->offset, b->offset);
        CHECK_INT_EQ(a->itemsize, b->itemsize);
        CHECK_INT_EQ(a->nbytes, b->nbytes);
        CHECK_INT_EQ(a->alignment, b->alignment);
        CHECK_INT_EQ(a->repeat, b->repeat);
        CHECK_INT_EQ(a->ndim, b->ndim);
        CHECK_INT_EQ(a->name_len, b->name_len);
        CHECK_INT_EQ(a->custom_len, b->custom_len);
    }
    pyxbuf_format_clear(&g);
}

TEST_CASE(builder) {
    pyxbuf_format f;
    pyxbuf_format_init(&f);
    CHECK_INT_EQ(f.nnodes, 1);
    CHECK(f.heap_nodes == NULL);
    int s = pyxbuf_format_add_struct(&f, 0, 0, 1, 0, NULL, "rec");
    CHECK(s > 0);
    int t = pyxbuf_format_add_struct(&f, 0, '<', 2, 0, NULL, "packed");
    const int64_t dims[2] = {2, 3};
    /* Added out of order: finish stores the tree in pre-order. */
    CHECK(pyxbuf_format_add_scalar(&f, s, 'i', 0, 0, 1, 0, NULL, "a") > 0);
    CHECK(pyxbuf_format_add_scalar(&f, t, 'd', 0, 0, 1, 0, NULL, "x") > 0);
    CHECK(pyxbuf_format_add_padding(&f, s, 2) > 0);
    CHECK(pyxbuf_format_add_padding(&f, s, 1) > 0); /* merges with the previous */
    CHECK(pyxbuf_format_add_scalar(&f, s, 'f', 0, PYXBUF_FMTN_COMPLEX, 1, 2, dims, "z") > 0);
    CHECK(pyxbuf_format_add_custom(&f, s, "ml_dtypes$bfloat16", '>', 0, 3, 0, NULL, "bf") > 0);
    CHECK(pyxbuf_format_add_scalar(&f, 0, 's', 0, 0, 5, 0, NULL, NULL) > 0);
    CHECK(pyxbuf_format_add_custom(&f, 0, "struct$<hh", 0, 0, 1, 0, NULL, "pair") > 0);
    check_built(&f, "T{i:a:3x(2,3)Zf:z:>3[ml_dtypes$bfloat16]:bf:}:rec:<2T{<d:x:}:packed:@5s"
                    "[struct$<hh]:pair:",
                89);
    CHECK(f.heap_nodes != NULL);
    CHECK(f.source == NULL);
    pyxbuf_format_clear(&f);

    /* A single scalar built stays inline and says so. */
    pyxbuf_format_init(&f);
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, 0, 'd', '<', 0, 1, 0, NULL, NULL), 1);
    check_built(&f, "<d", 8);
    CHECK(f.heap_nodes == NULL);
    CHECK_INT_EQ(f.flags, PYXBUF_FMTF_SINGLE_SCALAR);
    pyxbuf_format_clear(&f);

    /* Nested modes: the writer restates the mode after '}' where it changed. */
    pyxbuf_format_init(&f);
    int a = pyxbuf_format_add_struct(&f, 0, 0, 1, 0, NULL, NULL);
    CHECK(pyxbuf_format_add_scalar(&f, a, 'i', '>', 0, 1, 0, NULL, NULL) > 0);
    int b = pyxbuf_format_add_struct(&f, a, 0, 1, 0, NULL, NULL);
    CHECK(pyxbuf_format_add_scalar(&f, b, 'd', 0, 0, 1, 0, NULL, NULL) > 0);
    CHECK(pyxbuf_format_add_scalar(&f, b, 'h', '=', 0, 1, 0, NULL, NULL) > 0);
    CHECK(pyxbuf_format_add_scalar(&f, a, 'b', 0, 0, 1, 0, NULL, NULL) > 0);
    CHECK(pyxbuf_format_add_scalar(&f, 0, 'd', 0, PYXBUF_FMTN_POINTER, 1, 0, NULL, NULL) > 0);
    const int64_t two[1] = {2};
    CHECK(pyxbuf_format_add_custom(&f, 0, "buffer$T{i:a:}", 0, 0, 1, 1, two, NULL) > 0);
    check_built(&f, "T{>i@T{d=h}@b}&d(2)[buffer$T{i:a:}]", 48);
    CHECK_INT_EQ(node(&f, 3)->offset, 8); /* T{d=h} aligns to 8 */
    pyxbuf_format_clear(&f);

    /* An empty format. */
    pyxbuf_format_init(&f);
    check_built(&f, "", 0);

    /* Refusals. */
    pyxbuf_format_init(&f);
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, 0, 'z', 0, 0, 1, 0, NULL, NULL), PYXBUF_EINVAL);
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, 0, 'i', 0, PYXBUF_FMTN_COMPLEX, 1, 0, NULL, NULL),
                 PYXBUF_EINVAL);
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, 5, 'i', 0, 0, 1, 0, NULL, NULL), PYXBUF_EINVAL);
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, 0, 'i', 'x', 0, 1, 0, NULL, NULL), PYXBUF_EINVAL);
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, 0, 'i', 0, 0, 1, 0, NULL, "a:b"), PYXBUF_EINVAL);
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, 0, 'i', 0, 0, 1, 0, NULL, ""), PYXBUF_EINVAL);
    const int64_t negative[1] = {-1};
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, 0, 'i', 0, 0, 1, 1, negative, NULL), PYXBUF_EINVAL);
    int c = pyxbuf_format_add_custom(&f, 0, "ml_dtypes$int4", 0, 0, 1, 0, NULL, NULL);
    CHECK_INT_EQ(pyxbuf_format_add_scalar(&f, c, 'i', 0, 0, 1, 0, NULL, NULL), PYXBUF_EINVAL);
    /* The builder keeps the proposal's character rules: no '$' in a payload. */
    pyxbuf_format g;
    pyxbuf_format_init(&g);
    CHECK_INT_EQ(pyxbuf_format_add_custom(&g, 0, "a$b$c", 0, 0, 1, 0, NULL, NULL) > 0, 1);
    pyxbuf_error gerr;
    CHECK_INT_EQ(pyxbuf_format_finish(&g, &gerr), PYXBUF_EFORMAT);
    CHECK_CONTAINS(gerr.message, "'$' at position 3 is not allowed in a custom type payload");
    pyxbuf_format_clear(&g);
    CHECK_INT_EQ(pyxbuf_format_add_custom(&f, 0, "nodollar", 0, 0, 1, 0, NULL, NULL) > 0, 1);
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_format_finish(&f, &err), PYXBUF_EFORMAT);
    CHECK_CONTAINS(err.message, "custom type 'nodollar'");
    CHECK_CONTAINS(err.message, "has no '$'");
    pyxbuf_format_clear(&f);

    /* Opaque custom types build like they parse. */
    pyxbuf_format_init(&f);
    CHECK(pyxbuf_format_add_custom(&f, 0, "numpy$numpy.dtypes:StringDType", 0, 0, 1, 0, NULL,
                                   NULL) > 0);
    CHECK(pyxbuf_format_add_scalar(&f, 0, 'i', 0, 0, 1, 0, NULL, NULL) > 0);
    check_built(&f, "[numpy$numpy.dtypes:StringDType]i", -1);
    CHECK_INT_EQ(f.flags & PYXBUF_FMTF_HAS_OPAQUE, PYXBUF_FMTF_HAS_OPAQUE);
    pyxbuf_format_clear(&f);
}

/* format/codes.h's table (the bridges' (kind, size) -> code) agrees with the
 * parser: each code is `size` bytes, natively and in every standard mode,
 * and sizes without a code are the ones the table leaves out. */
TEST_CASE(struct_code_table_agrees_with_the_parser) {
    const pyxbuf__kind kinds[] = {PYXBUF__KIND_INT, PYXBUF__KIND_UINT, PYXBUF__KIND_FLOAT,
                                  PYXBUF__KIND_COMPLEX, PYXBUF__KIND_BOOL};
    const char *const want[][5] = {{"b", "h", "i", "q", NULL},
                                   {"B", "H", "I", "Q", NULL},
                                   {NULL, "e", "f", "d", NULL},
                                   {NULL, NULL, NULL, "Zf", "Zd"},
                                   {"?", NULL, NULL, NULL, NULL}};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        for (int col = 0; col < 5; col++) {
            int64_t size = (int64_t)1 << col;
            const char *code = pyxbuf__struct_code(kinds[k], size);
            if (want[k][col] == NULL) {
                CHECK(code == NULL);
                continue;
            }
            if (code == NULL) {
                CHECK(code != NULL);
                continue;
            }
            CHECK_STR_EQ(code, want[k][col]);
            for (const char *mode = "@=<>!"; *mode; mode++) {
                char fmt[8];
                int64_t got = -1;
                pyxbuf_error err;
                snprintf(fmt, sizeof fmt, "%c%s", *mode, code);
                CHECK_INT_EQ(pyxbuf_format_itemsize(fmt, &got, NULL, &err), 0);
                CHECK_INT_EQ(got, size);
            }
        }
        CHECK(pyxbuf__struct_code(kinds[k], 0) == NULL);
        CHECK(pyxbuf__struct_code(kinds[k], 3) == NULL);
        CHECK(pyxbuf__struct_code(kinds[k], 32) == NULL);
    }
    for (int64_t size = -1; size <= 32; size++)
        CHECK(pyxbuf__struct_code(PYXBUF__KIND_NONE, size) == NULL);
    /* Long double: only through the native lookup, at this platform's size. */
    int64_t ld = SZ(long double);
    CHECK(pyxbuf__struct_code(PYXBUF__KIND_FLOAT, ld) == NULL || ld <= 8);
    if (ld > 8) {
        CHECK_STR_EQ(pyxbuf__native_struct_code(PYXBUF__KIND_FLOAT, ld), "g");
        CHECK_STR_EQ(pyxbuf__native_struct_code(PYXBUF__KIND_COMPLEX, 2 * ld), "Zg");
    }
    CHECK_STR_EQ(pyxbuf__native_struct_code(PYXBUF__KIND_FLOAT, 8), "d");
    CHECK(pyxbuf__native_struct_code(PYXBUF__KIND_INT, 16) == NULL);
}

/* The one custom-type character rule (format/format.h; the custom-dtype
 * proposal: "All characters within the [] must be printable ASCII
 * characters characters excluding ];$"), byte by byte, in a parsed type's id
 * and in the builder's: a space or '[' is allowed, the first refused byte is
 * named. */
/* The parser's message for `byte` at `position` of a custom type id. */
static void id_refusal(char *buf, size_t cap, int byte, int position) {
    if (byte >= 0x20 && byte <= 0x7e)
        snprintf(buf, cap, "'%c' at position %d is not allowed in a custom type id", byte,
                 position);
    else
        snprintf(buf, cap, "byte 0x%02X at position %d is not allowed in a custom type id", byte,
                 position);
}

TEST_CASE(custom_type_characters_follow_one_rule) {
    for (int byte = 1; byte < 256; byte++) {
        int ends_id = byte == ']' || byte == ';' || byte == '$'; /* refused as structure */
        int allowed = byte >= 0x20 && byte <= 0x7e && !ends_id;
        char alts[8], fmt[16], named[80];
        snprintf(alts, sizeof alts, "a%cb$x", (char)byte);
        snprintf(fmt, sizeof fmt, "[%s]", alts);
        pyxbuf_format f, g;
        pyxbuf_error err;
        CHECK_INT_EQ(pyxbuf_format_parse(fmt, &f, &err), allowed ? PYXBUF_OK : PYXBUF_EFORMAT);
        pyxbuf_format_clear(&f);
        id_refusal(named, sizeof named, byte, 2);
        if (!allowed && !ends_id) CHECK_CONTAINS(err.message, named);
        pyxbuf_format_init(&g);
        CHECK(pyxbuf_format_add_custom(&g, 0, alts, 0, 0, 1, 0, NULL, NULL) > 0);
        CHECK_INT_EQ(pyxbuf_format_finish(&g, &err), allowed ? PYXBUF_OK : PYXBUF_EFORMAT);
        id_refusal(named, sizeof named, byte, 1);
        if (!allowed && !ends_id) CHECK_CONTAINS(err.message, named);
        pyxbuf_format_clear(&g);
    }
}

TEST_CASE(clear_frees_and_empties) {
    pyxbuf_format f;
    if (parse_ok("T{i:a:d:b:(2,3,4,5,6)f:c:[ml_dtypes$bfloat16]:d:}", &f) != 0) return;
    CHECK(f.heap_nodes != NULL);
    CHECK(f.heap_dims != NULL);
    pyxbuf_format_clear(&f);
    CHECK(f.heap_nodes == NULL);
    CHECK(f.heap_dims == NULL);
    CHECK_INT_EQ(f.nnodes, 0);
    pyxbuf_format_clear(&f); /* twice is fine */
    pyxbuf_format_clear(NULL);
}

TEST_MAIN(TEST_ENTRY(valid_formats), TEST_ENTRY(single_items_do_not_allocate),
          TEST_ENTRY(single_scalars_share_what_the_parser_builds),
          TEST_ENTRY(builder_on_a_parsed_single_scalar_copies_first),
          TEST_ENTRY(struct_nodes), TEST_ENTRY(subarray_nodes), TEST_ENTRY(strings_count_length),
          TEST_ENTRY(custom_nodes), TEST_ENTRY(opaque_itemsize_error),
          TEST_ENTRY(malformed_formats), TEST_ENTRY(long_format_messages_are_truncated),
          TEST_ENTRY(nesting_depth), TEST_ENTRY(registry), TEST_ENTRY(registry_threads),
          TEST_ENTRY(writer), TEST_ENTRY(builder), TEST_ENTRY(struct_code_table_agrees_with_the_parser),
          TEST_ENTRY(custom_type_characters_follow_one_rule), TEST_ENTRY(clear_frees_and_empties))
