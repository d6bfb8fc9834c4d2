"""Just-in-time compilation: one kernel per specialisation, cached in memory and on disk.

A specialisation is fixed by the kernel's hyper-parameters (its ``__init__`` attributes), the
values of its compile-time (``int``/``float``/``bool``) arguments, which pointer arguments are
16-byte aligned, and the target. The first call of each compiles (with a ``[Building] name``
progress bar) or loads it from the disk cache; later calls go straight to the launch. Lowering
itself is :mod:`tilus_tvm.pipeline`; this module compiles what it produces.

A launch first tries the Script instance's :class:`~tilus_tvm.runtime.launcher.LaunchTable`
(``script._tilus.launch_table``): one dictionary look-up by a key made of the compile-time
arguments and the tensors' alignment, then the kernel's generated launcher. Anything else --
the first launch of a specialisation, arguments that need checking or converting, an error --
takes the careful path: :func:`arguments.bind` checks every argument, the kernel is found or
built, :meth:`CompiledKernel.launch` launches it (or says why not), and the launcher is added to
the table for the next launch with such arguments.
"""
from __future__ import annotations

from typing import Any

from tilus_tvm.errors import CompileError
from tilus_tvm.option import launch_blocking_enabled
from tilus_tvm.lang.script import Script
from tilus_tvm.lang.signature import ParamSpec
from tilus_tvm.pipeline import Specialization, lower_specialized, signature
from tilus_tvm.lang import arguments
from tilus_tvm.runtime import cache
from tilus_tvm.runtime.kernel import CompiledKernel, grid_source
from tilus_tvm.runtime.launcher import LaunchTable
from tilus_tvm.target import resolve_arch, tvm_target


def display_name(script: Script, bound: arguments.BoundArguments) -> str:
    parts = [type(script).kernel_name()] + [dtype.name for dtype in bound.pointer_dtypes.values()]
    return "-".join(parts + [str(v) for v in bound.const_values.values()])


def build(script: Script, specs: list[ParamSpec], bound: arguments.BoundArguments, arch: str) -> CompiledKernel:
    from tilus_tvm.passes.kernel_abi import KernelABI

    name = display_name(script, bound)
    key = cache.kernel_key(type(script), script.hyper_parameters(), bound.key, arch)
    entry = cache.load_entry(key)
    if entry is not None:
        meta = entry["meta"]
        return CompiledKernel(meta["name"], name, arch, specs, dict(bound.const_values), meta["grid"],
                              meta["num_threads"], meta["shared_bytes"], KernelABI.from_json(meta["abi"]),
                              entry["cuda"], entry["tir"], library_path=entry["library"], from_cache=True,
                              aligned=bound.aligned, pointer_dtypes=dict(bound.pointer_dtypes))
    import tvm
    from tqdm import tqdm

    with tqdm(total=1, desc=f"[Building] {name}", leave=False) as progress:
        spec = Specialization(tuple(bound.const_values.items()), bound.aligned, arch,
                              tuple(bound.pointer_dtypes.items()))
        lowered = lower_specialized(script, specs, spec)
        try:
            executable = tvm.compile(lowered.prim_func, target=tvm_target(arch), tir_pipeline="tirx")
        except Exception as exc:  # noqa: BLE001 - TVM raises many types; the user needs the kernel named
            raise CompileError(f"TVM failed to compile kernel {name}: {exc}") from exc
        cuda_source = executable.mod.imports[0].inspect_source()
        tir_text = lowered.prim_func.script()
        progress.update(1)
    func = lowered.func
    grid = grid_source(func.blocks, specs)
    meta = {"name": func.name, "grid": grid, "num_threads": func.num_threads, "shared_bytes": func.shared_bytes,
            "abi": lowered.abi.to_json()}
    library = cache.store_entry(key, executable, tir_text, cuda_source, meta)
    kernel = CompiledKernel(func.name, name, arch, specs, dict(bound.const_values), grid, func.num_threads,
                            func.shared_bytes, lowered.abi, cuda_source, tir_text, executable=executable,
                            library_path=library, aligned=bound.aligned, pointer_dtypes=dict(bound.pointer_dtypes))
    kernel._prim_func = lowered.prim_func
    return kernel


def _kernel_for(script: Script, bound: arguments.BoundArguments, target: Any) -> CompiledKernel:
    kernels = script._tilus.kernels
    lookup = (bound.key, target if isinstance(target, (str, type(None))) else str(target))
    kernel = kernels.get(lookup)
    if kernel is None:
        kernel = build(script, signature(type(script)), bound, resolve_arch(target))
        kernels[lookup] = kernel
    return kernel


def launch(script: Script, args: tuple) -> None:
    try:
        script._tilus.launch_table.dispatch(*args)
        dispatched = True
    except Exception:  # noqa: BLE001 - no table yet, a new key, refused arguments: the careful path says why
        dispatched = False
    if not dispatched:
        launch_carefully(script, args)
    if launch_blocking_enabled():  # tilus_tvm.option.debug.launch_blocking(): errors surface at their launch
        import torch

        torch.cuda.synchronize()


def launch_carefully(script: Script, args: tuple) -> None:
    """Check every argument, find or build the kernel, launch it, and remember its launcher."""
    specs = signature(type(script))
    if len(args) == len(specs):
        unwrapped = arguments.unwrap_packed(specs, args, type(script).__name__)
        table = getattr(script._tilus, "launch_table", None)
        if unwrapped is not args and table is not None:  # PackedTensors: the launcher of their torch tensors
            try:
                table.dispatch(*unwrapped)
                return
            except Exception:  # noqa: BLE001 - as in launch(): the careful path below says why
                pass
        args = unwrapped  # (the launch table is keyed on torch tensors)
    bound = arguments.bind(specs, args, type(script).__name__, require_cuda=True)
    kernel = _kernel_for(script, bound, None)
    kernel.launch(bound)
    state = script._tilus
    table = getattr(state, "launch_table", None)
    if table is None:
        table = state.launch_table = LaunchTable(specs)
    table.add(args, kernel.launcher())


def compile_for(script: Script, args: tuple, target: Any) -> CompiledKernel:
    specs = signature(type(script))
    bound = arguments.bind(specs, args, type(script).__name__, require_cuda=False)
    return _kernel_for(script, bound, target)
