"""sitecustomize for the Python suite under qemu-aarch64 (make test-aarch64):
the emulated interpreter's sys.executable is an arm64 binary the host kernel
cannot start, so tests that run `sys.executable` in a subprocess get the
wrapper that starts it under the emulator (PYXBUF_AARCH64_PYTHON)."""

import os
import sys

_wrapper = os.environ.get("PYXBUF_AARCH64_PYTHON")
if _wrapper:
    sys.executable = _wrapper
