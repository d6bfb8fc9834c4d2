"""What every emitter needs while a kernel is generated: the TIR buffers behind each tensor, the
thread index, the shared-memory plan, and the index arithmetic shared by all emitters."""
from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb

from tilus_tvm.backend.strided import compact
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import CompileError
from tilus_tvm.ir.scalar import expr_dtype
from tilus_tvm.ir.stmt import Function
from tilus_tvm.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus_tvm.layout.register import RegisterLayout, row_major_ravel, row_major_unravel
from tilus_tvm.layout.shared import SharedLayout
from tilus_tvm.layout.to_tir import register_inverse_index_map, shared_index_map
from tilus_tvm.lowp import is_packed, register_storage

def const(value: Any, dtype: DataType | str):
    """``value`` (Python number or PrimExpr) as an expression of ``dtype``."""
    name = dtype if isinstance(dtype, str) else dtype.name
    if isinstance(value, (bool, int, float)):
        return tirx.const(value, name)
    return value if expr_dtype(value) == name else tirx.Cast(name, value)


@functools.lru_cache(maxsize=None)
def _inverse_map(layout: RegisterLayout):
    return register_inverse_index_map(layout)


@functools.lru_cache(maxsize=None)
def _offset_map(layout: SharedLayout):
    return shared_index_map(layout)


def logical_index(layout: RegisterLayout, thread: Any, local: Any) -> tuple:
    """The tile element held in slot ``local`` of ``thread``, through the layout's TVM IndexMap.

    The map is exact for threads below ``layout.num_threads``; a thread beyond them (a block larger
    than the layout) gets some element of the tile, so its loads stay in bounds; it never stores
    (see :meth:`CodegenContext.owner_condition`).
    """
    return tuple(_inverse_map(layout).map_indices([thread, local]))


def shared_offset(layout: SharedLayout, coords: Sequence[Any]) -> Any:
    """Element offset of ``coords`` in a shared tensor, through the layout's TVM IndexMap."""
    return _offset_map(layout).map_indices(list(coords))[0]


if TYPE_CHECKING:
    from tilus_tvm.passes.shared_memory import SharedMemoryPlan


class CodegenContext:
    def __init__(self, func: Function, plan: "SharedMemoryPlan", thread_var: tirx.Var):
        self.func = func
        self.plan = plan
        self.tx = thread_var
        self.pool = None  # the uint8 dynamic shared-memory pool, if any
        self.registers: dict[int, tirx.Buffer] = {}
        self.views: dict[int, tirx.Buffer] = {}
        self.flat_views: dict[str, tirx.Buffer] = {}  # pointer name -> 1-D alias (vector accesses)
        self.subview_flats: dict[int, tirx.Buffer] = {}  # sub-view -> 1-D alias from its base
        self.strided_views = False  # a global view with non-row-major strides was declared
        # id(TmaLoad) -> (its tensor map, encoded on the host; its swizzle mode) (instructions/tma.py)
        self.tensor_maps: dict[int, tuple] = {}

    def flat_view(self, tensor: GlobalTensor) -> tirx.Buffer:
        """A 1-D buffer over a global view's memory, for accesses at a linear element offset
        (``sum(index * strides)``): from the pointer, or from a sub-view's base."""
        if tensor.is_subview:
            return self.subview_flats[id(tensor)]
        return self.pointer_flat(tensor.pointer)

    def pointer_flat(self, param) -> tirx.Buffer:
        """A 1-D buffer over a pointer parameter's whole memory."""
        return self.flat_views.get(param.name, param.buffer)

    # --- buffers --------------------------------------------------------------------------------
    def declare_register(self, tensor: RegisterTensor) -> tirx.Buffer:
        if id(tensor) not in self.registers:
            if tensor.layout is None:
                raise CompileError(f"register tensor {tensor.describe()} reached code generation without a layout")
            dtype, length = register_storage(tensor.dtype, tensor.layout.local_size)  # packed types: uint32 words
            buffer = tirx.decl_buffer((length,), dtype, tensor.name, scope="local")
            self.registers[id(tensor)] = buffer
        return self.registers[id(tensor)]

    def reg(self, tensor: RegisterTensor) -> tirx.Buffer:
        return self.registers[id(tensor)]

    def view(self, tensor: GlobalTensor | SharedTensor) -> tirx.Buffer:
        if id(tensor) not in self.views:
            raise CompileError(f"{tensor.describe()} is used before it is declared")
        return self.views[id(tensor)]

    def declare_global_view(self, tensor: GlobalTensor) -> None:
        if tensor.pointer.shaped or is_packed(tensor.dtype):  # the ABI's shaped buffer; packed: its bytes
            self.views[id(tensor)] = tensor.pointer.buffer
            return
        self._declare_strided_view(tensor, tensor.pointer.buffer.data)

    def _declare_strided_view(self, tensor: GlobalTensor, data) -> None:
        """The buffer of ``tensor``'s shape and strides over the memory at ``data``."""
        if not compact(tensor.shape, tensor.strides):
            self.strided_views = True  # TVM's LowerTIRx drops the strides: see backend/strided.py
        buffer = Tb.decl_buffer(list(tensor.shape), tensor.dtype.name, data=data, strides=list(tensor.strides))
        IRBuilder.name(tensor.name, buffer)
        self.views[id(tensor)] = buffer

    def declare_global_subview(self, tensor: GlobalTensor) -> None:
        """Bind the sub-view's base address (``&ptr[base]``, ``base`` an int64 expression) to a pointer
        variable, and declare the sub-view's buffers from it: indices inside are int32 again."""
        import tvm

        pointer = tirx.Var(f"{tensor.name}_base", tvm.ir.PointerType(tvm.ir.PrimType(tensor.dtype.name), "global"))
        Tb.bind(tirx.address_of(tirx.BufferLoad(self.pointer_flat(tensor.pointer), [tensor.base_offset()])),
                var=pointer)
        self._declare_strided_view(tensor, pointer)
        flat = Tb.decl_buffer((tensor.span,), tensor.dtype.name, data=pointer)
        IRBuilder.name(f"{tensor.name}_flat", flat)
        self.subview_flats[id(tensor)] = flat

    def shared_view(self, byte_offset: int, dtype: DataType, num_elements: int, name: str) -> tirx.Buffer:
        """A 1-D typed view of the shared-memory pool (the bytes of a packed low-precision tensor)."""
        if is_packed(dtype):
            buffer = Tb.decl_buffer((dtype.storage_bytes(num_elements),), "uint8", data=self.pool.data,
                                    elem_offset=byte_offset, scope="shared.dyn")
            IRBuilder.name(name, buffer)
            return buffer
        element_bytes = dtype.nbits // 8
        if dtype.nbits % 8 or byte_offset % element_bytes:
            raise CompileError(f"shared offset {byte_offset} is not aligned for {dtype.name}")
        buffer = Tb.decl_buffer((num_elements,), dtype.name, data=self.pool.data,
                                elem_offset=byte_offset // element_bytes, scope="shared.dyn")
        IRBuilder.name(name, buffer)
        return buffer

    def declare_shared(self, tensor: SharedTensor) -> None:
        self.views[id(tensor)] = self.shared_view(self.plan.offset_of(tensor), tensor.dtype, tensor.layout.cosize,
                                                  tensor.name)

    def shared_element(self, tensor: SharedTensor, coords: Sequence[Any]) -> tuple[tirx.Buffer, Any]:
        """(buffer, element offset) of ``coords`` in a shared tensor or a view of one (``smem[stage]``)."""
        if not tensor.linear_in_root():  # a sub-tile the swizzle permutes across: address it in the root
            return self.view(tensor.root), shared_offset(tensor.root.layout, tensor.root_coords(coords))
        offset = shared_offset(tensor.resolved_layout(), coords)
        base = tensor.element_offset()
        if not (isinstance(base, int) and base == 0):
            offset = base + offset
        return self.view(tensor.root), offset

    def logical(self, layout: RegisterLayout, local: Any) -> tuple:
        """The tile element this thread holds in slot ``local``."""
        return logical_index(layout, self.tx, local)

    # --- regions --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def detached(self) -> Iterator["Region"]:
        """Build TIR that is not placed where the emitter stands: ``with ctx.detached() as region:``
        emits into ``region``; afterwards ``region.stmt`` is one TIR statement that the emitter
        places once or several times with :meth:`place` (a software-pipeline stage, a branch
        that one warp group runs)."""
        region = Region()
        with IRBuilder() as builder:
            with Tb.serial(0, 1):  # a carrier frame, so several statements make one SeqStmt
                yield region
        region.stmt = builder.get().body

    def place(self, stmt: tirx.Stmt) -> None:
        """Put a statement (a detached region's) at the current point of the kernel."""
        Tb.add_to_parent(stmt)

    def emit_instruction(self, inst: Any) -> None:
        """Emit another tile instruction here, through its registered emitter for this target."""
        from tilus_tvm.instructions import lookup

        lookup(type(inst), self.func.arch).emit(self, inst)

    # --- control helpers ------------------------------------------------------------------------
    def guarded(self, cond) -> Any:
        """``with ctx.guarded(cond):`` — a run-time condition, skipped when it is the constant True."""
        return _Guard(cond)

    def owner_condition(self, layout: RegisterLayout):
        """True in the threads that write a tensor of ``layout`` out: within the layout's threads and the
        first replica of each element."""
        cond = tirx.const(True, "bool")
        if layout.num_threads < self.func.num_threads:
            cond = tirx.And(cond, self.tx < layout.num_threads)
        if layout.is_replicated:
            cond = tirx.And(cond, layout.replica_of(self.tx) == 0)
        return cond


class Region:
    """What :meth:`CodegenContext.detached` builds: ``stmt`` is set when the ``with`` block ends."""

    stmt: Optional[tirx.Stmt] = None


class _Guard:
    def __init__(self, cond):
        self.cond = cond
        self.frames: list = []

    def __enter__(self):
        if isinstance(self.cond, tirx.IntImm) and self.cond.value == 1:
            return self
        frame = Tb.If(self.cond)
        frame.__enter__()
        then = Tb.Then()
        then.__enter__()
        self.frames = [frame, then]
        return self

    def __exit__(self, *exc):
        for frame in reversed(self.frames):
            frame.__exit__(*exc)
        return False


def broadcast_local(out_layout: RegisterLayout, operand_shape: Sequence[int], local: Any) -> Any:
    """The register slot of a broadcast operand that holds the element of ``out_layout``'s slot ``local``.

    The operand's layout is ``reduce(out_layout, dims, keepdims=True)`` for its size-1 dimensions
    ``dims``: its local modes are ``out_layout``'s minus those of ``dims``, in the same order, so its
    slot is the output slot's digits with the digits of ``dims`` dropped.
    """
    dims = {d for d, (o, s) in enumerate(zip(operand_shape, out_layout.shape)) if o == 1 and s != 1}
    return drop_local_dims(out_layout, dims, local) if dims else local


def drop_local_dims(layout: RegisterLayout, dims: set[int], local: Any) -> Any:
    """Slot ``local`` of ``layout`` with the digits of the local modes of ``dims`` dropped, re-raveled
    over the remaining local modes: the slot in ``reduce(layout, dims)`` (ints or PrimExprs)."""
    dim_of = {m: d for d, group in enumerate(layout.grouped_modes) for m in group}
    digits = row_major_unravel(local, layout.local_shape)
    kept = [(digit, size) for m, digit, size in zip(layout.local_modes, digits, layout.local_shape)
            if dim_of[m] not in dims]
    return row_major_ravel([d for d, _ in kept], [s for _, s in kept])


def row_major_linear(index: Sequence[Any], shape: Sequence[int]) -> Any:
    """The row-major position of ``index`` in a tile of ``shape``."""
    return row_major_ravel(list(index), list(shape))


def sync_threads() -> None:
    """``__syncthreads()``."""
    Tb.evaluate(Tb.tvm_storage_sync("shared"))


def bounds_condition(coords: Sequence[Any], shape: Sequence[Any]):
    cond = None
    for c, extent in zip(coords, shape):
        term = tirx.And(c >= 0, c < extent)
        cond = term if cond is None else tirx.And(cond, term)
    return cond if cond is not None else tirx.const(True, "bool")


def global_bounds(tensor: GlobalTensor, coords: Sequence[Any]):
    """Whether ``coords`` lie inside the global view: its shape and, for a sub-view, the range of its
    leading indices in the parent (:meth:`GlobalTensor.leading_guard`)."""
    inside = bounds_condition(coords, tensor.shape)
    return tirx.And(tensor.leading_guard(), inside) if tensor.is_subview else inside


def place_tile(offsets: Sequence[Any], dims: Sequence[int], tile_index: Sequence[Any]) -> list[Any]:
    """Coordinates in the full tensor of a tile element: ``offsets`` plus the tile index along ``dims``."""
    coords = list(offsets)
    for d, i in zip(dims, tile_index):
        coords[d] = coords[d] + i
    return coords
