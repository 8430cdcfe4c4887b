"""Type stub of the compiled module ``pyxbuf.pyxbuf`` (re-exported by ``pyxbuf``)."""

from typing import Any, Final

__version__: Final[str]
EMULATED_DEVICE: Final[str | None]
"""``"ext_dev:0"``, the guarded emulated device, where this build has it (a
development install): a device ``to_device`` and ``exporter(device=)`` take.
``None`` in the release wheel, which never carries it."""

PyBUF_SIMPLE: Final[int]
PyBUF_WRITABLE: Final[int]
PyBUF_FORMAT: Final[int]
PyBUF_ND: Final[int]
PyBUF_STRIDES: Final[int]
PyBUF_C_CONTIGUOUS: Final[int]
PyBUF_F_CONTIGUOUS: Final[int]
PyBUF_RECORDS: Final[int]
PyBUF_RECORDS_RO: Final[int]
PYXBUF_DEVICE: Final[int]
PYXBUF_BORROW_SHARED: Final[int]
PYXBUF_BORROW_EXCLUSIVE: Final[int]
PYXBUF_TEMPORARY: Final[int]
PYXBUF_EXTENDED_FORMAT: Final[int]
PYXBUF_EXT_SHARED: Final[int]
PYXBUF_EXT_EXCLUSIVE: Final[int]
PYXBUF_EXT_TRACKED: Final[int]
PYXBUF_SUPPORTED_FLAGS: Final[int]

Device = str | tuple[int, int]

class ItemTypeError(TypeError, BufferError):
    """An array's item type is not the one asked for: its format or itemsize
    (or the number of dimensions a typed argument fixes) does not match.

    A TypeError, by pyxbuf's rule (the array is of the wrong kind, its memory
    is fine), and a BufferError, so that code written for PyO3's PyBuffer,
    which raises BufferError there, catches it unchanged. One class for every
    copy of libpyxbuf in the process (C, Rust, C++, Cython)."""

class Exporter:
    """pyxbuf's producer: memory exported through the extended buffer
    protocol (and DLPack) with borrow counting. Not created by calling the
    type: use ``exporter()``, ``from_dlpack()`` or ``to_device()``."""

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the exported array."""
    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in bytes."""
    @property
    def format(self) -> str:
        """Buffer format string of one item."""
    @property
    def device(self) -> str:
        """Where the memory lives: 'cpu', 'cuda:0', ..."""
    @property
    def borrows(self) -> dict[str, int]:
        """Live views and borrow grants, by kind."""
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3 of CUDA memory (for ``cupy.asarray``);
        AttributeError for memory elsewhere."""
    itemsize: int
    nbytes: int
    readonly: int
    def to_device(self, device: Device, /) -> Exporter:
        """The same data on ``device``: this object when it is already there,
        else a new Exporter holding a C-order copy."""
    def __dlpack__(
        self,
        /,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of the memory."""
    def __sizeof__(self, /) -> int:
        """Bytes the object takes, its items included when it owns them."""
    def __reduce_ex__(self, protocol: int, /) -> tuple[Any, ...]:
        """Pickle support: from protocol 5 the items as one out-of-band
        ``pickle.PickleBuffer`` (no copy with a ``buffer_callback``); format,
        shape, C or Fortran order, read-only flag and device come back. A
        device array travels as a host copy and is restored on a device of
        the same kind and index (``pyxbuf.unpickle_on_host()`` keeps it on
        the host); an exporter over a SharedMemory block pickles its name."""
    def __dlpack_device__(self, /) -> tuple[int, int]:
        """Where the memory lives, as DLPack's (device_type, device_id)."""
    def __array__(self, /, dtype: Any | None = None, *, copy: bool | None = None) -> Any:
        """A NumPy array of the memory: a zero-copy view through the buffer
        protocol, a copy when ``copy=True`` or ``dtype`` needs one; the
        buffer's BufferError when a borrow forbids the view. Custom items
        (``[ml_dtypes$bfloat16]``, a registered ``[module$name]``) come as
        their NumPy dtype (``ml_dtypes.bfloat16``, ``np.dtype(module.name)``),
        zero-copy, strides and read-only flag kept; ``ItemTypeError`` when
        NumPy has no dtype for them. (``memoryview(e)`` refuses custom items:
        ``np.asarray(e)`` is the way to NumPy.)"""

def abi_version() -> int:
    """The ABI version of the libpyxbuf linked into this module."""

def inspect(obj: Any, flags: int | None = None, stream: int | None = None) -> dict[str, Any]:
    """Acquire ``obj`` through pyxbuf and describe the view (``flags`` None:
    ``PyBUF_RECORDS_RO | PYXBUF_DEVICE``)."""

def to_device(obj: Any, device: Device, stream: int | None = None) -> Any:
    """``obj`` itself when it lives on ``device``, else a C-order copy there
    (``stream`` None: the device's default stream)."""

def transfer_config(
    *,
    enabled: bool | None = None,
    threads: int | None = None,
    buffers: int | None = None,
    threshold: int | None = None,
    chunk: int | None = None,
    pool_cap: int | None = None,
    device_pool: bool | None = None,
    device_pool_shareable: bool | None = None,
    device_pool_release_threshold: int | None = None,
) -> dict[str, Any]:
    """How host <-> device copies of pageable memory (64 KiB and more) are
    staged through page-locked buffers (``enabled``, fill ``threads`` and
    ``buffers`` in flight from ``threshold`` bytes up, ``chunk`` and
    ``pool_cap`` in bytes), and whether pyxbuf's
    own device memory comes from the backend's stream-ordered pool
    (``device_pool``; ``device_pool_shareable``: from pools other processes
    can open, which on CUDA keep their memory until exit;
    ``device_pool_release_threshold``: bytes a pool keeps cached across a
    synchronisation, 0 for the default of 256 MiB): the
    configuration in force, after replacing the fields given (ValueError
    naming a field out of range)."""

def pinned_pool_stats() -> dict[str, int]:
    """The page-locked pool: held_bytes, used_bytes, allocations, reuses,
    fill_threads, background_allocations (blocks page-locked off the copies'
    path: a copy that finds no idle block goes without one and the pool grows
    for the next) and background_pending (requests not yet served)."""

def pinned_pool_trim() -> None:
    """Free every idle block of the page-locked pool now."""

def from_dlpack(obj: Any, writable: bool = False, stream: int | None = None) -> Exporter:
    """A zero-copy Exporter over ``obj``'s memory, holding a borrow of it."""

def exporter(
    shape: list[int] | tuple[int, ...],
    format: str = "B",
    device: Device = "cpu",
    readonly: bool = False,
) -> Exporter:
    """A test producer owning zeroed host memory (or device memory)."""

def frombuffer(
    buffer: Any,
    format: str = "B",
    shape: list[int] | tuple[int, ...] | None = None,
    *,
    offset: int = 0,
    strides: list[int] | tuple[int, ...] | None = None,
    itemsize: int = 0,
    readonly: bool = False,
    process_shared: bool = False,
) -> Exporter:
    """A zero-copy Exporter over ``buffer``'s memory (any buffer, or a
    ``multiprocessing.shared_memory.SharedMemory``, pickled by name): items of
    ``format`` with ``shape`` (None: as many as fit, 1-D) and byte
    ``strides`` (None: C order) from ``offset``, ``itemsize`` bytes each (0:
    the format's size); writable when ``buffer`` is
    and ``readonly`` is false. Memory shared with other processes (a
    SharedMemory, or ``process_shared``) gets no borrow grant."""

def check_supports(obj: Any, flags: int) -> bool:
    """Whether ``obj`` advertises every bit of ``flags`` (without calling it)."""

def live_borrows() -> int:
    """The number of live cooperative (tracked) borrows in the process."""
