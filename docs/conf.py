# Sphinx configuration of pyxbuf's documentation site (`make docs`, tools/docs/build.sh):
# Markdown pages (MyST), the generated API reference (reference/*.md, written by
# tools/docs/reference.py into the build's copy of this folder) and rustdoc's pages
# (copied beside the site as rust/). Warnings fail the build (sphinx-build -W -n).
project = "pyxbuf"
author = "the pyxbuf developers"
copyright = "2026, the pyxbuf developers"
release = "0.1.0"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
exclude_patterns = ["requirements.txt", "README-docs.md", "_build"]
# The examples' harness directives (<!-- readme-test: ... -->) are HTML comments.
suppress_warnings = ["myst.header"]

html_theme = "furo"
html_title = "pyxbuf"
html_static_path = ["_static"]
html_extra_path = ["_rust"]  # rustdoc's output, copied in by tools/docs/build.sh
html_show_sourcelink = False
# No request leaves the machine: no fonts, no search index fetches from elsewhere.
html_theme_options = {"navigation_with_keys": True}
