"""The CUDA Array Interface producer the Python tests share (imported by
name: pytest puts this directory on sys.path)."""

import numpy as np

import _pyxbuf_testext as t

DEV0 = (t.PYXBUF_DL_EXT_DEV, 0)
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE


class CAI:
    """A producer that speaks only the CUDA Array Interface.

    `memory` keeps the device allocation alive, as a real producer's array
    object does; the dict is built anew on every access, like CuPy's."""

    def __init__(self, memory, **iface):
        self.memory = memory
        self.iface = iface

    @property
    def __cuda_array_interface__(self):
        return dict(self.iface)


def cai_over(host, device=DEV0):
    """A CAI producer of a copy of `host` on the emulated device."""
    e = t.to_device(np.ascontiguousarray(host), device)
    ptr = t.inspect(e, DEVICE_VIEW)["buf"]
    return CAI(e, shape=host.shape, typestr=host.dtype.str, data=(ptr, False), version=3,
               strides=None)
