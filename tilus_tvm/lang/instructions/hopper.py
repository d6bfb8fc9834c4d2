"""Hopper instructions of ``tilus_tvm.Script``: warpgroup matrix products (``wgmma``) and their fences;
tile copies by the tensor memory accelerator (``tma_load``) and the ``mbarrier`` they signal.

A *warpgroup* is four consecutive warps (128 threads). ``wgmma`` multiplies operands that sit in
shared memory and accumulates into registers spread over the warpgroup, asynchronously: the
instruction returns at once and the tensor cores read shared memory and update the accumulator
while the threads go on. The protocol, as PTX defines it:

    self.fence_proxy_async()        # after writing the operands (cp.async, stores) and before sync()
    self.sync()
    self.wgmma_fence()              # before the first wgmma that touches the accumulator
    self.wgmma(sa, sb, acc)         # acc += sa @ sb, issued, not finished
    self.wgmma_commit_group()
    self.wgmma_wait_group(0)        # now acc may be read and sa, sb overwritten

They need an ``sm_90a`` target (``tilus_tvm.target.current_arch`` gives it on an H100 or H200).

TMA. One thread hands the copy of a whole tile to the tensor memory accelerator, which computes the
addresses, zero-fills what lies outside the tensor, swizzles as the shared tensor's layout says, and
signals an ``mbarrier`` in shared memory when the bytes have landed:

    bars = self.shared_tensor(dtype=uint64, shape=[stages])
    self.mbarrier_init(bars, arrivals=2)                              # two loads complete a phase
    self.tma_load(src=ga, dst=sa[s], offsets=[m0, k0], barrier=bars[s])
    self.tma_load(src=gb, dst=sb[s], offsets=[n0, k0], barrier=bars[s])
    self.mbarrier_wait(bars[s], phase)      # phase: 0 the first time a barrier completes, then 1, 0, ...

``wgmma`` reads what TMA wrote without a fence (both are the async proxy); before TMA overwrites a tile
that ``wgmma`` read, wait for that ``wgmma`` (``wgmma_wait_group``) and :meth:`sync`. TMA needs sm_90.

Or release each stage with a second ring of barriers, so that only the thread that refills a stage waits
for its readers and warpgroups need not keep in step:

    empty = self.shared_tensor(dtype=uint64, shape=[stages])
    self.mbarrier_init(empty, arrivals=self.attrs.warps * 32)    # every thread releases
    ...                                                           # step k reads stage s = k % stages
    self.wgmma_wait_group(0)
    self.mbarrier_arrive(empty[s])                                # this thread is done with stage s
    ...                                                           # stage s's next tile, k + stages:
    self.tma_load(src=ga, dst=sa[s], offsets=[m0, k0], barrier=bars[s], after=(empty[s], k // stages % 2))
"""
from __future__ import annotations

from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus_tvm.ir.values import is_scalar
from tilus_tvm.lang.instructions.memory import InstructionBase, check_tile_copy


def _barrier(op: str, barrier) -> SharedTensor:
    """One ``mbarrier``: an element ``bars[i]`` of a uint64 shared tensor."""
    if not isinstance(barrier, SharedTensor) or barrier.dtype.name != "uint64" or tuple(barrier.shape) != ():
        raise ScriptError(f"{op}: barrier must be one element of a uint64 shared tensor (bars[i] of "
                          f"self.shared_tensor(dtype=uint64, shape=[n]) given to mbarrier_init), got {barrier!r}")
    return barrier


def _check_phase(op: str, phase) -> None:
    if isinstance(phase, bool) or not is_scalar(phase) or isinstance(phase, float):
        raise ScriptError(f"{op}: phase must be an int or an integer scalar (0 or 1), got {phase!r}")
    if isinstance(phase, int) and phase not in (0, 1):
        raise ScriptError(f"{op}: phase must be 0 or 1 (the parity of the phase), got {phase}")


class HopperInstructions(InstructionBase):
    """``wgmma`` and the fences around it; ``tma_load`` and ``mbarrier`` (see the module docstring)."""

    def mbarrier_init(self, barriers: SharedTensor, arrivals: int = 1) -> None:
        """Initialise every ``mbarrier`` of ``barriers`` (a 1-D uint64 shared tensor) to complete a phase
        after ``arrivals`` arrivals (each :meth:`tma_load` arrives once) and the bytes they announced;
        the block synchronises afterwards."""
        if not isinstance(barriers, SharedTensor) or barriers.dtype.name != "uint64" or len(barriers.shape) != 1:
            raise ScriptError(f"mbarrier_init: barriers must be a 1-D uint64 shared tensor, got {barriers!r}")
        if barriers.base is not None:
            raise ScriptError(f"mbarrier_init: barriers must be a shared tensor itself, not a view, got "
                              f"{barriers.describe()}")
        if isinstance(arrivals, bool) or not isinstance(arrivals, int) or not 1 <= arrivals < 2 ** 20:
            raise ScriptError(f"mbarrier_init: arrivals must be a compile-time int from 1 to 2**20 - 1, got "
                              f"{arrivals!r}")
        self._builder("mbarrier_init").emit(ir.MbarrierInit(barriers, arrivals))

    def mbarrier_wait(self, barrier: SharedTensor, phase) -> None:
        """Wait until ``barrier`` (``bars[i]``) has completed its phase of parity ``phase`` (0 or 1, an int
        or a run-time integer scalar: a barrier's phases alternate 0, 1, 0, ... from its initialisation)."""
        barrier = _barrier("mbarrier_wait", barrier)
        _check_phase("mbarrier_wait", phase)
        self._builder("mbarrier_wait").emit(ir.MbarrierWait(barrier, phase))

    def mbarrier_arrive(self, barrier: SharedTensor, per_warp: bool = False) -> None:
        """Every thread arrives once on ``barrier`` (``bars[i]``), with release semantics: what it did
        before, its reads of shared memory included, is ordered before whatever waits for the phase.
        A barrier released this way by every thread of the block is initialised with
        ``arrivals=self.attrs.warps * 32``; ``tma_load(after=...)`` waits for it before refilling a stage.
        ``per_warp=True``: the lanes of each warp meet at ``__syncwarp`` (which orders their reads before
        lane 0's later arrival) and lane 0 arrives once for its warp (``arrivals=self.attrs.warps``): one
        arrival a warp instead of 32, which the barrier's shared word takes one after another."""
        if not isinstance(per_warp, bool):
            raise ScriptError(f"mbarrier_arrive: per_warp must be True or False, got {per_warp!r}")
        self._builder("mbarrier_arrive").emit(ir.MbarrierArrive(_barrier("mbarrier_arrive", barrier), per_warp))

    def tma_load(self, src: GlobalTensor, dst: SharedTensor, offsets, barrier: SharedTensor, dims=None,
                 after=None) -> None:
        """Copy the tile ``src[offsets...]`` of ``dst``'s shape into ``dst`` with the tensor memory
        accelerator (module docstring). ``offsets`` has one entry per dimension of ``src``; ``dims`` names
        the dimensions of ``src`` the tile runs along (default: the last ``len(dst.shape)``). Elements
        outside ``src`` are written as zeros. One thread arrives on ``barrier`` (``bars[i]``), announcing
        the tile's bytes, and issues the copy; wait for it with :meth:`mbarrier_wait`.

        ``src`` must be contiguous along its last dimension, with its other strides and its start
        16-byte aligned; ``dst`` a whole row-major tile (a shared tensor, or one stage ``smem[s]`` of one)
        whose swizzle, if any, is TMA's for its rows (32, 64 or 128 bytes); the kernel chooses that layout
        for a shared tensor created without one. At most 256 elements along each dimension.

        ``after``: None, or ``(bars[j], phase)``: the issuing thread first waits until that barrier has
        completed its phase of parity ``phase`` -- the release (:meth:`mbarrier_arrive`) of ``dst`` by the
        threads that read it last. The other threads go on: unlike a :meth:`sync` before the copy, this lets
        warpgroups that read a stage at different times drift apart by up to the ring's depth."""
        builder = self._builder("tma_load")
        offsets, dims = check_tile_copy("tma_load", "TMA", src, dst, offsets, dims)
        barrier = _barrier("tma_load", barrier)
        after_barrier, after_phase = None, None
        if after is not None:
            if not isinstance(after, (tuple, list)) or len(after) != 2:
                raise ScriptError(f"tma_load: after must be None or (bars[j], phase), got {after!r}")
            after_barrier, after_phase = _barrier("tma_load", after[0]), after[1]
            _check_phase("tma_load", after_phase)
        if len(src.shape) > 5:
            raise ScriptError(f"tma_load: src {src.describe()} has {len(src.shape)} dimensions; TMA takes at most 5")
        for d, extent in enumerate(dst.shape):
            if not 1 <= extent <= 256:
                raise ScriptError(f"tma_load: dst {dst.describe()} has {extent} elements along dimension {d}; "
                                  f"TMA copies boxes of at most 256 along each dimension")
        builder.emit(ir.TmaLoad(dst, src, offsets, dims, barrier, after_barrier, after_phase))

    def wgmma(self, a: SharedTensor, b: SharedTensor, acc: RegisterTensor) -> None:
        """``acc += a @ b`` by ``wgmma.mma_async``, asynchronously (module docstring).

        ``a`` [m, k] and ``b`` [k, n] are float16 or bfloat16 shared tensors (or views, such as one stage
        ``smem[s]`` or a transpose), ``acc`` a float32 register tensor [m, n]. Each warpgroup computes
        64 rows: m must be 64 times the block's warpgroups (``warps // 4``), n a multiple of 8 up to 256,
        k a multiple of 16. ``b`` may also be MN-major (n runs along contiguous memory, as in a row-major
        [k, n] weight): then it is given as [n / 64, k, 64] chunks, each a row-major [k, 64] tile of the
        [k, n] matrix (a shared tensor [..., n / 64, k, 64] filled chunk by chunk). ``a`` may also be a register tensor (``wgmma``'s register-A form): then it
        and ``acc`` take ``dot``'s mma layouts with the warps stacked along m, and m may be any multiple of
        64 times the warpgroups (one ``wgmma`` per 16 rows a warp holds). Its registers must not change
        until the group is waited for. Both operands must be K-major -- k runs along contiguous memory: ``a`` a
        [m, k] tile, ``b`` the transpose of an [n, k] tile -- with rows of 32, 64 or 128 bytes, swizzled
        as ``wgmma`` reads them; a shared tensor created without a layout gets that layout.
        """
        builder = self._builder("wgmma")
        a = builder.materialize(a)
        if not isinstance(a, (SharedTensor, RegisterTensor)):
            raise ScriptError(f"wgmma: a must be a shared or register tensor, got {a!r}")
        if not isinstance(b, SharedTensor):
            raise ScriptError(f"wgmma: b must be a shared tensor, got {b!r}")
        if len(a.shape) != 2 or len(b.shape) not in (2, 3):
            raise ScriptError(f"wgmma: a must be 2-D and b 2-D or [n / 64, k, 64] chunks, got {a.describe()} and "
                              f"{b.describe()}")
        if not isinstance(acc, RegisterTensor) or len(acc.shape) != 2:
            raise ScriptError(f"wgmma: acc must be a 2-D register tensor, got {acc!r}")
        (m, k), (k2, n) = a.shape, (b.shape if len(b.shape) == 2 else (b.shape[1], b.shape[0] * b.shape[2]))
        if k != k2 or tuple(acc.shape) != (m, n):
            raise ScriptError(f"wgmma: incompatible shapes a {list(a.shape)}, b {list(b.shape)}, acc "
                              f"{list(acc.shape)}: expected a [m, k], b [k, n], acc [m, n]")
        if a.dtype != b.dtype or a.dtype.name not in ("float16", "bfloat16"):
            raise ScriptError(f"wgmma: a and b must both be float16 or both bfloat16, got {a.describe()} and "
                              f"{b.describe()}")
        if acc.dtype.name != "float32":
            raise ScriptError(f"wgmma: acc must be float32, got {acc.describe()}")
        if m % 64:
            raise ScriptError(f"wgmma: m={m} must be a multiple of 64 (each warpgroup computes 64 rows)")
        if n % 8 or not 8 <= n <= 256:
            raise ScriptError(f"wgmma: n={n} must be a multiple of 8 from 8 to 256")
        if k % 16:
            raise ScriptError(f"wgmma: k={k} must be a multiple of 16")
        builder.emit(ir.Wgmma(acc, a, b, acc))

    def wgmma_fence(self, pin=None) -> None:
        """``wgmma.fence.sync.aligned``: before a warpgroup's first ``wgmma`` on an accumulator, and after
        the accumulator was touched by other instructions. ``pin``: see :meth:`wgmma_wait_group`."""
        self._builder("wgmma_fence").emit(ir.WgmmaFence(self._pinned("wgmma_fence", pin)))

    def wgmma_commit_group(self) -> None:
        """``wgmma.commit_group.sync.aligned``: the ``wgmma`` issued since the last commit form a group."""
        self._builder("wgmma_commit_group").emit(ir.WgmmaCommitGroup())

    def wgmma_wait_group(self, n: int, pin=None) -> None:
        """``wgmma.wait_group.sync.aligned n``: wait until at most ``n`` of the warpgroup's committed
        groups still run (``n`` a compile-time int). With ``n = 0`` the accumulators are final and the
        operands' shared memory may be overwritten.

        ``pin``: the accumulators whose registers are pinned here for the CUDA compiler (an empty
        ``asm`` reading and writing each, so that no access moves across); None pins every ``wgmma``
        accumulator of the kernel. When groups stay in flight across this point, name only the
        accumulators that are not in flight: pinning one that is counts as reading it mid-flight, and
        ptxas then serializes every ``wgmma`` of the kernel."""
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 7:
            raise ScriptError(f"wgmma_wait_group: n must be a compile-time int from 0 to 7, got {n!r}")
        self._builder("wgmma_wait_group").emit(ir.WgmmaWaitGroup(n, self._pinned("wgmma_wait_group", pin)))

    def _pinned(self, what: str, pin):
        if pin is None:
            return None
        tensors = tuple(pin) if isinstance(pin, (list, tuple)) else (pin,)
        for tensor in tensors:
            if not isinstance(tensor, RegisterTensor) or tensor.dtype.name != "float32":
                raise ScriptError(f"{what}: pin takes float32 register tensors (wgmma accumulators), got {tensor!r}")
        return tensors

    def grid_dependency_wait(self) -> None:
        """``griddepcontrol.wait``: with ``self.attrs.dependent_launch``, wait until the work queued before
        this kernel on the stream has completed and its writes are visible. Every thread that then reads
        what that work wrote (or writes what it reads) must have executed it; call it where the whole
        block passes. Loads of data nothing on the stream writes (weights) may go before it, to overlap
        the work before. Without a dependent launch it returns at once. Needs sm_90.

        >>> self.attrs.dependent_launch = True   # doctest: +SKIP
        >>> self.launch_dependents()              # the next kernel may start now  # doctest: +SKIP
        >>> w = self.load_global(gw, ...)         # weights: written by nothing before  # doctest: +SKIP
        >>> self.grid_dependency_wait()           # the activations are ready  # doctest: +SKIP
        """
        self._builder("grid_dependency_wait").emit(ir.GridDependencyWait())

    def launch_dependents(self) -> None:
        """``griddepcontrol.launch_dependents``: let the kernel queued after this one with a dependent launch
        start before this one ends (it still waits for this one's end at its :meth:`grid_dependency_wait`),
        once every block of this kernel has called it or exited. Without such a kernel after it, it does
        nothing. Needs sm_90."""
        self._builder("launch_dependents").emit(ir.LaunchDependents())

    def fence_proxy_async(self) -> None:
        """``fence.proxy.async.shared::cta``: make this thread's shared-memory writes (``cp.async`` copies
        it waited for, stores) visible to ``wgmma``. Follow it with :meth:`sync`."""
        self._builder("fence_proxy_async").emit(ir.FenceProxyAsync())
