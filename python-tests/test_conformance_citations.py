"""CONFORMANCE.md's citations point at code and tests that exist.

Each row names where a rule is implemented (`c/<file>: name, ...`,
`rust/<file>: name, ...`) and which tests check it (`<file>::test_name`,
continued as `::other_test` in the same cell). A file that moved or a
function that was renamed leaves the row pointing at nothing; this test
fails then, naming the stale citation, so the table stays a map of the code.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLE = ROOT / "CONFORMANCE.md"

CODE = re.compile(r"`((?:c|rust|include)/[A-Za-z0-9_./-]+\.(?:c|h|rs|py)): ([^`]+)`")
TEST = re.compile(r"`((?:python-tests|rust|c)/[A-Za-z0-9_./-]+)::([A-Za-z0-9_]+)[^`]*`|`::([A-Za-z0-9_]+)[^`]*`")
BARE = re.compile(r"`((?:c|rust|include|python-tests)/[A-Za-z0-9_./-]+)`")
PLACEHOLDER = ("test_x.c", "file.rs", "/.../")


def rows():
    """(line number, cell text) for every table row of CONFORMANCE.md."""
    for number, line in enumerate(TABLE.read_text().splitlines(), 1):
        if line.startswith("|") and not set(line) <= set("|- "):
            yield number, line


def code_citations():
    for number, line in rows():
        for match in CODE.finditer(line):
            path, names = match.groups()
            if not any(p in path for p in PLACEHOLDER):
                yield pytest.param(number, path, names, id=f"L{number}:{path}")


def cited_tests():
    """(line, file, test name) for every test a row cites; `::name` continues
    the file of the citation before it in the same row."""
    found = []
    for number, line in rows():
        current = None
        for match in TEST.finditer(line):
            path, name, continued = match.groups()
            if path is not None:
                current = path
            if current is None or any(p in current for p in PLACEHOLDER):
                continue
            found.append(pytest.param(number, current, name or continued,
                                      id=f"L{number}:{current}::{name or continued}"))
    return found


def identifier(name):
    """The identifier a citation names: `bridges[]` -> bridges, `TEST_CASE(x)`
    -> x, `Grants::from_view` -> from_view, `tests::complex` -> complex."""
    name = name.strip()
    inner = re.fullmatch(r"TEST_CASE\((\w+)\)", name)
    if inner:
        return inner.group(1)
    return re.sub(r"\[\]$", "", name).split("::")[-1]


@pytest.mark.parametrize("number, path, names", list(code_citations()))
def test_cited_code_exists(number, path, names):
    source = ROOT / path
    assert source.is_file(), f"CONFORMANCE.md:{number} cites {path}, which does not exist"
    text = source.read_text()
    for name in names.split(","):
        ident = identifier(name)
        assert re.search(rf"\b{re.escape(ident)}\b", text), (
            f"CONFORMANCE.md:{number} cites {ident!r} in {path}, which does not mention it; "
            f"point the row at where it lives now")


@pytest.mark.parametrize("number, path, name", cited_tests())
def test_cited_tests_exist(number, path, name):
    source = ROOT / path
    assert source.is_file(), f"CONFORMANCE.md:{number} cites tests in {path}, which does not exist"
    text = source.read_text()
    pattern = rf"(def|fn) {re.escape(name)}\b" if path.endswith((".py", ".rs")) else rf"\b{name}\b"
    assert re.search(pattern, text), (
        f"CONFORMANCE.md:{number} cites {path}::{name}, which is not defined there")


def test_bare_paths_exist():
    missing = [f"CONFORMANCE.md:{number}: {m.group(1)}" for number, line in rows()
               for m in BARE.finditer(line)
               if not any(p in m.group(1) for p in PLACEHOLDER) and not (ROOT / m.group(1)).exists()]
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)


def test_the_table_cites_code_and_tests():
    """The checks above see the table: a change to its citation style that
    made the patterns miss everything would otherwise pass silently."""
    assert len(list(code_citations())) > 80
    assert len(cited_tests()) > 150
