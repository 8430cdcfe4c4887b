#!/usr/bin/env python3
"""The report of `make bench-ir`: instruction counts per operation from
gungraun's summaries (bench/benches/ir.rs), the ratios of issue 12's targets,
and the wall-clock target read from a Criterion run of the copy benchmarks.

Writes bench/results/ir-<date>.md and prints, last, one line per target:
    target <name> ratio=<x.xx> goal=<=y.yy met        (or ... missed)
then "N met, M missed". The exit status is 0 either way: missing a target is
a finding, not a broken run (a missing measurement is an error, status 1).
"""

import argparse
import datetime
import glob
import json
import os
import subprocess
import sys

# The operations run this many times per measurement (bench/src/ir.rs ITERS).
ITERS = 100


def load_counts(root):
    """{bench id: instructions per operation} from gungraun's summaries."""
    counts = {}
    for path in glob.glob(os.path.join(root, "**", "summary.json"), recursive=True):
        with open(path) as f:
            s = json.load(f)
        parts = s["profiles"][0]["data"]["parts"]
        ir = sum(p["metrics"]["Ir"]["values"]["new"] or 0 for p in parts)
        counts[s["id"]] = ir / ITERS
    return counts


def criterion_median(home, group, function, param):
    path = os.path.join(home, group, function, param, "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]


class Target:
    def __init__(self, name, what, ratio, goal, at_most=True, detail=""):
        self.name, self.what, self.ratio, self.goal = name, what, ratio, goal
        self.at_most, self.detail = at_most, detail

    @property
    def met(self):
        return self.ratio <= self.goal if self.at_most else self.ratio >= self.goal

    def line(self):
        op = "<=" if self.at_most else ">="
        verdict = "met" if self.met else "missed"
        return f"target {self.name} ratio={self.ratio:.2f} goal={op}{self.goal:.2f} {verdict}"


def targets(c, copy):
    t = []

    def ratio(name, what, a, b, goal, **kw):
        t.append(Target(name, what, c[a] / c[b], goal,
                        detail=kw.pop("detail", f"{c[a]:.0f} / {c[b]:.0f} Ir"), **kw))

    # 1. pyxbuf_get's classic path against the raw protocol.
    ratio("1-pyxbuf_get-numpy", "pyxbuf_get ÷ PyObject_GetBuffer+PyBuffer_Release, NumPy 2-D f32",
          "pyxbuf_get_numpy", "raw_getbuffer_numpy", 1.08)
    for obj in ("bytes", "memoryview"):
        raw, ours = c[f"raw_getbuffer_{obj}"], c[f"pyxbuf_get_{obj}"]
        t.append(Target(f"1-pyxbuf_get-{obj}",
                        f"pyxbuf_get ÷ raw, {obj}: at most raw + 60 instructions",
                        ours / raw, (raw + 60) / raw,
                        detail=f"{ours:.0f} / {raw:.0f} Ir (+{ours - raw:.0f}; budget +60)"))
    # 2-3. PyXBuffer as a #[pyfunction] argument against PyO3's PyBuffer.
    ratio("2-PyXBuffer-numpy", "PyXBuffer::<f32> extract+drop ÷ PyO3 PyBuffer::<f32>, NumPy",
          "pyxbuffer_numpy", "pyo3_pybuffer_numpy", 0.95)
    ratio("2-PyXBuffer-memoryview", "the same, memoryview of NumPy f32",
          "pyxbuffer_memoryview", "pyo3_pybuffer_memoryview", 1.00)
    ratio("2-PyXBuffer-bytes", "the same, bytes as u8",
          "pyxbuffer_bytes", "pyo3_pybuffer_bytes", 1.00)
    ratio("3-PyXBuffer-shared-numpy",
          "PyXBuffer::<f32> with its shared borrow granted (tracked) and used (as_slice) ÷ PyO3",
          "pyxbuffer_slice_numpy", "pyo3_pybuffer_numpy", 1.10)
    # 4. DLPack.
    ratio("4-dlpack-py", "pyxbuf_get ÷ np.from_dlpack, through __dlpack__ (NumPy f32 behind a "
          "forwarding wrapper)", "pyxbuf_get_dlpack_only", "np_from_dlpack_dlpack_only", 0.85)
    ratio("4-dlpack-c", "pyxbuf_get through the DLPack C exchange table ÷ np.from_dlpack of the "
          "same object", "pyxbuf_get_testext_dlpack_c", "np_from_dlpack_testext_dlpack_c", 0.25)
    # 5. The array interface.
    ratio("5-array-interface-bf16",
          "pyxbuf_get of ml_dtypes bfloat16 ÷ getattr(obj, '__array_interface__')",
          "pyxbuf_get_ml_dtypes_bf16", "getattr_array_interface_ml_dtypes_bf16", 1.5)
    # 6. Single-item formats: absolute budgets, as ratios to the budget (the
    # worst of the single items measured). Callgrind counts these inside
    # pyxbuf_format_* only (benches/ir.rs: the harness loop is not pyxbuf's).
    for name, prefix, budget in (("6-format-parse", "format_parse_", 60),
                                 ("6-format-itemsize", "format_itemsize_", 40)):
        items = {k: v for k, v in c.items() if k.startswith(prefix) and k != prefix + "struct3"}
        worst = max(items, key=items.get)
        t.append(Target(name, f"{prefix.rstrip('_')} on one item ÷ a budget of {budget} Ir "
                        "(the worst item; instructions inside pyxbuf_format_* only)", items[worst] / budget, 1.0,
                        detail=", ".join(f"{k[len(prefix):]} {v:.0f} Ir" for k, v in
                                         sorted(items.items()))))
    # 7. NumPy's PEP 3118 parser against pyxbuf's.
    ratio("7-struct-format", "NumPy's _dtype_from_pep3118 ÷ pyxbuf_format_parse+clear, "
          "T{<i:x:<d:y:(2)f:z:}", "numpy_pep3118_struct3", "format_parse_struct3", 100,
          at_most=False)
    # 8. Wall clock (Criterion), not instructions.
    if copy is not None:
        ours, peer = copy
        t.append(Target("8-to-device-64MiB",
                        "pyxbuf_to_device (direct path) ÷ memcpy on the emulated device, 64 MiB "
                        "(Criterion medians, wall clock)", ours / peer, 1.2,
                        detail=f"{ours / 1e6:.2f} / {peer / 1e6:.2f} ms"))
    return t


def git_rev():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_markdown(path, counts, ts, args):
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True)
    with open(path, "w") as f:
        f.write(f"# Instruction counts, {datetime.date.today().isoformat()}\n\n")
        f.write(f"`{args.command}` at {git_rev()}; {valgrind.stdout.strip()} (Callgrind through "
                f"gungraun); load average {os.getloadavg()[0]:.2f} (instruction counts do not "
                "depend on it; the wall-clock target does).\n\n")
        f.write(f"Each figure is instructions per operation: the benchmark ran its operation "
                f"{ITERS} times after one warm-up run (bench/src/ir.rs), harness loop "
                "included, except the single-item format benchmarks (format_parse_f, "
                "format_parse_le_d, format_parse_zd, format_itemsize_*): those count only "
                "instructions inside pyxbuf_format_*, with no warm-up.\n\n## Targets\n\n| target | what | figures | ratio | goal | |\n"
                "|---|---|---|---|---|---|\n")
        for t in ts:
            op = "≤" if t.at_most else "≥"
            f.write(f"| {t.name} | {t.what} | {t.detail} | {t.ratio:.2f} | {op} {t.goal:.2f} | "
                    f"{'met' if t.met else '**missed**'} |\n")
        f.write("\n## Every benchmark\n\n| benchmark | Ir per operation |\n|---|---|\n")
        for k in sorted(counts):
            f.write(f"| {k} | {counts[k]:.1f} |\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gungraun", default="target/gungraun/pyxbuf-bench/ir")
    ap.add_argument("--criterion", help="Criterion home of the copy run (target 8)")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--command", default="make bench-ir")
    args = ap.parse_args()
    counts = load_counts(args.gungraun)
    if not counts:
        sys.exit(f"ir_report: no gungraun summaries under {args.gungraun}")
    copy = None
    if args.criterion:
        copy = (criterion_median(args.criterion, "copy", "pyxbuf_to_device", "64MiB"),
                criterion_median(args.criterion, "copy", "memcpy", "64MiB"))
    try:
        ts = targets(counts, copy)
    except KeyError as e:
        sys.exit(f"ir_report: benchmark {e} was not measured")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"ir-{datetime.date.today().isoformat()}.md")
    write_markdown(path, counts, ts, args)
    print(f"ir_report: wrote {path}")
    for t in ts:
        print(t.line())
    met = sum(t.met for t in ts)
    print(f"{met} met, {len(ts) - met} missed")


if __name__ == "__main__":
    main()
