"""Compilation targets: ``"sm_80"``, ``"sm_90"``, ``"cuda"`` (the current GPU), a ``tvm.target.Target``
or None (the current GPU).

Target names are checked here, before any compiler runs. Importing this module imports neither
TVM nor torch.
"""
from __future__ import annotations

import re
from typing import Any

from tilus_tvm.errors import CompileError

# Architectures nvcc 13 generates code for and that have the Ampere-level instructions
# (mma.sync m16n8k16, ldmatrix, cp.async) every kernel may use.
KNOWN_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f",
               "sm_103", "sm_103a", "sm_103f", "sm_110", "sm_110a", "sm_110f", "sm_120", "sm_120a", "sm_120f",
               "sm_121", "sm_121a", "sm_121f")
# Largest grid extents (x, y, z) of a CUDA launch, the same on every architecture.
MAX_GRID = (2**31 - 1, 65535, 65535)
# Largest dynamic shared memory per block (bytes) by compute capability major version.
SHARED_MEMORY_LIMIT = {8: 163 * 1024, 9: 227 * 1024, 10: 227 * 1024, 11: 227 * 1024, 12: 99 * 1024}


def current_arch() -> str:
    """``sm_XY`` of the current CUDA device (``sm_90a`` for an H100 or H200; needs torch with CUDA)."""
    try:
        import torch
    except ImportError as exc:
        raise CompileError("no target given and torch is not installed to find the GPU; pass target='sm_80' "
                           "(or 'sm_90') to compile without a GPU") from exc
    if not torch.cuda.is_available():
        raise CompileError("no target given and no CUDA GPU is visible; pass target='sm_80' (or 'sm_90') to "
                           "compile, lower or inspect kernels without a GPU")
    major, minor = torch.cuda.get_device_capability()
    # Hopper's wgmma (and TMA's multicast, setmaxnreg) exist only in arch-specific PTX: sm_90a, which
    # runs on compute capability 9.0 exactly -- the GPU in hand.
    return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")


def check_arch(arch: str) -> str:
    if arch not in KNOWN_ARCHS:
        hint = ""
        match = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
        if match and int(match.group(1)) < 80:
            hint = " (tilus-tvm kernels use Ampere instructions: sm_80 or newer)"
        raise CompileError(f"unknown target {arch!r}{hint}; expected one of {', '.join(KNOWN_ARCHS)}, 'cuda' "
                           f"(the current GPU) or a tvm.target.Target")
    return arch


def resolve_arch(target: Any) -> str:
    """``sm_XY`` for a target given as None, ``"cuda"``, ``"sm_80"``/``"sm_90a"`` or a tvm Target."""
    if target is None or target == "cuda":
        return current_arch()
    if isinstance(target, str):
        return check_arch(target)
    kind = getattr(getattr(target, "kind", None), "name", None)
    if kind is not None:  # a tvm.target.Target (checked by duck type: no TVM import needed here)
        if kind != "cuda":
            raise CompileError(f"target {target} is not a CUDA target")
        arch = str(target.attrs.get("arch", "")) or current_arch()
        return check_arch(arch)
    raise CompileError(f"target must be None, a string like 'sm_80', or a tvm.target.Target; got {target!r}")


def tvm_target(arch: str):
    """The TVM CUDA target for ``arch`` (LLVM host)."""
    import tvm

    return tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")


def compute_capability(arch: str) -> tuple[int, int]:
    digits = re.sub(r"\D", "", arch)
    return int(digits[:-1]), int(digits[-1])


def shared_memory_limit(arch: str) -> int:
    major, _ = compute_capability(arch)
    return SHARED_MEMORY_LIMIT.get(major, 48 * 1024)
