#!/usr/bin/env bash
# `make bench-pep`: instruction counts of the extended buffer protocol in
# CPython (cpython/'s patch series), written to bench/results/pep-ir-<date>.md:
#   1. PyObject_GetBuffer with a classic request on the stock 3.15 and on
#      3.15-pep (what the proposal costs every existing caller);
#   2. on 3.15-pep, native PyObject_GetBuffer with PyBUF_DEVICE against
#      pyxbuf_get (built in its native mode) on the same objects.
# Each interpreter gets a venv with NumPy and a CMake build of pyxbuf in
# target/bench-pep/<spec>/; bench/pep/getbuffer_ir.c is compiled against it
# and bench/pep/pep_ir.py runs once under Callgrind per interpreter.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHONS=${PYXBUF_PYTHONS:-$HOME/.cache/pyxbuf/pythons}
JOBS=${JOBS:-2}
WORK=$ROOT/target/bench-pep
say() { printf 'bench-pep: %s\n' "$*" >&2; }

measure() {
    local spec=$1 work=$WORK/$1
    local py=$PYTHONS/$spec/bin/python3 venv=$work/venv
    [ -x "$py" ] || { say "no $spec at $py (make pythons python-pep)"; exit 1; }
    mkdir -p "$work"
    if [ ! -f "$venv/.ready" ]; then
        rm -rf "$venv" && "$py" -m venv "$venv" &&
            PYTHONPATH= "$venv/bin/python" -m pip install --quiet numpy && touch "$venv/.ready"
    fi
    local vpy=$venv/bin/python build=$work/build
    cmake -S "$ROOT" -B "$build" -DPython3_EXECUTABLE="$vpy" -DCMAKE_BUILD_TYPE=Release \
        >"$work/cmake.log" 2>&1
    cmake --build "$build" -j "$JOBS" --target pyxbuf_static _pyxbuf_testext \
        >>"$work/cmake.log" 2>&1
    local inc suffix
    inc=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    suffix=$("$vpy" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    cc -shared -fPIC -O2 -Wall -Werror -I"$inc" -I"$ROOT/include" -DPYXBUF_LINKED \
        -DPYXBUF_STATIC "$ROOT/bench/pep/getbuffer_ir.c" "$build/libpyxbuf.a" \
        -o "$work/_pep_ir$suffix"
    rm -rf "$work/dumps" && mkdir -p "$work/dumps"
    say "$spec: counting under Callgrind"
    PYTHONPATH="$work:$build/python" valgrind --tool=callgrind \
        --callgrind-out-file="$work/dumps/cg.%p" "$vpy" "$ROOT/bench/pep/pep_ir.py" run \
        "$work/dumps" >"$work/valgrind.log" 2>&1
    "$vpy" "$ROOT/bench/pep/pep_ir.py" collect "$work/dumps"
}

measure 3.15
measure 3.15-pep
date=$(date -u +%Y-%m-%d)
commit=$(git -C "$ROOT" rev-parse --short HEAD)
header="# Extended buffer protocol in CPython: instruction counts, $date

Commit $commit; \`make bench-pep\` (tools/bench-pep.sh) on $(uname -m), $(nproc) cores; CPython
3.15.0rc1 stock and with cpython/'s patch series (3.15-pep); NumPy $(
"$WORK/3.15-pep/venv/bin/python" -c 'import numpy; print(numpy.__version__)'). Callgrind
instruction counts per acquisition and release (2000 of them, the empty loop subtracted)."
"$WORK/3.15-pep/venv/bin/python" "$ROOT/bench/pep/pep_ir.py" report \
    "$WORK/3.15/dumps/ir.json" "$WORK/3.15-pep/dumps/ir.json" --out \
    "$ROOT/bench/results/pep-ir-$date.md" "$header"
