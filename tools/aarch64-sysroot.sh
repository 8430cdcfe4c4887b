#!/usr/bin/env bash
# aarch64-sysroot.sh -- a Debian bookworm arm64 root for `make test-aarch64`:
# the arm64 C library, CPython 3.11 (interpreter, headers, libpython), NumPy,
# pytest and hypothesis, downloaded from Debian's archive and unpacked with
# `dpkg -x` into $PYXBUF_AARCH64/sysroot (default ~/.cache/pyxbuf/aarch64).
# Nothing is installed into the machine: apt runs with its own lists, an
# empty status (so every dependency is fetched) and arm64 as its only
# architecture. Reused while sysroot/.ready exists; about 150 MB.
set -euo pipefail
CACHE=${PYXBUF_AARCH64:-$HOME/.cache/pyxbuf/aarch64}
root=$CACHE/sysroot
[ -f "$root/.ready" ] && { echo "$root"; exit 0; }
PKGS=(libc6-dev python3.11 python3.11-dev libpython3.11-dev python3-numpy python3-pytest
      python3-hypothesis libstdc++6 libgcc-s1)
key=/usr/share/keyrings/debian-archive-keyring.gpg
mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial" "$CACHE/debs"
touch "$CACHE/apt/status"
cat >"$CACHE/apt/sources.list" <<SOURCES
deb [arch=arm64 signed-by=$key] http://deb.debian.org/debian bookworm main
deb [arch=arm64 signed-by=$key] http://deb.debian.org/debian bookworm-updates main
deb [arch=arm64 signed-by=$key] http://deb.debian.org/debian-security bookworm-security main
SOURCES
o=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
   -o Dir::Etc::SourceList="$CACHE/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
   -o Dir::State::Lists="$CACHE/apt/lists" -o Dir::State::status="$CACHE/apt/status"
   -o Dir::Cache="$CACHE/apt/cache" -o Debug::NoLocking=1)
apt-get -q "${o[@]}" update >"$CACHE/update.log"
# The dependency closure, real packages only (virtual ones print as <name>).
mapfile -t closure < <(apt-cache "${o[@]}" depends --recurse --no-recommends --no-suggests \
    --no-conflicts --no-breaks --no-replaces --no-enhances "${PKGS[@]}" |
    grep -E '^[a-z0-9]' | sed 's/:arm64$//' | sort -u)
echo "aarch64-sysroot: ${#closure[@]} packages" >&2
(cd "$CACHE/debs" && apt-get -q "${o[@]}" download "${closure[@]}" >"$CACHE/download.log")
rm -rf "$root.tmp" && mkdir -p "$root.tmp"
for deb in "$CACHE"/debs/*_arm64.deb "$CACHE"/debs/*_all.deb; do
    [ -e "$deb" ] && dpkg -x "$deb" "$root.tmp"
done
# Debian's root keeps /lib and /bin as links into /usr (merged /usr).
for d in lib bin sbin; do
    [ -e "$root.tmp/$d" ] || ln -s "usr/$d" "$root.tmp/$d"
done
# What update-alternatives would link: the reference BLAS and LAPACK.
lib=$root.tmp/usr/lib/aarch64-linux-gnu
ln -sf blas/libblas.so.3 "$lib/libblas.so.3"
ln -sf lapack/liblapack.so.3 "$lib/liblapack.so.3"
rm -rf "$root" && mv "$root.tmp" "$root" && touch "$root/.ready"
echo "$root"
