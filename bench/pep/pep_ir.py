"""Instruction counts of the extended buffer protocol in CPython (cpython/).

    pep_ir.py run OUT_DIR        # under valgrind --tool=callgrind: one dump per case
    pep_ir.py collect OUT_DIR    # -> OUT_DIR/ir.json: instructions per acquisition
    pep_ir.py report STOCK.json PEP.json --out bench/results/pep-ir-<date>.md

tools/bench-pep.sh runs all three on the stock 3.15 and on 3.15-pep. Each
case is N acquisitions and releases of one object with one request, counted
between Callgrind client requests (bench/pep/getbuffer_ir.c), less the empty
loop: what one acquisition costs, in instructions, which the shared machine
does not blur (DESIGN.md: use them for targets; wall clock drifts by 2x).
"""

import json
import re
import sys
from pathlib import Path

N = 2000
SIMPLE, FORMAT, ND, STRIDES = 0, 0x4, 0x8, 0x18
RECORDS_RO = STRIDES | FORMAT
FULL_RO = 0x100 | STRIDES | FORMAT
DEVICE = 0x400


def objects():
    import numpy as np

    objs = {
        "bytes": b"0123456789abcdef",
        "bytearray": bytearray(16),
        "memoryview": memoryview(b"0123456789abcdef"),
        "numpy-f32": np.arange(16, dtype=np.float32),
        "numpy-2d": np.zeros((4, 4), dtype=np.float64),
    }
    try:
        import _pyxbuf_testext as t

        objs["exporter-host"] = t.exporter("<f", (16,))
        objs["exporter-device"] = t.exporter("<f", (16,), device=(t.PYXBUF_DL_EXT_DEV, 0))
    except ImportError:
        pass
    try:
        import _testcapi

        if hasattr(_testcapi, "make_buffer_type"):
            kind = _testcapi.make_buffer_type(
                "_testcapi.bench_device", _testcapi.PyBUF_CLASSIC_FLAGS | DEVICE)
            objs["native-device"] = kind("device")
    except ImportError:
        pass
    return objs


# (label, kind, object, request)
CASES = [
    ("empty", "empty", "bytes", SIMPLE),
    *[(f"classic {o} {r}", "classic", o, f)
      for o in ("bytes", "bytearray", "memoryview", "numpy-f32", "numpy-2d")
      for r, f in (("SIMPLE", SIMPLE), ("RECORDS_RO", RECORDS_RO), ("FULL_RO", FULL_RO))],
    *[(f"{k} {o} DEVICE|RECORDS_RO", k, o, DEVICE | RECORDS_RO)
      for k in ("native", "pyxbuf")
      for o in ("bytes", "numpy-f32", "exporter-host", "exporter-device", "native-device")],
]


def run(out: Path):
    import _pep_ir  # built by tools/bench-pep.sh, on PYTHONPATH

    have = set(_pep_ir.kinds())
    objs = objects()
    for label, kind, name, flags in CASES:
        if kind in have and name in objs:
            _pep_ir.measure(kind, objs[name], flags, N, label)


def collect(out: Path):
    totals = {}
    for dump in sorted(out.glob("cg.*")):
        text = dump.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
        # totals: the cost lines of this dump (summary: of the first dump
        # counts the interpreter start too)
        total = re.search(r"^totals: (\d+)", text, re.M)
        if label and total:
            totals[label.group(1)] = int(total.group(1))
    empty = totals.pop("empty")
    per = {k: round((v - empty) / N, 1) for k, v in totals.items()}
    (out / "ir.json").write_text(json.dumps(per, indent=1, sort_keys=True))


def report(stock_json: Path, pep_json: Path, out: Path, header: str):
    stock = json.loads(stock_json.read_text())
    pep = json.loads(pep_json.read_text())
    lines = [header, "",
             "## 1. The proposal's cost to every existing caller",
             "",
             "`PyObject_GetBuffer` + `PyBuffer_Release` with a classic request, on the stock",
             "3.15 against 3.15-pep (instructions per acquisition, the loop subtracted).",
             "",
             "| object | request | stock | patched | added |",
             "|---|---|---|---|---|"]
    for key in sorted(k for k in pep if k.startswith("classic ")):
        _, obj, req = key.split(" ")
        s, p = stock.get(key), pep[key]
        added = f"{p - s:+.1f}" if s is not None else "-"
        lines.append(f"| {obj} | {req} | {s} | {p} | {added} |")
    lines += ["",
              "## 2. Native `PyObject_GetBuffer` against `pyxbuf_get` on 3.15-pep",
              "",
              "`PyBUF_DEVICE | PyBUF_RECORDS_RO` on the same objects; pyxbuf built in its",
              "native mode. Ratio: pyxbuf / native.",
              "",
              "| object | native | pyxbuf | ratio |",
              "|---|---|---|---|"]
    for key in sorted(k for k in pep if k.startswith("native ")):
        obj = key.split(" ")[1]
        n = pep[key]
        x = pep.get(key.replace("native ", "pyxbuf ", 1))
        ratio = f"{x / n:.2f}" if x is not None and n else "-"
        lines.append(f"| {obj} | {n} | {x} | {ratio} |")
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "run":
        run(Path(sys.argv[2]))
    elif cmd == "collect":
        collect(Path(sys.argv[2]))
    elif cmd == "report":
        report(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(f"unknown command {cmd}")
