"""tilus_tvm.tune.space: axes, the product space, pinning, buckets and the encoding of values."""
import pytest

from tilus_tvm import bfloat16
from tilus_tvm.errors import ScriptError
from tilus_tvm.tune.space import (Axis, TuningSpace, bucket_value, describe_config, encode_config, encode_value,
                                  parse_axis)


def test_parse_axis_single_and_grouped_names():
    assert parse_axis("block_m", [64, 128]) == Axis(("block_m",), ((64,), (128,)))
    assert parse_axis(" block_m ,block_n", [(64, 128), [128, 128]]) == Axis(("block_m", "block_n"),
                                                                            ((64, 128), (128, 128)))
    assert parse_axis("shape", [(1, 2)]) == Axis(("shape",), (((1, 2),),))  # one name: the value as it is


@pytest.mark.parametrize("names, values, message", [
    ("block_m, block_n", [(64, 128), (128,)], "each choice must give 2 values"),
    ("block_m", [], "no choices given"),
    ("block_m", [64, 64], "given twice"),
    ("block m", [1], "parameter names separated by commas"),
    ("a, a", [(1, 2)], "names a parameter twice"),
    ("block_m", "64", "must be a list of choices"),
])
def test_parse_axis_errors(names, values, message):
    with pytest.raises(ScriptError, match=message):
        parse_axis(names, values)


def test_space_is_the_product_in_source_order():
    space = TuningSpace().with_axis(parse_axis("stages", [3, 4]), None, None, "K")
    space = space.with_axis(parse_axis("block_m, block_n", [(64, 128), (128, 256)]), None, None, "K")
    assert space.names == ("block_m", "block_n", "stages")
    assert len(space) == 4
    assert space.configs() == [
        {"block_m": 64, "block_n": 128, "stages": 3}, {"block_m": 64, "block_n": 128, "stages": 4},
        {"block_m": 128, "block_n": 256, "stages": 3}, {"block_m": 128, "block_n": 256, "stages": 4}]


def test_pinned_values_replace_choices_and_collapse_duplicates():
    space = TuningSpace((parse_axis("block_m, block_n", [(64, 128), (128, 128), (128, 256)]),
                         parse_axis("stages", [3, 4])))
    assert space.configs({"block_n": 128, "stages": 4}) == [
        {"block_m": 64, "block_n": 128, "stages": 4}, {"block_m": 128, "block_n": 128, "stages": 4}]
    assert space.configs({"block_m": 32}) == [
        {"block_m": 32, "block_n": 128, "stages": 3}, {"block_m": 32, "block_n": 128, "stages": 4},
        {"block_m": 32, "block_n": 256, "stages": 3}, {"block_m": 32, "block_n": 256, "stages": 4}]


def test_settings_merge_and_conflicts():
    space = TuningSpace().with_axis(parse_axis("a", [1]), {"m": "pow2"}, 8, "K")
    space = space.with_axis(parse_axis("b", [1]), {"m": "pow2", "n": 64}, None, "K")
    assert dict(space.buckets) == {"m": "pow2", "n": 64} and space.max_trials == 8
    with pytest.raises(ScriptError, match="more than one @autotune"):
        space.with_axis(parse_axis("a", [2]), None, None, "K")
    with pytest.raises(ScriptError, match="two buckets for 'm'"):
        space.with_axis(parse_axis("c", [2]), {"m": "exact"}, None, "K")
    with pytest.raises(ScriptError, match="max_trials twice"):
        space.with_axis(parse_axis("c", [2]), None, 16, "K")
    with pytest.raises(ScriptError, match="bucket for 'm' must be"):
        space.with_axis(parse_axis("c", [2]), {"m": "log"}, None, "K")


def test_bucket_values():
    assert [bucket_value("pow2", v) for v in (0, 1, 2, 3, 1000, 1024, 1025)] == [1, 1, 2, 4, 1024, 1024, 2048]
    assert [bucket_value(64, v) for v in (1, 64, 65)] == [64, 64, 128]
    assert bucket_value("exact", 77) == 77 and bucket_value(None, 77) is None
    assert bucket_value(lambda v: min(v, 4096), 10000) == 4096


def test_encoding_of_values():
    assert encode_value(bfloat16) == "bfloat16"
    assert encode_value((1, "col")) == [1, "col"]
    assert encode_value(object) == repr(object)
    assert encode_config({"block_m": 64, "dtype": bfloat16}) == '{"block_m": 64, "dtype": "bfloat16"}'
    assert describe_config({"block_m": 64, "b_layout": "col"}) == "block_m=64, b_layout='col'"
