#!/usr/bin/env bash
# run-on-gpu.sh OUTDIR -- the per-argument race's wall clock on a machine with
# PyTorch, nanobind, pybind11 and Cython but no Rust toolchain or valgrind (the
# GPU machines): builds the C, nanobind and pybind11 modules with CMake in
# build-args/ and times the routes on a PyTorch CPU tensor and NumPy float32
# (pyperf, from .whl/ when it is not installed). Target 4 (PyTorch: pyxbuf's
# view <= 0.5x nanobind's nb::ndarray) is read off its table.
set -u
out=${1:?usage: run-on-gpu.sh OUTDIR}
mkdir -p "$out"
py=$(command -v python3)
if ! "$py" -c 'import pyperf' 2>/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --target /tmp/site .whl/pyperf-*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
"$py" -c 'import torch, nanobind, pybind11; print("torch", torch.__version__, "nanobind", nanobind.__version__, "pybind11", pybind11.__version__)' | tee "$out/versions.txt"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build-args "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$py" \
    -DPython_EXECUTABLE="$py" -DPYXBUF_BENCH_ARGS=ON \
    -Dnanobind_DIR="$("$py" -m nanobind --cmake_dir)" -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" \
    >"$out/build.log" 2>&1 &&
    cmake --build build-args -j 16 --target _args_c _args_nanobind _args_pybind11 >>"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
export PYTHONPATH=$PWD/build-args/bench-args${PYTHONPATH:+:$PYTHONPATH}
export ARGS_ONLY="${ARGS_ONLY:-(torch_f32|numpy_f32)}"
ARGS_PROCESSES=2 timeout 230 "$py" bench/args/race.py wall --out "$out/wall.json" >"$out/wall.log" 2>&1 ||
    { tail -30 "$out/wall.log"; exit 1; }
"$py" bench/args/race.py wall-table "$out/wall.json" | tee "$out/wall.md"
