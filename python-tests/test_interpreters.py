"""Issue 38, item 5: interpreters. pyxbuf's state is process-wide and relies
on one GIL ordering every thread that runs Python (pyxbuf.h, Interpreters):
legacy sub-interpreters, which share the main GIL, work; an interpreter with
its own GIL (PEP 684) must refuse every module that uses pyxbuf at import,
clearly, rather than let two GILs race over that state. Needs _interpreters
(CPython 3.13+; make test-matrix runs it on 3.14t and 3.15)."""

import importlib.util
import textwrap

import pytest

interpreters = pytest.importorskip("_interpreters")

MODULES = ["_pyxbuf_testext", "_pyxbuf_second_copy", "_pyxbuf_cxx_a", "_pyxbuf_cxx_b",
           "pyxbuf", "pyxbuf_sum"]


def present(name):
    return importlib.util.find_spec(name) is not None


def run(config, code):
    """Run `code` in a new interpreter of `config`; its exception, or None."""
    import sys
    iid = interpreters.create(config)
    try:
        prelude = f"import sys\nsys.path[:] = {sys.path!r}\n"
        return interpreters.exec(iid, prelude + textwrap.dedent(code))
    finally:
        interpreters.destroy(iid)


@pytest.mark.parametrize("name", MODULES)
def test_an_interpreter_with_its_own_gil_refuses_the_module(name):
    if not present(name):
        pytest.skip(f"{name} is not built here")
    failure = run("isolated", f"""
        try:
            import {name}
        except ImportError as e:
            assert "does not support loading in subinterpreters" in str(e), e
        else:
            raise AssertionError("{name} was imported into an interpreter with its own GIL")
    """)
    assert failure is None, failure


def test_a_legacy_sub_interpreter_shares_the_gil_and_works():
    if not present("pyxbuf_sum"):
        pytest.skip("pyxbuf_sum is not built here")
    import pyxbuf_sum  # the main interpreter first, as in an application
    assert pyxbuf_sum.sum_host_f32(__import__("array").array("f", [1, 2])) == 3.0
    failure = run("legacy", """
        import array
        import pyxbuf_sum
        a = array.array("f", [1.0, 2.0, 3.5])
        assert pyxbuf_sum.sum_host_f32(a) == 6.5
        e = pyxbuf_sum.zeros_f32(3)
        assert "granted by the producer" in pyxbuf_sum.describe(e)
    """)
    assert failure is None, failure
