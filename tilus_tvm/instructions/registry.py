"""The instruction registry: one entry per (instruction type, target family).

An entry holds everything the compiler knows about one instruction on one family of targets:

- ``emit(ctx, inst)``: generate its TIR through the code-generation context it is given;
- ``configure(inst, func)``: choose how it runs before layouts flow (``dot`` picks its mma tiling);
- ``propagate(inst) -> bool``: give layouts to its tensors from its other tensors' layouts;
- ``required(inst) -> [(operand, layout)]``: the layout each constrained operand must have
  (layout inference converts the ones that differ);
- ``produced(inst) -> layout | None``: the layout it produces when not free to produce any;
- ``scratch(inst) -> bytes``: the shared memory it needs while it runs;
- ``shared_accesses(inst, layout) -> [request]``: the shared-memory requests of one warp (each a
  list of per-lane ``(index, vector length)`` into the instruction's shared tensor, as the bank
  conflict model takes them) if the tensor had ``layout``; shared-layout inference scores
  candidate swizzles with them;
- ``shared_layouts(inst) -> [(root, layout)]``: layouts the instruction cannot do without (``wgmma``'s
  swizzled operands); shared-layout inference gives them to roots created without a layout.

Passes and the backend look entries up here (:func:`lookup`); they never name an instruction.
Adding an instruction for a target, or a second target for an instruction (Hopper after Ampere),
is one module under ``tilus_tvm/instructions/`` that calls :func:`register`.

Target families are ``sm_XY`` names. An entry registered for ``sm_80`` serves every target from
sm_80 up, unless an entry for a newer family (``sm_90``) also exists and the target reaches it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from tilus_tvm.errors import CompileError

BASE_FAMILY = "sm_80"  # Ampere-level instructions: the oldest family the package generates code for


@dataclass(frozen=True)
class InstructionImpl:
    """How one instruction type compiles for one target family (see the module docstring)."""

    inst_type: type
    family: str
    emit: Callable[[Any, Any], None]
    configure: Optional[Callable[[Any, Any], None]] = None
    propagate: Optional[Callable[[Any], bool]] = None
    required: Optional[Callable[[Any], list]] = None
    produced: Optional[Callable[[Any], Any]] = None
    scratch: Optional[Callable[[Any], int]] = None
    shared_accesses: Optional[Callable[[Any, Any], list]] = None
    shared_layouts: Optional[Callable[[Any], list]] = None

    def scratch_bytes(self, inst: Any) -> int:
        return self.scratch(inst) if self.scratch is not None else 0

    def required_operands(self, inst: Any) -> list:
        return self.required(inst) if self.required is not None else []

    def produced_layout(self, inst: Any) -> Any:
        return self.produced(inst) if self.produced is not None else None


_REGISTRY: dict[tuple[type, str], InstructionImpl] = {}


def family_level(family: str) -> int:
    """``"sm_90a"`` -> 90: the compute capability a family (or an arch) stands for."""
    digits = "".join(ch for ch in family if ch.isdigit())
    if not family.startswith("sm_") or not digits:
        raise CompileError(f"target family {family!r} must look like 'sm_80'")
    return int(digits)


def register(inst_type: type, family: str = BASE_FAMILY, **hooks: Any) -> InstructionImpl:
    """Register how ``inst_type`` compiles for ``family`` (and newer families without their own entry)."""
    family_level(family)
    key = (inst_type, family)
    if key in _REGISTRY:
        raise CompileError(f"instruction {inst_type.__name__} is registered twice for {family}")
    impl = InstructionImpl(inst_type, family, **hooks)
    _REGISTRY[key] = impl
    return impl


def lookup(inst_type: type, arch: str) -> InstructionImpl:
    """The entry of ``inst_type`` for target ``arch`` (``"sm_90"``): the newest family not newer than it."""
    level = family_level(arch)
    best: Optional[InstructionImpl] = None
    for (registered_type, family), impl in _REGISTRY.items():
        if registered_type is inst_type and family_level(family) <= level:
            if best is None or family_level(family) > family_level(best.family):
                best = impl
    if best is None:
        families = sorted(f for t, f in _REGISTRY if t is inst_type)
        raise CompileError(f"instruction {inst_type.__name__} has no implementation for {arch}"
                           + (f" (it has one for {', '.join(families)})" if families else ""))
    return best


def registered() -> list[InstructionImpl]:
    """Every entry, for documentation and tests."""
    return list(_REGISTRY.values())
