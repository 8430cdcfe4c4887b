#!/usr/bin/env bash
# `make test-abi3-wheel`: the one abi3 wheel of the `pyxbuf` module (make
# test-wheel's, built there on 3.11 and tested there) installed on every
# later CPython this machine has without building one, each in a fresh venv
# with NumPy, ml_dtypes and the build tools: the C extensions of
# python-tests/wheel_consumers (setuptools; scikit-build-core with
# find_package) built against it there, and check_consumers.py run (the
# wheel's layout and tag, float32 and bfloat16 read through pyxbuf_get, a
# refusal reaching Python, the library copy private). Where the
# interpreters come from: `make pythons`' cache (3.12 and 3.13 pyenv's,
# linked there by the make target; 3.14 and 3.15 as built; 3.15 the stock
# build, else 3.15-pep, CPython with cpython/'s patch series, which loads
# abi3 modules as stock 3.15 does). One it does
# not find is a SKIPPED line naming the command that builds it. One line
# per interpreter:
#
#   abi3 wheel on <version>: consumers=<passed> ok|FAILED
#
# Then the Rust side on the newest of them: `cargo test -p pyxbuf` built for
# the stable ABI (pyo3's abi3-py311: libpyxbuf under Py_LIMITED_API 3.11)
# with that interpreter embedded and its venv's NumPy and ml_dtypes (make
# test-packaged-crates runs the same build's tests on 3.11):
#
#   abi3 cargo test on <version>: <passed>/<failed> ok|FAILED
#
# Work in target/abi3-wheel/<version>/ (the Rust build in target/abi3-wheel/cargo).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHONS=${PYXBUF_PYTHONS:-$HOME/.cache/pyxbuf/pythons}
WHEELS=${ABI3_WHEEL_DIR:-$ROOT/target/wheel-test/dist}
JOBS=${JOBS:-2}
SPECS=(${ABI3_PYTHONS:-3.12 3.13 3.14 3.15})
WORK=$ROOT/target/abi3-wheel
declare -a LINES=()
status=0
say() { printf 'test-abi3-wheel: %s\n' "$*" >&2; }

# The interpreter of a spec in the cache (make test-abi3-wheel links pyenv's
# 3.12 and 3.13 there first, as tools/pythons.sh does), or nothing.
interpreter() {
    local spec=$1 p
    for p in "$PYTHONS/$spec/bin/python3" "$PYTHONS/$spec-pep/bin/python3"; do
        [ -x "$p" ] && { echo "$p"; return; }
    done
}

wheel=$(ls "$WHEELS"/pyxbuf-*-cp311-abi3-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { say "no abi3 wheel in $WHEELS: run make test-wheel first"; exit 1; }
mkdir -p "$WORK"
for spec in "${SPECS[@]}"; do
    py=$(interpreter "$spec")
    if [ -z "$py" ]; then
        LINES+=("abi3 wheel on $spec: SKIPPED (no CPython $spec here; make pythons PYTHON_SPECS=$spec builds one)")
        continue
    fi
    version=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
    work=$WORK/$spec log=$WORK/$spec/log
    rm -rf "$work" && mkdir -p "$work" && cp -r "$ROOT/python-tests/wheel_consumers" "$work/src"
    if (cd "$work" && export PYTHONPATH= && "$py" -m venv venv &&
        venv/bin/python -m pip install --quiet "$wheel" numpy ml_dtypes "setuptools>=70.1" \
            scikit-build-core pytest hypothesis &&
        CMAKE_BUILD_PARALLEL_LEVEL=$JOBS venv/bin/python -m pip install --quiet \
            --no-build-isolation src/setuptools src/cmake &&
        PYXBUF_WHEEL=$wheel venv/bin/python -m pytest -q --noconftest -p no:cacheprovider \
            src/check_consumers.py) >"$log" 2>&1; then
        LINES+=("abi3 wheel on $spec ($version, $py): consumers=$(grep -oE '[0-9]+ passed' "$log" | tail -1) ok")
        newest=$spec
    else
        say "$spec: failed (see $log)"; tail -20 "$log" >&2
        LINES+=("abi3 wheel on $spec ($version, $py): FAILED")
        status=1
    fi
done
# The newest interpreter whose consumers passed: the abi3 build's Rust tests there.
if [ -n "${newest:-}" ]; then
    spec=$newest venv=$WORK/$newest/venv log=$WORK/$newest/cargo.log
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # The test binaries embed the interpreter: its shared libpython's folder.
    libdir=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
    version=$("$venv/bin/python" -c 'import platform; print(platform.python_version())')
    if (cd "$ROOT" && PYO3_PYTHON="$venv/bin/python" PYTHONPATH="$site" CARGO_BUILD_JOBS=$JOBS \
            LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            CARGO_TARGET_DIR=$WORK/cargo cargo test -p pyxbuf --all-features \
            --features pyo3/abi3-py311) >"$log" 2>&1; then verdict=ok; else verdict=FAILED; status=1; fi
    passed=$(grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$log" |
        awk '{p += $4; f += $6} END {print p "/" f}')
    LINES+=("abi3 cargo test on $spec ($version): ${passed:-0/0} $verdict")
    [ $verdict = ok ] || tail -30 "$log" >&2
fi
printf '%s\n' "${LINES[@]}"
exit $status
