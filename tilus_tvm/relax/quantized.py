"""Weight-only quantized linear layers in Relax, and how :class:`DispatchKernels` recognises them.

**The representation.** A quantized linear ``y = x @ w`` (``w`` [K, N], ``x`` [..., K] float16 or
bfloat16) is written in Relax as

    w = R.call_tir(tilus_dequantize_<...>, (storage, scales[, zeros]), R.Tensor((K, N), dtype))
    y = R.matmul(x, w)

where ``storage`` is the weight **already in the layout of** :func:`~tilus_tvm.schedules.pack_weight`
(``int32`` of shape ``WeightFormat.storage_shape``), ``scales`` / ``zeros`` are [K / g, N] in the
activations' dtype, and ``tilus_dequantize_<...>`` is a TE PrimFunc that decodes that layout
element by element: it finds the 32-bit word and bit offset of each code (``w[k, n]`` is code slot
``j`` of lane ``l`` of its unit, see :mod:`tilus_tvm.schedules.quantized_weight`; for bit-placed
formats, each bit's word and offset), extracts it with shifts and masks, sign-extends signed types and
computes ``(code - z) * s`` in float32. The PrimFunc carries the attribute ``tilus.dequantize`` (the
weight dtype, K, N, group size, the storage's tiles of k-steps and whether there are zero points), so the pattern
needs no reverse engineering of bit arithmetic, and the matmul stays a plain ``R.matmul``.

:class:`QuantizedLinear` (a ``relax.frontend.nn`` module) emits exactly this. Its parameters are the
packed tensors themselves, so nothing is transformed at load time: :func:`linear_params` turns the
output of :func:`~tilus_tvm.schedules.quantize_weight` (or ``pack_weight`` plus scales) into the
parameter values.

**Dispatch.** :func:`tilus_tvm.relax.patterns.rewrite_dequantize_matmul` replaces the ``R.matmul``
by ``R.call_tir`` of :class:`~tilus_tvm.schedules.quantized_matmul.QuantizedMatmul` on ``storage``,
``scales`` and ``zeros`` directly, each passed flat (a reshape to 1-D: the kernel's views are strided);
when the batch is small enough that K is split, ``R.sum`` adds the float32 partial sums; the dequantised weight is never materialised, and the
dequantize PrimFunc leaves the module. Where the kernel's constraints fail (activation dtype, scale
dtype, a group size or width the kernel lacks, a target before sm_80) the reason is logged and both
calls stay on TVM's default path, where the dequantize PrimFunc is an ordinary injective function
(dlight schedules it on the GPU, it runs as is on the CPU).

>>> from tvm.relax.frontend import nn                                         # doctest: +SKIP
>>> layer = QuantizedLinear(4096, 11008, "uint4b", group_size=128)           # doctest: +SKIP
>>> mod, specs = layer.export_tvm({"forward": {"x": nn.spec.Tensor((1, 4096), "float16")}})  # doctest: +SKIP
>>> qw, s, z = quantize_weight(w_kn, "uint4b", 128)                          # doctest: +SKIP
>>> values = linear_params(qw, s, z)          # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from tvm.relax.frontend import nn

from tilus_tvm.dtypes import as_dtype
from tilus_tvm.errors import RelaxError, ScriptError, TilusError

DEQUANTIZE_ATTR = "tilus.dequantize"  # on the dequantize PrimFunc: the WeightFormat it decodes
ACTIVATION_DTYPES = ("float16", "bfloat16", "float32")


def weight_format(dtype: Any, in_features: int, out_features: int, group_size: Optional[int],
                  k_tile: Optional[int] = None):
    """The :class:`~tilus_tvm.schedules.quantized_weight.WeightFormat` of a layer, checked.

    The representation holds any integer type of 1 to 8 bits and any group size that is a multiple of
    16 dividing K (or None: one scale per channel); the kernel takes a subset (checked at dispatch). ``k_tile``:
    the storage's tiles of k-steps, as :func:`~tilus_tvm.schedules.pack_weight`'s (None: its default, tiles of 2;
    0: granule-major)."""
    from tilus_tvm.schedules.quantized_weight import DEFAULT_K_TILE, WeightFormat

    try:
        dtype = as_dtype(dtype)
    except ScriptError as exc:
        raise RelaxError(f"QuantizedLinear: weight_dtype: {exc}") from None
    if not (dtype.is_integer and 1 <= dtype.nbits <= 8):
        raise RelaxError(f"QuantizedLinear: weight_dtype {dtype.name} is not supported; expected an integer type of "
                         f"1 to 8 bits (uint4b, int4b, uint8, int3b, ...)")
    for name, value in (("in_features", in_features), ("out_features", out_features)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RelaxError(f"QuantizedLinear: {name} must be a positive int, got {value!r}")
    if in_features % 16:
        raise RelaxError(f"QuantizedLinear: in_features={in_features} must be a multiple of 16")
    group = in_features if group_size is None else group_size
    if isinstance(group, bool) or not isinstance(group, int) or group <= 0 or group % 16 or in_features % group:
        raise RelaxError(f"QuantizedLinear: group_size={group_size!r} must be None (one scale per channel) or a "
                         f"multiple of 16 dividing in_features={in_features}")
    if group == in_features and in_features % 32:
        raise RelaxError(f"QuantizedLinear: one scale per channel needs in_features={in_features} to be a multiple "
                         f"of 32")
    k_tile = DEFAULT_K_TILE if k_tile is None else k_tile
    try:  # (WeightFormat checks k_tile)
        return WeightFormat(dtype, in_features, out_features, group, k_tile=k_tile)
    except ScriptError as exc:
        raise RelaxError(f"QuantizedLinear: {exc}") from None


def format_attrs(fmt: Any, zero_points: bool) -> dict:
    """The ``tilus.dequantize`` attribute: what the dequantize PrimFunc decodes."""
    return {DEQUANTIZE_ATTR: {"dtype": fmt.dtype.name, "k": fmt.k, "n": fmt.n, "group_size": fmt.group_size,
                              "k_tile": fmt.k_tile, "zero_points": bool(zero_points)}}


def format_of(attrs: Any) -> tuple[Any, bool]:
    """``(WeightFormat, zero_points)`` from a PrimFunc's ``tilus.dequantize`` attribute."""
    from tilus_tvm.schedules.quantized_weight import WeightFormat

    spec = attrs[DEQUANTIZE_ATTR]
    fmt = WeightFormat(as_dtype(str(spec["dtype"])), int(spec["k"]), int(spec["n"]), int(spec["group_size"]),
                       k_tile=int(spec["k_tile"]) if "k_tile" in spec else 0)
    return fmt, bool(int(spec["zero_points"]))


def code_position(fmt: Any, k: Any, n: Any) -> tuple:
    """Where the code of ``w[k, n]`` lives in the packed storage: ``(granule, step, lane, slot)``, slot
    counting the lane's codes of the granule (expressions of ``k`` and ``n``, ints or TIR).

    In a unit (16 channels x kt inputs), channel ``r`` and input ``c`` are element ``(r, c % 16)`` of the
    ``c // 16``-th mma.m16n8k16 A fragment: lane ``4 * (r % 8) + (c % 8) // 2`` holds it in slot
    ``c % 2 + 2 * (r // 8) + 4 * (c % 16 // 8)`` of that fragment's 8
    (:func:`~tilus_tvm.schedules.quantized_weight.unit_layout`); interleaved formats store a word's slot
    ``2h + b`` in its field ``b * 16 / n + h`` (:func:`~tilus_tvm.layout.register_ops.interleaved_slot`).
    Bit-placed formats (``fmt.placement``) keep the slot: its bits are where the placement puts them in the
    slot's block of words (:meth:`~tilus_tvm.bit_placement.BitPlacement.position`)."""
    kt, units = fmt.kt, fmt.units
    granule, unit, r = n // (16 * units), n // 16 % units, n % 16
    step, c = k // kt, k % kt
    lane = r % 8 * 4 + c % 8 // 2
    slot = unit * (kt // 2) + c // 16 * 8 + c % 16 // 8 * 4 + r // 8 * 2 + c % 2
    if fmt.interleaved:
        from tilus_tvm.layout.register_ops import interleaved_slot

        slot = interleaved_slot(slot, 32 // fmt.dtype.nbits)
    return granule, step, lane, slot


def dequantize_te(fmt: Any, zero_points: bool, out_dtype: str) -> Any:
    """A TE function ``(storage, scales[, zeros]) -> w`` [K, N] of ``out_dtype``: the packed weight decoded."""
    from tvm import te, tirx

    nbits, vector = fmt.dtype.nbits, fmt.vector_bytes
    last = fmt.lane_bytes - 1
    placement = fmt.placement  # integers of 3, 5, 6, 7 bits: each block of words bit-placed
    signed = fmt.dtype.is_integer and fmt.dtype.signed

    tile = fmt.k_tile

    def compute(storage: Any, scales: Any, zeros: Any = None) -> Any:
        def stored(g: Any, s: Any, chunk: Any, lane: Any, index: Any) -> Any:
            """Word ``index`` of ``lane``'s chunk of granule g's k-step s (in tiles of k-steps: tile s // T)."""
            if tile:
                return storage[s // tile, g, s % tile, chunk, lane, index]
            return storage[g, s, chunk, lane, index]

        def byte(g: Any, s: Any, lane: Any, index: Any) -> Any:
            word = stored(g, s, index // vector, lane, index % vector // 4)
            return tirx.bitwise_and(tirx.shift_right(word, (index % 4 * 8).astype("int32")), 0xFF)

        def word(g: Any, s: Any, lane: Any, index: Any) -> Any:
            return stored(g, s, index * 4 // vector, lane, index * 4 % vector // 4)

        def placed_code(g: Any, s: Any, lane: Any, slot: Any) -> Any:
            # bit b of the slot's code sits at (word, pos) of its block, a table over the block's pairs
            block, pair, half = slot // placement.slots, slot % placement.slots // 2, slot % 2
            code = tirx.const(0, "int32")
            for b in range(nbits):
                spots = [placement.position(j, b) for j in range(placement.slots // 2)]
                index, pos = tirx.const(spots[-1][0], "int32"), tirx.const(spots[-1][1], "int32")
                for j in reversed(range(len(spots) - 1)):
                    index = tirx.Select(pair == j, tirx.const(spots[j][0], "int32"), index)
                    pos = tirx.Select(pair == j, tirx.const(spots[j][1], "int32"), pos)
                value = word(g, s, lane, block * placement.words + index)
                code = code | tirx.shift_left(tirx.bitwise_and(tirx.shift_right(value, pos + half * 16), 1), b)
            return code ^ (1 << (nbits - 1)) if placement.offset_binary else code

        def element(k: Any, n: Any) -> Any:
            g, s, lane, slot = code_position(fmt, k, n)
            if placement is not None:
                code = placed_code(g, s, lane, slot)
            else:
                bit = slot * nbits
                first = bit // 8
                pair = byte(g, s, lane, first) | tirx.shift_left(byte(g, s, lane, tirx.min(first + 1, last)), 8)
                code = tirx.bitwise_and(tirx.shift_right(pair, (bit % 8).astype("int32")), (1 << nbits) - 1)
            if signed:
                code = code - tirx.Select(code >= (1 << (nbits - 1)), tirx.const(1 << nbits, "int32"),
                                          tirx.const(0, "int32"))
            value = code.astype("float32")
            group = k // fmt.group_size
            if zeros is not None:
                value = value - zeros[group, n].astype("float32")
            return (value * scales[group, n].astype("float32")).astype(out_dtype)

        return te.compute((fmt.k, fmt.n), element, name="dequantized")

    if zero_points:
        return compute
    return lambda storage, scales: compute(storage, scales)


class QuantizedLinear(nn.Module):
    """A ``relax.frontend.nn`` linear layer with weight-only quantized weights: ``y = x @ w (+ bias)``.

    ``x`` [..., in_features] of ``dtype`` (float16 or bfloat16 for the kernel; float32 stays on TVM's
    path); ``w`` [in_features, out_features] of ``weight_dtype`` (an integer type of 1 to 8 bits)
    with per-group scales (and with ``zero_points``, zero points) over ``group_size`` inputs (None:
    one per output channel). Parameters, all in the layout the kernel reads:

    - ``weight``: ``int32`` ``WeightFormat.storage_shape``, as :func:`~tilus_tvm.schedules.pack_weight`
      makes it with ``k_tile`` (None: pack_weight's default, k-steps in tiles of 2; 0: granule-major);
    - ``scales`` (``zeros``): [in_features / group_size, out_features] of ``dtype``;
    - ``bias``: [out_features] of ``dtype``, when asked for.

    ``forward`` emits the dequantize call and ``R.matmul`` of the module docstring. ``.to(dtype)``
    changes the activations' dtype (scales, zeros, bias), never the integer storage.

    >>> layer = QuantizedLinear(256, 512, "int4b", group_size=64, zero_points=True)
    >>> layer.weight.shape, layer.scales.shape  # [tiles, granules, 2, chunks, 32, V / 4]: 2 k-steps of 128 inputs
    ([1, 32, 2, 2, 32, 4], [4, 512])
    """

    def __init__(self, in_features: int, out_features: int, weight_dtype: Any = "uint4b",
                 group_size: Optional[int] = 128, zero_points: bool = False, bias: bool = False,
                 dtype: str = "float16", k_tile: Optional[int] = None):
        if dtype not in ACTIVATION_DTYPES:
            raise RelaxError(f"QuantizedLinear: dtype must be one of {ACTIVATION_DTYPES}, got {dtype!r}")
        self.format = weight_format(weight_dtype, in_features, out_features, group_size, k_tile)
        self.in_features, self.out_features, self.dtype = in_features, out_features, dtype
        groups = self.format.groups
        self.weight = nn.Parameter(list(self.format.storage_shape), "int32")
        self.scales = nn.Parameter([groups, out_features], dtype)
        self.zeros = nn.Parameter([groups, out_features], dtype) if zero_points else None
        self.bias = nn.Parameter([out_features], dtype) if bias else None

    def to(self, dtype: Optional[str] = None) -> None:  # the storage stays int32
        if dtype is None:
            return
        if dtype not in ACTIVATION_DTYPES:
            raise RelaxError(f"QuantizedLinear.to: dtype must be one of {ACTIVATION_DTYPES}, got {dtype!r}")
        for param in (self.scales, self.zeros, self.bias):
            if param is not None:
                param.to(dtype)
        self.dtype = dtype

    def forward(self, x: Any) -> Any:
        zero_points = self.zeros is not None
        args = [self.weight, self.scales] + ([self.zeros] if zero_points else [])
        name = f"tilus_dequantize_{self.format.dtype.name}_g{self.format.group_size}"
        w = nn.op.tensor_expr_op(dequantize_te(self.format, zero_points, self.dtype), name, args,
                                 attrs=format_attrs(self.format, zero_points))
        y = nn.op.matmul(x, w)
        return y + self.bias if self.bias is not None else y


def linear_params(weight: Any, scales: Any, zeros: Any = None, bias: Any = None, layer: Any = None) -> dict:
    """The parameter values of a :class:`QuantizedLinear` (numpy arrays by parameter name) from a
    :class:`~tilus_tvm.schedules.QuantizedWeight` and its scales (and zeros, bias) as torch tensors.

    The weight is used as packed (its storage is the ``weight`` parameter); scales and zeros must be
    [K / g, N] of one float dtype. With ``layer``, the weight must be stored as that layer's format says (type,
    shape, group, tiles of k-steps). Prefix the names with the layer's path in the model
    (``{f"mlp.down.{k}": v for k, v in linear_params(...).items()}``) to match ``export_tvm``'s."""
    import torch

    from tilus_tvm.schedules.quantized_weight import QuantizedWeight, check_weight

    if not isinstance(weight, QuantizedWeight):
        raise RelaxError(f"linear_params: weight must be a QuantizedWeight (pack_weight / quantize_weight), got "
                         f"{type(weight).__name__}")
    try:
        check_weight(weight, scales, zeros)
    except TilusError as exc:
        raise RelaxError(f"linear_params: {exc}") from None
    # (every field of the format but the placement's activation type, which integer codes do not have)
    if layer is not None and replace(weight.format, placed_for=layer.format.placed_for) != layer.format:
        raise RelaxError(f"linear_params: the weight is {weight.format.describe()}, the layer wants "
                         f"{layer.format.describe()} (pack it with pack_weight(..., k_tile={layer.format.k_tile}), or "
                         f"build the layer with k_tile={weight.format.k_tile})")
    values = {"weight": weight.storage, "scales": scales, "zeros": zeros, "bias": bias}
    return {name: _host_array(t) for name, t in values.items() if t is not None}


def _host_array(t: Any) -> Any:
    """A numpy array, or for bfloat16 (which numpy lacks) a TVM tensor sharing the data."""
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import tvm

        return tvm.runtime.from_dlpack(t)
    return t.numpy()
