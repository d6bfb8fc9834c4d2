"""The lowering pipeline: Script -> tile IR -> passes (verified between each) -> TIR ``IRModule``.

Needs neither a GPU nor torch tensors with memory: arguments only select a specialisation (the
values of compile-time parameters, tensor dtypes, whether pointers are 16-byte aligned), so
``device="meta"`` tensors are accepted. ``tilus_tvm.runtime`` compiles and launches what this
module produces; nothing here imports the runtime.

    kernel.tile_program(*args)                 # the tile program after all passes (str() prints it)
    kernel.lower(*args, target="sm_90")        # the tvm.IRModule that would be compiled
    kernel.lower(*args, target="sm_90", dps=True)   # inputs, outputs, then shape scalars

The passes, in order: ``layout_inference`` (every register tensor gets a layout, conversions are
inserted), ``shared_layout_inference`` (shared tensors get bank-conflict-free swizzles), ``shared_memory`` (one pool, byte offsets and its size), ``kernel_abi`` (shaped buffer
parameters, reads and writes). With ``tilus_tvm.option.dump_ir(directory)`` (or the environment
variable ``TILUS_TVM_DUMP_IR``) the program after each pass and the final TIR are written to
``<directory>/<kernel>/NN_<pass>.txt``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from tilus_tvm.errors import CompileError
from tilus_tvm.lang.script import Script
from tilus_tvm.lang.signature import ParamSpec, kernel_signature


@dataclass(frozen=True)
class Specialization:
    """What selects one compiled kernel: compile-time values, aligned pointers and the target arch."""

    const_values: tuple[tuple[str, Any], ...]
    aligned: frozenset
    arch: str
    pointer_dtypes: tuple[tuple[str, Any], ...] = ()  # the tensors' dtypes of ~void parameters


@dataclass
class LoweredKernel:
    """A kernel after the pipeline: its tile program, shared-memory plan, ABI and TIR."""

    func: Any  # tilus_tvm.ir.stmt.Function, after every pass
    plan: Any  # tilus_tvm.passes.shared_memory.SharedMemoryPlan
    abi: Any  # tilus_tvm.passes.kernel_abi.KernelABI
    specs: list[ParamSpec]
    prim_func: Any = None  # tvm.tirx.PrimFunc, Script argument order
    _dps: Any = field(default=None, repr=False)

    def dps_prim_func(self):
        """The destination-passing PrimFunc: inputs, outputs, then the run-time scalars."""
        if self._dps is None:
            from tilus_tvm.backend.codegen import generate
            from tilus_tvm.passes.kernel_abi import check_dps

            check_dps(self.func, self.abi)
            by_name = {p.name: p for p in self.func.params}
            order = [by_name[p.name] for p in self.abi.dps_order()]
            self._dps = generate(self.func, self.plan, params=order,
                                 attrs={"tirx.is_scheduled": True, "op_pattern": 8, **access_attrs(self.abi)})
        return self._dps


def access_attrs(abi) -> dict:
    """PrimFunc attributes naming the tensors the kernel reads and those it writes."""
    return {"tilus.reads": [p.name for p in abi.params if p.kind == "tensor" and p.reads],
            "tilus.writes": [p.name for p in abi.params if p.kind == "tensor" and p.writes]}


@functools.cache
def signature(cls: type) -> list[ParamSpec]:
    if cls._kernel_fn is None:
        raise CompileError(f"{cls.__name__} defines no __call__ kernel")
    return kernel_signature(cls._kernel_fn, cls.__name__)


def _pass_list() -> list[tuple[str, Callable]]:
    from tilus_tvm.passes.kernel_abi import plan_kernel_abi
    from tilus_tvm.passes.layout_inference import infer_layouts
    from tilus_tvm.passes.shared_layout import infer_shared_layouts
    from tilus_tvm.passes.shared_memory import plan_shared_memory
    from tilus_tvm.target import shared_memory_limit

    return [
        ("layout_inference", lambda state: infer_layouts(state.func)),
        ("shared_layout_inference", lambda state: infer_shared_layouts(state.func)),
        ("shared_memory", lambda state: setattr(state, "plan",
                                                plan_shared_memory(state.func, shared_memory_limit(state.func.arch)))),
        ("kernel_abi", lambda state: setattr(state, "abi", plan_kernel_abi(state.func))),
    ]


class _Dumper:
    """Writes the program after each pass when IR dumps are on (tilus_tvm.option.dump_ir)."""

    def __init__(self, kernel_name: str):
        from tilus_tvm import option

        self.option = option
        self.kernel_name = kernel_name
        self.enabled = option.dump_directory() is not None
        self.index = 0

    def write(self, pass_name: str, text_of: Callable[[], str], suffix: str = ".txt") -> None:
        if self.enabled:
            self.option.write_dump(self.kernel_name, self.index, pass_name, text_of(), suffix=suffix)
        self.index += 1


def run_passes(script: Script, specs: list[ParamSpec], spec: Specialization) -> LoweredKernel:
    """Frontend and passes, with the verifier between each pass: the tile program ready for codegen."""
    from tilus_tvm import option
    from tilus_tvm.ir.printer import print_function
    from tilus_tvm.ir.verifier import verify
    from tilus_tvm.lang.transpile import transpile

    func = transpile(script, specs, dict(spec.const_values), spec.aligned, spec.arch, dict(spec.pointer_dtypes))
    state = LoweredKernel(func, None, None, specs)
    dumper = _Dumper(func.name)
    checking = option.get_option("debug.verify")
    if checking:
        verify(func, "transpile", require_layouts=False)
    dumper.write("transpile", lambda: print_function(func))
    for name, run in _pass_list():
        run(state)
        if checking:
            verify(func, name, require_layouts=True)
        dumper.write(name, lambda: print_function(func))
    state.dumper = dumper
    return state


def lower_specialized(script: Script, specs: list[ParamSpec], spec: Specialization) -> LoweredKernel:
    """Everything up to the TIR PrimFunc of one specialisation."""
    from tilus_tvm.backend.codegen import generate

    lowered = run_passes(script, specs, spec)
    lowered.prim_func = generate(lowered.func, lowered.plan, attrs=access_attrs(lowered.abi))
    lowered.dumper.write("tir", lambda: lowered.prim_func.script(), suffix=".py")
    return lowered


def specialize(script: Script, args: tuple, target: Any = None) -> tuple[list[ParamSpec], Specialization]:
    """The parameters of ``script`` and the specialisation ``args`` select for ``target``.

    Tensors may live anywhere (``device="meta"`` included): only their dtype and alignment matter.
    """
    from tilus_tvm.lang.arguments import bind
    from tilus_tvm.target import resolve_arch

    specs = signature(type(script))
    bound = bind(specs, args, type(script).__name__, require_cuda=False)
    return specs, Specialization(tuple(bound.const_values.items()), bound.aligned, resolve_arch(target),
                                 tuple(bound.pointer_dtypes.items()))


def tile_program(script: Script, args: tuple, target: Any = None):
    """The tile program of ``script`` for ``args`` after every pass (``str()`` prints it)."""
    specs, spec = specialize(script, args, target)
    return run_passes(script, specs, spec).func


def lower(script: Script, args: tuple, target: Any = None, dps: bool = False):
    """The ``tvm.IRModule`` that would be compiled for ``args`` (``dps``: destination-passing form)."""
    import tvm

    specs, spec = specialize(script, args, target)
    lowered = lower_specialized(script, specs, spec)
    prim_func = lowered.dps_prim_func() if dps else lowered.prim_func
    return tvm.IRModule({lowered.func.name: prim_func})
