"""Compilation targets: ``"sm_80"``, ``"sm_90"``, a ``tvm.target.Target``, or the current GPU."""
from __future__ import annotations

import re
from typing import Any

import tvm

from tilus_tvm.errors import CompileError
from tilus_tvm.passes.shared_memory import SHARED_MEMORY_LIMIT


def current_arch() -> str:
    """``sm_XY`` of the current CUDA device (needs torch with CUDA)."""
    try:
        import torch
    except ImportError as exc:
        raise CompileError("no target given and torch is not installed to find the GPU; pass target='sm_80'") from exc
    if not torch.cuda.is_available():
        raise CompileError("no target given and no CUDA GPU is visible; pass target='sm_80' (or 'sm_90') to compile "
                           "without a GPU")
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def resolve_target(target: Any) -> tuple[tvm.target.Target, str]:
    """(TVM target, ``sm_XY``) for a target given as None, ``"sm_80"``/``"sm_90a"``/``"cuda"`` or a Target."""
    if target is None:
        target = current_arch()
    if isinstance(target, tvm.target.Target):
        if target.kind.name != "cuda":
            raise CompileError(f"target {target} is not a CUDA target")
        arch = str(target.attrs.get("arch", "")) or current_arch()
        if target.host is None:
            target = tvm.target.Target(target, host="llvm")
        return target, arch
    if isinstance(target, str):
        if target == "cuda":
            target = current_arch()
        if not re.fullmatch(r"sm_\d+a?", target):
            raise CompileError(f"target {target!r} must look like 'sm_80' or 'sm_90' (or be a tvm Target)")
        return tvm.target.Target({"kind": "cuda", "arch": target}, host="llvm"), target
    raise CompileError(f"target must be None, a string like 'sm_80', or a tvm.target.Target; got {target!r}")


def compute_capability(arch: str) -> tuple[int, int]:
    digits = re.sub(r"\D", "", arch)
    return int(digits[:-1]), int(digits[-1])


def shared_memory_limit(arch: str) -> int:
    major, _ = compute_capability(arch)
    return SHARED_MEMORY_LIMIT.get(major, 48 * 1024)
