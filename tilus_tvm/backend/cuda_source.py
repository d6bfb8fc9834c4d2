"""A post-processing step for the CUDA source TVM generates: string literals in plain bytes.

TVM writes string literals (``printf`` formats, ``print_tensor``'s box-drawing tables) as JSON
strings, so a non-ASCII character becomes a universal character name such as ``\\u2502``. nvcc
encodes those as UTF-8, but NVRTC -- which compiles a kernel's source when it is loaded on the
GPU -- does not print them as UTF-8. Rewritten as octal escapes of the UTF-8 bytes
(``\\342\\224\\202``), the literal holds the same bytes under either compiler.

:func:`install` registers :func:`utf8_escapes` as TVM's ``tvm_callback_cuda_postproc`` hook
(which TVM's CUDA codegen applies to every module it generates), after any hook already
registered; installing twice is harmless.
"""
from __future__ import annotations

import re
from typing import Any

_UCN = re.compile(r"(?<!\\)((?:\\\\)*)\\(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8}))")
_HOOK = "tvm_callback_cuda_postproc"
_installed = False


def utf8_escapes(code: str) -> str:
    r"""``code`` with every ``\uXXXX`` / ``\UXXXXXXXX`` escape (not an escaped backslash followed by
    ``u``) replaced by octal escapes of the character's UTF-8 bytes.

    >>> print(utf8_escapes(r'printf("\u2502 %d\\u2502\n", x);'))
    printf("\342\224\202 %d\\u2502\n", x);
    """
    def octal(match: re.Match) -> str:
        char = chr(int(match.group(2) or match.group(3), 16))
        return match.group(1) + "".join(f"\\{byte:03o}" for byte in char.encode("utf-8"))

    return _UCN.sub(octal, code)


def install() -> None:
    """Register the hook (module docstring), chained after a hook someone else registered."""
    global _installed
    if _installed:
        return
    import tvm_ffi

    previous = tvm_ffi.get_global_func(_HOOK, allow_missing=True)

    def postproc(code: Any, *rest: Any) -> str:
        code = previous(code, *rest) if previous is not None else code
        return utf8_escapes(str(code))

    tvm_ffi.register_global_func(_HOOK, postproc, override=True)
    _installed = True
