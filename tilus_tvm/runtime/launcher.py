"""The launch fast path: generated Python for the plain case, the careful path for the rest.

A launch that has been seen before goes through two generated functions:

- the *dispatch* of a signature computes the specialisation key from the raw arguments -- each
  compile-time argument with its type, and for each tensor whether its data pointer is 16-byte
  aligned -- and calls the launcher stored under that key;
- the *launcher* of a compiled specialisation checks what the compiled function cannot (integer
  scalars in range, a grid within CUDA's limits and not empty, tensors within int32 indexing),
  gives flat parameters a 1-D tensor, and calls the TVM packed function once.

Int32 indexing: a tensor must hold fewer than 2**31 elements (``t.numel() > 2147483647`` refuses it),
except one the kernel reaches only through sub-views (``Script.global_subview``: a 64-bit base,
int32 indices inside), whose ABI parameter carries ``index_span``: then the largest sub-view's span,
an expression of the scalar arguments, is checked instead (``a2 * 128 > 2147483647``).

The compiled function's entry code checks each tensor's rank, shape (against the scalar
arguments), dtype, device and contiguity, so the launcher does not. tvm-ffi picks the stream: for
a torch CUDA tensor argument it asks torch's DLPack exchange API for the current stream of the
tensor's device and makes it the environment stream for the call, which TVM's CUDA launch uses
(``TVMFFIPyArgSetterDLPackExchangeAPI_`` in tvm_ffi's ``cython/function.pxi``; the setter for a
torch without that API asks ``torch._C._cuda_getCurrentRawStream``). A kernel with no tensor
parameter gets no launcher, since nothing would carry the stream. A kernel with workspaces
(``self.global_tensor``) passes them last, from its :class:`~tilus_tvm.runtime.workspace.WorkspacePool`;
the launcher only looks them up (the careful path allocates), so other kernels' launchers are
unchanged.

Whatever is unusual -- a key not in the table, a refused check, an exception from the compiled
function -- raises, and the caller takes the careful path (:func:`arguments.bind`, then
:meth:`CompiledKernel.launch`), which explains the problem as a :class:`LaunchError` or launches
anyway (a 0-d tensor as a scalar, a flat tensor for a shaped parameter, an empty grid). A launch
that raised never reached the GPU: the entry code checks before it launches.

For ``AddOne.__call__(self, n: int32, a_ptr: ~float32, b_ptr: ~float32)`` the generated code is::

    def dispatch(a0, t0, t1):
        return launchers[(t0.data_ptr() % 16 == 0, t1.data_ptr() % 16 == 0, )](a0, t0, t1)

    def launch(a0, t0, t1):
        if not -2147483648 <= a0 <= 2147483647: raise Refused
        g0 = (a0 + 128 - 1) // 128
        if not 0 < g0 <= 2147483647: raise Refused
        if t0.numel() > 2147483647 or t1.numel() > 2147483647: raise Refused
        function(a0, t0, t1)
"""
from __future__ import annotations

import ast
import functools
import math
from typing import Any, Callable, Optional

from tilus_tvm.lang.signature import ParamSpec
from tilus_tvm.lang.arguments import MAX_INDEX, VECTOR_ALIGNMENT, flat_view
from tilus_tvm.target import MAX_GRID


class Refused(Exception):
    """Raised by a launcher for arguments it does not handle; the careful path takes over."""


def argument_names(specs: list[ParamSpec]) -> list[str]:
    """Names of the generated functions' parameters: ``a<i>`` for the i-th run-time scalar (as in
    :func:`kernel.grid_source`), ``t<i>`` for tensors, ``c<i>`` for compile-time values."""
    prefixes = {"scalar": "a", "pointer": "t", "const": "c"}
    counts = dict.fromkeys(prefixes, 0)
    names = []
    for spec in specs:
        names.append(f"{prefixes[spec.kind]}{counts[spec.kind]}")
        counts[spec.kind] += 1
    return names


def key_source(specs: list[ParamSpec]) -> str:
    """Python source of the specialisation key, a tuple over the generated parameter names.

    A compile-time value enters with its type, so that ``True`` and ``1`` (equal as keys) do not
    share a launcher that only one of them passed the checks for.
    """
    parts = []
    for name, spec in zip(argument_names(specs), specs):
        if spec.kind == "const":
            parts += [name, f"{name}.__class__"]
        elif spec.kind == "pointer":
            parts.append(f"{name}.data_ptr() % {VECTOR_ALIGNMENT} == 0")
            if spec.dtype.name == "void":  # a ~void parameter: one kernel per tensor dtype
                parts.append(f"{name}.dtype")
    return "(" + "".join(f"{p}, " for p in parts) + ")"


def _define(source: str, name: str, namespace: dict[str, Any]) -> Callable:
    exec(compile(source, f"<tilus_tvm generated {name}>", "exec"), namespace)  # noqa: S102 - generated above
    return namespace[name]


@functools.lru_cache(maxsize=None)
def _table_factory(specs: tuple[ParamSpec, ...]) -> tuple[Callable, Callable]:
    """``(make_dispatch, key)`` for a signature; ``make_dispatch(launchers)`` gives the dispatch."""
    names = ", ".join(argument_names(list(specs)))
    key = key_source(list(specs))
    source = (f"def make_dispatch(launchers):\n"
              f"    def dispatch({names}):\n"
              f"        return launchers[{key}]({names})\n"
              f"    return dispatch\n"
              f"def key({names}):\n"
              f"    return {key}\n")
    namespace: dict[str, Any] = {}
    _define(source, "make_dispatch", namespace)
    return namespace["make_dispatch"], namespace["key"]


class LaunchTable:
    """The ready launchers of one Script instance (or one compiled kernel), by specialisation key.

    ``dispatch(*args)`` launches through the launcher for ``args``' key; it raises for a key not in
    the table or arguments the launcher refuses. ``add(args, launcher)`` stores a launcher for
    ``args``' key, after the careful path has launched with them.
    """

    def __init__(self, specs: list[ParamSpec]):
        make_dispatch, self.key = _table_factory(tuple(specs))
        self.launchers: dict[tuple, Callable] = {}
        self.dispatch = make_dispatch(self.launchers)

    def add(self, args: tuple, launcher: Optional[Callable]) -> None:
        if launcher is not None:
            self.launchers[self.key(*args)] = launcher


def grid_expressions(grid_source: str) -> list[str]:
    """The dimension expressions of a grid lambda (``lambda a0: ((a0 + 127) // 128, 4)``), as source."""
    tree = ast.parse(grid_source, mode="eval").body
    if not isinstance(tree, ast.Lambda) or not isinstance(tree.body, ast.Tuple):
        raise ValueError(f"not a grid lambda: {grid_source!r}")
    return [ast.unparse(dim) for dim in tree.body.elts]


def _literal(text: str) -> Optional[int]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _renamed(source: str, names: dict[str, str]) -> str:
    """``source`` (a Python expression) with the variables in ``names`` renamed."""

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:  # noqa: N802 - ast's spelling
            return ast.copy_location(ast.Name(names.get(node.id, node.id), node.ctx), node)

    return ast.unparse(Rename().visit(ast.parse(source, mode="eval")))


def workspace_lines(specs: list[ParamSpec], workspaces: tuple) -> tuple[list[str], list[str]]:
    """Launcher lines that fetch each workspace (``ws<i>``: device index -> tensor, the pool's) for the
    device of the first tensor argument, refusing when it is missing or too small; and the names to pass."""
    names = argument_names(specs)
    scalar_names = {spec.name: name for name, spec in zip(names, specs) if spec.kind == "scalar"}
    first_tensor = next(name for name, spec in zip(names, specs) if spec.kind == "pointer")
    lines = [f"d = {first_tensor}.get_device()"]
    for i, workspace in enumerate(workspaces):
        lines.append(f"w{i} = ws{i}.get(d)")
        lines.append(f"if w{i} is None or w{i}.numel() < {_renamed(workspace.numel, scalar_names)}: raise Refused")
    return lines, [f"w{i}" for i in range(len(workspaces))]


def launcher_source(specs: list[ParamSpec], abi_params: tuple, grid_source: str,
                    workspaces: tuple = ()) -> Optional[str]:
    """Source of ``make_launcher(function)`` for one specialisation, or None when it gets none: no
    tensor parameter to carry the stream, a grid that is always empty or too large, or ``abi_params``
    that are not the run-time parameters of ``specs`` in order. ``workspaces`` (the kernel ABI's
    ``WorkspaceSpec`` objects) are passed after the parameters, from the pool the launcher is made with."""
    names = argument_names(specs)
    runtime = [(name, spec) for name, spec in zip(names, specs) if spec.kind != "const"]
    if [spec.name for _, spec in runtime] != [param.name for param in abi_params]:
        return None  # not the compiled function's parameters in the Script's order
    if not any(spec.kind == "pointer" for _, spec in runtime):
        return None
    body = []
    for name, spec in runtime:
        if spec.kind == "scalar" and spec.dtype.kind in ("int", "uint"):
            body.append(f"if not {spec.dtype.min_value} <= {name} <= {spec.dtype.max_value}: raise Refused")
    for axis, (dim, limit) in enumerate(zip(grid_expressions(grid_source), MAX_GRID)):
        value = _literal(dim)
        if value is not None:
            if not 0 < value <= limit:
                return None  # the careful path launches nothing (0) or says why it cannot
            continue
        body.append(f"g{axis} = {dim}")
        body.append(f"if not 0 < g{axis} <= {limit}: raise Refused")
    sized, call = [], []
    scalar_names = {spec.name: name for name, spec in runtime if spec.kind == "scalar"}
    for (name, spec), param in zip(runtime, abi_params):
        if spec.kind == "scalar":
            call.append(name)
            continue
        static = None if param.shape is None else [_literal(s) for s in param.shape]
        if param.index_span is not None:  # reached through sub-views: their span must fit, not the tensor
            span = _renamed(param.index_span, scalar_names)
            if _literal(span) is None or _literal(span) > MAX_INDEX:
                sized.append(f"{span} > {MAX_INDEX}")
        elif static is None or None in static or math.prod(static) > MAX_INDEX:
            sized.append(f"{name}.numel() > {MAX_INDEX}")  # a checked shape of constants needs no count
        call.append(name if param.shape is not None else f"({name} if {name}.dim() == 1 else flat_view({name}))")
    if sized:
        body.append(f"if {' or '.join(sized)}: raise Refused")
    if workspaces:
        lines, passed = workspace_lines(specs, tuple(workspaces))
        body += lines
        call += passed
    body.append(f"function({', '.join(call)})")
    return ("def make_launcher(function):\n"
            f"    def launch({', '.join(names)}):\n"
            + "".join(f"        {line}\n" for line in body) +
            "    return launch\n")


def make_launcher(specs: list[ParamSpec], abi_params: tuple, grid_source: str,
                  function: Callable, workspaces: Any = None) -> Optional[Callable]:
    """The launcher of one compiled specialisation (see the module docstring), or None.
    ``workspaces``: the kernel's :class:`~tilus_tvm.runtime.workspace.WorkspacePool`, if it has any."""
    source = launcher_source(specs, abi_params, grid_source, workspaces.specs if workspaces is not None else ())
    if source is None:
        return None
    namespace = {"Refused": Refused, "flat_view": flat_view}
    if workspaces is not None:
        namespace.update({f"ws{i}": tensors for i, tensors in enumerate(workspaces.tensors)})
    return _define(source, "make_launcher", namespace)(function)
