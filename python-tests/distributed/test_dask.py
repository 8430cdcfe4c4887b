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


def test_dask_serializes_the_items_as_an_out_of_band_frame():
    x = pyxbuf_sum.ramp_bf16(1 << 16, 0.25)
    header, frames = serialize(x)
    assert header["serializer"] == "pickle"
    head, *data = frames
    assert len(bytes(head)) < 256  # the rebuilding call and the layout
    assert [memoryview(f).nbytes for f in data] == [x.nbytes]
    assert address(np.frombuffer(data[0], np.uint8)) == address(x)  # x's memory itself
    back = deserialize(header, frames)
    assert back.format == "[ml_dtypes$bfloat16]" and address(back) == address(x)


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
