"""What the engine suites share: `need(package)` imports an engine the
target installed, or skips the suite naming why the install failed
(tools/test-distributed.sh puts the reasons in PYXBUF_ENGINES_MISSING, one
`package: reason` a line). An engine missing with no reason fails: the target
never passes silently without it."""

import importlib
import os

import pytest


def need(package):
    try:
        return importlib.import_module(package)
    except ImportError as err:
        reasons = dict(line.split(": ", 1) for line in
                       os.environ.get("PYXBUF_ENGINES_MISSING", "").splitlines() if ": " in line)
        if package in reasons:
            pytest.skip(f"SKIPPED: {package} could not be installed here: {reasons[package]}",
                        allow_module_level=True)
        raise ImportError(f"{package} is missing and tools/test-distributed.sh gave no reason; "
                          "run the suite through `make test-distributed`") from err
