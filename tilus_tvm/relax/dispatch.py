"""``DispatchKernels``: a Relax module pass rewriting operators to tilus kernels.

Each operator call is looked up in the pattern table (:data:`tilus_tvm.relax.patterns.PATTERNS`,
keyed by the Relax operator name). A pattern either returns the replacement -- ``R.call_tir`` of a
kernel's destination-passing PrimFunc (:func:`tilus_tvm.relax.call.kernel_call`), with reshapes
around it -- or says why it does not apply (dtype, shape divisibility, a missing kernel module...).
Calls no pattern takes stay as they are, on TVM's default path (legalised and scheduled by dlight).
Every decision is logged on the ``tilus_tvm.relax`` logger (INFO) and kept in
``DispatchKernels.decisions``::

    mod = DispatchKernels(target="sm_90")(mod)         # then tilus_tvm.relax.build(mod, "sm_90")
    logging.getLogger("tilus_tvm.relax").setLevel(logging.INFO)   # see what went where and why
"""
from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from tvm import relax
from tvm.ir import Op

from tilus_tvm.errors import CompileError, TilusError

logger = logging.getLogger("tilus_tvm.relax")


class NotApplicable(Exception):
    """The call is not of the pattern's shape at all (tried silently, the next pattern is tried)."""


class NotDispatched(Exception):
    """The pattern recognised the call but a constraint rules its kernel out; the message says why."""


@dataclass(frozen=True)
class Pattern:
    """One table entry: calls of Relax operator ``op`` go to ``rewrite(context, call)``.

    ``schedule``: the module with the kernel, imported before the first rewrite; when it cannot be
    imported the pattern is skipped with that reason. ``rewrite`` returns the replacement expression
    or raises :class:`NotDispatched` (logged) or :class:`NotApplicable` (silent)."""

    name: str
    op: str
    schedule: str
    rewrite: Callable[["DispatchContext", Any], Any]


@dataclass(frozen=True)
class Decision:
    """What happened to one operator call: the kernel it went to, or why not."""

    binding: str
    op: str
    pattern: str
    dispatched: bool
    detail: str  # the PrimFunc called, or the reason


class DispatchContext:
    """What a pattern's rewrite may use: the architecture, the bindings before the call, and a way to
    emit expressions and kernel calls into the function being rewritten."""

    def __init__(self, mutator: Any, arch: str):
        self._mutator = mutator
        self.arch = arch
        self.called: list[str] = []  # the PrimFuncs called by the rewrites so far
        # (variable, what it computes) of dispatched results a later rewrite may fuse into another kernel
        # (the matmul before a gated activation); a fused producer is left for dead-code elimination
        self.sources: list[tuple[Any, Any]] = []

    @property
    def hopper(self) -> bool:
        from tilus_tvm.target import compute_capability

        return compute_capability(self.arch)[0] >= 9

    @property
    def wgmma(self) -> bool:
        """Whether the kernels may use Hopper's wgmma (an sm_90a target)."""
        return self.arch == "sm_90a"

    def binding_of(self, expr: Any) -> Optional[Any]:
        """The value bound to ``expr`` when it is a variable bound in this function, else None."""
        if not isinstance(expr, relax.Var):
            return None
        try:
            return self._mutator.lookup_binding(expr)
        except Exception:  # noqa: BLE001 - TVM raises when the variable has no binding (a parameter)
            return None

    def source_of(self, expr: Any, hops: int = 4) -> Optional[Any]:
        """What a recorded result (``sources``) computes when ``expr`` is it, possibly through variable
        aliases, reshapes and views; else None."""
        for _ in range(hops + 1):
            if isinstance(expr, relax.Var):
                for var, source in self.sources:
                    if var.same_as(expr):
                        return source
                expr = self.binding_of(expr)
            elif expr is not None and getattr(getattr(expr, "op", None), "name", None) in (
                    "relax.reshape", "relax.memory.view"):
                expr = expr.args[0]
            else:
                return None
        return None

    def emit(self, expr: Any, name: str = "") -> Any:
        """Bind ``expr`` to a new variable before the call being rewritten."""
        return self._mutator.builder_.emit(expr, name)

    def function(self, gvar: Any) -> Optional[Any]:
        """The function ``gvar`` names in the module being rewritten, or None."""
        if not isinstance(gvar, relax.GlobalVar):
            return None
        module = self._mutator.builder_.get()
        return module[gvar] if gvar in module.get_global_vars() else None

    def kernel(self, kernel: Any, args: Sequence[Any], out: Any, outputs: Sequence[str] = ()) -> Any:
        """``R.call_tir`` of ``kernel`` (see :func:`tilus_tvm.relax.call.call`), its PrimFunc added to the module.
        ``outputs`` names the output parameters when they are not the kernel's last ones."""
        from tilus_tvm.relax.call import block_builder_adder, kernel_call

        expr = kernel_call(kernel, args, out, self.arch, block_builder_adder(self._mutator.builder_), outputs)
        self.called.append(expr.args[0].name_hint)
        return expr


@relax.expr_functor.mutator
class _Dispatcher(relax.PyExprMutator):
    """Tries the patterns of each operator call, in table order; keeps the call when none takes it."""

    def __init__(self, mod: Any, patterns: Sequence[Pattern], arch: str, decisions: list):
        super().__init__(mod)
        self.patterns = patterns
        self.context = DispatchContext(self, arch)
        self.decisions = decisions
        self.unavailable: dict[str, Optional[str]] = {}  # schedule module -> why it cannot be imported
        self.binding_name = ""

    def visit_var_binding_(self, binding: Any) -> None:
        self.binding_name = binding.var.name
        super().visit_var_binding_(binding)

    def visit_call_(self, call: Any) -> Any:
        candidates = [p for p in self.patterns if isinstance(call.op, Op) and p.op == call.op.name]
        if not candidates:
            return super().visit_call_(call)
        call = relax.Call(call.op, [self.visit_expr(arg) for arg in call.args], call.attrs, call.ty_args)
        for pattern in candidates:
            if not self._available(pattern):
                self._decide(call, pattern, False, self.unavailable[pattern.schedule])
                continue
            called = len(self.context.called)
            try:
                replacement = pattern.rewrite(self.context, call)
            except NotApplicable:
                continue
            except NotDispatched as reason:
                self._decide(call, pattern, False, str(reason))
                continue
            except TilusError as error:  # the kernel refused or failed to lower: a bug to report, not a crash
                self._decide(call, pattern, False, f"the kernel failed: {error}", level=logging.WARNING)
                continue
            self._decide(call, pattern, True, ", ".join(self.context.called[called:]) or "a kernel")
            return replacement
        return call

    def _available(self, pattern: Pattern) -> bool:
        if pattern.schedule not in self.unavailable:
            try:
                importlib.import_module(pattern.schedule)
                self.unavailable[pattern.schedule] = None
            except ImportError as exc:
                self.unavailable[pattern.schedule] = f"{pattern.schedule} cannot be imported ({exc})"
        return self.unavailable[pattern.schedule] is None

    def _decide(self, call: Any, pattern: Pattern, dispatched: bool, detail: str, level: int = logging.INFO) -> None:
        decision = Decision(self.binding_name, call.op.name, pattern.name, dispatched, detail)
        self.decisions.append(decision)
        if dispatched:
            logger.log(level, "%s = %s: dispatched to %s (%s)", decision.binding, decision.op, detail, pattern.name)
        else:
            logger.log(level, "%s = %s: not dispatched (%s): %s", decision.binding, decision.op, pattern.name, detail)


class DispatchKernels:
    """A Relax module pass (``DispatchKernels(target)(mod)``) rewriting matmul, softmax, layer_norm,
    rms_norm and attention calls to tilus kernels where their constraints hold (see the module
    docstring and :mod:`tilus_tvm.relax.patterns`).

    ``target``: ``"sm_90"``, a CUDA ``tvm.target.Target``, or None for the current Target scope or
    GPU; without a CUDA target of sm_80 or newer nothing is dispatched (logged). ``patterns``: the
    table to use (default :data:`~tilus_tvm.relax.patterns.PATTERNS`). After a run,
    ``decisions`` lists what happened to each call a pattern looked at.
    """

    def __init__(self, target: Any = None, patterns: Optional[Sequence[Pattern]] = None):
        self.target = target
        self.patterns = patterns
        self.decisions: list[Decision] = []
        self._pass = None

    def __call__(self, mod: Any) -> Any:
        return self.as_pass()(mod)

    def as_pass(self) -> Any:
        """The ``tvm.transform.Pass`` (to put in a ``tvm.transform.Sequential``)."""
        import tvm

        if self._pass is None:
            self._pass = tvm.transform.module_pass(self.transform_module, opt_level=0,
                                                   name="tilus.DispatchKernels")
        return self._pass

    def transform_module(self, mod: Any, _ctx: Any = None) -> Any:
        from tilus_tvm.relax.patterns import PATTERNS

        arch = self._arch()
        if arch is None:
            return mod
        patterns = list(self.patterns if self.patterns is not None else PATTERNS)
        dispatcher = _Dispatcher(mod, patterns, arch, self.decisions)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                new_func = dispatcher.visit_expr(func)
                dispatcher.builder_.update_func(gvar, relax.analysis.remove_all_unused(new_func))
        return _drop_unused(dispatcher.builder_.finalize(), set(dispatcher.context.called))

    def _arch(self) -> Optional[str]:
        import tvm

        from tilus_tvm.target import resolve_arch

        target = self.target
        if target is None:
            current = tvm.target.Target.current(allow_none=True)
            target = current
        if target is not None and not isinstance(target, str) and target.kind.name != "cuda":
            logger.info("DispatchKernels: target %s is not CUDA; nothing dispatched", target.kind.name)
            return None
        try:
            return resolve_arch(target)
        except CompileError as exc:
            logger.info("DispatchKernels: no usable CUDA target (%s); nothing dispatched", exc)
            return None


def _drop_unused(mod: Any, dispatched: set) -> Any:
    """Remove the PrimFuncs no Relax function calls any more: the dequantize ones
    (:mod:`tilus_tvm.relax.quantized`), whose matmul went to a kernel that reads the packed weight itself,
    and kernels of ours (``dispatched``) whose result was fused into a later kernel."""
    from tvm import tirx

    from tilus_tvm.relax.quantized import DEQUANTIZE_ATTR

    used = set()
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            used |= {gvar.name_hint for gvar in relax.analysis.all_global_vars(func)}
    for gvar, func in list(mod.functions_items()):
        dequantize = func.attrs is not None and DEQUANTIZE_ATTR in func.attrs
        if isinstance(func, tirx.PrimFunc) and (dequantize or gvar.name_hint in dispatched) and \
                gvar.name_hint not in used:
            del mod[gvar]
    return mod
