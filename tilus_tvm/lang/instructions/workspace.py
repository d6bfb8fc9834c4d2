"""Cooperation across blocks: ``global_tensor`` workspaces and the ``lock_semaphore`` /
``release_semaphore`` pair (split-K reductions, stream-K, any ordered hand-off between blocks)."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from tilus_tvm import dtypes
from tilus_tvm.dtypes import DataType
from tilus_tvm.errors import ScriptError
from tilus_tvm.ir import inst as ir
from tilus_tvm.ir.tensor import GlobalTensor
from tilus_tvm.ir.tensor_ops import GlobalElement, ItemPointer
from tilus_tvm.ir.values import is_scalar
from tilus_tvm.lang.instructions.memory import InstructionBase


class WorkspaceInstructions(InstructionBase):
    """``global_tensor``, ``lock_semaphore``, ``release_semaphore``."""

    def global_tensor(self, dtype: DataType, shape: Sequence[Any], *, layout: Optional[Any] = None,
                      requires_clean: bool) -> GlobalTensor:
        """A global tensor owned by the kernel: a workspace shared by all its blocks.

        ``shape`` (row-major) holds ints and expressions of the kernel's run-time scalar parameters
        (``self.utils.ceil_div(m_size, 16)``), never of ``blockIdx``: every block sees the same
        tensor. The runtime allocates it with torch on the launch device the first time a launch
        needs it (again, larger, when a later launch needs more) and passes it to every launch of
        this compiled kernel on that device; launches on one device therefore share it, and must not
        run at the same time on different streams.

        ``requires_clean`` (required, as in Tilus):

        - ``True``: the tensor is all zeros when a launch starts. The runtime zeroes it once, when it
          allocates it; **the kernel must leave it all zeros when it ends** (a semaphore counted up
          is set back to 0 by the last block that uses it). A kernel that breaks this contract
          (or is interrupted) leaves later launches a dirty workspace.
        - ``False``: the contents are undefined at the start of each launch (scratch space).

        ``layout`` exists for Tilus's signature; only the default row-major layout is supported.
        Loads, stores and ``copy_async`` work on the result as on a :meth:`global_view`;
        ``t[i, j].item_ptr()`` is the address of one element (a semaphore). The destination-passing
        form (``R.call_tir``, tuning) cannot provide a kept workspace, so such kernels run through
        the torch launch path only.

        >>> sems = self.global_tensor(dtype=int32, shape=[m_tiles, n_tiles], requires_clean=True)  # doctest: +SKIP
        >>> self.lock_semaphore(sems[self.blockIdx.y, self.blockIdx.x].item_ptr(), split)           # doctest: +SKIP
        """
        from tvm import tirx

        from tilus_tvm.ir.scalar import c_identifier, expr_dtype
        from tilus_tvm.ir.stmt import Param

        builder = self._builder("global_tensor")
        import tilus_tvm.instructions.workspace  # noqa: F401 - registers the instructions (imports TVM)

        if not isinstance(requires_clean, bool):
            raise ScriptError(f"global_tensor: requires_clean must be True or False, got {requires_clean!r}")
        if layout is not None:
            raise ScriptError(f"global_tensor: layout {layout!r} is not supported; workspaces are row-major "
                              f"(leave layout out)")
        dtype = dtypes.as_dtype(dtype)
        if dtype.nbits % 8 or dtype.torch_name is None or dtype.tvm_name is None:
            raise ScriptError(f"global_tensor: dtype {dtype.name} has no torch counterpart to allocate it with; "
                              f"use a whole-byte type such as int32 or float32")
        shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
        if not shape:
            raise ScriptError("global_tensor: shape must list at least one dimension")
        for s in shape:
            if isinstance(s, bool) or not is_scalar(s) or isinstance(s, float):
                raise ScriptError(f"global_tensor: shape entry {s!r} must be an int or an integer scalar expression "
                                  f"of the kernel's run-time parameters")
            if not isinstance(s, int) and "int" not in expr_dtype(s):
                raise ScriptError(f"global_tensor: shape entry {s} must be an integer, it is {expr_dtype(s)}")
            if isinstance(s, int) and s < 1:
                raise ScriptError(f"global_tensor: shape {shape} must have positive extents, got {s}")
        name = builder.fresh_name("workspace")
        numel = tirx.Var(f"{name}_numel", "int32")
        buffer = tirx.decl_buffer((numel,), dtype.tvm_name, c_identifier(name))
        param = Param(name, "pointer", dtype, buffer=buffer, workspace=True)
        strides, running = [], 1
        for s in reversed(shape):
            strides.append(running)
            running = running * s
        tensor = GlobalTensor(dtype, tuple(shape), tuple(reversed(strides)), param, name=builder.fresh_name("w"),
                              compact=True)
        builder.emit(ir.AllocateGlobal(tensor, requires_clean))
        return tensor

    def lock_semaphore(self, semaphore: Any, value: Any) -> None:
        """Wait until the int32 semaphore ``semaphore`` (``sems[i, j].item_ptr()``) equals ``value``.

        Called by the whole block: thread 0 polls the word (``ld.relaxed.gpu``, closed by one
        ``ld.acquire.gpu`` once it matches), then a block barrier, so every thread's later reads see
        what the block that released the semaphore wrote before :meth:`release_semaphore`. ``value``
        is an int or an integer scalar expression. Must be reached by every thread of the block
        (not inside a branch on the thread index). Spinning blocks wait for blocks that may not be
        resident: order the hand-off so that a block only waits for blocks with a lower linear
        block index (as split-K does along ``blockIdx.z``).

        >>> self.lock_semaphore(sem, value=self.blockIdx.z)   # doctest: +SKIP
        """
        builder = self._builder("lock_semaphore")
        (tensor, indices), value = _semaphore_operands("lock_semaphore", builder, semaphore, value)
        builder.emit(ir.LockSemaphore(tensor, indices, value))

    def arrive_last(self, counter: Any, total: Any) -> Any:
        """Whether this block is the ``total``-th to arrive at the int32 counter ``counter``
        (``counts[i, j].item_ptr()``): a run-time scalar (int32, 1 or 0), the same in every thread of the block.

        Called by the whole block (not inside a branch on the thread index): a block barrier (the block's
        earlier global stores are done), then thread 0 runs a GPU-scope fence and an atomic add of 1 whose
        result is its ticket. The block that draws ``total - 1`` runs a second fence, so its threads then see
        every store the other blocks made before their ``arrive_last``, and sets the counter back to 0 (a
        ``requires_clean`` workspace stays clean for the next launch). ``__syncthreads_or`` hands thread 0's
        answer to the block. Unlike :meth:`lock_semaphore`, no block waits: the last to arrive does the work
        that needs them all (split-K's sum, adding every split's partial sums in split order). ``total`` is
        an int or an integer scalar expression; exactly ``total`` blocks must arrive.

        >>> if self.arrive_last(counts[self.blockIdx.y].item_ptr(), splits):   # doctest: +SKIP
        ...     ...   # every split's partial sums are visible here
        """
        from tvm import tirx

        from tilus_tvm.ir.scalar import c_identifier
        from tilus_tvm.ir.stmt import DeclareScalar

        builder = self._builder("arrive_last")
        (tensor, indices), total = _semaphore_operands("arrive_last", builder, counter, total)
        if isinstance(total, int) and total < 1:
            raise ScriptError(f"arrive_last: total must be at least 1 (the blocks that arrive), got {total}")
        buffer = tirx.decl_buffer((1,), "int32", c_identifier(builder.fresh_name("arrived_last")), scope="local")
        builder.append(DeclareScalar(buffer, None))
        builder.emit(ir.ArriveLast(buffer, tensor, indices, total))
        return tirx.BufferLoad(buffer, [0])

    def release_semaphore(self, semaphore: Any, value: Any) -> None:
        """Set the int32 semaphore ``semaphore`` to ``value`` once the block's earlier writes are visible.

        Called by the whole block: a block barrier (every thread's global stores before it are
        done), then thread 0 runs a GPU-scope fence and a ``st.release.gpu`` of ``value``. A block
        whose :meth:`lock_semaphore` sees ``value`` then sees those stores. ``value`` is an int or an
        integer scalar expression.

        >>> self.release_semaphore(sem, value=(self.blockIdx.z + 1) % splits)   # doctest: +SKIP
        """
        builder = self._builder("release_semaphore")
        (tensor, indices), value = _semaphore_operands("release_semaphore", builder, semaphore, value)
        builder.emit(ir.ReleaseSemaphore(tensor, indices, value))


def _semaphore_operands(op: str, builder: Any, semaphore: Any, value: Any) -> tuple[tuple[GlobalTensor, tuple], Any]:
    """(tensor, indices) of the semaphore element and the checked value. The semaphore is
    ``sems[i, j].item_ptr()`` (or ``~sems[i, j]``, ``sems[i, j]``), bound to a name or not."""
    import tilus_tvm.instructions.workspace  # noqa: F401 - registers the instructions (imports TVM)

    if isinstance(semaphore, GlobalTensor):
        raise ScriptError(f"{op}: semaphore {semaphore.describe()} is a whole tensor; name one element, "
                          f"e.g. sems[i, j].item_ptr()")
    if isinstance(semaphore, GlobalElement):
        semaphore = semaphore.item_ptr()
    if isinstance(semaphore, ItemPointer):
        element = (semaphore.tensor, semaphore.indices)
    else:
        try:
            element = builder.element_pointers.get(semaphore)
        except TypeError:  # not hashable: not a pointer this kernel made
            element = None
    if element is None or not isinstance(element[0], GlobalTensor):
        raise ScriptError(f"{op}: semaphore must be an element of a global tensor (sems[i, j].item_ptr()), "
                          f"got {semaphore!r}")
    tensor = element[0]
    if tensor.dtype != dtypes.int32:
        raise ScriptError(f"{op}: semaphore {tensor.describe()} must be int32, got {tensor.dtype.name}")
    if isinstance(value, bool) or not is_scalar(value) or isinstance(value, float):
        raise ScriptError(f"{op}: value must be an int or an integer scalar expression, got {value!r}")
    from tilus_tvm.ir.scalar import expr_dtype, is_expr

    if is_expr(value) and "int" not in expr_dtype(value):
        raise ScriptError(f"{op}: value {value} must be an integer, it is {expr_dtype(value)}")
    if isinstance(value, int) and not dtypes.int32.min_value <= value <= dtypes.int32.max_value:
        raise ScriptError(f"{op}: value {value} does not fit the int32 semaphore")
    return element, value
