"""The per-argument race (make bench-args): what one array argument costs in
each binding framework, pyxbuf's route beside the framework's own.

  race.py ir --dumps DIR       under valgrind --tool=callgrind: for each case,
                               zero the counters, call the route LOOPS times
                               from a Python loop, dump the counters labelled
                               with the case (Callgrind's client requests)
  race.py collect DIR --out F  the dumps' instruction counts, as JSON
  race.py wall --out F         wall clock with pyperf (worker processes)
  race.py wall-table F         the wall-clock figures alone, as Markdown
  race.py report --ir F --wall F --out MD
                               per-call and per-argument figures, the targets
                               ("target <name> ratio=<x> goal=<op><y> met|missed",
                               then "N met, M missed") into MD and stdout

A route's argument cost is its call minus its framework's noop on the same
input, so the Python loop, the call and the return value cancel out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

# One thread: a BLAS or OpenMP pool spinning beside the loop would add its
# instructions to Callgrind's counts (which cover every thread).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import routes  # noqa: E402

LOOPS = 2000


# --------------------------------------------------------------------------
# Instruction counts
# --------------------------------------------------------------------------

def take_registry() -> None:
    """A copy of pyxbuf that no route uses owns the borrow registry, so every
    measured module reaches it as most extensions do (args_c.c says why)."""
    import _args_owner

    _args_owner.take_registry()


def run_ir(dumps: Path) -> None:
    take_registry()
    import _args_c as c

    if not c.under_callgrind():
        sys.exit("race.py ir: run me under valgrind --tool=callgrind (make bench-args does)")
    r = range(LOOPS)
    unsupported = {}
    for case in routes.cases():
        if case.why:
            unsupported[case.label] = case.why
            continue
        for kind, fn in (("call", case.fn), ("noop", case.noop)):
            obj = case.obj
            for _ in range(20):  # warm: caches, the supported-flags cache
                fn(obj)
            c.ir_zero()
            for _ in r:
                fn(obj)
            c.ir_dump(f"{kind}|{case.label}")
    (dumps / "unsupported.json").write_text(json.dumps(unsupported, indent=1))


def collect(dumps: Path) -> dict:
    """{label: Ir per call} from Callgrind's dump files (one per ir_dump)."""
    out = {"loops": LOOPS, "call": {}, "noop": {}}
    for f in sorted(dumps.glob("cg.*")):
        text = f.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if not trigger or not total:
            continue
        kind, label = trigger.group(1).split("|", 1)
        out[kind][label] = int(total.group(1)) / LOOPS
    out["unsupported"] = json.loads((dumps / "unsupported.json").read_text())
    return out


# --------------------------------------------------------------------------
# Wall clock
# --------------------------------------------------------------------------

def run_wall(out: Path) -> dict:
    """Each case's call and noop as pyperf benchmarks; pyperf re-runs this
    script as its workers (their argv carries --worker)."""
    import pyperf

    take_registry()
    runner = pyperf.Runner(processes=int(os.environ.get("ARGS_PROCESSES", "4")), values=5,
                           warmups=1, loops=2000)
    for case in routes.cases():
        if case.why:
            continue
        runner.bench_func(f"call|{case.label}", case.fn, case.obj)
        runner.bench_func(f"noop|{case.label}", case.noop, case.obj)


def wall_figures(path: Path) -> dict:
    import pyperf

    suite = pyperf.BenchmarkSuite.load(str(path))
    out = {"call": {}, "noop": {}, "var_of_mean": {}}
    for b in suite.get_benchmarks():
        kind, label = b.get_name().split("|", 1)
        out[kind][label] = b.median() * 1e9  # ns per call
        n = b.get_nvalue()
        out["var_of_mean"][b.get_name()] = (b.stdev() * 1e9) ** 2 / n if n > 1 else 0.0
    return out


# (framework, pyxbuf's route, the framework's native argument)
WALL_PAIRS = [
    ("pyo3", "PyXBuffer", "PyBuffer"),
    ("pyo3-abi3", "PyXBuffer", "PyBuffer"),
    ("pyo3", "PyXBuffer1", "PyReadonlyArray1"),
    ("cython", "pyxbuf", "float[:]"),
    ("nanobind", "pyxbuf::view", "nb::ndarray"),
    ("pybind11", "pyxbuf::view", "py::array_t"),
]


def wall_verdict(wall: dict, fw: str, ours: str, theirs: str,
                 inp: str) -> tuple[float, float, float] | None:
    """Issue 28's wall-clock rule for one pair: (our argument ns, theirs, the
    spread), the spread being two standard errors of the difference of the
    two argument costs (each a call minus a noop: four benchmarks' variances
    of the mean, summed); None when either is unmeasured."""
    arg = argument_costs(wall)
    a, b = f"{fw}/{ours}/{inp}", f"{fw}/{theirs}/{inp}"
    if a not in arg or b not in arg:
        return None
    spread = 2 * sum(wall["var_of_mean"].get(f"{k}|{lbl}", 0.0)
                     for k in ("call", "noop") for lbl in (a, b)) ** 0.5
    return arg[a], arg[b], spread


def wall_agreement(wall: dict) -> list[str]:
    """No pyxbuf route slower than its framework's native argument beyond the
    measurement's spread (wall_verdict)."""
    lines = []
    for inp in ("numpy_f32", "memoryview_f32", "torch_f32"):
        for fw, ours, theirs in WALL_PAIRS:
            v = wall_verdict(wall, fw, ours, theirs, inp)
            if v is None:
                continue
            a, b, spread = v
            verdict = "agrees" if a <= b + spread else "slower"
            lines.append(f"wall {fw} {ours} {a:.1f} ns vs {theirs} {b:.1f} ns "
                         f"on {inp} (spread {spread:.1f} ns): {verdict}")
    return lines


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

def argument_costs(fig: dict) -> dict:
    return {k: v - fig["noop"][k] for k, v in fig["call"].items() if k in fig["noop"]}


def targets(ir: dict, wall: dict | None = None) -> list[tuple[str, str, str, bool | None]]:
    """[(name, ratio text, goal text, met or None when unmeasured, basis)]."""
    arg = argument_costs(ir)
    rows = []

    def ratio(name, ours, peer, goal, inp="numpy_f32"):
        a, b = arg.get(f"{ours}/{inp}"), arg.get(f"{peer}/{inp}")
        if a is None or b is None:
            missing = ours if a is None else peer
            rows.append((name, "n/a", f"<={goal:.2f}", None, f"{missing}/{inp} unmeasured"))
            return
        r = a / b
        rows.append((name, f"{r:.3f}", f"<={goal:.2f}", r <= goal, f"{a:.0f} / {b:.0f} Ir"))

    def adds(name, ours, budget, inp="numpy_f32"):
        a, base = arg.get(f"{ours}/{inp}"), arg.get(f"c/pyxbuf_shared/{inp}")
        if a is None or base is None:
            rows.append((name, "n/a", f"<=+{budget}", None, f"{ours}/{inp} unmeasured"))
            return
        d = a - base
        rows.append((name, f"{d:+.0f}", f"<=+{budget}", d <= budget,
                     f"{a:.0f} - {base:.0f} Ir (C pyxbuf_get, shared)"))

    ratio("1-pyo3-PyXBuffer-vs-PyBuffer", "pyo3/PyXBuffer", "pyo3/PyBuffer", 1.00)
    ratio("1-pyo3-PyXBuffer1-vs-PyReadonlyArray1", "pyo3/PyXBuffer1", "pyo3/PyReadonlyArray1", 1.00)
    ratio("1-cython-pyxbuf-vs-memoryview", "cython/pyxbuf", "cython/float[:]", 1.00)
    ratio("1-nanobind-view-vs-ndarray", "nanobind/pyxbuf::view", "nanobind/nb::ndarray", 1.00)
    ratio("1-pybind11-view-vs-array_t", "pybind11/pyxbuf::view", "pybind11/py::array_t", 1.00)
    ratio("2-PyXBuffer-vs-PyBuffer", "pyo3/PyXBuffer", "pyo3/PyBuffer", 0.85)
    ratio("2-PyXBuffer1-vs-PyReadonlyArray1", "pyo3/PyXBuffer1", "pyo3/PyReadonlyArray1", 0.85)
    adds("3-cython-adds", "cython/pyxbuf", 60)
    adds("3-nanobind-adds", "nanobind/pyxbuf::view", 60)
    adds("3-pybind11-adds", "pybind11/pyxbuf::view", 60)
    adds("3-pyo3-adds", "pyo3/PyXBuffer", 200)
    ratio("4-torch-view-vs-nb::ndarray", "nanobind/pyxbuf::view", "nanobind/nb::ndarray", 0.50,
          inp="torch_f32")
    # Issue 39: the machine-learning dtypes at float32's cost, each route on
    # ml_dtypes bfloat16 and float8_e4m3fn against the same route on float32.
    for route in ("c/pyxbuf", "c/pyxbuf_shared", "pyo3/PyXBuffer", "nanobind/pyxbuf::view",
                  "pybind11/pyxbuf::view"):
        for inp, short in (("numpy_bf16", "bf16"), ("numpy_f8", "f8")):
            a, b = arg.get(f"{route}/{inp}"), arg.get(f"{route}/numpy_f32")
            name = f"6-{route.replace('/', '-')}-{short}-vs-f32"
            if a is None or b is None:
                rows.append((name, "n/a", "<=1.25", None, f"{route}/{inp} unmeasured"))
            else:
                rows.append((name, f"{a / b:.3f}", "<=1.25", a / b <= 1.25,
                             f"{a:.0f} / {b:.0f} Ir"))
    # Issue 38, part 5: the tracked shared grant on a producer that knows
    # nothing of borrows (memoryview), and PyXBuffer<f32>, which takes it,
    # against PyO3's PyBuffer<f32>, which grants nothing.
    mv = "memoryview_f32"
    a, base = arg.get(f"c/pyxbuf_shared/{mv}"), arg.get(f"c/pyxbuf/{mv}")
    if a is None or base is None:
        rows.append(("5-tracked-grant-adds", "n/a", "<=+100", None, f"c/pyxbuf*/{mv} unmeasured"))
    else:
        rows.append(("5-tracked-grant-adds", f"{a - base:+.0f}", "<=+100", a - base <= 100,
                     f"{a:.0f} - {base:.0f} Ir (C pyxbuf_get shared - plain, {mv})"))
    ratio("5-PyXBuffer-vs-PyBuffer-memoryview", "pyo3/PyXBuffer", "pyo3/PyBuffer", 1.00, inp=mv)
    # Issue 50, item 5: both built for the stable ABI (abi3 from 3.11),
    # PyXBuffer at most PyBuffer's cost on NumPy and on memoryview.
    ratio("7-abi3-PyXBuffer-vs-PyBuffer-numpy", "pyo3-abi3/PyXBuffer", "pyo3-abi3/PyBuffer", 1.00)
    ratio("7-abi3-PyXBuffer-vs-PyBuffer-memoryview", "pyo3-abi3/PyXBuffer", "pyo3-abi3/PyBuffer",
          1.00, inp=mv)
    if wall:
        verdict = wall_verdict(wall, "pyo3", "PyXBuffer", "PyBuffer", mv)
        if verdict is None:
            rows.append(("5-PyXBuffer-vs-PyBuffer-memoryview-wall", "n/a", "<=spread", None,
                         "unmeasured"))
        else:
            ours, theirs, spread = verdict
            rows.append(("5-PyXBuffer-vs-PyBuffer-memoryview-wall", f"{ours - theirs:+.1f}ns",
                         f"<=+{spread:.1f}ns", ours <= theirs + spread,
                         f"{ours:.1f} / {theirs:.1f} ns (pyperf medians, argument cost; the "
                         "goal is two standard errors of the difference)"))
    # Issue 39, item 5: Cython's XView guard (XView.get, release() in
    # `finally`) against Cython's own typed memoryview argument, on NumPy.
    # On a memoryview it stays an open goal (report(); bench/analysis.md
    # says why it cannot be met soundly with today's Cython).
    ratio("7-cython-XView-vs-float[:]-numpy", "cython/XView", "cython/float[:]", 1.00)
    return rows


def versions() -> str:
    out = [f"Python {platform.python_version()}"]
    for name in ("numpy", "ml_dtypes", "torch", "Cython", "nanobind", "pybind11", "pyperf"):
        try:
            mod = __import__(name)
            out.append(f"{name} {getattr(mod, '__version__', '?')}")
        except ImportError:
            out.append(f"{name} absent")
    return ", ".join(out)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def report(ir: dict, wall: dict | None, out: Path) -> int:
    arg_ir = argument_costs(ir)
    arg_wall = argument_costs(wall) if wall else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [f"# Per-argument race, {date.today()} (make bench-args)", "",
             f"Commit {commit}; {machine()}.", f"{versions()}.", "",
             "One 1-D array argument per call, from a Python loop; *argument* = the call minus "
             "its framework's `noop` on the same input. Instruction counts (Callgrind, "
             f"{ir['loops']} calls per figure) are the target basis; wall clock (pyperf median, "
             "4 processes x 5 values x 2000 loops) is the record.", "",
             "| route | input | call Ir | argument Ir | call ns | argument ns |",
             "|---|---|---|---|---|---|"]
    labels = sorted(set(ir["call"]) | set(ir["unsupported"]),
                    key=lambda s: (s.split("/")[-1], s))
    for label in labels:
        fw_route, inp = label.rsplit("/", 1)
        if label in ir["unsupported"]:
            lines.append(f"| {fw_route} | {inp} | unsupported: {ir['unsupported'][label]} | | | |")
            continue
        w_call = f"{wall['call'][label]:.1f}" if wall and label in wall["call"] else "-"
        w_arg = f"{arg_wall[label]:.1f}" if label in arg_wall else "-"
        lines.append(f"| {fw_route} | {inp} | {ir['call'][label]:.0f} | {arg_ir[label]:.0f} | "
                     f"{w_call} | {w_arg} |")
    lines += ["", "## Targets (argument cost: instruction counts; the one -wall target in "
              "wall clock)", "", "```"]
    met = missed = unmeasured = 0
    for name, r, goal, ok, basis in targets(ir, wall):
        verdict = "met" if ok else ("missed" if ok is False else "unmeasured")
        met += ok is True
        missed += ok is False
        unmeasured += ok is None
        lines.append(f"target {name} ratio={r} goal={goal} {verdict}  # {basis}")
    tail = f"{met} met, {missed} missed"
    if unmeasured:
        tail += f", {unmeasured} unmeasured"
    lines += [tail, "```", ""]
    # Goals not met, shown beside the targets: issue 39's Cython XView
    # against float[:] on a memoryview (bench/analysis.md: why), and what
    # XView's other two forms cost against float[:] (XView.get made straight
    # into the memoryview; the with block).
    arg = argument_costs(ir)
    open_goals = []
    for form, inputs, kind in (("XView", ("memoryview_f32",), "open"),
                               ("XView.get", ("numpy_f32", "memoryview_f32"), "form"),
                               ("XView-with", ("numpy_f32", "memoryview_f32"), "form")):
        for inp in inputs:
            a, b = arg.get(f"cython/{form}/{inp}"), arg.get(f"cython/float[:]/{inp}")
            if a is not None and b is not None:
                goal = " goal=<=1.00" if kind == "open" else ""
                open_goals.append(f"{kind} 7-cython-{form}-vs-float[:]-{inp.split('_')[0]} "
                                  f"ratio={a / b:.3f}{goal}  # {a:.0f} / {b:.0f} Ir")
    if open_goals:
        lines += ["## Open goals and XView's other forms (issue 39)", "", "```", *open_goals,
                  "```", ""]
    if wall:
        lines += ["## Wall clock against each framework's own argument (pyperf)", "", "```"]
        lines += wall_agreement(wall) + ["```", ""]
    text = "\n".join(lines)
    out.write_text(text)
    print(text[text.index("## Targets"):])
    return 0


def wall_table(wall: dict) -> str:
    """The wall-clock figures alone (a machine without valgrind)."""
    arg = argument_costs(wall)
    rows = ["| route | input | call ns | argument ns |", "|---|---|---|---|"]
    for label in sorted(wall["call"], key=lambda s: (s.split("/")[-1], s)):
        fw_route, inp = label.rsplit("/", 1)
        rows.append(f"| {fw_route} | {inp} | {wall['call'][label]:.1f} | {arg[label]:.1f} |")
    return "\n".join(rows)


def main() -> int:
    if "--worker" in sys.argv:  # a pyperf worker of `wall`
        run_wall(Path())
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ir")
    s.add_argument("--dumps", type=Path, required=True)
    s = sub.add_parser("collect")
    s.add_argument("dumps", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("wall")
    s.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("wall-table")
    s.add_argument("wall", type=Path)
    s = sub.add_parser("report")
    s.add_argument("--ir", type=Path, required=True)
    s.add_argument("--wall", type=Path)
    s.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    if a.cmd == "ir":
        run_ir(a.dumps)
    elif a.cmd == "collect":
        a.out.write_text(json.dumps(collect(a.dumps), indent=1))
    elif a.cmd == "wall":
        sys.argv = [sys.argv[0], "-o", str(a.out), "--quiet",
                    "--inherit-environ=ARGS_ONLY,OPENBLAS_NUM_THREADS,OMP_NUM_THREADS"]
        run_wall(a.out)
    elif a.cmd == "wall-table":
        print(wall_table(wall_figures(a.wall)))
    else:
        ir = json.loads(a.ir.read_text())
        wall = wall_figures(a.wall) if a.wall and a.wall.exists() else None
        return report(ir, wall, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
