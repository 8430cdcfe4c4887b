/* replay_main.c -- runs a fuzz target once over files and directories of
 * inputs, without libFuzzer: the seed and regression corpora as CTest tests
 * (with gcc, in every build), and a crash file by hand. Exits non-zero if a
 * path cannot be read; a finding aborts, as under libFuzzer. */
#include "fuzz_common.h"

#include <dirent.h>
#include <sys/stat.h>

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *data = malloc(cap);
    size_t got;
    while (data != NULL && (got = fread(data + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) data = realloc(data, cap *= 2);
    }
    fclose(f);
    if (data == NULL) return -1;
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    return 0;
}

static int run_path(const char *path, int *count) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (d == NULL) return -1;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* ., .., and hidden files such as .gitkeep */
        size_t n = strlen(path) + strlen(e->d_name) + 2;
        char *child = malloc(n);
        if (child == NULL) break;
        snprintf(child, n, "%s/%s", path, e->d_name);
        rc = run_path(child, count);
        free(child);
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    int count = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count) != 0) return 2;
    fprintf(stderr, "replay: %d inputs (%ld accepted, %ld checked against a reference, %ld refused), no finding\n",
            count, fuzz_outcomes.accepted, fuzz_outcomes.compared, fuzz_outcomes.refused);
    return 0;
}
