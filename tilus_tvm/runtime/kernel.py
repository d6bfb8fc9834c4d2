"""A compiled kernel: its TIR, CUDA source, PTX, the loaded module, and the launch itself."""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from tilus_tvm.errors import CompileError, LaunchError, SlowLaunchWarning
from tilus_tvm.ir.scalar import expr_to_python
from tilus_tvm.lang.signature import ParamSpec
from tilus_tvm.lang import arguments
from tilus_tvm.runtime.launcher import MAX_GRID, LaunchTable, make_launcher

# TVM's entry code names the failing argument by position: "Mismatched A.shape[0] on argument #1 when calling: ..."
_TVM_ARGUMENT = re.compile(r"on argument #(\d+)")


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
    Script (compile-time arguments must equal the ones it was compiled for, and pointers it was
    compiled to find 16-byte aligned must be).
    """

    name: str
    display_name: str
    arch: str
    specs: list[ParamSpec]
    const_values: dict[str, Any]
    grid_source: str  # see grid_source(); kept as text so a cached kernel needs no frontend run
    num_threads: int
    shared_bytes: int
    abi: Any  # tilus_tvm.passes.kernel_abi.KernelABI: the compiled function's parameters
    cuda_source: str
    tir_text: str
    executable: Any = None  # tvm.runtime.Executable when compiled in this process
    library_path: Optional[str] = None  # the exported .so, when it exists on disk
    from_cache: bool = False
    pointer_dtypes: dict = field(default_factory=dict)  # ~void parameters: the dtypes compiled for
    aligned: Optional[frozenset] = None  # pointers compiled as 16-byte aligned (None: not recorded)
    _prim_func: Any = field(default=None, repr=False)
    _ptx: Optional[str] = field(default=None, repr=False)
    _function: Any = field(default=None, repr=False)
    _grid: Any = field(default=None, repr=False)
    _launcher: Any = field(default=None, repr=False)  # launcher.make_launcher's, False when it has none
    _table: Optional[LaunchTable] = field(default=None, repr=False)  # for calls of the kernel itself
    _workspaces: Any = field(default=None, repr=False)  # runtime.workspace.WorkspacePool, when it has workspaces
    _warned: set = field(default_factory=set, repr=False)  # parameters whose repair was reported

    @property
    def target(self):
        """The TVM target it was compiled for."""
        from tilus_tvm.target import tvm_target

        return tvm_target(self.arch)

    @property
    def prim_func(self):
        """The TVM TIR ``PrimFunc``."""
        if self._prim_func is None:
            import tvm

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

    def export(self, path: str, archs: Optional[Sequence[str]] = None) -> str:
        """Write the kernel as one shared library holding compiled GPU code -- a fatbin built by nvcc
        for ``archs`` (default: the architecture it was compiled for; ``["sm_80", "sm_90"]`` serves
        both), never CUDA source -- plus ``<path>.json`` describing its signature, so
        :func:`load_kernel` (or :func:`tilus_tvm.load`) gives back a launchable kernel later without
        nvcc or NVRTC. Works without a GPU. The library alone is a TVM module too
        (``tvm.runtime.load_module(path)[name]``)."""
        from tilus_tvm.runtime.export import export_library, warn_older_archs

        path = str(path)
        archs = [self.arch] if archs is None else ([archs] if isinstance(archs, str) else list(archs))
        warn_older_archs(self.arch, archs)
        export_library(self._executable_for_export(), path, archs, sources=[self.cuda_source])
        with open(path + ".json", "w") as f:
            json.dump({**self.description(), "archs": archs}, f, indent=1)
        return path

    def _executable_for_export(self):
        """The executable built in this process, or -- for a kernel from the disk cache, whose library
        holds code for one machine -- one rebuilt from its TIR."""
        if self.executable is not None:
            return self.executable
        import tvm

        try:
            return tvm.compile(self.prim_func, target=self.target, tir_pipeline="tirx")
        except Exception as exc:  # noqa: BLE001 - TVM raises many types; name the kernel
            raise CompileError(f"kernel {self.display_name}: rebuilding it from its TIR to export failed: "
                               f"{exc}") from exc

    def description(self) -> dict[str, Any]:
        """Everything but the library: what load_kernel needs to launch it again."""
        return {
            "name": self.name, "display_name": self.display_name, "arch": self.arch,
            "params": [[s.name, s.kind, s.annotation.__name__ if s.kind == "const" else
                        f"~{self.pointer_dtypes[s.name].name}" if s.name in self.pointer_dtypes else repr(s.annotation)]
                       for s in self.specs],
            "const_values": self.const_values, "grid": self.grid_source, "num_threads": self.num_threads,
            "shared_bytes": self.shared_bytes, "abi": self.abi.to_json(), "cuda_source": self.cuda_source,
            "tir": self.tir_text, "aligned": None if self.aligned is None else sorted(self.aligned),
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
                from tilus_tvm.runtime.library import load_library

                module = load_library(self.library_path)  # without importing TVM's Python package
            else:
                raise LaunchError(f"kernel {self.display_name} has no compiled module")
            self._function = module[self.name]
        return self._function

    def launcher(self):
        """The generated fast launcher (:mod:`tilus_tvm.runtime.launcher`), or None when it has none."""
        if self._launcher is None:
            self._launcher = make_launcher(self.specs, self.abi.params, self.grid_source, self.function(),
                                           self.workspaces()) or False
        return self._launcher or None

    def workspaces(self):
        """The :class:`~tilus_tvm.runtime.workspace.WorkspacePool` of the kernel's ``self.global_tensor``
        workspaces (None when it has none); ``.clear()`` drops them."""
        if self._workspaces is None and self.abi.workspaces:
            from tilus_tvm.runtime.workspace import WorkspacePool

            self._workspaces = WorkspacePool(self.abi.workspaces, self.display_name)
        return self._workspaces

    def __call__(self, *args: Any) -> None:
        if self._table is not None:
            try:
                return self._table.dispatch(*args)
            except Exception:  # noqa: BLE001 - not seen before, or refused: the careful path says why
                pass
        bound = arguments.bind(self.specs, args, self.name, require_cuda=True)
        for name, value in self.const_values.items():
            if bound.const_values[name] != value:
                raise LaunchError(f"{self.display_name} was compiled for {name}={value!r}, "
                                  f"got {bound.const_values[name]!r}")
        unaligned = sorted((self.aligned or frozenset()) - bound.aligned)
        if unaligned:
            raise LaunchError(f"{self.display_name} was compiled for a 16-byte aligned {unaligned[0]} (vector "
                              f"accesses), the tensor given starts at an address that is not; launch the Script "
                              f"instead (it compiles a kernel for it) or pass an aligned tensor")
        self.launch(bound)
        if self._table is None:
            self._table = LaunchTable(self.specs)
        self._table.add(args, self.launcher())

    def launch(self, bound: "arguments.BoundArguments") -> None:
        """The careful launch, for arguments :func:`arguments.bind` accepted: tensors within the kernel's
        int32 indexing (:func:`arguments.check_index_range`) and the grid are checked, and
        when the compiled function refuses a tensor, the error names the argument and the shape it
        expected -- or, for a contiguous tensor whose storage holds the expected shape from its data
        pointer (Tilus pointers are raw pointers), the tensor is read as that shape."""
        arguments.check_index_range(self.display_name, self.specs, self.abi.params, bound)
        grid = self.grid(bound.scalars)
        for axis, (extent, limit) in enumerate(zip(grid, MAX_GRID)):
            if extent < 0 or extent > limit:
                raise LaunchError(f"{self.display_name}: grid dimension {'xyz'[axis]} is {extent}, it must be in "
                                  f"[0, {limit}] (grid {self.grid_source})")
        if 0 in grid:
            return  # nothing to do, and CUDA rejects an empty grid
        args = self.call_args(bound)
        pool = self.workspaces()
        if pool is not None:
            scalar_names = [spec.name for spec in self.specs if spec.kind == "scalar"]
            device = -1 if bound.device is None else bound.device  # None: arguments bound without a GPU (tests)
            args += pool.tensors_for(device, dict(zip(scalar_names, bound.scalars)))
        function = self.function()
        for _ in range(len(args) + 1):
            try:
                return self._call(function, args, bound)
            except Exception as exc:  # noqa: BLE001 - TVM raises ValueError, TypeError, RuntimeError...
                index = _failed_argument(exc, len(args))
                if index is None:
                    raise
                args[index] = self._repair(index, args[index], bound, exc)
        raise LaunchError(f"{self.display_name}: the compiled function kept refusing its arguments")

    def _call(self, function, args: list[Any], bound: "arguments.BoundArguments") -> None:
        if any(param.kind == "tensor" for param in self.abi.params):
            function(*args)  # tvm-ffi takes torch's current stream from the tensors (see launcher.py)
            return
        import torch
        import tvm_ffi

        stream = torch.cuda.current_stream(bound.device).cuda_stream
        with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", bound.device), stream):
            function(*args)

    def expected_shape(self, param: Any, scalars: list[Any]) -> tuple[int, ...]:
        """The shape of a shaped tensor parameter (``abi`` text) with the scalar arguments' values."""
        names = {spec.name: value for spec, value in zip([s for s in self.specs if s.kind == "scalar"], scalars)}
        namespace = {"__builtins__": {}, "int": int, "min": min, "max": max}
        return tuple(int(eval(dim, namespace, names)) for dim in param.shape)  # noqa: S307 - kernel_abi wrote it

    def _repair(self, index: int, value: Any, bound: "arguments.BoundArguments", exc: Exception) -> Any:
        """What to pass instead of argument ``index`` that the compiled function refused, or a LaunchError."""
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if index >= len(self.abi.params):  # a workspace: allocated here, so refusing it is a bug
            raise LaunchError(f"{self.display_name}: the compiled function refused its workspace "
                              f"{self.abi.workspaces[index - len(self.abi.params)].name}: {reason}") from exc
        param = self.abi.params[index]
        where = f"{self.display_name}: argument {param.name}"
        if param.kind != "tensor" or param.shape is None:
            raise LaunchError(f"{where} was refused by the compiled function: {reason}") from exc
        expected = self.expected_shape(param, bound.scalars)
        text = f"({', '.join(param.shape)})" + (f" = {expected}" if tuple(param.shape) != tuple(map(str, expected))
                                                else "")
        shape = tuple(value.shape)
        if shape == expected and not value.is_contiguous():
            raise LaunchError(f"{where} has the expected shape {text} but is not contiguous (strides "
                              f"{tuple(value.stride())}); the kernel reads a row-major array from its data "
                              f"pointer: pass {param.name}.contiguous()") from exc
        if shape == expected:
            raise LaunchError(f"{where} was refused by the compiled function: {reason}") from exc
        needed = math.prod(expected)
        available = _elements_from_data_pointer(value)
        if not value.is_contiguous():
            raise LaunchError(f"{where} has shape {shape}, the kernel expects {text}; a tensor of another shape "
                              f"is read as the expected shape from its data pointer only when it is contiguous "
                              f"(its strides are {tuple(value.stride())})") from exc
        if available < needed:
            raise LaunchError(f"{where} has shape {shape}, the kernel expects {text}: {needed} elements from "
                              f"its data pointer, its storage holds {available}") from exc
        if param.name not in self._warned:
            self._warned.add(param.name)
            warnings.warn(f"{where} has shape {shape}, the kernel expects {text}: it is read as that shape from "
                          f"its data pointer, but every such launch takes the slow path (the compiled function "
                          f"refuses it, then runs again); pass a tensor of shape {expected} (e.g. "
                          f".view({', '.join(map(str, expected))})) to launch at full speed",
                          SlowLaunchWarning, stacklevel=2)
        return value.as_strided(expected, _row_major_strides(expected))

    def call_args(self, bound: "arguments.BoundArguments") -> list[Any]:
        """What the compiled function receives: scalars, tensors for shaped buffers, flat views for
        flat ones (the compiled function checks shapes against the scalars)."""
        return [value if param.kind == "scalar" or param.shape is not None else arguments.flat_view(value)
                for param, value in zip(self.abi.params, bound.call_args)]


def _failed_argument(exc: Exception, count: int) -> Optional[int]:
    """The position of the argument the compiled function's entry check refused, if it says so."""
    match = _TVM_ARGUMENT.search(str(exc))
    if match is None or int(match.group(1)) >= count:
        return None
    return int(match.group(1))


def _elements_from_data_pointer(tensor) -> int:
    """Elements of the tensor's dtype between its data pointer and the end of its storage."""
    storage = tensor.untyped_storage()
    offset = tensor.data_ptr() - storage.data_ptr()
    return (storage.nbytes() - offset) // tensor.element_size()


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def _annotation(kind: str, text: str) -> Any:
    from tilus_tvm.dtypes import as_dtype

    if kind == "const":
        return {"int": int, "float": float, "bool": bool}[text]
    return ~as_dtype(text[1:]) if kind == "pointer" else as_dtype(text)


def load_kernel(path: str) -> CompiledKernel:
    """Load a kernel written by :meth:`CompiledKernel.export`; nothing is compiled: the library holds
    a fatbin, which the CUDA driver loads at the first launch (no nvcc, no NVRTC). Launches check their
    arguments as the JIT kernel's do."""
    from tilus_tvm.passes.kernel_abi import KernelABI
    from tilus_tvm.target import check_arch

    try:
        with open(str(path) + ".json") as f:
            meta = json.load(f)
    except OSError as exc:
        raise LaunchError(f"load_kernel: {path}.json (written by export) is missing: {exc}") from exc
    specs = [ParamSpec(name, kind, _annotation(kind, text)) for name, kind, text in meta["params"]]
    arch = check_arch(meta["arch"])
    aligned = meta.get("aligned")  # absent in descriptions written before it was recorded
    return CompiledKernel(meta["name"], meta["display_name"], arch, specs, meta["const_values"],
                          meta["grid"], meta["num_threads"], meta["shared_bytes"], KernelABI.from_json(meta["abi"]),
                          meta["cuda_source"], meta["tir"], library_path=str(path),
                          aligned=None if aligned is None else frozenset(aligned))
