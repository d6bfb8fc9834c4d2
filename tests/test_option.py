"""tilus_tvm/option.py: named options with defaults, environment variables read when an option is read,
and IR dump files."""
import pathlib
import subprocess
import sys

import pytest

from tilus_tvm import option
from tilus_tvm.errors import TilusError
from tilus_tvm.option import OptionError


@pytest.fixture(autouse=True)
def default_options(monkeypatch):
    monkeypatch.delenv(option.DUMP_IR_ENV, raising=False)
    monkeypatch.delenv(option.CACHE_DIR_ENV, raising=False)
    for name in option.option_names():
        option.set_option(name, None)
    yield
    for name in option.option_names():
        option.set_option(name, None)


def test_defaults():
    assert option.option_names() == ["cache_dir", "debug.dump_ir", "debug.launch_blocking", "debug.verify", "dump_ir",
                                     "parallel_workers"]
    assert option.get_option("dump_ir") is None and option.dump_directory() is None
    assert option.get_option("debug.verify") is True
    assert option.get_option("cache_dir") == pathlib.Path.home() / ".cache" / "tilus_tvm"


def test_set_option_and_back_to_the_default():
    option.set_option("debug.verify", False)
    assert option.get_option("debug.verify") is False
    option.set_option("debug.verify", None)
    assert option.get_option("debug.verify") is True


def test_dump_ir_writes_one_numbered_file_per_pass(tmp_path):
    option.dump_ir(str(tmp_path))
    assert option.dump_directory() == tmp_path
    first = option.write_dump("matmul", 0, "transpile", "kernel matmul():\n")
    option.write_dump("matmul", 1, "layout_inference", "after inference\n")
    option.write_dump("matmul", 4, "tir", "# from tvm.script import tirx as T\n", suffix=".py")
    assert first == tmp_path / "matmul" / "00_transpile.txt"
    assert sorted(p.name for p in (tmp_path / "matmul").iterdir()) == \
        ["00_transpile.txt", "01_layout_inference.txt", "04_tir.py"]
    assert (tmp_path / "matmul" / "01_layout_inference.txt").read_text() == "after inference\n"


def test_dump_ir_none_turns_dumps_off(tmp_path):
    option.dump_ir(tmp_path)
    option.dump_ir(None)
    assert option.dump_directory() is None
    with pytest.raises(OptionError, match="IR dumps are off"):
        option.write_dump("k", 0, "transpile", "")


def test_the_environment_variable_is_read_when_the_option_is_read(tmp_path, monkeypatch):
    assert option.dump_directory() is None
    monkeypatch.setenv("TILUS_TVM_DUMP_IR", str(tmp_path / "env"))
    assert option.dump_directory() == tmp_path / "env"
    option.write_dump("softmax", 2, "shared_memory", "text")
    assert (tmp_path / "env" / "softmax" / "02_shared_memory.txt").read_text() == "text"
    option.dump_ir(tmp_path / "explicit")  # a directory given in code wins over the environment
    assert option.dump_directory() == tmp_path / "explicit"
    option.dump_ir(None)  # back to the default: the environment
    assert option.dump_directory() == tmp_path / "env"


def test_cache_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TILUS_TVM_CACHE_DIR", str(tmp_path))
    assert option.get_option("cache_dir") == tmp_path
    option.set_option("cache_dir", str(tmp_path / "mine"))
    assert option.get_option("cache_dir") == tmp_path / "mine"


def test_an_unknown_option_name_lists_the_options():
    message = ("unknown option 'dump_irr'; the options are: cache_dir, debug.dump_ir, debug.launch_blocking, "
               "debug.verify, dump_ir, parallel_workers")
    with pytest.raises(OptionError, match=message):
        option.get_option("dump_irr")
    with pytest.raises(OptionError, match="unknown option 'verify'"):
        option.set_option("verify", True)
    assert issubclass(OptionError, TilusError) and issubclass(OptionError, ValueError)


def test_values_of_the_wrong_type_are_refused():
    with pytest.raises(OptionError, match=r"option 'debug.verify' expects True or False, got 'yes'"):
        option.set_option("debug.verify", "yes")
    with pytest.raises(OptionError, match=r"option 'dump_ir' expects a directory \(str or os.PathLike\), got 3"):
        option.dump_ir(3)


def test_dump_file_names_stay_inside_the_dump_directory(tmp_path):
    option.dump_ir(tmp_path)
    path = option.write_dump("../evil/kernel", 7, "a/b", "x")
    assert path.parent.parent == tmp_path
    assert path.name == "07_a_b.txt"


def test_the_option_module_imports_neither_tvm_nor_torch():
    code = ("import sys, tilus_tvm.option\n"
            "print(sorted(m for m in ('tvm', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- Tilus's option functions ---------------------------------------------------------------------
def test_cache_dir_moves_the_compile_cache(tmp_path):
    from tilus_tvm.runtime import cache

    option.cache_dir(tmp_path / "kernels")
    assert option.get_option("cache_dir") == tmp_path / "kernels"
    assert cache.cache_dir() == tmp_path / "kernels"
    assert cache.entry_dir("abc") == tmp_path / "kernels" / "abc"
    option.set_option("cache_dir", None)
    assert cache.cache_dir() == pathlib.Path.home() / ".cache" / "tilus_tvm"
    with pytest.raises(OptionError, match="cache_dir: expects a directory"):
        option.cache_dir(None)


def test_set_cache_dir_and_option_cache_dir_are_one_setting(tmp_path):
    import tilus_tvm

    tilus_tvm.set_cache_dir(tmp_path)
    assert option.get_option("cache_dir") == tmp_path
    tilus_tvm.set_cache_dir(None)
    assert option.get_option("cache_dir") == pathlib.Path.home() / ".cache" / "tilus_tvm"


def test_debug_dump_ir_dumps_under_the_cache_dir(tmp_path):
    option.cache_dir(tmp_path)
    assert option.dump_directory() is None
    option.debug.dump_ir()
    assert option.get_option("debug.dump_ir") is True
    assert option.dump_directory() == tmp_path / "ir"
    option.dump_ir(tmp_path / "elsewhere")  # a directory given explicitly wins
    assert option.dump_directory() == tmp_path / "elsewhere"
    option.dump_ir(None)
    option.debug.dump_ir(False)
    assert option.dump_directory() is None


def test_launch_blocking_and_parallel_workers():
    assert option.launch_blocking_enabled() is False
    option.debug.launch_blocking()
    assert option.launch_blocking_enabled() is True and option.get_option("debug.launch_blocking") is True
    option.debug.launch_blocking(False)
    assert option.launch_blocking_enabled() is False
    option.parallel_workers(3)
    assert option.get_option("parallel_workers") == 3
    with pytest.raises(OptionError, match="option 'parallel_workers' expects a positive int, got 0"):
        option.parallel_workers(0)
    option.debug.verify(False)
    assert option.get_option("debug.verify") is False


def test_tilus_options_without_a_counterpart_say_so():
    option.debug.disable_ptxas_opt(False)  # the default state is fine
    with pytest.raises(OptionError, match="debug.disable_ptxas_opt: not supported by tilus-tvm"):
        option.debug.disable_ptxas_opt()
    with pytest.raises(AttributeError, match="tilus_tvm.option.bench_warmup is not supported"):
        option.bench_warmup(5)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_option'"):
        option.no_such_option


def test_a_launch_waits_for_the_kernel_when_launch_blocking_is_on(monkeypatch):
    import types

    import torch

    from tilus_tvm.runtime import jit

    events = []

    class Table:
        def dispatch(self, *args):
            events.append(("launch", args))

    script = types.SimpleNamespace(_tilus=types.SimpleNamespace(launch_table=Table()))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: events.append(("synchronize",)))
    jit.launch(script, (1, 2))
    assert events == [("launch", (1, 2))]
    option.debug.launch_blocking()
    jit.launch(script, (3,))
    assert events[1:] == [("launch", (3,)), ("synchronize",)]


def test_parallel_workers_sizes_the_tuning_builder(monkeypatch):
    from tilus_tvm.tune import measure

    monkeypatch.setattr(measure, "has_worker_pool", lambda: True)
    option.parallel_workers(5)
    assert [measure.default_builder().max_workers, measure.default_builder(max_workers=2).max_workers] == [5, 2]
