"""A 256 MiB float32 array returned from a Dask task on a LocalCluster of
worker processes: pyxbuf.Exporter against the same NumPy array from the same
task, side by side in one run (issue 48's target: pyxbuf within 1.2x NumPy's
time). Each round submits both, in alternating order, and times
`client.submit(...).result()` end to end: the task, Dask's serialization
(protocol 5: the items as an out-of-band frame), the transfer over loopback
TCP and the client's deserialization. Writes a Markdown report.

    make bench-distributed   (or: PYTHONPATH=target/distributed/site \\
                              .venv/bin/python bench/distributed/dask_return.py OUT.md)
"""

import datetime
import platform
import statistics
import sys
import time

import numpy as np

import pyxbuf

N = (256 << 20) // 4
ROUNDS = 9


def make(kind):
    """The task: the same NumPy array, returned as it is or as a pyxbuf
    exporter over its memory (zero-copy); or (informational, not the target)
    the same items made by a Rust crate (rust/examples/sum), whose exporter
    type is its own copy of libpyxbuf's and takes Dask's pickle family."""
    if kind == "rust":
        import pyxbuf_sum

        return pyxbuf_sum.ramp_f32(N, 1.0)
    a = np.arange(N, dtype=np.float32)
    return a if kind == "numpy" else pyxbuf.frombuffer(a, "f")


def main(out):
    import dask
    import distributed
    from distributed import Client, LocalCluster

    times = {"numpy": [], "pyxbuf": [], "rust": [], "rust-direct": []}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, worker_dashboard_address=None) as cluster, \
            Client(cluster) as client:
        def run(kind):
            # rust-direct: the same task, gathered straight from the worker
            # (protocol 5, the items out of band) instead of through the
            # scheduler (protocol 4)
            future = client.submit(make, "rust" if kind == "rust-direct" else kind, pure=False)
            return client.gather(future, direct=True) if kind == "rust-direct" else future.result()

        for kind in times:  # warm-up: imports, connections, buffers
            run(kind)
        for r in range(ROUNDS):
            order = list(times) if r % 2 == 0 else list(reversed(times))
            for kind in order:
                t0 = time.perf_counter()
                got = run(kind)
                times[kind].append(time.perf_counter() - t0)
                assert np.asarray(got)[-1] == N - 1
                del got
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["pyxbuf"] / med["numpy"]
    verdict = "met" if ratio <= 1.2 else "missed"
    lines = [
        f"# Dask: a 256 MiB float32 array returned from a task ({datetime.date.today()})",
        "",
        f"- machine: {platform.machine()}, {platform.processor() or 'cpu'}; Python "
        f"{platform.python_version()}, NumPy {np.__version__}, dask {dask.__version__}, "
        f"distributed {distributed.__version__}",
        "- LocalCluster: 1 worker process, 1 thread, loopback TCP; `client.submit(make, kind)"
        ".result()` timed end to end, both kinds alternating, "
        f"{ROUNDS} rounds after a warm-up",
        "",
        "| returned | median (ms) | min (ms) | max (ms) |",
        "|---|---|---|---|",
    ]
    for kind, v in times.items():
        lines.append(f"| {kind} | {med[kind] * 1e3:.1f} | {min(v) * 1e3:.1f} | "
                     f"{max(v) * 1e3:.1f} |")
    lines += ["", "numpy: the array itself; pyxbuf: pyxbuf.frombuffer over it (pyxbuf.Exporter, "
              "Dask's own serializer family); rust: the same items from "
              "pyxbuf_sum.ramp_f32 (a Rust crate's Exporter type: pickle family, protocol 4 "
              "through the scheduler, so the items go in band; informational); rust-direct: "
              "that array gathered with direct=True (protocol 5 from the worker). "
              f"rust/numpy: {med['rust'] / med['numpy']:.2f}, rust-direct/numpy: "
              f"{med['rust-direct'] / med['numpy']:.2f}", "",
              f"target dask-256MiB-pyxbuf-vs-numpy ratio={ratio:.3f} goal=<=1.20 {verdict}", ""]
    text = "\n".join(lines)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
