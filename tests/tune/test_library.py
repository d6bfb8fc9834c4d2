"""The library kernels' @autotune spaces and the tune= switch of the library functions (CPU)."""
import importlib

import pytest

import tilus_tvm as tilus
from tilus_tvm import bfloat16, float16
from tilus_tvm.errors import LaunchError, ScriptError
from tilus_tvm.lang.script import Script
from tilus_tvm.schedules.attention import FlashAttention
from tilus_tvm.schedules.matmul import Matmul
from tilus_tvm.schedules.norms import LayerNorm, RMSNorm
from tilus_tvm.schedules.quantized_matmul import QuantizedMatmul
from tilus_tvm.schedules.softmax import OnlineSoftmax, Softmax
from tilus_tvm.tune import configure, library, space_of, tunable_of
from tests.helpers import launches  # noqa: F401 - fixture

# the modules (the package exports functions of the same names)
attention, matmul, norms, softmax, quantized = (importlib.import_module(f"tilus_tvm.schedules.{name}")
                                                for name in ("attention", "matmul", "norms", "softmax",
                                                             "quantized_matmul"))


def configs_of(cls, **fixed):
    configs = tunable_of(tilus.tune.tunable(cls, **fixed)).configs()
    return [tuple(c[name] for name in space_of(cls).names) for c in configs]


def test_library_spaces_are_opt_in_and_keep_the_default_configurations():
    for cls in (Matmul, FlashAttention, Softmax, OnlineSoftmax, LayerNorm, RMSNorm, QuantizedMatmul):
        assert space_of(cls).opt_in, cls
        assert cls.__call__ is Script._launch, cls  # an explicitly configured kernel launches as before
    assert Matmul().hyper_parameters()["block_m"] == 128 and tunable_of(Matmul()) is None
    assert type(Matmul(block_m=64)) is Matmul and type(FlashAttention(head_dim=64)) is FlashAttention
    assert len(space_of(Matmul)) == 32 and space_of(Matmul).buckets == {"m_size": "pow2"}
    assert len(space_of(FlashAttention)) == 36


def test_matmul_space_holds_the_hand_tables():
    names = space_of(Matmul).names
    assert names == ("block_m", "block_n", "warps", "block_k", "stages")
    picked = {(bm, bn, bk, w, st) for bm, bn, w, bk, st in configs_of(Matmul)}
    for table in (matmul.CONFIGS, matmul.HOPPER_CONFIGS):
        for _, (bm, bn, bk, w, st, min_blocks) in table:
            assert (bm, bn, bk, w, st) in picked and min_blocks == 1
    assert len(picked) == 32


def test_attention_and_row_spaces_hold_the_hand_choices():
    names = space_of(FlashAttention).names
    picked = {tuple(c[n] for n in ("block_q", "block_kv", "warps", "stages", "out_chunk"))
              for c in tunable_of(tilus.tune.tunable(FlashAttention, head_dim=128)).configs()}
    assert set(names) == {"block_q", "warps", "block_kv", "stages", "out_chunk"}
    assert set(attention.FLASH_CONFIGS.values()) <= picked
    for hidden, bits in ((4096, 16), (8192, 16), (5120, 32), (300, 16), (1024, 16)):
        config = softmax.row_config(hidden, bits)
        assert config.warps in softmax.ROW_WARPS
        for cls in (Softmax, RMSNorm, LayerNorm):
            assert {"warps": config.warps, "rows_per_block": config.rows_per_block} in \
                tunable_of(tilus.tune.tunable(cls, block_n=config.block_n)).configs()
    assert {"chunk": 4096, "warps": 8} in tunable_of(tilus.tune.tunable(OnlineSoftmax)).configs()


def weight_format(dtype="uint4b", group_size=128, k=4096, n=256):
    from tilus_tvm.dtypes import as_dtype
    from tilus_tvm.schedules.quantized_weight import WeightFormat

    return WeightFormat(as_dtype(dtype), k, n, group_size)


def test_quantized_space_holds_the_hand_table():
    """The space holds the tile of every hand-table row, on sm_80 and on sm_90a (wgmma, TMA rings, groups of
    warps), for weights of 2 to 8 bits in tiles of k-steps or granule-major, at 7B and 70B shapes."""
    from dataclasses import asdict

    from tilus_tvm.dtypes import as_dtype
    from tilus_tvm.schedules.quantized_weight import WeightFormat

    configs = tunable_of(tilus.tune.tunable(QuantizedMatmul, fmt=weight_format())).configs()
    assert len(configs) == 117 and space_of(QuantizedMatmul).buckets == {"m_size": "pow2"}
    for name in ("uint4b", "uint2b", "uint3b", "int5b", "uint8", "float8_e4m3"):
        for k, n, k_tile in ((8192, 28672, 2), (4096, 11008, 0), (28672, 8192, 2)):
            fmt = WeightFormat(as_dtype(name), k, n, 128, k_tile=k_tile)
            for wgmma in (False, True):
                for m in (1, 8, 16, 17, 48, 64, 128, 256):
                    chosen = asdict(quantized.choose_config(m, fmt, wgmma=wgmma))
                    assert {name: chosen[name] for name in space_of(QuantizedMatmul).names} in configs, (fmt, m)


def test_every_library_configuration_is_accepted_by_its_constructor():
    for bm, bn, w, bk, st in configs_of(Matmul):
        Matmul(bm, bn, bk, w, st, dtype=bfloat16)
    for config in tunable_of(tilus.tune.tunable(FlashAttention, head_dim=64)).configs():
        FlashAttention(head_dim=64, **config)
    for config in tunable_of(tilus.tune.tunable(OnlineSoftmax)).configs():
        OnlineSoftmax(dtype=float16, **config)
    for fmt in (weight_format(), weight_format("int3b", 32, k=4064)):  # one unit a lane, and units in pairs
        assert fmt.units == (1 if fmt.dtype.nbits == 4 else 2)
        for config in tunable_of(tilus.tune.tunable(QuantizedMatmul, fmt=fmt)).configs():
            if config["units_per_warp"] % fmt.units:  # the ring row's one unit a warp: refused, so the tuner skips it
                with pytest.raises(ScriptError, match="must be a positive multiple of 2"):
                    QuantizedMatmul(fmt, bfloat16, **config)
                continue
            if config["units_per_warp"] * config["block_m"] > 255 * 2:  # 4 units of 128 rows: skipped likewise
                with pytest.raises(ScriptError, match="256 float32 accumulators, more than the 255 registers"):
                    QuantizedMatmul(fmt, bfloat16, **config)
                continue
            QuantizedMatmul(fmt, bfloat16, **config)


def test_use_tuned_switch(monkeypatch):
    monkeypatch.delenv("TILUS_TVM_TUNE_LIBRARY", raising=False)
    assert library.use_tuned(None, "matmul") is False and library.use_tuned(True, "matmul") is True
    configure(library=True)
    try:
        assert library.use_tuned(None, "matmul") is True and library.use_tuned(False, "matmul") is False
    finally:
        configure()
    monkeypatch.setenv("TILUS_TVM_TUNE_LIBRARY", "1")
    assert library.use_tuned(None, "rms_norm") is True
    with pytest.raises(LaunchError, match="rms_norm: tune must be True, False or None"):
        library.use_tuned("yes", "rms_norm")
    with pytest.raises(TypeError, match="library must be True or False"):
        configure(library="yes")
    with pytest.raises(TypeError, match="workers must be a positive int"):
        configure(workers=0)


def test_tuned_kernel_is_one_tunable_per_class_and_arguments():
    first = library.tuned_kernel(Matmul, b_layout="col", dtype=bfloat16)
    assert library.tuned_kernel(Matmul, b_layout="col", dtype=bfloat16) is first
    assert library.tuned_kernel(Matmul, b_layout="row", dtype=bfloat16) is not first
    tunable = tunable_of(first)
    assert tunable.fixed == {"b_layout": "col", "dtype": bfloat16} and tunable.pinned == {}
    rms = tunable_of(library.tuned_kernel(RMSNorm, block_n=4096, dtype=float16))
    assert rms.fixed == {"block_n": 4096, "dtype": float16}
    assert sorted({c["warps"] for c in rms.configs()}) == [1, 2, 4, 8, 16, 32]
    assert sorted({c["rows_per_block"] for c in rms.configs()}) == [1, 2, 4, 8]


def test_library_functions_take_tune():
    import inspect

    for fn in (matmul.matmul, attention.flash_attention, softmax.softmax, norms.layer_norm, norms.rms_norm,
               quantized.quantized_matmul):
        parameter = inspect.signature(fn).parameters["tune"]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is None, fn


def test_defaults_given_or_not_share_one_key():
    """matmul(tune=True) passes b_layout and dtype; tune(Matmul(), ...) does not: one key for both."""
    import torch

    from tilus_tvm.tune import engine

    a = torch.empty(512, 512, dtype=torch.float16, device="meta")
    args = (512, 512, 512, a, a, a)
    implicit = engine.tuning_key(tunable_of(tilus.tune.tunable(Matmul())), args, "sm_90")
    explicit = engine.tuning_key(tunable_of(library.tuned_kernel(Matmul, b_layout="row", dtype=float16)),
                                            args, "sm_90")
    assert implicit.json == explicit.json
    assert implicit.fields["init"] == {"b_layout": "row", "dtype": "float16", "min_blocks": 1}
    column = engine.tuning_key(tunable_of(tilus.tune.tunable(Matmul, b_layout="col")), args, "sm_90")
    assert column.json != implicit.json


def test_a_float_scalar_is_fixed_and_not_taken_for_a_tensor():
    """RMSNorm's eps is a float32 scalar parameter: MetaSchedule's candidate has it fixed to the call's value,
    and only the three tensors are in its argument info (in TVM 0.27 isinstance(var, tirx.Buffer) holds for
    every Var, which once made every configuration fail with 'shape is only available on a Var with BufferType')."""
    import torch

    from tilus_tvm.schedules.norms import RMSNorm
    from tilus_tvm.tune import measure

    x, w = torch.zeros(100, 4096, dtype=torch.float16), torch.zeros(4096, dtype=torch.float16)
    mod = RMSNorm(block_n=4096, dtype="float16", rows_per_block=2).lower(100, 4096, 1e-6, x, w, x, target="sm_90",
                                                                        dps=True)
    func = next(iter(mod.functions.values()))
    assert [p.name for p in func.params if measure.is_scalar_param(p)] == ["eps"]
    infos = measure.args_info(func, {"rows": 100, "eps": 1e-6})
    assert len(infos) == 3 and list(infos[0].shape) == list(infos[2].shape) == [100, 4096]  # x, w, y
    candidate = next(iter(measure.candidate_module(func, {"rows": 100, "eps": 1e-6}, "{}").functions.values()))
    assert not any(measure.is_scalar_param(p) for p in candidate.params)


def test_quantized_matmul_tunes_the_tile_and_keeps_the_tables_path_and_split(monkeypatch, launches):
    """quantized_matmul(tune=True) on the CPU, launches recorded: every tile the constructor accepts with the hand
    table's path and split is timed (writing its partial sums for SplitKSum: MetaSchedule cannot time the serial
    reduction's counters), and the fake runner's fastest is launched with the table's path, split and reduction;
    ~void tensors are sized for the runner from the call's tensors."""
    import torch

    import tilus_tvm.target

    from tests.tune.fakes import ConfigRunner, FakeBuilder

    monkeypatch.setattr(tilus_tvm.target, "current_arch", lambda: "sm_90")
    runner = ConfigRunner(lambda c: 1e-3 * (1 + (c["warps"] != 8) + (c["block_m"] != 16) + (c["units_per_warp"] != 2)))
    configure(builder=FakeBuilder(), runner=runner, progress=False)
    try:
        packed = quantized.pack_weight(torch.randint(0, 16, (4096, 256)).float(), "uint4b", 128)
        a, scales = torch.zeros(3, 4096, dtype=torch.float16), torch.ones(32, 256, dtype=torch.float16)
        quantized.quantized_matmul(a, packed, scales, tune=True)
        with pytest.raises(LaunchError, match="give config or tune=True, not both"):
            quantized.quantized_matmul(a, packed, scales, config=quantized.Config(), tune=True)
    finally:
        configure()
    table = quantized.choose_config(3, packed.format)  # (CPU tensors: the sm_80 table)
    path = {name: getattr(table, name) for name in quantized.TABLE_PATH}
    accepted = 0
    for config in tunable_of(tilus.tune.tunable(QuantizedMatmul, fmt=packed.format)).configs():
        try:
            QuantizedMatmul(packed.format, float16, split_k=table.split_k, split_reduce="kernel", **path, **config)
            accepted += 1
        except ScriptError:
            continue
    assert len(runner.runs) == accepted > 56
    (kernel, _), = launches  # the table's serial reduction: no SplitKSum after it
    chosen = kernel.hyper_parameters()
    assert (chosen["warps"], chosen["units_per_warp"], chosen["block_m"]) == (8, 2, 16)
    assert chosen["split_k"] == table.split_k > 1 and chosen["split_reduce"] == table.split_reduce == "serial"
    table_kernel = quantized.kernel_for(packed.format, torch.float16, False, table).hyper_parameters()
    assert {name: chosen[name] for name in quantized.TABLE_PATH} == \
        {name: table_kernel[name] for name in quantized.TABLE_PATH}


def test_flat_buffers_take_the_size_of_the_calls_tensors():
    import torch

    from tilus_tvm.tune import measure

    packed = quantized.pack_weight(torch.randint(0, 16, (4096, 256)).float(), "uint4b", 128)
    a, scales = torch.zeros(3, 4096, dtype=torch.float16), torch.ones(32, 256, dtype=torch.float16)
    args = (3, a, packed.storage, scales, scales, torch.zeros(3, 256, dtype=torch.float16), torch.zeros(1))
    sizes = measure.call_tensor_bytes(QuantizedMatmul, args)
    assert sizes == {"a_ptr": 3 * 4096 * 2, "w_ptr": 4096 * 256 // 2, "s_ptr": 32 * 256 * 2, "z_ptr": 32 * 256 * 2,
                     "out_ptr": 3 * 256 * 2, "ws_ptr": 4}
    func = next(iter(QuantizedMatmul(packed.format).lower(*args, target="sm_90", dps=True).functions.values()))
    infos = {p.name: info for p, info in zip([p for p in func.params if not measure.is_scalar_param(p)],
                                             measure.args_info(func, {"m_size": 3}, sizes))}
    assert list(infos["a_ptr"].shape) == [3 * 4096] and infos["a_ptr"].dtype == "float16"
    assert list(infos["w_ptr"].shape) == [4096 * 256 // 8] and infos["w_ptr"].dtype == "int32"
    with pytest.raises(Exception, match="a_ptr_numel of a_ptr does not follow from the call's scalars"):
        measure.args_info(func, {"m_size": 3})
