"""bench/chart.py (run by `make bench-ir`): the committed chart is the newest
record's, every target is drawn with its figures and ratio, and records it
cannot read are refused naming the file and what is wrong."""

import pathlib
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "bench" / "chart.py"
RESULTS = ROOT / "bench" / "results"
SVG = "{http://www.w3.org/2000/svg}"
# A record frozen for these tests (bench/results/ir-*.md change with every run).
SAMPLE = ROOT / "python-tests" / "data" / "ir-record-sample.md"


def run(*args):
    return subprocess.run([sys.executable, str(CHART), *args], capture_output=True, text=True)


def texts(svg_path):
    root = ET.parse(svg_path).getroot()  # well-formed XML
    return ["".join(t.itertext()) for t in root.iter(SVG + "text")]


@pytest.fixture
def chart():
    """bench/chart.py as a module."""
    sys.path.insert(0, str(CHART.parent))
    try:
        import chart
    finally:
        sys.path.pop(0)
    return chart


def test_the_committed_chart_is_the_newest_records(tmp_path):
    out = tmp_path / "chart.svg"
    r = run("--out", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == (RESULTS / "ir-chart.svg").read_text(), (
        "bench/results/ir-chart.svg is stale: run bench/chart.py")


def test_every_target_is_drawn_with_its_figures_and_ratio(tmp_path):
    out = tmp_path / "chart.svg"
    assert run("--input", str(SAMPLE), "--out", str(out)).returncode == 0
    words = texts(out)
    joined = "\n".join(words)
    for name in ("1-pyxbuf_get-numpy", "2-PyXBuffer-bytes", "4-dlpack-c", "6-format-parse",
                 "7-struct-format", "8-to-device-64MiB"):
        assert any(w.startswith(name) for w in words), name
    # pyxbuf beside its peer, with the record's figures and ratio (pyxbuf ÷ peer)
    assert "pyxbuf_get" in words and "PyObject_GetBuffer+PyBuffer_Release" in words
    assert "707 Ir" in words and "656 Ir" in words
    assert "1.08× (goal ≤ 1.08×, met)" in words
    assert "0.24× (goal ≤ 0.25×, met)" in words
    # "raw" and "the same" rows name the peer of the row above
    assert words.count("PyObject_GetBuffer+PyBuffer_Release") == 3
    assert words.count("PyO3 PyBuffer::<f32>") == 3
    # NumPy ÷ pyxbuf in the record: turned round, pyxbuf is the cheaper
    assert "1/102 (goal ≤ 1/100, met)" in words and "155,148 Ir" in words
    # budgets, each item measured against it; the wall-clock target in ms
    assert "format_parse 'zd'" in words and "budget" in words and "60 Ir" in words
    assert "8.70 ms" in words and "8.36 ms" in words
    assert "MISSED" not in joined


def test_a_missed_goal_is_drawn_as_missed(tmp_path):
    record = (SAMPLE).read_text().replace(
        "| 707 / 656 Ir | 1.08 | ≤ 1.08 | met |", "| 800 / 656 Ir | 1.22 | ≤ 1.08 | **missed** |")
    (tmp_path / "ir-2030-01-01.md").write_text(record)
    out = tmp_path / "chart.svg"
    assert run("--input", str(tmp_path / "ir-2030-01-01.md"), "--out", str(out)).returncode == 0
    assert "1.22× (goal ≤ 1.08×, MISSED)" in texts(out)


def test_the_newest_record_is_chosen_plain_before_variants(tmp_path, chart):
    for name in ["ir-2026-11-23.md", "ir-2026-11-24-free-threading.md", "ir-2026-11-24.md",
                 "2026-11-30-amd-epyc-2c.md"]:
        shutil.copy(SAMPLE, tmp_path / name)
    assert chart.newest_record(str(tmp_path)) == str(tmp_path / "ir-2026-11-24.md")


@pytest.mark.parametrize("case,record,message", [
    ("not a record", "# Criterion, 2026-11-22\n\n| a | b |\n",
     "has no '## Targets' section (is it an ir_report.py record?)"),
    ("no table", "# x\n\n## Targets\n\nnothing measured\n",
     "its '## Targets' section holds no table of target, what, figures, ratio, goal"),
    ("no ÷", "## Targets\n\n| target | what | figures | ratio | goal | |\n|---|\n"
             "| 9-x | pyxbuf_get against raw | 1 / 2 Ir | 0.50 | ≤ 1.00 | met |\n",
     "target 9-x: 'pyxbuf_get against raw' is not 'this ÷ that'"),
    ("bad figures", "## Targets\n\n| target | what | figures | ratio | goal | |\n|---|\n"
                    "| 9-x | pyxbuf_get ÷ raw | many / 2 Ir | 0.50 | ≤ 1.00 | met |\n",
     "target 9-x: figures 'many / 2 Ir' are not 'a / b unit'"),
    ("bad ratio", "## Targets\n\n| target | what | figures | ratio | goal | |\n|---|\n"
                  "| 9-x | pyxbuf_get ÷ raw | 1 / 2 Ir | half | ≤ 1.00 | met |\n",
     "target 9-x's ratio: 'half' is not a number"),
    ("bad goal", "## Targets\n\n| target | what | figures | ratio | goal | |\n|---|\n"
                 "| 9-x | pyxbuf_get ÷ raw | 1 / 2 Ir | 0.50 | < 1 | met |\n",
     "target 9-x: goal '< 1' is not '≤ x' or '≥ x'"),
    ("short row", "## Targets\n\n| target | what | figures | ratio | goal | |\n|---|\n"
                  "| 9-x | pyxbuf_get ÷ raw |\n",
     "row '9-x | pyxbuf_get ÷ raw' has 2 cells, not 6"),
])
def test_unreadable_records_are_refused_naming_the_cause(tmp_path, case, record, message):
    path = tmp_path / "ir-2030-01-01.md"
    path.write_text(record)
    out = tmp_path / "chart.svg"
    r = run("--input", str(path), "--out", str(out))
    assert r.returncode == 1
    assert r.stderr.strip() == f"chart: {path}: {message}"
    assert not out.exists()


def test_no_record_at_all_says_what_to_run(tmp_path, chart):
    with pytest.raises(chart.ChartError, match=r"no instruction-count record \(ir-<date>\.md\) "
                       r"in .*; run `make bench-ir` first"):
        chart.newest_record(str(tmp_path))
    with pytest.raises(chart.ChartError, match="cannot list .*missing"):
        chart.newest_record(str(tmp_path / "missing"))


def test_a_missing_input_file_is_named(tmp_path):
    r = run("--input", str(tmp_path / "ir-2030-01-01.md"), "--out", str(tmp_path / "c.svg"))
    assert r.returncode == 1
    assert r.stderr.strip() == f"chart: cannot read {tmp_path / 'ir-2030-01-01.md'}: " \
                               "No such file or directory"
