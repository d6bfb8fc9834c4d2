"""Building a tensor intrinsic's description or implementation ``PrimFunc``.

Both are ``s_tir`` PrimFuncs of the same signature -- one ``match_buffer`` per operand -- whose body is
a root block reading and writing the operands' whole regions. :func:`intrin_func` builds that frame
with TVM's IR builder and lets a callback fill the root block.

The IR builder, not the ``@T.prim_func`` decorator: the decorator walks the Python stack
(``inspect.stack()``) to capture closure variables, about 70 ms per function here; registering the
package's intrinsics through it took 6 s, through the builder a few hundred milliseconds. The
result is the same TVMScript (``func.script()`` prints it, and it parses back).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb


@dataclass(frozen=True)
class Operand:
    """One buffer parameter: ``name[shape] dtype`` in ``scope``; ``strided`` gives it symbolic strides.

    ``access`` is ``"r"``, ``"w"`` or ``"rw"``: whether the root block reads and/or writes it.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str
    access: str
    strided: bool = False


def named(names: str, variables):
    """Give the loop or axis variables ``variables`` the space-separated ``names`` (for printing); return them.

    >>> from tvm import tirx
    >>> [v.name for v in named("i j", [tirx.Var("v", "int32"), tirx.Var("v", "int32")])]
    ['i', 'j']
    """
    single = isinstance(variables, tirx.Var)
    variables = [variables] if single else list(variables)
    result = [IRBuilder.name(name, var) for name, var in zip(names.split(), variables)]
    return result[0] if single else result


def _whole(buffer: tirx.Buffer, shape: Sequence[int]):
    return buffer[tuple(slice(0, extent) for extent in shape)]


def intrin_func(func_name: str, operands: Sequence[Operand], body: Callable[..., None],
                read_order: Optional[Sequence[str]] = None) -> tirx.PrimFunc:
    """``@T.prim_func(s_tir=True) def func_name(<operands>): with T.sblock("root"): body(*buffers)``.

    Every operand is a ``match_buffer`` with ``offset_factor=1``; a strided one gets stride variables
    ``<name>_stride0, ...``. The root block reads the operands whose ``access`` has ``"r"`` -- in operand
    order, or in ``read_order`` (operand names) -- and writes those with ``"w"``. ``body`` runs inside
    it, under an active IR builder. The read order matters: tensorize compares the root block's
    reads with those of the block it replaces, and an update block ``C = C + ...`` reads C first.
    """
    with IRBuilder() as builder:
        with Tb.prim_func(s_tir=True):
            Tb.func_name(func_name)
            buffers = []
            for operand in operands:
                handle = Tb.arg(operand.name.lower(), Tb.handle())
                strides = None
                if operand.strided:
                    strides = [IRBuilder.name(f"{operand.name}_stride{d}", Tb.int32())
                               for d in range(len(operand.shape))]
                buffer = Tb.match_buffer(handle, operand.shape, operand.dtype, strides=strides, scope=operand.scope,
                                         offset_factor=1)
                buffers.append(IRBuilder.name(operand.name, buffer))
            with Tb.sblock("root"):
                reads = [(o.name, _whole(b, o.shape)) for b, o in zip(buffers, operands) if "r" in o.access]
                if read_order is not None:
                    reads.sort(key=lambda read: list(read_order).index(read[0]))
                Tb.reads(*[region for _, region in reads])
                Tb.writes(*[_whole(b, o.shape) for b, o in zip(buffers, operands) if "w" in o.access])
                body(*buffers)
    return builder.get()
