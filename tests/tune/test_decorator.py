"""tilus_tvm.tune.decorator: @autotune, tunable instances and their Tilus semantics."""
import subprocess
import sys

import pytest
import torch

import tilus_tvm as tilus
from tilus_tvm import float32, int32
from tilus_tvm.errors import ScriptError
from tilus_tvm.tune import space_of, tunable_of
from tilus_tvm.utils import cdiv

from tests.tune.fakes import TunedAddOne


def test_import_stays_free_of_tvm_and_torch():
    code = ("import sys, tilus_tvm\n"
            "heavy = [m for m in sys.modules if m.split('.')[0] in ('tvm', 'torch', 'tvm_ffi')]\n"
            "assert not heavy, heavy\n"
            "assert callable(tilus_tvm.tune) and tilus_tvm.tune.autotune is tilus_tvm.autotune\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_instance_without_tuned_parameters_is_tunable():
    kernel = TunedAddOne()
    tunable = tunable_of(kernel)
    assert isinstance(kernel, tilus.Script) and isinstance(kernel, TunedAddOne)
    assert tunable.kernel_path == "tests.tune.fakes:TunedAddOne"
    assert tunable.pinned == {} and tunable.fixed == {}
    assert len(tunable.configs()) == 12
    assert tunable.configs()[0] == {"block_n": 64, "warps": 1}  # the top decorator varies slowest
    assert kernel.hyper_parameters() == {}


def test_fixed_and_pinned_arguments():
    tunable = tunable_of(TunedAddOne(offset=2.0, warps=4))
    assert tunable.fixed == {"offset": 2.0} and tunable.pinned == {"warps": 4}
    assert tunable.configs() == [{"block_n": b, "warps": 4} for b in (64, 128, 256, 512)]
    concrete = tunable.instantiate({"block_n": 128, "warps": 4})
    assert tunable_of(concrete) is None
    assert concrete.hyper_parameters() == {"block_n": 128, "warps": 4, "offset": 2.0}


def test_every_tuned_parameter_given_is_an_ordinary_kernel():
    kernel = TunedAddOne(128, 4)
    assert tunable_of(kernel) is None
    a = torch.empty(1000, dtype=torch.float32, device="meta")
    text = kernel.lower(1000, a, a, target="sm_90").script()
    assert "tuned_add_one" in text
    with pytest.raises(ScriptError, match="needs more than one warp"):
        TunedAddOne(block_n=512, warps=1)


def test_decorator_errors():
    class Kernel(tilus.Script):
        def __init__(self, block: int, warps: int = 4):
            super().__init__()
            self.block, self.warps = block, warps

        def __call__(self, n: int32, a: ~float32):
            self.attrs.blocks = cdiv(n, self.block)
            self.attrs.warps = self.warps

    with pytest.raises(ScriptError, match=r"Kernel.__init__ has no parameter 'blok'; its parameters are: block, warps"):
        tilus.autotune("blok", [1])(Kernel)
    with pytest.raises(ScriptError, match="decorates a tilus_tvm.Script subclass"):
        tilus.autotune("block", [1])(object)
    with pytest.raises(ScriptError, match="max_trials must be a positive int"):
        tilus.autotune("block", [1], max_trials=0)
    tuned = tilus.autotune("block", [64, 128])(Kernel)
    with pytest.raises(ScriptError, match="tunes block in more than one @autotune"):
        tilus.autotune("block", [32])(tuned)
    assert space_of(tuned).names == ("block",)
    with pytest.raises(TypeError, match="unexpected keyword argument 'width'"):
        tuned(width=3)


def test_missing_untuned_argument():
    @tilus.autotune("warps", [1, 2])
    class Kernel(tilus.Script):
        def __init__(self, block: int, warps: int):
            super().__init__()
            self.block, self.warps = block, warps

        def __call__(self, n: int32, a: ~float32):
            self.attrs.blocks = cdiv(n, self.block)
            self.attrs.warps = self.warps

    with pytest.raises(TypeError, match=r"missing argument\(s\) block \(not tuned\)"):
        Kernel()
    assert tunable_of(Kernel(block=64)).fixed == {"block": 64}


def test_tune_refuses_what_it_cannot_tune():
    with pytest.raises(ScriptError, match="create it without them"):
        tilus.tune(TunedAddOne(128, 4), 10)

    class Plain(tilus.Script):
        def __call__(self, n: int32, a: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 1

    with pytest.raises(ScriptError, match="Plain has no @autotune parameters"):
        tilus.tune(Plain, 10)


def test_an_explicit_configuration_keeps_the_plain_launch():
    """Only tunable instances change class: a kernel given every tuned parameter is launched by
    Script's own launch, with nothing of the tuner in between."""
    from tilus_tvm.lang.script import Script

    kernel = TunedAddOne(128, 4)
    assert type(kernel) is TunedAddOne and TunedAddOne.__call__ is Script._launch
    assert TunedAddOne.compile is Script.compile and TunedAddOne.lower is Script.lower
    tunable = TunedAddOne()
    assert type(tunable) is not TunedAddOne and isinstance(tunable, TunedAddOne)
    assert type(tunable).__name__ == "TunedAddOne" and type(tunable).__call__ is not Script._launch
    assert type(TunedAddOne(warps=2)) is type(tunable)  # one tunable class per decorated class
    assert tunable_of(tunable).cls is TunedAddOne


@tilus.autotune("block_n", [64, 128, 256], opt_in=True)
@tilus.autotune("warps", [2, 4], bucket={"n": "pow2"})
class OptInAddOne(TunedAddOne.__mro__[0]):
    """TunedAddOne's kernel with defaults and an opt-in space."""

    def __init__(self, block_n: int = 128, warps: int = 4, offset: float = 1.0):
        super().__init__(block_n, warps, offset)


def test_opt_in_defaults_stay_defaults():
    from tilus_tvm.lang.script import Script

    kernel = OptInAddOne()
    assert type(kernel) is OptInAddOne and tunable_of(kernel) is None
    assert kernel.hyper_parameters() == {"block_n": 128, "warps": 4, "offset": 1.0}
    assert OptInAddOne.__call__ is Script._launch
    assert OptInAddOne(block_n=64).hyper_parameters()["block_n"] == 64
    assert space_of(OptInAddOne).opt_in and len(space_of(OptInAddOne)) == 6
    assert not space_of(TunedAddOne).opt_in


def test_tunable_of_a_class_and_of_an_opt_in_instance():
    made = tilus.tune.tunable(OptInAddOne, offset=2.0, warps=4)
    tunable = tunable_of(made)
    assert isinstance(made, OptInAddOne) and type(made) is not OptInAddOne
    assert tunable.fixed == {"offset": 2.0} and tunable.pinned == {"warps": 4}
    assert tunable.configs() == [{"block_n": b, "warps": 4} for b in (64, 128, 256)]
    derived = tunable_of(tilus.tune.tunable(OptInAddOne(offset=2.0, warps=4)))  # the arguments given, not defaults
    assert (derived.fixed, derived.pinned) == (tunable.fixed, tunable.pinned)
    assert tilus.tune.tunable(made) is made
    whole = tunable_of(tilus.tune.tunable(TunedAddOne))  # a class without opt_in: the same
    assert whole.pinned == {} and len(whole.configs()) == 12
    with pytest.raises(ScriptError, match="create it without them"):
        tilus.tune.tunable(OptInAddOne(block_n=64, warps=2))
    with pytest.raises(TypeError, match="arguments go with a class"):
        tilus.tune.tunable(OptInAddOne(), offset=3.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'width'"):
        tilus.tune.tunable(OptInAddOne, width=3)
    with pytest.raises(ScriptError, match="float has no @autotune parameters"):
        tilus.tune.tunable(float)


def test_tune_takes_an_opt_in_instance():
    from tests.tune.fakes import ConfigRunner, FakeBuilder, add_one_seconds

    a = torch.empty(3000, dtype=torch.float32, device="meta")
    runner = ConfigRunner(add_one_seconds)
    result = tilus.tune(OptInAddOne(warps=4), 3000, a, a, target="sm_90", builder=FakeBuilder(), runner=runner,
                        progress=False)
    assert result.config == {"block_n": 256, "warps": 4} and len(runner.runs) == 3
    assert result.key.fields["scalars"] == {"n": 4096}
    kernel = tilus.tune.tunable(OptInAddOne, warps=4)  # later launches of the key read the choice
    assert kernel.lower(3000, a, a, target="sm_90") is not None and len(runner.runs) == 3
