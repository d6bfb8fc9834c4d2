"""The kernel ABI: how TVM's tools see a kernel's parameters.

Each pointer parameter becomes a TIR buffer argument. When every global view of the pointer has
the same row-major shape, written in constants and run-time scalar parameters, the buffer takes
that shape (``a_ptr: T.Buffer((m_size, 4096), "float16")``): TVM's generated entry code then
checks the tensor it is called with (rank, shape against the scalars, dtype, contiguity, device)
once per call in compiled code, and ``R.call_tir`` / MetaSchedule can call the kernel like any
TIR function. Other pointers (views with strides, several shapes, no view) stay flat 1-D buffers
of any length.

The pass also records which pointers the kernel reads and writes, which gives the
destination-passing form that ``R.call_tir`` calls: input tensors, the run-time scalars that no
tensor shape gives, then the output tensors. TVM 0.27's ``call_tir`` has no ``tir_vars`` (it
passes the call's arguments to the leading parameters and appends the outputs), so a scalar that
is a dimension of a tensor (``m_size`` in ``a_ptr: (m_size, 4096)``) is not a parameter of that
form: TVM binds it from the tensor's shape; any other scalar is passed as ``R.prim_value``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator, Optional

from tilus_tvm.errors import CompileError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.scalar import c_identifier
from tilus_tvm.ir.stmt import Function, Param, instructions
from tilus_tvm.ir.tensor import GlobalTensor
from tilus_tvm.lowp import pointer_storage_dtype


@dataclass(frozen=True)
class AbiParam:
    """One argument of the compiled function: a run-time scalar or a tensor.

    ``shape`` (tensors) is the buffer's shape as text (``("m_size", "4096")``), None for a flat
    buffer of any length.
    """

    name: str
    kind: str  # "scalar" or "tensor"
    dtype: str
    shape: Optional[tuple[str, ...]] = None
    reads: bool = False
    writes: bool = False
    from_shape: bool = False  # a scalar equal to a dimension of a shaped tensor parameter
    # tensors the kernel reaches only through sub-views (64-bit bases): the largest element span it
    # indexes with int32, as Python over the Script's scalar names; None: the whole tensor is indexed
    # with int32, so it must hold fewer than 2**31 elements (see runtime/launcher.py)
    index_span: Optional[str] = None

    @property
    def is_output(self) -> bool:
        return self.kind == "tensor" and self.writes

    def to_json(self) -> list:
        return [self.name, self.kind, self.dtype, None if self.shape is None else list(self.shape), self.reads,
                self.writes, self.from_shape, self.index_span]

    @staticmethod
    def from_json(item: list) -> "AbiParam":
        name, kind, dtype, shape, reads, writes, from_shape, *rest = item  # index_span: absent in older files
        return AbiParam(name, kind, dtype, None if shape is None else tuple(shape), reads, writes, from_shape,
                        rest[0] if rest else None)


@dataclass(frozen=True)
class WorkspaceSpec:
    """A workspace (``self.global_tensor``): an extra tensor argument after the Script's parameters,
    which the runtime allocates (see :mod:`tilus_tvm.runtime.workspace`).

    ``numel`` is the element count as Python source over the Script's scalar parameter names
    (``"((m_size + 15) // 16 * 32)"``), evaluated at each launch.
    """

    name: str
    dtype: str
    numel: str
    requires_clean: bool

    def to_json(self) -> list:
        return [self.name, self.dtype, self.numel, self.requires_clean]

    @staticmethod
    def from_json(item: list) -> "WorkspaceSpec":
        name, dtype, numel, requires_clean = item
        return WorkspaceSpec(name, dtype, numel, requires_clean)


@dataclass(frozen=True)
class KernelABI:
    """The compiled function's parameters in the Script's order (compile-time parameters excluded),
    followed by its workspaces (``workspaces``; not Script parameters: the runtime passes them)."""

    params: tuple[AbiParam, ...]
    workspaces: tuple[WorkspaceSpec, ...] = ()

    @property
    def inputs(self) -> list[AbiParam]:
        return [p for p in self.params if p.kind == "tensor" and not p.writes]

    @property
    def outputs(self) -> list[AbiParam]:
        return [p for p in self.params if p.is_output]

    @property
    def scalars(self) -> list[AbiParam]:
        return [p for p in self.params if p.kind == "scalar"]

    def dps_order(self) -> list[AbiParam]:
        """Destination-passing order: inputs, the scalars no shape gives, then outputs (``R.call_tir``)."""
        return self.inputs + [p for p in self.scalars if not p.from_shape] + self.outputs

    def to_json(self) -> Any:
        params = [p.to_json() for p in self.params]
        if not self.workspaces:
            return params
        return {"params": params, "workspaces": [w.to_json() for w in self.workspaces]}

    @staticmethod
    def from_json(items: Any) -> "KernelABI":
        if isinstance(items, dict):
            return KernelABI(tuple(AbiParam.from_json(item) for item in items["params"]),
                             tuple(WorkspaceSpec.from_json(item) for item in items["workspaces"]))
        return KernelABI(tuple(AbiParam.from_json(item) for item in items))


def python_source(expr: Any, names: dict[str, str]) -> str:
    """Python source of an integer expression of scalar parameters (``names``: TIR var -> Script name)."""
    from tilus_tvm.ir.scalar import expr_to_python

    return str(expr) if isinstance(expr, int) else expr_to_python(expr, names)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def uses_only(expr: Any, allowed: list) -> bool:
    """Whether ``expr`` (an int or an expression) has no variables but those of ``allowed``."""
    if isinstance(expr, int):
        return True
    from tvm import tirx

    return all(any(v.same_as(a) for a in allowed) for v in tirx.analysis.undefined_vars(expr))


def _common_shape(views: list, scalar_vars: list) -> Optional[tuple]:
    """The one row-major shape all ``views`` share, written in constants and scalar parameters."""
    if not views or not all(v.compact for v in views):
        return None
    shape = views[0].shape
    for view in views[1:]:
        if len(view.shape) != len(shape) or not all(_same(a, b) for a, b in zip(view.shape, shape)):
            return None
    if not all(uses_only(s, scalar_vars) for s in shape):
        return None
    return shape


def _views_in(value: Any) -> Iterator[GlobalTensor]:
    if isinstance(value, GlobalTensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _views_in(item)


def pointers_indexed_directly(func: Function) -> set[str]:
    """Names of the pointers some instruction accesses through a view of the pointer itself (int32
    offsets from the pointer), not through a sub-view (``global_subview``: 64-bit base)."""
    direct = set()
    for inst in instructions(func.body):
        if isinstance(inst, (ir.GlobalView, ir.GlobalSubview)):
            continue  # declarations, not accesses
        for f in fields(inst):
            for view in _views_in(getattr(inst, f.name)):
                if not view.is_subview:
                    direct.add(view.pointer.name)
    return direct


def _of_scalars(func: Function, value: Any, scalar_vars: list, problem: Callable[[str], str]) -> Any:
    """``value`` (an int or an expression) in terms of the kernel's run-time scalar parameters only,
    immutable kernel scalars (``n: int32 = ...``) substituted; else a CompileError saying
    ``problem(names of the other variables)``."""
    from tvm import tirx

    if not uses_only(value, scalar_vars):
        value = func.analyzer().simplify(value)
    if not uses_only(value, scalar_vars):
        unknown = sorted({v.name for v in tirx.analysis.undefined_vars(value)
                          if not any(v.same_as(a) for a in scalar_vars)})
        raise CompileError(f"kernel {func.name}: {problem(', '.join(unknown))}")
    return value


def _subview_span(func: Function, param: Param, subviews: list, scalar_vars: list, names: dict[str, str]) -> str:
    """Python source of the largest span (elements from the base to the last one, inclusive) of the
    sub-views of ``param``: what the launch checks against int32 indexing."""
    from tvm import tirx

    texts = []
    for view in subviews:
        span = view.span
        if not isinstance(span, int):
            span = func.analyzer().simplify(span)  # the launcher's text: as short as it gets
        span = _of_scalars(func, span, scalar_vars, lambda unknown: (
            f"sub-view {view.name} of {param.name} has shape {list(view.shape)} and strides {list(view.strides)}, "
            f"which depend on {unknown}; the launch checks that a sub-view's span fits int32 indexing, so it may "
            f"only use ints and the kernel's run-time scalar parameters"))
        text = python_source(span.value if isinstance(span, tirx.IntImm) else span, names)
        if text not in texts:
            texts.append(text)
    return texts[0] if len(texts) == 1 else f"max({', '.join(texts)})"


def plan_kernel_abi(func: Function) -> KernelABI:
    """Give pointer parameters shaped buffers where their views allow, mark reads and writes, and
    find the pointers the kernel reaches only through sub-views (their launch checks each sub-view's
    span instead of the tensor's size)."""
    from tvm import tirx

    views: dict[str, list] = {}
    subviews: dict[str, list] = {}
    for inst in instructions(func.body):
        if isinstance(inst, ir.GlobalView):
            views.setdefault(inst.output.pointer.name, []).append(inst.output)
        elif isinstance(inst, ir.GlobalSubview):
            subviews.setdefault(inst.output.pointer.name, []).append(inst.output)
        elif isinstance(inst, ir.LoadGlobal):
            inst.src.pointer.reads = True
        elif isinstance(inst, ir.StoreGlobal):
            inst.dst.pointer.writes = True
        elif isinstance(inst, ir.LockSemaphore):
            inst.tensor.pointer.reads = True
        elif isinstance(inst, ir.ReleaseSemaphore):
            inst.tensor.pointer.writes = True
    scalar_vars = [p.var for p in func.params if p.kind == "scalar"]
    names = {p.var.name: p.name for p in func.params if p.kind == "scalar"}
    direct = pointers_indexed_directly(func)
    tensors, dims = {}, set()
    for param in func.params:
        if param.kind == "pointer":
            shape = _common_shape(views.get(param.name, []), scalar_vars)
            if param.dtype.nbits < 8:  # sub-byte elements: the buffer counts bytes, not elements
                shape = None
            param.wide = param.name in subviews and param.name not in direct
            if shape is not None and not param.shaped:
                param.buffer = tirx.decl_buffer(list(shape), pointer_storage_dtype(param.dtype),
                                                c_identifier(param.name))
                param.shaped = True
            elif param.wide and not param.shaped:  # a flat buffer of any length, counted in int64
                param.buffer = tirx.decl_buffer((tirx.Var(f"{param.name}_numel", "int64"),),
                                                pointer_storage_dtype(param.dtype), c_identifier(param.name))
            span = _subview_span(func, param, subviews[param.name], scalar_vars, names) if param.wide else None
            text = None if shape is None else tuple(python_source(s, names) for s in shape)
            tensors[param.name] = AbiParam(param.name, "tensor", param.dtype.name, text, param.reads, param.writes,
                                           index_span=span)
            dims.update(s.name for s in (shape or ()) if isinstance(s, tirx.Var))
    abi = []
    for param in func.params:
        if param.kind == "scalar":
            abi.append(AbiParam(param.name, "scalar", param.dtype.name, from_shape=param.var.name in dims))
        elif param.kind == "pointer":
            abi.append(tensors[param.name])
    return KernelABI(tuple(abi), _plan_workspaces(func, scalar_vars, names))


def workspace_allocations(func: Function) -> list[ir.AllocateGlobal]:
    """The kernel's ``self.global_tensor`` allocations, in program order (their parameters follow
    the Script's in the compiled function)."""
    return [inst for inst in instructions(func.body) if isinstance(inst, ir.AllocateGlobal)]


def _plan_workspaces(func: Function, scalar_vars: list, names: dict[str, str]) -> tuple[WorkspaceSpec, ...]:
    """Each workspace's element count as host-side Python over the scalar parameters; workspace
    parameters are renamed where they would clash with a Script parameter."""
    import math

    from tvm import tirx

    taken = {p.name for p in func.params}
    specs = []
    for inst in workspace_allocations(func):
        tensor = inst.output
        param = tensor.pointer
        while param.name in taken:
            param.name += "_"
        taken.add(param.name)
        numel = _of_scalars(func, math.prod(tensor.shape), scalar_vars, lambda unknown: (
            f"global_tensor {tensor.name} has shape {list(tensor.shape)}, which depends on {unknown}; a "
            f"workspace's shape may only use ints and the kernel's run-time scalar parameters (the runtime "
            f"allocates it before the launch)"))
        specs.append(WorkspaceSpec(param.name, tensor.dtype.name, python_source(numel, names), inst.requires_clean))
    return tuple(specs)


def check_dps(func: Function, abi: KernelABI) -> None:
    """Destination passing needs outputs the kernel only writes, and no workspace. Tensors whose views
    give no shape are flat 1-D buffers there (pass them reshaped to 1-D)."""
    if abi.workspaces:
        raise CompileError(f"kernel {func.name} allocates a workspace with self.global_tensor "
                           f"({', '.join(w.name for w in abi.workspaces)}), which must persist between launches; "
                           f"the destination-passing form (R.call_tir, MetaSchedule tuning) cannot provide one, so "
                           f"launch this kernel on torch tensors instead")
    if not abi.outputs:
        raise CompileError(f"kernel {func.name} writes no tensor, so it has no destination-passing form "
                           f"(R.call_tir needs at least one output)")
    for p in abi.outputs:
        if p.reads:
            raise CompileError(f"kernel {func.name} reads and writes {p.name}; the destination-passing form "
                               f"(R.call_tir) gives outputs fresh, uninitialised tensors, so an in-place "
                               f"parameter has none")
    # a tensor without a single row-major view keeps its flat buffer: the caller passes it as a 1-D tensor
