"""Run every fenced code block of README.md (make test-readme).

Each block is run according to its language, or according to a directive, an
HTML comment on the last non-blank line before its opening fence (invisible
on GitHub):

  <!-- readme-test: file PATH -->     write the block, as it is, to SCRATCH/PATH
  <!-- readme-test: skip (REASON) --> not run; the reason is required
  <!-- readme-test: shown-in PATH -->  not run here: PATH (a Markdown file,
                                      relative to this one) runs the same
                                      block, character for character, which
                                      the harness checks (a README shows the
                                      code its guide builds and runs)
  <!-- readme-test: compile -->       compiled, not run (a migration guide's
                                      code, pyxbuf's and the peer's): ```rust
                                      blocks are the modules of one crate per
                                      page (pyo3, pyxbuf, numpy and dlpark at
                                      the workspace's versions), `cargo check`ed;
                                      ```cpp blocks each `c++ -fsyntax-only`
                                      against pyxbuf's, Python's, nanobind's and
                                      pybind11's headers (as the venv has them);
                                      ```cython blocks each translated by the
                                      venv's Cython, pyxbuf's .pxd files found
                                      as the guides' builds find them
  <!-- readme-test: uses LINE -->    a doctest run after the compile step
                                      with the `compile` block at LINE built
                                      (a migration guide's "what a caller sees
                                      change"): a ```rust block's
                                      #[pyfunction]s imported into its session
                                      (the page's crate built as an extension
                                      module); a ```cpp block built by
                                      nanobind's or pybind11's CMake function
                                      (pyxbuf's CMake package linked when it
                                      includes a pyxbuf header) and its
                                      NB_MODULE/PYBIND11_MODULE imported; a
                                      ```cython block built as the module
                                      `ext` (as the Cython guide's setup.py
                                      builds) and imported

Without a directive:

  ```python / ```pycon with ">>>" lines   a doctest (ELLIPSIS, NORMALIZE_WHITESPACE)
                                          run by the scratch venv's python; those
                                          in a row under one `##` heading share
                                          one session, as a reader expects
  ```sh / ```bash / ```shell              a bash script (-euxo pipefail)

and any other block (```c, ```rust, ```toml, ```cmake, a ```python file, a
block with no language) is an error naming its line: a block the harness
cannot run must say what it is for. A directive not followed by a block, or
one it does not know, is an error too.

Blocks run in README order, in one scratch folder (wiped first) where the
README's commands run: `pyxbuf` is a link to this repository, `dist` a link to
the folder holding pyxbuf's wheel. Scripts and doctests run with the scratch
venv activated (VIRTUAL_ENV, PATH), cargo's builds going to --cargo-target
(kept between runs: the warm runs reuse it). A Cargo.toml written from the
README gets --lockfile (the workspace's Cargo.lock) beside it, so the
example builds with the versions the workspace is tested with instead of
whatever the registry holds that day; cargo drops what it does not use. Doctest files keep the README's
line numbers, so a failure names the README line.

After the blocks: every `make TARGET` the README names must be a target that
`make help` lists, every relative link must resolve (--allow-missing for a
file a build generates or another branch adds), and each --check file runs under pytest in the
scratch venv (checks of what the README's examples do, so that an example
that silently does nothing fails).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

DIRECTIVE = re.compile(r"^\s*<!--\s*readme-test:\s*(?P<body>.*?)\s*-->\s*$")
OPENING = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
SHELL = {"sh", "bash", "shell"}
PYTHON = {"python", "py", "pycon"}
COMPILED = {"rust", "cpp", "cython"}
# The check crate of a page's ```rust blocks: what a migration guide's code,
# pyxbuf's or a peer's, depends on (versions from --lockfile).
CHECK_CRATE = """[package]
name = "docs-compile-check"
version = "0.0.0"
edition = "2021"
publish = false

[lib]
name = "docs_compiled"
path = "src/lib.rs"
crate-type = ["cdylib"]

[dependencies]
pyo3 = "0.30"
pyxbuf = {{ path = "{root}/rust/pyxbuf" }}
numpy = "0.30"
dlpark = {{ version = "0.10", features = ["pyo3"] }}
"""
# A `#[pyfunction]`'s name, past any attributes and doc comments after it.
PYFUNCTION = re.compile(r"#\[pyfunction[^\]]*\]\s*(?:(?:#\[[^\]]*\]|///[^\n]*)\s*)*"
                        r"(?:pub(?:\([^)]*\))?\s+)?fn\s+(?P<name>\w+)")
# What a used ```rust block's module gets appended: its functions into a
# submodule of the page's extension module.
REGISTER = """
pub(crate) fn docs_register(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {{
    use pyo3::types::PyModuleMethods;
{adds}    Ok(())
}}
"""
# The include folders of the ```cpp blocks, from the venv's packages.
CXX_INCLUDES = """import sysconfig
print(sysconfig.get_paths()["include"])
try:
    import nanobind, os
    print(nanobind.include_dir())
    print(os.path.join(os.path.dirname(nanobind.include_dir()), "ext", "robin_map", "include"))
except ImportError:
    pass
try:
    import pybind11
    print(pybind11.get_include())
except ImportError:
    pass
"""
# A used ```cpp block's module: its name, and the binding that makes it.
CPP_MODULE = re.compile(r"\b(?P<macro>NB_MODULE|PYBIND11_MODULE)\s*\(\s*(?P<name>\w+)")
# Where the CMake packages of the ```cpp blocks' builds are, from the venv.
CMAKE_DIRS = """import importlib
for name, how in (("nanobind", "cmake_dir"), ("pybind11", "get_cmake_dir"),
                  ("pyxbuf", "get_cmake_dir")):
    try:
        print(f"-D{name}_DIR=" + getattr(importlib.import_module(name), how)())
    except ImportError:
        pass
"""
# A used ```cython block's build: the Cython guide's setup.py, the module `ext`.
CYTHON_SETUP = """import pyxbuf
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(name="ext", version="0.0.0", ext_modules=cythonize(
    [Extension("ext", ["ext.pyx"], include_dirs=[pyxbuf.get_include()],
               library_dirs=[pyxbuf.get_library_dir()], libraries=["pyxbuf"],
               define_macros=[("PYXBUF_STATIC", None)])],
    include_path=[pyxbuf.get_cython_include()], language_level=3))
"""
# `make help`, `make test-c`, ...: inline code and commands alike.
MAKE_TARGET = re.compile(r"\bmake\s+(?:-[-\w=]+\s+)*(?P<target>[a-z][\w-]*)")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


class ReadmeError(Exception):
    """What is wrong with the README or with one of its blocks."""


@dataclasses.dataclass
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    directive: str | None = None
    directive_line: int | None = None
    section: int = 0  # line of the `#`/`##` heading above it (0: none)

    @property
    def where(self) -> str:
        return f"line {self.line} (```{self.lang or ''})"


@dataclasses.dataclass
class Action:
    kind: str  # "file", "skip", "doctest", "shell", "shown", "compile", "uses"
    block: Block
    path: str | None = None  # for "file" and "shown"; for "uses", the compiled block's line
    reason: str | None = None  # for "skip"


def parse(markdown: str) -> list[Block]:
    """The fenced blocks of `markdown`, each with its directive if any."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    pending: tuple[str, int] | None = None
    section = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^#{1,2} ", line):
            section = i + 1
        m = DIRECTIVE.match(line)
        if m:
            if pending is not None:
                raise ReadmeError(f"line {pending[1]}: a readme-test directive with no block after it")
            pending = (m.group("body"), i + 1)
            i += 1
            continue
        if "readme-test" in line and "<!--" in line:
            raise ReadmeError(f"line {i + 1}: a readme-test comment must stand alone on its line")
        m = OPENING.match(line)
        if m:
            fence, indent = m.group("fence"), len(m.group("indent"))
            lang = m.group("info").split()[0].lower() if m.group("info") else ""
            body: list[str] = []
            j = i + 1
            closing = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
            while j < len(lines) and not closing.match(lines[j]):
                # The fence's own indent comes off each line (a line indented
                # less loses what it has); a fence at column 0 takes nothing.
                line_j = lines[j]
                body.append(line_j[indent:] if indent == 0 or line_j[:indent].isspace() else line_j.lstrip())
                j += 1
            if j == len(lines):
                raise ReadmeError(f"line {i + 1}: a code block that is never closed")
            blocks.append(
                Block(
                    line=i + 1,
                    lang=lang,
                    text="\n".join(body) + "\n",
                    directive=pending[0] if pending else None,
                    directive_line=pending[1] if pending else None,
                    section=section,
                )
            )
            pending = None
            i = j + 1
            continue
        if pending is not None and line.strip():
            raise ReadmeError(
                f"line {pending[1]}: a readme-test directive must come right before a code block "
                f"(line {i + 1} is text)"
            )
        i += 1
    if pending is not None:
        raise ReadmeError(f"line {pending[1]}: a readme-test directive with no block after it")
    return blocks


def plan(block: Block) -> Action:
    """What to do with `block`; ReadmeError when it cannot be run and does
    not say why."""
    if block.directive is not None:
        d = block.directive
        m = re.fullmatch(r"skip\s*\((?P<reason>.*\S.*)\)", d)
        if m:
            return Action("skip", block, reason=m.group("reason").strip())
        m = re.fullmatch(r"file\s+(?P<path>\S+)", d)
        if m:
            path = m.group("path")
            parts = pathlib.PurePosixPath(path).parts
            if path.startswith("/") or ".." in parts or not parts:
                raise ReadmeError(f"line {block.directive_line}: file path {path!r} must stay in the scratch folder")
            return Action("file", block, path=path)
        m = re.fullmatch(r"shown-in\s+(?P<path>\S+\.md)", d)
        if m:
            return Action("shown", block, path=m.group("path"))
        m = re.fullmatch(r"uses\s+(?P<line>[1-9][0-9]*)", d)
        if m:
            if not (block.lang in PYTHON and ">>>" in block.text):
                raise ReadmeError(f"line {block.directive_line}: 'uses' takes a doctest "
                                  "(```pycon with >>> lines)")
            return Action("uses", block, path=m.group("line"))
        if d == "compile":
            if block.lang not in COMPILED:
                raise ReadmeError(f"line {block.directive_line}: 'compile' takes a block in one of "
                                  f"{', '.join(sorted(COMPILED))}, not ```{block.lang}")
            return Action("compile", block)
        if re.fullmatch(r"skip\b.*", d):
            raise ReadmeError(f"line {block.directive_line}: 'skip' needs a reason: <!-- readme-test: skip (why) -->")
        raise ReadmeError(
            f"line {block.directive_line}: unknown readme-test directive {d!r} "
            "(known: 'file PATH', 'skip (reason)', 'shown-in PATH.md', 'compile', "
            "'uses LINE')"
        )
    if block.lang in PYTHON and any(line.lstrip().startswith(">>>") for line in block.text.splitlines()):
        return Action("doctest", block)
    if block.lang in SHELL:
        return Action("shell", block)
    raise ReadmeError(
        f"{block.where}: the harness cannot run this block; mark it "
        "<!-- readme-test: file PATH --> (part of an example built later) or "
        "<!-- readme-test: skip (reason) --> (illustrative only)"
    )


def check_shown(markdown_path: pathlib.Path, actions: list[Action]) -> None:
    """Every `shown-in PATH` block is, character for character, a block PATH
    runs (a doctest, a script, or a file it builds), not one it skips or
    shows from elsewhere."""
    for a in actions:
        if a.kind != "shown":
            continue
        other = (markdown_path.parent / a.path).resolve()
        if not other.exists():
            raise ReadmeError(f"{a.block.where}: shown-in {a.path}: no such file")
        ran = [plan(b) for b in parse(other.read_text())]
        if not any(x.block.text == a.block.text and x.kind in ("doctest", "shell", "file")
                   for x in ran):
            raise ReadmeError(
                f"{a.block.where}: shown-in {a.path}, but no block there that runs is this "
                "block character for character: copy it from there (or run it here)")


def check_uses(actions: list[Action]) -> None:
    """Every `uses LINE` names a block marked `compile`, and a ```cpp one
    names its module (NB_MODULE or PYBIND11_MODULE)."""
    compiled = {a.block.line: a.block for a in actions if a.kind == "compile"}
    for a in actions:
        if a.kind != "uses":
            continue
        target = compiled.get(int(a.path))
        if target is None:
            raise ReadmeError(f"{a.block.where}: uses {a.path}, but the block at line {a.path} "
                              f"is not a block marked compile (those: "
                              f"{sorted(compiled) or 'none'})")
        if target.lang == "cpp" and not CPP_MODULE.search(target.text):
            raise ReadmeError(f"{a.block.where}: uses {a.path}, a ```cpp block with no "
                              "NB_MODULE(name, m) or PYBIND11_MODULE(name, m) to import")


def make_targets_named(markdown: str) -> dict[str, int]:
    """Every `make TARGET` in code (inline code spans and code blocks; prose
    may say "make sure"), with the first line naming it."""
    found: dict[str, int] = {}
    fence = None
    for n, line in enumerate(markdown.splitlines(), 1):
        m = OPENING.match(line)
        if fence is None and m:
            fence = m.group("fence")[0]
            continue
        if fence is not None:
            if re.match(r"^ {0,3}" + re.escape(fence) + r"{3,}\s*$", line):
                fence = None
                continue
            code = [line]
        else:
            code = re.findall(r"`([^`]+)`", line)
        for text in code:
            for t in MAKE_TARGET.finditer(text):
                found.setdefault(t.group("target"), n)
    return found


def help_targets(make_help_output: str) -> set[str]:
    """The targets `make help` lists: the first word of each indented line
    (`fuzz-TARGET` style names count as their stem `fuzz-`)."""
    targets = set()
    for line in make_help_output.splitlines():
        if line.startswith("  ") and line.strip():
            targets.add(line.split()[0])
    return targets


def local_links(markdown: str) -> dict[str, int]:
    """Relative link and image targets (no URL scheme, no pure #anchor)."""
    found: dict[str, int] = {}
    for n, line in enumerate(markdown.splitlines(), 1):
        for m in LINK.finditer(line):
            target = m.group("target")
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            found.setdefault(target.split("#")[0], n)
    return found


def doctest_groups(actions: list[Action]) -> list[list[Action]]:
    """The doctests that share one session, as a reader expects: consecutive
    ones (skipped blocks between them do not count) under one `##` heading."""
    groups: list[list[Action]] = []
    current: list[Action] = []
    for a in actions:
        if a.kind == "skip":
            continue
        if a.kind == "doctest" and current and current[0].block.section == a.block.section:
            current.append(a)
            continue
        if current:
            groups.append(current)
        current = [a] if a.kind == "doctest" else []
    if current:
        groups.append(current)
    return groups


def doctest_source(blocks: list[Block]) -> str:
    """The blocks as one doctest file whose line numbers are the README's:
    each block at its line, blank lines between."""
    out: list[str] = []
    for b in blocks:
        out += [""] * (b.line - len(out))  # the fence itself becomes a blank line
        out += b.text.splitlines()
    return "\n".join(out) + "\n"


class Runner:
    def __init__(self, args: argparse.Namespace):
        self.readme = pathlib.Path(args.readme).resolve()
        self.root = pathlib.Path(args.root).resolve() if args.root else self.readme.parent
        self.scratch = pathlib.Path(args.scratch).resolve()
        self.venv = pathlib.Path(args.venv).resolve()
        self.dist = pathlib.Path(args.dist).resolve()
        self.cargo_target = pathlib.Path(args.cargo_target).resolve()
        self.checks = [pathlib.Path(c).resolve() for c in args.check]
        self.allow_missing = set(args.allow_missing)
        self.lockfile = pathlib.Path(args.lockfile).resolve() if args.lockfile else None
        self.verbose = args.verbose
        self.logs = self.scratch / ".readme-test"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for var in ("PYTHONPATH", "PYO3_PYTHON", "PYTHONHOME", "CONDA_PREFIX"):
            env.pop(var, None)
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["CARGO_TARGET_DIR"] = str(self.cargo_target)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def setup(self) -> None:
        if not (self.venv / "bin" / "python").exists():
            raise ReadmeError(f"no venv at {self.venv} (make test-wheel makes it)")
        if not list(self.dist.glob("pyxbuf-*.whl")):
            raise ReadmeError(f"no pyxbuf wheel in {self.dist} (make test-wheel builds it)")
        if self.scratch.exists():
            shutil.rmtree(self.scratch)
        self.logs.mkdir(parents=True)
        (self.scratch / "pyxbuf").symlink_to(self.root)
        (self.scratch / "dist").symlink_to(self.dist)

    def run(self, argv: list[str], log: pathlib.Path, what: str) -> None:
        start = time.monotonic()
        with open(log, "w") as out:
            rc = subprocess.run(argv, cwd=self.scratch, env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL).returncode
        took = time.monotonic() - start
        text = log.read_text(errors="replace")
        if rc != 0:
            tail = "\n".join(text.splitlines()[-60:])
            raise ReadmeError(f"{what} failed (exit {rc}, {took:.1f} s); its output ({log}):\n{tail}")
        print(f"readme-test: {what}: ok ({took:.1f} s)", flush=True)
        if self.verbose:
            print(text)

    def run_action(self, action: Action) -> None:
        b = action.block
        name = f"line {b.line}"
        if action.kind == "skip":
            print(f"readme-test: {name} ```{b.lang}: skipped ({action.reason})")
        elif action.kind == "shown":
            print(f"readme-test: {name} ```{b.lang}: run by {action.path} (the same block)")
        elif action.kind == "file":
            target = self.scratch / action.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(b.text)
            if target.name == "Cargo.toml" and self.lockfile is not None:
                shutil.copyfile(self.lockfile, target.with_name("Cargo.lock"))
            print(f"readme-test: {name} ```{b.lang}: written to {action.path}")
        elif action.kind == "shell":
            script = self.logs / f"line{b.line}.sh"
            script.write_text(b.text)
            self.run(["bash", "-euxo", "pipefail", str(script)], self.logs / f"line{b.line}.log",
                     f"{name} ```{b.lang} (run in {self.scratch.name}/)")
        elif action.kind == "compile":
            print(f"readme-test: {name} ```{b.lang}: compiled after the page's blocks")
        elif action.kind == "uses":
            print(f"readme-test: {name} ```{b.lang}: run after line {action.path} is built")
        elif action.kind == "doctest":
            group = self.sessions[b.line]
            if b is not group[-1].block:
                return  # runs with the last block of its session
            name = "lines " + ", ".join(str(a.block.line) for a in group) if len(group) > 1 else name
            src = self.logs / f"line{b.line}.doctest"
            src.write_text(doctest_source([a.block for a in group]))
            argv = [str(self.venv / "bin" / "python"), "-m", "doctest", "-o", "ELLIPSIS",
                    "-o", "NORMALIZE_WHITESPACE", str(src)]
            self.run(argv, self.logs / f"line{b.line}.log", f"{name} ```{b.lang} (doctest)")

    def compile_blocks(self, blocks: list[Block], imported: set[int]) -> None:
        """The `compile` blocks: Rust as one crate (each block a module of
        its own, named by its line), checked, or built as the extension
        module docs_compiled when a doctest uses a block at `imported` (each
        a submodule with its #[pyfunction]s); C++ and Cython one file each,
        checked, and those a doctest uses built as extension modules."""
        rust = [b for b in blocks if b.lang == "rust"]
        rust_used = {b.line for b in rust} & imported
        if rust:
            crate = self.scratch / "compile-rust"
            (crate / "src").mkdir(parents=True)
            (crate / "Cargo.toml").write_text(CHECK_CRATE.format(root=self.root))
            if self.lockfile is not None:
                shutil.copyfile(self.lockfile, crate / "Cargo.lock")
            lib = ["// The page's ```rust blocks, each a module (make test-readme).",
                   "#![allow(dead_code, unused_imports)]", "use pyo3::prelude::*;"]
            init = []
            for b in rust:
                text = b.text
                if b.line in rust_used:
                    names = PYFUNCTION.findall(text)
                    if not names:
                        raise ReadmeError(f"{b.where}: a doctest uses its functions, and it has "
                                          "no #[pyfunction]")
                    adds = "".join(f"    m.add_function(pyo3::wrap_pyfunction!({n}, m)?)?;\n"
                                   for n in names)
                    text += REGISTER.format(adds=adds)
                    init.append(f'    let sub = PyModule::new(m.py(), "line{b.line}")?;\n'
                                f"    line{b.line}::docs_register(&sub)?;\n"
                                f"    m.add_submodule(&sub)?;\n")
                (crate / "src" / f"line{b.line}.rs").write_text(text)
                lib.append(f"mod line{b.line};")
            lib += ["#[pymodule]", "fn docs_compiled(m: &Bound<'_, PyModule>) -> PyResult<()> {",
                    *init, "    Ok(())", "}"]
            (crate / "src" / "lib.rs").write_text("\n".join(lib) + "\n")
            lines = ", ".join(str(b.line) for b in rust)
            manifest = ["--manifest-path", str(crate / "Cargo.toml")]
            if not rust_used:
                self.run(["cargo", "check", "--quiet", *manifest], self.logs / "compile-rust.log",
                         f"lines {lines} ```rust (cargo check)")
            else:
                # An extension module: libpython left to the interpreter that loads it.
                self.run(["env", "PYO3_BUILD_EXTENSION_MODULE=1",
                          f"PYO3_PYTHON={self.venv / 'bin' / 'python'}", "cargo", "build",
                          "--quiet", *manifest], self.logs / "compile-rust.log",
                         f"lines {lines} ```rust (cargo build, the extension docs_compiled)")
                (crate / "python").mkdir()
                shutil.copyfile(self.cargo_target / "debug" / "libdocs_compiled.so",
                                crate / "python" / "docs_compiled.so")
        self.build_cpp([b for b in blocks if b.lang == "cpp" and b.line in imported])
        cpp = [b for b in blocks if b.lang == "cpp"]
        if cpp:
            python = str(self.venv / "bin" / "python")
            found = subprocess.run([python, "-c", CXX_INCLUDES], capture_output=True, text=True,
                                   check=True, env=self.env()).stdout.split()
            includes = [f"-I{d}" for d in [str(self.root / "include"), *found]]
            for b in cpp:
                src = self.logs / f"line{b.line}.cpp"
                src.write_text(b.text)
                self.run([os.environ.get("CXX", "c++"), "-std=c++17", "-fsyntax-only", "-Wall",
                          *includes, str(src)], self.logs / f"line{b.line}.log",
                         f"line {b.line} ```cpp (c++ -fsyntax-only)")
        for b in (b for b in blocks if b.lang == "cython" and b.line in imported):
            self.build_cython(b)
        for b in (b for b in blocks if b.lang == "cython" and b.line not in imported):
            src = self.logs / f"line{b.line}.pyx"
            src.write_text(b.text)
            # pyxbuf_xview.pxi where the Cython guide's build finds it
            # (pyxbuf.get_cython_include()); the .pxd files on the venv's path.
            self.run([str(self.venv / "bin" / "python"), "-c",
                      "import sys, pyxbuf; from Cython.Compiler.Main import main; "
                      "sys.argv = ['cython', '-3', '-I', pyxbuf.get_cython_include(), "
                      "'-o', sys.argv[2], sys.argv[1]]; main(command_line=1)",
                      str(src), str(src.with_suffix(".c"))], self.logs / f"line{b.line}.log",
                     f"line {b.line} ```cython (cython -3)")

    def build_cpp(self, blocks: list[Block]) -> None:
        """The ```cpp blocks doctests use, each an extension module of one
        CMake project: nanobind_add_module or pybind11_add_module, pyxbuf's
        CMake package linked where the block includes a pyxbuf header, the
        module (named by its NB_MODULE/PYBIND11_MODULE) in build/line<N>/."""
        if not blocks:
            return
        project = self.scratch / "compile-cpp"
        project.mkdir()
        cmake = ["cmake_minimum_required(VERSION 3.18)", "project(docs_compiled_cpp LANGUAGES CXX)",
                 "set(CMAKE_CXX_STANDARD 17)",
                 "find_package(Python 3.11 REQUIRED COMPONENTS Interpreter Development.Module)"]
        found = set()
        for b in blocks:
            m = CPP_MODULE.search(b.text)
            binding = "nanobind" if m.group("macro") == "NB_MODULE" else "pybind11"
            needs = [binding] + (["pyxbuf"] if "#include <pyxbuf" in b.text else [])
            cmake += [f"find_package({n} CONFIG REQUIRED)" for n in needs if n not in found]
            found.update(needs)
            (project / f"line{b.line}.cpp").write_text(b.text)
            add = ("nanobind_add_module(line{n} NB_STATIC line{n}.cpp)" if binding == "nanobind"
                   else "pybind11_add_module(line{n} line{n}.cpp)").format(n=b.line)
            cmake += [add,
                      f"set_target_properties(line{b.line} PROPERTIES OUTPUT_NAME {m.group('name')} "
                      f"LIBRARY_OUTPUT_DIRECTORY ${{CMAKE_BINARY_DIR}}/line{b.line})"]
            if "pyxbuf" in needs:
                cmake.append(f"target_link_libraries(line{b.line} PRIVATE pyxbuf::pyxbuf)")
        (project / "CMakeLists.txt").write_text("\n".join(cmake) + "\n")
        python = str(self.venv / "bin" / "python")
        dirs = subprocess.run([python, "-c", CMAKE_DIRS], capture_output=True, text=True,
                              check=True, env=self.env()).stdout.split()
        lines = ", ".join(str(b.line) for b in blocks)
        self.run(["cmake", "-S", str(project), "-B", str(project / "build"),
                  f"-DPython_EXECUTABLE={python}", *dirs], self.logs / "compile-cpp.log",
                 f"lines {lines} ```cpp (cmake, the extension modules)")
        self.run(["cmake", "--build", str(project / "build"), "-j", str(os.cpu_count() or 2)],
                 self.logs / "build-cpp.log", f"lines {lines} ```cpp (built)")

    def build_cython(self, b: Block) -> None:
        """A ```cython block a doctest uses: the module `ext`, built as the
        Cython guide's setup.py builds, in compile-cython/line<N>/."""
        folder = self.scratch / "compile-cython" / f"line{b.line}"
        folder.mkdir(parents=True)
        (folder / "ext.pyx").write_text(b.text)
        (folder / "setup.py").write_text(CYTHON_SETUP)
        self.run(["bash", "-c", f"cd {folder} && {self.venv / 'bin' / 'python'} setup.py -q "
                  "build_ext --inplace"], self.logs / f"line{b.line}.log",
                 f"line {b.line} ```cython (built as the module ext)")

    def run_uses(self, action: Action, target: Block) -> None:
        """A doctest run with the compiled block `target` built: on the
        doctest file's first line (which a page's heading leaves blank, so
        that the page's line numbers stay), a ```rust block's functions are
        imported into the session, a ```cpp or ```cython block's module is
        imported by its name."""
        b = action.block
        src = self.logs / f"line{b.line}.doctest"
        text = doctest_source([b]).split("\n")
        if target.lang == "rust":
            path = self.scratch / "compile-rust" / "python"
            text[0] = (f">>> from docs_compiled import line{target.line} as _m; "
                       "globals().update({k: getattr(_m, k) for k in dir(_m) "
                       "if not k.startswith('_')})")
        elif target.lang == "cpp":
            path = self.scratch / "compile-cpp" / "build" / f"line{target.line}"
            text[0] = f">>> import {CPP_MODULE.search(target.text).group('name')}"
        else:
            path = self.scratch / "compile-cython" / f"line{target.line}"
            text[0] = ">>> import ext"
        src.write_text("\n".join(text))
        argv = ["env", f"PYTHONPATH={path}", str(self.venv / "bin" / "python"), "-m", "doctest",
                "-o", "ELLIPSIS", "-o", "NORMALIZE_WHITESPACE", str(src)]
        self.run(argv, self.logs / f"line{b.line}.log",
                 f"line {b.line} ```{b.lang} (doctest, with line {target.line} built)")

    def check_make_targets(self, markdown: str) -> None:
        out = subprocess.run(["make", "--no-print-directory", "-s", "-C", str(self.root), "help"],
                             capture_output=True, text=True, check=True).stdout
        known = help_targets(out)
        missing = {t: n for t, n in make_targets_named(markdown).items() if t not in known}
        if missing:
            listed = ", ".join(f"'make {t}' (line {n})" for t, n in sorted(missing.items(), key=lambda x: x[1]))
            raise ReadmeError(f"the README names targets `make help` does not list: {listed}")
        print(f"readme-test: every `make TARGET` named is in `make help` ({len(make_targets_named(markdown))})")

    def check_links(self, markdown: str) -> None:
        # Relative to the Markdown file's folder, as a reader's viewer resolves
        # them; --allow-missing names files (relative to the root) that a build
        # generates (the docs' API reference) or another branch adds.
        allowed = {(self.root / t).resolve() for t in self.allow_missing}
        bad = {t: n for t, n in local_links(markdown).items()
               if (self.readme.parent / t).resolve() not in allowed
               and not (self.readme.parent / t).exists()}
        if bad:
            listed = ", ".join(f"{t} (line {n})" for t, n in bad.items())
            raise ReadmeError(f"links to files that do not exist: {listed}")

    def main(self) -> int:
        start = time.monotonic()
        markdown = self.readme.read_text()
        blocks = parse(markdown)
        actions = [plan(b) for b in blocks]  # every block judged before anything runs
        check_shown(self.readme, actions)
        check_uses(actions)
        self.sessions = {a.block.line: g for g in doctest_groups(actions) for a in g}
        self.check_make_targets(markdown)
        self.check_links(markdown)
        self.setup()
        for action in actions:
            self.run_action(action)
        uses = [a for a in actions if a.kind == "uses"]
        compiled = [a.block for a in actions if a.kind == "compile"]
        self.compile_blocks(compiled, {int(a.path) for a in uses})
        for a in uses:
            self.run_uses(a, next(b for b in compiled if b.line == int(a.path)))
        for check in self.checks:
            self.run([str(self.venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                      "--noconftest", str(check)], self.logs / f"{check.stem}.log", f"check {check.name}")
        counts = {k: sum(a.kind == k for a in actions)
                  for k in ("shell", "doctest", "file", "skip", "shown", "compile", "uses")}
        print(
            f"readme-test: {len(blocks)} blocks: {counts['shell']} shell, {counts['doctest']} doctest, "
            f"{counts['file']} files built, {counts['compile']} compiled, "
            f"{counts['uses']} doctests of compiled code, "
            f"{counts['shown']} run by another page, "
            f"{counts['skip']} skipped (marked); "
            f"{len(self.checks)} checks; {time.monotonic() - start:.0f} s"
        )
        return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("readme")
    p.add_argument("--root", help="the repository (make help, links, the pyxbuf link); default: the README's folder")
    p.add_argument("--scratch", help="work folder, wiped first")
    p.add_argument("--venv", help="the venv the README's commands run in")
    p.add_argument("--dist", help="the folder holding pyxbuf's wheel (linked as dist/)")
    p.add_argument("--cargo-target", help="CARGO_TARGET_DIR for the README's Rust builds")
    p.add_argument("--lockfile", help="a Cargo.lock copied beside each Cargo.toml the README writes")
    p.add_argument("--check", action="append", default=[], help="a pytest file run in the venv after the blocks")
    p.add_argument("--allow-missing", action="append", default=[], help="a linked file allowed to be absent")
    p.add_argument("--list", action="store_true", help="list the blocks and what would be done, run nothing")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    try:
        if args.list:
            for b in parse(pathlib.Path(args.readme).read_text()):
                a = plan(b)
                extra = a.path or a.reason or ""
                print(f"line {b.line:4} ```{b.lang:7} {a.kind:8} {extra}")
            return 0
        missing = [o for o in ("scratch", "venv", "dist", "cargo_target") if getattr(args, o) is None]
        if missing:
            p.error("to run the blocks, give " + ", ".join("--" + o.replace("_", "-") for o in missing))
        return Runner(args).main()
    except ReadmeError as e:
        print(f"readme-test: {args.readme}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
