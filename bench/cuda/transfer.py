"""Host <-> device copies of NumPy arrays, pyxbuf against PyTorch and CuPy,
side by side in one process (issue 40's targets).

pyxbuf's figures go through the C test extension built by CMake
(`_pyxbuf_testext.to_device`, `.copy_to_host`: pyxbuf_to_device and
pyxbuf_copy_to_host); `copy_to_host` fills a new bytes object, new pageable
memory the caller owns, which is what Rust's `copy_to_host` into a new `Vec`
does with the same C call. Each figure is the median of RUNS timed calls
after one warm-up, GB/s of the array's size. Prints a Markdown table, a
thread/chunk sweep of the staging pipeline, a device allocation + free
(`pyxbuf_exporter_new` on the device, which the stream-ordered pool serves,
against `torch.empty`: median of ALLOC_RUNS calls, microseconds), small
and medium copies per call (4 KiB to 16 MiB, each direction, against
PyTorch's default path: `torch.from_numpy(a).to("cuda")`, `t.cpu()`;
median of SMALL_RUNS calls, microseconds), the first copy of a fresh
process at FIRST_MIB (each direction in a process of its own, the CUDA
context and pyxbuf's backend already up, the pinned pool empty), then
`target` lines.

Run on a GPU machine: `python3 bench/cuda/transfer.py` with PYTHONPATH at
build-gpu/python (bench/cuda/run-on-gpu.sh does it).
"""

import os
import statistics
import subprocess
import sys
import time

import numpy as np

import _pyxbuf_testext as t

# TRANSFER_DEVICE=emulated: a dry run on the emulated device (no GPU, no peers).
EMULATED = os.environ.get("TRANSFER_DEVICE") == "emulated"
CUDA = (t.PYXBUF_DL_EXT_DEV, 0) if EMULATED else (t.PYXBUF_DL_CUDA, 0)
SWEEP = int(os.environ.get("TRANSFER_SWEEP_MIB", "256")) << 20
RUNS = int(os.environ.get("TRANSFER_RUNS", "7"))
SIZES = [int(s) << 20 for s in os.environ.get("TRANSFER_MIB", "256,1024").split(",")]
ALLOC_RUNS = int(os.environ.get("TRANSFER_ALLOC_RUNS", "300"))
ALLOC_BYTES = 1 << 20
SMALL = [4 << 10, 64 << 10, 1 << 20, 16 << 20]
SMALL_RUNS = int(os.environ.get("TRANSFER_SMALL_RUNS", "300"))
FIRST = int(os.environ.get("TRANSFER_FIRST_MIB", "256")) << 20
OURS_ALLOC = f"pyxbuf: exporter('f', (n,), device={'ext_dev' if EMULATED else 'cuda'}:0)"

torch = cupy = None
if not EMULATED:
    import cupy
    import torch


def sync():
    """One device synchronisation per timed call: PyTorch's, which waits for
    every stream of the device's primary context (CuPy's and pyxbuf's
    work there too); a second one (CuPy's) would only add its fixed cost to
    every figure, and squeeze the per-call ratios towards 1."""
    if torch is not None:
        torch.cuda.synchronize()
    elif cupy is not None:
        cupy.cuda.runtime.deviceSynchronize()


def median_seconds(fn, runs, warmups=1, time_the_drop=False):
    """Median seconds of fn() and a device synchronisation, after `warmups`
    untimed calls; what fn returns is dropped after each call, inside the
    timing when `time_the_drop` (a per-call cost: the free is part of it)."""
    for _ in range(warmups):
        keep = fn()
        sync()
        del keep
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        keep = fn()
        sync()
        if time_the_drop:
            del keep
        times.append(time.perf_counter() - t0)
        keep = None
    return statistics.median(times)


def gbps(fn, n, runs=RUNS):
    """Median GB/s of fn() (which returns what must stay alive until timed)."""
    return n / median_seconds(fn, runs) / 1e9


def check_equal(host_bytes, a, what):
    got = np.frombuffer(host_bytes, np.uint8)
    if not np.array_equal(got, a):
        raise SystemExit(f"transfer.py: {what} copied wrong bytes")


def measure(n):
    rows = {}
    a = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)  # pageable, touched
    # pyxbuf
    dev = t.to_device(a, CUDA)
    check_equal(t.copy_to_host(dev), a, "to_device then copy_to_host")
    check_equal(memoryview(t.to_device(dev, None)), a, "to_device(cpu)")
    rows["numpy -> device: pyxbuf.to_device"] = gbps(lambda: t.to_device(a, CUDA), n)
    rows["device -> new host: pyxbuf.to_device(x, cpu)"] = gbps(lambda: t.to_device(dev, None), n)
    rows["device -> new Vec/bytes: pyxbuf_copy_to_host"] = gbps(lambda: t.copy_to_host(dev), n)
    if torch is not None:
        ta = torch.from_numpy(a)
        td = ta.to("cuda")
        pinned = ta.pin_memory()
        rows["numpy -> device: torch .to('cuda')"] = gbps(lambda: ta.to("cuda"), n)
        rows["numpy -> device: torch pin_memory() + non_blocking"] = gbps(
            lambda: ta.pin_memory().to("cuda", non_blocking=True), n)
        rows["device -> new host: torch .cpu()"] = gbps(lambda: td.cpu(), n)
        rows["device -> new host: torch .to('cpu', non_blocking) + sync"] = gbps(
            lambda: td.to("cpu", non_blocking=True), n)
        rows["pinned -> device: torch non_blocking (cuMemcpy rate)"] = gbps(
            lambda: pinned.to("cuda", non_blocking=True), n)
        rows["pinned -> device: pyxbuf.to_device (with cuMemAlloc+Free)"] = gbps(lambda: t.to_device(pinned, CUDA), n)
        check_equal(t.copy_to_host(t.to_device(pinned, CUDA)), a, "pinned to_device")
        del td, pinned
    if cupy is not None:
        cd = cupy.asarray(a)
        rows["numpy -> device: cupy.asarray"] = gbps(lambda: cupy.asarray(a), n)
        rows["device -> new host: cupy .get()"] = gbps(lambda: cd.get(), n)
        del cd
    del dev
    return rows


def sweep(n):
    """The pipeline's knobs at one size: GB/s both ways per (threads, chunk)."""
    a = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    dev = t.to_device(a, CUDA)
    before = t.transfer_config()
    out = []
    try:
        for threads in (4, 8, 12, 16):
            for chunk_mib in (8, 16, 32):
                t.transfer_config(threads=threads, chunk=chunk_mib << 20)
                up = gbps(lambda: t.to_device(a, CUDA), n, runs=3)
                down = gbps(lambda: t.copy_to_host(dev), n, runs=3)
                out.append((threads, chunk_mib, up, down))
    finally:
        t.transfer_config(**before)
    return out


def alloc_free_us(make, runs=ALLOC_RUNS):
    """Median microseconds of make() and dropping what it made (an
    allocation and its free), after one warm-up."""
    keep = make()
    del keep
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        keep = make()
        del keep
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def alloc_free():
    """Device allocation + free of ALLOC_BYTES, pyxbuf and PyTorch (us)."""
    items = ALLOC_BYTES // 4
    rows = {OURS_ALLOC: alloc_free_us(lambda: t.exporter("f", (items,), device=CUDA))}
    if torch is not None:
        rows["torch.empty(n, float32, device='cuda')"] = alloc_free_us(
            lambda: torch.empty(items, dtype=torch.float32, device="cuda"))
    return rows


def per_call_us(fn, runs):
    """Median microseconds of fn() per call, after a few warm-up calls."""
    return median_seconds(fn, runs, warmups=3, time_the_drop=True) * 1e6


def small_copies():
    """{size: {row: us}} for the small and medium sizes, each direction."""
    out = {}
    for n in SMALL:
        runs = SMALL_RUNS if n <= (1 << 20) else max(SMALL_RUNS // 6, 20)
        a = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
        dev = t.to_device(a, CUDA)
        check_equal(memoryview(t.to_device(dev, None)), a, f"to_device(cpu) of {n} bytes")
        rows = {"up: pyxbuf": per_call_us(lambda: t.to_device(a, CUDA), runs),
                "down: pyxbuf": per_call_us(lambda: t.to_device(dev, None), runs)}
        if torch is not None:
            td = torch.from_numpy(a).to("cuda")
            rows["up: torch"] = per_call_us(lambda: torch.from_numpy(a).to("cuda"), runs)
            rows["down: torch"] = per_call_us(lambda: td.cpu(), runs)
            del td
        out[n] = rows
        del dev
    return out


FIRST_CALL = """
import sys, time, numpy as np
import _pyxbuf_testext as t
direction, n, emulated = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
dev0 = (t.PYXBUF_DL_EXT_DEV, 0) if emulated else (t.PYXBUF_DL_CUDA, 0)
sync = lambda: None
small = np.ones(4096, np.uint8)
t.copy_to_host(t.to_device(small, dev0))  # the backend and its context up; nothing pooled
a = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
if not emulated:
    import torch
    torch.cuda.synchronize()
    sync = torch.cuda.synchronize
if direction == "up":
    t0 = time.perf_counter(); dev = t.to_device(a, dev0); sync(); dt = time.perf_counter() - t0
    ok = t.copy_to_host(dev) == a.tobytes()
else:
    if emulated:
        src = t.to_device(a, dev0)
    else:
        src = torch.from_numpy(a).to("cuda")  # not through pyxbuf: its pool stays empty
        torch.cuda.synchronize()
    t0 = time.perf_counter(); host = t.to_device(src, None); dt = time.perf_counter() - t0
    ok = bytes(memoryview(host)) == a.tobytes()
print(f"{n / dt / 1e9:.2f} {int(ok)}")
"""


def first_call(direction):
    """GB/s of the first pyxbuf copy of FIRST bytes in a new process."""
    out = subprocess.run([sys.executable, "-c", FIRST_CALL, direction, str(FIRST),
                          "1" if EMULATED else "0"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"transfer.py: first call ({direction}) failed:\n{out.stderr}")
    rate, ok = out.stdout.split()
    if ok != "1":
        raise SystemExit(f"transfer.py: the first call ({direction}) copied wrong bytes")
    return float(rate)


def target(name, value, goal, unit, met):
    print(f"target {name} ratio={value:.2f} goal={goal} {'met' if met else 'missed'}  # {unit}")


def main():
    cfg = t.transfer_config()
    print(f"staging: {cfg}")
    results = {}
    for n in SIZES:
        results[n] = measure(n)
    print("\n| copy | " + " | ".join(f"{n >> 20} MiB GB/s" for n in SIZES) + " |")
    print("|---|" + "---|" * len(SIZES))
    for key in results[SIZES[0]]:
        print(f"| {key} | " + " | ".join(f"{results[n].get(key, float('nan')):.1f}" for n in SIZES) + " |")
    sys.stdout.flush()
    if os.environ.get("TRANSFER_SWEEP", "1") == "0":
        SWEEP_ROWS = []
    else:
        SWEEP_ROWS = sweep(SWEEP)
    print(f"\nSweep at {SWEEP >> 20} MiB (threads, chunk MiB, to device GB/s, to new bytes GB/s):")
    for threads, chunk, up, down in SWEEP_ROWS:
        print(f"  threads={threads:2d} chunk={chunk:2d} MiB  up={up:5.1f}  down={down:5.1f}")
    allocs = alloc_free()
    print(f"\n| device alloc + free, {ALLOC_BYTES >> 20} MiB | us per call |\n|---|---|")
    for key, us in allocs.items():
        print(f"| {key} | {us:.1f} |")
    smalls = small_copies()
    print("\n| per call, us | " + " | ".join(f"{n >> 10} KiB" for n in SMALL) + " |")
    print("|---|" + "---|" * len(SMALL))
    for key in smalls[SMALL[0]]:
        print(f"| {key} | " + " | ".join(f"{smalls[n][key]:.1f}" for n in SMALL) + " |")
    firsts = {d: first_call(d) for d in ("up", "down")}
    print(f"\nFirst call of a process, {FIRST >> 20} MiB: numpy -> device {firsts['up']:.1f} GB/s, "
          f"device -> new host {firsts['down']:.1f} GB/s")
    print()
    ours = allocs[OURS_ALLOC]
    target(f"device-alloc-free-{ALLOC_BYTES >> 20}MiB", ours, "<=10 us", "us", ours <= 10)
    for n in SIZES:
        r = results[n]
        size = f"{n >> 20}MiB"
        up = r["numpy -> device: pyxbuf.to_device"]
        target(f"numpy-to-device-{size}", up, ">=30 GB/s", "GB/s", up >= 30)
        if torch is not None:
            best = r["numpy -> device: torch pin_memory() + non_blocking"]
            plain = r["numpy -> device: torch .to('cuda')"]
            target(f"numpy-to-device-vs-torch-pinned-{size}", up / best, ">1", "x", up > best)
            target(f"numpy-to-device-vs-torch-default-{size}", up / plain, ">=4", "x",
                   up >= 4 * plain)
        down = r["device -> new host: pyxbuf.to_device(x, cpu)"]
        target(f"device-to-new-host-{size}", down, ">=45 GB/s", "GB/s", down >= 45)
        if torch is not None:
            cpu = r["device -> new host: torch .cpu()"]
            target(f"device-to-new-host-vs-torch-cpu-{size}", down / cpu, ">=30", "x",
                   down >= 30 * cpu)
        vec = r["device -> new Vec/bytes: pyxbuf_copy_to_host"]
        target(f"copy-to-host-new-memory-{size}", vec, ">=10 GB/s", "GB/s", vec >= 10)
    for n in SMALL:
        r = smalls[n]
        for way, name in (("up", "numpy-to-device"), ("down", "device-to-new-host")):
            if f"{way}: torch" in r:
                ratio = r[f"{way}: pyxbuf"] / r[f"{way}: torch"]
                target(f"{name}-per-call-{n >> 10}KiB-vs-torch-default", ratio, "<=0.9", "x time",
                       ratio <= 0.9)
    for way, name in (("up", "numpy-to-device"), ("down", "device-to-new-host")):
        target(f"first-call-{name}-{FIRST >> 20}MiB", firsts[way], ">=10 GB/s", "GB/s",
               firsts[way] >= 10)


if __name__ == "__main__":
    main()
