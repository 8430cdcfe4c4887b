"""The API reference of pyxbuf, generated from the sources' own doc comments
(`make docs`), and the check that every public symbol has one.

Writes Markdown pages into OUT (the site's reference/ folder):

  c.md       include/pyxbuf.h: every public function, macro, type and struct,
             by the header's sections, each with the comment that documents it
  cpp.md     include/pyxbuf.hpp, pyxbuf_nanobind.hpp, pyxbuf_pybind11.hpp:
             namespace pyxbuf's public classes, their public members and the
             free functions (libclang's AST, `detail` left out)
  python.md  the `pyxbuf` module's stub (pyxbuf.pyi): classes, functions,
             constants with their docstrings
  cython.md  `from pyxbuf cimport ...`: __init__.pxd's inline helpers,
             pyxbuf_xview.pxi's XView, and every name c_api.pxd declares,
             linked to its C entry

A symbol is documented by a comment block right above it, or above the run
of declarations it belongs to (no blank line between: one comment for a
group, as the header writes `pyxbuf_get` and `pyxbuf_release`), or by a
comment on its own line; a Python or Cython symbol by its docstring. Any
public symbol without one is listed and the exit status is 1 (`make docs`
fails): the missing-docs check. A name c_api.pxd declares that the C header
does not document fails too.

Usage: reference.py --root REPO --out DIR [--python-include DIR]
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------
# Comments and groups, by lines (C and C++ alike)
# ---------------------------------------------------------------------------


def comment_above(lines: list[str], start: int, style: str) -> list[str] | None:
    """The comment block documenting the declaration whose first line is
    `start` (0-based): above the contiguous run of non-blank lines holding
    it, or None. `style` is "c" (/* */) or "cpp" (//)."""
    i = start - 1
    while i >= 0:
        s = lines[i].strip()
        if not s:
            return None
        if style == "c" and s.endswith("*/") and not code_before_comment(lines, i):
            return c_block_ending_at(lines, i)
        if style == "cpp" and s.startswith("//"):
            j = i
            while j - 1 >= 0 and lines[j - 1].strip().startswith("//"):
                j -= 1
            return [re.sub(r"^\s*// ?", "", line) for line in lines[j:i + 1]]
        if style == "c" and s.startswith("/*") and "*/" in s and not s.endswith("*/"):
            return None
        i -= 1
    return None


def code_before_comment(lines: list[str], end: int) -> bool:
    """Whether the comment ending on line `end` trails code (`x; /* ... */`)."""
    j = end
    while j >= 0 and "/*" not in lines[j]:
        j -= 1
    return j >= 0 and bool(lines[j].split("/*", 1)[0].strip())


def c_block_ending_at(lines: list[str], end: int) -> list[str] | None:
    """The /* ... */ comment that ends on line `end`, as text lines; None for
    a trailing comment after code (`x; /* ... */`) or a section banner."""
    j = end
    while j >= 0 and "/*" not in lines[j]:
        j -= 1
    if j < 0 or lines[j].split("/*", 1)[0].strip():
        return None
    text = "\n".join(lines[j:end + 1])
    body = text.split("/*", 1)[1].rsplit("*/", 1)[0]
    out = []
    for line in body.split("\n"):
        line = re.sub(r"^\s*\* ?", "", line) if line.strip().startswith("*") else line.strip()
        out.append(line.rstrip())
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    if out and set("".join(out).strip()) <= set("-"):
        return None  # a banner's rule
    return out


def trailing_comment(line: str) -> str | None:
    m = re.search(r";?\s*(?:/\*(.*?)\*/|//(.*))\s*\\?$", line)
    if m and line.split(m.group(0))[0].strip():
        return (m.group(1) or m.group(2) or "").strip()
    return None


# ---------------------------------------------------------------------------
# C: include/pyxbuf.h, by lines
# ---------------------------------------------------------------------------


@dataclass
class Entry:
    name: str
    kind: str
    code: str
    doc: list[str] | None
    section: str = ""
    members: list["Entry"] = field(default_factory=list)


NOT_API = {"PYXBUF_H", "PY_SSIZE_T_CLEAN"}


def parse_c_header(path: pathlib.Path) -> list[Entry]:
    lines = path.read_text().split("\n")
    entries: list[Entry] = []
    section = "Overview"
    i = 0
    depth_if = 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        banner = re.match(r"/\* (\d+[a-z]?\. .*?)\s*\*/$", s)
        if banner:
            section = banner.group(1)
            i += 1
            continue
        if s.startswith("#if"):
            depth_if += 1
        elif s.startswith("#endif"):
            depth_if -= 1
        m = re.match(r"#\s*define\s+([A-Za-z_]\w*)", s)
        if m and m.group(1) not in NOT_API and m.group(1).lower().startswith("pyxbuf"):
            end = i
            while lines[end].rstrip().endswith("\\"):
                end += 1
            code = "\n".join(lines[i:end + 1])
            doc = comment_above(lines, i, "c")
            trail = trailing_comment(line)
            if trail:
                doc = (doc or []) + ([""] if doc else []) + [f"{m.group(1)}: {trail}"]
            if not any(e.name == m.group(1) for e in entries):
                entries.append(Entry(m.group(1), "macro", code, doc, section))
            i = end + 1
            continue
        if s.startswith("typedef") or s.startswith("PYXBUF_API") or re.match(r"struct \w+ \{", s):
            end = i
            depth = 0
            while True:
                depth += lines[end].count("{") - lines[end].count("}")
                if depth <= 0 and lines[end].split("//")[0].rstrip().endswith(";"):
                    break
                end += 1
            code = "\n".join(lines[i:end + 1])
            flat = re.sub(r"/\*.*?\*/", "", code, flags=re.S)
            flat = re.sub(r"//[^\n]*", "", flat)
            if s.startswith("PYXBUF_API"):
                name = re.search(r"(\w+)\s*\(", flat.replace("PYXBUF_API", "")).group(1)
                kind = "function"
            elif "(*" in flat.split("{")[0]:
                name = re.search(r"\(\s*\*\s*(\w+)\s*\)", flat).group(1)
                kind = "type"
            else:
                name = re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*;\s*$", flat.strip())
                name = name[-1] if name else re.search(r"struct\s+(\w+)", flat).group(1)
                kind = "struct" if "{" in flat else "type"
            doc = comment_above(lines, i, "c")
            entries.append(Entry(name, kind, code, doc, section))
            i = end + 1
            continue
        i += 1
    return entries


def c_page(entries: list[Entry], intro: list[str]) -> str:
    out = ["# C API: `pyxbuf.h`", "",
           "Generated from `include/pyxbuf.h`'s own comments (`tools/docs/reference.py`): every",
           "public function, macro, type and struct, by the header's sections. The C++,",
           "Cython, Rust and Python layers are built on these.", "",
           "```text", *intro, "```", ""]
    sections: dict[str, list[Entry]] = {}
    for e in entries:
        sections.setdefault(e.section, []).append(e)
    out += ["| Section | Symbols |", "|---|---|"]
    for sec, es in sections.items():
        out.append(f"| {sec} | " + ", ".join(f"[`{e.name}`](#{anchor(e.name)})" for e in es) + " |")
    out.append("")
    for sec, es in sections.items():
        out += [f"## {sec}", ""]
        k = 0
        while k < len(es):
            # One heading per symbol; a group shares the comment shown once,
            # under the group's last symbol's code.
            group = [es[k]]
            while (k + len(group) < len(es) and es[k + len(group)].doc is not None
                   and es[k + len(group)].doc == group[0].doc and group[0].doc):
                group.append(es[k + len(group)])
            for e in group:
                out += [f"### {e.name}", "", "```c", e.code, "```", ""]
            doc = group[0].doc or []
            if doc:
                out += ["```text", *doc, "```", ""]
            k += len(group)
    return "\n".join(out)


def anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9_ -]", "", name.lower()).replace(" ", "-")


def header_intro(path: pathlib.Path) -> list[str]:
    lines = path.read_text().split("\n")
    end = next(i for i, line in enumerate(lines) if line.strip().endswith("*/"))
    return c_block_ending_at(lines, end) or []


# ---------------------------------------------------------------------------
# C++: libclang's AST of the headers, comments by lines
# ---------------------------------------------------------------------------

SPECIAL = {"CONSTRUCTOR", "DESTRUCTOR", "CONVERSION_FUNCTION"}


def cpp_entries(root: pathlib.Path, header: str, py_include: str) -> tuple[list[Entry], list[str]]:
    import clang.cindex as ci

    path = root / "include" / header
    lines = path.read_text().split("\n")
    gcc_include = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True,
                                 text=True).stdout.strip()
    args = ["-x", "c++", "-std=c++17", "-fparse-all-comments", f"-I{root / 'include'}",
            f"-I{py_include}", f"-isystem{gcc_include}", "-DPYXBUF_DOCS"]
    extra = {"pyxbuf_nanobind.hpp": "nanobind", "pyxbuf_pybind11.hpp": "pybind11"}
    if header in extra:
        inc = python_package_include(extra[header])
        if inc:
            args.append(f"-I{inc}")
    tu = ci.Index.create().parse(str(path), args=args)
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        raise SystemExit(f"reference.py: libclang cannot parse {header}: {errors[0]}")
    entries: list[Entry] = []
    missing: list[str] = []

    def documented(c) -> list[str] | None:
        line = c.extent.start.line - 1
        # template <...> on the line above belongs to the declaration
        while line > 0 and lines[line - 1].strip().startswith("template"):
            line -= 1
        doc = comment_above(lines, line, "cpp")
        if doc is None:
            t = trailing_comment(lines[c.extent.start.line - 1])
            doc = [t] if t else None
        return doc

    def signature(c) -> str:
        first = c.extent.start.line - 1
        while first > 0 and lines[first - 1].strip().startswith("template"):
            first -= 1
        text = []
        for k in range(first, c.extent.end.line):
            code = lines[k].split("//")[0].rstrip()
            brace = code.find("{")
            if brace >= 0 and c.kind.name not in ("ENUM_DECL",):
                text.append(code[:brace].rstrip() + (";" if not code[:brace].rstrip().endswith(";") else ""))
                break
            text.append(code)
            if code.endswith(";"):
                break
        return "\n".join(text).strip()

    def visit(c, scope: str, public_class: bool):
        for ch in c.get_children():
            if not ch.location.file or pathlib.Path(ch.location.file.name) != path:
                continue
            k = ch.kind.name
            if k == "NAMESPACE":
                if ch.spelling != "detail":
                    visit(ch, scope, False)
                continue
            if public_class and ch.access_specifier.name not in ("PUBLIC", "INVALID"):
                continue
            if k in ("CXX_ACCESS_SPEC_DECL", "STATIC_ASSERT", "TEMPLATE_TYPE_PARAMETER",
                     "FRIEND_DECL", "CXX_BASE_SPECIFIER", "VISIBILITY_ATTR",
                     "TEMPLATE_NON_TYPE_PARAMETER", "UNEXPOSED_DECL", "UNEXPOSED_ATTR"):
                continue
            if k in SPECIAL or ch.spelling.startswith("operator"):
                continue  # documented by the class
            name = f"{scope}{ch.spelling}"
            doc = documented(ch)
            is_class = k in ("CLASS_DECL", "STRUCT_DECL", "CLASS_TEMPLATE")
            if is_class and not ch.is_definition():
                continue
            if is_class and scope and ch.spelling in ("iterator",):
                pass
            entry = Entry(name, k.lower(), signature(ch), doc)
            if doc is None:
                missing.append(f"{header}:{ch.extent.start.line}: {name}")
            if is_class:
                visit_members(ch, entry, f"{name}::")
            entries.append(entry)

    def visit_members(c, entry: Entry, scope: str):
        sub: list[Entry] = []
        holder = entries
        for ch in c.get_children():
            if not ch.location.file or pathlib.Path(ch.location.file.name) != path:
                continue
            k = ch.kind.name
            if ch.access_specifier.name != "PUBLIC" and c.kind.name != "STRUCT_DECL":
                continue
            if ch.access_specifier.name == "PRIVATE" or ch.access_specifier.name == "PROTECTED":
                continue
            if k in ("CXX_ACCESS_SPEC_DECL", "STATIC_ASSERT", "TEMPLATE_TYPE_PARAMETER",
                     "FRIEND_DECL", "CXX_BASE_SPECIFIER", "TEMPLATE_NON_TYPE_PARAMETER"):
                continue
            if k in SPECIAL or ch.spelling.startswith("operator"):
                continue
            if k in ("CLASS_DECL", "STRUCT_DECL", "CLASS_TEMPLATE"):
                if not ch.is_definition():
                    continue
                nested = Entry(f"{scope}{ch.spelling}", k.lower(), signature(ch), documented(ch))
                if nested.doc is None:
                    missing.append(f"{header}:{ch.extent.start.line}: {nested.name}")
                visit_members(ch, nested, f"{nested.name}::")
                sub.append(nested)
                continue
            doc = documented(ch)
            if doc is None and k == "FIELD_DECL" and entry.doc:
                doc = []  # a plain struct's fields: its comment says what they are
            m = Entry(f"{scope}{ch.spelling}", k.lower(), signature(ch), doc)
            if doc is None:
                missing.append(f"{header}:{ch.extent.start.line}: {m.name}")
            sub.append(m)
        entry.members = sub
        del holder

    visit(tu.cursor, "pyxbuf::", False)
    intro = []
    for line in lines:
        if not line.startswith("//"):
            break
        intro.append(re.sub(r"^// ?", "", line))
    return entries, intro, missing


def python_package_include(name: str) -> str | None:
    try:
        module = __import__(name)
    except ImportError:
        return None
    if hasattr(module, "include_dir"):
        return module.include_dir()
    if hasattr(module, "get_include"):
        return module.get_include()
    return None


def cpp_page(parts: list[tuple[str, list[Entry], list[str]]]) -> str:
    out = ["# C++ API: `pyxbuf.hpp`", "",
           "Generated from the headers' own comments (`tools/docs/reference.py`, over",
           "libclang's reading of them): namespace `pyxbuf`'s public classes, their public",
           "members and its functions (`pyxbuf::detail` is not API). Everything is inline",
           "code over the [C API](c.md).", ""]
    for header, entries, intro in parts:
        out += [f"## `{header}`", "", "```text", *intro, "```", ""]

        def emit(e: Entry, level: int):
            nonlocal out
            out += [f"{'#' * level} {e.name}", "", "```cpp", e.code, "```", ""]
            if e.doc:
                out += ["```text", *e.doc, "```", ""]
            for m in e.members:
                if m.members:
                    emit(m, min(level + 1, 6))
                    continue
                out += [f"- `{m.code}`" if "\n" not in m.code else f"- `{' '.join(m.code.split())}`"]
                if m.doc:
                    out += ["", "  ```text", *("  " + d for d in m.doc), "  ```", ""]
            out.append("")

        for e in entries:
            emit(e, 3)
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Python: the module's stub
# ---------------------------------------------------------------------------


def python_page(pyi: pathlib.Path, missing: list[str]) -> str:
    tree = ast.parse(pyi.read_text())
    out = ["# Python API: the `pyxbuf` module", "",
           "Generated from the module's stub, `pyxbuf.pyi`, and its docstrings",
           "(`tools/docs/reference.py`). The module is what the wheel installs as `pyxbuf`.", ""]
    doc = ast.get_docstring(tree)
    if doc:
        out += ["```text", doc, "```", ""]
    consts = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            consts.append(node)
        elif isinstance(node, ast.FunctionDef):
            out += python_function(node, "", missing)
        elif isinstance(node, ast.ClassDef):
            out += [f"## class {node.name}", ""]
            bases = ", ".join(ast.unparse(b) for b in node.bases)
            out += ["```python", f"class {node.name}({bases}): ..." if bases else f"class {node.name}: ...", "```", ""]
            d = ast.get_docstring(node)
            if d is None:
                missing.append(f"pyxbuf.pyi:{node.lineno}: class {node.name}")
            else:
                out += ["```text", d, "```", ""]
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    out += python_function(sub, f"{node.name}.", missing, level=3)
    if consts:
        out += ["## Constants", "", "| Name | Type |", "|---|---|"]
        for c in consts:
            out.append(f"| `{c.target.id}` | `{ast.unparse(c.annotation)}` |")
        out.append("")
    return "\n".join(out)


def python_function(node: ast.FunctionDef, prefix: str, missing: list[str], level: int = 2) -> list[str]:
    args = ast.unparse(node.args)
    ret = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    deco = [f"@{ast.unparse(d)}" for d in node.decorator_list]
    d = ast.get_docstring(node)
    if d is None and node.name not in ("__init__",) and not node.name.startswith("__"):
        missing.append(f"pyxbuf.pyi:{node.lineno}: {prefix}{node.name}")
    out = [f"{'#' * level} {prefix}{node.name}", "", "```python", *deco,
           f"def {node.name}({args}){ret}: ...", "```", ""]
    if d:
        out += ["```text", d, "```", ""]
    return out


# ---------------------------------------------------------------------------
# Cython: __init__.pxd, pyxbuf_xview.pxi, c_api.pxd
# ---------------------------------------------------------------------------


def cython_page(pkg: pathlib.Path, c_names: set[str], missing: list[str]) -> str:
    out = ["# Cython API: `from pyxbuf cimport ...`", "",
           "Generated from `pyxbuf/__init__.pxd`, `pyxbuf_xview.pxi` and `pyxbuf/c_api.pxd`",
           "(`tools/docs/reference.py`). `from pyxbuf cimport *` brings every name of the",
           "[C API](c.md) and the helpers below; `include \"pyxbuf_xview.pxi\"` adds `XView`.", ""]
    init = (pkg / "__init__.pxd").read_text().split("\n")
    intro = []
    for line in init:
        if not line.startswith("#"):
            break
        intro.append(re.sub(r"^# ?", "", line))
    out += ["```text", *intro, "```", "", "## Inline helpers (`__init__.pxd`)", ""]
    out += cython_defs(init, "__init__.pxd", missing)
    xview = (pkg / "pyxbuf_xview.pxi").read_text().split("\n")
    out += ["## `XView` (`pyxbuf_xview.pxi`)", ""]
    intro = []
    for line in xview:
        if not line.startswith("#"):
            break
        intro.append(re.sub(r"^# ?", "", line))
    out += ["```text", *intro, "```", ""]
    out += cython_defs(xview, "pyxbuf_xview.pxi", missing)
    api = (pkg / "c_api.pxd").read_text()
    names = sorted(set(re.findall(r"^\s+(?:ctypedef\s+(?:struct\s+)?[\w ]*?\b)?(pyxbuf_\w+|PYXBUF_\w+)\b",
                                  api, flags=re.M))
                   | set(re.findall(r"\b(pyxbuf_\w+)\s*\(", api)))
    out += ["## The C API's names (`c_api.pxd`)", "",
            "Declared as `pyxbuf.h` declares them; each links to its entry in the C reference.", "",
            "| Name | |", "|---|---|"]
    for n in names:
        if n in c_names:
            out.append(f"| [`{n}`](c.md#{anchor(n)}) | |")
        else:
            missing.append(f"c_api.pxd: {n} (not documented in pyxbuf.h)")
    out.append("")
    return "\n".join(out)


def cython_defs(lines: list[str], where: str, missing: list[str]) -> list[str]:
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(cdef inline|cpdef|cdef class|def|cdef)\s+(.*?)\s*:\s*$", line)
        if not m or (m.group(2) == "cdef" and "(" not in m.group(3)):
            continue
        sig = line.strip().rstrip(":")
        j = i
        while not lines[j].rstrip().endswith(":"):
            j += 1
            sig += " " + lines[j].strip().rstrip(":")
        name = re.search(r"(\w+)\s*(?:\(|$|:)", m.group(3).split("(")[0] + "(").group(1)
        if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__", "__cinit__",
                                                 "__getbuffer__", "__releasebuffer__"):
            continue
        k = j + 1
        doc = None
        if k < len(lines) and lines[k].strip().startswith('"""'):
            body = [lines[k].strip()[3:]]
            while '"""' not in body[-1]:
                k += 1
                body.append(lines[k].strip())
            body[-1] = body[-1].split('"""')[0]
            doc = [b for b in body]
        if doc is None and not name.startswith("__"):
            missing.append(f"{where}:{i + 1}: {name}")
        level = "###" if not m.group(1) else "####"
        out += [f"{level} {name}", "", "```cython", sig, "```", ""]
        if doc:
            out += ["```text", *doc, "```", ""]
    return out


# ---------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True, type=pathlib.Path)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--python-include", default=None)
    a = ap.parse_args()
    import sysconfig

    py_include = a.python_include or sysconfig.get_paths()["include"]
    a.out.mkdir(parents=True, exist_ok=True)
    missing: list[str] = []

    header = a.root / "include" / "pyxbuf.h"
    c = parse_c_header(header)
    for e in c:
        if e.doc is None:
            missing.append(f"pyxbuf.h: {e.kind} {e.name}")
    (a.out / "c.md").write_text(c_page(c, header_intro(header)))

    parts = []
    for h in ("pyxbuf.hpp", "pyxbuf_nanobind.hpp", "pyxbuf_pybind11.hpp"):
        entries, intro, miss = cpp_entries(a.root, h, py_include)
        parts.append((h, entries, intro))
        missing += miss
    (a.out / "cpp.md").write_text(cpp_page(parts))

    pkg = a.root / "rust" / "pyxbuf-python" / "python" / "pyxbuf"
    (a.out / "python.md").write_text(python_page(pkg / "pyxbuf.pyi", missing))
    (a.out / "cython.md").write_text(cython_page(pkg, {e.name for e in c}, missing))

    print(f"reference: {len(c)} C symbols, "
          f"{sum(len(e) for _, e, _ in parts)} C++ entries; pages in {a.out}")
    if missing:
        print(f"reference: {len(missing)} public symbol(s) without documentation:", file=sys.stderr)
        for m in missing:
            print(f"  {m}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
