#!/usr/bin/env bash
# `make test-tsan-ft`: the thread suites (c/tests/test_threads.c and
# python-tests/test_threads.py) on the ThreadSanitizer build of free-threaded
# CPython 3.14t (`make pythons-tsan`), with the GIL off. libpyxbuf and the
# test extensions are built with -fsanitize=thread against it, so TSan sees
# both CPython's accesses and pyxbuf's; NumPy and ml_dtypes are the PyPI
# wheels (not instrumented: their own accesses are invisible to TSan).
#
# halt_on_error=1: the first report fails the run. c/tests/tsan.supp may name
# CPython or NumPy frames only, each with its reason.
#
# Work goes to target/tsan-ft/ (logs: ctest.log, pytest.log there). Ends with
#   tsan 3.14t gil=disabled threads=<n> c=<p>/<f> pytest=<p>/<f> seconds=<s> ok|FAILED
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHONS=${PYXBUF_PYTHONS:-$HOME/.cache/pyxbuf/pythons}
JOBS=${JOBS:-2}
PY="$PYTHONS/3.14t-tsan/bin/python3"
WORK="$ROOT/target/tsan-ft"
VENV="$WORK/venv"
VPY="$VENV/bin/python"
BUILD="$WORK/build"
FLAGS="-fsanitize=thread -fno-omit-frame-pointer -g"

say() { printf 'test-tsan-ft: %s\n' "$*" >&2; }
. "$ROOT/tools/counts.sh"

[ -x "$PY" ] || { say "no interpreter at $PY (make pythons-tsan)"; exit 1; }
mkdir -p "$WORK"
start=$(date +%s)

if [ ! -f "$VENV/.ready" ]; then
    rm -rf "$VENV" && "$PY" -m venv "$VENV" &&
        PYTHONPATH= PYTHON_GIL=0 "$VPY" -m pip install --quiet numpy ml_dtypes pytest hypothesis ||
        { say "venv failed"; exit 1; }
    touch "$VENV/.ready"
fi

cmake -S "$ROOT" -B "$BUILD" -DPython3_EXECUTABLE="$VPY" -DPYXBUF_WERROR=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS=$FLAGS" "-DCMAKE_CXX_FLAGS=$FLAGS" \
    "-DCMAKE_EXE_LINKER_FLAGS=$FLAGS" "-DCMAKE_SHARED_LINKER_FLAGS=$FLAGS" \
    "-DCMAKE_MODULE_LINKER_FLAGS=$FLAGS" >"$WORK/cmake.log" 2>&1 &&
    cmake --build "$BUILD" -j "$JOBS" >>"$WORK/cmake.log" 2>&1 ||
    { say "build failed; see $WORK/cmake.log"; exit 1; }

export PYTHON_GIL=0
# Reports go to files (log_path): pytest captures stderr, and a process that
# halts on a report would take its captured report with it.
rm -f "$WORK"/tsan.*
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:handle_segv=0:log_path=$WORK/tsan:suppressions=$ROOT/c/tests/tsan.supp"

# gil=disabled: off after importing the test extensions, NumPy and ml_dtypes
# even with PYTHON_GIL unset (a module not declaring Py_MOD_GIL_NOT_USED would
# turn it back on), as well as with PYTHON_GIL=0, as the suites run.
gil=enabled
check='
import sys, _pyxbuf_testext, _pyxbuf_second_copy, numpy, ml_dtypes
sys.exit(1 if sys._is_gil_enabled() else 0)'
PYTHONPATH="$BUILD/python" "$VPY" -c "$check" >"$WORK/gil.log" 2>&1 &&
    env -u PYTHON_GIL PYTHONPATH="$BUILD/python" "$VPY" -W error -c "$check" \
        >>"$WORK/gil.log" 2>&1 && gil=disabled

ctest --test-dir "$BUILD" --output-on-failure -R '^threads\.' >"$WORK/ctest.log" 2>&1
c=$(ctest_counts "$WORK/ctest.log")

(cd "$ROOT" && PYTHONPATH="$BUILD/python" "$VPY" -m pytest -q -p no:cacheprovider \
    python-tests/test_threads.py) >"$WORK/pytest.log" 2>&1
t=$(pytest_counts "$WORK/pytest.log")
reports=$(cat "$WORK"/tsan.* 2>/dev/null | grep -c 'WARNING: ThreadSanitizer')

verdict=ok
[ "$gil" = disabled ] && [ "${c#*/}" = 0 ] && [ "${t#*/}" = 0 ] && [ "$reports" = 0 ] &&
    [ "${c%/*}" -gt 0 ] || verdict=FAILED
[ "$reports" = 0 ] || say "ThreadSanitizer reported $reports race(s): see $WORK/tsan.*"
echo "tsan 3.14t gil=$gil threads=8 c=$c pytest=$t" \
    "reports=$reports seconds=$(( $(date +%s) - start )) $verdict"
[ $verdict = ok ]
