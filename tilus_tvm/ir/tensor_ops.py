"""Instructions that rearrange, slice, reinterpret or scan register tensors, and take the address of
a tensor element; with the tensor values that build them.

Like ``a + b``, ``x[0]``, ``x.transpose()`` or ``self.reshape(x, shape)`` build a value
(:class:`OpValue`) whose checks run at once, so errors point at the author's line; the builder turns
it into one instruction when it is bound or used (:meth:`tilus_tvm.ir.builder.Builder.materialize`).

Views (``ReshapeRegister``, ``PermuteRegister``, ``SliceRegister``, ``ViewRegister``) keep every
element in the thread and register that held it whenever the layouts allow (layout inference gives
the output that layout); otherwise the data goes through shared memory
(:mod:`tilus_tvm.instructions.views`). ``self.view`` with a layout or a packed type is the per-thread
bit view :class:`~tilus_tvm.ir.inst.RegisterView`, built here too (:func:`view_value`) and emitted by
:mod:`tilus_tvm.instructions.register_bits`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir.inst import Instruction, RegisterView
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus_tvm.ir.values import TensorValue, describe, is_scalar, is_tensor_like


# ---- instructions --------------------------------------------------------------------------------
@dataclass(eq=False)
class ReshapeRegister(Instruction):
    """``output`` is ``x`` read row-major under another shape of the same size (also squeeze,
    unsqueeze and flatten)."""

    output: RegisterTensor
    x: RegisterTensor


@dataclass(eq=False)
class PermuteRegister(Instruction):
    """``output[i_0, ..., i_{n-1}]`` is ``x`` at the index whose dimension ``dims[k]`` is ``i_k``."""

    output: RegisterTensor
    x: RegisterTensor
    dims: tuple[int, ...]


@dataclass(eq=False)
class SliceRegister(Instruction):
    """The sub-tile of ``x`` at ``offsets`` (one per dimension of ``x``, ints or scalar expressions)
    with ``output``'s shape along the dimensions ``dims`` of ``x`` (the others are indexed at their
    offset and dropped)."""

    output: RegisterTensor
    x: RegisterTensor
    offsets: tuple[Any, ...]
    dims: tuple[int, ...]

    def extents(self) -> list[int]:
        """The extent of the sub-tile along every dimension of ``x`` (1 where a dimension is dropped)."""
        extents = [1] * len(self.x.shape)
        for d, size in zip(self.dims, self.output.shape):
            extents[d] = size
        return extents


@dataclass(eq=False)
class SliceAssignRegister(Instruction):
    """``dst[index] = src``: the sub-tile of ``dst`` at ``offsets`` along ``dims`` (as in
    :class:`SliceRegister`) is overwritten with ``src`` (a register tensor of the sub-tile's shape, or a
    scalar for every element); the rest of ``dst`` is kept."""

    dst: RegisterTensor
    src: Any  # RegisterTensor or scalar
    offsets: tuple[Any, ...]
    dims: tuple[int, ...]

    def operands(self) -> list[RegisterTensor]:
        return [t for t in (self.src, self.dst) if isinstance(t, RegisterTensor)]

    shape: tuple[int, ...] = ()  # the sub-tile's shape (src's, for a tensor src)

    def extents(self) -> list[int]:
        """The extent of the sub-tile along every dimension of ``dst`` (1 where an int index drops it)."""
        extents = [1] * len(self.dst.shape)
        for d, size in zip(self.dims, self.shape):
            extents[d] = size
        return extents


@dataclass(eq=False)
class ViewRegister(Instruction):
    """The tile's row-major bytes read as ``output``'s dtype, the last dimension scaled by the ratio of
    the element widths (``self.view`` without a layout, types of 8 to 64 bits). The per-thread view,
    with a layout or a packed type, is :class:`tilus_tvm.ir.inst.RegisterView`."""

    output: RegisterTensor
    x: RegisterTensor


@dataclass(eq=False)
class Scan(Instruction):
    """Prefix ``op`` (add, mul, max, min, and, or, xor) of ``x`` along ``dim``, inclusive or exclusive."""

    output: RegisterTensor
    x: RegisterTensor
    dim: int
    op: str
    exclusive: bool = False


@dataclass(eq=False)
class TensorItemPtr(Instruction):
    """``var`` (a pointer scalar) is the address of ``tensor[indices]`` (a global or shared tensor)."""

    var: Any  # tvm.tirx.Var of pointer type
    tensor: Any  # GlobalTensor or SharedTensor
    indices: tuple[Any, ...]


# ---- values ----------------------------------------------------------------------------------------
@dataclass(eq=False, repr=False)
class OpValue(TensorValue):
    """A tensor value computed by one instruction: ``build(output, *operand_tensors)`` makes it."""

    build: Callable[..., Instruction] = None  # type: ignore[assignment]

    def instruction(self, output: RegisterTensor, operands: Sequence[Any]) -> Instruction:
        return self.build(output, *operands)


def _require_tensor(op: str, x: Any) -> None:
    if not is_tensor_like(x):
        raise ScriptError(f"{op}: x must be a register tensor, got {describe(x)}")


def _static_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def normalize_dims(op: str, dims: Any, rank: int, what: str = "dim") -> list[int]:
    """``dims`` (an int or a sequence) as distinct dimensions in ``[0, rank)``, negative ones from the end."""
    items = [dims] if _static_int(dims) else list(dims) if isinstance(dims, (list, tuple, range)) else None
    if items is None or not all(_static_int(d) for d in items):
        raise ScriptError(f"{op}: {what} must be an int or a list of ints, got {dims!r}")
    out = []
    for d in items:
        if not -rank <= d < rank:
            raise ScriptError(f"{op}: {what} {d} is out of range for a tensor of rank {rank}")
        out.append(d % rank)
    if len(set(out)) != len(out):
        raise ScriptError(f"{op}: {what} {list(items)} names a dimension twice")
    return out


def reshape_value(x: Any, shape: Sequence[int], op: str = "reshape") -> OpValue:
    """``x`` read row-major under ``shape`` (one entry may be -1: the size left over)."""
    _require_tensor(op, x)
    shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    if not all(_static_int(s) and (s >= 1 or s == -1) for s in shape) or shape.count(-1) > 1:
        raise ScriptError(f"{op}: shape {shape} must hold positive ints (at most one -1)")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if math.prod(x.shape) % known:
            raise ScriptError(f"{op}: cannot infer the -1 of shape {shape} for {describe(x)}")
        shape[shape.index(-1)] = math.prod(x.shape) // known
    if math.prod(shape) != math.prod(x.shape):
        raise ScriptError(f"{op}: cannot reshape {describe(x)} ({math.prod(x.shape)} elements) to shape {shape} "
                          f"({math.prod(shape)} elements)")
    return OpValue(op, (x,), x.dtype, tuple(shape), build=ReshapeRegister)


def squeeze_value(x: Any, dim: Any) -> OpValue:
    _require_tensor("squeeze", x)
    dims = normalize_dims("squeeze", dim, len(x.shape))
    for d in dims:
        if x.shape[d] != 1:
            raise ScriptError(f"squeeze: dimension {d} of {describe(x)} has size {x.shape[d]}, not 1")
    return reshape_value(x, [s for d, s in enumerate(x.shape) if d not in dims] or [1], "squeeze")


def unsqueeze_value(x: Any, dim: Any) -> OpValue:
    _require_tensor("unsqueeze", x)
    count = 1 if _static_int(dim) else len(dim)
    dims = normalize_dims("unsqueeze", dim, len(x.shape) + count)
    rest = iter(x.shape)
    return reshape_value(x, [1 if d in dims else next(rest) for d in range(len(x.shape) + count)], "unsqueeze")


def permute_value(x: Any, dims: Sequence[int], op: str = "permute") -> OpValue:
    _require_tensor(op, x)
    if not isinstance(dims, (list, tuple)) or sorted(normalize_dims(op, list(dims), len(x.shape), "dims")) != list(
            range(len(x.shape))) or len(dims) != len(x.shape):
        raise ScriptError(f"{op}: dims {dims!r} must be a permutation of {list(range(len(x.shape)))} for {describe(x)}")
    dims = tuple(d % len(x.shape) for d in dims)
    return OpValue(op, (x,), x.dtype, tuple(x.shape[d] for d in dims),
                   build=lambda out, src: PermuteRegister(out, src, dims))


def transpose_value(x: Any) -> OpValue:
    _require_tensor("transpose", x)
    if len(x.shape) != 2:
        raise ScriptError(f"transpose: {describe(x)} is not 2-D; use self.permute(x, dims)")
    return permute_value(x, (1, 0), "transpose")


def parse_index(what: str, shape: Sequence[int], index: Any) -> tuple[list[Any], list[int], list[int]]:
    """A Python subscript of a tensor of ``shape`` as ``(offsets, kept dims, kept extents)``.

    Entries: an int or integer scalar (the dimension is dropped), ``:`` or ``a:b`` with a static
    extent (kept), ``...`` (full dimensions); missing trailing entries are ``:``.
    """
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(item is Ellipsis for item in items) > 1:
        raise ScriptError(f"{what}[...]: at most one ... in an index")
    if any(item is Ellipsis for item in items):
        at = next(k for k, item in enumerate(items) if item is Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(shape) - len(items) + 1)
    if len(items) > len(shape):
        raise ScriptError(f"{what}[{index!r}]: {len(items)} indices for a tensor of rank {len(shape)}")
    items += [slice(None)] * (len(shape) - len(items))
    offsets, dims, extents = [], [], []
    for d, (item, size) in enumerate(zip(items, shape)):
        if isinstance(item, slice):
            if item.step not in (None, 1):
                raise ScriptError(f"{what}: dimension {d}: slices with a step are not supported, got {item}")
            start = 0 if item.start is None else item.start
            stop = size if item.stop is None else item.stop
            for bound in (start, stop):
                if isinstance(bound, bool) or not is_scalar(bound) or isinstance(bound, float):
                    raise ScriptError(f"{what}: dimension {d}: slice bound {bound!r} must be an int or an integer "
                                      f"scalar")
            extent = _static_extent(start, stop)
            if extent is None:
                raise ScriptError(f"{what}: dimension {d}: the slice {start}:{stop} must have a compile-time "
                                  f"length (write it as start:start + n)")
            if extent < 1 or (_static_int(start) and (start < 0 or start + extent > size)):
                raise ScriptError(f"{what}: dimension {d}: the slice {start}:{stop} is empty or outside [0, {size})")
            offsets.append(start)
            dims.append(d)
            extents.append(extent)
        else:
            if isinstance(item, bool) or not is_scalar(item) or isinstance(item, float):
                raise ScriptError(f"{what}: dimension {d}: index {item!r} must be an int, an integer scalar or a "
                                  f"slice")
            if _static_int(item) and not 0 <= item < size:
                raise ScriptError(f"{what}: index {item} is out of range for dimension {d} of size {size}")
            offsets.append(item)
    return offsets, dims, extents


def _static_extent(start: Any, stop: Any) -> Optional[int]:
    if _static_int(start) and _static_int(stop):
        return stop - start
    from tvm import sym, tirx

    extent = sym.Analyzer().simplify(stop - start)
    return int(extent.value) if isinstance(extent, tirx.IntImm) else None


def slice_value(x: Any, index: Any) -> OpValue:
    """``x[index]`` of a register tensor (see :func:`parse_index`)."""
    _require_tensor("slice", x)
    offsets, dims, extents = parse_index(describe(x), x.shape, index)
    offsets_t, dims_t = tuple(offsets), tuple(dims)
    return OpValue("slice", (x,), x.dtype, tuple(extents),
                   build=lambda out, src: SliceRegister(out, src, offsets_t, dims_t))


def slice_assign(builder: Any, dst: Any, index: Any, value: Any) -> None:
    """Emit ``dst[index] = value`` (``value``: a tensor of the sub-tile's shape, cast to ``dst``'s dtype,
    or a scalar)."""
    if not isinstance(dst, RegisterTensor):
        raise ScriptError(f"cannot assign to an element of {describe(dst)}; only register tensors take x[i] = v")
    offsets, dims, extents = parse_index(f"{dst.describe()}[...] =", dst.shape, index)
    value = builder.materialize(value)
    if isinstance(value, RegisterTensor):
        if tuple(value.shape) != tuple(extents):
            raise ScriptError(f"{dst.describe()}[...] = {value.describe()}: the sub-tile has shape {extents}")
        if value.dtype != dst.dtype:
            value = builder.cast(value, dst.dtype)
    elif not is_scalar(value):
        raise ScriptError(f"{dst.describe()}[...] = {describe(value)}: expected a register tensor or a scalar")
    builder.emit(SliceAssignRegister(dst, value, tuple(offsets), tuple(dims), tuple(extents)))


def _reject_bool(dtype: DataType) -> None:
    if dtype is dtypes.boolean:
        raise ScriptError("view: dtype bool cannot be viewed bit for bit in registers (a bool register holds no "
                          "defined bit pattern); convert it to an integer type first")


def view_value(x: Any, dtype: Any = None, layout: Any = None) -> OpValue:
    """The bits of ``x`` as ``dtype``: per thread in ``layout`` when one is given or a packed
    low-precision type is involved (:class:`~tilus_tvm.ir.inst.RegisterView`, checked by
    :func:`check_register_view`), else the tile's row-major bytes (:class:`ViewRegister`)."""
    from tilus_tvm.lowp import is_packed

    _require_tensor("view", x)
    dtype = x.dtype if dtype is None else dtypes.as_dtype(dtype)
    _reject_bool(x.dtype)
    _reject_bool(dtype)
    if layout is not None or is_packed(x.dtype) or is_packed(dtype):
        return _register_view_value(x, dtype, layout)
    if not x.shape:
        raise ScriptError(f"view: {describe(x)} has no last dimension to rescale")
    x_bits, bits, last = x.dtype.nbits, dtype.nbits, x.shape[-1]
    if bits >= x_bits:
        if bits % x_bits or (last * x_bits) % bits:
            raise ScriptError(f"view: the last dimension of {describe(x)} ({last} x {x_bits} bits) is not a whole "
                              f"number of {dtype.name} elements")
        new_last = last * x_bits // bits
    else:
        if x_bits % bits:
            raise ScriptError(f"view: a {x.dtype.name} element is not a whole number of {dtype.name} elements")
        new_last = last * (x_bits // bits)
    return OpValue("view", (x,), dtype, tuple(x.shape[:-1]) + (new_last,), build=ViewRegister)


def _register_view_value(x: Any, dtype: DataType, layout: Any) -> OpValue:
    """The per-thread view: ``layout`` (or, with none, x's shape and layout: same widths only)."""
    from tilus_tvm.layout.register import RegisterLayout

    if layout is None:
        if dtype.nbits != x.dtype.nbits:
            raise ScriptError(f"view: {describe(x)} as {dtype.name} changes the element width "
                              f"({x.dtype.nbits} -> {dtype.nbits} bits), so the view needs layout=... "
                              f"(a RegisterLayout giving each thread {x.dtype.nbits}/{dtype.nbits} times "
                              f"as many slots)")
        shape = tuple(x.shape)
    else:
        if not isinstance(layout, RegisterLayout):
            raise ScriptError(f"view: layout must be a RegisterLayout, got {layout!r}")
        shape = tuple(layout.shape)
        if isinstance(x, RegisterTensor) and x.layout is not None:
            check_register_view(x, layout, dtype)

    def build(out: RegisterTensor, src: RegisterTensor) -> RegisterView:
        wanted = layout if layout is not None else src.layout
        if out.layout is None:
            out.layout = wanted
        elif wanted is not None and out.layout != wanted:
            given = "the layout given to the view" if layout is not None else f"the layout of {src.describe()}"
            raise ScriptError(f"view: out {out.describe()} has layout {out.layout}, not {given}: {wanted}")
        if src.layout is not None and out.layout is not None:
            check_register_view(src, out.layout, out.dtype)
        return RegisterView(out, src)

    return OpValue("view", (x,), dtype, shape, build=build)


def check_register_view(x: RegisterTensor, layout: Any, dtype: DataType, error: type = ScriptError) -> None:
    """A per-thread view keeps every thread's bits: ``layout`` spreads over the threads of
    ``x.layout`` and gives each of them as many bits (``local_size * nbits``). Raises ``error``:
    :class:`ScriptError` when the script is built, :class:`CompileError` when the view is emitted
    (the layouts were inferred)."""
    x_layout = x.layout
    x_bits, bits = x_layout.local_size * x.dtype.nbits, layout.local_size * dtype.nbits
    if x_layout.num_threads != layout.num_threads or x_bits != bits:
        raise error(f"view: each of the {x_layout.num_threads} threads of layout {x_layout} holds "
                    f"{x_layout.local_size} x {x.dtype.nbits} bits of {x.dtype.name}, but layout {layout} spreads "
                    f"{layout.local_size} x {dtype.nbits} bits of {dtype.name} over {layout.num_threads} threads: "
                    f"{x_bits} bits per thread against {bits} ({x.describe()}); a view keeps every bit in its "
                    f"thread, so both layouts must spread over the same threads and give each as many bits")


SCAN_OPS = ("add", "mul", "max", "min", "and", "or", "xor")


def scan_value(x: Any, dim: int, op: str, exclusive: bool) -> OpValue:
    _require_tensor("scan", x)
    if op not in SCAN_OPS:
        raise ScriptError(f"scan: op must be one of {', '.join(SCAN_OPS)}, got {op!r}")
    (dim,) = normalize_dims("scan", dim, len(x.shape))
    if op in ("and", "or", "xor") and not (x.dtype.is_integer or x.dtype is dtypes.boolean):
        raise ScriptError(f"scan: op {op!r} needs an integer or bool tensor, got {describe(x)}")
    if op not in ("and", "or", "xor") and x.dtype is dtypes.boolean:
        raise ScriptError(f"scan: op {op!r} is not defined on bool tensor {describe(x)}; cast it first")
    exclusive = bool(exclusive)
    return OpValue("scan", (x,), x.dtype, tuple(x.shape), build=lambda out, src: Scan(out, src, dim, op, exclusive))


# ---- element addresses ---------------------------------------------------------------------------
@dataclass(eq=False)
class ItemPointer:
    """``tensor.item_ptr(...)`` / ``~tensor[i, j]``: the address of one element of a global or shared
    tensor, a pointer scalar once it is bound or passed to an instruction."""

    tensor: Any
    indices: tuple[Any, ...]

    def materialize_with(self, builder: Any) -> Any:
        import tvm
        from tvm import tirx

        root = self.tensor.root.name if isinstance(self.tensor, SharedTensor) else self.tensor.name
        var = tirx.Var(builder.fresh_name(f"{re.sub(r'[^0-9A-Za-z_]', '_', root)}_ptr"),
                       tvm.ir.PointerType(tvm.ir.PrimType(self.tensor.dtype.name),
                                          "global" if isinstance(self.tensor, GlobalTensor) else "shared.dyn"))
        builder.emit(TensorItemPtr(var, self.tensor, self.indices))
        builder.element_pointers[var] = (self.tensor, self.indices)
        return var

    def __bool__(self):
        raise ScriptError(f"the address of an element of {describe(self.tensor)} has no truth value")

    def __repr__(self) -> str:
        return f"ItemPointer({describe(self.tensor)}{list(self.indices)})"


@dataclass(eq=False)
class GlobalElement:
    """``g[i, j]`` of a global tensor: one element, whose address is ``~g[i, j]`` / ``.item_ptr()``."""

    tensor: GlobalTensor
    indices: tuple[Any, ...]

    def item_ptr(self) -> ItemPointer:
        return item_pointer(self.tensor, self.indices)

    def __invert__(self) -> ItemPointer:
        return self.item_ptr()

    def __bool__(self):
        raise ScriptError(f"{describe(self.tensor)}[...] has no truth value; read elements with self.load_scalar")


def item_pointer(tensor: Any, indices: Sequence[Any]) -> ItemPointer:
    """The address of ``tensor[indices]``; no indices for a tensor of one element."""
    if not isinstance(tensor, (GlobalTensor, SharedTensor)):
        raise ScriptError(f"item_ptr: expected a global or shared tensor, got {describe(tensor)}")
    indices = tuple(indices[0]) if len(indices) == 1 and isinstance(indices[0], (list, tuple)) else tuple(indices)
    if not indices:
        if not all(_static_int(s) and s == 1 for s in tensor.shape):
            raise ScriptError(f"item_ptr: {tensor.describe()} has more than one element; give the element's "
                              f"indices, item_ptr(i, j, ...), or index it first: t[i, j].item_ptr()")
        indices = (0,) * len(tensor.shape)
    if len(indices) != len(tensor.shape):
        raise ScriptError(f"item_ptr: {len(indices)} indices for {tensor.describe()} of rank {len(tensor.shape)}")
    for d, (i, size) in enumerate(zip(indices, tensor.shape)):
        if isinstance(i, bool) or not is_scalar(i) or isinstance(i, float):
            raise ScriptError(f"item_ptr: index {i!r} of dimension {d} must be an int or an integer scalar")
        if _static_int(i) and _static_int(size) and not 0 <= i < size:
            raise ScriptError(f"item_ptr: index {i} is out of range for dimension {d} of {tensor.describe()}")
    return ItemPointer(tensor, indices)


def element_index_map(inst: Instruction) -> Callable[[Sequence[Any]], list]:
    """For a view that moves no bits (reshape, permute, slice): the index of ``inst.x`` an output index
    reads (ints or TIR expressions)."""
    from tilus_tvm.layout.register import row_major_ravel, row_major_unravel

    if isinstance(inst, ReshapeRegister):
        return lambda index: row_major_unravel(row_major_ravel(list(index), list(inst.output.shape)),
                                               list(inst.x.shape))
    if isinstance(inst, PermuteRegister):
        def permuted(index):
            source = [0] * len(index)
            for k, d in enumerate(inst.dims):
                source[d] = index[k]
            return source
        return permuted
    if isinstance(inst, SliceRegister):
        def sliced(index):
            source = list(inst.offsets)
            for d, i in zip(inst.dims, index):
                source[d] = source[d] + i if not (_static_int(source[d]) and source[d] == 0) else i
            return source
        return sliced
    raise TypeError(f"no element map for {type(inst).__name__}")
