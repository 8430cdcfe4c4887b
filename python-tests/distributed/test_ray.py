"""pyxbuf arrays through Ray (issue 48, `make test-distributed`): a local Ray
instance (one node, loopback); ray.put and ray.get of pyxbuf arrays, a task
returning one. A host array that ray.get returns is read from the object store
without a copy: its memory lies in Ray's shared-memory mapping (read-only, as
NumPy's arrays come back from it)."""

import ml_dtypes
import numpy as np
import pytest

import pyxbuf
import pyxbuf_sum

from engines import need

ray = need("ray")

TIMEOUT = 120


@pytest.fixture(scope="module")
def ray_instance(tmp_path_factory):
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=512 << 20,
             log_to_driver=False, _temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield
    ray.shutdown()


def mapping_of(address):
    """The /proc/self/maps line of the mapping holding `address`."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
            if lo <= address < hi:
                return line
    return ""


@ray.remote
def ramp(kind, n, step):
    return {"f32": pyxbuf_sum.ramp_f32, "bf16": pyxbuf_sum.ramp_bf16}[kind](n, step)


@ray.remote
def total(x):
    return type(x).__name__, x.format, pyxbuf_sum.sum_any(x)


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.parametrize("fmt", ["f", "[ml_dtypes$bfloat16]"])
def test_get_reads_the_object_store_without_a_copy(fmt):
    x = pyxbuf_sum.ramp_f32(1 << 20, 0.5) if fmt == "f" else pyxbuf_sum.ramp_bf16(1 << 20, 0.5)
    y = ray.get(ray.put(x), timeout=TIMEOUT)
    assert type(y) is pyxbuf.Exporter and (y.format, y.shape) == (fmt, (1 << 20,))
    assert np.asarray(y).tobytes() == np.asarray(x).tobytes()
    where = mapping_of(np.asarray(y).__array_interface__["data"][0])
    assert "plasma" in where and " rw-s " in where, where  # Ray's shared memory
    assert y.readonly == 1


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.parametrize("kind,dtype", [("f32", np.float32), ("bf16", ml_dtypes.bfloat16)])
def test_a_task_returns_a_rust_array(kind, dtype):
    got = ray.get(ramp.remote(kind, 50_000, -0.75), timeout=TIMEOUT)
    assert type(got) is pyxbuf.Exporter
    want = (np.arange(50_000, dtype=np.float32) * np.float32(-0.75)).astype(dtype)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8))


@pytest.mark.usefixtures("ray_instance")
def test_a_task_reads_an_array_put_by_the_driver():
    ref = ray.put(pyxbuf_sum.ramp_bf16(1000, 0.5))
    assert ray.get(total.remote(ref), timeout=TIMEOUT) == \
        ("Exporter", "[ml_dtypes$bfloat16]", 249750.0)
