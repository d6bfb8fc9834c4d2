"""Low-precision types: the exact value of every code, rounding into them, and dense packing.

The low-precision types are the table's rows (:mod:`tilus_tvm.dtypes`) of at most 8 bits other than
``bool``: the integers ``int1b`` .. ``int7b``, ``int8``, ``uint1b`` .. ``uint7b``, ``uint8``
(:func:`~tilus_tvm.dtypes.int_type`) and the floats ``float{nbits}_e{E}m{M}`` of any exponent /
mantissa split, with or without a sign bit (:func:`~tilus_tvm.dtypes.float_type`).

**Value of a code.** ``uint{N}b`` code ``c`` is ``c``; ``int{N}b`` is two's complement (``c - 2**N``
when bit ``N-1`` is set). A float code is ``[sign][exponent field e: E bits][mantissa field m: M bits]``
(no sign bit in unsigned formats); with bias ``b = 2**(E-1) - 1`` it is

* ``(m / 2**M) * 2**(1 - b)`` when ``e == 0`` (subnormals; zero when ``m == 0``, and -0 exists),
* ``(1 + m / 2**M) * 2**(e - b)`` otherwise,

negated when the sign bit is set, except for the codes that the format's family (:func:`float_family`)
reserves:

* ``"ieee"`` -- ``float8_e5m2`` (OCP FP8 E5M2, torch / TVM ``float8_e5m2``): ``e`` all ones is +-inf
  when ``m == 0``, NaN otherwise, as in IEEE 754. Largest finite value 57344.
* ``"fn"`` -- ``float8_e4m3`` (OCP FP8 E4M3, torch / TVM ``float8_e4m3fn``): finite, no infinities;
  ``e`` and ``m`` all ones (0x7F, 0xFF) is NaN, so the largest finite value is 448.
* ``"e8m0"`` -- ``float8_e8m0`` (the unsigned OCP MX scale, torch / TVM ``float8_e8m0fnu``): code ``e``
  is ``2**(e - 127)`` (no zero, no subnormals); 0xFF is NaN.
* ``"finite"`` -- every other format, OCP MX style (``float6_e3m2``, ``float6_e2m3``, ``float4_e2m1``,
  ``float3_e1m1``, ``float8_e3m4``, ...): every code is finite, no infinities and no NaN; largest
  values 28, 7.5, 6, 3 for those first four.

**Converting into a type** (:func:`encode`, :meth:`PackedTensor.to`) follows PTX's ``cvt.rn.satfinite``
where it has a rule:

* round to nearest, ties to even: a value half-way between two neighbours takes the one whose code is
  even (the even mantissa; for integers the even integer: 2.5 -> 2, -1.5 -> -2). Integers round
  non-integral values, they do not refuse them: 3.7 -> 4;
* saturate: values beyond the largest (below the smallest) finite value, infinities included, become
  that value -- also in ``float8_e5m2``, which has infinities (torch's cast gives inf there);
* the sign of zero is kept in signed floats: -0.0, and negative values that round to zero, give -0;
  unsigned types take their smallest value for anything below it (0; ``2**-127`` in ``float8_e8m0``);
* NaN becomes the type's NaN: 0x7F in ``float8_e4m3`` and ``float8_e5m2``, 0xFF in ``float8_e8m0``.
  Types without NaN (integers, ``"finite"`` floats) take code 0, the value 0 -- a choice, since there is
  nothing right to give.

**Packing.** ``n`` elements of an ``N``-bit type occupy ``dtype.storage_bytes(n) = ceil(n * N / 8)``
bytes, little-endian: element ``i`` holds bits ``[i*N, (i+1)*N)`` of the byte stream, whose bit ``j``
is bit ``j % 8`` (least significant first) of byte ``j // 8``. So eight ``uint1b`` share a byte (element
0 in the lowest bit), two ``uint4b`` share a byte (element 0 in the low nibble, as CUTLASS and PTX
store ``s4`` / ``e2m1`` pairs), four ``int6b`` fill three bytes, and bits past the last element are 0.
A multi-dimensional tensor is packed in row-major order.

This module imports torch only inside the functions that take or return tensors.

>>> from tilus_tvm.dtypes import float4_e2m1, int6b
>>> all_values(float4_e2m1)[:8]
(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
>>> import torch
>>> packed = from_torch(torch.tensor([1.0, -1.0, 5.2, -40.0])).to(int6b)
>>> packed.storage.tolist(), packed.to_torch().tolist()
([193, 95, 128], [1, -1, 5, -32])
"""
from __future__ import annotations

import bisect
import math
from functools import lru_cache
from typing import Any, Optional, Sequence, Union

from tilus_tvm.dtypes import DataType, as_dtype
from tilus_tvm.errors import ScriptError

__all__ = ["float_family", "is_low_precision", "all_values", "finite_range", "nan_code", "encode", "decode",
           "encode_scalar", "pack_codes", "unpack_codes", "PackedTensor", "from_torch", "is_packed", "storage_words",
           "register_storage", "pointer_storage_dtype", "empty", "full", "zeros", "ones", "rand", "randn", "randint",
           "view_torch"]

MAX_BITS = 8


# ---- the value of every code -------------------------------------------------------------------
def is_low_precision(dtype: DataType) -> bool:
    """Whether ``dtype`` is an integer or float of at most 8 bits, the types this module encodes."""
    return dtype.kind != "bool" and dtype.nbits <= MAX_BITS


def _require_low_precision(dtype: Any, op: str) -> DataType:
    dtype = as_dtype(dtype)
    if not is_low_precision(dtype):
        raise ScriptError(f"{op}: {dtype.name} is not a low-precision type; expected an integer or float of at "
                          f"most {MAX_BITS} bits (int1b..int8, uint1b..uint8, float_type(e, m) with "
                          f"1 + e + m <= {MAX_BITS}), got a {dtype.nbits}-bit {dtype.kind}")
    return dtype


def float_family(dtype: Any) -> str:
    """Which codes the float format reserves: ``"ieee"``, ``"fn"``, ``"e8m0"`` or ``"finite"`` (module docstring).

    Floats wider than 8 bits (``float16``, ``bfloat16``, ...) are ``"ieee"``.

    >>> float_family("float8_e4m3"), float_family("float8_e5m2"), float_family("float6_e3m2")
    ('fn', 'ieee', 'finite')
    """
    dtype = as_dtype(dtype)
    if not dtype.is_float:
        raise ScriptError(f"float_family: {dtype.name} is a {dtype.kind}, not a float")
    fmt = (dtype.exponent_bits, dtype.mantissa_bits, dtype.signed)
    if dtype.nbits > MAX_BITS or fmt == (5, 2, True):
        return "ieee"
    if fmt == (4, 3, True):
        return "fn"
    if fmt == (8, 0, False):
        return "e8m0"
    return "finite"


def _float_value(dtype: DataType, code: int) -> float:
    """The value of one code of a low-precision float (exact: every such value is a float64)."""
    exponent_bits, mantissa_bits = dtype.exponent_bits, dtype.mantissa_bits
    magnitude_bits = exponent_bits + mantissa_bits
    negative = dtype.signed and bool(code >> magnitude_bits & 1)
    exponent = code >> mantissa_bits & ((1 << exponent_bits) - 1)
    mantissa = code & ((1 << mantissa_bits) - 1)
    all_ones = (1 << exponent_bits) - 1
    bias = (1 << (exponent_bits - 1)) - 1
    family = float_family(dtype)
    if family == "ieee" and exponent == all_ones:
        magnitude = math.inf if mantissa == 0 else math.nan
    elif family == "fn" and exponent == all_ones and mantissa == (1 << mantissa_bits) - 1:
        magnitude = math.nan
    elif family == "e8m0":
        magnitude = math.nan if exponent == all_ones else math.ldexp(1.0, exponent - bias)
    elif exponent == 0:
        magnitude = math.ldexp(mantissa, 1 - bias - mantissa_bits)
    else:
        magnitude = math.ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits)
    return -magnitude if negative else magnitude


@lru_cache(maxsize=None)
def all_values(dtype: Any) -> tuple:
    """The value of every code of a low-precision type, indexed by code (``2**nbits`` entries).

    Integers give ints; floats give floats, with ``nan`` and ``+-inf`` where the format has them.

    >>> all_values("int2b"), all_values("uint2b"), all_values("float3_e1m1")
    ((0, 1, -2, -1), (0, 1, 2, 3), (0.0, 1.0, 2.0, 3.0, -0.0, -1.0, -2.0, -3.0))
    """
    dtype = _require_low_precision(dtype, "all_values")
    codes = range(1 << dtype.nbits)
    if dtype.is_integer:
        top = 1 << (dtype.nbits - 1)
        return tuple(code - 2 * top if dtype.signed and code & top else code for code in codes)
    return tuple(_float_value(dtype, code) for code in codes)


def finite_range(dtype: Any) -> tuple:
    """``(smallest, largest)`` finite value of a low-precision type, where conversions saturate.

    >>> finite_range("float8_e4m3"), finite_range("float8_e5m2"), finite_range("int4b")
    ((-448.0, 448.0), (-57344.0, 57344.0), (-8, 7))
    """
    finite = [value for value in all_values(dtype) if math.isfinite(value)]
    return min(finite), max(finite)


def nan_code(dtype: Any) -> Optional[int]:
    """The code conversions give NaN: 0x7F (``float8_e4m3``, ``float8_e5m2``), 0xFF (``float8_e8m0``), else None."""
    dtype = _require_low_precision(dtype, "nan_code")
    if not dtype.is_float or float_family(dtype) == "finite":
        return None
    return (1 << (dtype.nbits - int(dtype.signed))) - 1  # every bit but the sign


@lru_cache(maxsize=None)
def _rounding_grid(dtype: DataType) -> tuple[tuple, tuple]:
    """The targets of rounding, ascending, and their codes.

    Signed floats round the magnitude (the sign bit is set afterwards, so -0 survives): the grid is the
    finite codes without the sign bit. Other types round the value itself over all their finite codes.
    Neighbours on the grid have consecutive codes, so exactly one of two neighbours has an even code.
    """
    values = all_values(dtype)
    codes = range(1 << (dtype.nbits - 1)) if dtype.is_float and dtype.signed else range(1 << dtype.nbits)
    pairs = sorted((values[code], code) for code in codes if math.isfinite(values[code]))
    return tuple(value for value, _ in pairs), tuple(code for _, code in pairs)


# ---- tensors of codes --------------------------------------------------------------------------
def encode(values, dtype: Any):
    """The codes (a ``torch.uint8`` tensor of ``values``' shape) of ``values`` converted to ``dtype``.

    Round to nearest even, saturate, NaN to the type's NaN or 0: the rules of the module docstring.
    ``values`` is any real torch tensor (bool, integer or float); it is compared exactly, in float64.

    >>> import torch
    >>> encode(torch.tensor([0.25, 0.75, 1.25, 7.0, -0.0, float("nan")]), "float4_e2m1").tolist()
    [0, 2, 2, 7, 8, 0]
    """
    import torch

    dtype = _require_low_precision(dtype, "encode")
    x = values.to(torch.float64)
    grid_values, grid_codes = _rounding_grid(dtype)
    grid = torch.tensor(grid_values, dtype=torch.float64, device=x.device)
    codes = torch.tensor(grid_codes, dtype=torch.int64, device=x.device)
    signed_float = dtype.is_float and dtype.signed
    target = x.abs() if signed_float else x
    is_nan = torch.isnan(target)
    target = torch.where(is_nan, torch.zeros_like(target), target)
    # grid[above - 1] < target <= grid[above]; at the ends both neighbours are the end pair
    above = torch.searchsorted(grid, target.contiguous()).clamp(1, len(grid_values) - 1)
    below = above - 1
    # the midpoint of two neighbours has at most nine significant bits: exact in float64
    middle = (grid[below] + grid[above]) / 2
    take_above = (target > middle) | ((target == middle) & (codes[above] % 2 == 0))
    result = torch.where(take_above, codes[above], codes[below])
    if signed_float:
        result = result | (torch.signbit(x).to(torch.int64) << (dtype.nbits - 1))
    result = torch.where(is_nan, torch.full_like(result, nan_code(dtype) or 0), result)
    return result.to(torch.uint8)


def encode_scalar(value: Union[bool, int, float], dtype: Any) -> int:
    """The code of one Python number converted to ``dtype``: :func:`encode` without torch.

    >>> encode_scalar(2.5, "int4b"), encode_scalar(-1, "int4b"), encode_scalar(1e9, "float8_e4m3")
    (2, 15, 126)
    """
    dtype = _require_low_precision(dtype, "encode_scalar")
    value = float(value)
    if math.isnan(value):
        return nan_code(dtype) or 0
    grid_values, grid_codes = _rounding_grid(dtype)
    signed_float = dtype.is_float and dtype.signed
    target = abs(value) if signed_float else value
    above = min(max(bisect.bisect_left(grid_values, target), 1), len(grid_values) - 1)
    below = above - 1
    middle = (grid_values[below] + grid_values[above]) / 2
    take_above = target > middle or (target == middle and grid_codes[above] % 2 == 0)
    code = grid_codes[above] if take_above else grid_codes[below]
    if signed_float and math.copysign(1.0, value) < 0:
        code |= 1 << (dtype.nbits - 1)
    return code


def decode(codes, dtype: Any):
    """The values of ``codes`` (an integer tensor): ``torch.float32`` for floats (exact), ``torch.int32`` for integers.

    >>> import torch
    >>> decode(torch.tensor([7, 8, 15]), "int4b").tolist(), decode(torch.tensor([0x7E, 0x7F]), "float8_e4m3").tolist()
    ([7, -8, -1], [448.0, nan])
    """
    import torch

    dtype = _require_low_precision(dtype, "decode")
    table = torch.tensor(all_values(dtype), dtype=torch.float32 if dtype.is_float else torch.int32,
                         device=codes.device)
    return table[codes.to(torch.int64)]


def pack_codes(codes, nbits: int):
    """Pack ``nbits``-bit codes (any integer tensor, read in row-major order) densely into a 1-D ``torch.uint8`` tensor.

    Element ``i`` occupies bits ``[i*nbits, (i+1)*nbits)`` of the little-endian byte stream (module docstring).

    >>> import torch
    >>> pack_codes(torch.tensor([1, 0, 1, 1, 0, 0, 0, 1, 1]), 1).tolist()
    [141, 1]
    >>> pack_codes(torch.tensor([3, 10, 5]), 4).tolist()
    [163, 5]
    """
    import torch

    _check_nbits(nbits, "pack_codes")
    flat = codes.reshape(-1).to(torch.int64)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= 1 << nbits):
        raise ScriptError(f"pack_codes: codes must lie in [0, {1 << nbits}) for nbits={nbits}, got values in "
                          f"[{int(flat.min())}, {int(flat.max())}]")
    if nbits == 8:
        return flat.to(torch.uint8)
    # eight codes make nbits whole bytes: gather them in one int64, then cut it into bytes
    count = flat.numel()
    groups = torch.zeros((count + 7) // 8 * 8, dtype=torch.int64, device=flat.device)
    groups[:count] = flat
    groups = groups.reshape(-1, 8) << (torch.arange(8, device=flat.device) * nbits)
    words = groups.sum(dim=1)
    stream = (words[:, None] >> (torch.arange(nbits, device=flat.device) * 8)) & 0xFF
    return stream.reshape(-1)[:(count * nbits + 7) // 8].to(torch.uint8)


def unpack_codes(storage, nbits: int, count: int):
    """The first ``count`` codes of ``nbits`` bits in ``storage``, as ``torch.uint8`` (inverse of :func:`pack_codes`).

    >>> import torch
    >>> unpack_codes(torch.tensor([163, 5], dtype=torch.uint8), 4, 3).tolist()
    [3, 10, 5]
    """
    import torch

    _check_nbits(nbits, "unpack_codes")
    needed = (count * nbits + 7) // 8
    if storage.dtype != torch.uint8 or storage.dim() != 1 or storage.numel() < needed:
        raise ScriptError(f"unpack_codes: storage must be a 1-D torch.uint8 tensor of at least {needed} bytes for "
                          f"{count} elements of {nbits} bits, got {storage.dtype} of shape {tuple(storage.shape)}")
    if nbits == 8:
        return storage[:count].clone()
    device = storage.device
    bits = (storage[:needed].to(torch.int64)[:, None] >> torch.arange(8, device=device)) & 1
    element_bits = bits.reshape(-1)[:count * nbits].reshape(count, nbits)
    return (element_bits << torch.arange(nbits, device=device)).sum(dim=1).to(torch.uint8)


def _check_nbits(nbits: int, op: str) -> None:
    if isinstance(nbits, bool) or not isinstance(nbits, int) or not 1 <= nbits <= MAX_BITS:
        raise ScriptError(f"{op}: nbits must be an int in 1..{MAX_BITS}, got {nbits!r}")


# ---- a tensor of any table type, stored as bytes -------------------------------------------------
class PackedTensor:
    """A tensor of any type of the table, held as its densely packed bytes.

    ``storage`` is a 1-D ``torch.uint8`` tensor of ``dtype.storage_bytes(numel)`` bytes: low-precision
    types packed as the module docstring says, wider types as their little-endian element bytes (the
    same rule at 16, 32 or 64 bits). ``shape`` is the logical shape, elements in row-major order.
    Build one with :func:`from_torch`; ``.to(dtype)`` converts, ``.to_torch()`` unpacks.

    >>> import torch
    >>> from_torch(torch.tensor([[0.3, -2.0, 5.0]])).to("float4_e2m1")
    PackedTensor(float4_e2m1, shape=(1, 3), storage=[193, 6])
    """

    def __init__(self, storage, shape: Sequence[int], dtype: Any):
        import torch

        self.dtype = as_dtype(dtype)
        self.shape = tuple(int(extent) for extent in shape)
        if any(extent < 0 for extent in self.shape):
            raise ScriptError(f"PackedTensor: shape must have extents >= 0, got {self.shape}")
        expected = self.dtype.storage_bytes(self.numel)
        if not isinstance(storage, torch.Tensor) or storage.dtype != torch.uint8 or storage.dim() != 1 \
                or storage.numel() != expected:
            described = (f"{storage.dtype} of shape {tuple(storage.shape)}" if isinstance(storage, torch.Tensor)
                         else type(storage).__name__)
            raise ScriptError(f"PackedTensor: storage of {self.numel} {self.dtype.name} elements must be a 1-D "
                              f"torch.uint8 tensor of {expected} bytes, got {described}")
        self.storage = storage.contiguous()

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def device(self):
        return self.storage.device

    def codes(self):
        """The code of every element of a low-precision tensor, as ``torch.uint8`` of ``shape``."""
        _require_low_precision(self.dtype, "PackedTensor.codes")
        return unpack_codes(self.storage, self.dtype.nbits, self.numel).reshape(self.shape)

    def to_torch(self, dtype: Any = None):
        """The values as a torch tensor of ``shape``.

        Low-precision floats give ``torch.float32`` and low-precision integers ``torch.int32`` (exact);
        other types give their own torch dtype. ``dtype`` (a torch dtype) casts the result with torch.
        """
        if is_low_precision(self.dtype):
            values = decode(self.codes(), self.dtype)
        else:
            values = self.storage.view(self.dtype.torch_dtype).reshape(self.shape)
        return values if dtype is None else values.to(dtype)

    def to(self, dtype: Any) -> PackedTensor:
        """This tensor converted to ``dtype``.

        Into a low-precision type: the rounding of :func:`encode` (nearest even, saturating, NaN to the
        type's NaN or 0; integers round, not refuse, non-integral values). Into a wider integer: the same
        rules (round half to even, clamp, NaN to 0, exact up to 2**53). Into a wider float: torch's cast
        (nearest even, inf beyond the range). ``bool`` is not a target.
        """
        import torch

        target = as_dtype(dtype)
        values = self.to_torch()
        if is_low_precision(target):
            return PackedTensor(pack_codes(encode(values, target), target.nbits), self.shape, target)
        if target.kind == "bool":
            raise ScriptError(f"PackedTensor.to: bool is not a conversion target (from {self.dtype.name}); compare "
                              f"the values instead, e.g. from_torch(t.to_torch() != 0)")
        if target.torch_name is None:
            raise ScriptError(f"PackedTensor.to: {target.name} is neither a type of at most {MAX_BITS} bits nor "
                              f"one with a torch dtype, so there is no way to convert into it")
        if target.is_integer:
            wide = values.to(torch.float64)
            wide = torch.where(torch.isnan(wide), torch.zeros_like(wide), torch.round(wide))
            converted = torch.where(wide >= float(target.max_value), torch.full_like(wide, target.max_value), wide)
            converted = converted.clamp(min=float(target.min_value)).to(torch.int64).to(target.torch_dtype)
        else:
            converted = values.to(target.torch_dtype)
        return from_torch(converted)

    # --- Tilus's Tensor methods ---------------------------------------------------------------------
    def torch(self):
        """The storage as a torch tensor of ``shape`` in this type's own torch dtype (no copy: Tilus's
        ``Tensor.torch()``); :meth:`to_torch` gives the values of the types torch lacks."""
        if self.dtype.torch_name is None:
            raise ScriptError(f"PackedTensor.torch: torch has no {self.dtype.name} dtype; to_torch() gives the values "
                              f"(as float32 or int32) and .storage the packed bytes")
        return self.storage.view(self.dtype.torch_dtype).reshape(self.shape)

    def view(self, *, dtype: Any = None, shape: Optional[Sequence[int]] = None) -> PackedTensor:
        """The same bytes read as ``dtype`` and/or ``shape`` (Tilus's ``Tensor.view``; no copy). Without
        ``shape``, the last dimension scales by the ratio of the widths (``uint8[4, 6]`` as ``uint4b`` is
        ``[4, 12]``); the bits must match exactly."""
        target = self.dtype if dtype is None else as_dtype(dtype)
        if shape is None:
            shape = list(self.shape)
            old, new = self.dtype.nbits, target.nbits
            if not shape or (shape[-1] * old) % new:
                raise ScriptError(f"PackedTensor.view: {self.dtype.name}{list(self.shape)} cannot be read as "
                                  f"{target.name} along its last dimension ({old}-bit elements into {new}-bit ones); "
                                  f"give shape=")
            shape[-1] = shape[-1] * old // new
        shape = tuple(int(extent) for extent in shape)
        if target.nbits * math.prod(shape) != self.dtype.nbits * self.numel:
            raise ScriptError(f"PackedTensor.view: {target.name}{list(shape)} holds {target.nbits * math.prod(shape)} "
                              f"bits, {self.dtype.name}{list(self.shape)} {self.dtype.nbits * self.numel}")
        return PackedTensor(self.storage, shape, target)

    def clone(self) -> PackedTensor:
        return PackedTensor(self.storage.clone(), self.shape, self.dtype)

    def data_ptr(self) -> int:
        return self.storage.data_ptr()

    def __repr__(self) -> str:
        shown = self.storage[:16].tolist()
        more = ", ..." if self.storage.numel() > 16 else ""
        return f"PackedTensor({self.dtype.name}, shape={self.shape}, storage={str(shown)[:-1]}{more}])"


def from_torch(tensor, dtype: Any = None) -> PackedTensor:
    """A :class:`PackedTensor` of the torch tensor's values: its own type, or converted to ``dtype``.

    ``from_torch(w, "int4b")`` is ``from_torch(w).to("int4b")``: quantized weights in one line.

    >>> import torch
    >>> from_torch(torch.tensor([0.5, 2.5, 3.5, 9.0]), "uint2b").to_torch().tolist()
    [0, 2, 3, 3]
    """
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise ScriptError(f"from_torch: expected a torch.Tensor, got {type(tensor).__name__}")
    own = as_dtype(tensor.dtype)
    storage = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    packed = PackedTensor(storage, tuple(tensor.shape), own)
    return packed if dtype is None else packed.to(dtype)


# ---- Tilus's tensor constructors -------------------------------------------------------------------
# tilus.empty / zeros / ones / full / rand / randn / randint / view_torch: PackedTensors of any table type, made on
# ``device`` (Tilus's are always on the GPU: here the default is "cuda" where there is one, else "cpu") and converted
# by PackedTensor.to's rounding.
def _device(device: Any):
    import torch

    return device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")


def _shape(shape: Any, op: str) -> tuple:
    extents = (shape,) if isinstance(shape, int) else tuple(shape)
    if not all(isinstance(extent, int) and not isinstance(extent, bool) and extent >= 0 for extent in extents):
        raise ScriptError(f"{op}: shape must be ints >= 0, got {shape!r}")
    return extents


def empty(shape: Any, dtype: Any, device: Any = None) -> PackedTensor:
    """An uninitialised tensor of ``dtype`` (its bytes as they were)."""
    import torch

    dtype, shape = as_dtype(dtype), _shape(shape, "empty")
    return PackedTensor(torch.empty(dtype.storage_bytes(math.prod(shape)), dtype=torch.uint8, device=_device(device)),
                        shape, dtype)


def full(shape: Any, fill_value: Union[int, float], dtype: Any, device: Any = None) -> PackedTensor:
    """Every element ``fill_value``, rounded into ``dtype``."""
    import torch

    return from_torch(torch.full(_shape(shape, "full"), fill_value, dtype=torch.float64, device=_device(device)),
                      dtype)


def zeros(shape: Any, dtype: Any, device: Any = None) -> PackedTensor:
    return full(shape, 0, dtype, device)


def ones(shape: Any, dtype: Any, device: Any = None) -> PackedTensor:
    return full(shape, 1, dtype, device)


def rand(shape: Any, dtype: Any, device: Any = None) -> PackedTensor:
    """Uniform values in [0, 1), rounded into ``dtype``."""
    import torch

    return from_torch(torch.rand(_shape(shape, "rand"), device=_device(device)), dtype)


def randn(shape: Any, dtype: Any, device: Any = None) -> PackedTensor:
    """Standard normal values, rounded into ``dtype`` (saturating at its range)."""
    import torch

    return from_torch(torch.randn(_shape(shape, "randn"), device=_device(device)), dtype)


def randint(low: int, high: int, shape: Any, dtype: Any, device: Any = None) -> PackedTensor:
    """Integers drawn uniformly from [low, high), rounded into ``dtype``."""
    import torch

    return from_torch(torch.randint(low, high, _shape(shape, "randint"), dtype=torch.int64, device=_device(device)),
                      dtype)


def view_torch(tensor, *, dtype: Any, shape: Sequence[int]) -> PackedTensor:
    """The bytes of a contiguous torch tensor read as ``dtype`` elements of ``shape`` (no copy): packed weights
    kept as uint8 or int32 storage, for example."""
    import torch

    if not isinstance(tensor, torch.Tensor) or not tensor.is_contiguous():
        raise ScriptError(f"view_torch: expected a contiguous torch.Tensor, got "
                          f"{type(tensor).__name__ if not isinstance(tensor, torch.Tensor) else 'a strided one'}")
    dtype, shape = as_dtype(dtype), _shape(shape, "view_torch")
    storage = tensor.reshape(-1).view(torch.uint8)
    if storage.numel() != dtype.storage_bytes(math.prod(shape)):
        raise ScriptError(f"view_torch: {dtype.name}{list(shape)} takes {dtype.storage_bytes(math.prod(shape))} bytes, "
                          f"the tensor has {storage.numel()}")
    return PackedTensor(storage, shape, dtype)


# ---- storage inside kernels ----------------------------------------------------------------------
WORD_BITS = 32


def is_packed(dtype: Any) -> bool:
    """Whether kernels store ``dtype`` as packed codes: the low-precision types but ``int8`` / ``uint8``
    (which TVM and CUDA know), so the sub-byte types and the 8-bit floats.

    Global and shared memory hold their bytes as this module packs them; a register tensor holds a
    thread's ``local_size`` codes in ``uint32`` words, slot ``s`` at bits ``[s*N, (s+1)*N)``
    (:mod:`tilus_tvm.instructions.packed`).

    >>> is_packed("uint4b"), is_packed("float8_e4m3"), is_packed("int8"), is_packed("float16")
    (True, True, False, False)
    """
    dtype = as_dtype(dtype)
    return is_low_precision(dtype) and not (dtype.is_integer and dtype.nbits == 8)


def storage_words(dtype: Any, num_elements: int) -> int:
    """``uint32`` words that ``num_elements`` packed elements of ``dtype`` occupy."""
    return -(-num_elements * as_dtype(dtype).nbits // WORD_BITS)


def register_storage(dtype: Any, local_size: int) -> tuple:
    """(TIR dtype, length) of the per-thread array of a register tensor with ``local_size`` slots.

    >>> register_storage("uint4b", 32), register_storage("float16", 8)
    (('uint32', 4), ('float16', 8))
    """
    dtype = as_dtype(dtype)
    if is_packed(dtype):
        return "uint32", max(1, storage_words(dtype, local_size))
    return dtype.tvm_name or dtype.name, local_size


def pointer_storage_dtype(dtype: Any) -> str:
    """The TIR dtype of a pointer parameter's buffer: bytes for the packed types, except the 8-bit
    floats that have a TVM type (so that torch's ``float8_e4m3fn`` tensors pass TVM's argument checks).

    >>> pointer_storage_dtype("uint4b"), pointer_storage_dtype("float8_e4m3"), pointer_storage_dtype("float6_e3m2")
    ('uint8', 'float8_e4m3fn', 'uint8')
    """
    dtype = as_dtype(dtype)
    if is_packed(dtype):
        return dtype.tvm_name if dtype.nbits == 8 and dtype.tvm_name else "uint8"
    return dtype.tvm_name or dtype.name


def storage_torch_dtypes(dtype: Any) -> tuple:
    """The torch dtypes a tensor passed for a ``~dtype`` pointer may have: the type's own, and for the
    packed types ``torch.uint8`` holding the packed bytes (``PackedTensor.storage``).

    >>> import torch
    >>> storage_torch_dtypes("uint4b") == (torch.uint8,), storage_torch_dtypes("float8_e4m3") == (torch.float8_e4m3fn,)
    (True, True)
    """
    import torch

    dtype = as_dtype(dtype)
    if dtype.torch_name is not None:
        return (dtype.torch_dtype,)
    if is_packed(dtype):
        return (torch.uint8,)
    return ()
