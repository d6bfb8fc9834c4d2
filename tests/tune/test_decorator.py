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
