/* dtypes.c -- the custom-type registry: the sizes of custom types
 * ("[id$payload]") a consumer knows, ml_dtypes' built in, others added with
 * pyxbuf_dtype_register (a whole key "id$payload", or "id$" for every
 * payload of the id, optionally sized by a function of the payload). */
#include "format/format.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct registered_dtype {
    char *key;
    size_t key_len;
    int64_t itemsize;
    int64_t alignment;
    int (*size_fn)(const char *, size_t, int64_t *, int64_t *, void *);
    void *ctx;
} registered_dtype;

/* Process-wide (per copy of the library); parsing may run without the GIL on
 * several threads, so every access holds the mutex. */
static pthread_mutex_t dtype_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static registered_dtype *registry;
static size_t registry_len, registry_cap;
/* registry_len, readable without the lock: while it is 0 a lookup needs only
 * the built-in table. */
static atomic_size_t registry_used;
atomic_uint_fast64_t pyxbuf__dtype_registry_generation;

/* ml_dtypes' types, known to every consumer: ml_dtypes stores each sub-byte
 * type in one byte. Each is kept as its whole format, "[id$payload]": a
 * string that lives as long as the process, which views may point at
 * (pyxbuf__dtype_builtin_format). */
typedef struct builtin_dtype {
    const char *format;
    uint8_t itemsize, alignment;
} builtin_dtype;

static const builtin_dtype BUILTIN_DTYPES[] = {
    {"[ml_dtypes$bfloat16]", 2, 2},        {"[ml_dtypes$float8_e4m3fn]", 1, 1},
    {"[ml_dtypes$float8_e5m2]", 1, 1},     {"[ml_dtypes$float8_e4m3fnuz]", 1, 1},
    {"[ml_dtypes$float8_e5m2fnuz]", 1, 1}, {"[ml_dtypes$float8_e4m3b11fnuz]", 1, 1},
    {"[ml_dtypes$float8_e3m4]", 1, 1},     {"[ml_dtypes$float8_e4m3]", 1, 1},
    {"[ml_dtypes$float8_e8m0fnu]", 1, 1},  {"[ml_dtypes$float6_e2m3fn]", 1, 1},
    {"[ml_dtypes$float6_e3m2fn]", 1, 1},   {"[ml_dtypes$float4_e2m1fn]", 1, 1},
    {"[ml_dtypes$int2]", 1, 1},            {"[ml_dtypes$uint2]", 1, 1},
    {"[ml_dtypes$int4]", 1, 1},            {"[ml_dtypes$uint4]", 1, 1},
    /* also in ml_dtypes 0.5+: complex of bfloat16 / float16, 1-bit ints */
    {"[ml_dtypes$bcomplex32]", 4, 2},      {"[ml_dtypes$complex32]", 4, 2},
    {"[ml_dtypes$int1]", 1, 1},            {"[ml_dtypes$uint1]", 1, 1},
};

static bool key_eq(const char *key, size_t key_len, const char *s, size_t n) {
    return key_len == n && memcmp(key, s, n) == 0;
}

/* The built-in entry whose key ("id$payload", the format without its
 * brackets) is alt[0..len), or NULL. */
static const builtin_dtype *builtin_find(const char *alt, size_t len) {
    for (size_t b = 0; b < sizeof BUILTIN_DTYPES / sizeof *BUILTIN_DTYPES; b++) {
        const char *k = BUILTIN_DTYPES[b].format + 1;
        if (strncmp(k, alt, len) == 0 && k[len] == ']' && k[len + 1] == '\0')
            return &BUILTIN_DTYPES[b];
    }
    return NULL;
}

static bool builtin_lookup(const char *alt, size_t len, int64_t *size, int64_t *align) {
    const builtin_dtype *b = builtin_find(alt, len);
    if (b == NULL) return false;
    *size = b->itemsize;
    *align = b->alignment;
    return true;
}

const char *pyxbuf__dtype_builtin_format(const char *key, size_t len) {
    const builtin_dtype *b = builtin_find(key, len);
    return b != NULL ? b->format : NULL;
}

static ptrdiff_t registry_find(const char *key, size_t n) {
    for (size_t i = 0; i < registry_len; i++)
        if (key_eq(registry[i].key, registry[i].key_len, key, n)) return (ptrdiff_t)i;
    return -1;
}

/* The entry for "id$payload" (alt, len) into *hit: the whole key, else the
 * built-in table (1: *size and *align set, no entry), else "id$". */
static int registry_entry(const char *alt, size_t len, size_t id_len, registered_dtype *hit,
                          int64_t *size, int64_t *align) {
    pthread_mutex_lock(&dtype_registry_mutex);
    ptrdiff_t i = registry_find(alt, len);
    if (i < 0 && builtin_lookup(alt, len, size, align)) {
        pthread_mutex_unlock(&dtype_registry_mutex);
        return 1;
    }
    if (i < 0) i = registry_find(alt, id_len + 1); /* "id$": every payload of the id */
    if (i >= 0) *hit = registry[i];
    pthread_mutex_unlock(&dtype_registry_mutex);
    return i >= 0 ? 0 : -1;
}

/* size_fn runs outside the lock so that it may use the registry itself. */
bool pyxbuf__dtype_lookup(const char *alt, size_t len, size_t id_len, int64_t *size,
                          int64_t *align) {
    if (atomic_load_explicit(&registry_used, memory_order_acquire) == 0)
        return builtin_lookup(alt, len, size, align);
    registered_dtype hit = {0};
    int rc = registry_entry(alt, len, id_len, &hit, size, align);
    if (rc != 0) return rc > 0;
    if (hit.size_fn == NULL) {
        *size = hit.itemsize;
        *align = hit.alignment;
        return true;
    }
    int64_t s = -1, a = 1;
    if (hit.size_fn(alt + id_len + 1, len - id_len - 1, &s, &a, hit.ctx) < 0) return false;
    if (s < 0 || !pyxbuf__fmt_is_pow2(a)) return false;
    *size = s;
    *align = a;
    return true;
}

/* Checks "id$payload" or "id$": returns the id length, or -1. */
static ptrdiff_t key_id_len(const char *key) {
    const char *dollar = strchr(key, '$');
    if (dollar == NULL || dollar == key) return -1;
    if (pyxbuf__custom_type_bad_char(key, (size_t)(dollar - key)) != NULL ||
        pyxbuf__custom_type_bad_char(dollar + 1, strlen(dollar + 1)) != NULL)
        return -1;
    return dollar - key;
}

/* A copy of the spec's entry (its key on the heap), or PYXBUF_EINVAL /
 * PYXBUF_ENOMEM. */
static int entry_of_spec(const pyxbuf_dtype_spec *spec, registered_dtype *e) {
    if (spec == NULL || spec->size < offsetof(pyxbuf_dtype_spec, reserved) || spec->key == NULL)
        return PYXBUF_EINVAL;
    ptrdiff_t id_len = key_id_len(spec->key);
    if (id_len < 0 || pyxbuf__fmt_reserved_id(spec->key, (size_t)id_len)) return PYXBUF_EINVAL;
    if (spec->size_fn == NULL && (spec->itemsize < 0 || !pyxbuf__fmt_is_pow2(spec->alignment)))
        return PYXBUF_EINVAL;
    size_t n = strlen(spec->key);
    char *key = malloc(n + 1);
    if (key == NULL) return PYXBUF_ENOMEM;
    memcpy(key, spec->key, n + 1);
    *e = (registered_dtype){key, n, spec->itemsize, spec->alignment, spec->size_fn, spec->ctx};
    return PYXBUF_OK;
}

/* Appends `e` (the mutex held): false when out of memory. */
static bool registry_append(const registered_dtype *e) {
    if (registry_len == registry_cap) {
        size_t cap = registry_cap ? registry_cap * 2 : 8;
        registered_dtype *grown = realloc(registry, cap * sizeof *grown);
        if (grown == NULL) return false;
        registry = grown;
        registry_cap = cap;
    }
    registry[registry_len++] = *e;
    return true;
}

/* The registry changed (the mutex held): lookups and caches see it. */
static void registry_changed(void) {
    atomic_store_explicit(&registry_used, registry_len, memory_order_release);
    atomic_fetch_add(&pyxbuf__dtype_registry_generation, 1);
}

int pyxbuf_dtype_register(const pyxbuf_dtype_spec *spec) {
    registered_dtype e;
    int rc = entry_of_spec(spec, &e);
    if (rc < 0) return rc;
    pthread_mutex_lock(&dtype_registry_mutex);
    ptrdiff_t i = registry_find(e.key, e.key_len);
    if (i >= 0) {
        free(registry[i].key);
        registry[i] = e;
        registry_changed(); /* a size may have changed: caches keyed by generation drop it */
    } else if (registry_append(&e)) {
        registry_changed();
    } else {
        free(e.key);
        rc = PYXBUF_ENOMEM;
    }
    pthread_mutex_unlock(&dtype_registry_mutex);
    return rc;
}

int pyxbuf_dtype_unregister(const char *key) {
    if (key == NULL) return PYXBUF_EINVAL;
    pthread_mutex_lock(&dtype_registry_mutex);
    ptrdiff_t i = registry_find(key, strlen(key));
    if (i >= 0) {
        free(registry[i].key);
        registry[i] = registry[--registry_len];
        registry_changed();
    }
    pthread_mutex_unlock(&dtype_registry_mutex);
    return i >= 0 ? PYXBUF_OK : PYXBUF_EINVAL;
}
