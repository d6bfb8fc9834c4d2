"""``quantized_matmul`` as PyTorch custom operators, so that ``torch.compile`` traces a call into its graph.

A ``QuantizedWeight`` and a ``Config`` are Python objects, which an operator's schema cannot hold: a traced call
passes the weight's storage tensor with its format as text (``WeightFormat.spec``) and the configuration as text
(``Config.text``, "" for none), and the operator rebuilds both before calling :func:`quantized_matmul` eagerly. Both
texts are made when the objects are, not while tracing (where ``dynamic=True`` makes their ints symbolic). Two
operators, one per form of the call:

- ``torch.ops.tilus_tvm.quantized_matmul(a, storage, scales, zeros, weight, dtype, group_size, config, tune,
  dependent_launch) -> Tensor`` returns a new output;
- ``torch.ops.tilus_tvm.quantized_matmul_out(..., out)`` writes ``out`` (``mutates_args=("out",)``).

Their fake (meta) functions run every argument check of :func:`~tilus_tvm.schedules.quantized_matmul.check_call`
while the graph is traced, so a wrong shape, dtype or configuration fails at compile time with the message of the
eager call, before anything runs. Users do not call the operators: ``quantized_matmul`` takes this path by itself
under ``torch.compile`` (``torch.compiler.is_compiling()``), with ``fullgraph=True`` and CUDA graphs
(``mode="reduce-overhead"``) too.

    >>> f = torch.compile(lambda x: quantized_matmul(x, qw, s) + bias, fullgraph=True)   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from tilus_tvm.dtypes import as_dtype
from tilus_tvm.schedules.quantized_configs import Config
from tilus_tvm.schedules.quantized_weight import QuantizedWeight, WeightFormat, check_weight


def _call_arguments(a, storage, scales, zeros, weight, dtype, group_size, config, tune, dependent_launch):
    """The keyword arguments of the eager call that the operator's arguments stand for."""
    return dict(a=a, packed_weight=QuantizedWeight(storage, WeightFormat.from_spec(weight)), scales=scales,
                zeros=zeros, dtype=dtype, group_size=group_size, config=Config.from_text(config) if config else None,
                tune=tune, dependent_launch=dependent_launch)


def _check_traced(out, **arguments):
    """The eager call's checks on fake tensors (the GPU is asked only where there is one), and a configuration
    given by the caller checked by building its kernel (which compiles only when launched)."""
    from tilus_tvm.schedules.quantized_matmul import check_call, kernel_for

    fmt, shape, _ = check_call(out=out, ask_device=torch.cuda.is_available(), **arguments)
    if arguments["config"] is not None:
        kernel_for(fmt, arguments["a"].dtype, arguments["zeros"] is not None, arguments["config"],
                   arguments["dependent_launch"])
    return shape


@torch.library.custom_op("tilus_tvm::quantized_matmul", mutates_args=())
def quantized_matmul_op(a: torch.Tensor, storage: torch.Tensor, scales: torch.Tensor, zeros: Optional[torch.Tensor],
                        weight: str, dtype: Optional[str], group_size: Optional[int], config: str,
                        tune: Optional[bool], dependent_launch: bool) -> torch.Tensor:
    from tilus_tvm.schedules.quantized_matmul import quantized_matmul

    return quantized_matmul(**_call_arguments(a, storage, scales, zeros, weight, dtype, group_size, config, tune,
                                              dependent_launch))


@quantized_matmul_op.register_fake
def _(a, storage, scales, zeros, weight, dtype, group_size, config, tune, dependent_launch):
    shape = _check_traced(None, **_call_arguments(a, storage, scales, zeros, weight, dtype, group_size, config,
                                                  tune, dependent_launch))
    return a.new_empty(shape)


@torch.library.custom_op("tilus_tvm::quantized_matmul_out", mutates_args=("out",))
def quantized_matmul_out_op(a: torch.Tensor, storage: torch.Tensor, scales: torch.Tensor,
                            zeros: Optional[torch.Tensor], out: torch.Tensor, weight: str, dtype: Optional[str],
                            group_size: Optional[int], config: str, tune: Optional[bool],
                            dependent_launch: bool) -> None:
    from tilus_tvm.schedules.quantized_matmul import quantized_matmul

    quantized_matmul(out=out, **_call_arguments(a, storage, scales, zeros, weight, dtype, group_size, config, tune,
                                                dependent_launch))


@quantized_matmul_out_op.register_fake
def _(a, storage, scales, zeros, out, weight, dtype, group_size, config, tune, dependent_launch):
    _check_traced(out, **_call_arguments(a, storage, scales, zeros, weight, dtype, group_size, config, tune,
                                         dependent_launch))


def traced_call(a: Any, packed_weight: Any, scales: Any, zeros: Any = None, out: Any = None, *, dtype: Any = None,
                group_size: Optional[int] = None, config: Optional[Config] = None, tune: Optional[bool] = None,
                dependent_launch: bool = False) -> Any:
    """``quantized_matmul``'s call while ``torch.compile`` traces it: the weight and the configuration as the
    operators' arguments (text); the checks run in the operators' fake functions."""
    from tilus_tvm.schedules.quantized_matmul import check_config

    if not isinstance(packed_weight, QuantizedWeight):
        check_weight(packed_weight, scales, zeros)  # (raises the eager call's error)
    check_config(config)
    arguments = (a, packed_weight.storage, scales, zeros)
    options = (packed_weight.format.spec, None if dtype is None else as_dtype(dtype).name, group_size,
               "" if config is None else config.text, tune, dependent_launch)
    if out is None:
        return torch.ops.tilus_tvm.quantized_matmul(*arguments, *options)
    torch.ops.tilus_tvm.quantized_matmul_out(*arguments, out, *options)
    return out
