#!/usr/bin/env bash
# `make docs`: the documentation site, built and checked, into target/docs/html.
#
#   1. a venv (target/docs/venv) with docs/requirements.txt: Sphinx, MyST, furo, and
#      libclang, nanobind and pybind11 for the reference generator;
#   2. docs/ copied to target/docs/src, and the API reference generated into its
#      reference/ (tools/docs/reference.py): C, C++, Python, Cython pages from the
#      sources' doc comments -- any public symbol without one fails here (the
#      missing-docs check);
#   3. rustdoc of the pyxbuf and pyxbuf-sys crates (RUSTDOCFLAGS -D warnings, both
#      crates #![deny(missing_docs)]), copied into the site as rust/;
#   4. sphinx-build -W -n: warning-free, every cross-reference resolved;
#   5. tools/docs/check_site.py: every internal link and anchor of the built pages
#      resolves, every page of docs/ is in the site, every code block of docs/ is
#      run by make test-readme or marked not runnable;
#   6. the index page opened in headless Chromium (Debian's `chromium`, installed as
#      root when missing): the rendered DOM must show the site's title, its
#      navigation and every guide's link, and a screenshot is kept
#      (target/docs/screenshot.png).
#
# Environment: VPY (the project's venv python, for its base interpreter),
# PYO3_PYTHON and CARGO_BUILD_JOBS as make's RUST_ENV sets them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=$ROOT/target/docs
VENV=$OUT/venv
step() { echo "docs: $*"; }

# 1. The generator's venv, rebuilt when docs/requirements.txt changes.
if [ ! -x "$VENV/bin/sphinx-build" ] || [ docs/requirements.txt -nt "$VENV/.ready" ]; then
    step "venv ($VENV)"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    PYTHONPATH= "$VENV/bin/python" -m pip install --quiet -r docs/requirements.txt
    touch "$VENV/.ready"
fi

# 2. The sources and the generated reference.
step "sources and the API reference"
rm -rf "$OUT/src" "$OUT/html"
mkdir -p "$OUT/src"
cp -a docs/. "$OUT/src/"
# bench/'s chart of the latest `make bench-ir`, not a copy kept in docs/.
cp bench/results/ir-chart.svg "$OUT/src/_static/ir-chart.svg"
"$VENV/bin/python" tools/docs/reference.py --root "$ROOT" --out "$OUT/src/reference"

# 3. rustdoc.
step "rustdoc (pyxbuf, pyxbuf-sys)"
# The workspace's target directory: the dependencies' metadata is make test's.
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps -p pyxbuf -p pyxbuf-sys --all-features
mkdir -p "$OUT/src/_rust"
cp -a target/doc "$OUT/src/_rust/rust"

# 4. The site.
step "sphinx-build"
"$VENV/bin/sphinx-build" -q -W --keep-going -n -b html "$OUT/src" "$OUT/html"

# 5. Links, pages, code blocks.
step "links and code blocks"
"$VENV/bin/python" tools/docs/check_site.py --site "$OUT/html" --docs docs

# 6. A real browser.
if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        step "installing Debian's chromium"
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends chromium >/dev/null
    fi
fi
if ! command -v chromium >/dev/null; then
    echo "docs: FAILED: no chromium, and it cannot be installed here (apt-get as root)" >&2
    exit 1
fi
step "headless chromium"
"$VENV/bin/python" tools/docs/check_browser.py --site "$OUT/html" \
    --screenshot "$OUT/screenshot.png" --profile "$OUT/chromium-profile"
step "ok ($OUT/html/index.html)"
