#!/usr/bin/env bash
# run-on-gpu.sh OUTDIR [quick] -- everything pyxbuf checks on a GPU machine, in one go
# (CUDA 13, PyTorch, CuPy and Python 3.12 there; no Rust toolchain, no network):
# build with CMake in build-gpu/, CTest (every cuda.* case), the CUDA peers'
# Python tests, the rest of python-tests/ with real PyTorch and CuPy present,
# the copy-bandwidth benchmark, device arrays between two processes against
# torch.multiprocessing (with the pyxbuf wheel in .gpu/wheels) and the
# acquisition benchmark. Each step has
# its own time limit, so one hang costs one step; logs land in OUTDIR.
# `quick` skips the acquisition benchmark and the rest of python-tests (a
# short device lease: build, CUDA tests, staging tests, copy benchmarks);
# `knobs` builds and runs bench/cuda/transfer_knobs.py alone.
set -u
out=${1:?usage: run-on-gpu.sh OUTDIR [quick|knobs]}
quick=${2:-}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
py=$(command -v python3)
step() { echo "== $1 ($(date +%T))"; }

step environment
{
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$py" -V
    for c in cmake ninja gcc g++ nvcc cargo; do printf '%s: %s\n' "$c" "$(command -v $c || echo none)"; done
    "$py" -c "import sysconfig, os; i = sysconfig.get_paths()['include']; \
print('Python.h', os.path.exists(i + '/Python.h'), i, sysconfig.get_config_var('LIBDIR'), \
sysconfig.get_config_var('LDLIBRARY'))"
    "$py" -c "import torch, cupy, numpy; print('torch', torch.__version__, 'cupy', cupy.__version__, \
'numpy', numpy.__version__)"
} 2>&1 | tee "$out/env.txt"

step build
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if ! { timeout 300 cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DPython3_EXECUTABLE="$py" && timeout 300 cmake --build build-gpu -j16; } \
        >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    echo "build failed"
    exit 1
fi

if [ "$quick" = knobs ]; then
    step "transfer knobs (where small, medium and first copies spend their time)"
    PYTHONPATH=$PWD/build-gpu/python timeout 400 "$py" bench/cuda/transfer_knobs.py 2>&1 | tee "$out/knobs.md"
    step done
    exit 0
fi

step ctest
[ "$quick" = quick ] && only=(-R '^(device|device_pool|staging|threads)\.') || only=()
timeout 240 ctest --test-dir build-gpu -j16 --timeout 120 "${only[@]}" >"$out/ctest.log" 2>&1
grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|\(Timeout\)|\(Skipped\)" "$out/ctest.log" | head -40
timeout 120 ctest --test-dir build-gpu -R '^(cuda|bench)\.' -V >"$out/ctest-cuda.log" 2>&1
grep -E "^[0-9]+/[0-9]+ Test|SKIPPED|skipped" "$out/ctest-cuda.log" | head -60

# The Rust pyxbuf module: a cp312 wheel built on a machine with cargo and
# carried in .gpu/wheels/ (`maturin build --release --features emulated-device
# -m rust/pyxbuf-python/Cargo.toml -i python3.12 -o .gpu/wheels`).
site=
for whl in .gpu/wheels/pyxbuf-*-cp312-*.whl; do
    [ -f "$whl" ] || continue
    site=$PWD/.gpu/site
    rm -rf "$site" && "$py" -m zipfile -e "$whl" "$site"
done
export PYTHONPATH=$PWD/build-gpu/python:$PWD/python-tests${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}

step "device arrays between two processes (issue 48: CUDA IPC against torch.multiprocessing)"
if [ -n "$site" ]; then
    timeout 300 "$py" bench/cuda/ipc_share.py >"$out/ipc.md" 2>&1
    cat "$out/ipc.md"
else
    echo "SKIPPED: no pyxbuf cp312 wheel in .gpu/wheels (pyxbuf.multiprocessing is in it)"
fi

step "copy bandwidth"
timeout 200 build-gpu/bench_cuda_copy >"$out/copy.md" 2>&1
cat "$out/copy.md"

step "transfers against PyTorch and CuPy (issues 40 and 47: large, small and first copies)"
timeout 300 "$py" bench/cuda/transfer.py >"$out/transfer.md" 2>&1
cat "$out/transfer.md"

step "pytest: CUDA peers and device bridges"
timeout 300 "$py" -m pytest -q -p no:cacheprovider -rs --timeout 120 \
    python-tests/test_cuda_peers.py python-tests/test_cai.py python-tests/test_devices.py \
    python-tests/test_dlpack.py >"$out/pytest-gpu.log" 2>&1
grep -E "passed|failed|FAILED|ERROR|SKIPPED" "$out/pytest-gpu.log" | tail -40

step "pytest: staging, the device pool and the shared engine (emulated device)"
# test_engine.py needs the Rust pyxbuf module (a cp312 wheel unpacked on
# PYTHONPATH); without it, it says SKIPPED.
timeout 200 "$py" -m pytest -q -p no:cacheprovider -rs --timeout 120 \
    python-tests/test_staging.py python-tests/test_device_pool.py python-tests/test_engine.py \
    >>"$out/pytest-gpu.log" 2>&1
grep -E "passed|failed|FAILED|ERROR|SKIPPED" "$out/pytest-gpu.log" | tail -20
[ "$quick" = quick ] && { step done; exit 0; }

step acquisition
timeout 120 "$py" bench/cuda/acquire.py >"$out/acquire.md" 2>&1
cat "$out/acquire.md"

step "pytest: the rest of python-tests (real PyTorch, CuPy, JAX present)"
# test_module.py and its kin need the Rust pyxbuf module (no cargo here).
timeout 240 "$py" -m pytest -q -p no:cacheprovider -n 8 --timeout 120 python-tests \
    --ignore=python-tests/test_module.py --ignore=python-tests/readme \
    --ignore=python-tests/wheel_consumers >"$out/pytest-all.log" 2>&1
grep -E "passed|failed|FAILED|ERROR" "$out/pytest-all.log" | tail -30
step done
