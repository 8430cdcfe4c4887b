/* testing.h -- the C tests' harness. Each test file defines TEST_CASE(name)
 * functions and ends with TEST_MAIN(TEST_ENTRY(a), TEST_ENTRY(b), ...). CMake
 * reads the TEST_CASE lines and registers every case with CTest by name; the
 * executable runs the case named by argv[1], or all of them without arguments. */
#ifndef PYXBUF_TESTING_H
#define PYXBUF_TESTING_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pyxbuf_test_case {
    const char *name;
    void (*fn)(void);
} pyxbuf_test_case;

static int pyxbuf_test_failures = 0;

#define TEST_CASE(name) static void name(void)
#define TEST_ENTRY(fn) {#fn, fn}

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            pyxbuf_test_failures++;                                            \
        }                                                                      \
    } while (0)

#define CHECK_INT_EQ(a, b)                                                     \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_) {                                                        \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, \
                    __LINE__, #a, #b, a_, b_);                                 \
            pyxbuf_test_failures++;                                            \
        }                                                                      \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                     \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                 \
            fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n",       \
                    __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)",            \
                    b_ ? b_ : "(null)");                                       \
            pyxbuf_test_failures++;                                            \
        }                                                                      \
    } while (0)

#define CHECK_CONTAINS(haystack, needle)                                       \
    do {                                                                       \
        const char *h_ = (haystack), *n_ = (needle);                           \
        if (h_ == NULL || strstr(h_, n_) == NULL) {                            \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, \
                    __LINE__, h_ ? h_ : "(null)", n_);                         \
            pyxbuf_test_failures++;                                            \
        }                                                                      \
    } while (0)

static int pyxbuf_test_run(const pyxbuf_test_case *cases, size_t n, int argc, char **argv) {
    size_t ran = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
        int before = pyxbuf_test_failures;
        cases[i].fn();
        ran++;
        fprintf(stderr, "%s %s\n", pyxbuf_test_failures == before ? "ok  " : "FAIL",
                cases[i].name);
    }
    if (ran == 0) {
        fprintf(stderr, "no test case named '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    return pyxbuf_test_failures == 0 ? 0 : 1;
}

#define TEST_MAIN(...)                                                         \
    static const pyxbuf_test_case pyxbuf_test_cases_[] = {__VA_ARGS__};        \
    int main(int argc, char **argv) {                                          \
        return pyxbuf_test_run(pyxbuf_test_cases_,                             \
                               sizeof pyxbuf_test_cases_ / sizeof *pyxbuf_test_cases_, \
                               argc, argv);                                    \
    }

#endif
