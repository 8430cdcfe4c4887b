/* platform.c -- the system-specific calls platform.h declares: POSIX (Linux,
 * macOS, the BSDs) or Windows. */

#include "base/base.h"
#include "base/platform.h"

#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#include <windows.h>
#else
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#if PYXBUF_HAVE_MADVISE_HUGEPAGE
#include <sys/mman.h>
#endif
#endif

#if defined(_WIN32)

static _Thread_local char library_error[160];

void *pyxbuf__library_open(const char *name) {
    wchar_t wide[MAX_PATH];
    if (MultiByteToWideChar(CP_UTF8, 0, name, -1, wide, MAX_PATH) == 0) {
        snprintf(library_error, sizeof library_error, "the name is not UTF-8 or too long");
        return NULL;
    }
    HMODULE h = LoadLibraryW(wide);
    if (h == NULL)
        snprintf(library_error, sizeof library_error, "LoadLibraryW failed with error %lu",
                 (unsigned long)GetLastError());
    return (void *)h;
}

void *pyxbuf__library_symbol(void *library, const char *symbol) {
    FARPROC p = GetProcAddress((HMODULE)library, symbol);
    void *out;
    memcpy(&out, &p, sizeof out); /* a function pointer as the object pointer dlsym gives */
    return out;
}

void pyxbuf__library_close(void *library) { FreeLibrary((HMODULE)library); }

const char *pyxbuf__library_error(void) { return library_error; }

const char *pyxbuf__cuda_driver_name(void) { return "nvcuda.dll"; }

long pyxbuf__cpu_count(void) {
    SYSTEM_INFO info;
    GetSystemInfo(&info);
    return info.dwNumberOfProcessors > 0 ? (long)info.dwNumberOfProcessors : 1;
}

uint64_t pyxbuf__physical_memory(void) {
    MEMORYSTATUSEX status;
    status.dwLength = sizeof status;
    return GlobalMemoryStatusEx(&status) ? (uint64_t)status.ullTotalPhys : 0;
}

int64_t pyxbuf__process_id(void) { return (int64_t)GetCurrentProcessId(); }

uint64_t pyxbuf__pid_namespace(void) { return 0; }

void *pyxbuf__aligned_alloc(size_t alignment, size_t size) {
    return _aligned_malloc(size, alignment);
}

void pyxbuf__aligned_free(void *p) { _aligned_free(p); }

#else /* POSIX */

void *pyxbuf__library_open(const char *name) { return dlopen(name, RTLD_NOW | RTLD_LOCAL); }

void *pyxbuf__library_symbol(void *library, const char *symbol) {
    return dlsym(library, symbol);
}

void pyxbuf__library_close(void *library) { dlclose(library); }

const char *pyxbuf__library_error(void) {
    const char *why = dlerror();
    return why ? why : "dlopen failed";
}

const char *pyxbuf__cuda_driver_name(void) {
#if defined(__APPLE__)
    return "libcuda.dylib"; /* no CUDA driver ships for macOS today: a clear failure */
#else
    return "libcuda.so.1";
#endif
}

long pyxbuf__cpu_count(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 0 ? cores : 1;
}

uint64_t pyxbuf__physical_memory(void) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
#else
    return 0;
#endif
}

void *pyxbuf__aligned_alloc(size_t alignment, size_t size) {
    void *p = NULL;
    return posix_memalign(&p, alignment, size) == 0 ? p : NULL;
}

void pyxbuf__aligned_free(void *p) { free(p); }

int64_t pyxbuf__process_id(void) { return (int64_t)getpid(); }

uint64_t pyxbuf__pid_namespace(void) {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

#endif

void pyxbuf__advise_huge_pages(void *p, size_t n) {
#if PYXBUF_HAVE_MADVISE_HUGEPAGE && defined(MADV_HUGEPAGE)
    (void)madvise(p, n, MADV_HUGEPAGE);
#else
    (void)p, (void)n;
#endif
}
