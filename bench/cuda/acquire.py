"""Acquisition of CuPy arrays and PyTorch CUDA tensors on a GPU machine:
pyxbuf_get + pyxbuf_release (a C loop in the test extension, `t.cycle`)
against the frameworks' own `from_dlpack` of the same object (a Python loop;
its per-iteration overhead, about 30 ns, is measured and subtracted).

Prints a Markdown table; run by bench/cuda/run-on-gpu.sh with the test
extension's folder on PYTHONPATH. Goals (issue 30): pyxbuf <= 0.5x the
framework's from_dlpack, <= 0.25x through DLPack's C exchange table.
"""

import statistics
import sys
import time

import _pyxbuf_testext as t
from dlpack_only import DLPackOnly  # python-tests/, on PYTHONPATH (run-on-gpu.sh)

DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
N = 20_000


def per_call(fn, n=N, repeat=7):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn(n)
        times.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(times)


def python_loop(call, obj):
    def run(n):
        for _ in range(n):
            call(obj)
    return run


def empty_loop(n):
    f = id
    for _ in range(n):
        f(None)


def main():
    rows = []
    loop_ns = per_call(empty_loop)
    subjects = []
    try:
        import cupy
        a = cupy.arange(1000, dtype=cupy.float32)
        subjects.append(("CuPy float32[1000]", a, cupy.from_dlpack))
    except Exception as e:  # no CuPy, no device
        print(f"skipped CuPy: {e}", file=sys.stderr)
    try:
        import torch
        if torch.cuda.is_available():
            x = torch.arange(1000, dtype=torch.float32, device="cuda")
            subjects.append(("PyTorch cuda float32[1000]", x, torch.from_dlpack))
            subjects.append(("PyTorch cuda, __dlpack__ only", DLPackOnly(x), torch.from_dlpack))
    except Exception as e:
        print(f"skipped PyTorch: {e}", file=sys.stderr)
    print("| object | pyxbuf path | pyxbuf_get+release ns | from_dlpack ns | ratio | goal |")
    print("|---|---|---|---|---|---|")
    for name, obj, peer in subjects:
        path = t.inspect(obj, DEVICE_VIEW)["path"]
        ours = per_call(lambda n: t.cycle(obj, DEVICE_VIEW, n))
        theirs = per_call(python_loop(peer, obj)) - loop_ns
        goal = 0.25 if path == "dlpack-c" else 0.5
        ratio = ours / theirs
        verdict = "met" if ratio <= goal else "missed"
        print(f"| {name} | {path} | {ours:.0f} | {theirs:.0f} | {ratio:.3f} | <={goal} {verdict} |")
        rows.append(verdict)
    print(f"\nempty Python loop: {loop_ns:.0f} ns per iteration (subtracted from from_dlpack)")
    print(f"{rows.count('met')} met, {rows.count('missed')} missed")


if __name__ == "__main__":
    main()
