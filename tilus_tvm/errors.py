"""Exception types, one per layer. Each message names the argument, the value and what was expected."""


class TilusError(Exception):
    """Base of every error raised by tilus-tvm."""


class LayoutError(TilusError, ValueError):
    """A layout operation got operands it cannot work with (shape, mode, permutation, swizzle...)."""


class ScriptError(TilusError, ValueError):
    """A kernel script is malformed: bad annotation, bad instruction operand, unsupported syntax."""


class CompileError(TilusError, RuntimeError):
    """Lowering or building a kernel failed."""


class LaunchError(TilusError, ValueError):
    """A kernel was launched with arguments that do not fit its signature (count, dtype, device)."""


class VerificationError(CompileError):
    """The tile IR broke an invariant after a pass: a tensor used before it is defined or after it is
    freed, a layout that does not fit its tensor, a dtype mismatch. The message names the pass and
    quotes the instruction as the printer prints it."""


class RelaxError(TilusError, ValueError):
    """A kernel cannot be called from Relax with the arguments given (count, dtype, shape, outputs)."""


class SlowLaunchWarning(UserWarning):
    """A launch worked but took the slow path: an argument the compiled function refused was read as the
    shape it expects (from its data pointer), after an exception and a second call. Every such launch
    pays for that (hundreds of microseconds); passing the expected shape avoids it."""
