/* dlpack_dtype.c -- DLPack dtypes and buffer formats, both ways: the standard
 * dtypes (format/codes.h's table, read inline by the import through
 * bridges/dlpack.h), the ml_dtypes custom types DLPack has codes for, the
 * refusals, and the dtype of a format for the export.
 *
 * dtypes become native format strings without a prefix: DLPack data is in
 * native byte order, and format/codes.h's codes have the same sizes on every
 * platform CPython supports ('q', not 'l'). bool is '?', complex64/128
 * 'Zf'/'Zd', complex32
 * '[ml_dtypes$complex32]', bfloat16 and the float8/6/4 codes the ml_dtypes
 * custom types of the same names. Sub-byte types (bits < 8) are read only
 * when the producer flags them padded (one element per byte, exactly
 * ml_dtypes' layout: int4 -> '[ml_dtypes$int4]') or packed two to a byte as
 * 2 lanes of 4 bits (PyTorch's float4_e2m1fn_x2 ->
 * '[pyxbuf$float4_e2m1fn_x2;struct$B]', one-byte items); other packings are
 * refused.
 * float128 is refused (DLPack means IEEE binary128; C's long double is not
 * that on the platforms pyxbuf runs on), as are vector types (lanes != 1)
 * and opaque handles. */
#include "bridges/dlpack.h"

#include <stdio.h>
#include <string.h>

/* The custom types DLPack has codes for; `bits` and `lanes` are DLPack's
 * (sub-byte types are stored one per byte by ml_dtypes). */
typedef struct custom_dtype {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
    const char *format; /* "[ml_dtypes$...]", "[pyxbuf$...;struct$B]" */
} custom_dtype;

static const custom_dtype CUSTOM_DTYPES[] = {
    {kDLBfloat, 16, 1, "[ml_dtypes$bfloat16]"},
    {kDLComplex, 32, 1, "[ml_dtypes$complex32]"},
    {kDLFloat8_e3m4, 8, 1, "[ml_dtypes$float8_e3m4]"},
    {kDLFloat8_e4m3, 8, 1, "[ml_dtypes$float8_e4m3]"},
    {kDLFloat8_e4m3b11fnuz, 8, 1, "[ml_dtypes$float8_e4m3b11fnuz]"},
    {kDLFloat8_e4m3fn, 8, 1, "[ml_dtypes$float8_e4m3fn]"},
    {kDLFloat8_e4m3fnuz, 8, 1, "[ml_dtypes$float8_e4m3fnuz]"},
    {kDLFloat8_e5m2, 8, 1, "[ml_dtypes$float8_e5m2]"},
    {kDLFloat8_e5m2fnuz, 8, 1, "[ml_dtypes$float8_e5m2fnuz]"},
    {kDLFloat8_e8m0fnu, 8, 1, "[ml_dtypes$float8_e8m0fnu]"},
    /* sub-byte: padded to one byte per element */
    {kDLFloat6_e2m3fn, 6, 1, "[ml_dtypes$float6_e2m3fn]"},
    {kDLFloat6_e3m2fn, 6, 1, "[ml_dtypes$float6_e3m2fn]"},
    {kDLFloat4_e2m1fn, 4, 1, "[ml_dtypes$float4_e2m1fn]"},
    {kDLInt, 4, 1, "[ml_dtypes$int4]"},
    {kDLInt, 2, 1, "[ml_dtypes$int2]"},
    {kDLInt, 1, 1, "[ml_dtypes$int1]"},
    {kDLUInt, 4, 1, "[ml_dtypes$uint4]"},
    {kDLUInt, 2, 1, "[ml_dtypes$uint2]"},
    {kDLUInt, 1, 1, "[ml_dtypes$uint1]"},
    /* Packed pairs: two 4-bit values in each byte, DLPack's 2 lanes of 4
     * bits (PyTorch's float4_e2m1fn_x2, the NVFP4/MXFP4 weights' storage):
     * one-byte items whose custom type says the packing, with a struct$B
     * alternative so that any consumer can read the bytes. */
    {kDLFloat4_e2m1fn, 4, 2, "[pyxbuf$float4_e2m1fn_x2;struct$B]"},
    {kDLInt, 4, 2, "[pyxbuf$int4_x2;struct$B]"},
    {kDLUInt, 4, 2, "[pyxbuf$uint4_x2;struct$B]"},
};
#define N_CUSTOM (sizeof CUSTOM_DTYPES / sizeof *CUSTOM_DTYPES)

static const char *dtype_code_name(uint8_t code) {
    static const char *const names[] = {
        "kDLInt", "kDLUInt", "kDLFloat", "kDLOpaqueHandle", "kDLBfloat", "kDLComplex",
        "kDLBool", "kDLFloat8_e3m4", "kDLFloat8_e4m3", "kDLFloat8_e4m3b11fnuz",
        "kDLFloat8_e4m3fn", "kDLFloat8_e4m3fnuz", "kDLFloat8_e5m2", "kDLFloat8_e5m2fnuz",
        "kDLFloat8_e8m0fnu", "kDLFloat6_e2m3fn", "kDLFloat6_e3m2fn", "kDLFloat4_e2m1fn",
    };
    return code < sizeof names / sizeof *names ? names[code] : "unknown";
}

/* dtype_to_format past the standard table: custom types and refusals. */
PYXBUF_NOINLINE const char *pyxbuf__dlpack_dtype_to_format_slow(DLDataType dt, int padded,
                                                                Py_ssize_t *itemsize, char *why,
                                                                size_t cap) {
    const char *code = dtype_code_name(dt.code);
    for (size_t i = 0; i < N_CUSTOM; i++) {
        const custom_dtype *c = &CUSTOM_DTYPES[i];
        if (c->code != dt.code || c->bits != dt.bits || c->lanes != dt.lanes) continue;
        if (dt.bits < 8 && dt.lanes == 1 && !padded) {
            snprintf(why, cap,
                     "sub-byte type %s of %u bits is packed (several elements per byte), which "
                     "is not supported; pyxbuf reads sub-byte types only when the producer pads "
                     "them to one byte each (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) or "
                     "packs two in a byte as 2 lanes of 4 bits",
                     code, dt.bits);
            return NULL;
        }
        *itemsize = dt.bits * dt.lanes < 8 ? 1 : dt.bits * dt.lanes / 8;
        return c->format;
    }
    if (dt.lanes != 1) {
        snprintf(why, cap,
                 "dtype (%s, %u %s, %u lanes) is a vector type; pyxbuf describes one scalar "
                 "per element (lanes must be 1)",
                 code, dt.bits, PYXBUF__PLURAL(dt.bits, "bit", "bits"), dt.lanes);
        return NULL;
    }
    if (dt.code == kDLFloat && dt.bits == 128) {
        snprintf(why, cap,
                 "dtype float128 (%s, 128 bits) is IEEE binary128, which no buffer format "
                 "describes ('g' is the platform's long double); cast it to float64 first",
                 code);
        return NULL;
    }
    if (dt.code == kDLOpaqueHandle) {
        snprintf(why, cap, "dtype kDLOpaqueHandle (%u bits) has no agreed meaning; pyxbuf "
                 "cannot describe its elements", dt.bits);
        return NULL;
    }
    if (dt.code > kDLFloat4_e2m1fn)
        snprintf(why, cap, "dtype code %u is unknown to pyxbuf (DLPack %d.%d knows codes 0..%d)",
                 dt.code, DL_MAJOR, DL_MINOR, kDLFloat4_e2m1fn);
    else if (dt.bits < 8)
        snprintf(why, cap, "sub-byte type %s of %u bits is not supported", code, dt.bits);
    else
        snprintf(why, cap, "dtype %s with %u bits is not a type pyxbuf can describe", code,
                 dt.bits);
    return NULL;
}

static int native_order(int32_t order) {
    static const union {
        uint16_t u;
        uint8_t b[2];
    } probe = {1};
    int little = probe.b[0] == 1;
    if (order == PYXBUF_ORDER_LITTLE) return little;
    if (order == PYXBUF_ORDER_BIG || order == PYXBUF_ORDER_NETWORK) return !little;
    return 1;
}

/* The dtype of a scalar node (dt->bits set): 1, or 0 with *why. */
static int scalar_dtype(const pyxbuf_format_node *n, DLDataType *dt, const char **why) {
    if (n->code == 'g') {
        *why = "long double ('g') is not IEEE binary128, DLPack's float128";
        return 0;
    }
    pyxbuf__kind kind = pyxbuf__struct_code_kind(n->code);
    if (n->flags & PYXBUF_FMTN_COMPLEX)
        kind = kind == PYXBUF__KIND_FLOAT && n->code != 'e' ? PYXBUF__KIND_COMPLEX
                                                              : PYXBUF__KIND_NONE;
    if (kind == PYXBUF__KIND_NONE) return 0;
    dt->code = (uint8_t)kind; /* format/codes.h's kinds are DLPack's codes */
    return 1;
}

/* Whether the custom type names `id` ("id$payload") among its alternatives. */
static int names_alternative(const pyxbuf_format_node *n, const char *id, size_t len) {
    const char *p = n->alternatives, *end = p ? p + n->alternatives_len : NULL;
    while (p != NULL && p < end) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *stop = semi ? semi : end;
        if ((size_t)(stop - p) == len && memcmp(p, id, len) == 0) return 1;
        p = semi ? semi + 1 : end;
    }
    return 0;
}

/* The dtype of a custom node: 1 for the custom types DLPack has codes for
 * (by the type chosen, or for the packed pairs any alternative naming
 * them), else 0. */
static int ml_dtypes_dtype(const pyxbuf_format_node *n, DLDataType *dt, int *padded) {
    for (size_t i = 0; i < N_CUSTOM; i++) {
        const custom_dtype *c = &CUSTOM_DTYPES[i];
        const char *name = c->format + 1; /* skip '[' */
        const char *semi = strchr(name, ';');
        size_t len = semi ? (size_t)(semi - name) : strlen(name) - 1; /* up to ';' or ']' */
        int chosen = (size_t)n->custom_len == len && memcmp(n->custom, name, len) == 0;
        if (!chosen && !(c->lanes > 1 && names_alternative(n, name, len))) continue;
        dt->code = c->code;
        dt->bits = c->bits;
        dt->lanes = c->lanes;
        *padded = dt->bits < 8 && dt->lanes == 1;
        return 1;
    }
    return 0;
}

/* The dtype of format `f`: 1, or 0 with *why. */
static int format_dtype(const pyxbuf_format *f, DLDataType *dt, int *padded, const char **why) {
    /* One item under the root: a scalar, or a custom type (whose struct$
     * alternative, when the one resolved, has a node of its own below). */
    const pyxbuf_format_node *nodes = pyxbuf_format_nodes(f);
    const pyxbuf_format_node *n =
        f->nnodes >= 2 && nodes[0].nchildren == 1 && nodes[0].first_child > 0
            ? &nodes[nodes[0].first_child]
            : NULL;
    if (n != NULL && n->kind != PYXBUF_FMT_CUSTOM && f->nnodes != 2) n = NULL;
    *why = "DLPack describes one scalar per element, not structs, repeats or sub-arrays";
    if (n == NULL || n->repeat != 1 || n->ndim != 0 || (n->flags & PYXBUF_FMTN_POINTER)) return 0;
    *why = "DLPack has no code for this type";
    if (n->itemsize > 1 && !native_order(n->byte_order)) {
        *why = "DLPack tensors are in native byte order";
        return 0;
    }
    if (n->kind == PYXBUF_FMT_SCALAR && n->itemsize > 0 && n->itemsize <= 16) {
        dt->bits = (uint8_t)(f->itemsize * 8);
        return scalar_dtype(n, dt, why);
    }
    if (n->kind == PYXBUF_FMT_CUSTOM && !(n->flags & PYXBUF_FMTN_COMPLEX) && n->custom != NULL)
        return ml_dtypes_dtype(n, dt, padded);
    return 0;
}

/* The DLPack dtype of a buffer format, or -1 with BufferError. *padded is
 * set for sub-byte ml_dtypes types (one element per byte). */
int pyxbuf__dlpack_format_to_dtype(const char *fmt, DLDataType *dt, int *padded) {
    pyxbuf_format f;
    pyxbuf_error err;
    const char *shown = fmt ? fmt : "B";
    if (pyxbuf_format_parse(fmt, &f, &err) < 0) {
        PyErr_Format(PyExc_BufferError, "pyxbuf: format '%s' cannot be exported by DLPack: %s",
                     shown, err.message);
        return -1;
    }
    const char *why;
    *padded = 0;
    dt->lanes = 1;
    int ok = format_dtype(&f, dt, padded, &why);
    /* The dtype must describe the format's items byte for byte (a custom
     * type found among the alternatives may not be the one that sized
     * them: "[pyxbuf$float4_e2m1fn_x2;struct$BB]" has 2-byte items). */
    int64_t dtype_bytes = *padded ? 1 : (int64_t)dt->bits * dt->lanes / 8;
    if (ok && f.itemsize != dtype_bytes) {
        ok = 0;
        why = "its items' size is not the DLPack dtype's (bits x lanes), which would describe "
              "other bytes";
    }
    pyxbuf_format_clear(&f);
    if (ok) return 0;
    PyErr_Format(PyExc_BufferError, "pyxbuf: format '%s' cannot be exported by DLPack: %s",
                 shown, why);
    return -1;
}
