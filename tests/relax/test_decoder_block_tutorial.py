"""tutorials/05_relax_decoder_block.py runs: on a machine without a GPU it builds and exports, on a GPU it
also reloads the library in a fresh process and matches PyTorch."""
import subprocess
import sys

import torch

from tests.helpers import ROOT, TUTORIALS


def test_the_tutorial_runs(tmp_path):
    result = subprocess.run([sys.executable, str(TUTORIALS / "05_relax_decoder_block.py"), "--small", "--out",
                             str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "CUDA module: fatbin (cubin sm_" in out and "CUDA source in the library: no" in out
    assert "dispatched to tilus_flash_attention_float16_" in result.stderr  # the DispatchKernels log
    if torch.cuda.is_available():
        assert "OK: the exported block matches PyTorch" in out
    else:
        assert "running it needs a GPU" in out
    assert (tmp_path / "decoder_block.so").exists()
