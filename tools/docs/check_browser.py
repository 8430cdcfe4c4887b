"""The built site's index page in a real browser (`make docs`): headless
Chromium renders target/docs/html/index.html; the DOM it ends with must
carry the site's title, its navigation (every guide and reference page
linked) and the first paragraph, and its screenshot must be a real page
(a PNG of the window's size with more than a few colours: a blank or
error page fails). The screenshot is kept for people and CI artefacts.

Chromium runs as Debian ships it, as root here: --no-sandbox, no GPU, and
every background connection off (this machine reaches no network).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import struct
import subprocess
import sys
import zlib

WIDTH, HEIGHT = 1280, 900
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}"]
EXPECTED = [
    "pyxbuf gives a C, C++, Cython or Rust consumer",  # the first paragraph
    "guides/python.html", "guides/rust.html", "guides/c.html", "guides/cpp.html",
    "guides/cython.html", "migration/pyo3-pybuffer.html", "troubleshooting.html",
    "reference/c.html", "reference/cpp.html", "reference/rust.html", "reference/python.html",
    "reference/cython.html",
]


def chromium(args: list[str], profile: pathlib.Path) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("check_browser: no chromium on PATH")
    return subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def png_colours(path: pathlib.Path) -> tuple[int, int, int]:
    """Width, height and the number of distinct pixel rows' checksums (a
    cheap measure of how much is drawn) of an 8-bit RGB(A) PNG."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"check_browser: {path} is not a PNG")
    pos, idat, width, height, colour = 8, b"", 0, 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    channels = {2: 3, 6: 4}.get(colour, 3)
    stride = 1 + width * channels
    rows = {raw[r * stride + 1:(r + 1) * stride] for r in range(height)}
    return width, height, len(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", required=True, type=pathlib.Path)
    ap.add_argument("--screenshot", required=True, type=pathlib.Path)
    ap.add_argument("--profile", required=True, type=pathlib.Path)
    a = ap.parse_args()
    index = (a.site / "index.html").resolve()
    url = index.as_uri()
    shutil.rmtree(a.profile, ignore_errors=True)
    dom = chromium(["--dump-dom", url], a.profile)
    if dom.returncode != 0 or "<html" not in dom.stdout:
        print(dom.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"check_browser: chromium --dump-dom failed (exit {dom.returncode})")
    missing = [e for e in EXPECTED if e not in dom.stdout]
    if "<title>pyxbuf" not in dom.stdout:
        missing.insert(0, "<title>pyxbuf")
    a.screenshot.unlink(missing_ok=True)
    shot = chromium([f"--screenshot={a.screenshot}", url], a.profile)
    if shot.returncode != 0 or not a.screenshot.exists():
        print(shot.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"check_browser: chromium --screenshot failed (exit {shot.returncode})")
    width, height, rows = png_colours(a.screenshot)
    problems = [f"the rendered index lacks {m!r}" for m in missing]
    if (width, height) != (WIDTH, HEIGHT):
        problems.append(f"the screenshot is {width}x{height}, not {WIDTH}x{HEIGHT}")
    if rows < 50:
        problems.append(f"the screenshot has {rows} distinct pixel rows: a blank or error page")
    if problems:
        for p in problems:
            print(f"check_browser: {p}", file=sys.stderr)
        return 1
    print(f"check_browser: {url} rendered in headless Chromium: title, navigation and "
          f"{len(EXPECTED)} expected links present; screenshot {a.screenshot} "
          f"({width}x{height}, {rows} distinct rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
