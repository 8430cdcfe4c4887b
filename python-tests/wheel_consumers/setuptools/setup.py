"""The consumer built with setuptools, the way the wheel's docs tell C
extension authors to: include and library directories from pyxbuf itself."""

import pyxbuf
from setuptools import Extension, setup

NAME = "pyxbuf_consumer_setuptools"

setup(
    name="pyxbuf-consumer-setuptools",
    version="0.0.0",
    ext_modules=[
        Extension(
            NAME,
            sources=["../consumer.c"],
            include_dirs=[pyxbuf.get_include()],
            library_dirs=[pyxbuf.get_library_dir()],
            libraries=["pyxbuf"],
            define_macros=[("PYXBUF_STATIC", None), ("CONSUMER_NAME", NAME)],
        )
    ],
)
