"""tools/check_layers.py (`make check-layers`) on small trees built here: it
passes a layered tree and fails, naming the file pair and the symbol or
header, on every kind of arrow the layering forbids."""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHECK = ROOT / "tools" / "check_layers.py"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("nm") is None,
                                reason="needs a C compiler and nm")

LAYERS = """\
low: low/
mid: mid/
top: top.c
"""

CLEAN = {
    "low/low.h": "int low_one(void);\n",
    "low/one.c": '#include "low/low.h"\nint low_one(void) { return 1; }\n',
    "mid/mid.h": '#include "low/low.h"\nint mid_two(void);\nint mid_helper(void);\n',
    "mid/two.c": '#include "mid/mid.h"\nint mid_two(void) { return low_one() + mid_helper(); }\n',
    "mid/helper.c": '#include "mid/mid.h"\nint mid_helper(void) { return low_one(); }\n',
    "top.c": '#include "mid/mid.h"\nint top(void);\nint top(void) { return mid_two(); }\n',
}


def run(tmp_path, sources, layers=LAYERS):
    """Write `sources` under tmp/c, compile each .c to tmp/obj/<path>.o as
    CMake names them, and run the checker; (exit status, output)."""
    src, obj = tmp_path / "c", tmp_path / "obj"
    for name, text in sources.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    (src / "LAYERS").write_text(layers)
    for name in sources:
        if name.endswith(".c"):
            out = obj / (name + ".o")
            out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cc", "-c", "-I", str(src), str(src / name), "-o", str(out)],
                           check=True)
    done = subprocess.run([sys.executable, str(CHECK), "--objects", str(obj),
                           "--layers", str(src / "LAYERS"), "--sources", str(src)],
                          capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def test_a_layered_tree_passes(tmp_path):
    rc, out = run(tmp_path, CLEAN)
    assert rc == 0, out
    assert "0 known arrows" in out


def test_an_upward_call_fails_with_the_pair_and_symbol(tmp_path):
    planted = dict(CLEAN)
    planted["low/one.c"] = ('#include "low/low.h"\nint top(void);\n'
                            "int low_one(void) { return top(); }\n")
    rc, out = run(tmp_path, planted)
    assert rc == 1
    assert "low/one.c (low) -> top.c (top): top runs up layer top" in out


def test_an_upward_include_fails(tmp_path):
    planted = dict(CLEAN)
    planted["low/one.c"] = '#include "mid/mid.h"\nint low_one(void) { return 1; }\n'
    rc, out = run(tmp_path, planted)
    assert rc == 1
    assert "low/one.c (low) -> mid/mid.h (mid): mid/mid.h runs up layer mid" in out


def test_a_loop_inside_a_layer_fails(tmp_path):
    planted = dict(CLEAN)
    planted["mid/helper.c"] = ('#include "mid/mid.h"\n'
                               "int mid_helper(void) { return low_one() ? 0 : mid_two(); }\n")
    rc, out = run(tmp_path, planted)
    assert rc == 1
    assert "mid/helper.c (mid) -> mid/two.c (mid): mid_two runs a loop in layer mid" in out
    assert "mid/two.c (mid) -> mid/helper.c (mid): mid_helper runs a loop in layer mid" in out


def test_a_file_in_no_layer_fails(tmp_path):
    stray = dict(CLEAN)
    stray["stray.c"] = '#include "low/low.h"\nint stray(void);\nint stray(void) { return 0; }\n'
    rc, out = run(tmp_path, stray)
    assert rc != 0
    assert "stray.c in no layer" in out


def test_a_known_arrow_that_is_gone_fails(tmp_path):
    rc, out = run(tmp_path, CLEAN, LAYERS + "known: low/one.c -> top.c top\n")
    assert rc == 1
    assert "known: low/one.c -> top.c top" in out and "no longer exist" in out


def test_a_known_arrow_is_reported_not_failed(tmp_path):
    planted = dict(CLEAN)
    planted["low/one.c"] = ('#include "low/low.h"\nint top(void);\n'
                            "int low_one(void) { return top(); }\n")
    rc, out = run(tmp_path, planted, LAYERS + "known: low/one.c -> top.c top\n")
    assert rc == 0, out
    assert "1 known arrows" in out
