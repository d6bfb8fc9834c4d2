"""GPU: an @autotune Matmul tunes at its first launch with the tuning's PoolBuilder and MetaSchedule's LocalRunner,
computes the right product, and later instances and launches reuse the choice."""
import pytest

import tilus_tvm as tilus
from tilus_tvm.schedules.matmul import Matmul
from tilus_tvm.tune import tunable_of

pytestmark = pytest.mark.gpu


@tilus.autotune("block_m, block_n", [(64, 128), (128, 128), (128, 256)])
@tilus.autotune("stages", [3, 4])
@tilus.autotune("warps", [4, 8])
class TunedMatmul(Matmul):
    """The library Matmul with 12 configurations (one of which, 128x256 with 4 stages, may not fit)."""


def test_first_launch_tunes_and_is_correct():
    import torch

    m, n, k = 1000, 1024, 512
    a = (torch.rand(m, k, device="cuda") - 0.5).half()
    b = (torch.rand(k, n, device="cuda") - 0.5).half()
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    kernel = TunedMatmul(block_k=32)
    kernel(m, n, k, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    result = tilus.tune(TunedMatmul(block_k=32), m, n, k, a, b, c)
    assert not result.tuned  # the launch recorded it
    assert sum(t.ok for t in result.trials) >= 8
    print(result.table())
    c2 = torch.full_like(c, float("nan"))
    TunedMatmul(block_k=32)(m, n, k, a, b, c2)  # another instance: the database's choice, no tuning
    torch.testing.assert_close(c2, c)


def test_tune_ahead_of_time_with_meta_tensors():
    import torch

    a = torch.empty(2048, 2048, dtype=torch.float16, device="meta")
    result = tilus.tune(TunedMatmul(), 2048, 2048, 2048, a, a, a)
    assert result.tuned and result.best.seconds > 0
    best = result.instantiate()
    assert tunable_of(best) is None and best.hyper_parameters()["block_m"] == result.config["block_m"]
