"""temporary A/B: 2-3-bit weights at 9-16 rows on the TMA ring in groups of warps (deleted before the end)."""
import sys
from dataclasses import replace
sys.argv = [sys.argv[0]]
import bench_quantized as bq
from tilus_tvm.schedules import quantized_configs as qc

G2 = replace(qc._SIXTEEN_ROW_GROUPS, warps=2, units_per_warp=4)
variants = {
    "table": None,
    "ring 2w4u groups": G2,
    "ring 2w4u groups ws4": replace(G2, weight_stages=4),
    "ring 4w2u groups": qc._SIXTEEN_ROW_GROUPS,
    "decode groups 2w4u bm16": replace(qc._STAGED_DECODE_GROUPS, warps=2, units_per_warp=4, block_m=16),
}
for name, m in (("uint3b", 16), ("uint2b", 16), ("int3b", 16), ("uint3b", 12), ("uint2b", 12)):
    w = bq.Weights(name, 8192, 28672)
    times = {v: [] for v in variants}
    bad = set()
    for r in range(3):
        for v, cfg in variants.items():
            if v in bad:
                continue
            try:
                times[v].append(bq.run_ours(w, m, cfg)[0])
            except Exception as e:  # noqa
                print(name, m, v, "failed", type(e).__name__, str(e)[:200]); bad.add(v)
    for v, t in times.items():
        if t:
            print(f"{name:8} {m:3} {v:28} {min(t):7.1f} {max(t):7.1f}", flush=True)
    del w
