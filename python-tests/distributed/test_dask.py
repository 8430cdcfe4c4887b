"""pyxbuf arrays through Dask distributed (issue 48, `make test-distributed`):
a LocalCluster of worker processes on loopback; a task returning a Rust
function's pyxbuf array (float32, bfloat16), scatter and gather, and Dask's
own serialization showing that the items travel as an out-of-band frame, not
inside pickled bytes."""

import ml_dtypes
import numpy as np
import pytest

import pyxbuf
import pyxbuf_sum

from engines import need

distributed = need("distributed")
from distributed import Client, LocalCluster  # noqa: E402
from distributed.protocol import deserialize, serialize  # noqa: E402

TIMEOUT = 120


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, worker_dashboard_address=None) as cluster, \
            Client(cluster, timeout=TIMEOUT) as c:
        yield c


def address(x):
    return np.asarray(x).__array_interface__["data"][0]


def test_dask_serializes_a_pyxbuf_array_as_it_does_numpys():
    # Dask's own family (pyxbuf/_dask.py): the items as one frame, the
    # layout in the header, no pickle of the items at any protocol (Dask's
    # scheduler speaks protocol 4, which would put them in band).
    a = np.arange(1 << 16, dtype=np.float32)
    x = pyxbuf.frombuffer(a, "f", (256, 256))
    for context in (None, {"pickle-protocol": 4}):
        header, frames = serialize(x, context=context)
        assert header["serializer"] == "dask" and header["type"] == "pyxbuf.Exporter"
        assert header["sub-header"]["shape"] == [256, 256]
        assert [memoryview(f).nbytes for f in frames] == [x.nbytes]
        assert address(np.frombuffer(frames[0], np.uint8)) == address(x)  # x's memory itself
        back = deserialize(header, frames)
        assert (back.format, back.shape, back.readonly) == ("f", (256, 256), 0)
        assert address(back) == address(x)
    # A frame that arrives read-only is copied for a writable array (as
    # Dask's NumPy deserializer does), kept for a read-only one.
    header, frames = serialize(x)
    back = deserialize(header, [memoryview(frames[0]).toreadonly()])
    assert back.readonly == 0 and address(back) != address(x)
    y = pyxbuf.frombuffer(a, "f", readonly=True)
    header, frames = serialize(y)
    back = deserialize(header, [memoryview(frames[0]).toreadonly()])
    assert back.readonly == 1 and address(back) == address(y)


def test_a_rust_crates_array_travels_as_an_out_of_band_pickle_frame():
    # An exporter made by a Rust crate's own copy of libpyxbuf (its own
    # Exporter type, which pickle cannot name) takes Dask's pickle family:
    # protocol 5 sends its items as a separate frame, not pickled bytes.
    x = pyxbuf_sum.ramp_bf16(1 << 16, 0.25)
    header, frames = serialize(x, serializers=("pickle",))
    assert header["serializer"] == "pickle"
    head, *data = frames
    assert len(bytes(head)) < 256  # the rebuilding call and the layout
    assert [memoryview(f).nbytes for f in data] == [x.nbytes]
    assert address(np.frombuffer(data[0], np.uint8)) == address(x)
    back = deserialize(header, frames)
    assert back.format == "[ml_dtypes$bfloat16]" and address(back) == address(x)


def test_dask_counts_a_pyxbuf_array_as_its_items():
    from dask.sizeof import sizeof

    a = np.zeros(1 << 20, dtype=np.float32)
    assert sizeof(pyxbuf.frombuffer(a, "f")) >= a.nbytes


@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_a_task_returns_a_rust_array(client, kind):
    make = {"f32": pyxbuf_sum.ramp_f32, "bf16": pyxbuf_sum.ramp_bf16}[kind]
    dtype = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}[kind]
    got = client.submit(make, 100_000, 0.5, pure=False).result(TIMEOUT)
    assert type(got) is pyxbuf.Exporter and got.shape == (100_000,)
    want = (np.arange(100_000, dtype=np.float32) * np.float32(0.5)).astype(dtype)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8))


def test_scatter_compute_and_gather_keep_the_format(client):
    x = pyxbuf_sum.ramp_bf16(1000, 0.5)
    [remote] = client.scatter([x])
    assert client.submit(pyxbuf_sum.sum_any, remote).result(TIMEOUT) == 249750.0
    back = client.gather(remote)
    assert back.format == "[ml_dtypes$bfloat16]"
    assert np.asarray(back).tobytes() == np.asarray(x).tobytes()
    # a worker's result fed to another task, without coming back here
    r = client.submit(pyxbuf_sum.ramp_f32, 10, 2.0, pure=False)
    assert client.submit(pyxbuf_sum.sum_f32, r).result(TIMEOUT) == 90.0
