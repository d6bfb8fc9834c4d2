"""Shared-layout inference: give every shared tensor created without a layout one that suits its uses.

Candidates are the row-major layout of the tensor and its swizzles ``Swizzle(B, M, S)`` with
``2**M`` elements = 16 bytes (so 16-byte vectors and ``ldmatrix`` rows stay whole). Each
candidate is scored with the bank-conflict model (:func:`tilus_tvm.layout.shared.bank_conflicts`)
over the shared-memory requests of one warp of every instruction that uses the tensor, as its
registry entry describes them (``shared_accesses``: ``cp.async`` stores, ``ldmatrix`` loads,
element loads and stores). The cheapest wins; among equals the one with the fewest swizzle bits.
A layout given to ``shared_tensor(layout=...)`` or ``annotate_layout`` is kept as it is. A layout an
instruction requires (the registry's ``shared_layouts`` hook: ``wgmma``'s operands) is taken without
scoring.
"""
from __future__ import annotations

from tilus_tvm.errors import LayoutError
from tilus_tvm.instructions import lookup
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.stmt import Function, instructions
from tilus_tvm.ir.tensor import SharedTensor
from tilus_tvm.layout.shared import SharedLayout, bank_conflicts, shared_row_major
from tilus_tvm.layout.swizzle import Swizzle


def candidate_layouts(shape: tuple[int, ...], dtype_bits: int) -> list[SharedLayout]:
    """Row-major and its swizzles that keep 16-byte units whole, simplest first. A swizzle must fit
    the trailing 2-D tile, so that every sub-tensor (a pipeline stage ``smem[i]``) is swizzled alike."""
    base = shared_row_major(*shape)
    unit = max(0, (128 // dtype_bits).bit_length() - 1)  # log2(elements per 16 bytes)
    found = [base]
    for bits in (1, 2, 3):
        for shift in range(bits, 8):
            swizzle = Swizzle(bits, unit, shift)
            try:
                shared_row_major(*shape[-2:]).swizzled(swizzle)
                found.append(base.swizzled(swizzle))
            except LayoutError:
                continue
    return found


def _shared_operands(inst: ir.Instruction) -> list[SharedTensor]:
    return [getattr(inst, name) for name in ("src", "dst") if isinstance(getattr(inst, name, None), SharedTensor)]


def _cost(layout: SharedLayout, uses: list, arch: str, dtype_bits: int) -> int:
    total = 0
    for inst in uses:
        accesses = lookup(type(inst), arch).shared_accesses
        if accesses is None:
            continue
        for request in accesses(inst, _view_layout(inst, layout)):
            try:
                total += bank_conflicts(layout, request, dtype_bits).wavefronts
            except LayoutError:  # this layout cannot serve the request as one vector access
                total += 32
    return total


def _view_layout(inst: ir.Instruction, root_layout: SharedLayout) -> SharedLayout:
    """The layout the instruction's (possibly viewed) shared operand would have under ``root_layout``."""
    (tensor,) = _shared_operands(inst)
    return tensor.view_layout(root_layout)


def _required_layouts(func: Function) -> dict[int, SharedLayout]:
    """The layouts instructions require of roots created without one (registry hook ``shared_layouts``);
    two different requirements on one root are an error."""
    required: dict[int, SharedLayout] = {}
    for inst in instructions(func.body):
        hook = lookup(type(inst), func.arch).shared_layouts
        if hook is None:
            continue
        for root, layout in hook(inst):
            if root.layout is not None:
                continue  # the author's layout; the instruction checks it when it is emitted
            if required.setdefault(id(root), layout) != layout:
                raise LayoutError(f"shared tensor {root.describe()} is used by instructions that need different "
                                  f"layouts: {required[id(root)]} and {layout}")
    return required


def infer_shared_layouts(func: Function) -> Function:
    uses: dict[int, list] = {}
    roots: dict[int, SharedTensor] = {}
    for inst in instructions(func.body):
        if isinstance(inst, ir.AllocateShared):
            roots[id(inst.output)] = inst.output
        for tensor in _shared_operands(inst):
            uses.setdefault(id(tensor.root), []).append(inst)
    required = _required_layouts(func)
    for key, tensor in roots.items():
        if tensor.layout is not None:
            continue
        if key in required:
            tensor.layout = required[key]
            continue
        candidates = candidate_layouts(tensor.shape, tensor.dtype.nbits)
        scored = [(_cost(layout, uses.get(key, []), func.arch, tensor.dtype.nbits), i, layout)
                  for i, layout in enumerate(candidates)]
        tensor.layout = min(scored)[2]
    return func
