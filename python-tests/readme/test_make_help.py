"""`make help` lists every target: each .PHONY target of the Makefile (as
make itself reads it: `make -pq`) has a line of its own in `make help`."""

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def make(*args):
    # make -q exits 1 when a target is out of date: only the output matters.
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), *args],
                          capture_output=True, text=True).stdout


def phony_targets():
    database = make("-pq", "help")
    lines = [line for line in database.splitlines() if line.startswith(".PHONY:")]
    assert lines, "make -p printed no .PHONY line"
    return {t for line in lines for t in line.split(":", 1)[1].split()}


def help_lines():
    out = make("-s", "help")
    return {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.strip()}


def test_every_phony_target_is_in_make_help():
    phony = phony_targets()
    assert {"test", "demo", "help", "test-readme"} <= phony
    listed = help_lines()
    missing = sorted(phony - listed.keys())
    assert not missing, f"make help does not list: {missing}"


def test_every_target_make_help_lists_exists():
    """Listed and not .PHONY: only the instances of the pattern rule fuzz-%."""
    database = make("-pq", "help")
    fuzz = re.search(r"^FUZZ_TARGETS \S*= (.*)$", database, re.M).group(1).split()
    assert "fuzz-%:" in database
    extra = help_lines().keys() - phony_targets()
    assert extra == {f"fuzz-{t}" for t in fuzz}, extra


def test_each_line_says_what_the_target_does():
    for target, line in help_lines().items():
        assert re.match(r"^  \S+\s{2,}\S", line), line
