"""pyxbuf arrays through multiprocessing (issue 48, `make test-distributed`):
worker processes started with spawn, fork and forkserver, and a
ProcessPoolExecutor, call a Rust function (rust/examples/sum's ramp_f32 and
ramp_bf16, which return pyxbuf.Exporter objects) and the parent reads what
comes back bit-exact; arrays sent the other way are summed there. Each test is
bounded in time (a hung worker fails it, never the run)."""

import concurrent.futures
import multiprocessing
import pickle

import ml_dtypes
import numpy as np
import pytest

import pyxbuf
import pyxbuf_sum

TIMEOUT = 120  # seconds a pool may take, start-up included
METHODS = [m for m in ("spawn", "fork", "forkserver") if m in multiprocessing.get_all_start_methods()]
RAMPS = {"f32": (pyxbuf_sum.ramp_f32, np.float32, "f"),
         "bf16": (pyxbuf_sum.ramp_bf16, ml_dtypes.bfloat16, "[ml_dtypes$bfloat16]")}


def expected(kind, n, step):
    # The ramp's items as the Rust function computes them: i * step in f32,
    # then (bf16) rounded to nearest even.
    return (np.arange(n, dtype=np.float32) * np.float32(step)).astype(RAMPS[kind][1])


def ramp(kind, n, step):
    """Runs in the worker: the Rust function's array, returned as it is."""
    return RAMPS[kind][0](n, step)


def describe(x):
    """Runs in the worker: what arrived, and its sum through Rust."""
    return type(x).__name__, x.format, x.shape, pyxbuf_sum.sum_any(x)


def check(kind, got, n, step):
    assert type(got) is pyxbuf.Exporter and got.format == RAMPS[kind][2]
    assert got.shape == (n,) and got.readonly == 0
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                  expected(kind, n, step).view(np.uint8))


@pytest.mark.parametrize("kind", sorted(RAMPS))
@pytest.mark.parametrize("method", METHODS)
def test_a_pool_worker_returns_a_rust_array(method, kind):
    with multiprocessing.get_context(method).Pool(2) as pool:
        jobs = [pool.apply_async(ramp, (kind, n, 0.25)) for n in (0, 1, 1000, 1 << 20)]
        for n, job in zip((0, 1, 1000, 1 << 20), jobs):
            check(kind, job.get(TIMEOUT), n, 0.25)


@pytest.mark.parametrize("method", METHODS)
def test_arrays_sent_to_workers_arrive_with_their_format(method):
    arrays = [pyxbuf_sum.ramp_f32(100, 1.0), pyxbuf_sum.ramp_bf16(100, 0.5),
              pyxbuf.frombuffer(np.arange(12, dtype=np.float64), "d", (3, 4))]
    with multiprocessing.get_context(method).Pool(2) as pool:
        got = pool.map_async(describe, arrays).get(TIMEOUT)
    assert got == [("Exporter", "f", (100,), 4950.0),
                   ("Exporter", "[ml_dtypes$bfloat16]", (100,), 2475.0),
                   ("Exporter", "d", (3, 4), 66.0)]


@pytest.mark.parametrize("kind", sorted(RAMPS))
def test_a_process_pool_executor_returns_rust_arrays(kind):
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as ex:
        futures = {n: ex.submit(ramp, kind, n, -1.5) for n in (3, 4096, 1 << 18)}
        for n, f in futures.items():
            check(kind, f.result(TIMEOUT), n, -1.5)


def test_a_queue_carries_arrays_out_of_band_through_its_pickler():
    # multiprocessing's own pickler (ForkingPickler, protocol 5 by default on
    # 3.14, the highest the interpreter offers on older ones) sends the items
    # as a PickleBuffer: one copy into the pipe, none of pyxbuf's.
    from multiprocessing.reduction import ForkingPickler

    x = pyxbuf_sum.ramp_bf16(1 << 16, 0.125)
    stream = bytes(ForkingPickler.dumps(x, protocol=5))
    back = pickle.loads(stream)
    check("bf16", back, 1 << 16, 0.125)
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_send_ramp, args=(q,))
    p.start()
    try:
        check("f32", q.get(timeout=TIMEOUT), 5000, 0.5)
    finally:
        p.join(TIMEOUT)
    assert p.exitcode == 0


def _send_ramp(q):
    q.put(pyxbuf_sum.ramp_f32(5000, 0.5))
