#!/usr/bin/env bash
# Install pyxbuf into a scratch prefix, then build and run a consumer that
# finds it with find_package(pyxbuf) (shared and static), and check the
# pkg-config file; a C++17 consumer includes the installed pyxbuf.hpp.
# Arguments: build dir, source dir, Python executable.
set -euo pipefail
build=$1 src=$2 python=$3
# Cross builds (CMakeLists.txt sets these for this test): the consumer is
# configured with the same toolchain and run under its emulator.
cross=()
read -r -a run <<<"${PYXBUF_CROSS_RUN:-}"
prefix=$build/test-install
rm -rf "$prefix" "$build/test-consumer"
cmake --install "$build" --prefix "$prefix" > /dev/null
# (The toolchain searches packages inside its root only: point at ours.)
[ -n "${PYXBUF_CROSS_TOOLCHAIN:-}" ] && cross=(-DCMAKE_TOOLCHAIN_FILE="$PYXBUF_CROSS_TOOLCHAIN"
    -DPYXBUF_AARCH64_SYSROOT="${PYXBUF_AARCH64_SYSROOT:-}"
    -Dpyxbuf_DIR="$(dirname "$(ls "$prefix"/lib*/cmake/pyxbuf/pyxbufConfig.cmake)")"
    -DPython3_INCLUDE_DIR="${PYXBUF_CROSS_PYTHON_INCLUDE:-}"
    -DPython3_LIBRARY="${PYXBUF_CROSS_PYTHON_LIBRARY:-}")
cmake -S "$src/c/tests/consumer" -B "$build/test-consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DPython3_EXECUTABLE="$python" "${cross[@]}" > /dev/null
cmake --build "$build/test-consumer" > /dev/null
LD_LIBRARY_PATH=$prefix/lib:$prefix/lib64:${LD_LIBRARY_PATH:-} \
    "${run[@]}" "$build/test-consumer/consumer_shared"
"${run[@]}" "$build/test-consumer/consumer_static"
pc=$(ls "$prefix"/lib*/pkgconfig/pyxbuf.pc)
grep -q "^Libs: -L\${libdir} -lpyxbuf" "$pc"
grep -q "^Version: " "$pc"
# The C++17 header is installed beside pyxbuf.h and compiles from there.
test -f "$prefix/include/pyxbuf.hpp"
test -f "$prefix/include/pyxbuf_nanobind.hpp"
test -f "$prefix/include/pyxbuf_pybind11.hpp"
LD_LIBRARY_PATH=$prefix/lib:$prefix/lib64:${LD_LIBRARY_PATH:-} \
    "${run[@]}" "$build/test-consumer/consumer_cxx"
echo "install, find_package (shared and static), pkg-config file and pyxbuf.hpp: ok"
