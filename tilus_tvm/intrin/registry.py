"""The table of ``tilus.*`` tensor intrinsics: one :class:`IntrinSpec` per name, registered with TVM once.

Each spec keeps the description and implementation ``PrimFunc`` handed to
``tvm.s_tir.TensorIntrin.register`` together with the facts the package docstring tabulates: the
PTX instruction the implementation emits, the operands, and where the fragment layout comes from.
Registration is idempotent: registering a name again (a reloaded module) keeps the first
definition, in this table and in TVM's.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx
from tvm.s_tir import TensorIntrin

from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import TilusError

PREFIX = "tilus."


class IntrinError(TilusError, ValueError):
    """A tensor intrinsic or an emitter was asked for something it does not provide."""


@dataclass(frozen=True)
class IntrinSpec:
    """One registered tensor intrinsic.

    ``ptx`` is the instruction the implementation emits; ``layout`` names the register layout that
    places each fragment element (``tilus_tvm.layout.atoms``), or says that there is no fragment.
    """

    name: str
    ptx: str
    layout: str
    desc: tirx.PrimFunc
    impl: tirx.PrimFunc

    @property
    def operands(self) -> str:
        """The buffers of ``desc`` (and ``impl``) in parameter order, ``name[shape] dtype scope``."""
        # In TVM 0.27 a PrimFunc's buffer parameters are the buffers themselves.
        return ", ".join(f"{b.name}{[int(x) for x in b.shape]} {as_dtype(str(b.dtype)).ptx} {b.scope()}"
                         for b in self.desc.params)


_SPECS: dict[str, IntrinSpec] = {}


def register(spec: IntrinSpec) -> IntrinSpec:
    """Record ``spec`` and register it with TVM; a name already registered keeps its first definition."""
    if not spec.name.startswith(PREFIX):
        raise IntrinError(f"register: intrinsic name {spec.name!r} must start with {PREFIX!r}")
    first = _SPECS.setdefault(spec.name, spec)
    if TensorIntrin.get(spec.name, allow_missing=True) is None:
        TensorIntrin.register(spec.name, first.desc, first.impl)
    return first


def names() -> list[str]:
    """Every ``tilus.*`` tensor intrinsic, sorted."""
    return sorted(_SPECS)


def spec(name: str) -> IntrinSpec:
    """The :class:`IntrinSpec` registered as ``name``."""
    try:
        return _SPECS[name]
    except KeyError:
        close = [n for n in names() if n.split("_")[0] == name.split("_")[0]]
        hint = f"; intrinsics of that family: {', '.join(close)}" if close else ""
        raise IntrinError(f"spec: no tensor intrinsic named {name!r}{hint}") from None
