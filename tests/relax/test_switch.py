"""The switch for relax.frontend.nn users (tilus_tvm/relax/switch.py)."""
import pytest
import tvm
from tvm.relax.frontend import nn
from tvm.tirx import compilation_pipeline

import tilus_tvm.relax as tilus_relax
from tilus_tvm.relax.pipeline import is_tilus_kernel
from tilus_tvm.target import tvm_target

from tests.relax.test_dispatch import SmallBlock
from tests.relax.test_pipeline import kernel_names


def test_the_switch_dispatches_nn_exports_and_fixes_the_default_pipeline():
    model = SmallBlock()
    model.to("float16")
    spec = {"forward": {"x": nn.spec.Tensor((1, "seq", 256), "float16")}}
    s_tir = compilation_pipeline.PIPELINE_MAP["s_tir"]
    export_tvm = nn.Module.export_tvm
    with tilus_relax.enabled("sm_90"):
        assert tilus_relax.current() == "sm_90"
        mod, params = model.export_tvm(spec=spec)
        assert [name for name, _ in params][:2] == ["input_norm.weight", "qkv.weight"]
        assert sum(is_tilus_kernel(f) for f in mod.functions.values()) == 8
        names = kernel_names(tvm.compile(mod, target=tvm_target("sm_90")))  # TVM's default TIR pipeline
        assert any(n.startswith("tilus_flash_attention_float16_") for n in names)
    assert tilus_relax.current() is None
    assert compilation_pipeline.PIPELINE_MAP["s_tir"] is s_tir and nn.Module.export_tvm is export_tvm
    mod, _ = model.export_tvm(spec=spec)
    assert not any(is_tilus_kernel(f) for f in mod.functions.values())


def test_enable_refuses_a_target_it_cannot_serve():
    with pytest.raises(tilus_relax.RelaxError, match="unknown target 'sm_70'"):
        tilus_relax.enable("sm_70")
    assert tilus_relax.current() is None
