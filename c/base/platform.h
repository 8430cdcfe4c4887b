/* platform.h -- what differs between the systems libpyxbuf builds on, in one
 * place: loading a shared library at run time (dlopen, or LoadLibraryW on
 * Windows), the machine's cores and memory (sysconf, or GetSystemInfo and
 * GlobalMemoryStatusEx), aligned host memory, and whether fork() exists
 * (pthread_atfork). Every Linux-only feature of the library has its
 * alternative here or a PYXBUF_HAVE_* switch that `make check-portable`
 * turns off. Other files never test _WIN32 or __linux__ (pyxbuf.h's
 * export macros excepted). */
#ifndef PYXBUF_BASE_PLATFORM_H
#define PYXBUF_BASE_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

/* fork(): the child of a process with worker threads reinitialises their
 * state (pthread_atfork). Windows has no fork. */
#if !defined(PYXBUF_HAVE_FORK)
#if defined(_WIN32)
#define PYXBUF_HAVE_FORK 0
#else
#define PYXBUF_HAVE_FORK 1
#endif
#endif

/* madvise(MADV_HUGEPAGE): transparent huge pages on request (Linux). */
#if !defined(PYXBUF_HAVE_MADVISE_HUGEPAGE)
#if defined(__linux__)
#define PYXBUF_HAVE_MADVISE_HUGEPAGE 1
#else
#define PYXBUF_HAVE_MADVISE_HUGEPAGE 0
#endif
#endif

/* memfd_create: the guarded emulated device (tests only) maps one memfd
 * twice; elsewhere it is off and says so. */
#if !defined(PYXBUF_HAVE_MEMFD)
#if defined(__linux__)
#define PYXBUF_HAVE_MEMFD 1
#else
#define PYXBUF_HAVE_MEMFD 0
#endif
#endif

/* A shared library by file name (UTF-8), its symbols, and why opening
 * failed (a message that lives until the next call on this thread). */
void *pyxbuf__library_open(const char *name);
void *pyxbuf__library_symbol(void *library, const char *symbol);
void pyxbuf__library_close(void *library);
const char *pyxbuf__library_error(void);
/* The CUDA driver's file name on this system. */
const char *pyxbuf__cuda_driver_name(void);

/* Online cores (at least 1) and physical memory in bytes (0 if unknown). */
long pyxbuf__cpu_count(void);
uint64_t pyxbuf__physical_memory(void);

/* `size` bytes aligned to `alignment` (a power of two, a multiple of the
 * pointer size); free with pyxbuf__aligned_free. */
void *pyxbuf__aligned_alloc(size_t alignment, size_t size);
void pyxbuf__aligned_free(void *p);

/* This process, as another process on the machine names it: its id, and
 * (Linux) the inode of its pid namespace, so that equal ids seen from two
 * containers are not taken for one process (0 where there is none). */
int64_t pyxbuf__process_id(void);
uint64_t pyxbuf__pid_namespace(void);

/* madvise(MADV_HUGEPAGE) of [p, p + n) where the system has it; else nothing. */
void pyxbuf__advise_huge_pages(void *p, size_t n);

#endif
