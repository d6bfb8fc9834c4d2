"""Shared test helpers."""
import importlib.util
import pathlib
import sys

import pytest

import tilus_tvm as tilus

ROOT = pathlib.Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"


def load_tutorial(name: str):
    """Import tutorials/<name>.py as a module (its main() does not run)."""
    path = TUTORIALS / f"{name}.py"
    module_name = f"tutorial_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # inspect.getsource needs the module registered
    spec.loader.exec_module(module)
    return module


class CaseScript(tilus.Script):
    """Base of the test kernels whose body picks a mistake (or a variant) by ``self.case``."""

    def __init__(self, case):
        super().__init__()
        self.case = case


@pytest.fixture(autouse=True)
def private_cache(tmp_path):
    """A compiled-kernel cache of the test's own (autouse wherever a test module imports it)."""
    tilus.set_cache_dir(tmp_path)
    yield
    tilus.set_cache_dir(None)


@pytest.fixture
def launches(monkeypatch):
    """Kernel launches recorded as ``(script, args)`` instead of run (the launch path to the GPU is
    skipped; what a library function launches, and with what, can be checked on the CPU)."""
    import tilus_tvm.lang.script as script_module

    recorded = []
    monkeypatch.setattr(script_module, "_RUNTIME_LAUNCH", lambda script, args: recorded.append((script, args)))
    return recorded
