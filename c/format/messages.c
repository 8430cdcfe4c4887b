/* messages.c -- the parser's error messages: each quotes the format (or the
 * builder's custom type), says where, what was found and what to write
 * instead. */
#include "format/format.h"
#include "base/fixes.h"

#include <stdio.h>

/* Quote the source for a message: whole if short, else the start and the
 * region around `at`; non-printable bytes as \xNN. */
static void quote_source(const pyxbuf__fmt_parser *p, const char *at, char *buf, size_t cap) {
    size_t len = (size_t)(p->src_end - p->src), used = 0;
    size_t pos = at ? (size_t)(at - p->src) : 0;
    size_t head = len, tail_from = len;
    if (len > 160) {
        head = pos < 110 ? 130 : 40;
        tail_from = pos < 110 ? len : pos - 40;
    }
    for (size_t i = 0; i < len && used + 8 < cap; i++) {
        if (i == head && i < tail_from) {
            used += (size_t)snprintf(buf + used, cap - used, "...");
            i = tail_from - 1;
            continue;
        }
        if (i >= tail_from + 80) {
            used += (size_t)snprintf(buf + used, cap - used, "...");
            break;
        }
        unsigned char c = (unsigned char)p->src[i];
        if (c >= 0x20 && c < 0x7f) buf[used++] = (char)c;
        else used += (size_t)snprintf(buf + used, cap - used, "\\x%02X", c);
    }
    buf[used] = '\0';
}

/* Fill p->err: "<label> '<source>'<sep><what>". Returns `code`. */
static int report(pyxbuf__fmt_parser *p, int32_t code, const char *at, const char *sep,
                  const char *what) {
    char quoted[256];
    if (p->src == p->src_end) /* the builder: no string to quote */
        return pyxbuf__error(p->err, code, -1, "%s: %s", p->label, what);
    quote_source(p, at, quoted, sizeof quoted);
    return pyxbuf__error(p->err, code, at ? (int64_t)(at - p->src) : -1, "%s '%s'%s%s", p->label,
                         quoted, sep, what);
}

int pyxbuf__fmt_fail(pyxbuf__fmt_parser *p, int32_t code, const char *at, const char *fmt, ...) {
    if (p->err == NULL) return code;
    char what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return report(p, code, at, ": ", what);
}

int pyxbuf__fmt_fail_nomem(pyxbuf__fmt_parser *p) {
    return pyxbuf__fmt_fail(p, PYXBUF_ENOMEM, NULL,
                            "out of memory while storing the parsed format");
}

const char *pyxbuf__fmt_char_desc(int c, char buf[16]) {
    if (c >= 0x20 && c < 0x7f) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02X", (unsigned)(unsigned char)c);
    return buf;
}

/* The item ends (c is 0, '}', ']' or ')') where its type code should be:
 * names what came without one, or the unbalanced closer. */
static int missing_code(pyxbuf__fmt_parser *p, const pyxbuf__fmt_item *it, bool had_count,
                        bool had_prefix, int c) {
    const char *at = p->s;
    if (it->flags & PYXBUF_FMTN_COMPLEX)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at - 1,
                                "'Z' at position %lld must be followed by 'f', 'd', 'g' or a "
                                "custom type",
                                PYXBUF__POS(p, at - 1));
    if (had_count)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, it->count_at,
                                "count at position %lld is not followed by a type code",
                                PYXBUF__POS(p, it->count_at));
    const char *what = (it->flags & PYXBUF_FMTN_POINTER) ? "'&' in the item"
                       : it->ndim                        ? "sub-array shape"
                                                         : NULL;
    if (what != NULL)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, it->start,
                                "%s at position %lld is not followed by a type code", what,
                                PYXBUF__POS(p, it->start));
    if (had_prefix)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, it->start,
                                "byte-order prefix '%c' at position %lld is not followed by a "
                                "type code",
                                p->mode, PYXBUF__POS(p, it->start));
    if (c == ')')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at, "unbalanced ')' at position %lld",
                                PYXBUF__POS(p, at));
    if (c == ']')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                "unbalanced ']' at position %lld: no custom type is open",
                                PYXBUF__POS(p, at));
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                            "unbalanced '}' at position %lld: no T{ struct is open",
                            PYXBUF__POS(p, at));
}

/* A character in the wrong place of an item: ':', '(', '&', '{'. */
static int misplaced_char(pyxbuf__fmt_parser *p, bool had_count, int c) {
    const char *at = p->s;
    if (c == ':')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                "name at position %lld does not follow an item: names come right "
                                "after their item ('i:x:')",
                                PYXBUF__POS(p, at));
    if (c == '(' && had_count)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                "sub-array shape at position %lld after a count: write the shape "
                                "first ('(2)3f')",
                                PYXBUF__POS(p, at));
    if (c == '{')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                "'{' at position %lld without 'T' before it: structs are written "
                                "T{...}",
                                PYXBUF__POS(p, at));
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at, "unexpected '%c' at position %lld", c,
                            PYXBUF__POS(p, at));
}

/* A character where a type code should be that is none. */
static int unknown_code(pyxbuf__fmt_parser *p, const pyxbuf__fmt_item *it, bool had_count, int c) {
    char cb[16];
    const char *at = p->s;
    if (it->flags & PYXBUF_FMTN_COMPLEX)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at - 1,
                                "'Z' at position %lld must be followed by 'f', 'd', 'g' or a "
                                "custom type, not %s",
                                PYXBUF__POS(p, at - 1), pyxbuf__fmt_char_desc(c, cb));
    if (pyxbuf__fmt_is_ws(c) && (had_count || it->ndim || (it->flags & PYXBUF_FMTN_POINTER)))
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                "whitespace at position %lld inside an item: a count, shape or "
                                "'&' must be followed directly by its type code",
                                PYXBUF__POS(p, at));
    if (c == ':' || c == '(' || c == '&' || c == '{') return misplaced_char(p, had_count, c);
    if (c == 't' || c == 'X')
        return pyxbuf__fmt_fail(p, PYXBUF_EUNSUPPORTED, at,
                                "PEP 3118 %s '%c' at position %lld is not supported",
                                c == 't' ? "bit field" : "function pointer", c, PYXBUF__POS(p, at));
    if (c >= 0x80)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                                "%s at position %lld is not ASCII: type codes are ASCII (only "
                                "names may hold other bytes)",
                                pyxbuf__fmt_char_desc(c, cb), PYXBUF__POS(p, at));
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, at,
                            "unknown type code %s at position %lld (expected a struct/PEP 3118 "
                            "code such as 'i', 'f', 'd', a T{...} struct or an [id$payload] "
                            "custom type)",
                            pyxbuf__fmt_char_desc(c, cb), PYXBUF__POS(p, at));
}

int pyxbuf__fmt_bad_code(pyxbuf__fmt_parser *p, const pyxbuf__fmt_item *it, bool had_count,
                         bool had_prefix) {
    int c = pyxbuf__fmt_peek(p);
    if (c == 0 || c == '}' || c == ']' || c == ')')
        return missing_code(p, it, had_count, had_prefix, c);
    return unknown_code(p, it, had_count, c);
}

PYXBUF_NOINLINE int pyxbuf__fmt_struct_prefix_check(pyxbuf__fmt_parser *p) {
    if (p->s != p->seq_start)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                "byte-order prefix '%c' at position %lld inside a struct$ "
                                "payload: the struct module takes one only at the start",
                                *p->s, PYXBUF__POS(p, p->s));
    if (*p->s == '^')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                "'^' at position %lld is not a struct-module prefix (struct$ "
                                "payload); use buffer$ for PEP 3118 syntax",
                                PYXBUF__POS(p, p->s));
    /* struct.calcsize("<") is 0, and a struct$ payload means what struct
     * says: a prefix and whitespace alone are the whole (empty) payload. */
    const char *rest = p->s + 1;
    while (rest < p->end && pyxbuf__fmt_is_ws((unsigned char)*rest)) rest++;
    if (rest < p->end) return 0;
    p->mode = (unsigned char)*p->s;
    p->s = p->end;
    return 1;
}

/* What in the item is not struct-module syntax, or NULL. */
static const char *not_struct_syntax(const pyxbuf__fmt_item *it, int c, char cb[16]) {
    const pyxbuf__fmt_code *ci = pyxbuf__fmt_code_of(c);
    if (it->ndim) return "a sub-array shape";
    /* struct has 'Zf' and 'Zd' since 3.15 (aliases of 'F' and 'D') */
    if ((it->flags & PYXBUF_FMTN_COMPLEX) && c != 'f' && c != 'd')
        return c == 'g' ? "'Zg'" : "'Z'";
    if (it->flags & PYXBUF_FMTN_POINTER) return "'&'";
    if (c == 'T') return "a T{} struct";
    if (c == '[') return "a custom type";
    return ci && !(ci->flags & PYXBUF__CI_STRUCT) ? pyxbuf__fmt_char_desc(c, cb) : NULL;
}

int pyxbuf__fmt_struct_only_check(pyxbuf__fmt_parser *p, const pyxbuf__fmt_item *it, int c) {
    char cb[16];
    const char *what = not_struct_syntax(it, c, cb);
    if (what != NULL)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, it->start,
                                "the item at position %lld is not struct-module syntax (%s), but "
                                "the payload of struct$ is a struct format: use buffer$ for PEP "
                                "3118 syntax",
                                PYXBUF__POS(p, it->start), what);
    const pyxbuf__fmt_code *ci = pyxbuf__fmt_code_of(c);
    if (ci && (ci->flags & PYXBUF__CI_NATIVE_ONLY) && p->mode != '@')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                                "'%c' at position %lld has no standard size, so the struct module "
                                "refuses it after '%c'",
                                c, PYXBUF__POS(p, p->s), p->mode);
    return 0;
}

/* "'[' at position N is never closed". */
static int fail_custom_unclosed(pyxbuf__fmt_parser *p, const char *opener) {
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, opener,
                            "'[' at position %lld is never closed: add ']' after the custom type",
                            PYXBUF__POS(p, opener));
}

int pyxbuf__fmt_fail_custom_id(pyxbuf__fmt_parser *p, const char *alt, const char *opener,
                               bool bracketed, bool first) {
    char cb[16];
    int c = pyxbuf__fmt_peek(p);
    if (p->s == alt && (c == ']' || c == ';' || (c == 0 && !bracketed))) {
        if (c == ']' && first)
            return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, opener,
                                    "empty custom type '[]' at position %lld: write [id$payload]",
                                    PYXBUF__POS(p, opener));
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, alt,
                                "empty custom type alternative at position %lld: each "
                                "alternative is id$payload",
                                PYXBUF__POS(p, alt));
    }
    if (c == 0 && bracketed) return fail_custom_unclosed(p, opener);
    if (c == '$')
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, alt,
                                "empty custom type id before '$' at position %lld",
                                PYXBUF__POS(p, alt));
    if (c == ']' || c == ';' || c == 0)
        return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, alt,
                                "custom type '%.*s' at position %lld has no '$': write "
                                "id$payload (e.g. 'ml_dtypes$bfloat16')",
                                (int)(p->s - alt > 60 ? 60 : p->s - alt), alt, PYXBUF__POS(p, alt));
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                            "%s at position %lld is not allowed in a custom type id (printable "
                            "ASCII except ']', ';' and '$', then '$')",
                            pyxbuf__fmt_char_desc(c, cb), PYXBUF__POS(p, p->s));
}

int pyxbuf__fmt_fail_custom_payload(pyxbuf__fmt_parser *p, const char *alt, const char *nested) {
    char cb[16];
    if (nested != NULL && *p->s == '$') return pyxbuf__fmt_fail_nested_custom(p, alt, nested);
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                            "%s at position %lld is not allowed in a custom type payload "
                            "(printable ASCII except ']', ';' and '$')",
                            pyxbuf__fmt_char_desc((unsigned char)*p->s, cb), PYXBUF__POS(p, p->s));
}

int pyxbuf__fmt_fail_custom_end(pyxbuf__fmt_parser *p, const char *opener, bool bracketed) {
    if (bracketed) return fail_custom_unclosed(p, opener);
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, p->s,
                            "']' at position %lld is not allowed in a custom type payload",
                            PYXBUF__POS(p, p->s));
}

/* A '$', ']' or ';' inside a struct$/buffer$ payload after a '[': someone
 * nested a custom type, which the character rules make impossible. */
int pyxbuf__fmt_fail_nested_custom(pyxbuf__fmt_parser *p, const char *alt, const char *open) {
    return pyxbuf__fmt_fail(p, PYXBUF_EFORMAT, open,
                            "custom type at position %lld inside a %.6s$ payload: custom types "
                            "are not allowed in %.6s$ (a payload cannot hold ']', ';' or '$'); "
                            "put the custom type outside, or list it as another alternative",
                            PYXBUF__POS(p, open), alt, alt);
}

int pyxbuf__fmt_fail_opaque(pyxbuf__fmt_parser *p) {
    if (p->err == NULL) return PYXBUF_EUNSUPPORTED;
    const char *alts = p->opaque_alts;
    int32_t n = p->opaque_len;
    const char *semi = memchr(alts, ';', (size_t)n);
    int32_t first = semi ? (int32_t)(semi - alts) : n;
    int shown = first > 80 ? 80 : first; /* the message must fit 480 bytes */
    char what[320];
    snprintf(what, sizeof what,
             "uses custom type '%.*s%s'%s which this consumer does not support (at position "
             "%lld); %s",
             shown, alts, shown < first ? "..." : "",
             semi ? " (nor any of its alternatives)" : "", PYXBUF__POS(p, p->opaque_at),
             pyxbuf__fix(PYXBUF__FIX_REGISTER_DTYPE));
    return report(p, PYXBUF_EUNSUPPORTED, p->opaque_at, " ", what);
}
