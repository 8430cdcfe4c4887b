#!/usr/bin/env bash
# Builds CPython interpreters for `make pythons` from Debian's source packages
# (no newer CPython is packaged for this Debian release or on PyPI) and
# installs each under a cache outside the repository, reused while it is
# there and rebuilt when it is missing:
#
#   tools/pythons.sh 3.12 3.13 3.14 3.14t 3.15 3.14t-tsan 3.15-pep
#
# 3.12 and 3.13 are pyenv's CPython where the machine has one (see prebuilt
# below), else a build as the others are when Debian's archive has its
# source, else SKIPPED.
# 3.14t is the free-threaded build (--disable-gil); 3.14t-tsan the same with
# --with-thread-sanitizer. 3.15-headers is no interpreter: stock 3.15's
# configured headers alone (configure as the builds are, then `make
# inclinstall`: half a minute here, where a build takes minutes), what an
# extension compiled against the stock headers needs. 3.15-pep is 3.15 with the patch
# series in cpython/ (the extended buffer protocol's reference
# implementation) applied in order; its installation records the series'
# SHA-256 and is rebuilt when the series changes. No PGO/LTO: the point is
# fast builds. Shared libpython (rpath set), so that the C tests can embed
# each interpreter.
#
# Debian's archive (deb.debian.org/debian/pool/main/p/python3.X) keeps only
# some versions of each source package, so the newest upstream tarball
# (python3.X_<version>.orig.tar.xz) found there is used; its SHA-256 is
# checked against the signed .dsc beside it. The cache is
# $PYXBUF_PYTHONS (default ~/.cache/pyxbuf/pythons): src/ the tarballs,
# <spec>/ each installation (bin/python3), marked complete by .complete.
set -euo pipefail

CACHE=${PYXBUF_PYTHONS:-$HOME/.cache/pyxbuf/pythons}
POOL=${PYXBUF_DEBIAN_POOL:-http://deb.debian.org/debian/pool/main/p}
JOBS=${JOBS:-$(nproc)}

say() { printf 'pythons: %s\n' "$*" >&2; }

exists() { curl -fsI --max-time 20 "$1" >/dev/null 2>&1; }

# The Debian versions of an upstream minor release to try, newest first:
# final releases, then release candidates, betas and alphas of x.y.0.
candidates() {
    local minor=$1
    for p in $(seq 30 -1 0); do echo "$minor.$p"; done
    for pre in rc3 rc2 rc1 b4 b3 b2 b1 a8 a7 a6 a5 a4 a3 a2 a1; do echo "$minor.0~$pre"; done
}

# Downloads the newest available tarball of python$minor into src/ (unless a
# verified one is there) and prints its path.
fetch() {
    local minor=$1 dir="$POOL/python$1" have
    have=$(ls "$CACHE/src/python${minor}_"*.orig.tar.xz 2>/dev/null | sort -V | tail -1 || true)
    if [ -n "$have" ] && [ -f "$have.verified" ]; then echo "$have"; return; fi
    mkdir -p "$CACHE/src"
    local v
    for v in $(candidates "$minor"); do
        local tar="python${minor}_$v.orig.tar.xz"
        exists "$dir/$tar" || continue
        local dsc
        dsc=$(find_dsc "$minor" "$v")
        if [ -z "$dsc" ]; then
            say "python$minor: $tar has no .dsc beside it to verify it against; trying older"
            continue
        fi
        say "python$minor: $tar ($dsc)"
        curl -fsS --max-time 600 -o "$CACHE/src/$tar" "$dir/$tar"
        verify "$minor" "$CACHE/src/$tar" "$dsc"
        echo "$CACHE/src/$tar"
        return
    done
    say "no python$minor source tarball found under $POOL/python$minor"
    exit 1
}

# The first Debian revision of upstream version $2 whose .dsc is there.
find_dsc() {
    local minor=$1 v=$2 rev
    for rev in 1 2 3 4 1~exp1 2~exp1; do
        if exists "$POOL/python$minor/python${minor}_$v-$rev.dsc"; then
            echo "python${minor}_$v-$rev.dsc"
            return
        fi
    done
}

# The tarball's SHA-256 must be the one its .dsc names (the .dsc is signed
# by the uploader; apt verifies the archive's indices).
verify() {
    local minor=$1 file=$2 dsc=$3 want got
    want=$(curl -fsS --max-time 60 "$POOL/python$minor/$dsc" |
        awk -v f="$(basename "$file")" '/^Checksums-Sha256:/{s=1;next} /^[^ ]/{s=0} s&&$3==f{print $1}')
    got=$(sha256sum "$file" | cut -d' ' -f1)
    if [ -z "$want" ] || [ "$want" != "$got" ]; then
        say "$(basename "$file"): sha256 $got, $dsc says '${want:-nothing}'"
        rm -f "$file"
        exit 1
    fi
    touch "$file.verified"
}

# The headers CPython's ssl, zlib, ctypes, sqlite3, bz2 and lzma modules
# build against: installed from Debian when missing and we may (root).
BUILD_DEPS=(libssl-dev zlib1g-dev libffi-dev libsqlite3-dev libbz2-dev liblzma-dev)
build_deps() {
    local missing=() p
    for p in "${BUILD_DEPS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing ${missing[*]} (CPython's build needs them)"
        apt-get update -qq >/dev/null && apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        say "missing ${missing[*]}: install them (apt-get install) and run again"
        exit 1
    fi
}

# The patch series for 3.15-pep: cpython/*.patch beside this script.
PATCHES_DIR=${PYXBUF_CPYTHON_PATCHES:-$(cd "$(dirname "$0")/.." && pwd)/cpython}
series_hash() { cat "$PATCHES_DIR"/*.patch | sha256sum | cut -d' ' -f1; }

# 3.11-numpy1: no build; the machine's own CPython of that version (the one
# `make test` uses), linked into the cache so the matrix finds it as any other
# (its venv gets NumPy 1.x: tools/test-matrix.sh).
system_python() {
    local spec=$1 minor=$2 prefix="$CACHE/$1" home
    home=$("python$minor" -c 'import sys; print(sys.base_prefix)' 2>/dev/null) ||
        { say "$spec: no python$minor on PATH (the machine's CPython $minor)"; exit 1; }
    [ -x "$home/bin/python3" ] || { say "$spec: $home has no bin/python3"; exit 1; }
    rm -rf "$prefix" && mkdir -p "$CACHE" && ln -sfn "$home" "$prefix"
    say "$spec: the machine's CPython at $home"
}

# 3.12 and 3.13: Debian's archive serves no python3.12 source (3.13-3.15
# only), and a 3.13 build costs minutes, but this machine's image ships
# pyenv's CPython 3.12 and 3.13 ($PYENV_ROOT/versions/3.1[23].*,
# shared libpython with its rpath set, headers, pip). The newest final release
# there that can stand in for a build of ours (checked below) is linked into
# the cache as 3.11-numpy1's interpreter is. Without one, a cached or new build
# from Debian's source as for 3.13 when the archive has one; with neither,
# $CACHE/<spec>.skipped says where it looked: `make test-matrix` and `make
# dist` print SKIPPED with that reason, and nothing fails. Returns 0 when the
# spec is settled (linked or skipped), 1 when it is to be built from source.
PYENV_VERSIONS=${PYENV_ROOT:-$HOME/.pyenv}/versions
usable_check='
import os, sys, sysconfig, venv, ensurepip, ssl, zlib, ctypes, sqlite3
minor, home = sys.argv[1], os.path.realpath(sys.argv[2])
assert sys.implementation.name == "cpython" and "%d.%d" % sys.version_info[:2] == minor, sys.version
assert os.path.realpath(sys.base_prefix) == home, sys.base_prefix
assert sysconfig.get_config_var("Py_ENABLE_SHARED") == 1, "no shared libpython"
assert not sysconfig.get_config_var("Py_GIL_DISABLED"), "free-threaded"
lib = os.path.join(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY"))
assert os.path.realpath(lib).startswith(os.path.join(home, "lib", "")) and os.path.exists(lib), lib
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")), "no Python.h"
'
pyenv_python() {
    local minor=$1 home why
    for home in $(ls -d "$PYENV_VERSIONS/$minor".* 2>/dev/null | grep -E "/$minor\.[0-9]+\$" | sort -rV); do
        if why=$("$home/bin/python3" -c "$usable_check" "$minor" "$home" 2>&1); then
            echo "$home"
            return 0
        fi
        say "python$minor: $home does not do: $(echo "$why" | tail -1)"
    done
    return 1
}
prebuilt() {
    local spec=$1 minor=$2 prefix="$CACHE/$1" home
    mkdir -p "$CACHE" && rm -f "$CACHE/$spec.skipped"
    if home=$(pyenv_python "$minor"); then
        rm -rf "$prefix" && ln -sfn "$home" "$prefix"
        say "$spec: pyenv's CPython at $home ($("$home/bin/python3" -V))"
        return 0
    fi
    [ -L "$prefix" ] && rm -f "$prefix" # a pyenv interpreter linked before, gone now
    [ -f "$prefix/.complete" ] && return 1 # built from source before
    (fetch "$minor") >/dev/null && return 1
    local why="no CPython $minor in $PYENV_VERSIONS, no python$minor source under $POOL/python$minor"
    echo "$why" >"$CACHE/$spec.skipped"
    say "$spec: SKIPPED ($why)"
    return 0
}

# Fetches python$minor's source and unpacks it into a clean
# $CACHE/build/<spec> (the installation $CACHE/<spec> removed); prints the
# tarball's path.
unpack() {
    local spec=$1 minor=$2 tar work="$CACHE/build/$1"
    build_deps
    tar=$(fetch "$minor")
    rm -rf "$work" "$CACHE/$spec" && mkdir -p "$work"
    tar -xJf "$tar" -C "$work" --strip-components=1
    echo "$tar"
}

# 3.X-headers: the stock headers of CPython 3.X with the pyconfig.h its
# configure writes here, installed under $CACHE/<spec>/include/python3.X.
headers_only() {
    local spec=$1 minor=$2 prefix="$CACHE/$1"
    if [ -f "$prefix/.complete" ] && [ -f "$prefix/include/python$minor/Python.h" ]; then
        say "$spec: cached at $prefix"
        return
    fi
    local tar work="$CACHE/build/$spec"
    tar=$(unpack "$spec" "$minor")
    say "$spec: configure && make inclinstall (the headers only)"
    (cd "$work" && ./configure --prefix="$prefix" --enable-shared >configure.log 2>&1 &&
        make inclinstall >install.log 2>&1) || {
        say "$spec: failed; see $work/*.log"
        exit 1
    }
    rm -rf "$work"
    : >"$prefix/.complete"
    say "$spec: $(basename "$tar")'s headers at $prefix/include/python$minor"
}

build() {
    local spec=$1 minor=${1%%[t-]*} flags=() patched=0
    case $spec in
        *-numpy1) system_python "$spec" "$minor"; return ;;
        3.12 | 3.13) prebuilt "$spec" "$minor" && return ;;
        *-headers) headers_only "$spec" "$minor"; return ;;
        *-pep) patched=1 ;;
        *t-tsan) flags=(--disable-gil --with-thread-sanitizer) ;;
        *t) flags=(--disable-gil) ;;
        [0-9].[0-9]*) ;;
        *) say "unknown interpreter '$spec' (3.12, 3.13, 3.14, 3.14t, 3.15, 3.14t-tsan, 3.15-pep, 3.15-headers ...)"; exit 2 ;;
    esac
    local prefix="$CACHE/$spec" stamp=""
    [ $patched = 1 ] && stamp=$(series_hash)
    if [ -f "$prefix/.complete" ] && [ -x "$prefix/bin/python3" ] &&
        [ "$(cat "$prefix/.complete")" = "$stamp" ]; then
        say "$spec: cached at $prefix"
        return
    fi
    local tar work="$CACHE/build/$spec"
    tar=$(unpack "$spec" "$minor")
    if [ $patched = 1 ]; then
        local p
        for p in "$PATCHES_DIR"/*.patch; do
            say "$spec: applying $(basename "$p")"
            patch -d "$work" -p1 --batch --forward --quiet <"$p" ||
                { say "$spec: $(basename "$p") does not apply to $(basename "$tar")"; exit 1; }
        done
    fi
    say "$spec: configure ${flags[*]:-} && make -j$JOBS (a few minutes)"
    (cd "$work" &&
        ./configure --prefix="$prefix" --with-ensurepip=install --enable-shared \
            LDFLAGS="-Wl,-rpath,$prefix/lib" "${flags[@]}" >configure.log 2>&1 &&
        make -j"$JOBS" >make.log 2>&1 &&
        make install >install.log 2>&1) || {
        say "$spec: build failed; see $work/*.log"
        exit 1
    }
    "$prefix/bin/python3" -c 'import ssl, zlib, ctypes, sqlite3' ||
        { say "$spec: built without ssl/zlib/ctypes/sqlite3 (missing -dev packages?)"; exit 1; }
    rm -rf "$work"
    echo "$stamp" >"$prefix/.complete"
    say "$spec: $("$prefix/bin/python3" -VV | head -1) at $prefix"
}

[ $# -gt 0 ] || { say "usage: $0 3.12 3.13 3.14 3.14t 3.15 3.14t-tsan 3.15-pep | --source 3.14"; exit 2; }
# --source 3.14: only fetch and verify that version's source tarball; print its path
# (tools/check-windows.sh takes CPython's Windows headers from it).
if [ "$1" = --source ]; then fetch "$2"; exit 0; fi
for spec in "$@"; do build "$spec"; done
