/* tables.c -- the type-code tables format.h declares: every code's sizes
 * and flags, and the offsets of the single scalars' shared nodes (parse.c),
 * all from one list (PYXBUF__CODE_LIST). */
#include "format/format.h"

#define CODE_ENTRY(arg, name, ch, nsize, nalign, ssize, fl)                                        \
    [ch] = {(uint8_t)(nsize), (uint8_t)(nalign), (uint8_t)(ssize), PYXBUF__CI_VALID | (fl)},
const pyxbuf__fmt_code pyxbuf__fmt_codes[128] = {PYXBUF__CODE_LIST(CODE_ENTRY, 0)};

_Static_assert(PYXBUF__NMODES * PYXBUF__MODE_BYTES < 65536, "single-scalar offsets fit 16 bits");
#define CODE_AT_OF(arg, name, ch, nsize, nalign, ssize, fl)                                        \
    [ch] = (uint16_t)(PYXBUF__SLOT_##name * PYXBUF__PAIR_BYTES),
const uint16_t pyxbuf__fmt_code_at[256] = {PYXBUF__CODE_LIST(CODE_AT_OF, 0)};
#define MODE_AT_OF(i, m) [m] = (uint16_t)((i) * PYXBUF__MODE_BYTES + 1),
const uint16_t pyxbuf__fmt_mode_at[256] = {PYXBUF__MODE_LIST(MODE_AT_OF)};
