#!/usr/bin/env bash
# `make test-pyo3-versions`: `cargo test -p pyxbuf-sys -p pyxbuf` against
# each PyO3 version given: the minimum of each supported minor but the
# newest, which the repository's Cargo.lock pins and `make test-rust` tests.
#
# For each VERSION, target/pyo3-versions/VERSION/ gets a copy of the two
# crates (and of c/ and include/, which pyxbuf-sys links to), a workspace
# manifest with those two members (and the repository's [workspace.package]
# and [workspace.dependencies]), and a copy of the repository's Cargo.lock
# moved with `cargo update --precise` to rust-numpy 0.MINOR.0 (the release
# for that PyO3 minor), then to pyo3 VERSION (pyo3-ffi and pyo3-macros
# follow). Everything else stays as locked, the pyo3-build-config 0.30 of
# pyxbuf's build scripts too: cargo resolves that one on its own, and a new
# graph gets it whatever its PyO3. The repository's Cargo.lock is never
# written. The versions share one target directory,
# target/pyo3-versions/target, so the crates other than PyO3's, rust-numpy
# and pyxbuf's are built once.
#
# The tests run as `make test-rust` runs them (--all-features, doctests
# too), with `--cfg pyo3_before_0_29` / `--cfg pyo3_before_0_30` in RUSTFLAGS
# below those versions (rust/pyxbuf/build.rs says what they change). One
# line per version, then each test ignored for a reason naming PyO3:
#
#   pyo3 <version>: ok (<N> tests)   or   pyo3 <version>: FAILED (<counts>; <log>)
#     ignored: <test> (<reason>)
#
# Environment: PYO3_PYTHON (and PYTHONPATH, CARGO_BUILD_JOBS) as make's
# RUST_ENV sets them.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=$ROOT/target/pyo3-versions
export CARGO_TARGET_DIR=$BASE/target
. "$ROOT/tools/counts.sh"

[ $# -gt 0 ] || { echo "usage: $0 PYO3_VERSION..." >&2; exit 2; }
declare -a LINES=()
status=0

for version in "$@"; do
    work=$BASE/$version
    log=$work/test.log
    # A fresh copy each time (cp -a keeps the mtimes, so cargo rebuilds only
    # what changed since the last run).
    rm -rf "$work" && mkdir -p "$work/rust" &&
        cp -a "$ROOT/c" "$ROOT/include" "$work/" &&
        cp -a "$ROOT/rust/pyxbuf-sys" "$ROOT/rust/pyxbuf" "$work/rust/" &&
        { printf '[workspace]\nresolver = "2"\nmembers = ["rust/pyxbuf-sys", "rust/pyxbuf"]\n\n' &&
            sed -n '/^\[workspace\.package\]/,$p' "$ROOT/Cargo.toml"; } >"$work/Cargo.toml" &&
        cp "$ROOT/Cargo.lock" "$work/Cargo.lock" || exit 1
    minor=$(cut -d. -f2 <<<"$version")
    cfg=
    for before in 29 30; do
        [ "$minor" -lt $before ] && cfg="$cfg --cfg pyo3_before_0_$before"
    done
    (
        export RUSTFLAGS="${RUSTFLAGS:-} $cfg"
        cd "$work" || exit 1
        # The lock moves need the registry's index: a network error there
        # is retried (twice, 10 s apart) rather than failing the version.
        for try in 1 2 3; do
            cargo update --quiet numpy --precise "0.$minor.0" &&
                cargo update --quiet pyo3 --precise "$version" &&
                cargo fetch --quiet && break
            [ $try = 3 ] && exit 1
            echo "(registry step failed, try $try of 3: retrying in 10 s)"
            sleep 10
        done
        cargo tree --quiet --prefix none -i pyo3 -e normal --depth 0 &&
            cargo test --no-fail-fast -p pyxbuf-sys -p pyxbuf --all-features
    ) >"$log" 2>&1
    rc=$?
    counts=$(cargo_counts "$log")
    passed=${counts%/*}
    failed=${counts#*/}
    if [ "$rc" = 0 ] && [ "$failed" = 0 ] && [ "$passed" -gt 0 ]; then
        LINES+=("pyo3 $version: ok ($passed tests)")
    else
        LINES+=("pyo3 $version: FAILED ($passed passed, $failed failed; ${log#"$ROOT"/})")
        # CI keeps no files: the log's errors (or its end) go to the output.
        while IFS= read -r line; do
            LINES+=("  | $line")
        done < <({ grep -E '^(error|test .* FAILED|failures:|thread .* panicked)' "$log" ||
            tail -n 15 "$log"; } | head -n 30)
        status=1
    fi
    while IFS=$'\t' read -r name reason; do
        LINES+=("  ignored: $name ($reason)")
    done < <(sed -n 's/^test \(.*\) \.\.\. ignored, \(.*PyO3.*\)$/\1\t\2/p' "$log")
done

printf '%s\n' "${LINES[@]}"
exit $status
