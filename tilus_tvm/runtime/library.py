"""Loading an exported kernel library without importing TVM's Python package.

``import tvm`` takes seconds (2.3 s on the H100 host), and a warm start -- a fresh process
launching a kernel from the disk cache -- needs none of it: the library holds the host code and
the CUDA module as a cubin (TVM compiles the CUDA source with NVRTC when it builds, where
cuda-bindings is installed). What it needs is TVM's runtime: ``libtvm_runtime`` (loaded
``RTLD_GLOBAL``, as ``tvm/base.py`` does, since the library's host code calls into it) and
``libtvm_runtime_cuda`` (whose static initialisers register the CUDA module loader,
``ffi.Module.load_from_bytes.cuda``, with tvm-ffi), found in the installed ``tvm`` package without
importing it; ``tvm_ffi.load_module`` then loads the library.

When that does not work -- TVM's package is not where its spec says, or the library's CUDA module
holds source and needs TVM's NVRTC callback -- or TVM is imported already, the library is loaded
with ``tvm.runtime.load_module`` as before.
"""
from __future__ import annotations

import ctypes
import importlib.util
import pathlib
import sys
from typing import Any

_runtime_loaded = False


def _load_tvm_runtime() -> bool:
    """Load TVM's runtime libraries from the installed ``tvm`` package, once; False if they are not there.

    ``libtvm_runtime_cuda`` may fail to load (no CUDA driver): then only CPU libraries load this way,
    and a CUDA library goes to TVM's own loader, which says what is missing."""
    global _runtime_loaded
    if _runtime_loaded:
        return True
    spec = importlib.util.find_spec("tvm")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return False
    directory = pathlib.Path(list(spec.submodule_search_locations)[0]) / "lib"
    import tvm_ffi  # noqa: F401 - loads libtvm_ffi, which libtvm_runtime links against

    try:
        ctypes.CDLL(str(directory / "libtvm_runtime.so"), mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    try:
        ctypes.CDLL(str(directory / "libtvm_runtime_cuda.so"), mode=ctypes.RTLD_LOCAL)
    except OSError:
        pass
    _runtime_loaded = True
    return True


def load_library(path: str) -> Any:
    """The module of an exported kernel library (``module[name]`` is the kernel's packed function)."""
    if "tvm" not in sys.modules and _load_tvm_runtime():
        import tvm_ffi

        try:
            return tvm_ffi.load_module(path)
        except Exception:  # noqa: BLE001 - e.g. a CUDA module that needs TVM's NVRTC callback: TVM's loader below
            pass
    import tvm

    return tvm.runtime.load_module(path)
