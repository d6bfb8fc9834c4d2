"""What ptxas makes of a kernel's PTX: registers per thread and spill bytes (CPU only; needs ptxas)."""
import re
import shutil
import subprocess
import tempfile

import pytest


def ptxas_resources(ptx: str, arch: str = "sm_90") -> dict:
    """``{"registers": int, "spill_stores": int, "spill_loads": int}`` from ``ptxas -v`` on ``ptx``
    (one kernel); skips the test where ptxas is not installed."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas is not on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/kernel.ptx"
        with open(src, "w") as f:
            f.write(ptx)
        done = subprocess.run([ptxas, f"-arch={arch}", "-v", src, "-o", f"{tmp}/kernel.cubin"],
                              capture_output=True, text=True, check=True)
    report = done.stdout + done.stderr
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert registers and spills, f"unexpected ptxas report:\n{report}"
    return {"registers": int(registers.group(1)), "spill_stores": int(spills.group(1)),
            "spill_loads": int(spills.group(2))}
