/* transfer_config.c -- how large host <-> device copies are staged: this
 * copy's configuration (defaults, the environment, get and set), read through
 * the process's transfer engine (engine.c) and by pinned_pool.c. Under one
 * lock; readers take a copy. */

#include "device/device.h"
#include "base/platform.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pyxbuf_transfer_config config;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;

#if PYXBUF_HAVE_FORK
/* A child must not start with the lock held by a thread it does not have:
 * registered with the configuration's loading, before the lock is taken. */
static void before_fork(void) { pthread_mutex_lock(&config_lock); }
static void after_fork(void) { pthread_mutex_unlock(&config_lock); }
static void register_fork_rules(void) { pthread_atfork(before_fork, after_fork, after_fork); }
#else
static void register_fork_rules(void) {}
#endif
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

/* Whether `c` is a configuration the machine can mean, else PYXBUF_EINVAL
 * naming the field as `who` calls it (the C function, or an environment
 * variable). Every bound keeps the staging arithmetic (chunk counts, size
 * classes, chunk x buffers) far from wrapping. */
static int bad_field(pyxbuf_error *err, const char *who, const char *field, uint64_t value,
                     const char *range) {
    return pyxbuf__error(err, PYXBUF_EINVAL, -1, "%s: %s is %llu; it must be %s", who, field,
                         (unsigned long long)value, range);
}

static int bad_signed(pyxbuf_error *err, const char *who, const char *field, int64_t value,
                      const char *range) {
    return pyxbuf__error(err, PYXBUF_EINVAL, -1, "%s: %s is %lld; it must be %s", who, field,
                         (long long)value, range);
}

/* Page-locked memory beyond the machine's RAM cannot be had. */
static uint64_t max_pool_cap(void) {
    uint64_t ram = pyxbuf__physical_memory();
    return ram != 0 ? ram : (uint64_t)1 << 47;
}

static int check_config(const pyxbuf_transfer_config *c, const char *who, pyxbuf_error *err) {
    char range[96];
    if (c->enabled != 0 && c->enabled != 1)
        return bad_signed(err, who, "enabled", c->enabled, "0 or 1");
    if (c->threads < 1 || c->threads > PYXBUF__STAGING_MAX_THREADS)
        return bad_signed(err, who, "threads", c->threads, "1..64");
    if (c->buffers < 2 || c->buffers > PYXBUF__STAGING_MAX_BUFFERS)
        return bad_signed(err, who, "buffers", c->buffers, "2..16");
    if (c->chunk < PYXBUF__STAGING_MIN_CHUNK || c->chunk > PYXBUF__STAGING_MAX_CHUNK)
        return bad_field(err, who, "chunk", c->chunk, "65536..1073741824 bytes (64 KiB to 1 GiB)");
    if (c->threshold > (uint64_t)INT64_MAX)
        return bad_field(err, who, "threshold", c->threshold, "at most 2^63 - 1 bytes");
    uint64_t cap = max_pool_cap();
    snprintf(range, sizeof range, "at most %llu bytes (this machine's memory)",
             (unsigned long long)cap);
    if (c->pool_cap > cap) return bad_field(err, who, "pool_cap", c->pool_cap, range);
    /* chunk <= 1 GiB and buffers <= 16: the product is below 2^35 */
    if (c->enabled && c->pool_cap < c->chunk * (uint64_t)c->buffers)
        return bad_field(err, who, "pool_cap", c->pool_cap,
                         "at least chunk x buffers (or set enabled = 0)");
    /* "off" is the non-zero value, so a zeroed field keeps the pool on. */
    if (c->device_pool_off != 0 && c->device_pool_off != 1)
        return bad_signed(err, who, "device_pool_off", c->device_pool_off, "0 or 1");
    if (c->device_pool_release_threshold > (uint64_t)INT64_MAX)
        return bad_field(err, who, "device_pool_release_threshold",
                         c->device_pool_release_threshold,
                         "at most 2^63 - 1 bytes (0: the default, 256 MiB)");
    if (c->device_pool_shareable != 0 && c->device_pool_shareable != 1)
        return bad_signed(err, who, "device_pool_shareable", c->device_pool_shareable, "0 or 1");
    return 0;
}

/* "64M", "1G", "4096": 0 and *out, or -1 when malformed or too large. */
static int parse_bytes(const char *text, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (*text < '0' || *text > '9') return -1;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text) return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0' || v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* What the environment says is wrong, kept for every use until
 * pyxbuf_transfer_config_set replaces the configuration. */
static pyxbuf_error env_error;
static int env_bad;

static void env_refused(const char *name, const char *value, const char *why) {
    if (env_bad) return; /* the first bad variable is the one named */
    env_bad = 1;
    pyxbuf__error(&env_error, PYXBUF_EINVAL, -1,
                  "the environment variable %s is '%.64s': %s; fix or unset it, or set the "
                  "configuration (pyxbuf.transfer_config(...), TransferConfig::apply, "
                  "pyxbuf_transfer_config_set)",
                  name, value, why);
}

static void env_bytes(const char *name, uint64_t *field) {
    const char *v = getenv(name);
    if (v != NULL && parse_bytes(v, field) < 0)
        env_refused(name, v, "it must be a byte count (suffixes K, M, G)");
}

static void env_threads(int32_t *field) {
    const char *v = getenv("PYXBUF_STAGING_THREADS");
    char *end = NULL;
    long threads = v ? strtol(v, &end, 10) : 0;
    if (v == NULL) return;
    if (end == v || *end != '\0' || threads < 1 || threads > PYXBUF__STAGING_MAX_THREADS)
        env_refused("PYXBUF_STAGING_THREADS", v, "it must be a whole number in 1..64");
    else
        *field = (int32_t)threads;
}

/* A switch: 1 or 0 into *field; anything but these words is refused. */
static void env_switch(const char *name, int *field) {
    const char *v = getenv(name);
    if (v == NULL) return;
    if (strcmp(v, "1") == 0 || strcmp(v, "on") == 0) *field = 1;
    else if (strcmp(v, "0") == 0 || strcmp(v, "off") == 0) *field = 0;
    else env_refused(name, v, "it must be 1, on, 0 or off");
}

/* PYXBUF_DEVICE_POOL: a switch, or "shareable" (the pool on, and shareable). */
static void env_device_pool(pyxbuf_transfer_config *c) {
    const char *v = getenv("PYXBUF_DEVICE_POOL");
    if (v != NULL && strcmp(v, "shareable") == 0) {
        c->device_pool_shareable = 1;
        return;
    }
    int device_pool = 1;
    if (v != NULL && strcmp(v, "1") && strcmp(v, "on") && strcmp(v, "0") && strcmp(v, "off")) {
        env_refused("PYXBUF_DEVICE_POOL", v, "it must be 1, on, 0, off or shareable");
        return;
    }
    env_switch("PYXBUF_DEVICE_POOL", &device_pool);
    c->device_pool_off = !device_pool;
}

/* Which variable set a field, for the message of a value out of range. */
static const char *env_name_of(const char *message) {
    static const char *const names[][2] = {
        {"chunk", "PYXBUF_STAGING_CHUNK"}, {"threshold", "PYXBUF_STAGING_THRESHOLD"},
        {"pool_cap", "PYXBUF_PINNED_POOL_CAP"}, {"threads", "PYXBUF_STAGING_THREADS"},
        {"device_pool_release_threshold", "PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char field[32];
        snprintf(field, sizeof field, ": %s is", names[i][0]);
        if (strstr(message, field) != NULL) return names[i][1];
    }
    return "PYXBUF_STAGING";
}

static pyxbuf_transfer_config defaults(void) {
    return (pyxbuf_transfer_config){
        .size = (uint32_t)sizeof config,
        .enabled = 1,
        .threads = default_threads(),
        .buffers = 4,
        .threshold = (uint64_t)2 << 20,
        .chunk = (uint64_t)16 << 20,
        .pool_cap = default_pool_cap(),
        .device_pool_off = 0,
        .device_pool_release_threshold = PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD_DEFAULT,
    };
}

/* The environment, checked as pyxbuf_transfer_config_set checks its
 * argument; when any of it is refused the defaults stay in force and every
 * use reports the variable (env_error). */
static void load_config(void) {
    register_fork_rules(); /* once: load_config runs under pthread_once */
    pyxbuf_transfer_config c = defaults();
    int enabled = 1;
    env_switch("PYXBUF_STAGING", &enabled);
    c.enabled = enabled;
    env_bytes("PYXBUF_STAGING_THRESHOLD", &c.threshold);
    env_bytes("PYXBUF_STAGING_CHUNK", &c.chunk);
    env_bytes("PYXBUF_PINNED_POOL_CAP", &c.pool_cap);
    env_threads(&c.threads);
    env_switch("PYXBUF_STAGING_HUGE_PAGES", &huge_pages);
    env_device_pool(&c);
    env_bytes("PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD", &c.device_pool_release_threshold);
    pyxbuf_error why;
    if (!env_bad && check_config(&c, "pyxbuf", &why) < 0) {
        const char *name = env_name_of(why.message);
        /* A product out of range (pool_cap under chunk x buffers) may come
         * from another variable than the field's: name one that is set. */
        static const char *const set_ones[] = {"PYXBUF_STAGING_CHUNK", "PYXBUF_PINNED_POOL_CAP",
                                               "PYXBUF_STAGING_THRESHOLD"};
        for (size_t i = 0; getenv(name) == NULL && i < sizeof set_ones / sizeof *set_ones; i++)
            name = set_ones[i];
        const char *value = getenv(name);
        env_refused(name, value ? value : "(unset)", strstr(why.message, ": ") + 2);
    }
    config = env_bad ? defaults() : c;
}

int pyxbuf__own_staging_huge_pages(void) {
    pthread_once(&config_once, load_config);
    return huge_pages;
}

int pyxbuf__own_transfer_config(pyxbuf_transfer_config *out, pyxbuf_error *err) {
    pthread_once(&config_once, load_config);
    pthread_mutex_lock(&config_lock);
    *out = config;
    int bad = env_bad;
    if (bad && err != NULL) *err = env_error;
    pthread_mutex_unlock(&config_lock);
    return bad ? PYXBUF_EINVAL : 0;
}

/* `in` is a whole configuration of this layout (engine.c's entry point
 * checked its size). */
int pyxbuf__own_transfer_config_set(const pyxbuf_transfer_config *in, pyxbuf_error *err) {
    int rc = check_config(in, "pyxbuf_transfer_config_set", err);
    if (rc < 0) return rc;
    pthread_once(&config_once, load_config);
    pthread_mutex_lock(&config_lock);
    config = *in;
    config.size = (uint32_t)sizeof config;
    env_bad = 0; /* the environment's values are replaced */
    pthread_mutex_unlock(&config_lock);
    return 0;
}
