#!/usr/bin/env bash
# check-windows.sh -- `make check-windows`: libpyxbuf for Windows, as far as
# this Linux machine can check it. The library's sources are cross-compiled
# with mingw-w64 (x86_64-w64-mingw32-gcc) and with clang
# (--target=x86_64-w64-mingw32) against CPython's own Windows headers
# (Include/ and PC/pyconfig.h of the source tarball tools/pythons.sh fetches),
# warning-free under -Werror; then linked into pyxbuf.dll against an import
# library for python3XY.dll (made with dlltool from the CPython symbols the
# objects import), and the DLL's export table is checked against pyxbuf.h,
# as check_exports.sh checks libpyxbuf.so. Running anything needs a Windows
# CPython, which this machine cannot fetch. Work in $OUT (build-windows/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/build-windows}
MINOR=${PYXBUF_WINDOWS_PYTHON:-3.14}
CLANG=${CLANG:-$(command -v clang-14 || command -v clang || true)}
say() { printf 'check-windows: %s\n' "$*" >&2; }

tar=$(PYXBUF_PYTHONS=${PYXBUF_PYTHONS:-$HOME/.cache/pyxbuf/pythons} "$ROOT/tools/pythons.sh" \
    --source "$MINOR")
rm -rf "$OUT" && mkdir -p "$OUT/include" "$OUT/gcc" "$OUT/clang"
top=$(tar -tJf "$tar" | awk -F/ 'NR == 1 {print $1}')
tar -xJf "$tar" -C "$OUT" "$top/Include" "$top/PC/pyconfig.h"
cp -r "$OUT/$top/Include/." "$OUT/include/" && cp "$OUT/$top/PC/pyconfig.h" "$OUT/include/"
rm -rf "${OUT:?}/$top"

# The library's sources: CMakeLists.txt's PYXBUF_SOURCES.
mapfile -t sources < <(sed -n '/^set(PYXBUF_SOURCES/,/^)/p' "$ROOT/CMakeLists.txt" | grep -o 'c/[^ )]*\.c')
warn=(-std=c11 -Wall -Wextra -Wconversion -Wshadow -Wstrict-prototypes -Werror)
defs=(-D__USE_MINGW_ANSI_STDIO=1 -DPYXBUF_BUILDING -I"$ROOT/include" -I"$ROOT/c" -I"$OUT/include")

# The test-only emulated device compiles too (off on Windows, saying so).
checked=("${sources[@]}" c/device/emulated.c)
say "mingw-w64 gcc: ${#sources[@]} library sources and the emulated device"
for src in c/device/emulated.c; do
    x86_64-w64-mingw32-gcc "${warn[@]}" "${defs[@]}" -O2 -c "$ROOT/$src" -o "$OUT/emulated.o"
done
for src in "${sources[@]}"; do
    x86_64-w64-mingw32-gcc "${warn[@]}" "${defs[@]}" -O2 -c "$ROOT/$src" \
        -o "$OUT/gcc/$(echo "$src" | tr / _).o"
done

if [ -n "$CLANG" ]; then
    # clang's mingw target finds mingw-w64's headers in /usr/x86_64-w64-mingw32
    # itself and keeps its own builtin ones (compile only: the link is gcc's).
    say "$(basename "$CLANG") --target=x86_64-w64-mingw32: ${#checked[@]} sources"
    for src in "${checked[@]}"; do
        "$CLANG" --target=x86_64-w64-mingw32 "${warn[@]}" "${defs[@]}" -O2 \
            -c "$ROOT/$src" -o "$OUT/clang/$(echo "$src" | tr / _).o"
    done
else
    say "clang: not installed (make clang installs it); its half of the check is skipped"
fi

# An import library for python3XY.dll: every Py* / _Py* symbol the objects
# import (__imp_ references), DATA where the headers declare PyAPI_DATA.
dll="python${MINOR/./}.dll"
x86_64-w64-mingw32-nm -u "$OUT"/gcc/*.o | awk '{print $NF}' | grep '^__imp_' |
    sed 's/^__imp_//' | sort -u >"$OUT/imports.txt"
grep -rhoE 'PyAPI_DATA\([^)]*\)[^;]*' "$OUT/include" | grep -oE '[A-Za-z_][A-Za-z0-9_]*$' |
    sort -u >"$OUT/data.txt"
{
    echo "LIBRARY $dll"
    echo "EXPORTS"
    while read -r sym; do
        if grep -qx "$sym" "$OUT/data.txt"; then echo "    $sym DATA"; else echo "    $sym"; fi
    done <"$OUT/imports.txt"
} >"$OUT/python.def"
x86_64-w64-mingw32-dlltool -d "$OUT/python.def" -l "$OUT/libpython.a" -D "$dll"
say "$dll: $(grep -c . "$OUT/imports.txt") symbols imported ($(grep -c ' DATA' "$OUT/python.def") data)"

# pyxbuf.dll: libgcc and winpthreads linked in statically, so it needs only the
# system's DLLs and python3XY.dll.
x86_64-w64-mingw32-gcc -shared -o "$OUT/pyxbuf.dll" "$OUT"/gcc/*.o "$OUT/libpython.a" \
    -Wl,--out-implib,"$OUT/libpyxbuf.dll.a" -static-libgcc -Wl,-Bstatic -lwinpthread -Wl,-Bdynamic
needed=$(x86_64-w64-mingw32-objdump -p "$OUT/pyxbuf.dll" | awk '/DLL Name:/ {print $3}' | sort)
say "pyxbuf.dll needs: $(echo $needed)"
exports=$("$ROOT/c/tests/check_exports.sh" "$OUT/pyxbuf.dll" "$ROOT/include/pyxbuf.h") ||
    { echo "$exports"; exit 1; }
echo "check-windows: pyxbuf.dll links against $dll; $exports; gcc$([ -n "$CLANG" ] && echo " and $(basename "$CLANG")") warning-free: ok"
