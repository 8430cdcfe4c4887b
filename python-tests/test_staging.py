"""Large host <-> device copies through pinned staging (issue 40), on the
guarded emulated device.

The emulated device runs an asynchronous copy only when its stream runs, and
reads (or writes) the host side of it then, as a DMA engine does: a pipeline
that refilled a staging buffer before the event behind its last copy had
happened would send the new bytes, and these round trips would fail. The
configuration is shrunk (64 KiB chunks, staging from one byte) so that small
arrays cross every chunk boundary.
"""

import gc
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import _pyxbuf_testext as t

EXT = t.PYXBUF_DL_EXT_DEV
DEV0 = (EXT, 0)
CHUNK = 64 << 10


def settle():
    """Until the pool's grower has served every request: a copy that finds no
    idle block goes without one and asks the pool to grow for the next."""
    for _ in range(10000):
        if t.pinned_pool_stats()["background_pending"] == 0:
            return t.pinned_pool_stats()
        time.sleep(0.001)
    raise AssertionError("the pinned pool's grower left requests unserved for 10 s")


@pytest.fixture(autouse=True)
def small_chunks():
    before = t.transfer_config(threshold=1, chunk=CHUNK, buffers=3, threads=3,
                               pool_cap=64 * CHUNK, enabled=1)
    live = t.emulated_live_allocations()
    round_trip(pattern(3 * CHUNK))  # cold: direct, and the pool grows its buffers
    settle()
    yield
    gc.collect()
    settle()
    t.emulated_fail_copies_after(-1)
    t.transfer_config(**before)
    assert t.emulated_live_allocations() == live
    stats = t.pinned_pool_stats()
    assert stats["used_bytes"] == 0, "a staging buffer or pooled result was not given back"


def pattern(n, seed=1):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def round_trip(a):
    on_device = t.to_device(a, DEV0)
    back = t.copy_to_host(on_device)
    return on_device, back


SIZES = [1, 4095, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK, 3 * CHUNK + 7, 10 * CHUNK + 4096]


@pytest.mark.parametrize("n", SIZES)
def test_round_trip_at_every_chunk_boundary(n):
    a = pattern(n)
    before = t.pinned_pool_stats()
    _, back = round_trip(a)
    assert back == a.tobytes()
    after = t.pinned_pool_stats()
    # From 64 KiB both directions took staging buffers; under it, none.
    taken = (after["allocations"] + after["reuses"]) - (before["allocations"] + before["reuses"])
    if n >= 64 << 10:
        assert taken >= 2
    else:
        assert taken == 0


def test_empty_copy_is_direct_and_empty():
    a = np.zeros(0, np.uint8)
    _, back = round_trip(a)
    assert back == b""


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6 * CHUNK), buffers=st.integers(2, 5), threads=st.integers(1, 4),
       chunk_pages=st.integers(16, 40))
def test_any_size_and_configuration(n, buffers, threads, chunk_pages):
    t.transfer_config(buffers=buffers, threads=threads, chunk=chunk_pages * 4096)
    a = pattern(n, seed=n)
    _, back = round_trip(a)
    assert back == a.tobytes()


@pytest.mark.parametrize("threads", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("n", [(1 << 20) - 1, 1 << 20, (3 << 20) + 4097, 5 << 20])
def test_fill_threads_split_megabyte_chunks(threads, n):
    """Chunks of 1 MiB are split across the fill threads (parts of at least
    256 KiB, page-aligned): every split, both directions."""
    t.transfer_config(chunk=1 << 20, threads=threads, pool_cap=64 << 20)
    a = pattern(n, seed=threads)
    _, back = round_trip(a)
    assert back == a.tobytes()


def test_strided_views_stage_their_packed_bytes():
    a = pattern(8 * CHUNK).reshape(64, -1)[:, ::3]
    _, back = round_trip(a)
    assert back == np.ascontiguousarray(a).tobytes()


def _takes():
    s = t.pinned_pool_stats()
    return s["allocations"] + s["reuses"]


def test_a_strided_upload_packs_into_pooled_memory_and_copies_it_directly():
    """A strided view is packed on the host into one pooled page-locked block,
    which the device then copies directly: no staging chunks beside it."""
    a = pattern(8 * CHUNK).reshape(64, -1)[:, ::3]
    t.to_device(a, DEV0)  # cold: packed into plain memory; a block of its size grows
    settle()
    before = _takes()
    dev = t.to_device(a, DEV0)
    assert _takes() - before == 1
    assert t.pinned_pool_stats()["used_bytes"] == 0  # given back once the copy completed
    assert t.copy_to_host(dev) == np.ascontiguousarray(a).tobytes()


def test_result_on_the_host_is_pooled_memory_given_back():
    a = pattern(5 * CHUNK)
    dev = t.to_device(a, DEV0)
    for _ in range(2):  # pageable; once its size has missed twice, a pooled block grows
        cold = t.to_device(dev, None)
        del cold
    gc.collect()
    settle()
    before = t.pinned_pool_stats()
    host = t.to_device(dev, None)
    during = t.pinned_pool_stats()
    assert during["used_bytes"] >= a.nbytes  # the result holds a pooled block
    assert bytes(memoryview(host)) == a.tobytes()
    assert np.frombuffer(host, np.uint8).sum() == a.sum()  # NumPy reads it as host memory
    address = t.host_address(host)
    del host
    gc.collect()
    assert t.pinned_pool_stats()["used_bytes"] == before["used_bytes"]
    again = t.to_device(dev, None)  # the same block, reused
    assert t.host_address(again) == address
    assert bytes(memoryview(again)) == a.tobytes()


def test_page_locked_results_are_allocated_without_the_gil():
    """issue 47 items 5 and part 3: page-locking a new result takes the
    driver milliseconds to seconds. No call waits for it: a result that finds
    no idle pooled block is pageable memory, and once its size has missed
    twice the pool's grower (holding no GIL) page-locks one for the next
    call; a size seen once grows nothing (it would hold the driver for
    nothing)."""
    a = pattern(5 * CHUNK + 4097)  # a size no other test's results have
    dev = t.to_device(a, DEV0)
    t.pinned_pool_trim()
    before = t.pinned_pool_stats()
    host = t.to_device(dev, None)
    assert t.pinned_pool_stats()["used_bytes"] == before["used_bytes"]  # pageable
    assert bytes(memoryview(host)) == a.tobytes()
    del host
    once = settle()  # the staging buffers it went without, grown
    host = t.to_device(dev, None)  # missed again: now a block of its size grows
    assert t.pinned_pool_stats()["used_bytes"] == before["used_bytes"]
    assert bytes(memoryview(host)) == a.tobytes()
    grown = settle()
    assert grown["background_allocations"] == once["background_allocations"] + 1
    assert grown["background_allocations"] > before["background_allocations"]
    assert grown["emulated_host_allocations_with_gil"] == before["emulated_host_allocations_with_gil"]
    again = t.to_device(dev, None)
    assert t.pinned_pool_stats()["used_bytes"] >= a.nbytes  # the grown block
    assert bytes(memoryview(again)) == a.tobytes()


def test_medium_copies_go_through_one_pooled_buffer():
    """From 64 KiB to the threshold a copy goes through idle staging buffers
    (one, for a copy of one chunk), filled by the calling thread; a cold one
    is direct."""
    t.transfer_config(threshold=1 << 20, chunk=1 << 20, pool_cap=64 << 20)
    for n in ((64 << 10), (200 << 10) + 3, (1 << 20) - 1):
        a = pattern(n, seed=n)
        round_trip(a)  # may be cold for this chunk size: the pool grows
        settle()
        before = _takes()
        dev = t.to_device(a, DEV0)
        assert _takes() - before == 1
        assert t.copy_to_host(dev) == a.tobytes()
        assert _takes() - before == 2


@pytest.mark.parametrize("chunk", [2**64 - 2**20, 3 * 2**62 + 2**20, 2**30 + 1])
def test_a_chunk_beyond_the_machine_is_refused_and_nothing_changes(chunk):
    """issue 47 item 1: chunk x buffers and the chunk count wrapped; a staged
    copy then copied nothing and said it had, or overflowed a 0-byte block."""
    before = t.transfer_config()
    with pytest.raises(ValueError, match=r"chunk is \d+; it must be 65536\.\.1073741824 bytes"):
        t.transfer_config(chunk=chunk, buffers=8, pool_cap=2**64 - 1)
    assert t.transfer_config() == before
    a = pattern(3 * CHUNK + 5)
    _, back = round_trip(a)
    assert back == a.tobytes()


def test_a_pool_cap_beyond_the_machine_is_refused():
    with pytest.raises(ValueError, match=r"pool_cap is 18446744073709551615; it must be at most "
                                         r"\d+ bytes \(this machine's memory\)"):
        t.transfer_config(pool_cap=2**64 - 1)


def test_small_results_and_disabled_staging_use_plain_memory():
    a = pattern((64 << 10) - 1)
    dev = t.to_device(a, DEV0)
    used = t.pinned_pool_stats()["used_bytes"]
    host = t.to_device(dev, None)
    assert t.pinned_pool_stats()["used_bytes"] == used
    assert bytes(memoryview(host)) == a.tobytes()
    t.transfer_config(threshold=1, enabled=0)
    a = pattern(3 * CHUNK)
    before = t.pinned_pool_stats()
    _, back = round_trip(a)
    after = t.pinned_pool_stats()
    assert back == a.tobytes()
    assert (after["allocations"], after["reuses"]) == (before["allocations"], before["reuses"])


def test_a_staged_download_waits_for_the_producers_write():
    """A producer's write on its own stream, with its event on the exporter,
    lands before the staged copy reads the device."""
    a = pattern(4 * CHUNK)
    dev = t.to_device(a, DEV0)
    patch = bytes([7]) * 100
    stream = t.emulated_write(dev, patch, 5 * 4096)
    try:
        assert t.emulated_pending(0, stream) == 2  # the write and its event: not run yet
        back = t.copy_to_host(dev)
    finally:
        t.emulated_destroy_stream(stream)
    expect = bytearray(a.tobytes())
    expect[5 * 4096 : 5 * 4096 + 100] = patch
    assert back == bytes(expect)


def test_an_upload_on_a_stream_is_read_current_from_another():
    a = pattern(6 * CHUNK)
    s1 = t.emulated_new_stream(0)
    try:
        dev = t.to_device(a, DEV0, s1)
        # The staged upload completed before returning: nothing is pending on
        # its stream, and a reader that does not wait at all sees the data.
        assert t.emulated_pending(0, s1) == 0
        assert t.emulated_peek(dev, a.nbytes) == a.tobytes()
        assert t.copy_to_host(dev) == a.tobytes()
        # Its memory is freed in s1's order (the device pool): s1 outlives it.
        del dev
    finally:
        t.emulated_destroy_stream(s1)


@pytest.mark.parametrize("fail_after", [0, 1, 2, 5])
@pytest.mark.parametrize("direction", ["to device", "to host"])
def test_a_copy_failing_midway_leaves_no_result_and_no_buffer(fail_after, direction):
    a = pattern(8 * CHUNK)
    dev = t.to_device(a, DEV0) if direction == "to host" else None
    live = t.emulated_live_allocations()
    t.emulated_fail_copies_after(fail_after)
    with pytest.raises(BufferError, match="injected failure of an asynchronous copy"):
        if direction == "to device":
            t.to_device(a, DEV0)
        else:
            t.copy_to_host(dev)
    t.emulated_fail_copies_after(-1)
    gc.collect()
    assert t.emulated_live_allocations() == live  # no half-written result kept
    assert t.pinned_pool_stats()["used_bytes"] == 0
    # The pool still works, and its buffers hold nothing stale that matters.
    _, back = round_trip(a)
    assert back == a.tobytes()


def test_trim_frees_every_idle_block():
    round_trip(pattern(4 * CHUNK))
    assert t.pinned_pool_stats()["emulated_host_blocks"] > 0
    t.pinned_pool_trim()
    stats = t.pinned_pool_stats()
    assert stats["held_bytes"] == 0
    assert stats["emulated_host_blocks"] == 0


def test_the_cap_bounds_what_the_pool_holds():
    t.pinned_pool_trim()
    t.transfer_config(pool_cap=6 * CHUNK, buffers=3)
    for n in (5 * CHUNK, 9 * CHUNK, 2 * CHUNK, 7 * CHUNK):
        a = pattern(n, seed=n)
        dev = t.to_device(a, DEV0)
        host = t.to_device(dev, None)  # a pooled result when it fits under the cap
        assert bytes(memoryview(host)) == a.tobytes()
        assert t.pinned_pool_stats()["held_bytes"] <= 6 * CHUNK
        del host, dev
        gc.collect()


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("threads", 0, "threads is 0; it must be 1..64"),
        ("buffers", 1, "buffers is 1; it must be 2..16"),
        ("chunk", 4096, r"chunk is 4096; it must be 65536\.\.1073741824 bytes"),
        ("pool_cap", CHUNK, "pool_cap is 65536; it must be at least chunk x buffers"),
    ],
)
def test_bad_configuration_is_refused_naming_the_field(field, value, words):
    before = t.transfer_config()
    with pytest.raises(ValueError, match=words):
        t.transfer_config(**{field: value})
    assert t.transfer_config() == before


def test_a_forked_child_stages_with_workers_of_its_own():
    """fork() copies one thread: the child starts its own fill threads (a
    child that waited for its parent's would hang, as DataLoader workers
    forked from a process that staged once would)."""
    import os
    import warnings

    t.transfer_config(chunk=1 << 20, threads=3)  # chunks the fill threads split
    a = pattern(5 << 20)
    _, back = round_trip(a)  # the parent's workers exist now
    assert back == a.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multi-threaded fork" (Python; JAX if imported)
        pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its staged copy is right
        try:
            ok = round_trip(a)[1] == a.tobytes()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize(
    "env, expect",
    [
        ({"PYXBUF_STAGING": "0"}, {"enabled": 0}),
        ({"PYXBUF_STAGING": "off"}, {"enabled": 0}),
        ({"PYXBUF_STAGING_THRESHOLD": "64M", "PYXBUF_STAGING_CHUNK": "2MiB",
          "PYXBUF_PINNED_POOL_CAP": "1G", "PYXBUF_STAGING_THREADS": "5"},
         {"enabled": 1, "threshold": 64 << 20, "chunk": 2 << 20, "pool_cap": 1 << 30,
          "threads": 5}),
        ({"PYXBUF_DEVICE_POOL": "0", "PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD": "1G"},
         {"device_pool_off": 1, "device_pool_release_threshold": 1 << 30}),
        ({"PYXBUF_DEVICE_POOL": "shareable"}, {"device_pool_off": 0, "device_pool_shareable": 1}),
        ({"PYXBUF_DEVICE_POOL": "on"}, {"device_pool_off": 0, "device_pool_shareable": 0}),
    ],
)
def test_the_environment_sets_the_first_configuration(env, expect):
    import json
    import os
    import subprocess
    import sys

    code = "import json, _pyxbuf_testext as t; print(json.dumps(t.transfer_config()))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert {k: got[k] for k in expect} == expect


BAD_ENVIRONMENT = [
    ("PYXBUF_STAGING_CHUNK", "17592186044415M", "it must be 65536..1073741824 bytes"),
    ("PYXBUF_STAGING_CHUNK", "1K", "it must be 65536..1073741824 bytes"),
    ("PYXBUF_STAGING_THRESHOLD", "lots", "it must be a byte count"),
    ("PYXBUF_STAGING_THREADS", "999", "it must be a whole number in 1..64"),
    ("PYXBUF_PINNED_POOL_CAP", "16777216G", "it must be at most"),
    ("PYXBUF_STAGING", "maybe", "it must be 1, on, 0 or off"),
    ("PYXBUF_DEVICE_POOL", "yes", "it must be 1, on, 0, off or shareable"),
    ("PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD", "9223372036854775808",
     "it must be at most 2^63 - 1 bytes"),
]


@pytest.mark.parametrize("name, value, words", BAD_ENVIRONMENT)
def test_a_bad_environment_variable_is_an_error_at_first_use(name, value, words):
    """issue 47 item 1: the environment went unchecked (a wrapping chunk
    came in through PYXBUF_STAGING_CHUNK); now it is checked as
    transfer_config is, and a bad variable is a ValueError naming it at
    every use until the configuration is set."""
    import os
    import subprocess
    import sys

    code = f"""
import numpy as np, _pyxbuf_testext as t
for use in (lambda: t.to_device(np.ones(1 << 20, np.uint8), ({EXT}, 0)), t.transfer_config):
    try:
        use()
    except ValueError as e:
        print("ValueError:", e)
    else:
        print("no error")
t.transfer_config(threads=2)  # setting the configuration replaces the environment's
print(t.copy_to_host(t.to_device(np.ones(4, np.uint8), ({EXT}, 0))))
"""
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, name: value},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == 3, out
    for line in out[:2]:
        assert line.startswith(f"ValueError: the environment variable {name} is '{value}'"), line
        assert words in line, line
    assert out[2] == repr(b"\x01" * 4)
