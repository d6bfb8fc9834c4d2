"""The workspaces of a compiled kernel (``self.global_tensor``): allocated by torch on the launch
device, kept between launches.

A :class:`WorkspacePool` belongs to one :class:`~tilus_tvm.runtime.kernel.CompiledKernel` (one
specialisation). For each workspace it keeps one flat tensor per device, allocated at the first
launch that needs it and replaced by a larger one when a launch needs more elements (the shape may
depend on run-time scalars: a launch passes the whole tensor; the kernel uses its first ``numel``
elements). Growth doubles the size, so a sequence of growing launches reallocates a few times only.

The contract of ``requires_clean=True`` (Tilus's): the runtime zeroes the tensor when it allocates
it; a kernel using it leaves it all zeros when it ends, so the next launch finds it clean without
any clearing launch. ``requires_clean=False`` tensors are ``torch.empty``. Launches of one kernel on
one device share its workspaces: they must not run concurrently on different streams.

The fast launcher reads the pool's per-workspace dictionaries (``tensors[i]``: device index ->
tensor) directly and refuses a launch whose workspace is missing or too small; the careful path
then calls :meth:`WorkspacePool.tensors_for`, which allocates.
"""
from __future__ import annotations

from typing import Any, Sequence

from tilus_tvm.errors import LaunchError
from tilus_tvm.lang.arguments import MAX_INDEX


def evaluate_numel(text: str, scalars: dict[str, Any]) -> int:
    """A workspace's element count (``WorkspaceSpec.numel``) for the scalar arguments ``scalars`` (by name)."""
    namespace = {"__builtins__": {}, "int": int, "min": min, "max": max}
    return int(eval(text, namespace, dict(scalars)))  # noqa: S307 - written by the kernel ABI pass


class WorkspacePool:
    """The workspace tensors of one compiled kernel (see the module docstring).

    ``specs`` are the kernel ABI's :class:`~tilus_tvm.passes.kernel_abi.WorkspaceSpec` objects;
    ``kernel`` names the kernel in errors.
    """

    def __init__(self, specs: Sequence[Any], kernel: str):
        self.specs = tuple(specs)
        self.kernel = kernel
        self.tensors: list[dict[int, Any]] = [{} for _ in self.specs]

    def numels(self, scalars: dict[str, Any]) -> list[int]:
        """Elements each workspace needs for a launch with ``scalars``, checked against int32 indexing."""
        counts = []
        for spec in self.specs:
            try:
                numel = evaluate_numel(spec.numel, scalars)
            except Exception as exc:  # noqa: BLE001 - e.g. a division by zero for these scalars
                raise LaunchError(f"{self.kernel}: cannot size workspace {spec.name} ({spec.numel}) for the "
                                  f"arguments {scalars}: {exc}") from exc
            if numel < 0 or numel > MAX_INDEX:
                raise LaunchError(f"{self.kernel}: workspace {spec.name} ({spec.numel}) needs {numel} elements for "
                                  f"the arguments {scalars}; kernels index with int32 (0 to {MAX_INDEX})")
            counts.append(numel)
        return counts

    def tensors_for(self, device: int, scalars: dict[str, Any]) -> list[Any]:
        """The workspace tensors for a launch on CUDA device ``device`` (a negative index: the CPU,
        for tests) with the scalar arguments ``scalars``, allocated or grown as needed."""
        return [self._tensor(i, device, numel) for i, numel in enumerate(self.numels(scalars))]

    def _tensor(self, index: int, device: int, numel: int) -> Any:
        current = self.tensors[index].get(device)
        if current is not None and current.numel() >= numel:
            return current
        import torch

        spec = self.specs[index]
        from tilus_tvm.dtypes import as_dtype

        size = max(numel, 1, 0 if current is None else min(2 * current.numel(), MAX_INDEX))
        where = torch.device("cpu") if device < 0 else torch.device("cuda", device)
        make = torch.zeros if spec.requires_clean else torch.empty
        tensor = make(size, dtype=as_dtype(spec.dtype).torch_dtype, device=where)
        self.tensors[index][device] = tensor
        return tensor

    def clear(self) -> None:
        """Drop every workspace tensor; the next launch allocates fresh ones (zeroed where required).
        The way back to a clean state after a launch that broke the ``requires_clean`` contract."""
        for tensors in self.tensors:
            tensors.clear()
