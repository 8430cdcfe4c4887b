#!/usr/bin/env python3
"""Write bench/results/<YYYY-MM-DD>-<machine>.md from a Criterion run.

    report.py --criterion DIR --notes FILE [--out-dir bench/results]
              [--load-before "..."] [--command "..."] [--analysis bench/analysis.md]

Reads every <DIR>/**/new/estimates.json (with its benchmark.json), the notes
the suite wrote (paths taken, what was skipped and why), and the machine's and
tools' versions; writes medians with their spread, each ratio against its peer
from the same run, and met/missed per target of issue 6.
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError as e:
        return f"unavailable ({e})"


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_slug():
    if os.environ.get("BENCH_MACHINE"):
        return os.environ["BENCH_MACHINE"]
    slug = re.sub(r"[^a-z0-9]+", "-", cpu_model().lower()).strip("-")
    return f"{slug}-{os.cpu_count()}c"


def lock_version(name):
    text = (ROOT / "Cargo.lock").read_text()
    m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), text)
    return m.group(1) if m else "?"


def py_versions():
    out = {"python": sys.version.split()[0]}
    for mod in ("numpy", "ml_dtypes", "jax", "jaxlib"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 - report why, whatever it is
            out[mod] = f"not importable ({type(e).__name__})"
    return out


def load_results(cdir):
    results = {}
    for est in Path(cdir).rglob("new/estimates.json"):
        bench = est.parent / "benchmark.json"
        if not bench.exists():
            continue
        b = json.loads(bench.read_text())
        e = json.loads(est.read_text())
        key = (b["group_id"], b.get("function_id") or "", b.get("value_str") or "")
        tp = b.get("throughput") or {}
        p10 = None
        sample = est.parent / "sample.json"
        if sample.exists():
            smp = json.loads(sample.read_text())
            per = sorted(t / i for t, i in zip(smp["times"], smp["iters"]) if i)
            if per:
                p10 = per[len(per) // 10]
        results[key] = {
            "p10": p10,
            "median": e["median"]["point_estimate"],
            "lo": e["median"]["confidence_interval"]["lower_bound"],
            "hi": e["median"]["confidence_interval"]["upper_bound"],
            "mad": e["median_abs_dev"]["point_estimate"],
            "bytes": tp.get("Bytes") or tp.get("BytesDecimal"),
        }
    return results


def fmt_ns(ns):
    if ns is None:
        return "–"
    if ns < 1e3:
        return f"{ns:.2f} ns" if ns < 100 else f"{ns:.1f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


# The peer of each benchmark, measured in the same run on the same object.
def peer(group, func, param):
    table = {
        "acquire": {
            "pyxbuf_get": "PyObject_GetBuffer",
            "pyxbuf_get_borrow_shared": "PyObject_GetBuffer",
            "PyXBuffer_get": "pyo3_PyBuffer_get",
        },
        "acquire_ndim": {"pyxbuf_get": "PyObject_GetBuffer"},
        "dlpack": {"pyxbuf_get": "np_from_dlpack"},
        "format": {
            "pyxbuf_itemsize_fresh": "struct_calcsize_fresh",
            "pyxbuf_parse_fresh": "struct_calcsize_fresh",
            "pyxbuf_parse": "numpy_pep3118",
            "pyxbuf_itemsize": "numpy_pep3118",
        },
        "format_fields": {"pyxbuf_parse": "numpy_pep3118"},
        "copy": {
            "pyxbuf_to_device": "memcpy",
            "pyxbuf_copy_to_host": "memcpy",
            "alloc_memcpy": "memcpy",
        },
        "cuda_copy": {
            "pyxbuf_to_device": "cuMemAlloc_HtoD_Free",
            "pyxbuf_copy_to_host": "cuMemcpyDtoH",
        },
    }
    if group == "cai" and func == "pyxbuf_get" and param != "dlpack_only":
        return (group, func, "dlpack_only")
    p = table.get(group, {}).get(func)
    return (group, p, param) if p else None


def ratio(results, a, b, stat="median"):
    if a in results and b in results and results[b][stat]:
        return results[a][stat] / results[b][stat]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--criterion", required=True)
    ap.add_argument("--notes", help="default: <criterion>/notes.jsonl")
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--load-before", help="default: <criterion>/load-before")
    ap.add_argument("--command", default="make bench")
    ap.add_argument("--analysis", default=str(ROOT / "bench" / "analysis.md"))
    ap.add_argument("--suffix", default="", help="appended to the file name (repeat runs)")
    args = ap.parse_args()

    results = load_results(args.criterion)
    if args.notes is None:
        args.notes = str(Path(args.criterion) / "notes.jsonl")
    if args.load_before is None:
        lb = Path(args.criterion) / "load-before"
        args.load_before = lb.read_text().strip() if lb.exists() else ""
    notes = []
    if Path(args.notes).exists():
        notes = [json.loads(l) for l in Path(args.notes).read_text().splitlines() if l.strip()]
    paths = {n["id"]: n["text"] for n in notes if n["kind"] == "path"}
    skips = [n for n in notes if n["kind"] == "skip"]

    today = datetime.date.today().isoformat()
    out = Path(args.out_dir) / f"{today}-{machine_slug()}{args.suffix}.md"
    L = []
    w = L.append
    w(f"# pyxbuf benchmarks — {today}, {machine_slug()}\n")
    w(f"Produced by `{args.command}` (Criterion {lock_version('criterion')}, "
      "`cargo bench -p pyxbuf-bench`, bench profile) and `bench/report.py`. "
      "Every ratio divides two medians measured in the same process, on the same objects. "
      "Spread: the median's 95% bootstrap CI and the median absolute deviation (MAD) of the samples.\n")

    w("## Machine and versions\n")
    pv = py_versions()
    git = sh("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD")
    dirty = sh("git", "-C", str(ROOT), "status", "--porcelain", "--", "c", "include", "rust")
    rows = [
        ("CPU", f"{cpu_model()}, {os.cpu_count()} cores (`nproc`)"),
        ("kernel", platform.release()),
        ("load average before / after", f"{args.load_before or '?'} / "
         f"{' '.join(open('/proc/loadavg').read().split()[:3])}"),
        ("C compiler (cc crate)", sh("cc", "--version").splitlines()[0] if sh("cc", "--version") else "?"),
        ("rustc", sh("rustc", "-V")),
        ("pyxbuf", f"{lock_version('pyxbuf')} at {git}" + (" (library sources modified)" if dirty else "")),
        ("PyO3", lock_version("pyo3")),
        ("Python", pv["python"]),
        ("NumPy", pv["numpy"]),
        ("ml_dtypes", pv["ml_dtypes"]),
        ("JAX / jaxlib", f"{pv['jax']} / {pv['jaxlib']}"),
    ]
    w("| | |\n|---|---|")
    for k, v in rows:
        w(f"| {k} | {v} |")
    w("")

    # Targets -----------------------------------------------------------------
    w("## Targets (issue 6)\n")
    w("Verdicts use medians. The machine was shared with other engineers' builds, and some "
      "benchmarks came out bimodal (a fast mode and a mode ~1.7× slower when a core was taken); "
      "the last column divides the two 10th percentiles of the per-iteration sample times "
      "(the fast mode) as a cross-check.\n")
    w("| target | measured (medians) | goal | verdict | ratio of 10th percentiles |\n"
      "|---|---|---|---|---|")

    def verdict(ok):
        return "**met**" if ok else "**missed**"

    def target_ratio(label, a, b, goal, le=True, speedup=False):
        r = ratio(results, a, b)
        if r is None:
            w(f"| {label} | not measured | {goal} | – | |")
            return
        r10 = ratio(results, a, b, "p10")
        if speedup:
            s = 1 / r
            s10 = f"{1 / r10:.0f}× faster" if r10 else ""
            w(f"| {label} | {s:.0f}× faster ({fmt_ns(results[a]['median'])} vs "
              f"{fmt_ns(results[b]['median'])}) | ≥ {goal}× | {verdict(s >= goal)} | {s10} |")
        else:
            s10 = f"{r10:.2f}×" if r10 else ""
            w(f"| {label} | {r:.2f}× ({fmt_ns(results[a]['median'])} vs "
              f"{fmt_ns(results[b]['median'])}) | ≤ {goal}× | {verdict(r <= goal)} | {s10} |")

    for obj in ("numpy_f32_2d", "bytes", "memoryview"):
        target_ratio(f"`pyxbuf_get` classic path ÷ raw GetBuffer+Release ({obj})",
                     ("acquire", "pyxbuf_get", obj), ("acquire", "PyObject_GetBuffer", obj), 1.10)
    for obj in ("numpy_f32_2d", "memoryview", "bytes"):
        t = "u8" if obj == "bytes" else "f32"
        target_ratio(f"`PyXBuffer::<{t}>::get` ÷ PyO3 `PyBuffer::<{t}>::get` ({obj})",
                     ("acquire", "PyXBuffer_get", obj), ("acquire", "pyo3_PyBuffer_get", obj), 0.25)
    dl_objs = sorted({k[2] for k in results if k[0] == "dlpack"})
    any_dl = False
    for obj in dl_objs:
        a, b = ("dlpack", "pyxbuf_get", obj), ("dlpack", "np_from_dlpack", obj)
        if a in results and b in results and paths.get("dlpack/" + obj, "").startswith("dlpack"):
            any_dl = True
            target_ratio(f"DLPack import ÷ `np.from_dlpack` ({obj}, path {paths.get('dlpack/' + obj, '?')})",
                         a, b, 0.5)
    if not any_dl:
        w("| DLPack import ÷ `np.from_dlpack` | not measured (see skips) | ≤ 0.5× | – | |")
    for fmt in ("f", "<d", "B", "Zd", "?"):
        k = ("format", "pyxbuf_parse", fmt)
        if k in results:
            m = results[k]["median"]
            w(f"| single-item parse+clear `{fmt}` | {fmt_ns(m)} | ≤ 5 ns | {verdict(m <= 5.0)} "
              f"| p10 {fmt_ns(results[k]['p10'])} |")
        k = ("format", "pyxbuf_itemsize", fmt)
        if k in results:
            m = results[k]["median"]
            w(f"| single-item `pyxbuf_format_itemsize` `{fmt}` (no descriptor) | {fmt_ns(m)} | ≤ 5 ns "
              f"| {verdict(m <= 5.0)} | p10 {fmt_ns(results[k]['p10'])} |")
    target_ratio("`T{<i:x:<d:y:(2)f:z:}`: NumPy's parser ÷ pyxbuf_format_parse",
                 ("format", "pyxbuf_parse", "T_xyz"), ("format", "numpy_pep3118", "T_xyz"), 50,
                 speedup=True)
    cuda = [k for k in results if k[0] == "cuda_copy"]
    if not cuda:
        why = next((s["text"] for s in skips if s["id"] == "cuda_copy"), "no result")
        w(f"| device copies ÷ raw cuMemcpy bandwidth from 1 MiB | not measured: {why} | ≥ 95% "
          "| – (GPU machine needed) | |")
    else:
        for k in sorted(cuda):
            p = peer(*k)
            if p and p in results and results[k]["bytes"] and results[k]["bytes"] >= 1 << 20:
                bw = results[p]["median"] / results[k]["median"]
                w(f"| `{k[1]}` bandwidth ÷ `{p[1]}` ({k[2]}) | {bw:.0%} | ≥ 95% "
                  f"| {verdict(bw >= 0.95)} | |")
    w("")

    # Every figure ---------------------------------------------------------
    w("## Every figure\n")
    w("Time per operation (acquire + release, one parse + clear, one copy). "
      "Ratio: this row's median ÷ its peer's (named) in the same run.\n")
    groups = []
    for k in results:
        if k[0] not in groups:
            groups.append(k[0])
    order = ["acquire", "dlpack", "cai", "format", "format_fields", "acquire_ndim", "copy", "cuda_copy"]
    groups.sort(key=lambda g: order.index(g) if g in order else 99)
    for g in groups:
        w(f"### {g}\n")
        w("| benchmark | object / size | median | 95% CI | MAD | p10 | throughput | ratio to peer |\n"
          "|---|---|---|---|---|---|---|---|")
        keys = sorted((k for k in results if k[0] == g),
                      key=lambda k: (_num(k[2]), k[2], k[1]))
        for k in keys:
            r = results[k]
            tp = ""
            if r["bytes"]:
                tp = f"{r['bytes'] / r['median']:.2f} GB/s"
            p = peer(*k)
            rr = ratio(results, k, p) if p else None
            rs = f"{rr:.3g}× `{p[1]}`" + (f" ({p[2]})" if p[2] != k[2] else "") if rr else ""
            w(f"| `{k[1]}` | {k[2]} | {fmt_ns(r['median'])} | {fmt_ns(r['lo'])} – {fmt_ns(r['hi'])} "
              f"| {fmt_ns(r['mad'])} | {fmt_ns(r['p10'])} | {tp} | {rs} |")
        w("")

    w("## Paths pyxbuf took\n")
    for k, v in paths.items():
        w(f"- `{k}`: {v}")
    w("\n## Not measured, and why\n")
    for s in skips:
        w(f"- `{s['id']}`: {s['text']}")
    for n in notes:
        if n["kind"] == "format":
            w(f"\nThe 20-field NumPy struct format (`memoryview(np.zeros(1, dtype)).format`): `{n['text']}`")
    w("")
    if args.analysis and Path(args.analysis).exists():
        w(Path(args.analysis).read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(L) + "\n")
    print(out)


def _num(s):
    m = re.match(r"(\d+)", s)
    if not m:
        return -1
    n = int(m.group(1))
    if "MiB" in s:
        n *= 1 << 20
    elif "KiB" in s:
        n *= 1 << 10
    return n


if __name__ == "__main__":
    main()
