"""Just-in-time compilation: one kernel per specialisation, cached in memory and on disk.

A specialisation is fixed by the kernel's hyper-parameters (its ``__init__`` attributes), the
values of its compile-time (``int``/``float``/``bool``) arguments, which pointer arguments are
16-byte aligned, and the target. The first call of each compiles (with a ``[Building] name``
progress bar) or loads it from the disk cache; later calls go straight to the launch.
"""
from __future__ import annotations

import functools
from typing import Any

import tvm
from tqdm import tqdm

from tilus_tvm.errors import CompileError
from tilus_tvm.lang.script import Script
from tilus_tvm.lang.signature import ParamSpec, kernel_signature
from tilus_tvm.lang.transpile import transpile
from tilus_tvm.runtime import arguments, cache
from tilus_tvm.runtime.kernel import CompiledKernel, grid_source
from tilus_tvm.runtime.target import resolve_target, shared_memory_limit


@functools.cache
def _signature(cls: type) -> list[ParamSpec]:
    if cls._kernel_fn is None:
        raise CompileError(f"{cls.__name__} defines no __call__ kernel")
    return kernel_signature(cls._kernel_fn, cls.__name__)


def display_name(script: Script, bound: arguments.BoundArguments) -> str:
    parts = [type(script).kernel_name()] + [str(v) for v in bound.const_values.values()]
    return "-".join(parts)


def lower(script: Script, specs: list[ParamSpec], bound: arguments.BoundArguments, arch: str):
    """Frontend, passes and code generation: the TIR PrimFunc and its tile-IR function."""
    from tilus_tvm.backend.codegen import generate
    from tilus_tvm.passes.layout_inference import infer_layouts
    from tilus_tvm.passes.shared_memory import plan_shared_memory

    func = transpile(script, specs, bound.const_values, bound.aligned)
    infer_layouts(func)
    plan = plan_shared_memory(func, shared_memory_limit(arch))
    return func, generate(func, plan)


def build(script: Script, specs: list[ParamSpec], bound: arguments.BoundArguments, target: Any) -> CompiledKernel:
    tvm_target, arch = resolve_target(target)
    name = display_name(script, bound)
    key = cache.kernel_key(type(script), script.hyper_parameters(), bound.key, arch)
    entry = cache.load_entry(key)
    if entry is not None:
        meta = entry["meta"]
        return CompiledKernel(meta["name"], name, arch, tvm_target, specs, dict(bound.const_values),
                              meta["grid"], meta["num_threads"],
                              meta["shared_bytes"], entry["cuda"], entry["tir"], library_path=entry["library"],
                              from_cache=True)
    with tqdm(total=1, desc=f"[Building] {name}", leave=False) as progress:
        func, prim_func = lower(script, specs, bound, arch)
        try:
            executable = tvm.compile(prim_func, target=tvm_target, tir_pipeline="tirx")
        except Exception as exc:  # noqa: BLE001 - TVM raises many types; the user needs the kernel named
            raise CompileError(f"TVM failed to compile kernel {name}: {exc}") from exc
        cuda_source = executable.mod.imports[0].inspect_source()
        tir_text = prim_func.script()
        progress.update(1)
    grid = grid_source(func.blocks, specs)
    meta = {"name": func.name, "grid": grid, "num_threads": func.num_threads, "shared_bytes": func.shared_bytes}
    library = cache.store_entry(key, executable, tir_text, cuda_source, meta)
    kernel = CompiledKernel(func.name, name, arch, tvm_target, specs, dict(bound.const_values), grid,
                            func.num_threads, func.shared_bytes, cuda_source, tir_text, executable=executable,
                            library_path=library)
    kernel._prim_func = prim_func
    return kernel


def _kernel_for(script: Script, bound: arguments.BoundArguments, target: Any) -> CompiledKernel:
    kernels = script._tilus.kernels
    lookup = (bound.key, target if isinstance(target, (str, type(None))) else str(target))
    kernel = kernels.get(lookup)
    if kernel is None:
        kernel = build(script, _signature(type(script)), bound, target)
        kernels[lookup] = kernel
    return kernel


def launch(script: Script, args: tuple) -> None:
    specs = _signature(type(script))
    bound = arguments.bind(specs, args, type(script).__name__, require_cuda=True)
    _kernel_for(script, bound, None).launch(bound)


def compile_for(script: Script, args: tuple, target: Any) -> CompiledKernel:
    specs = _signature(type(script))
    bound = arguments.bind(specs, args, type(script).__name__, require_cuda=False)
    return _kernel_for(script, bound, target)
