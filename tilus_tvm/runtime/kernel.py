"""A compiled kernel: its TIR, CUDA source, PTX, the loaded module, and the launch itself."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from typing import Any, Optional

import tvm
from tvm import tirx

from tilus_tvm.errors import CompileError, LaunchError
from tilus_tvm.lang.signature import ParamSpec
from tilus_tvm.runtime import arguments

MAX_GRID = (2**31 - 1, 65535, 65535)


def expr_to_python(expr: Any, names: dict[str, str]) -> str:
    """Python source computing an integer PrimExpr of scalar parameters (for the launch grid)."""
    if isinstance(expr, (int,)):
        return str(expr)
    if isinstance(expr, tirx.IntImm):
        return str(expr.value)
    if isinstance(expr, tirx.Var):
        if expr.name not in names:
            raise CompileError(f"the grid size depends on {expr.name}, which is not a scalar parameter")
        return names[expr.name]
    if isinstance(expr, tirx.Cast):
        return f"int({expr_to_python(expr.value, names)})"
    binary = {tirx.Add: "({} + {})", tirx.Sub: "({} - {})", tirx.Mul: "({} * {})", tirx.FloorDiv: "({} // {})",
              tirx.FloorMod: "({} % {})", tirx.Min: "min({}, {})", tirx.Max: "max({}, {})"}
    for node_type, template in binary.items():
        if isinstance(expr, node_type):
            return template.format(expr_to_python(expr.a, names), expr_to_python(expr.b, names))
    if isinstance(expr, tirx.Select):
        return (f"({expr_to_python(expr.true_value, names)} if {expr_to_python(expr.condition, names)} "
                f"else {expr_to_python(expr.false_value, names)})")
    compare = {tirx.LT: "<", tirx.LE: "<=", tirx.GT: ">", tirx.GE: ">=", tirx.EQ: "==", tirx.NE: "!="}
    for node_type, symbol in compare.items():
        if isinstance(expr, node_type):
            return f"({expr_to_python(expr.a, names)} {symbol} {expr_to_python(expr.b, names)})"
    raise CompileError(f"cannot compute the grid size {expr} on the host")


def grid_source(blocks: tuple[Any, ...], specs: list[ParamSpec]) -> str:
    """Python source of a lambda taking the run-time scalar arguments and returning the grid."""
    scalar_names = [s.name for s in specs if s.kind == "scalar"]
    names = {n: f"a{i}" for i, n in enumerate(scalar_names)}
    dims = [expr_to_python(b, names) for b in blocks]
    return f"lambda {', '.join(names.values()) or '*_'}: ({', '.join(dims)},)"


@dataclass
class CompiledKernel:
    """One specialisation of a kernel, compiled for one target.

    ``prim_func`` is the TVM TIR (``print(k.prim_func.script())``), ``cuda_source`` the generated CUDA,
    ``ptx`` the PTX (compiled with nvcc on first access), ``export(path)`` writes a shared library
    that :func:`tilus_tvm.load_kernel` (or ``tvm.runtime.load_module``) loads without recompiling.
    Calling it launches the kernel on the current CUDA stream with the same arguments as the
    Script (compile-time arguments must equal the ones it was compiled for).
    """

    name: str
    display_name: str
    arch: str
    target: Any
    specs: list[ParamSpec]
    const_values: dict[str, Any]
    grid_source: str  # see grid_source(); kept as text so a cached kernel needs no frontend run
    num_threads: int
    shared_bytes: int
    cuda_source: str
    tir_text: str
    executable: Any = None  # tvm.runtime.Executable when compiled in this process
    library_path: Optional[str] = None  # the exported .so, when it exists on disk
    from_cache: bool = False
    _prim_func: Any = field(default=None, repr=False)
    _ptx: Optional[str] = field(default=None, repr=False)
    _function: Any = field(default=None, repr=False)
    _grid: Any = field(default=None, repr=False)

    @property
    def prim_func(self) -> tirx.PrimFunc:
        if self._prim_func is None:
            self._prim_func = tvm.script.from_source(self.tir_text)
        return self._prim_func

    @property
    def ptx(self) -> str:
        if self._ptx is None:
            from tvm.support import nvcc

            with self.target:
                self._ptx = nvcc.compile_cuda(self.cuda_source, target_format="ptx", arch=self.arch,
                                              compiler="nvcc").decode()
        return self._ptx

    def export(self, path: str) -> str:
        """Write the kernel as a shared library, plus ``<path>.json`` describing its signature, so
        :func:`load_kernel` gives back a launchable kernel later without recompiling. The library alone
        is a TVM module too (``tvm.runtime.load_module(path)[name]``, pointers passed as 1-D tensors)."""
        path = str(path)
        if self.executable is not None:
            self.executable.export_library(path)
        elif self.library_path is not None:
            shutil.copyfile(self.library_path, path)
        else:
            raise CompileError(f"kernel {self.display_name} has no library to export")
        with open(path + ".json", "w") as f:
            json.dump(self.description(), f, indent=1)
        return path

    def description(self) -> dict[str, Any]:
        """Everything but the library: what load_kernel needs to launch it again."""
        return {
            "name": self.name, "display_name": self.display_name, "arch": self.arch,
            "params": [[s.name, s.kind, s.annotation.__name__ if s.kind == "const" else repr(s.annotation)]
                       for s in self.specs],
            "const_values": self.const_values, "grid": self.grid_source, "num_threads": self.num_threads,
            "shared_bytes": self.shared_bytes, "cuda_source": self.cuda_source, "tir": self.tir_text,
        }

    # --- launching ------------------------------------------------------------------------------
    def grid(self, scalar_args: list[Any]) -> tuple[int, ...]:
        if self._grid is None:
            self._grid = eval(self.grid_source)  # noqa: S307 - generated by grid_source() from IR nodes
        return self._grid(*scalar_args)

    def function(self):
        if self._function is None:
            if self.executable is not None:
                module = self.executable.mod
            elif self.library_path is not None:
                module = tvm.runtime.load_module(self.library_path)
            else:
                raise LaunchError(f"kernel {self.display_name} has no compiled module")
            self._function = module[self.name]
        return self._function

    def __call__(self, *args: Any) -> None:
        bound = arguments.bind(self.specs, args, self.name, require_cuda=True)
        for name, value in self.const_values.items():
            if bound.const_values[name] != value:
                raise LaunchError(f"{self.display_name} was compiled for {name}={value!r}, got {bound.const_values[name]!r}")
        self.launch(bound)

    def launch(self, bound: "arguments.BoundArguments") -> None:
        grid = self.grid(bound.scalars)
        for axis, (extent, limit) in enumerate(zip(grid, MAX_GRID)):
            if extent < 0 or extent > limit:
                raise LaunchError(f"{self.display_name}: grid dimension {'xyz'[axis]} is {extent}, it must be in "
                                  f"[0, {limit}] (grid {self.grid_source})")
        if 0 in grid:
            return  # nothing to do, and CUDA rejects an empty grid
        import torch
        import tvm_ffi

        device = bound.device
        stream = torch.cuda.current_stream(device).cuda_stream
        with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", device), stream):
            self.function()(*bound.call_args)


def _annotation(kind: str, text: str) -> Any:
    from tilus_tvm.dtypes import as_dtype

    if kind == "const":
        return {"int": int, "float": float, "bool": bool}[text]
    return ~as_dtype(text[1:]) if kind == "pointer" else as_dtype(text)


def load_kernel(path: str) -> CompiledKernel:
    """Load a kernel written by :meth:`CompiledKernel.export`; nothing is recompiled (the CUDA
    module is loaded, and its source compiled by the driver's NVRTC, at the first launch)."""
    from tilus_tvm.runtime.target import resolve_target

    try:
        with open(str(path) + ".json") as f:
            meta = json.load(f)
    except OSError as exc:
        raise LaunchError(f"load_kernel: {path}.json (written by export) is missing: {exc}") from exc
    specs = [ParamSpec(name, kind, _annotation(kind, text)) for name, kind, text in meta["params"]]
    target, arch = resolve_target(meta["arch"])
    return CompiledKernel(meta["name"], meta["display_name"], arch, target, specs, meta["const_values"],
                          meta["grid"], meta["num_threads"], meta["shared_bytes"], meta["cuda_source"],
                          meta["tir"], library_path=str(path))
