"""Weights for :mod:`tilus_tvm.schedules.quantized_matmul`: the offline packing and its helpers.

A quantized weight ``w`` [K, N] (``out = a @ w``; a ``torch.nn.Linear`` weight is ``w.t()``) holds
codes of a low-precision type (any integer of 1 to 8 bits, any float of at most 8 bits whose values
float16 holds) and per-group scales ``s`` [K / g, N] (with optional zero points ``z`` of that shape):

    w[k, n] = (value(q[k, n]) - z[k // g, n]) * s[k // g, n]

with ``g`` 32, 64, 128, or K (one scale per output channel).

**The packed layout** (:func:`pack_weight`) is the one the kernel's registers want, so a thread
loads whole 16-byte vectors (8 or 4 when its bytes are fewer) and converts them in registers,
with no shuffle. The kernel computes ``out^T = w^T @ a^T`` with ``mma.sync.m16n8k16``: ``w^T``
is the A operand, split into *units* of 16 output channels x ``kt`` inputs (``kt``: 128, 64 or 32, whole
groups, :func:`step_k`). In a unit, lane ``l`` of a warp holds the ``kt / 2`` codes that the mma A
fragments of its ``kt / 16`` k-steps give it, in fragment order (:func:`unit_layout`), except that
integers of 1, 2 or 4 bits interleave each 32-bit word's codes (:func:`field_of_slot`), and integers of 3,
5, 6, 7 bits and small floats store each block of words by its :mod:`~tilus_tvm.bit_placement` (a slot
pair's two codes at the same places of a low and a high 16-bit half, signed integers offset binary). ``units``
consecutive units along N (2 when ``kt * nbits`` is not a multiple of 64, so that a lane's bits
are whole words; else 1) form a *granule*; a lane's codes of a granule, packed as
:mod:`tilus_tvm.lowp` packs them, are ``P = units * kt * nbits / 16`` bytes, cut into vectors of
``V = gcd(P, 16)`` bytes. Granule-major storage (``pack_weight(..., k_tile=0)``) is ``int32`` of shape
``[N / (16 * units), K / kt, P / V, 32, V / 4]``: vector ``j`` of the 32 lanes is contiguous, so
each load instruction of a warp reads ``32 * V`` consecutive bytes. N is padded with code 0.

**Tiles of k-steps** (``pack_weight(..., k_tile=T)``, T = 2 -- the default --, 4 or 8): storage ``[S / T, N / (16 *
units), T, P / V, 32, V / 4]`` for the S = K / kt k-steps (padded with code 0 to a multiple of T): T k-steps of one
granule are one run, and the tiles of all granules for those k-steps lie side by side, so the blocks of a decode
grid, which stream the weights together, read one narrow front of memory instead of every granule's run at once.
H100, 1x8192x28672, the same kernels in turn in one process (four rounds), every output checked, granule-major ->
tiles of 2: u4 46.1-46.5 -> 44.3-44.7 us (90% of the bandwidth floor), int4 46.8-47.2 -> 45.3-45.4, fp4 e2m1
46.8-47.0 -> 45.2-45.6, int5 58.5-58.6 -> 55.5-55.7 (tiles of 4: 54.8-55.0), uint6 68.3-68.6 -> 65.3-65.7, fp6 e3m2
69.1-69.2 -> 65.6-66.5, u3 39.0-39.2 -> 37.8-38.0, u2 even, 8 rows u4 46.2-46.5 -> 45.1-45.4; tiles of 4 and 8 u4
44.8-44.9 and 45.2-45.5. The wgmma batches unsplit move within 2% or gain (64x8192x28672 u4 84.1-85.4 -> 80.3-80.6).
Those that split K (short grids) lost 12-23% with tiles of 2, 4 or 8 alike while each split read a run of tiles of
its own, so that the grid read split_k fronts far apart (the same bytes from DRAM, at a lower throughput:
128x11008x4096 u4 30.3-30.4 -> 35.3-35.5, 128x28672x8192 105.8-107.6 -> 128.8-134.6); K's splits now take the tiles
in turn (``QuantizedMatmul.strided_splits``: one front), and the same kernels in turn (three rounds, tiles of 2) give
128x11008x4096 u4 30.0-30.8 -> 31.2-31.9 us, uint8 32.8-33.6 -> 33.9-34.2; 256x11008x4096 u4 45.5-50.4 -> 47.4-51.1,
uint8 even (50.8 -> 49.9); 128x28672x8192 u4 even (108.4 -> 109.1), uint8 129.3-134.9 -> 122.4-134.2; 64x28672x8192
u4 80.2-84.0 -> 81.7-82.7, uint8 even; the decode shapes that split K gain (1x28672x8192 u4 47.8 -> 46.6, uint8 86.0
-> 83.1, int5 59.1 -> 57.8; 1x11008x4096 u4 16.1 -> 15.2, uint8 24.1 -> 21.9; 1x4096x11008 int5 17.0 -> 17.2). So
tiles of 2 are the default.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Optional

from tilus_tvm import lowp
from tilus_tvm.dtypes import DataType, as_dtype
from tilus_tvm.errors import LaunchError, ScriptError

GROUP_SIZES = (32, 64, 128)
K_TILES = (0, 2, 4, 8)  # pack_weight's k_tile: 0 granule-major, else k-steps in tiles of that many
DEFAULT_K_TILE = 2  # pack_weight's storage unless told otherwise (module docstring, Tiles of k-steps)
UNIT_ROWS = 16  # output channels per unit: the m of mma.sync.m16n8k16
LANES = 32


def check_weight_dtype(dtype: Any) -> DataType:
    """The weight type, if quantized_matmul supports it: an integer of 1 to 8 bits, or a float of at most
    8 bits whose values float16 and bfloat16 both hold exactly."""
    try:
        dtype = as_dtype(dtype)
    except ScriptError as exc:
        raise ScriptError(f"quantized weights: {exc}") from None
    if not lowp.is_low_precision(dtype):
        raise ScriptError(f"quantized weights: dtype {dtype.name} ({dtype.nbits} bits) is not a supported width; "
                          f"expected an integer or float of 1 to 8 bits (uint4b, int4b, uint2b, float8_e4m3, "
                          f"float6_e3m2, float4_e2m1, ...)")
    if dtype.is_float and (lowp.float_family(dtype) == "e8m0" or dtype.exponent_bits > 5 or dtype.mantissa_bits > 7):
        raise ScriptError(f"quantized weights: {dtype.name} has values float16 or bfloat16 cannot hold "
                          f"(exponent bits {dtype.exponent_bits} > 5 or mantissa bits {dtype.mantissa_bits} > 7), "
                          f"so it cannot be a weight type")
    return dtype


def step_k(k: int, group_size: int, nbits: int = 4) -> int:
    """Inputs per k-step: for weights of at most 4 bits the largest of 128, 64, 32 that divides K and is a multiple
    of the group size (a step then spans 1, 2 or 4 whole groups), for wider weights the same but at most 64 inputs
    or one group; for one scale per channel the largest that divides K.

    Measured on the H100 at x8192x28672, group 32, steps of 128 / 64 / 32 inputs (us; the 32 a step a group): u2
    1 row 43.5 / 56.0 / 78.0, 16 rows 57.2 / 68.2 / 87.5; u3 1 row 51.5 / 53.4 / 82.4, 16 rows 84.4 / 74.4 / 91.5;
    u4 1 row 54.8 / 54.3 / 64.4, 16 rows 72.9 / 60.8 / 79.7, 64 rows 86.4 / 111.3 / 162.2; int5 1 row 83.2 / 62.9
    / 72.3, 16 rows 84.4 / 67.2 / 83.4; fp6 e3m2 1 row 96.5 / 71.5 / 80.2; uint8 1 row 95.5 / 89.3 / 94.1. Short
    steps load a few bytes a lane (u2: 4 at 32 inputs) and pay a step's waits and its synchronous wgmma more
    often; steps of several groups hold each group's scales and partial sums in registers, which for 5- to 8-bit
    weights (more registers a step) cost blocks an SM at 128 inputs."""
    if group_size >= k:
        return next(kt for kt in (128, 64, 32) if k % kt == 0)
    widest = 128 if nbits <= 4 else max(64, group_size)
    return next(kt for kt in (128, 64, 32) if kt <= widest and k % kt == 0 and kt % group_size == 0)


def check_group(k: int, group_size: Optional[int]) -> int:
    """The group size (K for one scale per channel), checked against K."""
    if group_size is None:
        group_size = k
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise ScriptError(f"quantized weights: group_size must be an int (32, 64, 128) or None for one scale per "
                          f"channel, got {group_size!r}")
    if group_size != k and group_size not in GROUP_SIZES:
        raise ScriptError(f"quantized weights: group_size must be 32, 64, 128 or K={k} (one scale per channel), got "
                          f"{group_size}")
    if k % group_size or k % 32:
        raise ScriptError(f"quantized weights: K={k} must be a multiple of the group size {group_size} (and of 32)")
    return group_size


@dataclass(frozen=True)
class WeightFormat:
    """How a quantized weight of ``dtype`` [k, n] with ``group_size`` is stored (module docstring); ``placed_for``:
    the activations' type (float16 or bfloat16) that a bit-placed float's placement is designed for (any other
    type: float16, the one design). ``spec``: the format as text (inverse: :meth:`from_spec`)."""

    dtype: DataType
    k: int
    n: int
    group_size: int
    placed_for: str = "float16"
    k_tile: int = 0

    def __post_init__(self):
        from tilus_tvm.bit_placement import HALVES, placeable

        if isinstance(self.k_tile, bool) or self.k_tile not in K_TILES:
            raise ScriptError(f"quantized weights: k_tile={self.k_tile!r} must be 0 (granule-major storage) or "
                              f"{', '.join(map(str, K_TILES[1:]))} (k-steps in tiles of that many)")
        half = as_dtype(self.placed_for).name
        if half not in HALVES:
            raise ScriptError(f"quantized weights: placed_for={half} must be float16 or bfloat16 (the activations' "
                              f"type)")
        if not (self.dtype.is_float and placeable(self.dtype)):
            half = "float16"  # (integers and unplaced types are stored the same for both)
        object.__setattr__(self, "placed_for", half)
        # made once, here: torch.compile passes it to quantized_matmul's custom operator as a constant, where
        # formatting the fields while tracing could meet them as symbolic ints (dynamic=True)
        object.__setattr__(self, "spec", f"{self.dtype.name}:{self.k}:{self.n}:{self.group_size}:{half}:{self.k_tile}")

    @classmethod
    def from_spec(cls, spec: str) -> "WeightFormat":
        """The format whose ``spec`` (``"dtype:k:n:group_size:placed_for:k_tile"``) is ``spec``."""
        dtype, k, n, group_size, placed_for, k_tile = spec.split(":")
        return cls(as_dtype(dtype), int(k), int(n), int(group_size), placed_for, int(k_tile))

    @property
    def kt(self) -> int:
        return step_k(self.k, self.group_size, self.dtype.nbits)

    @property
    def groups_per_step(self) -> int:
        """The groups a k-step spans (1 for one scale per channel)."""
        return self.kt // min(self.group_size, self.kt)

    @property
    def units(self) -> int:
        """Units (of 16 channels) per granule: enough that a lane's bits are whole 32-bit words."""
        return 1 if self.kt * self.dtype.nbits % 64 == 0 else 2

    @property
    def interleaved(self) -> bool:
        """Whether each 32-bit word holds its codes interleaved (:func:`field_of_slot`): integers of 1, 2 or 4
        bits, which then convert a pair of codes by one mask and one paired fma."""
        from tilus_tvm.instructions.cast_rules import interleavable

        return interleavable(self.dtype)

    @property
    def placement(self):
        """The :class:`~tilus_tvm.bit_placement.BitPlacement` a lane's words are stored in (integers of 3, 5, 6, 7
        bits and small floats, :func:`~tilus_tvm.bit_placement.placeable`), or None (dense, or interleaved)."""
        from tilus_tvm.bit_placement import placeable, placement

        return placement(self.dtype, self.placed_for) if placeable(self.dtype) else None

    @property
    def lane_bytes(self) -> int:
        return self.units * self.kt * self.dtype.nbits // 16

    @property
    def vector_bytes(self) -> int:
        return math.gcd(self.lane_bytes, 16)

    @property
    def chunks(self) -> int:
        return self.lane_bytes // self.vector_bytes

    @property
    def granules(self) -> int:
        return -(-self.n // (UNIT_ROWS * self.units))

    @property
    def groups(self) -> int:
        return self.k // self.group_size

    @property
    def steps(self) -> int:
        """The k-steps of ``kt`` inputs."""
        return self.k // self.kt

    @property
    def tiles(self) -> int:
        """With ``k_tile`` T: the tiles of T k-steps (the last one padded with code 0 where T does not divide
        them); else 0."""
        return -(-self.steps // self.k_tile) if self.k_tile else 0

    @property
    def storage_shape(self) -> tuple[int, ...]:
        """``[granules, steps, chunks, 32, V / 4]``, or with ``k_tile`` T ``[tiles, granules, T, chunks, 32, V / 4]``
        (the steps padded to whole tiles)."""
        if self.k_tile:
            return (self.tiles, self.granules, self.k_tile, self.chunks, LANES, self.vector_bytes // 4)
        return (self.granules, self.steps, self.chunks, LANES, self.vector_bytes // 4)

    @property
    def storage_strides(self) -> list[int]:
        """The row-major strides of ``storage_shape``, in int32 words."""
        shape = self.storage_shape
        return [math.prod(shape[d + 1:]) for d in range(len(shape))]

    @property
    def view_strides(self) -> list[int]:
        """With ``k_tile``: the strides of the storage viewed granule first, ``[granules, tiles, T, chunks, 32, V /
        4]`` (step ``s`` at tile ``s // T``, place ``s % T``), in int32 words."""
        tiles, granules, *inner = self.storage_strides
        return [granules, tiles, *inner]

    @property
    def per_channel(self) -> bool:
        return self.group_size == self.k

    def describe(self) -> str:
        group = "per channel" if self.per_channel else f"group {self.group_size}"
        placed = ", placed for bfloat16" if self.placed_for == "bfloat16" else ""
        tiles = f", k-steps in tiles of {self.k_tile}" if self.k_tile else ""
        return f"{self.dtype.name} [{self.k}, {self.n}], {group}{placed}{tiles}"


class QuantizedWeight:
    """A weight packed by :func:`pack_weight`: ``storage`` (``torch.int32``, ``format.storage_shape``) and
    the ``format`` it was packed in (dtype, K, N, group size)."""

    def __init__(self, storage, fmt: WeightFormat):
        if tuple(storage.shape) != fmt.storage_shape:
            raise ScriptError(f"QuantizedWeight: storage of shape {list(storage.shape)} does not hold a "
                              f"{fmt.describe()} weight (expected {list(fmt.storage_shape)})")
        self.storage, self.format = storage, fmt

    dtype = property(lambda self: self.format.dtype)
    k = property(lambda self: self.format.k)
    n = property(lambda self: self.format.n)
    group_size = property(lambda self: self.format.group_size)
    device = property(lambda self: self.storage.device)

    def to(self, device: Any) -> "QuantizedWeight":
        return QuantizedWeight(self.storage.to(device), self.format)

    def codes(self):
        """The codes [K, N] (``torch.uint8``): the packing undone."""
        import torch

        fmt = self.format
        units, kt = fmt.units, fmt.kt
        storage = self.storage
        if fmt.k_tile:  # [tiles, granules, T, ...] -> [granules, steps, ...]
            storage = storage.transpose(0, 1).reshape(fmt.granules, -1, *storage.shape[3:])[:, :fmt.steps]
        lanes = storage.permute(0, 1, 3, 2, 4).contiguous()  # [granules, steps, 32, chunks, V/4]
        if fmt.placement is not None:
            codes = fmt.placement.unpack(lanes.reshape(fmt.granules, fmt.steps, LANES, -1))
        else:
            codes = lowp.unpack_codes(lanes.reshape(-1).view(torch.uint8), fmt.dtype.nbits,
                                      lanes.numel() * 32 // fmt.dtype.nbits)
        codes = codes.reshape(fmt.granules, fmt.steps, LANES, units * kt // 2)
        codes = codes[..., field_of_slot(fmt, units * kt // 2)]  # fields back to slot order
        unit, row, col = _lane_indices(kt, units, codes.device)
        grid = torch.zeros(fmt.granules, fmt.steps, units, UNIT_ROWS, kt, dtype=torch.uint8, device=codes.device)
        grid[:, :, unit, row, col] = codes
        padded = grid.permute(0, 2, 3, 1, 4).reshape(fmt.granules * units * UNIT_ROWS, fmt.k)
        return padded[:fmt.n].t().contiguous()

    def __repr__(self) -> str:
        return f"QuantizedWeight({self.format.describe()}, storage={list(self.storage.shape)} on {self.device})"


def field_of_slot(fmt: WeightFormat, slots: int) -> list[int]:
    """``fields[s]``: the field of a lane's ``slots`` codes that holds fragment slot ``s``. Interleaved formats
    keep a word's even slots in its low 16 bits and its odd ones in the high 16 bits at the same places
    (slot ``2h`` in field ``h``, slot ``2h + 1`` in field ``h + 16/n``: the kernel's codes are
    ``interleave_local(a_layout, 32/n)``, :func:`~tilus_tvm.layout.register_ops.interleaved_slot`); the
    others keep fragment order."""
    if not fmt.interleaved:
        return list(range(slots))
    from tilus_tvm.layout.register_ops import interleaved_slot

    return [interleaved_slot(s, 32 // fmt.dtype.nbits) for s in range(slots)]


@functools.lru_cache(maxsize=None)
def unit_layout(kt: int):
    """The register layout of one unit [16, kt] of ``w^T`` in a warp: ``kt / 16`` mma A fragments (k-steps)
    in a row, each lane's slots k-step by k-step (the order of the kernel's A operand layout)."""
    from tilus_tvm.layout.atoms import mma_a_layout
    from tilus_tvm.layout.register import compose, local

    return compose(local(1, kt // 16), mma_a_layout(16, 16))


@functools.lru_cache(maxsize=None)
def _lane_table(kt: int, units: int) -> tuple[tuple, tuple, tuple]:
    """For lane l and slot s of a granule: (unit, row in the unit, column in the unit), each [32][units*kt/2]."""
    layout = unit_layout(kt)
    per_unit = layout.local_size
    unit, row, col = [], [], []
    for lane in range(LANES):
        u_row, r_row, c_row = [], [], []
        for u in range(units):
            for slot in range(per_unit):
                r, c = layout.logical(lane, slot)
                u_row.append(u)
                r_row.append(r)
                c_row.append(c)
        unit.append(tuple(u_row))
        row.append(tuple(r_row))
        col.append(tuple(c_row))
    return tuple(unit), tuple(row), tuple(col)


def _lane_indices(kt: int, units: int, device):
    import torch

    return tuple(torch.tensor(t, dtype=torch.int64, device=device) for t in _lane_table(kt, units))


def pack_weight(w: Any, dtype: Any, group_size: Optional[int] = None, activations: Any = None,
                k_tile: Optional[int] = DEFAULT_K_TILE) -> QuantizedWeight:
    """Pack the weight ``w`` [K, N] into the layout :func:`quantized_matmul` loads (module docstring).

    ``w`` holds values of ``dtype`` (a torch tensor; other values are rounded to the type as
    ``tilus_tvm.from_torch(w, dtype)`` rounds them) or is a :class:`~tilus_tvm.PackedTensor` of
    ``dtype``. ``group_size``: 32, 64, 128, or None (or K) for one scale per channel; K must be a
    multiple of it. ``activations``: the activations' type the weight will multiply, float16 (None) or
    bfloat16; floats of at most 7 bits then place their bits for that type's conversion (the other
    type reads them too, a few instructions slower: ``float4_e2m1`` into bfloat16 takes 11 masks and shifts
    for 8 codes placed for it, 17 placed for float16). The result lives on ``w``'s device; packing a large
    weight is fastest on the GPU. ``k_tile``: 2 (the default; None too), 4 or 8 to store the k-steps in tiles of
    that many, or 0 for granule-major storage (module docstring): decode batches read tiles of 2 2-9% faster
    than granule-major storage, the wgmma batches that split K up to 4% slower or faster.

    >>> import torch
    >>> w = torch.randint(0, 16, (256, 96)).float()
    >>> q = pack_weight(w, "uint4b", group_size=128)  # [tiles, granules, 2, chunks, 32, V / 4]
    >>> q.storage.shape, torch.equal(q.codes(), w.to(torch.uint8))
    (torch.Size([1, 6, 2, 2, 32, 4]), True)
    >>> tiled = pack_weight(w, "uint4b", group_size=128, k_tile=4)  # K's 2 k-steps padded to a tile of 4
    >>> tiled.storage.shape, torch.equal(tiled.codes(), w.to(torch.uint8))
    (torch.Size([1, 6, 4, 2, 32, 4]), True)
    >>> pack_weight(w, "uint4b", group_size=128, k_tile=0).storage.shape  # granule-major
    torch.Size([6, 2, 2, 32, 4])
    """
    import torch

    dtype = check_weight_dtype(dtype)
    if isinstance(w, lowp.PackedTensor):
        if w.dtype != dtype:
            raise ScriptError(f"pack_weight: w is a PackedTensor of {w.dtype.name}, dtype is {dtype.name}")
        codes, shape = w.codes(), w.shape
    elif isinstance(w, torch.Tensor):
        shape = tuple(w.shape)
        codes = None
    else:
        raise ScriptError(f"pack_weight: w must be a torch tensor [K, N] or a PackedTensor, got {type(w).__name__}")
    if len(shape) != 2:
        raise ScriptError(f"pack_weight: w must be 2-D [K, N] (in_features, out_features), got shape {list(shape)}")
    k, n = shape
    placed_for = "float16" if activations is None else _activations_name(activations)
    k_tile = DEFAULT_K_TILE if k_tile is None else k_tile
    fmt = WeightFormat(dtype, k, n, check_group(k, group_size), placed_for, k_tile)
    if codes is None:
        codes = lowp.encode(w, dtype)
    kt, units = fmt.kt, fmt.units
    padded_n = fmt.granules * units * UNIT_ROWS
    rows = torch.zeros(padded_n, k, dtype=torch.uint8, device=codes.device)
    rows[:n] = codes.t()
    grid = rows.reshape(fmt.granules, units, UNIT_ROWS, fmt.steps, kt).permute(0, 3, 1, 2, 4)
    unit, row, col = _lane_indices(kt, units, codes.device)
    slots = grid[:, :, unit, row, col]  # [granules, steps, 32, units * kt / 2], fragment slot order
    lanes = torch.empty_like(slots)
    lanes[..., field_of_slot(fmt, slots.shape[-1])] = slots
    if fmt.placement is not None:  # each block of words holds its codes' bits where the cast wants them
        stream = fmt.placement.pack(lanes).view(torch.uint8)
    else:
        stream = lowp.pack_codes(lanes, dtype.nbits)
    stream = stream.reshape(fmt.granules, fmt.steps, LANES, fmt.chunks, fmt.vector_bytes).permute(0, 1, 3, 2, 4)
    if fmt.k_tile:  # steps padded to whole tiles with code 0, then [tiles, granules, T, ...]
        padded = stream.new_zeros(fmt.granules, fmt.tiles * fmt.k_tile, *stream.shape[2:])
        padded[:, :fmt.steps] = stream
        stream = padded.reshape(fmt.granules, fmt.tiles, fmt.k_tile, *stream.shape[2:]).transpose(0, 1)
    storage = stream.contiguous().view(torch.int32)
    return QuantizedWeight(storage, fmt)


def _activations_name(activations: Any) -> str:
    """``pack_weight``'s ``activations``, checked: "float16" or "bfloat16"."""
    from tilus_tvm.bit_placement import HALVES

    try:
        name = as_dtype(activations).name
    except (ScriptError, TypeError, ValueError):
        name = None
    if name not in HALVES:
        raise ScriptError(f"pack_weight: activations={activations!r} must be float16 or bfloat16 (the type of the "
                          f"activations the weight will multiply), or None for float16")
    return name


def quantize_weight(w: Any, dtype: Any, group_size: Optional[int] = None, zero_points: bool = False,
                    scale_dtype: Any = None, k_tile: Optional[int] = DEFAULT_K_TILE):
    """Quantize a float weight ``w`` [K, N]: ``(QuantizedWeight, scales, zeros)``, ``zeros`` None without
    zero points.

    Without zero points each group's scale maps its largest magnitude to the type's largest magnitude
    (unsigned types then lose negative weights). With them (integer types), the group's range
    ``[min, max]`` maps onto all codes: ``s = (max - min) / (2**bits - 1)`` and a float zero point
    ``z = qmin - min / s`` (``qmin`` the smallest code value). Scales and zeros are ``scale_dtype``
    (default: w's dtype if float16/bfloat16, else float16) of shape [K / g, N]; as :func:`quantized_matmul`
    wants them in the activations' type, bfloat16 scales pack the weight for bfloat16 activations. ``k_tile``:
    :func:`pack_weight`'s.

    >>> import torch
    >>> qw, s, z = quantize_weight(torch.randn(256, 64), "uint4b", 128, zero_points=True)   # doctest: +SKIP
    """
    import torch

    dtype = check_weight_dtype(dtype)
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ScriptError(f"quantize_weight: w must be a 2-D torch tensor [K, N], got {w!r}")
    k, n = w.shape
    group = check_group(k, group_size)
    if scale_dtype is None:
        scale_dtype = w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16
    values = torch.tensor([v for v in lowp.all_values(dtype) if math.isfinite(v)], dtype=torch.float32)
    grouped = w.float().reshape(k // group, group, n)
    if zero_points:
        if not dtype.is_integer:
            raise ScriptError(f"quantize_weight: zero points are for integer types, {dtype.name} is a float")
        low, high = grouped.amin(dim=1), grouped.amax(dim=1)
        scales = ((high - low) / float(values.max() - values.min())).clamp(min=1e-8)
        zeros = float(values.min()) - low / scales
        quantized = grouped / scales[:, None] + zeros[:, None]
    else:
        scales = (grouped.abs().amax(dim=1) / float(values.abs().max())).clamp(min=1e-8)
        zeros = None
        quantized = grouped / scales[:, None]
    scales = scales.to(scale_dtype)
    zeros = None if zeros is None else zeros.to(scale_dtype)
    activations = "bfloat16" if scales.dtype == torch.bfloat16 else None
    packed = pack_weight(quantized.reshape(k, n), dtype, group, activations=activations, k_tile=k_tile)
    return packed, scales, zeros


def dequantize(weight: QuantizedWeight, scales, zeros=None):
    """``(value(q) - z) * s`` [K, N] in float32: what quantized_matmul multiplies by (the test reference)."""
    import torch

    fmt = weight.format
    values = lowp.decode(weight.codes(), fmt.dtype).to(torch.float32)
    s = scales.float().repeat_interleave(fmt.group_size, dim=0)
    if zeros is not None:
        values = values - zeros.float().repeat_interleave(fmt.group_size, dim=0)
    return values * s


def check_weight(weight: Any, scales: Any, zeros: Any, dtype: Any = None, group_size: Any = None) -> WeightFormat:
    """The packed weight's format, after checking it, the scales and zeros (and, when given, the dtype and
    group size the caller expects the weight to have been packed for)."""
    import torch

    if not isinstance(weight, QuantizedWeight):
        raise LaunchError(f"quantized_matmul: packed_weight must be a QuantizedWeight made by pack_weight(w, dtype, "
                          f"group_size), got {type(weight).__name__}"
                          + (f" of shape {list(weight.shape)}" if isinstance(weight, torch.Tensor) else ""))
    fmt = weight.format
    if dtype is not None and as_dtype(dtype) != fmt.dtype:
        raise LaunchError(f"quantized_matmul: packed_weight was packed for {fmt.dtype.name}, dtype={as_dtype(dtype).name} "
                          f"was asked for; pack it again with pack_weight(w, {as_dtype(dtype).name!r}, ...)")
    if group_size is not None and group_size != fmt.group_size:
        raise LaunchError(f"quantized_matmul: packed_weight was packed for group size {fmt.group_size}, "
                          f"group_size={group_size} was asked for")
    expected = (fmt.groups, fmt.n)
    for name, tensor in (("scales", scales), ("zeros", zeros)):
        if tensor is None:
            if name == "scales":
                raise LaunchError("quantized_matmul: scales are required")
            continue
        if not isinstance(tensor, torch.Tensor):
            raise LaunchError(f"quantized_matmul: {name} must be a torch tensor, got {type(tensor).__name__}")
        if tuple(tensor.shape) != expected:
            implied = (f"; {tensor.shape[0]} rows would be groups of {fmt.k // tensor.shape[0]}"
                       if tensor.dim() == 2 and tensor.shape[0] and fmt.k % tensor.shape[0] == 0 else "")
            raise LaunchError(f"quantized_matmul: {name} has shape {list(tensor.shape)}, the weight ({fmt.describe()}) "
                              f"needs [K / group, N] = {list(expected)}{implied}")
    return fmt
