#!/usr/bin/env bash
# check-portable.sh -- `make check-portable`: macOS (and any other POSIX
# system) readiness by construction. libpyxbuf is built with clang, -Werror,
# and every Linux-only feature switched off through base/platform.h's
# PYXBUF_HAVE_* (fork handlers, madvise huge pages, the emulated device's
# memfd), so the rest is shown to compile and link without them; a smoke
# program then checks the library runs so (the transfer configuration, a
# host copy through the CPU backend) and that the emulated device, off,
# says why. Work in build-portable/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/build-portable}
CLANG=${CLANG:-$(command -v clang-14 || command -v clang)}
VPY=${VPY:-$ROOT/.venv/bin/python}
OFF="-DPYXBUF_HAVE_FORK=0 -DPYXBUF_HAVE_MADVISE_HUGEPAGE=0 -DPYXBUF_HAVE_MEMFD=0"
say() { printf 'check-portable: %s\n' "$*" >&2; }

cmake -S "$ROOT" -B "$OUT" -DCMAKE_C_COMPILER="$CLANG" -DCMAKE_CXX_COMPILER="${CLANG/clang/clang++}" \
    -DPYXBUF_WERROR=ON -DPYXBUF_BUILD_TESTS=OFF -DPython3_EXECUTABLE="$VPY" \
    "-DCMAKE_C_FLAGS=$OFF" >"$OUT.log" 2>&1 || { tail -20 "$OUT.log"; exit 1; }
cmake --build "$OUT" -j "${JOBS:-2}" >>"$OUT.log" 2>&1 || { grep -E "error|warning" -A3 "$OUT.log" | head -40; exit 1; }
say "libpyxbuf built by $(basename "$CLANG") with $OFF"

inc=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
libdir=$("$VPY" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
ver=$("$VPY" -c 'import sysconfig; print(sysconfig.get_config_var("LDVERSION"))')
cat >"$OUT/smoke.c" <<'SMOKE'
#include "pyxbuf.h"
#include "device/emulated.h"
#include <stdio.h>
#include <string.h>
int main(void) {
    Py_Initialize();
    pyxbuf_error err;
    int bad = 0;
    /* The emulated device is off without memfd, and says why. */
    if (pyxbuf_emulated_register(&err) == 0) { /* registration is lazy: map now */
        pyxbuf_backend b;
        void *p = NULL;
        bad |= pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, &err) != 0 ||
               b.alloc(b.ctx, 0, 16, &p, &err) != PYXBUF_EUNSUPPORTED ||
               strstr(err.message, "memfd_create, Linux") == NULL;
    }
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    bad |= c.threads < 1 || c.pool_cap == 0;
    /* A host copy through the CPU backend. */
    PyObject *src = PyBytes_FromString("portable");
    pyxbuf_view v;
    pyxbuf_device cpu = {PYXBUF_DL_CPU, 0};
    bad |= pyxbuf_get(src, &v, PyBUF_RECORDS_RO) != 0;
    char out[9] = {0};
    bad |= pyxbuf_copy_to_host(&v, out, 8) != 0 || strcmp(out, "portable") != 0;
    PyObject *same = pyxbuf_to_device(&v, &cpu, PYXBUF_STREAM_DEFAULT);
    bad |= same != src;
    Py_XDECREF(same);
    pyxbuf_release(&v);
    Py_DECREF(src);
    printf("smoke: %s\n", bad ? "FAILED" : "ok");
    return bad || Py_FinalizeEx() < 0;
}
SMOKE
"$CLANG" -std=c11 -Wall -Wextra -Werror $OFF -I"$ROOT/include" -I"$ROOT/c" -I"$inc" \
    "$OUT/smoke.c" "$ROOT"/c/device/emulated*.c -L"$OUT" -lpyxbuf -L"$libdir" -lpython"$ver" \
    -Wl,-rpath,"$OUT" -Wl,-rpath,"$libdir" -lpthread -o "$OUT/smoke"
"$OUT/smoke"
say "ok"
