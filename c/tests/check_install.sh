#!/usr/bin/env bash
# Install pyxbuf into a scratch prefix, then build and run a consumer that
# finds it with find_package(pyxbuf) (shared and static), and check the
# pkg-config file. Arguments: build dir, source dir, Python executable.
set -euo pipefail
build=$1 src=$2 python=$3
prefix=$build/test-install
rm -rf "$prefix" "$build/test-consumer"
cmake --install "$build" --prefix "$prefix" > /dev/null
cmake -S "$src/c/tests/consumer" -B "$build/test-consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DPython3_EXECUTABLE="$python" > /dev/null
cmake --build "$build/test-consumer" > /dev/null
LD_LIBRARY_PATH=$prefix/lib:$prefix/lib64:${LD_LIBRARY_PATH:-} "$build/test-consumer/consumer_shared"
"$build/test-consumer/consumer_static"
pc=$(ls "$prefix"/lib*/pkgconfig/pyxbuf.pc)
grep -q "^Libs: -L\${libdir} -lpyxbuf" "$pc"
grep -q "^Version: " "$pc"
echo "install, find_package (shared and static) and pkg-config file: ok"
