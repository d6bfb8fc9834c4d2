"""Instructions of the tile IR. Each is a dataclass; ``output`` is the tensor it defines (if any).

Instructions are identities (``eq=False``) so passes can key tables by them. ``operands()``
lists the register tensors an instruction reads, which is what layout inference and the checks
before code generation walk over.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

from tilus_tvm.dtypes import DataType
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor, Tensor
from tilus_tvm.layout.register import RegisterLayout


@dataclass(eq=False)
class Instruction:
    def operands(self) -> list[RegisterTensor]:
        """Register tensors read by this instruction (the output excluded)."""
        found = []
        for f in fields(self):
            if f.name == "output":
                continue
            value = getattr(self, f.name)
            if isinstance(value, RegisterTensor):
                found.append(value)
        return found

    def replace_operand(self, old: RegisterTensor, new: RegisterTensor) -> None:
        """Read ``new`` where this instruction read ``old`` (used when a layout conversion is inserted)."""
        for f in fields(self):
            if f.name != "output" and getattr(self, f.name) is old:
                setattr(self, f.name, new)

    @property
    def defined(self) -> Optional[Tensor]:
        return getattr(self, "output", None)


@dataclass(eq=False)
class AllocateRegister(Instruction):
    output: RegisterTensor
    # None (uninitialised), a scalar expression, f(*indices) -> scalar expression, or SlotValues
    init: Any = None


@dataclass(frozen=True)
class SlotValues:
    """An :class:`AllocateRegister` init by register slot: slot ``i`` of every thread holds ``values[i]`` (Python
    numbers, one a slot of the layout), where the value is a property of the slot rather than of the element's
    indices (:meth:`~tilus_tvm.lang.instructions.compute.ComputeInstructions.cast_bias`)."""

    values: tuple


@dataclass(eq=False)
class AllocateShared(Instruction):
    output: SharedTensor


@dataclass(eq=False)
class FreeShared(Instruction):
    tensor: SharedTensor


@dataclass(eq=False)
class GlobalView(Instruction):
    output: GlobalTensor


@dataclass(eq=False)
class GlobalSubview(Instruction):
    """``output = parent[indices...]``: a sub-view whose base address is computed in int64 (see
    :class:`~tilus_tvm.ir.tensor.GlobalTensor`); ``output.parent``/``output.leading`` repeat them."""

    output: GlobalTensor
    parent: GlobalTensor
    indices: tuple[Any, ...]


@dataclass(eq=False)
class LoadGlobal(Instruction):
    output: RegisterTensor
    src: GlobalTensor
    offsets: tuple[Any, ...]
    dims: tuple[int, ...]  # dims[i]: the global dimension that tile dimension i runs along


@dataclass(eq=False)
class StoreGlobal(Instruction):
    dst: GlobalTensor
    src: RegisterTensor
    offsets: tuple[Any, ...]
    dims: tuple[int, ...]


@dataclass(eq=False)
class LoadShared(Instruction):
    output: RegisterTensor
    src: SharedTensor
    offsets: tuple[Any, ...]
    dims: tuple[int, ...]


@dataclass(eq=False)
class StoreShared(Instruction):
    dst: SharedTensor
    src: RegisterTensor
    offsets: tuple[Any, ...]
    dims: tuple[int, ...]


from tilus_tvm.ir.values import BINARY_OPS, COMPARISON_OPS, UNARY_OPS  # noqa: E402,F401 - the op vocabulary


@dataclass(eq=False)
class Unary(Instruction):
    output: RegisterTensor
    x: RegisterTensor
    op: str


@dataclass(eq=False)
class Binary(Instruction):
    """``output = lhs <op> rhs`` with broadcasting; either side may be a scalar expression."""

    output: RegisterTensor
    lhs: Any  # RegisterTensor or scalar
    rhs: Any
    op: str


@dataclass(eq=False)
class Where(Instruction):
    output: RegisterTensor
    cond: Any
    x: Any
    y: Any


@dataclass(eq=False)
class Cast(Instruction):
    output: RegisterTensor
    x: RegisterTensor
    # x's words hold its codes' bits where this tilus_tvm.bit_placement.BitPlacement puts them (not densely)
    placement: Any = None
    scale: float = 1.0  # a power of two the result is multiplied by (exactly), with a placement only
    # then, in the result's type: minus subtracted, then times multiplied (each broadcast over x's shape)
    minus: Optional[RegisterTensor] = None
    times: Optional[RegisterTensor] = None
    # the result holds each value plus a constant of its register slot, the magic number of its place left in
    # (interleaved 1-, 2- and 4-bit integers only; cast_bias gives those constants)
    biased: bool = False


@dataclass(eq=False)
class Reduce(Instruction):
    output: RegisterTensor
    x: RegisterTensor
    dim: int
    op: str  # "sum", "max", "min"
    keepdim: bool


@dataclass(eq=False)
class DotConfig:
    """How a dot runs, chosen by layout inference: an mma atom tiled over warps, or CUDA cores."""

    kind: str  # "mma" or "simt"
    atom: Any = None  # tilus_tvm.layout.atoms.MmaAtom for "mma"
    warps_m: int = 1  # warp (mma) or thread (simt) grid over the C tile
    warps_n: int = 1
    replicas: int = 1  # groups of warps/threads that compute the same C (when the tile is small)
    repeat_m: int = 1  # atoms (mma) or elements (simt) per warp/thread along m
    repeat_n: int = 1
    repeat_k: int = 1
    batch: int = 0  # 0: a [m, k] @ b [k, n]; else the batch of a [batch, m, k] @ b [batch, k, n], over the outermost warps


@dataclass(eq=False)
class Dot(Instruction):
    """``output = a @ b + c``."""

    output: RegisterTensor
    a: RegisterTensor
    b: RegisterTensor
    c: RegisterTensor
    config: Optional[DotConfig] = None


@dataclass(eq=False)
class ConvertLayout(Instruction):
    """Copy ``x`` into ``output``, which has the same shape and dtype but another layout."""

    output: RegisterTensor
    x: RegisterTensor


@dataclass(eq=False)
class Assign(Instruction):
    """Overwrite the register tensor ``dst`` with ``src`` (same shape; src cast to dst's dtype)."""

    dst: RegisterTensor
    src: RegisterTensor

    def operands(self) -> list[RegisterTensor]:
        return [self.src, self.dst]


@dataclass(eq=False)
class CopyAsync(Instruction):
    """``cp.async`` of the tile ``src[offsets...]`` (shape ``dst.shape``, along ``dims``) into ``dst``;
    elements outside ``src`` are written as zeros."""

    dst: SharedTensor
    src: GlobalTensor
    offsets: tuple[Any, ...]
    dims: tuple[int, ...]
    # None: the tile's vectors dealt out to the threads in turn; a register layout of the tile: each
    # thread copies the elements it would hold in a register tensor of that layout
    layout: Optional[RegisterLayout] = None


@dataclass(eq=False)
class CopyAsyncCommitGroup(Instruction):
    """``cp.async.commit_group``: the copies issued since the last commit form one group."""


@dataclass(eq=False)
class CopyAsyncWaitGroup(Instruction):
    """``cp.async.wait_group n``: wait until at most ``n`` committed groups are still in flight."""

    n: int


@dataclass(eq=False)
class CopyAsyncWaitAll(Instruction):
    """``cp.async.wait_all``: wait for every copy issued by the thread, committed or not."""


@dataclass(eq=False)
class Wgmma(Instruction):
    """``output = a @ b + c`` by Hopper's warpgroup ``wgmma.mma_async`` from shared memory (``output`` is
    ``c``: the accumulator is updated in place, asynchronously, until a :class:`WgmmaWaitGroup`)."""

    output: RegisterTensor
    a: Tensor  # a SharedTensor, or a RegisterTensor in mma.sync A-fragment layout
    b: SharedTensor
    c: RegisterTensor
    warps: int = 0  # the block's warps, set when layouts are chosen


@dataclass(eq=False)
class WgmmaFence(Instruction):
    """``wgmma.fence``: orders this warpgroup's earlier register and shared-memory accesses before its
    next ``wgmma``. ``pin``: the accumulators pinned for the CUDA compiler (None: every one)."""

    pin: Optional[tuple] = None


@dataclass(eq=False)
class WgmmaCommitGroup(Instruction):
    """``wgmma.commit_group``: the ``wgmma`` issued since the last commit form one group."""


@dataclass(eq=False)
class WgmmaWaitGroup(Instruction):
    """``wgmma.wait_group n``: wait until at most ``n`` committed groups are still running. ``pin``: the
    accumulators pinned for the CUDA compiler (None: every one)."""

    n: int
    pin: Optional[tuple] = None


@dataclass(eq=False)
class FenceProxyAsync(Instruction):
    """``fence.proxy.async.shared::cta``: this thread's shared-memory writes become visible to the async
    proxy (``wgmma`` operands, TMA)."""


@dataclass(eq=False)
class GridDependencyWait(Instruction):
    """``griddepcontrol.wait``: this thread waits until the grids its launch depends on (programmatic
    dependent launch) have completed and their memory operations are visible; at once without such a
    launch."""


@dataclass(eq=False)
class LaunchDependents(Instruction):
    """``griddepcontrol.launch_dependents``: this block lets the grids launched after it with programmatic
    dependent launch start before it ends (they still wait at their ``GridDependencyWait``)."""


@dataclass(eq=False)
class MbarrierInit(Instruction):
    """Thread 0 initialises every ``mbarrier`` of ``barriers`` (a uint64 shared tensor) to expect
    ``arrivals`` arrivals a phase; then the block synchronises."""

    barriers: SharedTensor
    arrivals: int


@dataclass(eq=False)
class MbarrierWait(Instruction):
    """Every thread waits until ``barrier`` (one element of a uint64 shared tensor) has completed the
    phase of parity ``phase``."""

    barrier: SharedTensor
    phase: Any


@dataclass(eq=False)
class MbarrierArrive(Instruction):
    """Every thread arrives once on ``barrier`` (one element of a uint64 shared tensor), releasing what it
    did before (``mbarrier.arrive``, release semantics at block scope); ``per_warp``: each warp meets at
    ``__syncwarp`` and its lane 0 arrives once for it."""

    barrier: SharedTensor
    per_warp: bool = False


@dataclass(eq=False)
class TmaLoad(Instruction):
    """Hopper's tensor memory accelerator copies the tile ``src[offsets...]`` (shape ``dst.shape``, along
    ``dims``) into ``dst``: thread 0 arrives on ``barrier`` expecting the tile's bytes and issues
    ``cp.async.bulk.tensor``; the barrier's phase completes when they have landed. Elements outside
    ``src`` are written as zeros."""

    dst: SharedTensor
    src: GlobalTensor
    offsets: tuple[Any, ...]
    dims: tuple[int, ...]
    barrier: SharedTensor
    # the issuing thread first waits for this barrier's phase of parity after_phase (the release of the stage by
    # the threads that read it last), or None
    after: Optional[SharedTensor] = None
    after_phase: Any = None


@dataclass(eq=False)
class Sync(Instruction):
    """``__syncthreads()``."""


@dataclass(eq=False)
class Printf(Instruction):
    fmt: str
    args: tuple[Any, ...] = field(default_factory=tuple)


@dataclass(eq=False)
class PrintTensor(Instruction):
    """Print a register or shared tile from thread 0 of each block that runs it, as a table of
    rows and columns (see :mod:`tilus_tvm.instructions.print_tensor`). ``fmt`` is the C conversion of
    one element (``"%8.3f"``)."""

    msg: str
    tensor: Tensor
    fmt: str


def dtype_of(value: Any) -> Optional[DataType]:
    """The element type of a register tensor, or None for a scalar operand."""
    return value.dtype if isinstance(value, RegisterTensor) else None


@dataclass(eq=False)
class DotSplit(Dot):
    """``output = a @ b + c`` with the C tile split over the block's warps as the author chose:
    ``warp_grid = (warps along m, warps along n)`` (``Dot`` chooses its own split). With the warps
    along m only, every row of C lives in one warp, so row reductions are warp shuffles and the C
    fragments are the A fragments of a following product (attention's ``P @ V``)."""

    warp_grid: tuple[int, int] = (1, 1)


@dataclass(eq=False)
class LoadGlobalScalar(Instruction):
    """``buffer[0] = src[indices...]``: one element of a global tensor read by every thread into a
    scalar variable (``buffer``, a one-element local TIR buffer declared just before)."""

    buffer: Any
    src: GlobalTensor
    indices: tuple[Any, ...]


@dataclass(eq=False)
class AllocateGlobal(Instruction):
    """A global-memory workspace owned by the kernel (``self.global_tensor``): ``output`` views a
    buffer the runtime allocates on the launch device and passes as an extra argument, kept
    between launches; zeroed when first allocated if ``requires_clean`` (the kernel then leaves it
    zero when it ends)."""

    output: GlobalTensor
    requires_clean: bool


@dataclass(eq=False)
class ArriveLast(Instruction):
    """``buffer[0]`` = whether this block is the ``total``-th to arrive at the int32 counter ``tensor[indices...]``
    (a block barrier, one thread's fence and atomic add, the last block's reset of the counter and fence, a
    barrier that ors the answer into every thread)."""

    buffer: Any
    tensor: GlobalTensor
    indices: tuple[Any, ...]
    total: Any


@dataclass(eq=False)
class LockSemaphore(Instruction):
    """Wait until the int32 ``tensor[indices...]`` equals ``value`` (one thread spins with acquire
    loads), then a block barrier."""

    tensor: GlobalTensor
    indices: tuple[Any, ...]
    value: Any


@dataclass(eq=False)
class ReleaseSemaphore(Instruction):
    """A block barrier, then one thread sets the int32 ``tensor[indices...]`` to ``value`` with a
    release store after a fence, publishing the block's earlier global writes."""

    tensor: GlobalTensor
    indices: tuple[Any, ...]
    value: Any


@dataclass(eq=False)
class RegisterView(Instruction):
    """``output`` holds ``x``'s bits, reinterpreted per thread (``self.view`` with a layout, or with a
    packed low-precision type): each thread's register storage read as another dtype, shape and layout.
    Both spread over the same threads, and a thread's slots hold the same number of bits in both
    (``local_size * nbits``, checked by :func:`tilus_tvm.ir.tensor_ops.check_register_view`); slot
    ``s`` of ``output`` is bits ``[s*N, s*N + N)`` of the thread's slots of ``x`` laid end to end, slot 0
    lowest (``N`` the output's bit width). Any dtype but bool; emitted by
    :mod:`tilus_tvm.instructions.register_bits`. The row-major view is
    :class:`tilus_tvm.ir.tensor_ops.ViewRegister`."""

    output: RegisterTensor
    x: RegisterTensor
