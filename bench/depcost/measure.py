#!/usr/bin/env python3
"""What depending on pyxbuf costs a small PyO3 module (issue 50, item 7).

Builds the crates of bench/depcost/ (each its own workspace, as a user's
crate is) with `cargo build --release --offline` and measures, per crate:

- cold, all: the build from an empty target directory (every dependency,
  pyo3's included, compiled);
- cold, pyo3 prebuilt: the build after `cargo clean -p` of the crate and of
  every package the baseline crate (depcost-pyo3) does not have, so what is
  timed is exactly what the extra dependencies (pyxbuf, pyxbuf-sys and its C
  library, ndarray, ...) add to a crate whose pyo3 is already built;
- incremental: the rebuild after touching the crate's src/lib.rs;
- C test touched: the rebuild after touching a C test (c/tests/*.c, which
  the library is not built from), as a contributor's edit there does;
- the module's size: as cargo leaves it (the default release profile strips
  debug info, not symbols), after `strip`, and its `size` text/data/bss.

Each figure is the median of --repeat runs (all runs are recorded); the
machine's 1-minute load average is read before each run. Prints a Markdown
section on stdout (and to --out when given).

    .venv/bin/python bench/depcost/measure.py --label after --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CRATES = {
    "depcost-pyo3": ("pyo3", "depcost_pyo3"),
    "depcost-pyxbuf": ("pyxbuf", "depcost_pyxbuf"),
    "depcost-pyxbuf-nodefault": ("pyxbuf-nodefault", "depcost_pyxbuf_nodefault"),
}
BASELINE = "depcost-pyo3"
PHASES = ["cold", "prebuilt", "incremental", "ctest"]


def load1() -> float:
    return os.getloadavg()[0]


def cargo(args: list[str], cwd: Path, target: Path, jobs: int, check=True):
    env = dict(os.environ, CARGO_TARGET_DIR=str(target), CARGO_BUILD_JOBS=str(jobs))
    return subprocess.run(
        ["cargo", *args], cwd=cwd, env=env, check=check,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def timed_build(cwd: Path, target: Path, jobs: int) -> tuple[float, float]:
    load = load1()
    t0 = time.monotonic()
    r = cargo(["build", "--release", "--offline"], cwd, target, jobs, check=False)
    elapsed = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"cargo build failed in {cwd}:\n{r.stderr[-4000:]}")
    return elapsed, load


def packages(cwd: Path) -> set[str]:
    """Names of every package in the crate's build graph (normal and build edges)."""
    meta = json.loads(cargo(
        ["metadata", "--offline", "--format-version", "1"], cwd, Path("/nonexistent"), 1
    ).stdout)
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    names = {p["id"]: p["name"] for p in meta["packages"]}
    seen, todo = set(), [meta["resolve"]["root"]]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return {names[p] for p in seen}


def sizes(so: Path) -> dict:
    stripped = so.with_suffix(".stripped.so")
    subprocess.run(["strip", "-o", str(stripped), str(so)], check=True)
    text, data, bss = subprocess.run(
        ["size", str(stripped)], check=True, stdout=subprocess.PIPE, text=True
    ).stdout.splitlines()[1].split()[:3]
    out = {
        "unstripped": so.stat().st_size,
        "stripped": stripped.stat().st_size,
        "text": int(text), "data": int(data), "bss": int(bss),
    }
    stripped.unlink()
    return out


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="now", help="names the target directories and the section")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--crates", nargs="*", default=list(CRATES))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--phases", nargs="*", default=list(PHASES),
                    help="which figures; 'ctest' alone reuses the target directory")
    args = ap.parse_args()

    base_pkgs = packages(HERE / CRATES[BASELINE][0])
    rows, raw = [], {}
    for crate in args.crates:
        sub, lib = CRATES[crate]
        cwd = HERE / sub
        target = ROOT / "target" / "depcost" / args.label / sub
        extra = sorted((packages(cwd) - base_pkgs) | {crate})
        r = raw[crate] = {"cold_all": [], "cold_pyo3_prebuilt": [], "incremental": [],
                          "c_test_touched": [], "load": []}
        def run(key):
            t, load = timed_build(cwd, target, args.jobs)
            r[key].append(t)
            r["load"].append(load)
        if "cold" in args.phases:
            for _ in range(args.repeat):
                shutil.rmtree(target, ignore_errors=True)
                run("cold_all")
        else:
            timed_build(cwd, target, args.jobs)  # up to date first
        if "prebuilt" in args.phases:
            spec = [a for p in extra for a in ("-p", p)]
            for _ in range(args.repeat):
                cargo(["clean", "--release", "--offline", *spec], cwd, target, args.jobs)
                run("cold_pyo3_prebuilt")
        if "incremental" in args.phases:
            for _ in range(args.repeat):
                os.utime(cwd / "src" / "lib.rs")
                run("incremental")
        if "ctest" in args.phases and crate != BASELINE:
            c_test = sorted((ROOT / "c" / "tests").glob("*.c"))[0]
            for _ in range(args.repeat):
                os.utime(c_test)
                run("c_test_touched")
        r["size"] = sizes(target / "release" / f"lib{lib}.so")
        r["extra_packages"] = extra
        rows.append(crate)
        print(f"{crate}: {json.dumps(r)}", file=sys.stderr)

    base = raw.get(BASELINE)
    lines = [
        f"### {args.label}",
        "",
        f"`{' '.join(['bench/depcost/measure.py', *sys.argv[1:]])}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} CPUs, CARGO_BUILD_JOBS={args.jobs}, "
        f"medians of {args.repeat}; 1-min load average before the runs: "
        + ", ".join(f"{c} {min(raw[c]['load']):.2f}–{max(raw[c]['load']):.2f}"
                 for c in rows if raw[c]["load"]),
        "",
        "| crate | cold, all (s) | cold, pyo3 prebuilt (s) | incremental (s) "
        "| C test touched (s) | .so as built (bytes) | stripped (bytes) | text | data |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in rows:
        r = raw[c]
        s = r["size"]
        def t(key):
            if not r[key]:
                return "–"
            if not base or c == BASELINE or not base[key]:
                return f"{median(r[key]):.1f}"
            return f"{median(r[key]):.1f} ({median(r[key]) - median(base[key]):+.1f})"
        def sdelta(key):
            if not base or c == BASELINE:
                return ""
            return f" ({s[key] - base['size'][key]:+,})"
        lines.append(
            f"| {c} | {t('cold_all')} | {t('cold_pyo3_prebuilt')} | {t('incremental')} "
            f"| {t('c_test_touched')} "
            f"| {s['unstripped']:,}{sdelta('unstripped')} | {s['stripped']:,}{sdelta('stripped')} "
            f"| {s['text']:,}{sdelta('text')} | {s['data']:,}{sdelta('data')} |"
        )
    lines += ["", "All runs (seconds):", ""]
    for c in rows:
        r = raw[c]
        lines.append(
            f"- {c}: cold, all {[round(x, 1) for x in r['cold_all']]}; "
            f"pyo3 prebuilt {[round(x, 1) for x in r['cold_pyo3_prebuilt']]}; "
            f"incremental {[round(x, 1) for x in r['incremental']]}; "
            f"C test touched {[round(x, 1) for x in r['c_test_touched']]}"
            + f"; cleaned for 'pyo3 prebuilt': {', '.join(r['extra_packages'])}"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
