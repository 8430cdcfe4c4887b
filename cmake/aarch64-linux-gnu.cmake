# aarch64-linux-gnu.cmake -- cross-compile pyxbuf for Linux aarch64 with
# Debian's gcc-aarch64-linux-gnu against the arm64 root that
# tools/aarch64-sysroot.sh unpacks (CPython 3.11, NumPy), and run what it
# builds under qemu-aarch64-static (CTest, and FindPython's interpreter
# queries through tools/aarch64-python). `make test-aarch64` passes
# -DPYXBUF_AARCH64_SYSROOT=<root>.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(NOT PYXBUF_AARCH64_SYSROOT)
  set(PYXBUF_AARCH64_SYSROOT "$ENV{PYXBUF_AARCH64_SYSROOT}")
endif()
if(NOT PYXBUF_AARCH64_SYSROOT)
  message(FATAL_ERROR "aarch64-linux-gnu.cmake: set PYXBUF_AARCH64_SYSROOT to the arm64 root "
                      "tools/aarch64-sysroot.sh made (make test-aarch64 does)")
endif()
# The root's own C library and headers (Debian's multiarch layout, which the
# cross compiler follows under --sysroot: pyconfig.h includes
# <aarch64-linux-gnu/python3.11/pyconfig.h>).
set(CMAKE_SYSROOT ${PYXBUF_AARCH64_SYSROOT})
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L ${PYXBUF_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH ${PYXBUF_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# libpython's own dependencies (libexpat, libz, ...) live in the root.
set(CMAKE_EXE_LINKER_FLAGS_INIT
    "-Wl,-rpath-link,${PYXBUF_AARCH64_SYSROOT}/usr/lib/aarch64-linux-gnu")
set(CMAKE_SHARED_LINKER_FLAGS_INIT
    "-Wl,-rpath-link,${PYXBUF_AARCH64_SYSROOT}/usr/lib/aarch64-linux-gnu")
set(CMAKE_MODULE_LINKER_FLAGS_INIT
    "-Wl,-rpath-link,${PYXBUF_AARCH64_SYSROOT}/usr/lib/aarch64-linux-gnu")
