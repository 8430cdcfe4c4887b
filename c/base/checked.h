/* checked.h -- the one overflow-checked arithmetic of libpyxbuf, for sizes,
 * strides, offsets and counts. Each stores a op b in *r and is 1 when the
 * result fits *r's type, 0 on overflow (*r is then not to be used).
 *
 * They are the compilers' checked builtins (GCC 5+, Clang 3.8+), type-generic
 * and one instruction with a flag test: no division on the hot paths that
 * walk a producer's shape and strides. */
#ifndef PYXBUF_CHECKED_H
#define PYXBUF_CHECKED_H

#if !defined(__GNUC__) && !defined(__clang__)
#error "libpyxbuf needs GCC or Clang (__builtin_mul_overflow and friends)"
#endif

#define PYXBUF__MUL_OK(a, b, r) (!__builtin_mul_overflow((a), (b), (r)))
#define PYXBUF__ADD_OK(a, b, r) (!__builtin_add_overflow((a), (b), (r)))
#define PYXBUF__SUB_OK(a, b, r) (!__builtin_sub_overflow((a), (b), (r)))

#endif
