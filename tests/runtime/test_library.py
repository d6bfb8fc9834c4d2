"""Loading exported kernel libraries without TVM's Python package (tilus_tvm/runtime/library.py)."""
import json
import subprocess
import sys

import pytest
import torch

from tests.helpers import ROOT

LOAD = """
import json, sys, torch
from tilus_tvm.runtime.library import load_library

function = load_library(sys.argv[1])["add_one"]
a = torch.rand(8)
b = torch.full_like(a, float("nan"))
function(8, a, b)
print(json.dumps({"correct": bool(torch.equal(b, a + 1)), "tvm": "tvm" in sys.modules}))
"""


@pytest.fixture(scope="module")
def cpu_library(tmp_path_factory):
    """An add-one function compiled for the CPU (llvm) and exported: loads like a kernel library."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def add_one(n: T.int32, a: T.handle, b: T.handle):
        A = T.match_buffer(a, (n,), "float32")
        B = T.match_buffer(b, (n,), "float32")
        for i in range(n):
            B[i] = A[i] + T.float32(1)

    path = tmp_path_factory.mktemp("library") / "add_one.so"
    tvm.compile(add_one, target="llvm", tir_pipeline="tirx").export_library(str(path))
    return str(path)


def test_a_library_loads_and_runs_without_importing_tvm(cpu_library):
    result = subprocess.run([sys.executable, "-c", LOAD, cpu_library], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"correct": True, "tvm": False}


def test_with_tvm_imported_the_library_goes_through_tvm(cpu_library):
    import tvm

    from tilus_tvm.runtime.library import load_library

    module = load_library(cpu_library)
    assert isinstance(module, tvm.runtime.Module)
    a = torch.rand(8)
    b = torch.empty(8)
    module["add_one"](8, a, b)
    torch.testing.assert_close(b, a + 1)
