"""Checking and converting launch arguments against a kernel's parameters.

:func:`bind` is the careful path: every problem is reported in Python, naming the parameter,
before anything reaches the GPU -- wrong count, wrong type, out-of-range scalar, tensor of another
dtype, CPU tensor, no GPU at all. A launch that passes it once gets a generated launcher
(:mod:`tilus_tvm.runtime.launcher`) that later launches use instead, leaving shape, dtype and device
checks to the compiled function's own entry code; any failure there comes back here.
"""
from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass, field
from typing import Any, Optional

from tilus_tvm.dtypes import as_dtype, void
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.lang.signature import ParamSpec
from tilus_tvm.lowp import PackedTensor, is_packed, storage_torch_dtypes

VECTOR_ALIGNMENT = 16
MAX_INDEX = 2**31 - 1  # kernels index with int32 (inside a sub-view, for a tensor reached through sub-views)


@dataclass
class BoundArguments:
    const_values: dict[str, Any] = field(default_factory=dict)
    scalars: list[Any] = field(default_factory=list)  # run-time scalars, in parameter order
    call_args: list[Any] = field(default_factory=list)  # run-time scalars and tensors, in parameter order
    device: Optional[int] = None
    aligned: frozenset = frozenset()  # pointer parameters whose data is 16-byte aligned
    pointer_dtypes: dict[str, Any] = field(default_factory=dict)  # ~void parameters: their tensors' dtypes
    spans: dict[str, int] = field(default_factory=dict)  # tensor parameters: elements from first to last

    @property
    def key(self) -> tuple:
        """What selects a specialisation: compile-time values, pointer alignment, ``~void`` dtypes."""
        return (tuple(self.const_values.items()), tuple(sorted(self.aligned)),
                tuple(sorted((name, dtype.name) for name, dtype in self.pointer_dtypes.items())))


def describe_signature(specs: list[ParamSpec]) -> str:
    def annotation(s: ParamSpec) -> str:
        return s.annotation.__name__ if s.kind == "const" else repr(s.annotation)

    return ", ".join(f"{s.name}: {annotation(s)}" for s in specs)


def _const(spec: ParamSpec, value: Any, kernel: str) -> Any:
    expected = spec.annotation
    ok = (isinstance(value, bool) if expected is bool else
          isinstance(value, numbers.Integral) and not isinstance(value, bool) if expected is int else
          isinstance(value, numbers.Real) and not isinstance(value, bool))
    if not ok:
        raise LaunchError(f"{kernel}: argument {spec.name} is a compile-time {expected.__name__}, got "
                          f"{type(value).__name__} {value!r}")
    return expected(value)


def _scalar(spec: ParamSpec, value: Any, kernel: str) -> Any:
    dtype = spec.dtype
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0 and not isinstance(value, (int, float)):
        value = value.item()  # a 0-d torch/numpy scalar
    if dtype.kind in ("int", "uint"):
        try:
            value = operator.index(value)
        except TypeError:
            raise LaunchError(f"{kernel}: argument {spec.name} ({dtype.name}) must be an integer, got "
                              f"{type(value).__name__} {value!r}") from None
        if not dtype.min_value <= value <= dtype.max_value:
            raise LaunchError(f"{kernel}: argument {spec.name}={value} is out of range for {dtype.name}")
        return value
    if dtype.kind == "bool":
        return bool(value)
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise LaunchError(f"{kernel}: argument {spec.name} ({dtype.name}) must be a number, got {value!r}")
    return float(value)


def _packed_hint(dtype) -> str:
    if is_packed(dtype) and dtype.torch_name is None:
        return ": a torch.uint8 tensor of its packed bytes, e.g. tilus_tvm.from_torch(t, dtype).storage"
    return ""


def flat_view(tensor):
    """A 1-D view over the storage the tensor spans, starting at its first element."""
    if tensor.is_contiguous():
        return tensor.reshape(-1)
    return tensor.as_strided((_span(tensor),), (1,))


def _span(tensor) -> int:
    """Elements from the tensor's first element to its last, inclusive."""
    if any(stride < 0 for stride in tensor.stride()):
        raise LaunchError("tensors with negative strides are not supported")
    if tensor.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (asked only on the careful path: it is not free)."""
    import torch

    return torch.cuda.is_available()


def no_gpu_error(kernel: str) -> LaunchError:
    """The error for a launch on a machine without a CUDA GPU, pointing to what works there."""
    import torch

    reason = ("this torch build has no CUDA support" if torch.version.cuda is None else
              "torch.cuda.is_available() is False")
    return LaunchError(
        f"{kernel}: cannot launch, this machine has no CUDA GPU ({reason}; torch {torch.__version__}). Kernels "
        f"run on the GPU; without one you can still compile and inspect them: kernel.compile(*args, "
        f"target=\"sm_90\") (CUDA source, PTX, an exported library), kernel.lower(*args, target=\"sm_90\") (the "
        f"TVM IRModule), kernel.tile_program(*args) (the tile program after every pass)")


def check_index_range(kernel: str, specs: list[ParamSpec], abi_params: tuple, bound: BoundArguments) -> None:
    """Refuse tensors the compiled kernel would index past int32: a tensor spanning more than
    ``MAX_INDEX`` elements, unless the kernel reaches it only through sub-views (``index_span`` in its
    ABI parameter, ``Script.global_subview``), whose largest span -- computed from the scalar
    arguments -- must fit instead."""
    values = {spec.name: value for spec, value in zip([s for s in specs if s.kind == "scalar"], bound.scalars)}
    for param in abi_params:
        if param.kind != "tensor" or param.name not in bound.spans:
            continue
        if param.index_span is None:
            span = bound.spans[param.name]
            if span > MAX_INDEX:
                raise LaunchError(f"{kernel}: argument {param.name} spans {span} elements; the kernel indexes it "
                                  f"with int32 (at most {MAX_INDEX}). A kernel reaches larger tensors through "
                                  f"sub-views with 64-bit bases (self.global_subview)")
            continue
        namespace = {"__builtins__": {}, "int": int, "min": min, "max": max}
        span = int(eval(param.index_span, namespace, dict(values)))  # noqa: S307 - kernel_abi wrote it
        if span > MAX_INDEX:
            raise LaunchError(f"{kernel}: argument {param.name} is indexed through sub-views spanning {span} "
                              f"elements ({param.index_span}); indices inside a sub-view are int32 (at most "
                              f"{MAX_INDEX})")


def unwrap_packed(specs: list[ParamSpec], args: tuple, kernel: str) -> tuple:
    """``args`` with each :class:`~tilus_tvm.PackedTensor` given for a pointer parameter replaced by the torch
    tensor the kernel takes (Tilus passes its own tensors to kernels): its packed bytes for a packed type, its
    typed view (``.torch()``) for the others; its dtype must be the parameter's (for ``~void``: a type torch has)."""
    if not any(isinstance(value, PackedTensor) for value in args):
        return args
    unwrapped = list(args)
    for i, (spec, value) in enumerate(zip(specs, args)):
        if not isinstance(value, PackedTensor) or spec.kind != "pointer":
            continue
        if spec.dtype is void:
            if value.dtype.torch_name is None:
                raise LaunchError(f"{kernel}: argument {spec.name} (~void) is a PackedTensor of {value.dtype.name}, "
                                  f"which torch has no dtype for; declare the parameter ~{value.dtype.name}")
            unwrapped[i] = value.torch()
        elif value.dtype != spec.dtype:
            raise LaunchError(f"{kernel}: argument {spec.name} must be a {spec.dtype.name} tensor "
                              f"(~{spec.dtype.name}), got a PackedTensor of {value.dtype.name}")
        else:
            unwrapped[i] = value.storage if is_packed(spec.dtype) else value.torch()
    return tuple(unwrapped)


def bind(specs: list[ParamSpec], args: tuple, kernel: str, require_cuda: bool) -> BoundArguments:
    if len(args) != len(specs):
        raise LaunchError(f"{kernel} takes {len(specs)} arguments ({describe_signature(specs)}), got {len(args)}")
    import torch

    args = unwrap_packed(specs, args, kernel)

    bound = BoundArguments()
    aligned = set()
    for spec, value in zip(specs, args):
        if spec.kind == "const":
            bound.const_values[spec.name] = _const(spec, value, kernel)
        elif spec.kind == "scalar":
            scalar = _scalar(spec, value, kernel)
            bound.scalars.append(scalar)
            bound.call_args.append(scalar)
        else:
            if not isinstance(value, torch.Tensor):
                raise LaunchError(f"{kernel}: argument {spec.name} (~{spec.dtype.name}) must be a torch tensor or a "
                                  f"PackedTensor, got {type(value).__name__}")
            if spec.dtype is void:
                try:
                    bound.pointer_dtypes[spec.name] = as_dtype(value.dtype)
                except ScriptError:
                    raise LaunchError(f"{kernel}: argument {spec.name} (~void) is a {value.dtype} tensor, which has "
                                      f"no tilus-tvm dtype") from None
            elif value.dtype not in storage_torch_dtypes(spec.dtype):
                raise LaunchError(f"{kernel}: argument {spec.name} must be a {spec.dtype.name} tensor "
                                  f"(~{spec.dtype.name}{_packed_hint(spec.dtype)}), got {value.dtype}")
            if require_cuda:
                if not value.is_cuda:
                    if not cuda_available():  # no GPU at all: moving the tensor would not help
                        raise no_gpu_error(kernel)
                    raise LaunchError(f"{kernel}: argument {spec.name} is a tensor on {value.device}; kernels run on "
                                      f"the GPU, move it there first (e.g. tensor.cuda())")
                if bound.device is None:
                    bound.device = value.device.index
                elif value.device.index != bound.device:
                    raise LaunchError(f"{kernel}: argument {spec.name} is on cuda:{value.device.index}, earlier "
                                      f"tensors are on cuda:{bound.device}")
            bound.spans[spec.name] = _span(value)  # checked against the compiled kernel's indexing
            if value.data_ptr() % VECTOR_ALIGNMENT == 0:
                aligned.add(spec.name)
            bound.call_args.append(value)
    bound.aligned = frozenset(aligned)
    if require_cuda and bound.device is None:
        if not cuda_available():
            raise no_gpu_error(kernel)
        bound.device = torch.cuda.current_device()
    return bound
