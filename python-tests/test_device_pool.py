"""pyxbuf's own device memory from the stream-ordered pool (issue 47, part 3),
on the guarded emulated device through _pyxbuf_testext.

Device exporters and to_device results come from the backend's pool
(alloc_async; CUDA's cuMemAllocFromPoolAsync) and go back in stream order
when the exporter dies: at once to later work on the allocation stream, to
other streams once the stream ran past the free, and after every stream the
memory was handed to (pyxbuf_get_stream, pyxbuf_device_wait, __dlpack__).
The emulated device's streams are lazy queues, so "not yet" is observable:
an allocation on another stream gets other memory until the queue ran.
"""

import gc

import numpy as np
import pytest

import _pyxbuf_testext as t

EXT = t.PYXBUF_DL_EXT_DEV
DEV0 = (EXT, 0)
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
POISON = 0xDB
N = 64 << 10


@pytest.fixture(autouse=True)
def clean_pool():
    before = t.transfer_config()
    t.device_pool_trim(DEV0, 0)
    live = t.emulated_live_allocations()
    yield
    gc.collect()
    t.transfer_config(**before)
    t.stream_sync(DEV0, 0)
    t.device_pool_trim(DEV0, 0)
    assert t.emulated_live_allocations() == live
    assert t.emulated_pool_stats(0)["reserved_bytes"] == 0, "pooled memory was lost"


def address(obj):
    return t.bridge_view(obj)["buf"]


def stats():
    return t.emulated_pool_stats(0)


def test_an_exporter_allocated_after_one_died_reuses_its_memory():
    before = stats()
    e = t.exporter("f", (N // 4,), device=DEV0)
    at = address(e)
    del e
    assert stats()["cached_bytes"] >= N
    e = t.exporter("f", (N // 4,), device=DEV0)
    assert address(e) == at
    after = stats()
    assert after["allocations"] - before["allocations"] == 2
    assert after["reuses"] - before["reuses"] == 1
    # Reused memory is fresh memory: it reads as the poison, not as leftovers.
    assert t.copy_to_host(e) == bytes([POISON]) * N


def test_a_pooled_exporter_carries_the_event_of_its_allocation():
    """Pool memory is ready on its allocation stream; a consumer on another
    stream waits for the event recorded after the allocation, while the
    stream has work queued (the previous owner's, and its free)."""
    idle = t.exporter("B", (N,), device=DEV0)
    assert t.bridge_view(idle)["sync_event"] is None  # the event had happened: ready
    at = address(idle)
    t.emulated_enqueue_write(at, 0, b"\x01" * 8)  # the owner's kernel, queued
    del idle  # its free, queued behind the kernel
    e = t.exporter("B", (N,), device=DEV0)
    assert address(e) == at  # the same stream: at once
    v = t.bridge_view(e)
    assert v["sync_event"] is not None and v["stream"] == 0
    other = t.emulated_stream()
    try:
        # A consumer on another stream waits (pyxbuf_device_wait), then
        # writes: the previous owner's queued write cannot land on its bytes.
        assert t.wait_and_peek(e, other, True) == bytes([POISON]) * N
        t.emulated_enqueue_write(at, other, b"\x02" * N)
        t.stream_sync(DEV0, other)
        t.stream_sync(DEV0, 0)
        assert t.copy_to_host(e) == b"\x02" * N
    finally:
        t.emulated_destroy_stream(other)


def test_with_the_pool_off_device_memory_is_the_backends_own():
    t.transfer_config(device_pool_off=1)
    before = stats()
    e = t.exporter("B", (N,), device=DEV0)
    r = t.to_device(np.zeros(N, np.uint8), DEV0)
    assert stats() == before
    assert t.bridge_view(e)["sync_event"] is None
    del e, r
    assert stats() == before


def test_the_pool_knobs_are_value_errors_naming_the_field():
    with pytest.raises(ValueError, match=r"device_pool_off is 2; it must be 0 or 1"):
        t.transfer_config(device_pool_off=2)
    with pytest.raises(ValueError, match=r"device_pool_shareable is 2; it must be 0 or 1"):
        t.transfer_config(device_pool_shareable=2)
    with pytest.raises(ValueError, match=r"device_pool_release_threshold is 9223372036854775808; "
                                         r"it must be at most 2\^63 - 1 bytes"):
        t.transfer_config(device_pool_release_threshold=1 << 63)
    now = t.transfer_config()
    assert now["device_pool_off"] == 0 and now["device_pool_shareable"] == 0
    assert now["device_pool_release_threshold"] == 256 << 20  # the default


def test_a_to_device_result_is_freed_in_its_streams_order():
    a = np.arange(N, dtype=np.uint8)
    s, u = t.emulated_stream(), t.emulated_stream()
    try:
        r = t.to_device(a, DEV0, s)
        at = address(r)
        t.emulated_enqueue_write(at, s, b"\x01" * 16)  # a kernel on s still uses it
        del r  # freed behind that kernel
        assert t.emulated_pending(0, s) == 2
        other = t.to_device(a, DEV0, u)
        assert address(other) != at  # not before s ran past the free
        del other
        again = t.to_device(a, DEV0, s)
        assert address(again) == at  # later work on s is ordered after the free
        assert t.copy_to_host(again) == a.tobytes()
        del again
    finally:
        t.emulated_destroy_stream(s)
        t.emulated_destroy_stream(u)


def test_memory_handed_to_a_dlpack_consumers_stream_waits_for_it():
    """__dlpack__(stream=T): a consumer's work queued on T before it let go
    runs before the memory can go to anyone else (PyTorch's record_stream,
    done for it)."""
    a = np.full(N, 0x3C, np.uint8)
    consumer, other = t.emulated_stream(), t.emulated_stream()
    try:
        e = t.to_device(a, DEV0)
        at = address(e)
        capsule = e.__dlpack__(stream=consumer)
        t.emulated_enqueue_write(at, consumer, b"\x77" * N)  # the consumer's kernel
        del capsule  # the consumer lets go, its kernel still queued
        del e
        late = t.to_device(np.zeros(N, np.uint8), DEV0, other)
        assert address(late) != at
        t.stream_sync(DEV0, consumer)
        assert t.copy_to_host(late) == bytes(N)  # the consumer's kernel wrote its own
        t.stream_sync(DEV0, 0)  # the free, after the consumer's event, runs
        reused = t.to_device(np.ones(N, np.uint8), DEV0, other)
        assert address(reused) == at
        del late, reused
    finally:
        t.emulated_destroy_stream(consumer)
        t.emulated_destroy_stream(other)


def test_a_view_taken_for_a_stream_orders_the_free_after_it():
    """pyxbuf_get_stream(e, T): the stream is noted; the event is taken when
    the view is released, so T may be destroyed after that."""
    consumer, other = t.emulated_stream(), t.emulated_stream()
    try:
        e = t.exporter("B", (N,), device=DEV0)
        at = address(e)
        t.emulated_enqueue_write(at, consumer, b"\x55" * 8)  # queued first
        t.cycle_stream(e, DEVICE_VIEW, 1, consumer)  # get_stream(T), release
        del e  # freed on the default stream, behind a wait for T
        late = t.to_device(np.zeros(N, np.uint8), DEV0, other)
        assert address(late) != at
        assert t.emulated_pending(0, consumer) == 2  # the write, then the release's event
        t.stream_sync(DEV0, 0)  # the default stream waits for T, which runs for it
        assert t.emulated_pending(0, consumer) == 0
        reused = t.to_device(np.zeros(N, np.uint8), DEV0, other)
        assert address(reused) == at
        del late, reused
    finally:
        t.emulated_destroy_stream(consumer)
        t.emulated_destroy_stream(other)
    assert stats()["cached_bytes"] == 2 * N  # nothing kept out: both blocks are the pool's


def test_a_consumer_stream_destroyed_after_its_release_loses_nothing():
    consumer = t.emulated_stream()
    e = t.exporter("B", (N,), device=DEV0)
    at = address(e)
    t.emulated_enqueue_write(at, consumer, b"\x55" * 8)
    t.bridge_view(e, consumer_stream=consumer)  # acquired for T, released
    t.emulated_destroy_stream(consumer)  # runs T's queue: the event has happened
    del e
    again = t.exporter("B", (N,), device=DEV0)
    assert address(again) == at


def test_a_dlpack_consumers_stream_destroyed_after_it_let_go_loses_nothing():
    """The capsule keeps a moved copy of the view that named the stream: its
    release still records the event, before the consumer destroys T."""
    consumer = t.emulated_stream()
    e = t.exporter("B", (N,), device=DEV0)
    at = address(e)
    capsule = e.__dlpack__(stream=consumer)
    t.emulated_enqueue_write(at, consumer, b"\x55" * 8)
    del capsule
    t.emulated_destroy_stream(consumer)
    live = t.emulated_live_allocations()
    del e
    assert t.emulated_live_allocations() == live - 1  # freed, not kept out
    again = t.exporter("B", (N,), device=DEV0)
    assert address(again) == at


def test_a_synchronisation_keeps_only_the_release_threshold():
    t.transfer_config(device_pool_release_threshold=N)
    blocks = [t.exporter("B", (N,), device=DEV0) for _ in range(4)]
    del blocks
    assert stats()["cached_bytes"] == 4 * N
    t.stream_sync(DEV0, 0)
    assert stats()["reserved_bytes"] == N
    t.device_pool_trim(DEV0, 0)
    assert stats()["reserved_bytes"] == 0


def test_trim_keeps_memory_whose_free_is_still_queued():
    s = t.emulated_stream()
    try:
        r = t.to_device(np.zeros(N, np.uint8), DEV0, s)
        t.emulated_enqueue_write(address(r), s, b"\x01")
        del r
        t.device_pool_trim(DEV0, 0)
        assert stats()["cached_bytes"] == N
    finally:
        t.emulated_destroy_stream(s)
    t.device_pool_trim(DEV0, 0)
    assert stats()["cached_bytes"] == 0
