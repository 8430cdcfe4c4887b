/* codes.h -- the one table from a scalar's kind and byte size to its struct
 * format code, for the bridges that turn another protocol's types into
 * formats: DLPack's dtypes (bridges/dlpack.h, inline on pyxbuf_get's DLPack
 * path) and the typestr of the __cuda_array_interface__ (bridges/cai.c);
 * and back, the kind of a code (DLPack's export, bridges/dlpack_dtype.c).
 *
 * The codes are native ones, without a prefix, whose size is the same on
 * every platform CPython supports: b h i q and B H I Q ('q', never 'l': long
 * is 4 bytes on Windows), e f d, Zf Zd (a complex's size is both
 * components'), '?'. Other sizes have no code (NULL). Long double ('g',
 * "Zg") has no standard size: pyxbuf__native_struct_code adds it where the
 * producer's type is C's long double (NumPy's typestr), never for DLPack,
 * whose float128 is IEEE binary128. c/tests/test_format.c checks every code
 * against the parser's sizes. Header-only (static inline, no other include):
 * a lookup is one load. */
#ifndef PYXBUF_FORMAT_CODES_H
#define PYXBUF_FORMAT_CODES_H

#include <stddef.h>
#include <stdint.h>

/* What a scalar is; the rows of the table. The kinds are numbered as
 * DLPack's type codes (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLComplex 5, kDLBool
 * 6; bridges/dlpack.h asserts it), so that DLPack's import, on pyxbuf_get's
 * hot path, takes a code for its kind without a lookup; row 3 (DLPack's
 * opaque handles) is PYXBUF__KIND_NONE, row 4 (its bfloat16) is empty too. */
typedef enum pyxbuf__kind {
    PYXBUF__KIND_INT = 0,     /* signed integer */
    PYXBUF__KIND_UINT = 1,    /* unsigned integer */
    PYXBUF__KIND_FLOAT = 2,   /* IEEE binary floating point */
    PYXBUF__KIND_NONE = 3,    /* none of these: no code for any size */
    PYXBUF__KIND_COMPLEX = 5, /* two floats */
    PYXBUF__KIND_BOOL = 6,
    PYXBUF__NKINDS = 7
} pyxbuf__kind;

/* The table's column of a size in bits (8, 16, 32, 64, 128), or -1. */
static inline int pyxbuf__code_column_bits(int64_t bits) {
    switch (bits) {
    case 8: return 0;
    case 16: return 1;
    case 32: return 2;
    case 64: return 3;
    case 128: return 4;
    default: return -1;
    }
}

/* The struct code of a `kind` scalar in `column` (>= 0), or NULL. */
static inline const char *pyxbuf__struct_code_at(pyxbuf__kind kind, int column) {
    static const char *const CODES[PYXBUF__NKINDS][5] = {
        /* Columns: 1, 2, 4, 8, 16 bytes. */
        [PYXBUF__KIND_INT] = {"b", "h", "i", "q", NULL},
        [PYXBUF__KIND_UINT] = {"B", "H", "I", "Q", NULL},
        [PYXBUF__KIND_FLOAT] = {NULL, "e", "f", "d", NULL},
        [PYXBUF__KIND_COMPLEX] = {NULL, NULL, NULL, "Zf", "Zd"},
        [PYXBUF__KIND_BOOL] = {"?", NULL, NULL, NULL, NULL},
    };
    return CODES[kind][column];
}

/* The struct code of a `kind` scalar of `size` bytes, or NULL. */
static inline const char *pyxbuf__struct_code(pyxbuf__kind kind, int64_t size) {
    int column = size > 0 && size <= 16 ? pyxbuf__code_column_bits(size * 8) : -1;
    return column < 0 ? NULL : pyxbuf__struct_code_at(kind, column);
}

/* The kind of a struct code (of its components, after 'Z'): the table's
 * codes and the platform-sized integers 'l' 'n' 'L' 'N'; PYXBUF__KIND_NONE
 * for the rest, long double 'g' among them. */
static inline pyxbuf__kind pyxbuf__struct_code_kind(int code) {
    switch (code) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': return PYXBUF__KIND_INT;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': return PYXBUF__KIND_UINT;
    case 'e': case 'f': case 'd': return PYXBUF__KIND_FLOAT;
    case '?': return PYXBUF__KIND_BOOL;
    default: return PYXBUF__KIND_NONE;
    }
}

/* pyxbuf__struct_code, and C's long double where the table has no code for
 * the size: 'g' (a float) or "Zg" (a complex) when the size is this
 * platform's long double's and no standard float has it. For producers in
 * native byte order whose types are C's. */
static inline const char *pyxbuf__native_struct_code(pyxbuf__kind kind, int64_t size) {
    const char *code = pyxbuf__struct_code(kind, size);
    if (code != NULL) return code;
    if (kind == PYXBUF__KIND_FLOAT && size == (int64_t)sizeof(long double) && size > 8)
        return "g";
    if (kind == PYXBUF__KIND_COMPLEX && size == 2 * (int64_t)sizeof(long double) && size > 16)
        return "Zg";
    return NULL;
}

#endif
