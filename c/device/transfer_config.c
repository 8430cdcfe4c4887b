/* transfer_config.c -- how large host <-> device copies are staged: the one
 * configuration (defaults, the environment, pyxbuf_transfer_config_get/set),
 * read by staging.c and pinned_pool.c. Under one lock; readers take a copy. */

#include "device/device.h"
#include "base/platform.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pyxbuf_transfer_config config;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static int huge_pages = 0; /* PYXBUF_STAGING_HUGE_PAGES=1: the madvise hint */

/* Page-locked memory is taken from the kernel's free pool: a small share of
 * RAM by default (1/16, between 256 MiB and 16 GiB). */
static uint64_t default_pool_cap(void) {
    uint64_t ram = pyxbuf__physical_memory();
    if (ram == 0) ram = (uint64_t)4 << 30;
    uint64_t cap = ram / 16;
    if (cap < ((uint64_t)256 << 20)) cap = (uint64_t)256 << 20;
    if (cap > ((uint64_t)16 << 30)) cap = (uint64_t)16 << 30;
    return cap;
}

/* Fill threads: one memcpy thread moves about 5 GB/s between pageable and
 * page-locked memory (and faults new pages in at about 1), so reaching a
 * PCIe 5 link takes a dozen; never more than the cores there are. Measured
 * on an H200 host (bench/results/2026-11-27-h200-staging.md). */
static int32_t default_threads(void) {
    long cores = pyxbuf__cpu_count();
    return (int32_t)(cores < 16 ? cores : 16);
}

/* "64M", "1G", "4096": bytes, or 0 when malformed (the default stays). */
static uint64_t parse_bytes(const char *text) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text) return 0;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0' || v > (UINT64_MAX >> shift)) return 0;
    return (uint64_t)v << shift;
}

static void env_bytes(const char *name, uint64_t *field) {
    const char *v = getenv(name);
    uint64_t n = v ? parse_bytes(v) : 0;
    if (n != 0) *field = n;
}

static void load_config(void) {
    config = (pyxbuf_transfer_config){
        .size = (uint32_t)sizeof config,
        .enabled = 1,
        .threads = default_threads(),
        .buffers = 4,
        .threshold = (uint64_t)8 << 20,
        .chunk = (uint64_t)16 << 20,
        .pool_cap = default_pool_cap(),
    };
    const char *on = getenv("PYXBUF_STAGING");
    if (on != NULL && (strcmp(on, "0") == 0 || strcmp(on, "off") == 0)) config.enabled = 0;
    env_bytes("PYXBUF_STAGING_THRESHOLD", &config.threshold);
    env_bytes("PYXBUF_STAGING_CHUNK", &config.chunk);
    env_bytes("PYXBUF_PINNED_POOL_CAP", &config.pool_cap);
    const char *t = getenv("PYXBUF_STAGING_THREADS");
    long threads = t ? strtol(t, NULL, 10) : 0;
    if (threads >= 1 && threads <= PYXBUF__STAGING_MAX_THREADS) config.threads = (int32_t)threads;
    if (config.chunk < PYXBUF__STAGING_MIN_CHUNK) config.chunk = PYXBUF__STAGING_MIN_CHUNK;
    const char *huge = getenv("PYXBUF_STAGING_HUGE_PAGES");
    huge_pages = huge != NULL && strcmp(huge, "1") == 0;
}

int pyxbuf__staging_huge_pages(void) {
    pthread_once(&config_once, load_config);
    return huge_pages;
}

void pyxbuf__transfer_config(pyxbuf_transfer_config *out) {
    pthread_once(&config_once, load_config);
    pthread_mutex_lock(&config_lock);
    *out = config;
    pthread_mutex_unlock(&config_lock);
}

void pyxbuf_transfer_config_get(pyxbuf_transfer_config *out) {
    pyxbuf_transfer_config c;
    pyxbuf__transfer_config(&c);
    uint32_t n = out->size >= sizeof c || out->size == 0 ? (uint32_t)sizeof c : out->size;
    memcpy(out, &c, n);
    out->size = n;
}

static int bad_field(pyxbuf_error *err, const char *field, long long value, const char *range) {
    return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                         "pyxbuf_transfer_config_set: %s is %lld; it must be %s", field, value,
                         range);
}

int pyxbuf_transfer_config_set(const pyxbuf_transfer_config *in, pyxbuf_error *err) {
    if (in == NULL || in->size < offsetof(pyxbuf_transfer_config, reserved))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_transfer_config_set: config is NULL or its size %u is too "
                             "small; start from pyxbuf_transfer_config_get",
                             in ? (unsigned)in->size : 0u);
    if (in->threads < 1 || in->threads > PYXBUF__STAGING_MAX_THREADS)
        return bad_field(err, "threads", in->threads, "1..64");
    if (in->buffers < 2 || in->buffers > PYXBUF__STAGING_MAX_BUFFERS)
        return bad_field(err, "buffers", in->buffers, "2..16");
    if (in->chunk < PYXBUF__STAGING_MIN_CHUNK)
        return bad_field(err, "chunk", (long long)in->chunk, "at least 65536 bytes");
    if (in->pool_cap < in->chunk * (uint64_t)in->buffers && in->enabled)
        return bad_field(err, "pool_cap", (long long)in->pool_cap,
                         "at least chunk x buffers (or set enabled = 0)");
    pthread_once(&config_once, load_config);
    pthread_mutex_lock(&config_lock);
    config = *in;
    config.size = (uint32_t)sizeof config;
    memset(config.reserved, 0, sizeof config.reserved);
    pthread_mutex_unlock(&config_lock);
    return 0;
}
