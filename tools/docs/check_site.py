"""Checks of the built documentation site (`make docs`, tools/docs/build.sh):

- every internal link and image of the site's own pages (not rustdoc's, whose
  links rustdoc checks with -D warnings) resolves: the file exists, and a
  `#fragment` names an id in it;
- every Markdown page of docs/ became a page of the site;
- every fenced code block of docs/ is one make test-readme runs (a doctest,
  a shell script, or a block a `<!-- readme-test: file ... -->` directive
  writes) or is marked not runnable (`<!-- readme-test: skip (REASON) -->`),
  by python-tests/readme/readme_blocks.py's own rules.

Exit status 1 with every problem listed.
"""

from __future__ import annotations

import argparse
import html.parser
import pathlib
import sys
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python-tests" / "readme"))
import readme_blocks  # noqa: E402  (the harness's parser: one definition of the rules)


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a and a["id"]:
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for attr in ("href", "src"):
            if a.get(attr) and tag in ("a", "img", "link", "script"):
                self.links.append((tag, a[attr]))


def parse(path: pathlib.Path) -> Page:
    p = Page()
    p.feed(path.read_text(errors="replace"))
    return p


def check_links(site: pathlib.Path) -> list[str]:
    problems = []
    pages = {}
    ours = [p for p in site.rglob("*.html") if not p.relative_to(site).parts[0] == "rust"]
    for page in ours:
        pages[page] = parse(page)
    for page, parsed in pages.items():
        for tag, link in parsed.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc or link.startswith("mailto:"):
                continue
            target = page if not url.path else (page.parent / urllib.parse.unquote(url.path))
            target = target.resolve()
            where = page.relative_to(site)
            if not target.exists():
                problems.append(f"{where}: {tag} -> {link}: no such file")
                continue
            if target.is_dir():
                target = target / "index.html"
            if url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if url.fragment not in ids:
                    problems.append(f"{where}: {tag} -> {link}: no id '{url.fragment}' there")
    return problems


def check_pages(site: pathlib.Path, docs: pathlib.Path) -> list[str]:
    problems = []
    for md in docs.rglob("*.md"):
        rel = md.relative_to(docs)
        if rel.parts[0].startswith("_") or md.name == "README-docs.md":
            continue
        if not (site / rel.with_suffix(".html")).exists():
            problems.append(f"docs/{rel}: not in the site (add it to a toctree)")
    return problems


def check_blocks(docs: pathlib.Path) -> list[str]:
    problems = []
    for md in sorted(docs.rglob("*.md")):
        if md.name == "index.md":
            continue  # the site's tables of contents, no examples
        try:
            blocks = readme_blocks.parse(md.read_text())
        except readme_blocks.ReadmeError as err:
            problems.append(f"docs/{md.relative_to(docs)}: {err}")
            continue
        for b in blocks:
            if b.lang.startswith("{"):
                continue  # a MyST directive, not a code block
            try:
                readme_blocks.plan(b)
            except readme_blocks.ReadmeError as err:
                problems.append(f"docs/{md.relative_to(docs)}: {err}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", required=True, type=pathlib.Path)
    ap.add_argument("--docs", required=True, type=pathlib.Path)
    a = ap.parse_args()
    problems = check_links(a.site) + check_pages(a.site, a.docs) + check_blocks(a.docs)
    n = len(list(a.site.rglob("*.html")))
    if problems:
        print(f"check_site: {len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"check_site: {n} pages; every internal link and anchor resolves; every code "
          "block of docs/ runs under make test-readme or is marked not runnable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
