"""``tilus_tvm.Script``: the base class of every kernel.

A kernel is a subclass whose ``__init__`` stores compile-time hyper-parameters and whose
``__call__`` is the kernel body. Calling an instance launches the kernel::

    class AddOne(tilus_tvm.Script):
        def __call__(self, n: int32, a: ~float32, b: ~float32):
            self.attrs.blocks = cdiv(n, 128)
            self.attrs.warps = 4
            ...

    AddOne()(n, a, b)          # compiles once per specialisation, then launches

``__call__`` is never run as Python: the frontend reads its source and translates it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.scalar import expr_dtype, is_expr
from tilus_tvm.ir.values import is_scalar
from tilus_tvm.lang.cuda_helpers import CudaHelpersMixin
from tilus_tvm.lang.instructions.assign import AssignInstructions
from tilus_tvm.lang.instructions.compute import ComputeInstructions
from tilus_tvm.lang.instructions.debug import DebugInstructions
from tilus_tvm.lang.instructions.dot_split import DotSplitInstructions
from tilus_tvm.lang.instructions.hopper import HopperInstructions
from tilus_tvm.lang.instructions.memory import MemoryInstructions
from tilus_tvm.lang.instructions.scalar_memory import ScalarMemoryInstructions
from tilus_tvm.lang.instructions.views import ViewInstructions
from tilus_tvm.lang.instructions.workspace import WorkspaceInstructions
from tilus_tvm.target import MAX_GRID


class Attributes:
    """Launch configuration, set from inside ``__call__``: ``blocks``, ``warps`` and, optionally,
    ``min_blocks_per_sm`` and ``dependent_launch``."""

    def __init__(self):
        self._blocks: Optional[tuple[Any, ...]] = None
        self._warps: Optional[int] = None
        self._min_blocks_per_sm: Optional[int] = None
        self._dependent_launch = False

    @property
    def blocks(self) -> Optional[tuple[Any, ...]]:
        """Grid size: an int or scalar expression, or a list of up to 3 (x, y, z), read in the kernel as
        ``self.blockIdx.x``/``.y``/``.z``. CUDA's limits (x up to 2**31 - 1, y and z up to 65535) are
        checked here for compile-time extents and at launch for run-time ones."""
        return self._blocks

    @blocks.setter
    def blocks(self, value: Any) -> None:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if not 1 <= len(items) <= 3:
            raise ScriptError(f"attrs.blocks must have 1 to 3 dimensions, got {value!r}")
        for axis, (v, limit) in enumerate(zip(items, MAX_GRID)):
            if is_expr(v):
                from tvm import tirx  # loaded: v is a TVM expression

                if isinstance(v, tirx.IntImm):
                    v = items[axis] = int(v.value)
            if not is_scalar(v) or isinstance(v, float) or (is_expr(v) and "int" not in expr_dtype(v)):
                raise ScriptError(f"attrs.blocks entry {v!r} must be an int or an integer scalar expression")
            if isinstance(v, int) and not 0 <= v <= limit:
                raise ScriptError(f"attrs.blocks: grid dimension {'xyz'[axis]} is {v}, CUDA allows 0 to {limit}"
                                  + (" (y and z are limited to 65535; put the large extent in x)" if axis else ""))
        self._blocks = tuple(items)

    @property
    def warps(self) -> Optional[int]:
        """Warps per block: a compile-time int in [1, 32]."""
        return self._warps

    @warps.setter
    def warps(self, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScriptError(f"attrs.warps must be a compile-time int, got {value!r}")
        if not 1 <= value <= 32:
            raise ScriptError(f"attrs.warps must be in [1, 32] (at most 1024 threads per block), got {value}")
        self._warps = value


    @property
    def min_blocks_per_sm(self) -> Optional[int]:
        """Blocks that must fit on one SM at once (CUDA ``__launch_bounds__``' second argument): the
        compiler limits registers per thread to make room. None: no requirement."""
        return self._min_blocks_per_sm

    @min_blocks_per_sm.setter
    def min_blocks_per_sm(self, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32:
            raise ScriptError(f"attrs.min_blocks_per_sm must be a compile-time int in [1, 32], got {value!r}")
        self._min_blocks_per_sm = value

    @property
    def dependent_launch(self) -> bool:
        """Launch with CUDA's programmatic dependent launch (Hopper, sm_90): the kernel may start while
        the work queued before it on the stream is still running, once that work has let it
        (:meth:`~tilus_tvm.lang.instructions.hopper.HopperInstructions.launch_dependents`, or its exit).
        The kernel must then call ``self.grid_dependency_wait()`` before it reads anything that work
        may write, or writes anything it may read; what it does before the wait may touch only memory
        no earlier work on the stream writes (a model's weights). False: an ordinary launch."""
        return self._dependent_launch

    @dependent_launch.setter
    def dependent_launch(self, value: Any) -> None:
        if not isinstance(value, bool):
            raise ScriptError(f"attrs.dependent_launch must be a compile-time bool, got {value!r}")
        self._dependent_launch = value


@dataclass(frozen=True)
class Dim3:
    """``self.blockIdx`` / ``self.gridDim``: three scalars, also unpacked as ``bx, by, bz = self.blockIdx``."""

    x: Any
    y: Any
    z: Any

    def __iter__(self):
        return iter((self.x, self.y, self.z))

    def __len__(self) -> int:
        return 3

    def to_tuple(self) -> tuple:
        return (self.x, self.y, self.z)


@dataclass(frozen=True)
class LoopRange:
    """``self.range(...)``: a loop over run-time bounds, optionally unrolled."""

    start: Any
    stop: Any
    step: Any
    unroll: bool


class ScriptUtils:
    """``self.utils``: scalar arithmetic helpers on ints and run-time scalar expressions."""

    @staticmethod
    def ceil_div(a: Any, b: Any) -> Any:
        """``(a + b - 1) // b``: how many tiles of ``b`` cover ``a``."""
        return (a + b - 1) // b

    @staticmethod
    def round_up_to_multiple(a: Any, b: Any) -> Any:
        """``ceil_div(a, b) * b``: ``a`` rounded up to a multiple of ``b``."""
        return (a + b - 1) // b * b


_UTILS = ScriptUtils()


class _ScriptState:
    def __init__(self):
        self.attrs = Attributes()
        self.block_idx: Optional[Dim3] = None
        self.builder = None  # the tilus_tvm.ir.builder.Builder of the translation in progress
        self.aligned_pointers: frozenset = frozenset()  # of the translation in progress (see Script.aligned)
        self.launch_table = None  # tilus_tvm.runtime.launcher.LaunchTable, made at the first launch
        self.kernels: dict = {}


class Script(MemoryInstructions, ComputeInstructions, DotSplitInstructions, AssignInstructions,
             ScalarMemoryInstructions, DebugInstructions, CudaHelpersMixin, WorkspaceInstructions,
             ViewInstructions, HopperInstructions):
    """Base class of kernels (see the module docstring)."""

    _kernel_fn = None

    def __new__(cls, *args, **kwargs):
        obj = super().__new__(cls)
        object.__setattr__(obj, "_tilus", _ScriptState())
        return obj

    def __init__(self):
        pass

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__:
            cls._kernel_fn = cls.__dict__["__call__"]
            cls.__call__ = Script._launch

    # --- inside the kernel ----------------------------------------------------------------------
    @property
    def attrs(self) -> Attributes:
        return self._tilus.attrs

    @property
    def blockIdx(self) -> Dim3:  # noqa: N802 - CUDA's spelling
        if self._tilus.block_idx is None:
            raise ScriptError("self.blockIdx is only available inside the kernel while it is compiled")
        return self._tilus.block_idx

    @property
    def gridDim(self) -> Dim3:  # noqa: N802 - CUDA's spelling
        """The grid's extents as set by ``self.attrs.blocks`` (1 for the dimensions it leaves out): ints
        or scalar expressions of the kernel's parameters."""
        if self._tilus.block_idx is None:
            raise ScriptError("self.gridDim is only available inside the kernel while it is compiled")
        blocks = self._tilus.attrs.blocks
        if blocks is None:
            raise ScriptError("self.gridDim is read before self.attrs.blocks is set; set the grid first")
        return Dim3(*(list(blocks) + [1] * (3 - len(blocks))))

    @property
    def utils(self) -> "ScriptUtils":
        """Scalar helpers usable in a kernel: ``self.utils.ceil_div(a, b)``."""
        return _UTILS

    def aligned(self, pointer: Any) -> bool:
        """Whether the data of pointer parameter ``pointer`` is 16-byte aligned in this specialisation (a
        compile-time bool: the launcher specialises on it), to choose between code paths that need it
        (``tma_load``, 16-byte vectors) and ones that do not."""
        from tilus_tvm.lang.pointer import PointerValue

        if not isinstance(pointer, PointerValue):
            raise ScriptError(f"aligned: expected a pointer parameter of __call__, got {pointer!r}")
        return pointer.param.name in self._tilus.aligned_pointers

    def range(self, start: Any, stop: Any = None, step: Any = 1, *, unroll: bool = False) -> LoopRange:
        """``for i in self.range(n, unroll=True)``: like ``range`` with an unrolling hint."""
        if self._tilus.builder is None:
            raise ScriptError("self.range(...) can only be used in a for loop inside a kernel")
        if stop is None:
            start, stop = 0, start
        return LoopRange(start, stop, step, bool(unroll))

    # --- outside the kernel ---------------------------------------------------------------------
    def _launch(self, *args: Any) -> None:
        launch = _RUNTIME_LAUNCH or _load_runtime_launch()
        launch(self, args)

    def compile(self, *args: Any, target: Any = None):
        """Compile for ``args`` (tensors may live on the CPU: only their dtype matters) without launching.

        ``target`` is ``"sm_80"``, ``"sm_90"``, a ``tvm.target.Target``, or None for the current GPU.
        Returns a :class:`~tilus_tvm.runtime.kernel.CompiledKernel` with ``.prim_func``,
        ``.cuda_source``, ``.ptx`` and ``.export(path)``.
        """
        from tilus_tvm.runtime.jit import compile_for

        return compile_for(self, args, target)

    def tile_program(self, *args: Any, target: Any = None):
        """The tile program for ``args`` after every pass, as a :class:`~tilus_tvm.ir.stmt.Function`;
        ``str()`` of it prints every tensor (scope, dtype, shape, layout) and instruction.

        ``args`` as in a call; tensors may be torch tensors on any device (``device="meta"`` too):
        only their dtype and alignment matter. ``target`` as in :meth:`compile` (default ``"sm_80"``
        when no GPU is visible). Needs no GPU.
        """
        from tilus_tvm.pipeline import tile_program

        return tile_program(self, args, _inspection_target(target))

    def lower(self, *args: Any, target: Any = None, dps: bool = False):
        """The ``tvm.IRModule`` that would be compiled for ``args`` (see :meth:`tile_program`).

        With ``dps=True`` the kernel's PrimFunc is in destination-passing form: input tensors, output
        tensors, then the run-time scalars, as ``R.call_tir`` (with ``tir_vars``) and MetaSchedule's
        builder and runner call it. Needs no GPU.
        """
        from tilus_tvm.pipeline import lower

        return lower(self, args, _inspection_target(target), dps=dps)

    def hyper_parameters(self) -> dict[str, Any]:
        """The compile-time attributes set in ``__init__`` (they are part of the compilation key)."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_tilus")}

    @classmethod
    def kernel_name(cls) -> str:
        """``MyKernel`` -> ``my_kernel``."""
        name = cls.__name__
        out = []
        for i, ch in enumerate(name):
            if ch.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
                out.append("_")
            out.append(ch.lower())
        return "".join(out)


def _inspection_target(target: Any) -> Any:
    """Inspecting a kernel needs no GPU: without a target, the current GPU's, else sm_80."""
    if target is not None:
        return target
    try:
        import torch

        if torch.cuda.is_available():
            return None
    except ImportError:
        pass
    return "sm_80"


_RUNTIME_LAUNCH = None  # tilus_tvm.runtime.jit.launch, imported at the first launch (it imports the runtime)


def _load_runtime_launch():
    global _RUNTIME_LAUNCH
    from tilus_tvm.runtime.jit import launch

    _RUNTIME_LAUNCH = launch
    return launch
