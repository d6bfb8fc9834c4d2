"""``call``: a tilus kernel as an ``R.call_tir`` in Relax code.

The kernel is lowered for the Relax tensors' dtypes to its destination-passing PrimFunc (input
tensors, the run-time scalars no tensor shape gives, output tensors; see
:mod:`tilus_tvm.passes.kernel_abi`), which is added to the module being built -- the
``@I.ir_module`` being parsed, or the current ``relax.BlockBuilder``'s -- under a name unique to
the specialisation, and called::

    @I.ir_module
    class Model:
        @R.function
        def main(x: R.Tensor(("n", 4096), "float16"), w: R.Tensor((4096, 4096), "float16")):
            n = T.int64()
            with R.dataflow():
                y = tilus.relax.call(Matmul(b_layout="col"), n, 4096, 4096, x, w,
                                     out=R.Tensor((n, 4096), "float16"), target="sm_90")
                R.output(y)
            return y

``args`` are the kernel's arguments in order without its outputs; ``out`` gives the type of each
output, which are the kernel's last tensor parameters. Scalars a tensor dimension gives
(``m_size`` above, the rows of ``x``) are bound from that shape by TVM, the value passed is only
checked against it; other run-time scalars become ``R.prim_value`` arguments; compile-time
parameters (``int``/``float``/``bool``) must be Python values. Symbolic dimensions work: one
compiled module serves every ``n``. Tensors are taken to be 16-byte aligned (Relax allocations are).

The PrimFunc carries ``tirx.is_scheduled`` (dlight leaves it alone), ``op_pattern`` 8 (FuseOps
does not fuse it) and ``tilus.kernel`` (the ``"tilus"`` TIR pipeline lowers it with TVM's tirx
passes; see :mod:`tilus_tvm.relax.pipeline`).
"""
from __future__ import annotations

import hashlib
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import tvm
from tvm import relax, tirx

from tilus_tvm.dtypes import as_dtype, void
from tilus_tvm.errors import CompileError, RelaxError, ScriptError

KERNEL_ATTR = "tilus.kernel"  # marks PrimFuncs that the "tilus" TIR pipeline lowers with tirx passes


@dataclass
class _Binding:
    """The arguments of one call, by kernel parameter name."""

    const_values: dict[str, Any] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)  # tirx PrimExprs
    tensors: dict[str, Any] = field(default_factory=dict)  # relax expressions (inputs)
    tensor_types: dict[str, Any] = field(default_factory=dict)  # relax.TensorType of inputs and outputs
    outputs: list[str] = field(default_factory=list)
    pointer_dtypes: dict[str, Any] = field(default_factory=dict)  # ~void parameters: their dtypes


def call(kernel: Any, *args: Any, out: Any = None, target: Any = None) -> Any:
    """``R.call_tir`` of ``kernel`` (a :class:`tilus_tvm.Script`) on ``args``, returning outputs typed ``out``.

    Use it where a Relax expression is expected inside an ``@I.ir_module``'s ``@R.function`` or in
    ``relax.BlockBuilder`` code (it returns the call; emit it as any other). ``out``: one
    ``R.Tensor(shape, dtype)`` (or ``relax.TensorType``) per output, a list for several; string
    dimensions name symbolic dimensions of the inputs. ``target``: ``"sm_90"``, a CUDA
    ``tvm.target.Target``, or None for the current ``Target`` scope or GPU.

    Raises :class:`RelaxError` naming the argument for a wrong number of arguments or outputs, a
    dtype or shape that does not fit, or a kernel without outputs.
    """
    arch = resolve_target_arch(target)
    return kernel_call(kernel, args, out, arch, module_adder())


def kernel_call(kernel: Any, args: Sequence[Any], out: Any, arch: str,
                add_function: Callable[[Any, str], Any], outputs: Sequence[str] = ()) -> Any:
    """:func:`call` with the architecture and the way of adding a PrimFunc to the module given.

    ``outputs``: names of the kernel parameters that are the outputs, for a kernel whose outputs are
    not its last tensor parameters; ``args`` are then the other parameters, in order."""
    from tilus_tvm.pipeline import signature

    name = type(kernel).__name__
    specs = signature(type(kernel))
    if outputs:
        unknown = [o for o in outputs if o not in [s.name for s in specs]]
        if unknown:
            raise RelaxError(f"call({name}): outputs names {unknown}, which are not parameters of the kernel "
                             f"({_describe(specs)})")
        bound = [s for s in specs if s.name not in outputs] + [s for o in outputs for s in specs if s.name == o]
    else:
        bound = specs
    pointers = [s for s in specs if s.kind == "pointer"]
    if not pointers:
        raise RelaxError(f"call({name}): the kernel has no tensor parameter, so it has no output for R.call_tir "
                         f"to return (its parameters: {_describe(specs) or 'none'})")
    out_types = _output_types(name, out)
    if len(args) + len(out_types) != len(specs):
        raise RelaxError(f"call({name}): the kernel takes {len(specs)} arguments ({_describe(specs)}); got "
                         f"{len(args)} arguments and {len(out_types)} output{'s' * (len(out_types) != 1)} (out=). "
                         f"Its outputs are its last tensor parameters: pass the others as arguments and give one "
                         f"type per output in out=")
    binding = _bind(name, bound, args, out_types)
    prim_func, abi = lower_for_relax(kernel, specs, binding, arch)
    _check_outputs(name, abi, binding)
    _check_shapes(name, prim_func, abi, binding)
    gvar = add_function(prim_func, prim_func.attrs["global_symbol"])
    call_args = []
    for param in abi.dps_order():
        if param.kind == "scalar":
            call_args.append(_scalar_argument(binding.scalars[param.name], param.dtype))
        elif not param.is_output:
            call_args.append(binding.tensors[param.name])
    outs = [binding.tensor_types[p.name] for p in abi.outputs]
    return relax.call_tir(gvar, call_args, outs[0] if len(outs) == 1 else outs)


# --- arguments ----------------------------------------------------------------------------------
def _describe(specs: list) -> str:
    def annotation(spec) -> str:
        return spec.annotation.__name__ if spec.kind == "const" else repr(spec.annotation)

    return ", ".join(f"{s.name}: {annotation(s)}" for s in specs)


def _output_types(name: str, out: Any) -> list:
    if out is None:
        raise RelaxError(f"call({name}): out= is required: the type of each output, e.g. "
                         f"out=R.Tensor((n, 4096), \"float16\") (a list for several outputs)")
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if not outs:
        raise RelaxError(f"call({name}): out= is empty; give the type of each output")
    return outs


def _tensor_type(name: str, what: str, value: Any) -> Any:
    try:
        ty = value.ty
    except Exception:  # noqa: BLE001 - a Python value, or a Relax expression not normalised yet
        ty = None
    if not isinstance(ty, relax.TensorType):
        shown = type(value).__name__ if ty is None else f"a value of type {ty}"
        raise RelaxError(f"call({name}): {what} must be a Relax tensor (a var or emitted expression), got {shown}")
    if ty.ndim < 0 or str(ty.dtype) in ("", "void"):
        raise RelaxError(f"call({name}): {what} needs a known rank and dtype, its type is {ty}")
    return ty


def _resolve_out(name: str, index: int, out: Any, dims_by_name: dict[str, Any]) -> Any:
    """A ``relax.TensorType`` for ``out`` (an ``R.Tensor`` proxy or a TensorType); string dims by name."""
    if isinstance(out, relax.TensorType):
        ty = out
    elif hasattr(out, "as_ty") and hasattr(out, "shape"):  # R.Tensor(...) outside a parser: a TensorProxy
        shape = out.shape
        if isinstance(shape, (list, tuple)):
            resolved = []
            for dim in shape:
                if isinstance(dim, str):
                    if dim not in dims_by_name:
                        raise RelaxError(f"call({name}): out[{index}] names dimension {dim!r}, which is not a "
                                         f"dimension of any input (known: {sorted(dims_by_name) or 'none'})")
                    resolved.append(dims_by_name[dim])
                else:
                    resolved.append(dim)
            shape = resolved
        ty = relax.TensorType(shape, out.dtype, ndim=out.ndim)
    else:
        raise RelaxError(f"call({name}): out[{index}] must be R.Tensor(shape, dtype) or a relax.TensorType, "
                         f"got {type(out).__name__}")
    if ty.shape is None or str(ty.dtype) in ("", "void"):
        raise RelaxError(f"call({name}): out[{index}] needs a shape and a dtype (R.call_tir allocates it), got {ty}")
    if not all(is_prim_expr(d) for d in ty.shape.values):
        raise RelaxError(f"call({name}): out[{index}] has a shape of unknown dimensions: {ty}")
    return ty


def _const_value(name: str, spec: Any, value: Any) -> Any:
    if isinstance(value, (tirx.IntImm, tirx.FloatImm)):
        value = value.value
    expected = spec.annotation
    ok = (isinstance(value, bool) if expected is bool else
          isinstance(value, numbers.Integral) and not isinstance(value, bool) if expected is int else
          isinstance(value, numbers.Real) and not isinstance(value, bool))
    if not ok:
        hint = " (one kernel is built per value, so it cannot be symbolic)" if is_prim_expr(value) else ""
        raise RelaxError(f"call({name}): argument {spec.name} is a compile-time {expected.__name__}{hint}; got "
                         f"{type(value).__name__} {value!r}")
    return expected(value)


def _scalar_value(name: str, spec: Any, value: Any) -> Any:
    dtype = spec.dtype
    if is_prim_expr(value):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RelaxError(f"call({name}): argument {spec.name} ({dtype.name}) must be a number or a TIR expression "
                         f"(e.g. a symbolic dimension), got {type(value).__name__} {value!r}")
    if dtype.kind in ("int", "uint"):
        if not isinstance(value, numbers.Integral) or not dtype.min_value <= value <= dtype.max_value:
            raise RelaxError(f"call({name}): argument {spec.name}={value!r} is not a {dtype.name} value")
        return tirx.IntImm(dtype.name, int(value))
    return tirx.FloatImm(dtype.name, float(value))


def is_prim_expr(value: Any) -> bool:
    """A TIR scalar expression (TVM 0.27 gives TIR and Relax expressions one base class; the type tells)."""
    return isinstance(value, tvm.ir.Expr) and isinstance(getattr(value, "ty", None), tvm.ir.PrimType)


def _scalar_argument(value: Any, dtype: str) -> Any:
    """The ``call_tir`` argument for a run-time scalar: the expression in the parameter's dtype."""
    return value if str(value.ty) == dtype else tirx.Cast(dtype, value)


def _pointer_dtype(name: str, spec: Any, what: str, ty: Any) -> Any:
    try:
        dtype = as_dtype(str(ty.dtype))
    except ScriptError:
        raise RelaxError(f"call({name}): {what} is a {ty.dtype} tensor, which has no tilus-tvm dtype") from None
    expected = spec.dtype
    if expected is not void and dtype != expected:
        raise RelaxError(f"call({name}): {what} must be a {expected.name} tensor (~{expected.name}), got {dtype.name}")
    return dtype


def _bind(name: str, specs: list, args: Sequence[Any], out_types: list) -> _Binding:
    binding = _Binding()
    dims_by_name: dict[str, Any] = {}
    for spec, value in zip(specs, args):
        if spec.kind == "const":
            binding.const_values[spec.name] = _const_value(name, spec, value)
        elif spec.kind == "scalar":
            binding.scalars[spec.name] = _scalar_value(name, spec, value)
        else:
            what = f"argument {spec.name}"
            ty = _tensor_type(name, what, value)
            binding.pointer_dtypes[spec.name] = _pointer_dtype(name, spec, what, ty)
            binding.tensors[spec.name] = value
            binding.tensor_types[spec.name] = ty
            for dim in (ty.shape.values if ty.shape is not None else ()):
                if isinstance(dim, tirx.Var) and is_prim_expr(dim):
                    dims_by_name.setdefault(str(dim.name), dim)
    for index, (spec, out) in enumerate(zip(specs[len(args):], out_types)):
        if spec.kind != "pointer":
            raise RelaxError(f"call({name}): parameter {spec.name} ({_describe([spec])}) cannot be an output; outputs "
                             f"are the kernel's last tensor parameters, so pass {spec.name} among the arguments")
        ty = _resolve_out(name, index, out, dims_by_name)
        binding.pointer_dtypes[spec.name] = _pointer_dtype(name, spec, f"output {spec.name} (out[{index}])", ty)
        binding.tensor_types[spec.name] = ty
        binding.outputs.append(spec.name)
    return binding


# --- lowering -----------------------------------------------------------------------------------
_LOWERED: dict = {}  # (kernel class, hyper-parameters, specialisation) -> (dps PrimFunc, KernelABI)


def lower_for_relax(kernel: Any, specs: list, binding: _Binding, arch: str) -> tuple[Any, Any]:
    """The kernel's destination-passing PrimFunc for these dtypes on ``arch``, named and marked for
    Relax, and its ABI. Lowered once per specialisation in this process."""
    from tilus_tvm.pipeline import Specialization, lower_specialized

    pointer_names = [s.name for s in specs if s.kind == "pointer"]
    spec = Specialization(tuple((s.name, binding.const_values[s.name]) for s in specs if s.kind == "const"),
                          frozenset(pointer_names), arch,
                          tuple((n, binding.pointer_dtypes[n]) for n in pointer_names
                                if any(s.name == n and s.dtype is void for s in specs)))
    key = (type(kernel), repr(sorted(kernel.hyper_parameters().items())), spec)
    if key not in _LOWERED:
        cls = type(kernel).__name__
        try:
            lowered = lower_specialized(kernel, specs, spec)
            prim_func = lowered.dps_prim_func()
        except CompileError as exc:
            if "writes no tensor" in str(exc):
                raise RelaxError(f"call({cls}): the kernel writes no tensor, so it has no output for R.call_tir to "
                                 f"return") from exc
            raise RelaxError(f"call({cls}): {exc}") from exc
        except ScriptError as exc:
            raise RelaxError(f"call({cls}): the kernel does not compile for these arguments: {exc}") from exc
        name = function_name(type(kernel).kernel_name(), key, spec)
        prim_func = wrap_in_root_block(prim_func).with_attr("global_symbol", name).with_attr(KERNEL_ATTR, True)
        _LOWERED[key] = (prim_func, lowered.abi)
    return _LOWERED[key]


ROOT_BLOCK = "tilus_root"


def wrap_in_root_block(func: Any) -> Any:
    """``func`` with its body inside an empty root block (``with T.sblock("tilus_root")``), as Relax's
    analyses expect of a PrimFunc: ``RewriteDataflowReshape`` asks every ``call_tir`` with one tensor
    argument whether its PrimFunc is a reshape, and that analysis fails on a body that is not a block.
    The ``"tilus"`` TIR pipeline unwraps it (:func:`unwrap_root_block`) before lowering."""
    from tvm import s_tir

    root = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], ROOT_BLOCK, func.body))
    return func.with_body(root).with_attr("s_tir", True)  # a block body: the s_tir verifier's


def unwrap_root_block(func: Any) -> Any:
    """The inverse of :func:`wrap_in_root_block` (``func`` itself when it has no such block)."""
    from tvm import s_tir

    body = func.body
    if isinstance(body, s_tir.SBlockRealize) and body.block.name_hint == ROOT_BLOCK:
        return func.with_body(body.block.body).without_attr("s_tir")
    return func


def function_name(kernel_name: str, key: Any, spec: Any) -> str:
    """``tilus_<kernel>_<dtypes>_<digest>``: one name per specialisation (the same in every process), so
    calls of one specialisation share a PrimFunc."""
    cls, hyper_parameters, _ = key
    dtypes = [(name, dtype.name) for name, dtype in spec.pointer_dtypes]
    identity = (cls.__module__, cls.__qualname__, hyper_parameters, spec.const_values, sorted(spec.aligned),
                spec.arch, dtypes)
    digest = hashlib.sha1(repr(identity).encode()).hexdigest()[:10]
    return re.sub(r"\W", "_", "_".join(["tilus", kernel_name, *sorted({d for _, d in dtypes}), digest]))


# --- checks against the lowered kernel ------------------------------------------------------------
def _check_outputs(name: str, abi: Any, binding: _Binding) -> None:
    written = [p.name for p in abi.outputs]
    for param in abi.params:
        if param.kind == "tensor" and param.writes and param.name not in binding.outputs:
            raise RelaxError(f"call({name}): the kernel writes {param.name}, which is passed as an input; outputs "
                             f"must be its last tensor parameters (it writes {', '.join(written)})")
    for output in binding.outputs:
        if output not in written:
            raise RelaxError(f"call({name}): out= gives {len(binding.outputs)} output(s) "
                             f"({', '.join(binding.outputs)}) "
                             f"but the kernel does not write {output}; it writes {', '.join(written)}, so give "
                             f"{len(written)} output(s)")


def _check_shapes(name: str, prim_func: Any, abi: Any, binding: _Binding) -> None:
    """Each tensor's rank, and each dimension known at build time, against the kernel's buffer shapes.

    A kernel dimension that is a scalar parameter (``m_size``) takes the value of the first tensor
    dimension it meets; everywhere else it must agree. Dimensions only known at run time are checked
    by the compiled function's entry code."""
    bound: dict[str, Any] = {}  # kernel scalar parameter -> the Relax dimension it takes
    order = [p for p in abi.dps_order() if p.kind == "tensor"]
    buffers = [p.ty for p in prim_func.params if isinstance(p.ty, tirx.BufferType)]  # TVM 0.27: buffers are vars
    for param, buffer in zip(order, buffers):
        kernel_shape = list(buffer.shape)
        ty = binding.tensor_types[param.name]
        what = f"output {param.name}" if param.is_output else f"argument {param.name}"
        if ty.ndim != len(kernel_shape):
            raise RelaxError(f"call({name}): {what} is a {ty.ndim}-D tensor {_shape_text(ty)}, the kernel expects "
                             f"{len(kernel_shape)}-D ({_dims_text(kernel_shape)})")
        if ty.shape is None:
            continue
        for axis, (kernel_dim, dim) in enumerate(zip(kernel_shape, ty.shape.values)):
            if isinstance(kernel_dim, tirx.Var):
                expected = bound.setdefault(str(kernel_dim.name), dim)
            elif isinstance(kernel_dim, tirx.IntImm):
                expected = kernel_dim
            else:
                continue
            if _differ(expected, dim):
                raise RelaxError(f"call({name}): {what} has shape {_shape_text(ty)}, the kernel expects "
                                 f"({_dims_text(kernel_shape)}): dimension {axis} is {_dim_text(dim)}, expected "
                                 f"{_dim_text(expected)}")
    for param in abi.scalars:
        given = binding.scalars.get(param.name)
        if param.from_shape and given is not None and param.name in bound and _differ(given, bound[param.name]):
            raise RelaxError(f"call({name}): argument {param.name}={_dim_text(given)} disagrees with the tensor "
                             f"dimension that gives it ({_dim_text(bound[param.name])})")


def _dim_text(dim: Any) -> str:
    return str(dim.value) if isinstance(dim, tirx.IntImm) else str(dim)


def _differ(a: Any, b: Any) -> bool:
    """Two dimensions known to differ: both constants, of different values."""
    return isinstance(a, tirx.IntImm) and isinstance(b, tirx.IntImm) and a.value != b.value


def _dims_text(dims: list) -> str:
    return ", ".join(_dim_text(d) for d in dims)


def _shape_text(ty: Any) -> str:
    return "(?)" if ty.shape is None else f"({_dims_text(list(ty.shape.values))})"


# --- where the PrimFunc goes ------------------------------------------------------------------------
def module_adder() -> Callable[[Any, str], Any]:
    """How to add a PrimFunc to the module being built here: the ``@I.ir_module`` being parsed, or the
    current ``relax.BlockBuilder``. Either returns the GlobalVar (an existing one for a name already there)."""
    from tvm.script.ir_builder import IRBuilder

    if IRBuilder.is_in_scope():
        from tvm.script.ir_builder import ir as ir_builder
        from tvm.script.ir_builder.ir.frame import IRModuleFrame

        frame = next((f for f in IRBuilder.current().frames if isinstance(f, IRModuleFrame)), None)
        if frame is None:
            raise RelaxError("call: this @R.function is not inside an @I.ir_module, so there is no module to put the "
                             "kernel in; define it in an @I.ir_module class (or build it with relax.BlockBuilder)")

        def add_to_frame(func: Any, name: str) -> Any:
            existing = frame.global_vars.get(name)
            if existing is not None:
                return existing
            gvar = ir_builder.decl_function(name, func)
            ir_builder.def_function(name, func)
            return gvar

        return add_to_frame
    builder = relax.BlockBuilder.current()
    if builder is None:
        raise RelaxError("call: no module is being built; use it inside an @I.ir_module's @R.function or inside "
                         "relax.BlockBuilder code (with builder.function(...))")
    return block_builder_adder(builder)


def block_builder_adder(builder: Any) -> Callable[[Any, str], Any]:
    """Adds PrimFuncs to ``builder``'s module, once per name."""

    def add(func: Any, name: str) -> Any:
        for gvar in builder.get().get_global_vars():
            if gvar.name_hint == name:
                return gvar
        return builder.add_func(func, name)

    return add


def resolve_target_arch(target: Any) -> str:
    """``sm_XY`` for ``target``; None: the current ``tvm.target.Target`` when it is CUDA, else the GPU's."""
    from tilus_tvm.target import resolve_arch

    if target is None:
        current = tvm.target.Target.current(allow_none=True)
        if current is not None and current.kind.name == "cuda":
            target = current
    try:
        return resolve_arch(target)
    except CompileError as exc:
        raise RelaxError(f"call: {exc}") from exc
