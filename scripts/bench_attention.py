"""Attention: ``flash_attention`` (prefill) and ``decode_attention`` (KV cache) beside
``torch.nn.functional.scaled_dot_product_attention`` with its flash and cuDNN backends.

    python scripts/bench_attention.py        # about two minutes on an H100
    python scripts/bench_attention.py --configs "64,64,4,2,32 128,64,8,2,32 64,32,4,3,32"   # prefill only
    python scripts/bench_attention.py --decode-configs "32,4,8,0 32,4,8,3 16,4,8,4 64,8,8,2"   # decode only

``--configs``: FlashAttention configurations (block_q, block_kv, warps, stages, out_chunk and, optionally,
q_in_registers as 0/1) to time in place of the library's choice, one prefill table each (for tuning
FLASH_CONFIGS); ``--wgmma-configs``: the same for FlashAttentionWgmma on sm_90a (block_q, block_kv,
stages and optionally overlap as 0/1; WGMMA_FLASH_CONFIGS); ``--seqs`` limits the prefill lengths. On sm_90a ``ours`` is
FlashAttentionWgmma and the ``mma.sync`` column FlashAttention, timed in the same run.

``--decode-configs``: DecodeAttention configurations (block_kv, warps, lanes, stages, and optionally
splits and min_blocks: ``DecodeConfig``), one row each with GB/s and the ratio to SDPA at every KV
length (for tuning DECODE_CONFIGS); ``--decode-lengths`` limits the lengths (e.g. ``1024,8192,mixed``).

Prefill: batch 4, 32 heads, head_dim 128, float16, seq 1K/4K/16K, causal and not, in TFLOP/s
(4 * b * h * sq * sk * d, halved when causal). Decode: batch 32, 32 heads, one query token, KV
lengths 1K..32K (all equal; from 16K on the cache holds 2**31 elements or more: 64-bit addressing),
and a batch of mixed lengths in [1K, 32K] (SDPA with a padding mask), in GB/s of KV cache read. A
backend that is unavailable is shown as "-". Every result is checked against SDPA before timing.
Goals: prefill >= 0.8x SDPA flash; decode >= 0.9x SDPA.
"""
import argparse
import dataclasses
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tilus_tvm.schedules import attention, decode_attention, flash_attention  # noqa: E402
from tilus_tvm.utils import benchmark_func  # noqa: E402

# the module (tilus_tvm.schedules.decode_attention is the function): its DecodeConfig and DECODE_CONFIGS
decode_attention_module = importlib.import_module("tilus_tvm.schedules.decode_attention")

BATCH, HEADS, HEAD_DIM, DTYPE = 4, 32, 128, torch.float16
PREFILL_SEQS = [1024, 4096, 16384]
DECODE_BATCH, DECODE_LENGTHS = 32, (1024, 2048, 4096, 8192, 16384, 32768)


def sdpa_backend(name):
    """A function running SDPA on one backend (None when torch lacks it)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    backend = getattr(SDPBackend, name, None)
    if backend is None:
        return None

    def run(q, k, v, causal=False, attn_mask=None):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, attn_mask=attn_mask)

    return run


def try_time(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
        return benchmark_func(lambda: fn(*args, **kwargs), warmup=3, repeat=10)
    except Exception:  # noqa: BLE001 - an unavailable backend leaves its column empty
        return None


def column(value, fmt="{:9.1f}"):
    return fmt.format(value) if value is not None else f"{'-':>9}"


def prefill(label=""):
    flash, cudnn = sdpa_backend("FLASH_ATTENTION"), sdpa_backend("CUDNN_ATTENTION")
    print(f"\n# prefill: batch {BATCH}, heads {HEADS}, head_dim {HEAD_DIM}, {DTYPE} (TFLOP/s){label}; "
          f"goal: vs flash >= 0.8x")
    hopper = torch.cuda.get_device_capability() == (9, 0)  # ours is FlashAttentionWgmma; mma.sync beside it
    print(f"{'seq':>6}{'causal':>8}{'ours':>9}{'mma.sync':>9}{'flash':>9}{'cudnn':>9}{'vs flash':>10}"
          f"{'vs cudnn':>10}{'max err':>10}")
    for seq in PREFILL_SEQS:
        q, k, v = (torch.randn(BATCH, HEADS, seq, HEAD_DIM, dtype=DTYPE, device="cuda") for _ in range(3))
        for causal in (False, True):
            expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            error = (flash_attention(q, k, v, causal=causal).float() - expected.float()).abs().max().item()
            flops = 4 * BATCH * HEADS * seq * seq * HEAD_DIM / (2 if causal else 1)
            tflops = lambda ms: None if ms is None else flops / ms / 1e9  # noqa: E731
            if hopper:
                error = max(error, (flash_attention(q, k, v, causal=causal, wgmma=False).float()
                                    - expected.float()).abs().max().item())
            ours = tflops(try_time(flash_attention, q, k, v, causal=causal))
            legacy = tflops(try_time(flash_attention, q, k, v, causal=causal, wgmma=False)) if hopper else None
            t_flash = tflops(try_time(flash, q, k, v, causal)) if flash else None
            t_cudnn = tflops(try_time(cudnn, q, k, v, causal)) if cudnn else None
            ratio = ours / t_flash if ours and t_flash else None
            ratio_cudnn = ours / t_cudnn if ours and t_cudnn else None
            print(f"{seq:>6}{str(causal):>8}{column(ours)}{column(legacy)}{column(t_flash)}{column(t_cudnn)}"
                  f"{column(ratio, '{:9.2f}x')}{column(ratio_cudnn, '{:9.2f}x')}{error:10.1e}")
        del q, k, v


def decode_case(length):
    """(q, k, v, lens, mask, nbytes) of one decode length (an int, or "mixed"): a fresh cache."""
    capacity = DECODE_LENGTHS[-1] if length == "mixed" else length
    q = torch.randn(DECODE_BATCH, HEADS, 1, HEAD_DIM, dtype=DTYPE, device="cuda")
    k = torch.randn(DECODE_BATCH, HEADS, capacity, HEAD_DIM, dtype=DTYPE, device="cuda")
    v = torch.randn_like(k)
    if length == "mixed":
        gen = torch.Generator().manual_seed(0)
        lens = torch.randint(1024, capacity + 1, (DECODE_BATCH,), generator=gen).to(torch.int32).cuda()
        mask = (torch.arange(capacity, device="cuda")[None, :] < lens[:, None])[:, None, None, :]
    else:
        lens = torch.full((DECODE_BATCH,), length, dtype=torch.int32, device="cuda")
        mask = None
    nbytes = 2 * HEADS * HEAD_DIM * k.element_size() * int(lens.sum())
    return q, k, v, lens, mask, nbytes


def decode(lengths):
    flash, cudnn = sdpa_backend("FLASH_ATTENTION"), sdpa_backend("CUDNN_ATTENTION")
    print(f"\n# decode: batch {DECODE_BATCH}, heads {HEADS}, head_dim {HEAD_DIM}, {DTYPE} (GB/s of KV cache read), "
          f"{decode_attention_module.DECODE_CONFIGS[HEAD_DIM]}; goal: vs sdpa >= 0.9x")
    print(f"{'kv len':>8}{'ours':>9}{'sdpa':>9}{'flash':>9}{'cudnn':>9}{'vs sdpa':>10}{'max err':>10}")
    for length in lengths:
        q, k, v, lens, mask, nbytes = decode_case(length)
        gbs = lambda ms: None if ms is None else nbytes / ms / 1e6  # noqa: E731
        sdpa = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
        expected = sdpa(q, k, v)
        error = (decode_attention(q, k, v, lens).float() - expected.float()).abs().max().item()
        ours = gbs(try_time(decode_attention, q, k, v, lens))
        t_sdpa = gbs(try_time(sdpa, q, k, v))
        t_flash = gbs(try_time(flash, q, k, v, False, mask)) if flash else None
        t_cudnn = gbs(try_time(cudnn, q, k, v, False, mask)) if cudnn else None
        ratio = ours / t_sdpa if ours and t_sdpa else None
        print(f"{str(length):>8}{column(ours)}{column(t_sdpa)}{column(t_flash)}{column(t_cudnn)}"
              f"{column(ratio, '{:9.2f}x')}{error:10.1e}")
        del q, k, v, expected


def decode_sweep(configs, lengths):
    """One row per DecodeConfig: GB/s and the ratio to SDPA at each KV length (SDPA timed once per length).
    A result further than 2e-2 from SDPA's is shown as "wrong" instead of its speed."""
    print(f"\n# decode sweep: batch {DECODE_BATCH}, heads {HEADS}, head_dim {HEAD_DIM}, {DTYPE}; "
          f"GB/s of KV cache read (ratio to SDPA, goal >= 0.9x); config = block_kv,warps,lanes,stages,splits,min_blocks")
    rows = {config: [] for config in configs}
    sdpa_row = []
    for length in lengths:
        q, k, v, lens, mask, nbytes = decode_case(length)
        gbs = lambda ms: None if ms is None else nbytes / ms / 1e6  # noqa: E731
        sdpa = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
        expected = sdpa(q, k, v).float()
        t_sdpa = gbs(try_time(sdpa, q, k, v))
        sdpa_row.append(column(t_sdpa) + " " * 9)
        print(f"  {str(length):>6} {'sdpa':>14}: {column(t_sdpa).strip()}", flush=True)
        for config in configs:
            rows[config].append(decode_cell(config, q, k, v, lens, expected, gbs, t_sdpa))
            print(f"  {str(length):>6} {config_name(config):>14}: {rows[config][-1].strip()}", flush=True)
        del q, k, v, expected
    print(f"{'config':>18}" + "".join(f"{str(length):>18}" for length in lengths))
    print(f"{'sdpa':>18}" + "".join(sdpa_row))
    for config, cells in rows.items():
        print(f"{config_name(config):>18}" + "".join(cells))


def decode_cell(config, q, k, v, lens, expected, gbs, t_sdpa):
    """One sweep cell: GB/s and the ratio to SDPA, or why there is none (an error, a wrong result)."""
    try:
        error = (decode_attention(q, k, v, lens, config=config).float() - expected).abs().max().item()
    except Exception as exc:  # noqa: BLE001 - one bad configuration must not end the sweep
        print(f"  {config_name(config)}: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return f"{type(exc).__name__:>18}"
    if not error <= 2e-2:
        return f"{'wrong ' + format(error, '.0e'):>18}"
    ours = gbs(try_time(decode_attention, q, k, v, lens, config=config))
    ratio = f"({ours / t_sdpa:.2f}x)" if ours and t_sdpa else ""
    return f"{column(ours)}{ratio:>9}"


def config_name(config):
    """``block_kv,warps,lanes,stages,splits,min_blocks``: what --decode-configs takes."""
    return ",".join(map(str, dataclasses.astuple(config)))


def main():
    if not torch.cuda.is_available():
        print("bench_attention.py needs a CUDA GPU")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=None,
                        help="FlashAttention configs: bq,bkv,warps,stages,out_chunk[,q_in_registers] ...")
    parser.add_argument("--wgmma-configs", default=None,
                        help="FlashAttentionWgmma configs on sm_90a: block_q,block_kv,stages[,overlap] ...")
    parser.add_argument("--seqs", default=None, help="comma-separated prefill lengths (default 1024,4096,16384)")
    parser.add_argument("--decode-configs", default=None,
                        help="DecodeAttention configs: block_kv,warps,lanes,stages[,splits[,min_blocks]] ...")
    parser.add_argument("--decode-lengths", default=None,
                        help="comma-separated decode KV lengths, 'mixed' for the mixed batch (default: all)")
    options = parser.parse_args()
    if options.seqs:
        PREFILL_SEQS[:] = [int(v) for v in options.seqs.split(",")]
    lengths = list(DECODE_LENGTHS) + ["mixed"]
    if options.decode_lengths:
        lengths = [v if v == "mixed" else int(v) for v in options.decode_lengths.split(",")]
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if options.decode_configs:
        configs = [decode_attention_module.DecodeConfig.parse(text) for text in options.decode_configs.split()]
        decode_sweep(configs, lengths)
        return
    sweeps = [(options.wgmma_configs, attention.WGMMA_FLASH_CONFIGS, "FlashAttentionWgmma"),
              (options.configs, attention.FLASH_CONFIGS, "FlashAttention")]
    for texts, table, name in sweeps:
        if texts:  # one prefill table per configuration, set in the library's table
            for text in texts.split():
                config = tuple(int(v) for v in text.split(","))
                table[HEAD_DIM] = config
                attention._FLASH_KERNELS.clear()
                prefill(f", {name}{config}")
            return
    print(f"# FlashAttention config (block_q, block_kv, warps, stages, out_chunk): {attention.FLASH_CONFIGS[HEAD_DIM]}")
    prefill()
    decode(lengths)


if __name__ == "__main__":
    main()
