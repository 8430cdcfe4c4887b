"""Issue 38, part 3: pairs of random strided views of one buffer against a
brute-force byte intersection. No pair that shares a byte may be granted
together (soundness); pairs that share none should be granted (exactness).
The registry is exact for two dense views whose spacings divide one another
(1-D views with equal strides, or one stride a multiple of the other: real
and imaginary parts, channels, columns) and sound for the rest.

Three routes, each an exclusive borrow of one view and a shared borrow of the
other: pyxbuf's registry alone, and rust-numpy's borrow table (the real
capsule in NumPy's module, as rust-numpy calls it) in both directions.

PYXBUF_BORROW_PAIRS sets the number of pairs per route (20,000 in make
test; make fuzz-borrows runs more, with PYXBUF_BORROW_SEED=random)."""

import os
import random
import sys

import numpy as np
import pytest

import _pyxbuf_testext as t
from test_borrow_soundness import RustNumpy

PAIRS = int(os.environ.get("PYXBUF_BORROW_PAIRS", "20000"))
SEED = os.environ.get("PYXBUF_BORROW_SEED", "38")
SHARED = t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE
BYTES = 192
DTYPES = [np.int8, np.int16, np.int32, np.float64]


def random_view(rng, base):
    """A 1-D or 2-D view of `base` (uint8) of a random dtype: any strides
    (negative, zero, not whole items), offsets, length-1 dimensions with huge
    strides; None when it would not fit in the buffer."""
    dtype = np.dtype(rng.choice(DTYPES))
    ndim = rng.choice([1, 1, 2])
    shape, strides = [], []
    for _ in range(ndim):
        n = rng.choice([0, 1, 1, 2, 3, 4, 5, 6, 8])
        if n == 1 and rng.random() < 0.5:
            stride = rng.choice([-1, 1]) * rng.randrange(100, 4000)  # never walked
        else:
            stride = rng.choice([-1, 1]) * rng.choice(
                [0, dtype.itemsize, 2 * dtype.itemsize, 3 * dtype.itemsize, rng.randrange(1, 40)])
        shape.append(n)
        strides.append(stride)
    offset = rng.randrange(BYTES // 3)  # views crowd the front: pairs meet often
    lo = hi = offset
    for n, s in zip(shape, strides):
        if n > 1:
            lo, hi = min(lo, lo + (n - 1) * s) if s < 0 else lo, hi + (n - 1) * s if s > 0 else hi
    if 0 in shape:
        lo = hi = offset
    if lo < 0 or hi + dtype.itemsize > BYTES:
        return None
    return np.ndarray(tuple(shape), dtype, buffer=base, offset=offset, strides=tuple(strides))


def byte_mask(v, base):
    mask = np.zeros(BYTES, dtype=bool)
    if v.size == 0:
        return mask
    start = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    offsets = np.full((1,) * v.ndim, start, dtype=np.int64)
    for d, (n, s) in enumerate(zip(v.shape, v.strides)):
        step = np.arange(n, dtype=np.int64) * s
        offsets = offsets + step.reshape((1,) * d + (n,) + (1,) * (v.ndim - d - 1))
    items = offsets.reshape(-1, 1) + np.arange(v.itemsize)
    mask[items.ravel()] = True
    return mask


def dense_step(v):
    """(first byte, step, count) when every point of the view's lattice
    within its span is an item (what the registry calls dense), else None."""
    dims = sorted((abs(s), n) for n, s in zip(v.shape, v.strides) if n > 1 and s != 0)
    for (s0, n0), (s1, _) in zip(dims, dims[1:]):
        if s1 != s0 * n0:
            return None
    return dims[0][0] if dims else 0


def exact_expected(a, b):
    """Whether the registry promises an exact answer for this pair."""
    sa, sb = dense_step(a), dense_step(b)
    if sa is None or sb is None or a.size == 0 or b.size == 0:
        return False
    count = lambda v, s: 1 if s == 0 else v.size // max(1, np.prod([n for n, st in zip(v.shape, v.strides) if st == 0 and n > 1] or [1]))
    if sa == 0 or sb == 0 or count(a, sa) == 1 or count(b, sb) == 1:
        return True
    return max(sa, sb) % min(sa, sb) == 0


class Route:
    def __init__(self, name, take_exclusive, take_shared):
        self.name, self.take_exclusive, self.take_shared = name, take_exclusive, take_shared


def pyxbuf_exclusive(a):
    v = t.acquire(a, EXCLUSIVE)
    return v.release


def pyxbuf_shared(b):
    try:
        v = t.acquire(b, SHARED)
    except BufferError:
        return None
    return v.release


def run_route(route, seed, pairs):
    rng = random.Random(f"{seed}-{route.name}")
    base = np.zeros(BYTES, dtype=np.uint8)
    stats = {"pairs": 0, "overlapping": 0, "disjoint": 0, "over_strict": 0, "exact_pairs": 0}
    unsound, inexact = [], []
    while stats["pairs"] < pairs:
        a, b = random_view(rng, base), random_view(rng, base)
        if a is None or b is None:
            continue
        stats["pairs"] += 1
        overlap = bool((byte_mask(a, base) & byte_mask(b, base)).any())
        release_a = route.take_exclusive(a)
        release_b = route.take_shared(b)
        granted = release_b is not None
        if release_b is not None:
            release_b()
        release_a()
        exact = exact_expected(a, b)
        stats["exact_pairs"] += exact
        if overlap:
            stats["overlapping"] += 1
            if granted:
                unsound.append(describe(a, b))
        else:
            stats["disjoint"] += 1
            if not granted:
                stats["over_strict"] += 1
                if exact:
                    inexact.append(describe(a, b))
    assert t.shared_info()[1] == 0
    return stats, unsound, inexact


def describe(a, b):
    def one(v):
        return (v.dtype.str, v.shape, v.strides, v.__array_interface__["data"][0] % 4096)
    return one(a), one(b)


@pytest.fixture(scope="module")
def rust_numpy():
    return RustNumpy()


def routes(rust_numpy):
    def rn_exclusive(a):
        assert rust_numpy.exclusive(a) == 0
        return lambda: rust_numpy.release_mut(a)

    def rn_shared(b):
        if rust_numpy.api.acquire(rust_numpy.api.flags, b) != 0:
            return None
        return lambda: rust_numpy.release(b)

    return {
        "pyxbuf": Route("pyxbuf", pyxbuf_exclusive, pyxbuf_shared),
        "rust-numpy-then-pyxbuf": Route("rust-numpy-then-pyxbuf", rn_exclusive, pyxbuf_shared),
        "pyxbuf-then-rust-numpy": Route("pyxbuf-then-rust-numpy", pyxbuf_exclusive, rn_shared),
    }


@pytest.mark.parametrize("route_name", ["pyxbuf", "rust-numpy-then-pyxbuf",
                                        "pyxbuf-then-rust-numpy"])
def test_random_pairs_are_sound_and_exact_where_promised(rust_numpy, route_name):
    seed = random.randrange(1 << 30) if SEED == "random" else SEED
    stats, unsound, inexact = run_route(routes(rust_numpy)[route_name], seed, PAIRS)
    rate = stats["over_strict"] / max(1, stats["disjoint"])
    print(f"\nborrow pairs [{route_name}] seed={seed}: {stats}; refused although disjoint: "
          f"{stats['over_strict']}/{stats['disjoint']} = {rate:.4%}", file=sys.stderr)
    assert not unsound, f"granted together although they share bytes (seed {seed}): {unsound[:5]}"
    assert not inexact, f"refused although disjoint where exact (seed {seed}): {inexact[:5]}"
    assert stats["overlapping"] > PAIRS // 10 and stats["disjoint"] > PAIRS // 10, stats


def test_the_exact_cases_by_name():
    """The cases the issue names, granted because their items are apart."""
    base = np.zeros(64, dtype=np.complex128)
    real, imag = base.real, base.imag
    with_real = t.acquire(real, EXCLUSIVE)
    t.acquire(imag, SHARED).release()
    with_real.release()
    a = np.zeros(16, dtype=np.uint8)
    # Every 6th byte against every 2nd between them: the lattice alone (gcd 2,
    # both at even bytes) would refuse; the items are apart.
    x = t.acquire(a[0::6], EXCLUSIVE)  # bytes 0 6 12
    t.acquire(a[2:5:2], SHARED).release()  # bytes 2 4
    with pytest.raises(BufferError):
        t.acquire(a[2:7:2], SHARED)  # bytes 2 4 6
    x.release()
    # One stride a multiple of the other: every 6th byte from 1, every 2nd from 0.
    x = t.acquire(a[1::6], EXCLUSIVE)
    t.acquire(a[0::2], SHARED).release()
    with pytest.raises(BufferError):
        t.acquire(a[1::3], SHARED)  # shares bytes 1, 7, 13
    x.release()
    # A channel of an HWC image beside another channel.
    img = np.zeros((4, 5, 3), dtype=np.float32)
    x = t.acquire(img[..., 0], EXCLUSIVE)
    t.acquire(img[..., 2], SHARED).release()
    x.release()
