"""Where a small, medium or first copy's time goes, on a GPU machine: the
per-call cost of host <-> device copies (64 KiB to 16 MiB) under several
transfer configurations, PyTorch's default path beside them, the driver's
own small copies (pinned and pageable), and the first copy of a fresh
process under several environments, with what page-locking and first-touch
cost there. Not a target: the measurements that choose the defaults
transfer.py's targets are then checked against.

Run on a GPU machine: `python3 bench/cuda/transfer_knobs.py` with PYTHONPATH
at build-gpu/python (`run-on-gpu.sh OUT knobs` does it).
"""

import os
import subprocess
import sys

import numpy as np

import _pyxbuf_testext as t

CUDA = (t.PYXBUF_DL_CUDA, 0)
SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
RUNS = int(os.environ.get("KNOBS_RUNS", "200"))
FIRST = 256 << 20

import cupy  # noqa: E402
import torch  # noqa: E402

# transfer.py's timing: the median per call after warm-ups, the drop timed,
# one device synchronisation per call.
from transfer import per_call_us  # noqa: E402


def runs_for(n):
    return RUNS if n <= (1 << 20) else max(RUNS // 5, 20)


def knob_table():
    default = t.transfer_config()
    configs = {
        "default": {},
        "threshold=64K": {"threshold": 64 << 10},
        "threshold=64K chunk=1M": {"threshold": 64 << 10, "chunk": 1 << 20},
        "threshold=64K chunk=256K": {"threshold": 64 << 10, "chunk": 256 << 10},
        "threshold=64K chunk=2M": {"threshold": 64 << 10, "chunk": 2 << 20},
        "chunk=1M": {"chunk": 1 << 20},
        "staging off": {"enabled": 0},
    }
    arrays = {n: np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8) for n in SIZES}
    devs = {n: t.to_device(a, CUDA) for n, a in arrays.items()}
    print("| per call, us | " + " | ".join(f"{n >> 10} KiB" for n in SIZES) + " |")
    print("|---|" + "---|" * len(SIZES))
    for name, knobs in configs.items():
        t.transfer_config(**{**default, **knobs})
        before = t.pinned_pool_stats()
        up = [per_call_us(lambda: t.to_device(arrays[n], CUDA), runs_for(n)) for n in SIZES]
        down = [per_call_us(lambda: t.to_device(devs[n], None), runs_for(n)) for n in SIZES]
        after = t.pinned_pool_stats()
        print(f"| up: {name} | " + " | ".join(f"{v:.1f}" for v in up) + " |")
        print(f"| down: {name} | " + " | ".join(f"{v:.1f}" for v in down) + " |")
        print(f"|   pool: +{after['allocations'] - before['allocations']} allocations, "
              f"+{after['reuses'] - before['reuses']} reuses, held {after['held_bytes'] >> 20} MiB |"
              + " |" * (len(SIZES) - 1), flush=True)
    t.transfer_config(**default)
    up = [per_call_us(lambda: torch.from_numpy(arrays[n]).to("cuda"), runs_for(n)) for n in SIZES]
    tds = {n: torch.from_numpy(a).to("cuda") for n, a in arrays.items()}
    down = [per_call_us(lambda: tds[n].cpu(), runs_for(n)) for n in SIZES]
    print("| up: torch | " + " | ".join(f"{v:.1f}" for v in up) + " |")
    print("| down: torch | " + " | ".join(f"{v:.1f}" for v in down) + " |", flush=True)


def driver_small():
    """The driver's own copies per call (cupy's runtime calls), pinned and
    pageable host memory, each direction, us."""
    rt = cupy.cuda.runtime
    print("\n| driver memcpy, us | " + " | ".join(f"{n >> 10} KiB" for n in SIZES) + " |")
    print("|---|" + "---|" * len(SIZES))
    rows = {}
    for n in SIZES:
        d = cupy.empty(n, cupy.uint8)
        pinned = cupy.cuda.alloc_pinned_memory(n)
        pageable = np.empty(n, np.uint8)
        pageable[:] = 1
        pp, pg, dp = pinned.ptr, pageable.ctypes.data, d.data.ptr
        for label, fn in (
            ("D2H pinned", lambda: rt.memcpy(pp, dp, n, rt.memcpyDeviceToHost)),
            ("D2H pageable", lambda: rt.memcpy(pg, dp, n, rt.memcpyDeviceToHost)),
            ("H2D pinned", lambda: rt.memcpy(dp, pp, n, rt.memcpyHostToDevice)),
            ("H2D pageable", lambda: rt.memcpy(dp, pg, n, rt.memcpyHostToDevice)),
            ("memcpy host 1 thread", lambda: np.copyto(pageable, np.frombuffer(
                pinned, np.uint8, n))),
        ):
            rows.setdefault(label, []).append(per_call_us(fn, runs_for(n)))
    for label, vals in rows.items():
        print(f"| {label} | " + " | ".join(f"{v:.1f}" for v in vals) + " |", flush=True)


FRESH = r"""
import sys, time, numpy as np
import _pyxbuf_testext as t
import torch
what, n = sys.argv[1], int(sys.argv[2])
dev0 = (t.PYXBUF_DL_CUDA, 0)
small = np.ones(4096, np.uint8)
t.copy_to_host(t.to_device(small, dev0))
torch.cuda.synchronize()
a = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
if what == "up":
    t0 = time.perf_counter(); dev = t.to_device(a, dev0); torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    ok = t.copy_to_host(dev) == a.tobytes()
elif what == "down":
    src = torch.from_numpy(a).to("cuda"); torch.cuda.synchronize()
    t0 = time.perf_counter(); host = t.to_device(src, None); dt = time.perf_counter() - t0
    ok = bytes(memoryview(host)) == a.tobytes()
elif what.startswith("pin"):  # page-locking n bytes with the driver, fresh
    t0 = time.perf_counter(); p = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dt = time.perf_counter() - t0; ok = True
elif what.startswith("touch"):  # first touch of n new bytes by k threads
    import threading
    k = int(what[5:])
    t0 = time.perf_counter()
    b = np.empty(n, np.uint8)
    parts = np.array_split(b, k)
    th = [threading.Thread(target=lambda p: p.fill(1), args=(p,)) for p in parts]
    [x.start() for x in th]; [x.join() for x in th]
    dt = time.perf_counter() - t0; ok = True
st = t.pinned_pool_stats()
print(f"{n / dt / 1e9:.2f} {dt * 1e3:.2f} {int(ok)} alloc={st['allocations']} "
      f"bg={st['background_allocations']} held={st['held_bytes'] >> 20}MiB")
"""


def fresh(what, n, env=None):
    e = dict(os.environ, **(env or {}))
    out = subprocess.run([sys.executable, "-c", FRESH, what, str(n)], capture_output=True,
                         text=True, timeout=120, env=e)
    if out.returncode != 0:
        return f"failed: {out.stderr.strip().splitlines()[-1:]}"
    gbs, ms, ok, *rest = out.stdout.split()
    return f"{gbs} GB/s ({ms} ms) ok={ok} {' '.join(rest)}"


def first_calls():
    print(f"\nFresh processes, {FIRST >> 20} MiB unless named:")
    for mib in (2, 16, 64):
        print(f"  page-lock {mib} MiB (torch pin_memory): {fresh('pin', mib << 20)}", flush=True)
    for k in (1, 4, 16):
        print(f"  first touch by {k} threads: {fresh(f'touch{k}', FIRST)}", flush=True)
    envs = {
        "default": {},
        "huge pages": {"PYXBUF_STAGING_HUGE_PAGES": "1"},
        "chunk 4M": {"PYXBUF_STAGING_CHUNK": "4M"},
        "chunk 2M": {"PYXBUF_STAGING_CHUNK": "2M"},
        "staging off": {"PYXBUF_STAGING": "0"},
    }
    for name, env in envs.items():
        for way in ("up", "down"):
            print(f"  {way} {name}: {fresh(way, FIRST, env)}", flush=True)


# A first device -> host copy with no torch in the process: the source is
# put on the device with staging off, so the pinned pool is empty when the
# timed copy starts. argv: n, then transfer_config fields as k=v; prints the
# first copy's and then a second one's GB/s, each way of taking the result.
COLD_DOWN = r"""
import sys, time, numpy as np
import _pyxbuf_testext as t
n = int(sys.argv[1]); way = sys.argv[2]
knobs = {k: int(v) for k, v in (a.split("=") for a in sys.argv[3:])}
dev0 = (t.PYXBUF_DL_CUDA, 0)
base = t.transfer_config()
t.transfer_config(**{**base, "enabled": 0})
a = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
src = t.to_device(a, dev0); t.device_wait(src) if hasattr(t, "device_wait") else None
t.copy_to_host(t.to_device(np.ones(4096, np.uint8), dev0))
t.transfer_config(**{**base, **knobs})
def once():
    t0 = time.perf_counter()
    host = t.to_device(src, None) if way == "result" else t.copy_to_host(src)
    return time.perf_counter() - t0, host
dt1, h1 = once()
ok = bytes(memoryview(h1)) == a.tobytes()
del h1
dt2, h2 = once()
time.sleep(1.0)
dt3, h3 = once()
st = t.pinned_pool_stats()
print(f"first {n / dt1 / 1e9:.2f} GB/s ({dt1 * 1e3:.1f} ms), second {n / dt2 / 1e9:.2f}, after 1 s "
      f"{n / dt3 / 1e9:.2f}; ok={int(ok)} alloc={st['allocations']} bg={st['background_allocations']} "
      f"held={st['held_bytes'] >> 20}MiB threads={st['fill_threads']}")
"""


def cold_down():
    print("\nFirst device -> host copies, fresh processes without torch:")
    cases = [
        (FIRST, "result", []), (FIRST, "bytes", []),
        (FIRST, "result", ["threads=1"]), (FIRST, "result", ["threads=4"]),
        (FIRST, "result", ["chunk=67108864"]), (FIRST, "result", ["chunk=4194304"]),
        (FIRST, "result", ["enabled=0"]), (64 << 20, "result", []), (32 << 20, "result", []),
    ]
    for n, way, knobs in cases:
        out = subprocess.run([sys.executable, "-c", COLD_DOWN, str(n), way, *knobs],
                             capture_output=True, text=True, timeout=120)
        text = out.stdout.strip() if out.returncode == 0 else f"failed: {out.stderr[-300:]}"
        print(f"  {n >> 20} MiB {way} {' '.join(knobs) or 'default'}: {text}", flush=True)


def medium_threads():
    """Per-call medium copies up, by fill threads (threshold 64 KiB)."""
    default = t.transfer_config()
    sizes = [256 << 10, 1 << 20, 4 << 20]
    arrays = {n: np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8) for n in sizes}
    print("\n| up per call, us, threshold 64 KiB | " + " | ".join(f"{n >> 10} KiB" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for threads in (1, 2, 4, 8, 16):
        t.transfer_config(**{**default, "threshold": 64 << 10, "threads": threads})
        up = [per_call_us(lambda: t.to_device(arrays[n], CUDA), runs_for(n)) for n in sizes]
        print(f"| threads={threads} | " + " | ".join(f"{v:.1f}" for v in up) + " |", flush=True)
    t.transfer_config(**default)
    up = [per_call_us(lambda: torch.from_numpy(arrays[n]).to("cuda"), runs_for(n)) for n in sizes]
    print("| torch | " + " | ".join(f"{v:.1f}" for v in up) + " |", flush=True)


if __name__ == "__main__":
    print("config:", t.transfer_config(), flush=True)
    parts = os.environ.get("KNOBS_PARTS", "table,driver,first,cold,medium").split(",")
    if "cold" in parts:
        cold_down()
    if "medium" in parts:
        medium_threads()
    if "table" in parts:
        knob_table()
    if "driver" in parts:
        driver_small()
    if "first" in parts:
        first_calls()
