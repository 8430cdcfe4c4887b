"""Write the fuzz targets' seed corpora: seeds.py OUT_DIR.

OUT_DIR/format gets every string literal of the format tests (C and Python),
so the fuzzer starts from every format a real producer emits and every
malformed one the tests already know. OUT_DIR/dlpack and OUT_DIR/cai get
encodings of valid and broken tensors and interface dicts in the layouts
fuzz_dlpack.c and fuzz_cai.c document. Seeds are generated, not committed,
so they follow the tests; crash inputs worth keeping go to
c/fuzz/regressions/<target>/ instead.
"""

import ast
import hashlib
import pathlib
import re
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# DLPack codes (fuzz_dlpack.c's input layout)
CPU, CUDA, EXT_DEV = 1, 2, 12
INT, UINT, FLOAT, BFLOAT, COMPLEX, BOOL, F8E4M3FN = 0, 1, 2, 4, 5, 6, 10
VERSIONED, LEGACY, CTABLE, STREAM = 0, 1, 2, 3
NULLDATA, HOST, DEVICE, RAW = 0, 1, 2, 3
NULL_STRIDES, NULL_SHAPE, NULL_DELETER, DELETER_RAISES = 1, 2, 4, 8
READ_ONLY, IS_COPIED, PADDED = 1, 2, 4
RECORDS_RO, RECORDS, DEVICE_FLAG, FULL_RO = 0x1C, 0x1D, 0x400, 0x11C


def format_literals():
    """String literals of the format tests that could be formats."""
    found = set()
    c_source = (ROOT / "c/tests/test_format.c").read_text()
    for m in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', c_source):
        try:
            found.add(bytes(m.group(1), "latin-1").decode("unicode_escape"))
        except UnicodeDecodeError:
            continue
    py_source = (ROOT / "python-tests/test_formats.py").read_text()
    for node in ast.walk(ast.parse(py_source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return sorted(s for s in found if 0 < len(s) <= 200 and "\n" not in s)


def tensor(route=VERSIONED, data=HOST, layout=0, major=1, minor=3, flags=0,
           device=(CPU, 0), dtype=(FLOAT, 32, 1), byte_offset=0, where=0,
           request=RECORDS_RO, stream=0, shape=(2, 3), strides=None, ndim=None):
    ndim = len(shape) if ndim is None else ndim
    if strides is None:
        strides, step = [], 1
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= max(extent, 1)
    head = struct.pack("<BBBBIIQiiiBBHQQiq", route, data, layout, 0, major, minor,
                       flags, device[0], device[1], ndim, *dtype, byte_offset,
                       where, request, stream)
    dims = list(shape) + list(strides)
    return head + struct.pack(f"<{len(dims)}q", *dims)


def dlpack_seeds():
    dev = dict(data=DEVICE, device=(EXT_DEV, 0), request=RECORDS_RO | DEVICE_FLAG)
    return [
        tensor(),
        tensor(layout=NULL_STRIDES),
        tensor(route=LEGACY, layout=NULL_STRIDES),
        tensor(route=CTABLE),
        tensor(route=STREAM, stream=-1),
        tensor(shape=(3, 4), strides=(1, 3)),  # Fortran order
        tensor(shape=(4,), strides=(-1,), where=64),  # negative stride
        tensor(shape=(5, 2), strides=(0, 1)),  # broadcast
        tensor(shape=(2, 0, 3)),
        tensor(shape=()),
        tensor(shape=(1,) * 9),  # spills past the inline dims
        tensor(shape=(1,) * 64),
        tensor(shape=(1,) * 2, ndim=65),
        tensor(shape=(2, 3), ndim=-1),
        tensor(shape=(-1, 3)),
        tensor(shape=(2, 3), strides=(1 << 62, 1)),
        tensor(dtype=(BFLOAT, 16, 1)),
        tensor(dtype=(F8E4M3FN, 8, 1)),
        tensor(dtype=(BOOL, 8, 1)),
        tensor(dtype=(COMPLEX, 64, 1)),
        tensor(dtype=(COMPLEX, 32, 1)),
        tensor(dtype=(INT, 4, 1), flags=PADDED),
        tensor(dtype=(INT, 4, 1)),
        tensor(dtype=(UINT, 64, 1)),
        tensor(dtype=(FLOAT, 128, 1)),
        tensor(dtype=(FLOAT, 32, 4)),
        tensor(flags=READ_ONLY, request=RECORDS),
        tensor(flags=IS_COPIED, request=RECORDS),
        tensor(major=2),
        tensor(byte_offset=16, shape=(4,)),
        tensor(byte_offset=(1 << 64) - 8),
        tensor(data=NULLDATA, shape=(0,)),
        tensor(data=NULLDATA),
        tensor(data=RAW, where=0xDEAD0000),
        tensor(layout=NULL_SHAPE),
        tensor(layout=NULL_DELETER),
        tensor(layout=DELETER_RAISES),
        tensor(layout=DELETER_RAISES, major=2),
        tensor(**dev),
        tensor(**dev, shape=(4, 4), strides=(1, 4)),
        tensor(**dev, where=4000, shape=(64,)),  # runs past the allocation
        tensor(**dict(dev, request=RECORDS_RO)),  # device without PYXBUF_DEVICE
        tensor(**dict(dev, route=STREAM, stream=3)),
        tensor(**dict(dev, route=CTABLE)),
        tensor(data=DEVICE, device=(CUDA, 0), request=RECORDS_RO | DEVICE_FLAG),
        tensor(device=(EXT_DEV, 7), data=DEVICE, request=RECORDS_RO | DEVICE_FLAG),
    ]


def cai(iface, request=RECORDS_RO | DEVICE_FLAG, stream_mode=0):
    return struct.pack("<iB", request, stream_mode) + repr(iface).encode("latin-1")


def cai_seeds():
    base = {"shape": (2, 3), "typestr": "<f4", "data": (0, False), "version": 3}
    return [
        cai(base),
        cai(base, request=RECORDS_RO),
        cai(base, request=RECORDS_RO | DEVICE_FLAG | 1),
        cai(dict(base, data=(0, True)), request=RECORDS_RO | DEVICE_FLAG | 1),
        cai(dict(base, strides=(4, 8))),
        cai(dict(base, strides=None)),
        cai(dict(base, strides=(-4, 8), data=(64, False))),
        cai(dict(base, shape=(), typestr="<i8")),
        cai(dict(base, shape=(0, 3), data=(0, False))),
        cai(dict(base, shape=(0,), data=None)),
        cai(dict(base, typestr="|b1")),
        cai(dict(base, typestr="<c8")),
        cai(dict(base, typestr=">u2")),
        cai(dict(base, typestr="|V8", descr=[("a", "<i4"), ("b", "<f4")])),
        cai(dict(base, typestr="|V12", descr=[("a", "<i4"), ("", "|V4"), ("b", "<f4", (1,))])),
        cai(dict(base, typestr="|V16", descr=[("p", [("x", "<f4"), ("y", "<f4")], (2,))])),
        cai(dict(base, stream=1)),
        cai(dict(base, stream=2), stream_mode=2),
        cai(dict(base, stream=0)),
        cai(dict(base, mask=None)),
        cai(dict(base, mask=(0, False))),
        cai(dict(base, version=2)),
        cai(dict(base, version=4)),
        cai({k: v for k, v in base.items() if k != "shape"}),
        cai({k: v for k, v in base.items() if k != "typestr"}),
        cai(dict(base, shape=[2, 3])),
        cai(dict(base, shape=(2, -3))),
        cai(dict(base, shape=(1,) * 65)),
        cai(dict(base, shape=(1 << 62, 4))),
        cai(dict(base, data=(0xDEAD0000, False))),
        cai(dict(base, data=(4090, False))),
        cai(dict(base, data="0")),
        cai([1, 2, 3]),
    ]


def write(directory, seeds):
    directory.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        data = seed.encode("latin-1", "replace") if isinstance(seed, str) else seed
        (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def main():
    out = pathlib.Path(sys.argv[1])
    write(out / "format", format_literals())
    write(out / "dlpack", dlpack_seeds())
    write(out / "cai", cai_seeds())


if __name__ == "__main__":
    main()
