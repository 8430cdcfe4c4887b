"""The README harness (readme_blocks.py) itself: how it reads blocks and
directives, what it refuses, and that it fails on what fails. Quick: no
venv, wheel or compiler needed, except the last two tests (bash, python)."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import readme_blocks as rb  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def kinds(markdown):
    return [(b.line, rb.plan(b).kind) for b in rb.parse(markdown)]


def test_blocks_are_found_with_their_language_and_line():
    md = "# t\n\n```sh\necho hi\n```\n\ntext\n\n~~~~python\n>>> 1 + 1\n2\n~~~~\n"
    blocks = rb.parse(md)
    assert [(b.line, b.lang, b.text) for b in blocks] == [
        (3, "sh", "echo hi\n"),
        (9, "python", ">>> 1 + 1\n2\n"),
    ]
    assert kinds(md) == [(3, "shell"), (9, "doctest")]


def test_a_longer_fence_holds_a_shorter_one():
    md = "````md\n```sh\nnot a block\n```\n````\n"
    [b] = rb.parse(md)
    assert b.lang == "md" and "not a block" in b.text


def test_a_block_keeps_its_indentation_beyond_the_fences():
    md = "```cython\ndef f():\n    return 1\n```\n\n  ```sh\n  if true; then\n      echo hi\n  fi\n  ```\n"
    a, b = rb.parse(md)
    assert a.text == "def f():\n    return 1\n"
    assert b.text == "if true; then\n    echo hi\nfi\n"


def test_directives_file_and_skip():
    md = (
        "<!-- readme-test: file ext/lib.rs -->\n```rust\nfn main() {}\n```\n"
        "<!-- readme-test: skip (a diagram) -->\n\n```\na -> b\n```\n"
    )
    a, b = [rb.plan(x) for x in rb.parse(md)]
    assert (a.kind, a.path) == ("file", "ext/lib.rs")
    assert (b.kind, b.reason) == ("skip", "a diagram")


@pytest.mark.parametrize(
    "block",
    ["```c\nint x;\n```\n", "```rust\nfn f() {}\n```\n", "```toml\n[a]\n```\n", "```\ntext\n```\n",
     "```python\nimport os\n```\n", "```cmake\nproject(x)\n```\n"],
)
def test_an_unmarked_block_it_cannot_run_is_an_error(block):
    [b] = rb.parse("intro\n\n" + block)
    with pytest.raises(rb.ReadmeError, match=r"line 3 .*cannot run this block"):
        rb.plan(b)


@pytest.mark.parametrize(
    "directive, message",
    [
        ("skip", "needs a reason"),
        ("skip ()", "needs a reason"),
        ("run it", "unknown readme-test directive"),
        ("file ../outside.c", "must stay in the scratch folder"),
        ("file /etc/x", "must stay in the scratch folder"),
    ],
)
def test_bad_directives_are_errors(directive, message):
    [b] = rb.parse(f"<!-- readme-test: {directive} -->\n```c\nint x;\n```\n")
    with pytest.raises(rb.ReadmeError, match=message):
        rb.plan(b)


def test_a_directive_must_be_followed_by_a_block():
    with pytest.raises(rb.ReadmeError, match="line 1: .*right before a code block"):
        rb.parse("<!-- readme-test: skip (x) -->\nsome text\n```c\nint x;\n```\n")
    with pytest.raises(rb.ReadmeError, match="no block after it"):
        rb.parse("text\n<!-- readme-test: skip (x) -->\n")
    with pytest.raises(rb.ReadmeError, match="stand alone"):
        rb.parse("see <!-- readme-test: skip (x) --> here\n```c\nint x;\n```\n")


def test_an_unclosed_block_is_an_error():
    with pytest.raises(rb.ReadmeError, match="line 2: a code block that is never closed"):
        rb.parse("x\n```sh\necho\n")


def test_make_targets_are_read_from_code_only():
    md = "make sure it works: `make test-c` and\n```sh\nmake -j2 demo  # then\n```\nmake it so\n"
    assert rb.make_targets_named(md) == {"test-c": 1, "demo": 3}


def test_help_targets_and_links():
    assert rb.help_targets("Start here:\n  demo    builds\n  test    tests\n") == {"demo", "test"}
    md = "[a](CONTRIBUTING.md) ![c](bench/x.svg) [w](https://x.org) [s](#top) [d](c/x.c#L3)\n"
    assert rb.local_links(md) == {"CONTRIBUTING.md": 1, "bench/x.svg": 1, "c/x.c": 1}


def test_doctest_source_keeps_the_readme_line_numbers():
    blocks = rb.parse("a\nb\n```python\n>>> x = 1\n```\ntext\n```python\n>>> x\n1\n```\n")
    src = rb.doctest_source(blocks).splitlines()
    assert src[3] == ">>> x = 1" and src[7] == ">>> x" and src[8] == "1"  # README lines 4, 8, 9
    assert src[4:7] == ["", "", ""]


def test_doctests_in_a_row_under_one_heading_share_a_session():
    md = (
        "## A\n```python\n>>> x = 1\n```\n<!-- readme-test: skip (x) -->\n```c\n```\n"
        "```python\n>>> x\n1\n```\n"  # same session: a skipped block between
        "```sh\ntrue\n```\n```python\n>>> 2\n2\n```\n"  # a new one after a shell block
        "## B\n```python\n>>> 3\n3\n```\n"  # and under a new heading
    )
    groups = rb.doctest_groups([rb.plan(b) for b in rb.parse(md)])
    assert [[a.block.line for a in g] for g in groups] == [[2, 8], [15], [20]]


def test_the_readme_plans_every_block():
    """README.md as committed: every block runs, is run by its guide, or says
    why not; the guides build what the README shows."""
    blocks = rb.parse((ROOT / "README.md").read_text())
    actions = [rb.plan(b) for b in blocks]
    assert {a.kind for a in actions} >= {"shell", "doctest", "shown"}
    assert all(a.reason for a in actions if a.kind == "skip")
    rb.check_shown(ROOT / "README.md", actions)
    guides = [rb.plan(b) for g in sorted((ROOT / "docs" / "guides").glob("*.md"))
              for b in rb.parse(g.read_text())]
    assert {a.kind for a in guides} >= {"shell", "doctest", "file"}


def runner_args(tmp_path, readme_text, checks=()):
    readme = tmp_path / "README.md"
    readme.write_text(readme_text)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    if not (venv / "bin" / "python").exists():
        (venv / "bin" / "python").symlink_to(sys.executable)
    dist = tmp_path / "dist"
    dist.mkdir(exist_ok=True)
    (dist / "pyxbuf-0-py3-none-any.whl").write_text("")
    argv = [str(readme), "--scratch", str(tmp_path / "scratch"), "--venv", str(venv), "--dist", str(dist),
            "--cargo-target", str(tmp_path / "cargo")]
    for c in checks:
        argv += ["--check", c]
    return argv


def test_a_failing_block_fails_the_run_naming_its_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rb.Runner, "check_make_targets", lambda self, md: None)
    md = (
        "<!-- readme-test: file src/a.txt -->\n```text\nhello\n```\n"
        "```sh\ngrep -q hello src/a.txt\n```\n"
        "```python\n>>> text = open('src/a.txt').read()\n```\n"
        "```python\n>>> text\n'hello\\n'\n```\n"
    )
    assert rb.main(runner_args(tmp_path, md)) == 0
    out = capsys.readouterr().out
    assert "line 5 ```sh" in out and "lines 8, 11 ```python (doctest): ok" in out

    broken = md.replace("'hello\\n'", "'goodbye\\n'")
    assert rb.main(runner_args(tmp_path, broken)) == 1
    err = capsys.readouterr().err
    assert "lines 8, 11 ```python (doctest) failed" in err
    assert "line 12" in err and "goodbye" in err  # doctest's report, at the README's line

    assert rb.main(runner_args(tmp_path, md.replace("grep -q hello", "grep -q bye"))) == 1
    assert "line 5 ```sh (run in scratch/) failed (exit 1" in capsys.readouterr().err


def test_a_block_it_cannot_run_stops_the_run_before_anything_runs(tmp_path, capsys):
    md = "```sh\ntouch ran\n```\n```c\nint x;\n```\n"
    assert rb.main(runner_args(tmp_path, md)) == 1
    assert "line 4 (```c): the harness cannot run this block" in capsys.readouterr().err
    assert not (tmp_path / "scratch" / "ran").exists()


def test_an_unknown_make_target_fails(tmp_path, capsys):
    # `make help` of this repository: demo is listed, no-such-target is not.
    md = "Run `make demo`, then `make no-such-target`.\n"
    assert rb.main(runner_args(tmp_path, md) + ["--root", str(ROOT)]) == 1
    assert "'make no-such-target' (line 1)" in capsys.readouterr().err


def test_a_dead_link_fails(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rb.Runner, "check_make_targets", lambda self, md: None)
    argv = runner_args(tmp_path, "See [x](missing.md) and [r](README.md).\n")
    assert rb.main(argv) == 1
    assert "missing.md (line 1)" in capsys.readouterr().err
    assert rb.main(argv + ["--allow-missing", "missing.md"]) == 0


def test_a_failing_check_fails_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rb.Runner, "check_make_targets", lambda self, md: None)
    check = tmp_path / "check_x.py"
    check.write_text("def test_x():\n    assert 1 == 2\n")
    assert rb.main(runner_args(tmp_path, "nothing\n", [str(check)])) == 1
    assert "check check_x.py failed" in capsys.readouterr().err


def test_list_runs_nothing(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("```sh\ntouch ran\n```\n")
    assert rb.main([str(readme), "--list"]) == 0
    assert "shell" in capsys.readouterr().out
    assert not (tmp_path / "ran").exists()


def test_a_block_shown_in_another_page_must_be_one_that_page_runs(tmp_path):
    guide = tmp_path / "docs" / "guide.md"
    guide.parent.mkdir()
    guide.write_text("<!-- readme-test: file ext/lib.rs -->\n```rust\nfn f() {}\n```\n"
                     "<!-- readme-test: skip (a diagram) -->\n```\na -> b\n```\n")
    readme = tmp_path / "README.md"
    md = "<!-- readme-test: shown-in docs/guide.md -->\n```rust\nfn f() {}\n```\n"
    actions = [rb.plan(b) for b in rb.parse(md)]
    assert [(a.kind, a.path) for a in actions] == [("shown", "docs/guide.md")]
    rb.check_shown(readme, actions)  # the same text, built there
    for text, why in [("fn g() {}", "no block there that runs"), ("a -> b", "no block there that runs")]:
        md = f"<!-- readme-test: shown-in docs/guide.md -->\n```rust\n{text}\n```\n"
        with pytest.raises(rb.ReadmeError, match=why):
            rb.check_shown(readme, [rb.plan(b) for b in rb.parse(md)])
    md = "<!-- readme-test: shown-in docs/none.md -->\n```rust\nfn f() {}\n```\n"
    with pytest.raises(rb.ReadmeError, match="shown-in docs/none.md: no such file"):
        rb.check_shown(readme, [rb.plan(b) for b in rb.parse(md)])


@pytest.mark.parametrize("lang", ["rust", "cpp", "cython"])
def test_compile_takes_rust_cpp_and_cython_blocks(lang):
    [b] = rb.parse(f"<!-- readme-test: compile -->\n```{lang}\nx\n```\n")
    assert rb.plan(b).kind == "compile"


@pytest.mark.parametrize("lang", ["c", "toml", "python", ""])
def test_compile_refuses_a_language_it_has_no_compiler_for(lang):
    [b] = rb.parse(f"<!-- readme-test: compile -->\n```{lang}\nx\n```\n")
    with pytest.raises(rb.ReadmeError, match=r"line 1: 'compile' takes a block in one of cpp, "
                                             r"cython, rust, not ```" + lang):
        rb.plan(b)


def test_a_cpp_block_that_does_not_compile_fails_the_run(tmp_path, capsys, monkeypatch):
    """What make test-readme does with a migration guide's C++: c++
    -fsyntax-only, with pyxbuf's headers on the path (the venv here is this
    interpreter, which may have neither nanobind nor pybind11: neither is
    needed)."""
    monkeypatch.setattr(rb.Runner, "check_make_targets", lambda self, md: None)
    good = "<!-- readme-test: compile -->\n```cpp\n#include <pyxbuf.hpp>\nint f() { return 1; }\n```\n"
    argv = runner_args(tmp_path, good) + ["--root", str(ROOT)]
    assert rb.main(argv) == 0
    assert "line 2 ```cpp (c++ -fsyntax-only): ok" in capsys.readouterr().out
    bad = good.replace("return 1;", "return undeclared_name;")
    assert rb.main(runner_args(tmp_path, bad) + ["--root", str(ROOT)]) == 1
    err = capsys.readouterr().err
    assert "line 2 ```cpp (c++ -fsyntax-only) failed" in err and "undeclared_name" in err


def test_uses_takes_a_doctest_naming_a_compiled_block():
    md = ("<!-- readme-test: compile -->\n```rust\n#[pyfunction]\nfn f() {}\n```\n"
          "<!-- readme-test: uses 2 -->\n```pycon\n>>> f()\n```\n")
    actions = [rb.plan(b) for b in rb.parse(md)]
    assert [(a.kind, a.path) for a in actions] == [("compile", None), ("uses", "2")]
    rb.check_uses(actions)
    wrong = md.replace("uses 2", "uses 7")
    with pytest.raises(rb.ReadmeError, match=r"uses 7, but the block at line 7 is not a "
                                             r"block marked compile \(those: \[2\]\)"):
        rb.check_uses([rb.plan(b) for b in rb.parse(wrong)])
    [b] = rb.parse("<!-- readme-test: uses 2 -->\n```sh\ntrue\n```\n")
    with pytest.raises(rb.ReadmeError, match="'uses' takes a doctest"):
        rb.plan(b)


def test_a_used_cpp_block_names_its_module():
    md = ("<!-- readme-test: compile -->\n```cpp\n#include <pyxbuf_nanobind.hpp>\n"
          "NB_MODULE(ext, m) {}\n```\n<!-- readme-test: uses 2 -->\n```pycon\n>>> ext\n```\n")
    rb.check_uses([rb.plan(b) for b in rb.parse(md)])
    assert rb.CPP_MODULE.search(rb.parse(md)[0].text).group("macro", "name") == ("NB_MODULE", "ext")
    assert rb.CPP_MODULE.search("PYBIND11_MODULE( pb_ext , m)").group("name") == "pb_ext"
    nameless = md.replace("NB_MODULE(ext, m) {}", "int f();")
    with pytest.raises(rb.ReadmeError, match=r"uses 2, a ```cpp block with no NB_MODULE\(name, m\) "
                                             r"or PYBIND11_MODULE\(name, m\) to import"):
        rb.check_uses([rb.plan(b) for b in rb.parse(nameless)])


def test_the_pyfunctions_of_a_block_are_found_past_attributes_and_doc_comments():
    text = ("/// Doc.\n#[pyfunction]\nfn a() {}\n"
            "#[pyfunction]\n#[pyo3(signature = (x, y = 1))]\n/// More.\npub fn b(x: i32, y: i32) {}\n"
            "#[pyfunction(name = \"c2\")]\npub(crate) fn c() {}\nfn not_exported() {}\n")
    assert rb.PYFUNCTION.findall(text) == ["a", "b", "c"]
