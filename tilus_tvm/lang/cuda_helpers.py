"""``self.cuda``: the helpers Tilus programs call to pick tensor-core configurations and layouts.

    class Attention(tilus.Script):
        def __init__(self, block_q, block_kv, head_size, warps):
            super().__init__()
            self.qk = self.cuda.resolve_dot_config(float16, float32, m=block_q, n=block_kv, k=head_size,
                                                   warp_m=warps, warp_n=1)
            # self.qk.la / .lb / .lc: register layouts of q, k and the scores

Everything here is plain Python over :mod:`tilus_tvm.layout` and its ``mma.sync`` atoms
(:mod:`tilus_tvm.layout.atoms`); nothing imports TVM or needs a GPU, so the helpers work in
``__init__`` as well as inside the kernel.

The layouts of a :class:`BlockMmaConfig` are exactly the ones ``self.dot`` gives its operands for
the same warp grid (``tilus_tvm/instructions/dot.py``, ``dot_layouts``); ``dot`` also takes the warp
grid from operands whose layouts were pinned to one of them (``load_shared(..., layout=cfg.la)``,
``annotate_layout(acc, cfg.lc)``), so a program that pins them runs without layout conversions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from tilus_tvm.dtypes import DataType, as_dtype
from tilus_tvm.errors import LayoutError, ScriptError
from tilus_tvm.layout.atoms import MmaAtom, get_mma_atom
from tilus_tvm.layout.register import RegisterLayout, register_layout, spatial
from tilus_tvm.layout.register_ops import auto_local_spatial, permute
from tilus_tvm.layout.shared import SharedLayout, shared_row_major

WARP_SIZE = 32
# Tilus refuses configurations whose fragments alone would take this many 32-bit registers per thread
# (255 are addressable; the rest is left for addresses and temporaries).
MAX_FRAGMENT_REGISTERS = 256 - 32


@dataclass(frozen=True)
class AtomicMmaConfig:
    """One warp-wide ``mma.sync`` instruction, under Tilus's attribute names.

    ``la`` ``[m, k]``, ``lb`` ``[k, n]``, ``lc`` ``[m, n]``: the register layouts of the A, B and
    C/D fragments over the 32 lanes; ``operand_type``/``acc_type``: the A/B and C/D data types;
    ``vec_k`` is always 1 here. ``atom`` is the :class:`~tilus_tvm.layout.atoms.MmaAtom` it wraps.

    >>> cfg = CudaHelpers.atomic_mma_configs.m16n8k16_f16_f32
    >>> cfg.m, cfg.n, cfg.k, cfg.la.local_size, cfg.atom.ptx
    (16, 8, 16, 8, 'mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32')
    """

    name: str
    m: int
    n: int
    k: int
    vec_k: int
    la: RegisterLayout
    lb: RegisterLayout
    lc: RegisterLayout
    operand_type: DataType
    acc_type: DataType
    atom: MmaAtom

    @staticmethod
    def from_atom(atom: MmaAtom) -> AtomicMmaConfig:
        operand, acc = as_dtype(atom.a_dtype), as_dtype(atom.c_dtype)
        name = f"m{atom.m}n{atom.n}k{atom.k}_{_short(operand)}_{_short(acc)}"
        return AtomicMmaConfig(name, atom.m, atom.n, atom.k, 1, atom.a_layout, atom.b_layout, atom.c_layout,
                               operand, acc, atom)

    def __repr__(self) -> str:
        return f"AtomicMmaConfig({self.name})"


def _short(dtype: DataType) -> str:
    return {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int8": "i8", "int32": "i32"}[dtype.name]


class AtomicMmaConfigs:
    """``self.cuda.atomic_mma_configs``: the ``mma.sync`` instructions by Tilus's names
    (``m16n8k16_f16_f32``, ``m16n8k16_f16_f16``, ``m16n8k16_bf16_f32``, ``m16n8k16_i8_i32``,
    ``m16n8k32_i8_i32``, and the k=8 half-precision ones ``m16n8k8_f16_f32``, ``m16n8k8_f16_f16``,
    ``m16n8k8_bf16_f32``), and :meth:`from_dtypes`."""

    _ATOMS = (("float16", "float32", (16, 8)), ("float16", "float16", (16, 8)), ("bfloat16", "float32", (16, 8)),
              ("int8", "int32", (16, 32)))
    # the operand/accumulator pairs from_dtypes knows, and the instruction it picks for each
    _PREFERRED_K = {("float16", "float32"): 16, ("float16", "float16"): 16, ("bfloat16", "float32"): 16,
                    ("int8", "int32"): 32}

    def __init__(self):
        configs = {}
        for operand, acc, ks in self._ATOMS:
            for k in ks:
                config = AtomicMmaConfig.from_atom(get_mma_atom(operand, operand, acc, k=k))
                configs[config.name] = config
        self._configs = configs
        for name, config in configs.items():
            setattr(self, name, config)

    def names(self) -> list[str]:
        """The names of every configuration available."""
        return sorted(self._configs)

    def from_dtypes(self, operand_dtype: Any, accumulator_dtype: Any) -> AtomicMmaConfig:
        """The instruction Tilus picks for A/B of ``operand_dtype`` accumulating in
        ``accumulator_dtype``: m16n8k16 for float16 (to float32 or float16) and bfloat16 (to
        float32), m16n8k32 for int8 to int32.

        >>> CudaHelpers.atomic_mma_configs.from_dtypes(bfloat16, float32).name
        'm16n8k16_bf16_f32'
        """
        operand, acc = _dtype(operand_dtype, "from_dtypes", "operand_dtype"), \
            _dtype(accumulator_dtype, "from_dtypes", "accumulator_dtype")
        k = self._PREFERRED_K.get((operand.name, acc.name))
        if k is None:
            supported = ", ".join(f"({a}, {c})" for a, c in self._PREFERRED_K)
            raise ScriptError(f"atomic_mma_configs.from_dtypes: no mma.sync instruction for operand_dtype="
                              f"{operand.name} with accumulator_dtype={acc.name}; supported (operand, accumulator): "
                              f"{supported}")
        return self._configs[f"m16n8k{k}_{_short(operand)}_{_short(acc)}"]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"atomic_mma_configs has no {name!r}; the mma.sync instructions here are: "
                             f"{', '.join(self.names())}")


@dataclass(frozen=True)
class BlockMmaConfig:
    """How a thread block computes ``C[m, n] += A[m, k] @ B[k, n]`` with an ``mma.sync`` instruction:
    ``warp_spatial = (wsm, wsn)`` warps over the C tile, each repeating the instruction ``warp_repeat
    = (wrm, wrn, wrk)`` times. ``la`` ``[m, k]``, ``lb`` ``[k, n]``, ``lc`` ``[m, n]`` are the
    register layouts of A, B and C/D for ``num_warps * 32`` threads; ``lb_T`` is ``lb`` transposed
    (``[n, k]``, for B stored n-major). Tilus's fields, plus ``atomic_mma``, ``warp_spatial`` and
    ``warp_repeat``.
    """

    operand_dtype: DataType
    accumulator_dtype: DataType
    m: int
    n: int
    k: int
    num_warps: int
    la: RegisterLayout
    lb: RegisterLayout
    lc: RegisterLayout
    atomic_mma: AtomicMmaConfig
    warp_spatial: tuple[int, int]
    warp_repeat: tuple[int, int, int]

    @property
    def lb_T(self) -> RegisterLayout:  # noqa: N802 - Tilus's name
        return permute(self.lb, [1, 0])


def _dtype(value: Any, op: str, name: str) -> DataType:
    try:
        return as_dtype(value)
    except ScriptError as exc:
        raise ScriptError(f"{op}: {name}={value!r} is not a data type ({exc})") from None


def _positive(value: Any, op: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ScriptError(f"{op}: {name} must be a positive int, got {value!r}")
    return value


def _fragment_registers(atomic: AtomicMmaConfig, wrm: int, wrn: int, wrk: int) -> int:
    """32-bit registers per thread that the A, B and C fragments of one warp's tile take."""
    operand_bits, acc_bits = atomic.operand_type.nbits, atomic.acc_type.nbits
    bits = (wrm * wrk * atomic.la.local_size * operand_bits + wrn * wrk * atomic.lb.local_size * operand_bits
            + wrm * wrn * atomic.lc.local_size * acc_bits)
    return bits // 32


def _warp_grids(wsm: int, wsn: int) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout]:
    """Warp ``w = i * wsn + j`` owns row block ``i`` and column block ``j`` of C: the A row block ``i``
    is held by the ``wsn`` warps of that row (replicas), the B column block ``j`` by the ``wsm`` warps
    of that column."""
    a_grid = register_layout([wsm, 1], [wsm], [0, -wsn], [])
    b_grid = register_layout([1, wsn], [wsn], [-wsm, 0], [])
    return a_grid, b_grid, spatial(wsm, wsn)


class CudaHelpers:
    """The object behind ``self.cuda`` (stateless: every method is a pure function)."""

    atomic_mma_configs = AtomicMmaConfigs()

    @staticmethod
    def mma_dot_config(atomic_mma: AtomicMmaConfig, warp_spatial: Sequence[int],
                       warp_repeat: Sequence[int]) -> BlockMmaConfig:
        """The block configuration of ``atomic_mma`` with ``warp_spatial = (wsm, wsn)`` warps and
        ``warp_repeat = (wrm, wrn, wrk)`` instructions per warp: a tile ``m = atom.m * wsm * wrm``,
        ``n = atom.n * wsn * wrn``, ``k = atom.k * wrk`` on ``wsm * wsn`` warps, with

            lc = spatial(wsm, wsn) . local(wrm, wrn) . atom.lc
            la = (wsm warps, replicated over wsn) . local(wrm, wrk) . atom.la
            lb = (wsn warps, replicated over wsm) . local(wrk, wrn) . atom.lb

        Raises :class:`~tilus_tvm.errors.ScriptError` when the fragments would take 224 or more
        registers per thread (Tilus's limit).

        >>> cfg = CudaHelpers.mma_dot_config(CudaHelpers.atomic_mma_configs.m16n8k16_f16_f32, (2, 2), (2, 4, 1))
        >>> cfg.m, cfg.n, cfg.k, cfg.num_warps, cfg.lc.num_threads
        (64, 64, 16, 4, 128)
        """
        op = "mma_dot_config"
        if not isinstance(atomic_mma, AtomicMmaConfig):
            raise ScriptError(f"{op}: atomic_mma must be one of self.cuda.atomic_mma_configs, got {atomic_mma!r}")
        if not isinstance(warp_spatial, (list, tuple)) or len(warp_spatial) != 2:
            raise ScriptError(f"{op}: warp_spatial must be (warps along m, warps along n), got {warp_spatial!r}")
        if not isinstance(warp_repeat, (list, tuple)) or len(warp_repeat) != 3:
            raise ScriptError(f"{op}: warp_repeat must be (repeats along m, n, k), got {warp_repeat!r}")
        wsm, wsn = (_positive(v, op, f"warp_spatial[{i}]") for i, v in enumerate(warp_spatial))
        wrm, wrn, wrk = (_positive(v, op, f"warp_repeat[{i}]") for i, v in enumerate(warp_repeat))
        registers = _fragment_registers(atomic_mma, wrm, wrn, wrk)
        if registers >= MAX_FRAGMENT_REGISTERS:
            raise ScriptError(f"{op}: {atomic_mma.name} repeated {warp_repeat} per warp needs {registers} registers "
                              f"per thread for its fragments (limit {MAX_FRAGMENT_REGISTERS - 1}); use more warps "
                              f"or a smaller tile")
        a_grid, b_grid, c_grid = _warp_grids(wsm, wsn)
        return BlockMmaConfig(
            operand_dtype=atomic_mma.operand_type, accumulator_dtype=atomic_mma.acc_type,
            m=atomic_mma.m * wsm * wrm, n=atomic_mma.n * wsn * wrn, k=atomic_mma.k * wrk, num_warps=wsm * wsn,
            la=a_grid.local(wrm, wrk) * atomic_mma.la, lb=b_grid.local(wrk, wrn) * atomic_mma.lb,
            lc=c_grid.local(wrm, wrn) * atomic_mma.lc,
            atomic_mma=atomic_mma, warp_spatial=(wsm, wsn), warp_repeat=(wrm, wrn, wrk))

    @staticmethod
    def resolve_dot_config(operand_dtype: Any, acc_dtype: Any, *, m: int, n: int, k: int,
                           num_warps: Optional[int] = None, warp_m: Optional[int] = None,
                           warp_n: Optional[int] = None) -> BlockMmaConfig:
        """The block configuration for an ``[m, k] @ [k, n]`` tile product on ``num_warps`` warps (or
        on ``warp_m x warp_n`` warps; either may also constrain the split of ``num_warps``).

        The instruction is :meth:`AtomicMmaConfigs.from_dtypes`'s; ``m``, ``n``, ``k`` must be
        multiples of its ``m``, ``n``, ``k``. Among the warp grids ``(wsm, wsn)`` with ``wsm * wsn ==
        num_warps`` that divide the tile, the one whose fragments take the fewest registers wins
        (the first, smallest ``wsm``, among equals) -- the grid ``self.dot`` picks on its own.

        >>> cfg = CudaHelpers.resolve_dot_config(float16, float32, m=64, n=64, k=32, num_warps=4)
        >>> cfg.warp_spatial, cfg.warp_repeat, list(cfg.lc.shape)
        ((2, 2), (2, 4, 2), [64, 64])
        """
        op = "resolve_dot_config"
        m, n, k = (_positive(v, op, name) for v, name in ((m, "m"), (n, "n"), (k, "k")))
        for value, name in ((num_warps, "num_warps"), (warp_m, "warp_m"), (warp_n, "warp_n")):
            if value is not None:
                _positive(value, op, name)
        if num_warps is None:
            if warp_m is None or warp_n is None:
                raise ScriptError(f"{op}: give num_warps, or both warp_m and warp_n (got warp_m={warp_m}, "
                                  f"warp_n={warp_n})")
            num_warps = warp_m * warp_n
        atomic = CudaHelpers.atomic_mma_configs.from_dtypes(operand_dtype, acc_dtype)
        if m % atomic.m or n % atomic.n or k % atomic.k:
            raise ScriptError(f"{op}: tile m={m}, n={n}, k={k} is not a multiple of the {atomic.name} instruction "
                              f"(m {atomic.m}, n {atomic.n}, k {atomic.k})")
        tiles_m, tiles_n, tiles_k = m // atomic.m, n // atomic.n, k // atomic.k
        best = None
        for wsm in range(1, num_warps + 1):
            wsn = num_warps // wsm
            if wsm * wsn != num_warps or (warp_m is not None and wsm != warp_m) or \
                    (warp_n is not None and wsn != warp_n) or tiles_m % wsm or tiles_n % wsn:
                continue
            repeat = (tiles_m // wsm, tiles_n // wsn, tiles_k)
            registers = _fragment_registers(atomic, *repeat)
            if best is None or registers < best[0]:
                best = (registers, (wsm, wsn), repeat)
        if best is None:
            raise ScriptError(f"{op}: no grid of {num_warps} warps (warp_m={warp_m}, warp_n={warp_n}) divides the "
                              f"{tiles_m} x {tiles_n} {atomic.name} tiles of an m={m}, n={n} block")
        return CudaHelpers.mma_dot_config(atomic, best[1], best[2])

    @staticmethod
    def shared_layout(shape: Sequence[int]) -> SharedLayout:
        """The row-major shared layout of ``shape``.

        >>> CudaHelpers.shared_layout([2, 8])
        SharedLayout(shape=[2, 8], strides=[8, 1])
        """
        if not isinstance(shape, (list, tuple)):
            raise ScriptError(f"shared_layout: shape must be a list or tuple of ints, got {shape!r}")
        try:
            return shared_row_major(*shape)
        except LayoutError as exc:
            raise ScriptError(f"shared_layout: {exc}") from None

    @staticmethod
    def swizzled_shared_layout(dtype: Any, *, shape: Sequence[int]) -> SharedLayout:
        """Tilus 0.1's swizzled layout for ``ldmatrix``: :func:`~tilus_tvm.ir.layout.ops.shared_ops.
        shared_row_major_swizzle` of ``shape`` with ``dtype``'s element size.

        >>> CudaHelpers.swizzled_shared_layout(float16, shape=[64, 64])
        SharedLayout(shape=[64, 64], strides=[64, 1], swizzle=Sw<3,3,3>)
        """
        from tilus_tvm.ir.layout.ops.shared_ops import shared_row_major_swizzle

        dtype = _dtype(dtype, "swizzled_shared_layout", "dtype")
        try:
            return shared_row_major_swizzle(shape, dtype.nbytes)
        except LayoutError as exc:
            raise ScriptError(f"swizzled_shared_layout: {exc}") from None

    @staticmethod
    def default_register_layout(num_warps: int, dtype: Any, shape: Sequence[int],
                                vector_size: Optional[int] = None) -> RegisterLayout:
        """A coalesced layout of ``shape`` over ``num_warps * 32`` threads, each thread holding
        vectors of ``vector_size`` consecutive elements of the last dimension (default: as many as fit
        in 16 bytes, divide the last dimension and the elements per thread): ``auto_local_spatial``
        of the vectors, then ``local(1, ..., vector_size)``. The threads must divide the elements.

        >>> CudaHelpers.default_register_layout(1, float32, [32, 8])  # 8 elements per thread, 4 per vector
        RegisterLayout(shape=[32, 8], mode_shape=[2, 16, 2, 4], spatial_modes=[1, 2], local_modes=[0, 3])
        """
        op = "default_register_layout"
        num_threads = _positive(num_warps, op, "num_warps") * WARP_SIZE
        dtype = _dtype(dtype, op, "dtype")
        if not isinstance(shape, (list, tuple)) or not shape:
            raise ScriptError(f"{op}: shape must be a non-empty list or tuple of ints, got {shape!r}")
        shape = [_positive(s, op, "shape entries") for s in shape]
        size = 1
        for s in shape:
            size *= s
        if size % num_threads:
            raise ScriptError(f"{op}: {num_threads} threads ({num_warps} warps) do not divide the {size} elements of "
                              f"shape {shape}")
        per_thread = size // num_threads
        if vector_size is None:
            vector_size = 1
            while (vector_size * 2 * dtype.nbits <= 128 and per_thread % (vector_size * 2) == 0
                   and shape[-1] % (vector_size * 2) == 0):
                vector_size *= 2
        elif _positive(vector_size, op, "vector_size") and (per_thread % vector_size or shape[-1] % vector_size):
            raise ScriptError(f"{op}: vector_size {vector_size} must divide the {per_thread} elements per thread and "
                              f"the last dimension {shape[-1]}")
        vectors = shape[:-1] + [shape[-1] // vector_size]
        return auto_local_spatial(num_threads, vectors).local(*([1] * (len(shape) - 1)), vector_size)


class CudaHelpersMixin:
    """Gives :class:`~tilus_tvm.Script` its ``self.cuda`` (usable in ``__init__`` and in kernels)."""

    @property
    def cuda(self) -> type[CudaHelpers]:
        return CudaHelpers
