"""Memory instructions of ``tilus_tvm.Script``: tensors in registers, shared and global memory."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.builder import Builder
from tilus_tvm.ir.values import is_scalar
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus_tvm.layout.register import RegisterLayout


class InstructionBase:
    """What every instruction method needs: the builder of the translation in progress, kept in the
    script's own state (``self._tilus``) by the frontend, never in a module global."""

    _tilus: Any

    def _builder(self, op: str) -> Builder:
        builder = self._tilus.builder
        if builder is None:
            raise ScriptError(f"self.{op}(...) can only be used inside a kernel's __call__ while it is compiled")
        return builder


def check_shape(op: str, shape: Any, what: str = "shape") -> tuple[int, ...]:
    """A static tile shape: a sequence of positive Python ints."""
    if isinstance(shape, int):
        shape = [shape]
    if not isinstance(shape, (list, tuple)) or not shape:
        raise ScriptError(f"{op}: {what} must be a non-empty list of ints, got {shape!r}")
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ScriptError(f"{op}: {what} {list(shape)} must hold positive compile-time ints, got {s!r}; "
                              f"tile shapes are fixed when the kernel is compiled")
    return tuple(shape)


def check_layout(op: str, layout: Any, shape: tuple[int, ...], num_threads: int) -> Optional[RegisterLayout]:
    if layout is None:
        return None
    if not isinstance(layout, RegisterLayout):
        raise ScriptError(f"{op}: layout must be a RegisterLayout, got {layout!r}")
    if tuple(layout.shape) != tuple(shape):
        raise ScriptError(f"{op}: layout {layout} has shape {list(layout.shape)}, the tensor has shape {list(shape)}")
    if layout.num_threads > num_threads:
        raise ScriptError(f"{op}: layout {layout} spreads over {layout.num_threads} threads, the block has only "
                          f"{num_threads} ({num_threads // 32} warps)")
    return layout


def check_offsets(op: str, offsets: Any, rank: int, what: str) -> tuple[Any, ...]:
    if not isinstance(offsets, (list, tuple)) or len(offsets) != rank:
        raise ScriptError(f"{op}: offsets {offsets!r} must list one offset per dimension of {what} ({rank})")
    for o in offsets:
        if not is_scalar(o) or isinstance(o, float):
            raise ScriptError(f"{op}: offset {o!r} must be an int or an integer scalar expression")
    return tuple(offsets)


def check_tile_copy(op: str, engine: str, src: Any, dst: Any, offsets: Any, dims: Any) -> tuple[tuple, tuple]:
    """The checks of a copy of the tile ``src[offsets...]`` into shared ``dst`` (``copy_async``, ``tma_load``);
    returns the offsets and dims."""
    if not isinstance(src, GlobalTensor):
        raise ScriptError(f"{op}: src must be a global tensor (self.global_view), got {src!r}")
    if not isinstance(dst, SharedTensor):
        raise ScriptError(f"{op}: dst must be a shared tensor, got {dst!r}")
    if src.dtype != dst.dtype:
        raise ScriptError(f"{op}: src {src.describe()} and dst {dst.describe()} differ in dtype; {engine} copies "
                          f"bytes, it does not convert")
    offsets = check_offsets(op, offsets, len(src.shape), src.describe())
    return offsets, check_dims(op, dims, len(dst.shape), len(src.shape))


def check_dims(op: str, dims: Any, tile_rank: int, full_rank: int) -> tuple[int, ...]:
    """``dims[i]`` is the dimension of the sliced tensor that tile dimension ``i`` runs along."""
    if dims is None:
        if tile_rank > full_rank:
            raise ScriptError(f"{op}: a {tile_rank}-D tile does not fit a {full_rank}-D tensor")
        return tuple(range(full_rank - tile_rank, full_rank))
    dims = tuple(dims)
    if len(dims) != tile_rank or len(set(dims)) != len(dims) or any(not 0 <= d < full_rank for d in dims):
        raise ScriptError(f"{op}: dims {list(dims)} must be {tile_rank} distinct dimensions in [0, {full_rank})")
    if list(dims) != sorted(dims):
        raise ScriptError(f"{op}: dims {list(dims)} must be increasing (use a transposed view to reorder)")
    return dims


class MemoryInstructions(InstructionBase):
    """Allocation, loads and stores."""

    def global_view(self, ptr: Any, dtype: DataType, shape: Sequence[Any], strides: Optional[Sequence[Any]] = None
                    ) -> GlobalTensor:
        """View the memory behind a pointer parameter as a global tensor.

        ``shape`` and ``strides`` (in elements; row-major compact when omitted) may be ints or run-time
        scalar expressions. Loads and stores through the view are masked against ``shape``.
        Rejects: a ``ptr`` that is not a pointer parameter, a ``dtype`` other than the pointer's, a
        ``strides`` of another length than ``shape``.

        >>> ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])   # doctest: +SKIP
        """
        from tilus_tvm.lang.pointer import PointerValue

        builder = self._builder("global_view")
        if not isinstance(ptr, PointerValue):
            raise ScriptError(f"global_view: ptr must be a pointer parameter (annotated ~dtype), got {ptr!r}")
        dtype = dtypes.as_dtype(dtype)
        if dtype != ptr.param.dtype:
            raise ScriptError(f"global_view: dtype {dtype.name} differs from the pointer's element type "
                              f"{ptr.param.dtype.name} (parameter {ptr.param.name}: ~{ptr.param.dtype.name})")
        if isinstance(shape, (int,)) or (not isinstance(shape, (list, tuple))):
            shape = [shape]
        for s in shape:
            if not is_scalar(s) or isinstance(s, float):
                raise ScriptError(f"global_view: shape entry {s!r} must be an int or integer scalar expression")
        compact = strides is None
        if strides is None:
            strides = []
            running: Any = 1
            for s in reversed(shape):
                strides.append(running)
                running = running * s
            strides = strides[::-1]
        elif len(strides) != len(shape):
            raise ScriptError(f"global_view: strides {list(strides)} and shape {list(shape)} differ in length")
        view = GlobalTensor(dtype, tuple(shape), tuple(strides), ptr.param, name=builder.fresh_name("g"),
                            compact=compact)
        return builder.global_view(view)

    def global_subview(self, tensor: GlobalTensor, indices: Any) -> GlobalTensor:
        """The sub-view ``tensor[indices..., :, ...]``: ``tensor``'s dimensions after the ``len(indices)``
        leading ones, whose first element's address is computed in 64-bit arithmetic.

        Kernels index global views with int32, so a tensor of 2**31 elements or more is refused at
        launch -- unless the kernel reaches it only through sub-views: then only each sub-view's
        span (``1 + sum((extent - 1) * stride)`` of its dimensions, checked at launch) must fit int32,
        and ``tensor`` itself may be as large as memory allows. Loads and stores through the sub-view
        are masked against its shape and against ``0 <= index < extent`` of each leading index.

        ``indices``: one int or integer scalar per leading dimension, fewer than ``tensor``'s rank.
        Rejects: a ``tensor`` that is not a global view of a pointer (a sub-view: index its parent
        with all leading indices at once), a packed low-precision dtype, an index out of range
        (when it and the extent are ints), no index or one per dimension.

        >>> gk = self.global_view(k_ptr, dtype=float16, shape=[batch_heads, capacity, 128])   # doctest: +SKIP
        >>> k_head = self.global_subview(gk, [bh])   # [capacity, 128] at k_ptr + int64(bh) * capacity * 128
        """
        from tilus_tvm.ir.scalar import expr_dtype, is_expr
        from tilus_tvm.lowp import is_packed

        builder = self._builder("global_subview")
        if not isinstance(tensor, GlobalTensor):
            raise ScriptError(f"global_subview: tensor must be a global view (self.global_view), got {tensor!r}")
        if tensor.is_subview:
            raise ScriptError(f"global_subview: {tensor.describe()} is a sub-view already; index "
                              f"{tensor.parent.name} with all the leading indices at once")
        if is_packed(tensor.dtype):
            raise ScriptError(f"global_subview: {tensor.describe()} holds packed {tensor.dtype.name} elements; "
                              f"sub-views support types of 8 bits or more")
        if is_scalar(indices) and not isinstance(indices, (list, tuple)):
            indices = [indices]
        rank = len(tensor.shape)
        if not isinstance(indices, (list, tuple)) or not 1 <= len(indices) < rank:
            raise ScriptError(f"global_subview: indices {indices!r} must be 1 to {rank - 1} leading indices of "
                              f"{tensor.describe()} (one per dimension would be an element)")
        for d, (index, extent) in enumerate(zip(indices, tensor.shape)):
            integer = isinstance(index, int) and not isinstance(index, bool) or \
                is_expr(index) and expr_dtype(index).startswith(("int", "uint"))
            if not integer:
                raise ScriptError(f"global_subview: index {index!r} of dimension {d} must be an int or an integer "
                                  f"scalar expression")
            if isinstance(index, int) and isinstance(extent, int) and not 0 <= index < extent:
                raise ScriptError(f"global_subview: index {index} is out of range for dimension {d} of "
                                  f"{tensor.describe()}")
        return builder.global_subview(tensor, indices)

    def register_tensor(self, dtype: DataType, shape: Sequence[int], layout: Optional[RegisterLayout] = None,
                        init: Any = None) -> RegisterTensor:
        """Allocate a register tensor of ``dtype`` and static ``shape``.

        ``layout`` (optional) fixes how its elements are spread over threads; by default layout inference
        chooses one from its uses. ``init`` is a scalar for every element, or a function
        ``init(i, j, ...) -> scalar`` of the element's indices; without it the contents are undefined.

        >>> acc = self.register_tensor(dtype=float32, shape=[64, 128], init=0.0)   # doctest: +SKIP
        """
        builder = self._builder("register_tensor")
        dtype = dtypes.as_dtype(dtype)
        shape = check_shape("register_tensor", shape)
        layout = check_layout("register_tensor", layout, shape, builder.num_threads)
        if init is not None and not is_scalar(init) and not callable(init):  # is_scalar first: exprs are callable
            raise ScriptError(f"register_tensor: init must be a scalar or a function of the indices, got {init!r}")
        if init is not None and not is_scalar(init):
            init = IndexFunction.of(init, len(shape))
        return builder.allocate_register(dtype, shape, layout, init)

    def shared_tensor(self, dtype: DataType, shape: Sequence[int], layout: Any = None) -> SharedTensor:
        """Allocate a tensor in the block's shared memory. Free it with :meth:`free_shared` once no
        thread uses it, so the memory can be reused.

        Without ``layout`` (a :class:`~tilus_tvm.layout.shared.SharedLayout`) the compiler picks one
        from the tensor's uses: row-major with the swizzle under which its ``copy_async`` stores and
        ``load_shared``/``ldmatrix`` loads have the fewest bank conflicts. :meth:`annotate_layout`
        pins one. A tensor with a leading stage dimension (``[stages, m, k]``) is indexed
        ``smem[stage]`` to get one stage (``stage`` may be a run-time scalar).

        >>> sa = self.shared_tensor(dtype=float16, shape=[3, 128, 32])   # doctest: +SKIP
        """
        from tilus_tvm.layout.shared import SharedLayout

        builder = self._builder("shared_tensor")
        dtype = dtypes.as_dtype(dtype)
        shape = check_shape("shared_tensor", shape)
        if layout is None:
            pass  # chosen by shared-layout inference from the tensor's uses (a bank-conflict-free swizzle)
        elif not isinstance(layout, SharedLayout):
            raise ScriptError(f"shared_tensor: layout must be a SharedLayout, got {layout!r}")
        elif tuple(layout.shape) != shape:
            raise ScriptError(f"shared_tensor: layout {layout} has shape {list(layout.shape)}, the tensor "
                              f"has shape {list(shape)}")
        return builder.allocate_shared(dtype, shape, layout)

    def annotate_layout(self, tensor: Any, layout: Any) -> None:
        """Pin the layout of a tensor the compiler would otherwise choose: a
        :class:`~tilus_tvm.layout.shared.SharedLayout` for a shared tensor, a
        :class:`~tilus_tvm.layout.register.RegisterLayout` for a register tensor. Rejects a tensor
        whose layout is already fixed, a layout of another shape, a view (``smem[i]``)."""
        from tilus_tvm.layout.shared import SharedLayout

        builder = self._builder("annotate_layout")
        if isinstance(tensor, SharedTensor):
            if tensor.base is not None:
                raise ScriptError(f"annotate_layout: {tensor.describe()} is a view; annotate {tensor.root.describe()}")
            if not isinstance(layout, SharedLayout):
                raise ScriptError(f"annotate_layout: a shared tensor takes a SharedLayout, got {layout!r}")
        elif isinstance(tensor, RegisterTensor):
            layout = check_layout("annotate_layout", layout, tensor.shape, builder.num_threads)
        else:
            raise ScriptError(f"annotate_layout: expected a shared or register tensor, got {tensor!r}")
        if tuple(layout.shape) != tuple(tensor.shape):
            raise ScriptError(f"annotate_layout: layout {layout} has shape {list(layout.shape)}, "
                              f"{tensor.describe()} has shape {list(tensor.shape)}")
        if tensor.layout is not None and tensor.layout != layout:
            raise ScriptError(f"annotate_layout: {tensor.describe()} already has layout {tensor.layout}")
        tensor.layout = layout

    def copy_async(self, src: GlobalTensor, dst: SharedTensor, offsets: Sequence[Any],
                   dims: Optional[Sequence[int]] = None, layout: Optional[RegisterLayout] = None) -> None:
        """Copy the tile ``src[offsets...]`` of ``dst``'s shape into the shared tensor ``dst`` with
        ``cp.async`` (the threads go on while the copy runs).

        ``offsets`` has one entry per dimension of ``src``; ``dims`` names the dimensions of ``src``
        the tile runs along (default: the last ``len(dst.shape)``). Elements outside ``src`` are
        written as zeros. Each thread copies 16-byte vectors where the alignment of ``src`` allows
        (8 or 4 bytes otherwise; element by element, synchronously, when not even 4 bytes are
        aligned). Make the data visible with :meth:`copy_async_commit_group` and
        :meth:`copy_async_wait_group` (or :meth:`copy_async_wait_all`), then :meth:`sync`.

        ``layout`` (a register layout of the tile) assigns the elements instead: each thread copies
        those it would hold in a register tensor of that layout (threads outside the layout copy
        nothing; every replica copies its own). A thread's ``cp.async`` writes are visible to that
        thread once its :meth:`copy_async_wait_group` returns, so a :meth:`load_shared` with the same
        layout reads back only what the thread copied itself and needs no :meth:`sync`: a per-thread
        ring of prefetched tiles that costs no registers while in flight and no barrier.

        >>> self.copy_async(src=ga, dst=sa[stage], offsets=[offset_m, k * 32])   # doctest: +SKIP
        >>> self.copy_async(src=gw, dst=sw[stage], offsets=[0, k], dims=[0, 2], layout=words)  # doctest: +SKIP
        """
        builder = self._builder("copy_async")
        offsets, dims = check_tile_copy("copy_async", "cp.async", src, dst, offsets, dims)
        layout = check_layout("copy_async", layout, tuple(dst.shape), builder.num_threads)
        if layout is not None and src.dtype.nbits % 8:
            raise ScriptError(f"copy_async: layout= copies whole bytes a thread; {src.describe()} has "
                              f"{src.dtype.nbits}-bit elements (copy them as the bytes or words that hold them)")
        builder.emit(ir.CopyAsync(dst, src, offsets, dims, layout))

    def copy_async_commit_group(self) -> None:
        """``cp.async.commit_group``: the copies this thread issued since the last commit form a group."""
        self._builder("copy_async_commit_group").emit(ir.CopyAsyncCommitGroup())

    def copy_async_wait_group(self, n: int) -> None:
        """``cp.async.wait_group n``: wait until at most ``n`` of this thread's committed groups are still
        in flight (``n`` a compile-time int). Follow it with :meth:`sync` before other threads read."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ScriptError(f"copy_async_wait_group: n must be a non-negative compile-time int, got {n!r}")
        self._builder("copy_async_wait_group").emit(ir.CopyAsyncWaitGroup(n))

    def copy_async_wait_all(self) -> None:
        """``cp.async.wait_all``: wait for every copy this thread issued (committed or not)."""
        self._builder("copy_async_wait_all").emit(ir.CopyAsyncWaitAll())

    def free_shared(self, tensor: SharedTensor) -> None:
        """Release a shared tensor's memory (later shared tensors may reuse it)."""
        self._builder("free_shared").free_shared(tensor)

    def load_global(self, src: GlobalTensor, offsets: Sequence[Any], shape: Sequence[int],
                    dims: Optional[Sequence[int]] = None, layout: Optional[RegisterLayout] = None
                    ) -> RegisterTensor:
        """Load the tile ``src[offsets[d] : offsets[d] + shape[i]]`` into a register tensor.

        ``offsets`` has one entry per dimension of ``src``; ``dims`` names the dimensions of ``src``
        that the tile's dimensions run along (default: the last ``len(shape)``); the others are
        indexed at their offset. Elements outside ``src.shape`` read as zero.
        """
        builder = self._builder("load_global")
        if not isinstance(src, GlobalTensor):
            raise ScriptError(f"load_global: src must be a global tensor (self.global_view), got {src!r}")
        offsets = check_offsets("load_global", offsets, len(src.shape), src.describe())
        shape = check_shape("load_global", shape)
        dims = check_dims("load_global", dims, len(shape), len(src.shape))
        layout = check_layout("load_global", layout, shape, builder.num_threads)
        return builder.load_global(src, offsets, shape, dims, layout)

    def store_global(self, dst: GlobalTensor, x: RegisterTensor, offsets: Sequence[Any],
                     dims: Optional[Sequence[int]] = None) -> None:
        """Store the register tensor ``x`` into ``dst`` at ``offsets`` (see :meth:`load_global` for
        ``dims``). Elements outside ``dst.shape`` are not written; ``x`` is cast to ``dst``'s dtype."""
        builder = self._builder("store_global")
        if not isinstance(dst, GlobalTensor):
            raise ScriptError(f"store_global: dst must be a global tensor (self.global_view), got {dst!r}")
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor):
            raise ScriptError(f"store_global: x must be a register tensor, got {x!r}")
        offsets = check_offsets("store_global", offsets, len(dst.shape), dst.describe())
        dims = check_dims("store_global", dims, len(x.shape), len(dst.shape))
        if x.dtype != dst.dtype:
            x = builder.cast(x, dst.dtype)
        builder.store_global(dst, x, offsets, dims)

    def load_shared(self, src: SharedTensor, offsets: Optional[Sequence[Any]] = None,
                    shape: Optional[Sequence[int]] = None, dims: Optional[Sequence[int]] = None,
                    layout: Optional[RegisterLayout] = None) -> RegisterTensor:
        """Load a shared tensor (or the tile of ``shape`` at ``offsets``) into registers. Pair it with
        :meth:`sync` after the stores that produced the data."""
        builder = self._builder("load_shared")
        if not isinstance(src, SharedTensor):
            raise ScriptError(f"load_shared: src must be a shared tensor, got {src!r}")
        shape = src.shape if shape is None else check_shape("load_shared", shape)
        offsets = (0,) * len(src.shape) if offsets is None else check_offsets(
            "load_shared", offsets, len(src.shape), src.describe())
        dims = check_dims("load_shared", dims, len(shape), len(src.shape))
        _check_static_tile("load_shared", src, offsets, shape, dims)
        layout = check_layout("load_shared", layout, shape, builder.num_threads)
        return builder.load_shared(src, offsets, shape, dims, layout)

    def store_shared(self, dst: SharedTensor, x: RegisterTensor, offsets: Optional[Sequence[Any]] = None,
                     dims: Optional[Sequence[int]] = None) -> None:
        """Store a register tensor into a shared tensor (at ``offsets`` when it is a sub-tile)."""
        builder = self._builder("store_shared")
        if not isinstance(dst, SharedTensor):
            raise ScriptError(f"store_shared: dst must be a shared tensor, got {dst!r}")
        x = builder.materialize(x)
        if not isinstance(x, RegisterTensor):
            raise ScriptError(f"store_shared: x must be a register tensor, got {x!r}")
        offsets = (0,) * len(dst.shape) if offsets is None else check_offsets(
            "store_shared", offsets, len(dst.shape), dst.describe())
        dims = check_dims("store_shared", dims, len(x.shape), len(dst.shape))
        _check_static_tile("store_shared", dst, offsets, x.shape, dims)
        if x.dtype != dst.dtype:
            x = builder.cast(x, dst.dtype)
        builder.store_shared(dst, x, offsets, dims)

    def sync(self) -> None:
        """Barrier for all threads of the block (``__syncthreads``): shared-memory writes before it are
        visible to reads after it."""
        self._builder("sync").sync()


class IndexFunction:
    """``init=lambda i, j: ...`` of a register tensor, applied once, while the kernel is translated, to
    index variables: the expression it returns is kept and the variables are replaced by each
    element's index when the tensor is filled (so the function may use any name in scope where it
    is written, a loop variable included, and its errors point at that line)."""

    def __init__(self, params: list, body: Any):
        self.params = params
        self.body = body

    @staticmethod
    def of(fn: Any, rank: int) -> "IndexFunction":
        import inspect

        from tvm import tirx

        try:
            names = [p.name for p in inspect.signature(fn).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            names = []
        if len(names) != rank:
            names = [f"i{d}" for d in range(rank)]
        params = [tirx.Var(name, "int32") for name in names]
        body = fn(*params)
        if not is_scalar(body):
            raise ScriptError(f"register_tensor: init({', '.join(names)}) must return a scalar, got {body!r}")
        return IndexFunction(params, body)

    @property
    def __signature__(self):
        import inspect

        return inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                  for p in self.params])

    def __call__(self, *indices: Any) -> Any:
        from tvm import tirx

        from tilus_tvm.ir.scalar import is_expr

        if not is_expr(self.body):
            return self.body  # a Python number: the same for every element
        from tvm.tirx import _ffi_api

        return _ffi_api.LambdaExprApply(_ffi_api.LambdaExpr(self.params, self.body),
                                        [tirx.const(i, "int32") if isinstance(i, int) else i for i in indices])


def _check_static_tile(op: str, tensor: SharedTensor, offsets, shape, dims) -> None:
    """Shared tiles are not masked, so a tile known to stick out of the tensor is rejected."""
    extents = [1] * len(tensor.shape)
    for d, s in zip(dims, shape):
        extents[d] = s
    for d, (o, e, full) in enumerate(zip(offsets, extents, tensor.shape)):
        if isinstance(o, int) and (o < 0 or o + e > full):
            raise ScriptError(f"{op}: tile of shape {list(shape)} at offsets {list(offsets)} exceeds "
                              f"{tensor.describe()} in dimension {d}")
