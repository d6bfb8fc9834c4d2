"""Hopper's tensor memory accelerator (TMA) and ``mbarrier``: ``TmaLoad``, ``MbarrierInit``, ``MbarrierWait``,
``MbarrierArrive``.

TMA copies a tile described by a *tensor map*: a 128-byte descriptor of the global tensor (its base,
extents and byte strides), of the box copied at a time, and of the swizzle to apply in shared memory.
TVM 0.27 does the plumbing: a tensor map encoded on the host (``tirx.tensormap_encode_tiled`` into a
``tvm_stack_alloca("tensormap")``) before the launch becomes a ``const __grid_constant__ CUtensorMap``
parameter of the kernel, which the device code addresses with ``address_of``; its CUDA runtime copies
the 128 bytes into the launch's parameters. The device instructions come from ``tilus_tvm.intrin.tma``
(TVM's PTX builders).

One tensor map per distinct (global tensor, box, swizzle) of the kernel's ``TmaLoad`` instructions,
encoded once per launch by :func:`encode_tensor_maps` (``backend/codegen.py`` calls it before the
thread bindings, so it runs on the host). The shared layout a ``TmaLoad`` writes is row-major over the
box, with TMA's 32-, 64- or 128-byte swizzle (CuTe's ``Swizzle<B, 4, 3>`` on byte offsets, the same
as ``wgmma``'s) or none: :func:`shared_layouts_tma` gives it to a shared tensor created without a layout.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import tvm
from tvm import tirx
from tvm.tirx.type import TensorMapType
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext, sync_threads
from tilus_tvm.errors import CompileError
from tilus_tvm.instructions.async_copy import _divisible
from tilus_tvm.instructions.registry import register
from tilus_tvm.intrin import tma as ptx
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import Function, instructions
from tilus_tvm.ir.tensor import SharedTensor
from tilus_tvm.passes.kernel_abi import uses_only
from tilus_tvm.layout.shared import SharedLayout, shared_row_major
from tilus_tvm.layout.swizzle import Swizzle

FAMILY = "sm_90"
SWIZZLE_BYTES = {0: 0, 32: 1, 64: 2, 128: 3}  # CUtensorMapSwizzle: none, 32 B, 64 B, 128 B
L2_PROMOTION_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B


def swizzle_for(row_bytes: int, dtype_bits: int) -> Optional[Swizzle]:
    """TMA's swizzle of rows of ``row_bytes`` (the box's last dimension) in elements of ``dtype_bits``:
    the widest of 128/64/32 bytes that the row length is a multiple of, or None (no swizzle)."""
    for span in (128, 64, 32):
        if row_bytes % span == 0:
            unit = (128 // dtype_bits).bit_length() - 1  # log2(elements per 16 bytes)
            return Swizzle((span // 16).bit_length() - 1, unit, 3)
    return None


def tma_layout(root: SharedTensor) -> SharedLayout:
    """The layout TMA writes a root tensor in: row-major, rows swizzled by :func:`swizzle_for`."""
    row_bytes = root.shape[-1] * root.dtype.nbits // 8
    swizzle = swizzle_for(row_bytes, root.dtype.nbits) if row_bytes <= 128 else None
    layout = shared_row_major(*root.shape)
    return layout.swizzled(swizzle) if swizzle is not None else layout


def _whole(tensor: SharedTensor) -> bool:
    """Whether ``tensor`` is a root or a stage of one (``smem[s]``, ``smem[s, c]``, ``smem[s, r0:r1]``):
    all but its first dimension whole, so the tile is one contiguous run of the root's memory."""
    while tensor.base is not None:
        if tensor.perm is not None or tensor.reshaped:
            return False
        if tensor.slice_offsets is not None:
            # smem[s, c] or smem[s, r0:r1]: leading indices fixed, then one dimension cut, the rest whole
            rank, base_rank = len(tensor.slice_dims), len(tensor.base.shape)
            trailing = tuple(range(base_rank - rank, base_rank))
            if tuple(tensor.slice_dims) != trailing or tuple(tensor.shape[1:]) != tuple(tensor.base.shape[-rank + 1:]):
                return False
            if any(not (isinstance(tensor.slice_offsets[d], int) and tensor.slice_offsets[d] == 0)
                   for d in trailing[1:]):
                return False
        tensor = tensor.base
    return True


def _swizzle_mode(inst: ir.TmaLoad) -> int:
    """TMA's swizzle mode for ``inst.dst``'s layout; refuses a layout TMA cannot write."""
    dst = inst.dst
    layout = dst.resolved_layout()
    nbits = dst.dtype.nbits
    row_bytes = dst.shape[-1] * nbits // 8
    if not _whole(dst):
        raise CompileError(f"tma_load: dst {dst.describe()} is a sub-tile of {dst.root.describe()}; TMA writes "
                           f"whole tiles (a shared tensor, or one stage smem[s])")
    if layout.strides != shared_row_major(*dst.shape).strides:
        raise CompileError(f"tma_load: dst {dst.describe()} has layout {layout}; TMA writes a row-major tile "
                           f"(strides {list(shared_row_major(*dst.shape).strides)})")
    swizzle = layout.swizzle
    if swizzle is None:
        if row_bytes % 16:
            raise CompileError(f"tma_load: dst {dst.describe()} has rows of {row_bytes} bytes; TMA needs a "
                               f"multiple of 16")
        return 0
    unit = (128 // nbits).bit_length() - 1
    span = 16 << swizzle.bits
    if swizzle.base != unit or swizzle.shift != 3 or span not in SWIZZLE_BYTES or row_bytes > span:
        raise CompileError(f"tma_load: dst {dst.describe()} is swizzled by {swizzle}; TMA swizzles rows of at "
                           f"most 32, 64 or 128 bytes by Swizzle({{1, 2, 3}}, {unit}, 3) (rows here: "
                           f"{row_bytes} bytes)")
    return SWIZZLE_BYTES[span]


def _check_src(inst: ir.TmaLoad) -> None:
    src = inst.src
    if src.is_subview:
        raise CompileError(f"tma_load: src {src.describe()} is a sub-view; the tensor map is encoded before the "
                           f"launch, so TMA reads views of a pointer (self.global_view) only")
    if src.dtype.nbits % 8:
        raise CompileError(f"tma_load: src {src.describe()} has {src.dtype.nbits}-bit elements; TMA copies whole "
                           f"bytes (view packed types as uint8)")
    last = src.strides[-1]
    if not (last == 1 or (isinstance(last, tirx.IntImm) and last.value == 1)):
        raise CompileError(f"tma_load: src {src.describe()} has stride {last} along its last dimension; TMA "
                           f"needs it contiguous")
    width = 16 * 8 // src.dtype.nbits
    for d, stride in enumerate(src.strides[:-1]):
        if not _divisible(stride, width):
            raise CompileError(f"tma_load: src {src.describe()} has stride {stride} along dimension {d}; TMA "
                               f"needs strides that are multiples of 16 bytes ({width} elements)")


def _check_host_computable(inst: ir.TmaLoad, func: Function) -> None:
    """The tensor map is encoded before the launch: ``src``'s extents and strides may use the kernel's
    run-time parameters, not values computed inside the kernel."""
    scalars = [p.var for p in func.params if p.kind == "scalar"]
    for value in [*inst.src.shape, *inst.src.strides]:
        if not uses_only(value, scalars):
            inside = [v.name for v in tirx.analysis.undefined_vars(value) if not uses_only(v, scalars)]
            raise CompileError(f"tma_load: src {inst.src.describe()} has an extent or stride ({value}) computed "
                               f"inside the kernel (from {', '.join(sorted(set(inside)))}); TMA's tensor map is "
                               f"encoded before the launch, from the kernel's parameters only")


def _box(inst: ir.TmaLoad) -> tuple[int, ...]:
    """The box's extents along the dimensions of ``src`` (1 where the tile does not run)."""
    box = [1] * len(inst.src.shape)
    for d, extent in zip(inst.dims, inst.dst.shape):
        box[d] = int(extent)
    return tuple(box)


def encode_tensor_maps(func: Function, ctx: CodegenContext) -> None:
    """Encode on the host, before the launch, one tensor map per distinct (src, box, swizzle) of the
    kernel's ``TmaLoad`` instructions (module docstring); ``ctx.tensor_maps`` gives each instruction its
    map's var and swizzle mode."""
    encoded: dict[tuple, tirx.Var] = {}
    for inst in instructions(func.body):
        if not isinstance(inst, ir.TmaLoad):
            continue
        _check_src(inst)
        _check_host_computable(inst, func)
        if not func.aligned(inst.src.pointer):
            raise CompileError(f"tma_load: src {inst.src.describe()} starts at an address that is not known to be "
                               f"16-byte aligned; TMA needs it (pass a tensor whose data pointer is)")
        swizzle, box = _swizzle_mode(inst), _box(inst)
        key = (id(inst.src), box, swizzle)
        if key not in encoded:
            encoded[key] = _encode(ctx, inst.src, box, swizzle, len(encoded))
        ctx.tensor_maps[id(inst)] = (encoded[key], swizzle)


def _encode(ctx: CodegenContext, src, box: tuple[int, ...], swizzle: int, number: int) -> tirx.Var:
    """The host statements that encode ``src``'s tensor map for ``box`` and ``swizzle``; its var."""
    tensor_map = tirx.Var(f"{src.name}_tensormap_{number}", ty=tvm.ir.PointerType(TensorMapType()))
    Tb.bind(tirx.tvm_stack_alloca("tensormap", 1), var=tensor_map)
    wide = [tirx.Cast("int64", v) if not isinstance(v, int) else tirx.const(v, "int64") for v in src.shape]
    element_bytes = src.dtype.nbits // 8
    strides = [tirx.Cast("int64", s) * element_bytes if not isinstance(s, int) else tirx.const(s * element_bytes, "int64")
               for s in src.strides]
    rank = len(src.shape)
    Tb.evaluate(tirx.tensormap_encode_tiled(
        tensor_map, ctx.pointer_flat(src.pointer).data, *reversed(wide), *reversed(strides[:-1]),
        *[tirx.const(b, "int64") for b in reversed(box)], *[tirx.const(1, "int64")] * rank,
        descriptor_dtype=src.dtype.name, rank=rank, swizzle=swizzle, l2_promotion=L2_PROMOTION_128B))
    return tensor_map


def _generic_address(ctx: CodegenContext, tensor: SharedTensor) -> Any:
    """The generic pointer to ``tensor``'s first element (a barrier ``bars[i]``, a TMA destination)."""
    buffer, offset = ctx.shared_element(tensor, [0] * len(tensor.shape))
    return tirx.address_of(tirx.BufferLoad(buffer, [offset]))


def _shared_address(ctx: CodegenContext, tensor: SharedTensor) -> Any:
    """The 32-bit shared-memory address of ``tensor``'s first element."""
    return ptx.shared_address(_generic_address(ctx, tensor))


def emit_tma_load(ctx: CodegenContext, inst: ir.TmaLoad) -> None:
    tensor_map, swizzle = ctx.tensor_maps[id(inst)]
    dst = inst.dst
    buffer, offset = ctx.shared_element(dst, [0] * len(dst.shape))
    byte_offset = offset * (dst.dtype.nbits // 8)
    alignment = 1024 if swizzle else 128
    pool_offset = ctx.plan.offset_of(dst.root) + byte_offset if isinstance(byte_offset, int) else None
    if not _divisible(ctx.plan.offset_of(dst.root), alignment) or not _divisible(byte_offset, alignment):
        raise CompileError(f"tma_load: dst {dst.describe()} does not start on a multiple of {alignment} bytes of "
                           f"shared memory (offset {pool_offset if pool_offset is not None else byte_offset}), "
                           f"which TMA needs{' for its swizzle' if alignment == 1024 else ''}")
    nbytes = math.prod(dst.shape) * dst.dtype.nbits // 8
    coords = [tirx.Cast("int32", o) if not isinstance(o, int) else tirx.const(o, "int32") for o in inst.offsets]
    bar = _shared_address(ctx, inst.barrier)
    smem = _shared_address(ctx, dst)
    with Tb.If(ctx.tx == 0):
        with Tb.Then():
            if inst.after is not None:  # the readers of the stage have released it
                Tb.evaluate(ptx.emit_mbarrier_wait(_generic_address(ctx, inst.after), _phase(inst.after_phase)))
            Tb.evaluate(ptx.emit_mbarrier_arrive_expect_tx(bar, nbytes))
            Tb.evaluate(ptx.emit_tma_load(smem, tirx.address_of(tensor_map), list(reversed(coords)), bar))


def emit_mbarrier_init(ctx: CodegenContext, inst: ir.MbarrierInit) -> None:
    with Tb.If(ctx.tx == 0):
        with Tb.Then():
            for i in range(inst.barriers.shape[0]):
                Tb.evaluate(ptx.emit_mbarrier_init(_shared_address(ctx, inst.barriers[i]), inst.arrivals))
            Tb.evaluate(ptx.emit_mbarrier_init_fence())
    sync_threads()


def _phase(phase: Any) -> Any:
    return phase if not isinstance(phase, int) else tirx.const(phase, "int32")


def emit_mbarrier_wait(ctx: CodegenContext, inst: ir.MbarrierWait) -> None:
    Tb.evaluate(ptx.emit_mbarrier_wait(_generic_address(ctx, inst.barrier), _phase(inst.phase)))


def emit_mbarrier_arrive(ctx: CodegenContext, inst: ir.MbarrierArrive) -> None:
    if not inst.per_warp:
        Tb.evaluate(ptx.emit_mbarrier_arrive(_shared_address(ctx, inst.barrier)))
        return
    Tb.evaluate(Tb.cuda.warp_sync())  # __syncwarp: the warp's reads before lane 0's arrival
    with Tb.If(ctx.tx % 32 == 0):
        with Tb.Then():
            Tb.evaluate(ptx.emit_mbarrier_arrive(_shared_address(ctx, inst.barrier)))


def shared_layouts_tma(inst: ir.TmaLoad) -> list:
    """(root, layout) of the destination: the layout TMA writes (:func:`tma_layout`)."""
    return [(inst.dst.root, tma_layout(inst.dst.root))]


register(ir.TmaLoad, FAMILY, emit=emit_tma_load, shared_layouts=shared_layouts_tma)
register(ir.MbarrierInit, FAMILY, emit=emit_mbarrier_init)
register(ir.MbarrierWait, FAMILY, emit=emit_mbarrier_wait)
register(ir.MbarrierArrive, FAMILY, emit=emit_mbarrier_arrive)
