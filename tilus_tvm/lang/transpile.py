"""From a Script instance and the compile-time values of one specialisation to a tile-IR function."""
from __future__ import annotations

from typing import Any, Mapping

from tvm import tirx

from tilus_tvm.backend.codegen import block_iter_vars
from tilus_tvm.errors import ScriptError
from tilus_tvm.instructions.registry import family_level
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.builder import Builder
from tilus_tvm.ir.scalar import c_identifier
from tilus_tvm.ir.stmt import Function, Param, instructions
from tilus_tvm.lang.frontend import Transpiler
from tilus_tvm.lang.pointer import PointerValue
from tilus_tvm.lang.script import Attributes, Dim3, Script
from tilus_tvm.lang.signature import ParamSpec
from tilus_tvm.lowp import pointer_storage_dtype


def make_params(specs: list[ParamSpec], const_values: Mapping[str, Any],
                pointer_dtypes: Mapping[str, Any] = None) -> tuple[list[Param], dict[str, Any]]:
    """The IR parameters and the values their names have inside the kernel body."""
    params, bindings = [], {}
    for spec in specs:
        if spec.kind == "const":
            param = Param(spec.name, "const", value=const_values[spec.name])
            bindings[spec.name] = param.value
        elif spec.kind == "scalar":
            param = Param(spec.name, "scalar", spec.dtype, var=tirx.Var(c_identifier(spec.name), spec.dtype.name))
            bindings[spec.name] = param.var
        else:
            dtype = (pointer_dtypes or {}).get(spec.name, spec.dtype)  # a ~void parameter: its tensor's dtype
            if dtype.name == "void":
                raise ScriptError(f"pointer parameter {spec.name} is ~void; give a tensor to learn its dtype")
            numel = tirx.Var(f"{spec.name}_numel", "int32")  # kernels index with int32 (checked at launch)
            # packed low-precision types: a buffer of their bytes (tilus_tvm.lowp.pointer_storage_dtype)
            buffer = tirx.decl_buffer((numel,), pointer_storage_dtype(dtype), c_identifier(spec.name))
            param = Param(spec.name, "pointer", dtype, buffer=buffer)
            bindings[spec.name] = PointerValue(param)
        params.append(param)
    return params, bindings


def transpile(script: Script, specs: list[ParamSpec], const_values: Mapping[str, Any],
              aligned_pointers: frozenset = frozenset(), arch: str = "sm_80",
              pointer_dtypes: Mapping[str, Any] = None) -> Function:
    """Translate ``script.__call__`` for one specialisation into a tile-IR :class:`Function`."""
    cls = type(script)
    params, bindings = make_params(specs, const_values, pointer_dtypes)
    state = script._tilus
    state.attrs = Attributes()
    block_ivs = block_iter_vars()
    state.block_idx = Dim3(*(iv.var for iv in block_ivs))
    builder = Builder(lambda: state.attrs.warps)
    state.builder = builder
    state.aligned_pointers = frozenset(aligned_pointers)
    try:
        Transpiler(script, cls._kernel_fn, bindings, builder).run()
    finally:
        state.block_idx = None
        state.builder = None
        state.aligned_pointers = frozenset()
    if state.attrs.blocks is None:
        raise ScriptError(f"{cls.__name__}.__call__ never sets self.attrs.blocks (the grid size)")
    if state.attrs.warps is None:
        raise ScriptError(f"{cls.__name__}.__call__ never sets self.attrs.warps (warps per block)")
    if state.attrs.dependent_launch:
        check_dependent_launch(cls.__name__, builder.body, arch)
    return Function(cls.kernel_name(), params, state.attrs.blocks, state.attrs.warps, builder.body,
                    block_vars=block_ivs, aligned_pointers=aligned_pointers, arch=arch,
                    min_blocks_per_sm=state.attrs.min_blocks_per_sm, dependent_launch=state.attrs.dependent_launch)


def check_dependent_launch(name: str, body: Any, arch: str) -> None:
    """``attrs.dependent_launch`` needs Hopper and a ``grid_dependency_wait`` in the kernel: without one,
    the kernel would read the work before it while that work still runs."""
    if family_level(arch) < 90:
        raise ScriptError(f"{name}: attrs.dependent_launch (programmatic dependent launch) needs sm_90 or newer, "
                          f"the target is {arch}")
    if not any(isinstance(inst, ir.GridDependencyWait) for inst in instructions(body)):
        raise ScriptError(f"{name}: attrs.dependent_launch is set but the kernel never calls "
                          f"self.grid_dependency_wait(): it would read what the work before it writes while that "
                          f"work runs")
