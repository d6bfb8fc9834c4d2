"""``Wgmma``: ``acc += a @ b`` by Hopper's ``wgmma.mma_async`` from shared memory, and its fences.

Configure: every warpgroup (4 warps) computes 64 rows of the product at a time: with ``a`` in shared
memory ``m`` must be 16 times the block's warps; with ``a`` in registers (the ``mma.sync`` A fragments
of ``dot``'s tiling, warps stacked along m) a multiple of it, one ``wgmma`` per 16 rows a warp holds. Layout rule: the accumulator has ``wgmma``'s register layout, which is ``dot``'s
mma layout with one m16n8 atom row a warp (warps stacked along m) and ``n / 8`` atoms along n
(:func:`accumulator_layout`); layout inference converts an accumulator that arrives in another one.

Shared layouts: both operands are K-major tiles whose rows are 32, 64 or 128 bytes, swizzled as
``wgmma`` reads them (:func:`operand_layout`, CuTe's ``Swizzle<B, 4, 3>`` on bytes); ``b`` may also be
MN-major, given as [n / 64, k, 64] chunks of a row-major [k, n] tile (:func:`b_operand`). A shared tensor
created without a layout gets it from shared-layout inference (the registry's ``shared_layouts``
hook); one given another layout is refused with the reason (:func:`descriptor_bits`).

Emitter: for each 16-wide k step, one ``wgmma.mma_async.m64n{n}k16`` per warpgroup, its descriptors
built from the operands' shared addresses (``tilus_tvm.intrin.wgmma``). The fences are single PTX
instructions; ``wgmma_fence`` and ``wgmma_wait_group`` also pin every ``wgmma`` accumulator of the
kernel (or the ones named by ``pin``) for the CUDA compiler (an empty ``asm`` that reads and writes
each register), so that no read of an accumulator moves above the wait that completes it.

Registered for ``sm_90`` and newer; the emitters require an arch-specific target (``sm_90a``).
"""
from __future__ import annotations

from typing import Optional

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.context import CodegenContext
from tilus_tvm.errors import CompileError
from tilus_tvm.instructions.async_copy import _divisible
from tilus_tvm.instructions.elementwise import set_layout
from tilus_tvm.instructions.registry import register
from tilus_tvm.intrin import wgmma as ptx
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.inst import DotConfig
from tilus_tvm.ir.stmt import instructions
from tilus_tvm.ir.tensor import RegisterTensor, SharedTensor
from tilus_tvm.layout.atoms import get_mma_atom
from tilus_tvm.layout.register import RegisterLayout
from tilus_tvm.layout.shared import SharedLayout, shared_row_major
from tilus_tvm.layout.swizzle import Swizzle

FAMILY = "sm_90"
WARPGROUP = 4  # warps
ROWS_PER_WARPGROUP = 64


def wgmma_config(m: int, n: int, k: int, warps: int, dtype: str = "float16") -> DotConfig:
    """The register tiling of a [m, k] @ [k, n] ``wgmma`` over ``warps`` warps: ``dot``'s mma tiling with
    the warps stacked along m, each ``m / (16 warps)`` atom rows of 16 (one ``wgmma`` per warpgroup and
    atom row, ``n / 8`` atoms along n) and ``k / 16`` steps."""
    atom = get_mma_atom(dtype, dtype, "float32", k=16)
    return DotConfig("mma", atom, warps, 1, 1, m // (atom.m * warps), n // atom.n, k // atom.k)


def accumulator_layout(m: int, n: int, warps: Optional[int] = None) -> RegisterLayout:
    """The register layout of a float32 [m, n] ``wgmma`` accumulator over ``warps`` warps (default
    ``m / 16``: one atom row a warp)."""
    from tilus_tvm.instructions.dot import dot_layouts

    return dot_layouts(wgmma_config(m, n, 16, warps or m // 16))[2]


def _layouts(inst: ir.Wgmma, warps: int) -> tuple:
    """(a's layout or None for a shared a, the accumulator's layout)."""
    from tilus_tvm.instructions.dot import dot_layouts

    (m, k), n = inst.a.shape, inst.c.shape[1]
    a, _, c = dot_layouts(wgmma_config(m, n, k, warps, inst.a.dtype.name))
    return (a if isinstance(inst.a, RegisterTensor) else None), c


def _check_target(arch: str, op: str) -> None:
    if not arch.endswith("a"):
        raise CompileError(f"{op} needs an arch-specific target: compile for {arch}a, not {arch} (wgmma is "
                           f"sm_90a PTX; tilus_tvm picks sm_90a on an H100 or H200 by itself)")


def configure_wgmma(inst: ir.Wgmma, func) -> None:
    m, n = inst.c.shape
    groups = func.warps / WARPGROUP
    in_registers = isinstance(inst.a, RegisterTensor)
    rows = func.warps // WARPGROUP * ROWS_PER_WARPGROUP
    if func.warps % WARPGROUP or (m % rows if in_registers else m != rows):
        need = f"a multiple of {rows}" if in_registers else f"{rows}"
        raise CompileError(f"wgmma: acc has m={m} rows, but the block's {func.warps} warps make {groups:g} warpgroups "
                           f"of {ROWS_PER_WARPGROUP} rows (m must be {need}); use attrs.warps = "
                           f"{m // ROWS_PER_WARPGROUP * WARPGROUP} (4 warps per 64 rows)"
                           + (", or a multiple of 4 dividing that, with a in registers" if in_registers else ""))
    inst.warps = func.warps
    a_layout, c_layout = _layouts(inst, func.warps)
    if a_layout is not None:
        set_layout(inst.a, a_layout)
    set_layout(inst.c, c_layout)
    set_layout(inst.output, c_layout)


def _k_dim(tensor: SharedTensor, inst: ir.Wgmma) -> int:
    """The dimension of an operand view that runs along k: a's second, b's first."""
    return 1 if tensor is inst.a else 0


def row_swizzle(pitch_bytes: int) -> Optional[Swizzle]:
    """The swizzle ``wgmma`` reads 16-bit rows of ``pitch_bytes`` (32, 64 or 128) with, in 8-row groups
    (CuTe's ``Swizzle<B, 4, 3>`` on bytes); None for another pitch."""
    return Swizzle((pitch_bytes // 16).bit_length() - 1, 3, 3) if pitch_bytes in ptx.SWIZZLE_MODES else None


def operand_layout(root: SharedTensor) -> SharedLayout:
    """The layout ``wgmma`` reads a K-major root tile in: row-major (k along the last dimension), its
    rows of 32, 64 or 128 bytes swizzled in groups of 8."""
    pitch = root.shape[-1] * root.dtype.nbits // 8
    if pitch not in ptx.SWIZZLE_MODES:
        raise CompileError(f"wgmma: {root.describe()} has rows of {pitch} bytes along k; wgmma's K-major operands "
                           f"need rows of 32, 64 or 128 bytes (a k extent of 16, 32 or 64 for 16-bit types)")
    return shared_row_major(*root.shape).swizzled(row_swizzle(pitch))


def descriptor_bits(inst: ir.Wgmma, tensor: SharedTensor, func) -> tuple[int, int]:
    """(descriptor bits, row stride in elements) of operand ``tensor``; refuses a layout ``wgmma`` cannot read."""
    what = "a" if tensor is inst.a else "b"
    layout = tensor.resolved_layout()
    k_dim = _k_dim(tensor, inst)
    row_dim = 1 - k_dim
    nbits = tensor.dtype.nbits
    if layout.strides[k_dim] != 1:
        hint = " (b must be the transpose of an [n, k] tile, such as smem[s].transpose())" if what == "b" else ""
        raise CompileError(f"wgmma: {what} {tensor.describe()} is not K-major: its k dimension has stride "
                           f"{layout.strides[k_dim]}, wgmma reads operands whose k runs along contiguous memory{hint}")
    pitch = layout.strides[row_dim] * nbits // 8
    expected = row_swizzle(pitch)
    if expected is None or layout.swizzle != expected or tensor.shape[k_dim] * nbits // 8 > pitch:
        raise CompileError(f"wgmma: {what} {tensor.describe()} has layout {layout}; wgmma needs K-major rows of "
                           f"32, 64 or 128 bytes holding the whole k extent, swizzled with {expected or 'Sw<B,3,3>'}"
                           f" (create the shared tensor without a layout to get it)")
    period = 8 * layout.strides[row_dim]  # elements: the swizzle repeats every 8 rows
    if tensor.shape[row_dim] % 8 or not _divisible(tensor.element_offset(), period, func.analyzer()):
        raise CompileError(f"wgmma: {what} {tensor.describe()} must start on a multiple of 8 rows of its tile "
                           f"(the swizzle's period) and span whole groups of 8 rows")
    return ptx.descriptor_bits(pitch), layout.strides[row_dim]


def b_operand(inst: ir.Wgmma, func) -> tuple[int, bool, int]:
    """(descriptor bits, MN-major, elements between 16-wide k steps) of ``inst.b``: a K-major [k, n] view,
    or MN-major as [n / 64, k, 64] chunks (each [k, 64] row-major, 128-byte swizzled)."""
    b = inst.b
    if len(b.shape) == 2:
        bits, _ = descriptor_bits(inst, b, func)
        return bits, False, 16
    layout = b.resolved_layout()
    chunks, k, width = b.shape
    expected = row_swizzle(128)
    if b.dtype.nbits != 16 or width != 64 or tuple(layout.strides[1:]) != (64, 1) or layout.swizzle != expected:
        raise CompileError(f"wgmma: b {b.describe()} has layout {layout}; an MN-major b is [n / 64, k, 64] chunks of "
                           f"16-bit elements, each row-major and swizzled with {expected}")
    period = 8 * 64  # elements: 8 rows of 128 bytes
    if k % 16 or layout.strides[0] % period or not _divisible(b.element_offset(), period, func.analyzer()):
        raise CompileError(f"wgmma: b {b.describe()} must hold k in steps of 16 and start each chunk on a multiple of "
                           f"8 rows (the swizzle's period)")
    return ptx.mn_major_bits(layout.strides[0] * 2), True, 16 * 64


def _accumulators(func) -> list:
    found = []
    for inst in instructions(func.body):
        if isinstance(inst, ir.Wgmma) and all(inst.output is not t for t in found):
            found.append(inst.output)
    return found


def _pin_accumulators(ctx: CodegenContext, pin: Optional[tuple] = None) -> None:
    accumulators = _accumulators(ctx.func)
    for tensor in pin or ():
        if all(tensor is not acc for acc in accumulators):
            raise CompileError(f"wgmma: pin names {tensor.describe()}, which no wgmma of this kernel accumulates into")
    for tensor in accumulators if pin is None else pin:
        if id(tensor) in ctx.registers:
            Tb.evaluate(ptx.emit_fence_operand(ctx.reg(tensor), tensor.layout.local_size))


def emit_wgmma(ctx: CodegenContext, inst: ir.Wgmma) -> None:
    _check_target(ctx.func.arch, "wgmma")
    if inst.output is not inst.c:
        raise CompileError("wgmma: the accumulator is updated in place (output must be c)")
    if isinstance(inst.a, RegisterTensor):
        _emit_register_a(ctx, inst)
        return
    acc = ctx.reg(inst.output)
    (m, k), n = inst.a.shape, inst.c.shape[1]
    a_bits, a_rows = descriptor_bits(inst, inst.a, ctx.func)
    b_bits, transpose_b, b_step = b_operand(inst, ctx.func)
    group = ctx.tx // (WARPGROUP * 32)
    a_view, b_view = ctx.view(inst.a.root), ctx.view(inst.b.root)
    a_base = inst.a.element_offset() + group * (ROWS_PER_WARPGROUP * a_rows)
    b_base = inst.b.element_offset()
    for step in range(k // 16):
        # rows start on multiples of 8 and a step's 16 elements sit in one swizzle row: no XOR to apply
        a_ptr = tirx.address_of(a_view[a_base + step * 16])
        b_ptr = tirx.address_of(b_view[b_base + step * b_step])
        Tb.evaluate(ptx.emit_mma(n, inst.a.dtype.name, acc, a_ptr, a_bits, b_ptr, b_bits, transpose_b))


def _emit_register_a(ctx: CodegenContext, inst: ir.Wgmma) -> None:
    """One register-A ``wgmma`` per warpgroup, atom row and 16-wide k step: the A registers of atom row
    ``mi``, step ``ki`` start at slot ``(mi * repeat_k + ki) * 8`` (``dot``'s order) and its accumulator
    rows at ``mi * repeat_n * 4``, as the PTX fragments run."""
    (m, k), n = inst.a.shape, inst.c.shape[1]
    config = wgmma_config(m, n, k, ctx.func.warps, inst.a.dtype.name)
    acc, a = ctx.reg(inst.output), ctx.reg(inst.a)
    b_bits, transpose_b, b_step = b_operand(inst, ctx.func)
    b_view, b_base = ctx.view(inst.b.root), inst.b.element_offset()
    a_size, c_size = config.atom.a_layout.local_size, config.atom.c_layout.local_size
    for ki in range(config.repeat_k):
        b_ptr = tirx.address_of(b_view[b_base + ki * b_step])
        for mi in range(config.repeat_m):
            Tb.evaluate(ptx.emit_mma_rs(n, inst.a.dtype.name, tirx.address_of(acc[mi * config.repeat_n * c_size]),
                                        tirx.address_of(a[(mi * config.repeat_k + ki) * a_size]), b_ptr, b_bits,
                                        transpose_b))


def emit_wgmma_fence(ctx: CodegenContext, inst: ir.WgmmaFence) -> None:
    _check_target(ctx.func.arch, "wgmma_fence")
    _pin_accumulators(ctx, inst.pin)
    Tb.evaluate(ptx.emit_fence("tilus_wgmma_fence"))


def emit_wgmma_wait_group(ctx: CodegenContext, inst: ir.WgmmaWaitGroup) -> None:
    _check_target(ctx.func.arch, "wgmma_wait_group")
    Tb.evaluate(ptx.emit_wait_group(inst.n))
    _pin_accumulators(ctx, inst.pin)


def emit_wgmma_commit_group(ctx: CodegenContext, inst: ir.WgmmaCommitGroup) -> None:
    _check_target(ctx.func.arch, "wgmma_commit_group")
    Tb.evaluate(ptx.emit_fence("tilus_wgmma_commit_group"))


def _required(inst: ir.Wgmma) -> list:
    a_layout, c_layout = _layouts(inst, inst.warps)
    return [(inst.c, c_layout)] + ([(inst.a, a_layout)] if a_layout is not None else [])


def _produced(inst: ir.Wgmma) -> Optional[RegisterLayout]:
    return inst.c.layout


def shared_layouts_wgmma(inst: ir.Wgmma) -> list:
    """(root, layout) of each shared operand: the layout inference gives a root created without one."""
    return [(tensor.root, operand_layout(tensor.root)) for tensor in (inst.a, inst.b)
            if isinstance(tensor, SharedTensor)]


register(ir.Wgmma, FAMILY, emit=emit_wgmma, configure=configure_wgmma, required=_required, produced=_produced,
         shared_layouts=shared_layouts_wgmma)
register(ir.WgmmaFence, FAMILY, emit=emit_wgmma_fence)
register(ir.WgmmaCommitGroup, FAMILY, emit=emit_wgmma_commit_group)
register(ir.WgmmaWaitGroup, FAMILY, emit=emit_wgmma_wait_group)
register(ir.FenceProxyAsync, FAMILY, emit=lambda ctx, inst: Tb.evaluate(ptx.emit_fence("tilus_fence_proxy_async")))
