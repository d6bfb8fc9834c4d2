"""The large tuning space of ``bench_tuning.py``'s cost-model part, in a module of its own so that the
lowering workers (fresh processes, given this script directory on their import path) can import it.

``WideMatmul`` is the library ``Matmul`` over 18 tiles x 3 ``block_k`` x 4 ``stages`` = 216
configurations: every tile keeps its warp tile within 64 x 64 (the register file of one thread),
so no candidate spends minutes in ptxas spilling; some do not fit the shared memory (5 stages of
large tiles) and are skipped with their reason.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import tilus_tvm as tilus  # noqa: E402
from tilus_tvm.schedules.matmul import Matmul  # noqa: E402

WIDE_TILES = [(16, 64, 2), (16, 128, 2), (16, 128, 4), (16, 256, 4), (32, 64, 2), (32, 128, 4), (32, 256, 4),
              (32, 256, 8), (64, 64, 2), (64, 64, 4), (64, 128, 4), (64, 256, 8), (128, 64, 4), (128, 128, 4),
              (128, 128, 8), (128, 256, 8), (256, 64, 4), (256, 128, 8)]


@tilus.autotune("block_m, block_n, warps", WIDE_TILES)
@tilus.autotune("block_k", [16, 32, 64])
@tilus.autotune("stages", [2, 3, 4, 5])
class WideMatmul(Matmul):
    """Matmul over 216 configurations (Tilus semantics: ``WideMatmul()`` is tunable)."""
