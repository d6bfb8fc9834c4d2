"""Exporting compiled modules as one shared library holding compiled GPU code, and loading them back.

``tvm.compile`` for a CUDA target leaves a CUDA module holding the generated CUDA *source* when the
CUDA driver is absent (a machine without a GPU: TVM keeps its "fallback" module, format ``cuda``),
and ``export_library`` serialises that source: whoever loads the library then needs NVRTC or nvcc
to compile it. :func:`export_library` writes the same library with compiled code instead. It packs
the module tree as ``export_library`` does (``fpack_imports``), with each CUDA module's payload
rewritten in the form TVM's CUDA loader (``ffi.Module.load_from_bytes.cuda``) reads::

    payload = <fmt: str> <function table> <code: bytes>       (u64 lengths, little-endian)
    fmt "cuda": code is CUDA source, compiled at load        ->  fmt "fatbin": code is a fatbin,
                                                                 loaded with cuModuleLoadData

The fatbin is built with nvcc for every architecture asked for (``-gencode`` per ``sm_XY``, SASS
only), so one library serves an sm_80 and an sm_90 GPU, and loading it compiles nothing. The
library blob itself (see tvm-ffi's ``ProcessLibraryBin``) is::

    <nbytes: u64> <import-tree indptr: vec<u64>> <child indices: vec<u64>>
    then per module: <kind: str> [<payload: bytes> unless kind == "_lib"]

    ex = tvm.compile(mod, target)                  # or a CompiledKernel: kernel.export(path, archs=...)
    export_library(ex, "model.so", archs=["sm_80", "sm_90"])
    tilus_tvm.load("model.so")                     # a relax.VirtualMachine on cuda:0 (Relax), or a kernel

Nothing here imports TVM or torch at module import (``tilus_tvm.load`` is importable from a bare
``import tilus_tvm``).
"""
from __future__ import annotations

import logging
import os
import shutil
import struct
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from tilus_tvm.errors import CompileError, LaunchError

logger = logging.getLogger("tilus_tvm.export")

_U64 = struct.Struct("<Q")
CUDA_KIND = "cuda"
SOURCE_FORMAT = "cuda"  # a CUDA module payload holding source (compiled by whoever loads it)


# --- the library blob ---------------------------------------------------------------------------
@dataclass
class ModuleEntry:
    """One module of a packed library: its kind and serialised payload (None for the ``_lib`` slot)."""

    kind: str
    payload: Optional[bytes]


@dataclass
class LibraryBlob:
    """The packed module tree of an exported library (see the module docstring for the layout)."""

    indptr: list[int]
    children: list[int]
    modules: list[ModuleEntry]

    @staticmethod
    def parse(blob: bytes) -> "LibraryBlob":
        (nbytes,) = _U64.unpack_from(blob, 0)
        if nbytes + 8 != len(blob):
            raise CompileError(f"packed library blob: header says {nbytes} bytes, {len(blob) - 8} follow")
        reader = _Reader(blob, 8)
        indptr = reader.vector()
        children = reader.vector()
        modules = []
        for _ in range(len(indptr) - 1):
            kind = reader.bytes().decode()
            modules.append(ModuleEntry(kind, None if kind == "_lib" else reader.bytes()))
        return LibraryBlob(indptr, children, modules)

    def pack(self) -> bytes:
        body = [_vector(self.indptr), _vector(self.children)]
        for entry in self.modules:
            body.append(_bytes(entry.kind.encode()))
            if entry.payload is not None:
                body.append(_bytes(entry.payload))
        data = b"".join(body)
        return _U64.pack(len(data)) + data


@dataclass
class CudaPayload:
    """A CUDA module's payload: ``fmt``, the function table (kept as bytes) and the code."""

    fmt: str
    function_table: bytes
    code: bytes

    @staticmethod
    def parse(payload: bytes) -> "CudaPayload":
        reader = _Reader(payload, 0)
        fmt = reader.bytes().decode()
        start = reader.position
        # The code is the last field: the first offset whose u64 equals the length of what follows it.
        # The function table before it holds small counts and names, never such a length.
        for offset in range(start, len(payload) - 7):
            (length,) = _U64.unpack_from(payload, offset)
            if length == len(payload) - offset - 8:
                return CudaPayload(fmt, payload[start:offset], payload[offset + 8:])
        raise CompileError("a CUDA module's serialised payload has no trailing code field; TVM's format changed?")

    def pack(self) -> bytes:
        return _bytes(self.fmt.encode()) + self.function_table + _bytes(self.code)

    def function_names(self) -> list[str]:
        """The kernels in the function table. Its layout (TVM's ``FunctionInfo``): ``<count: u64>``, then
        per kernel ``<key: str> <name: str> <arg types: vec<4 bytes>> <launch tags: vec<str>>
        <extra tags: vec<4 bytes>>``."""
        reader = _Reader(self.function_table, 0)
        names = []
        try:
            for _ in range(reader.u64()):
                names.append(reader.bytes().decode(errors="replace"))
                reader.bytes()  # the name again
                reader.skip(4 * reader.u64())
                for _ in range(reader.u64()):
                    reader.bytes()
                reader.skip(4 * reader.u64())
        except (CompileError, struct.error):
            return names  # a layout this parser does not know: the names read so far
        return names


class _Reader:
    def __init__(self, data: bytes, position: int):
        self.data, self.position = data, position

    def u64(self) -> int:
        (value,) = _U64.unpack_from(self.data, self.position)
        self.position += 8
        return value

    def bytes(self) -> bytes:
        length = self.u64()
        if self.position + length > len(self.data):
            raise CompileError("truncated packed library blob")
        value = self.data[self.position:self.position + length]
        self.position += length
        return value

    def skip(self, count: int) -> None:
        if self.position + count > len(self.data):
            raise CompileError("truncated packed library blob")
        self.position += count

    def vector(self) -> list[int]:
        return [self.u64() for _ in range(self.u64())]


def _bytes(value: bytes) -> bytes:
    return _U64.pack(len(value)) + value


def _vector(values: list[int]) -> bytes:
    return _U64.pack(len(values)) + b"".join(_U64.pack(v) for v in values)


def fatbin_entries(fatbin: bytes) -> list[tuple[str, str]]:
    """``(kind, arch)`` of each image in a fatbin: ``("cubin", "sm_90")`` or ``("ptx", "sm_90")``.

    Layout (nvcc's fatbin headers, little-endian): ``<magic 0xBA55ED50: u32> <version: u16>
    <header size: u16> <size: u64>``, then per image ``<kind: u16 (1 PTX, 2 ELF)> <version: u16>
    <header size: u32> <payload size: u32> ...`` with the SM version as the u32 at byte 28."""
    magic, _, header, size = struct.unpack_from("<IHHQ", fatbin, 0)
    if magic != 0xBA55ED50:
        raise CompileError("not a fatbin (bad magic number)")
    entries, offset = [], header
    while offset < header + size:
        kind, _, entry_header, payload = struct.unpack_from("<HHII", fatbin, offset)
        (sm,) = struct.unpack_from("<I", fatbin, offset + 28)
        entries.append(({1: "ptx", 2: "cubin"}.get(kind, str(kind)), f"sm_{sm}"))
        offset += entry_header + payload
    return entries


# --- compiling CUDA source ----------------------------------------------------------------------
def nvcc_path() -> Optional[str]:
    """nvcc on PATH, else under CUDA_HOME / /usr/local/cuda, else None."""
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return None


# The flags of TVM's own nvcc path (tvm.support.nvcc), without --use_fast_math: on a GPU host TVM builds
# with NVRTC, which does not use fast math either, so an exported kernel computes what the JIT one does.
NVCC_FLAGS = ("-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
              "--expt-relaxed-constexpr", "--expt-extended-lambda")


def compile_cuda_binary(source: str, archs: Sequence[str], timeout_sec: Optional[float] = None) -> tuple[str, bytes]:
    """``(fmt, code)`` of ``source`` compiled for ``archs``: a fatbin with one cubin per architecture
    (``nvcc --fatbin -gencode arch=compute_XY,code=sm_XY ...``), or -- without nvcc, for one
    architecture -- a cubin from NVRTC. Raises :class:`CompileError` naming what failed, or when
    nvcc runs longer than ``timeout_sec`` (None: no limit; NVRTC is not limited)."""
    import subprocess
    import tempfile

    from tilus_tvm.target import check_arch

    archs = list(dict.fromkeys(check_arch(a) for a in archs))  # in order, once each
    if not archs:
        raise CompileError("export: archs is empty; name at least one architecture, e.g. archs=['sm_90']")
    nvcc = nvcc_path()
    if nvcc is None:
        if len(archs) > 1:
            raise CompileError(f"export: a library for several architectures ({', '.join(archs)}) holds a fatbin "
                               f"built by nvcc, and nvcc is not on PATH (nor in CUDA_HOME); install the CUDA "
                               f"toolkit or export for one architecture (NVRTC then builds a cubin)")
        return "cubin", _nvrtc_cubin(source, archs[0])
    gencode = []
    for arch in archs:
        gencode += ["-gencode", f"arch=compute_{arch[3:]},code=sm_{arch[3:]}"]
    with tempfile.TemporaryDirectory(prefix="tilus_export_") as workspace:
        source_path = os.path.join(workspace, "kernels.cu")
        binary_path = os.path.join(workspace, "kernels.fatbin")
        with open(source_path, "w") as f:
            f.write(source)
        threads = str(max(1, min(len(archs), os.cpu_count() or 1)))
        command = [nvcc, "--fatbin", *NVCC_FLAGS, *gencode, "--threads", threads, "-o", binary_path, source_path]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_sec)
        except subprocess.TimeoutExpired:
            raise CompileError(f"export: nvcc took longer than {timeout_sec:g} s to build a fatbin for "
                               f"{', '.join(archs)} ({source.count(chr(10))} lines of CUDA); stopped") from None
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-12:])
            raise CompileError(f"export: nvcc failed to build a fatbin for {', '.join(archs)}:\n{tail}")
        with open(binary_path, "rb") as f:
            return "fatbin", f.read()


def _nvrtc_cubin(source: str, arch: str) -> bytes:
    from tvm.support import nvcc

    from tilus_tvm.target import tvm_target

    try:
        with tvm_target(arch):  # TVM's helper reads the current target
            return bytes(nvcc.compile_cuda(source, target_format="cubin", arch=arch, compiler="nvrtc"))
    except Exception as exc:  # noqa: BLE001 - NVRTC missing (no cuda-bindings) or failing: say both
        lines = str(exc).strip().splitlines()
        raise CompileError(f"export: nvcc is not installed and NVRTC failed for {arch}: "
                           f"{lines[-1] if lines else type(exc).__name__}") from exc


# --- exporting ----------------------------------------------------------------------------------
def _cuda_modules(module: Any) -> list[Any]:
    """The CUDA modules in a runtime module's import tree, depth first."""
    found, seen, stack = [], set(), [module]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.kind == CUDA_KIND:
            found.append(current)
        stack.extend(reversed(list(current.imports)))
    return found


def compile_blob(blob: bytes, archs: Sequence[str], sources: Sequence[str] = (),
                 timeout_sec: Optional[float] = None) -> tuple[bytes, list[str]]:
    """The packed library ``blob`` with every CUDA module holding code compiled for ``archs``.

    A module holding source is compiled from it; one already holding a binary (built on a GPU host,
    for that GPU) is rebuilt from ``sources`` -- the CUDA source of the tree's CUDA modules, in the
    order they are packed -- when there are as many. Returns the new blob and the kernel names."""
    library = LibraryBlob.parse(blob)
    cuda_entries = [e for e in library.modules if e.kind == CUDA_KIND]
    names = []
    for index, entry in enumerate(cuda_entries):
        payload = CudaPayload.parse(entry.payload)
        names += payload.function_names()
        if payload.fmt == SOURCE_FORMAT:
            source = payload.code.decode()
        elif len(sources) == len(cuda_entries) and sources[index]:
            source = sources[index]
        else:
            logger.warning("export: a CUDA module already holds %s code and its source is not known; it is kept "
                           "as it is (built for one architecture)", payload.fmt)
            continue
        fmt, code = compile_cuda_binary(source, archs, timeout_sec)
        entry.payload = CudaPayload(fmt, payload.function_table, code).pack()
    return library.pack(), names


def export_library(module: Any, path: str, archs: Optional[Sequence[str]] = None,
                   sources: Optional[Sequence[str]] = None, compile_timeout_sec: Optional[float] = None) -> str:
    """Write ``module`` (``tvm.compile``'s Executable, a Relax VM executable or a runtime Module) as
    one shared library whose CUDA modules hold a fatbin for ``archs`` (default: the architectures the
    module was built for by :func:`tilus_tvm.relax.build`, else the current GPU's).

    Works without a GPU (the CUDA driver is not needed to export). ``sources``: the CUDA source of
    each CUDA module, for modules that already hold a binary (see :func:`compile_blob`).
    ``compile_timeout_sec``: stop nvcc after that long (:func:`compile_cuda_binary`).
    Raises :class:`CompileError` when nvcc is missing for several architectures or fails.
    """
    import tvm_ffi

    runtime_module = getattr(module, "mod", module)
    built_for = getattr(module, "tilus_archs", None)
    if archs is None:
        archs = built_for
    if archs is None:
        from tilus_tvm.target import current_arch

        archs = [current_arch()]
    archs = [archs] if isinstance(archs, str) else list(archs)
    for arch in built_for or ():
        warn_older_archs(arch, archs)
    if sources is None:
        sources = [m.inspect_source("cuda") for m in _cuda_modules(runtime_module)]
    pack_to_bytes = tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")
    codegen_blob = tvm_ffi.get_global_func("codegen.codegen_blob")

    def pack_imports(mod, is_system_lib: bool, symbol_prefix: str, workspace_dir: str) -> str:
        blob = bytes(pack_to_bytes(mod).numpy())
        blob, names = compile_blob(blob, archs, sources, compile_timeout_sec)
        host = _host_module(mod)
        target = host.get_function("_get_target_string")() if host is not None else _host_target_string()
        packed = codegen_blob(blob, is_system_lib, target, symbol_prefix)
        out = os.path.join(workspace_dir, f"{symbol_prefix}devc.o")
        packed.write_to_file(out)
        logger.info("export: %d CUDA kernels compiled for %s", len(names), ", ".join(archs))
        return out

    path = str(path)
    runtime_module.export_library(path, fpack_imports=pack_imports)
    return path


def warn_older_archs(built_for: str, archs: Sequence[str]) -> None:
    """Log when code built for ``built_for`` goes into a library for an older architecture: the
    kernels' tiles and shared memory were chosen for the newer GPU and may not fit the older one."""
    from tilus_tvm.target import compute_capability

    older = [a for a in archs if compute_capability(a) < compute_capability(built_for)]
    if older:
        logger.warning("export: kernels built for %s go into a library for %s too; their configurations (shared "
                       "memory, tiles) were chosen for %s -- build for the oldest architecture to serve several",
                       built_for, ", ".join(older), built_for)


def _host_module(module: Any) -> Any:
    stack = [module]
    while stack:
        current = stack.pop()
        if current.kind == "llvm":
            return current
        stack.extend(current.imports)
    return None


def _host_target_string() -> str:
    import json

    import tvm_ffi

    triple = tvm_ffi.get_global_func("tvm.codegen.llvm.GetDefaultTargetTriple")()
    return json.dumps({"kind": "llvm", "mtriple": triple})


def read_library_blob(path: str) -> LibraryBlob:
    """The packed module tree inside an exported library (its ``__tvm_ffi__library_bin`` symbol), to
    see what it holds: ``[(m.kind, CudaPayload.parse(m.payload).fmt) for m in blob.modules if ...]``."""
    import ctypes

    import tvm_ffi  # noqa: F401 - loads libtvm_ffi, whose symbols the library's host code uses

    library = ctypes.CDLL(str(path))
    address = ctypes.addressof(ctypes.c_char.in_dll(library, "__tvm_ffi__library_bin"))
    (nbytes,) = _U64.unpack(ctypes.string_at(address, 8))
    return LibraryBlob.parse(ctypes.string_at(address, 8 + nbytes))


# --- loading ------------------------------------------------------------------------------------
def load(path: str, device: Any = None) -> Any:
    """Load an exported library without compiling anything.

    - A kernel exported by :meth:`CompiledKernel.export` (``<path>.json`` beside it): the
      :class:`~tilus_tvm.runtime.kernel.CompiledKernel`, launched on torch tensors with the same
      argument checks as the JIT kernel (:func:`~tilus_tvm.runtime.kernel.load_kernel`).
    - A Relax VM executable (:func:`tilus_tvm.relax.export`): a ``relax.VirtualMachine`` on
      ``device`` (default ``cuda:0``); its functions take and return torch tensors.
    - Anything else: the ``tvm.runtime.Module``.
    """
    path = str(path)
    if not os.path.exists(path):
        raise LaunchError(f"load: {path} does not exist")
    if os.path.exists(path + ".json"):
        from tilus_tvm.runtime.kernel import load_kernel

        return load_kernel(path)
    import tvm
    from tvm import relax

    module = tvm.runtime.load_module(path)
    if module.kind == "relax.VMExecutable":
        return relax.VirtualMachine(module, device if device is not None else tvm.cuda(0))
    return module
