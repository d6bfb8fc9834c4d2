"""Kernels that print tiles with print_tensor, for tests/instructions/test_print_tensor.py (CPU: what
they compile to; GPU: what they print, run in a subprocess by ``python -m
tests.instructions.print_kernels SEED DATA_PATH``)."""
import sys

import torch

import tilus_tvm as tilus
from tilus_tvm import float16, float32, int32
from tilus_tvm.layout import local, spatial


class PrintTiles(tilus.Script):
    """One block prints: a float32 [4, 8] register tile in a layout where each thread holds two rows,
    an int32 [2, 3, 4] register tile, a bool tile, and a float16 [3, 20] tile from shared memory (20
    columns: more than one printf call per row)."""

    def __call__(self, x_ptr: ~float32, i_ptr: ~int32, h_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[4, 8])
        gi = self.global_view(i_ptr, dtype=int32, shape=[2, 3, 4])
        gh = self.global_view(h_ptr, dtype=float16, shape=[3, 20])
        x = self.load_global(gx, offsets=[0, 0], shape=[4, 8], layout=local(2, 1).spatial(2, 8))
        self.print_tensor("x =", x)
        i = self.load_global(gi, offsets=[0, 0, 0], shape=[2, 3, 4])
        self.print_tensor("i:", i)
        self.print_tensor("positive", x > 0.0)
        h = self.load_global(gh, offsets=[0, 0], shape=[3, 20])
        sh = self.shared_tensor(dtype=float16, shape=[3, 20])
        self.store_shared(sh, h)
        self.print_tensor("h", sh, fmt="%6.2f")
        self.free_shared(sh)


class PrintOneBlock(tilus.Script):
    """A 2-D grid of 3 x 2 blocks; only block (1, 1) prints: its [2, 32] tile doubled (a layout over 64
    of the block's 128 threads) and the row maxima (a reduction's layout, replicated over the 32
    threads of each row)."""

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [3, 2]
        self.attrs.warps = 4
        g = self.global_view(x_ptr, dtype=float32, shape=[6, 32])
        x = self.load_global(g, offsets=[self.blockIdx.x * 2, 0], shape=[2, 32], layout=spatial(2, 32))
        if self.blockIdx.x == 1 and self.blockIdx.y == 1:
            self.print_tensor("", x * 2.0, fmt="%7.2f")
            self.print_tensor("row max", self.max(x, dim=1, keepdim=True))


def data(seed: int) -> dict:
    """The inputs of both kernels: values whose printed digits are exact (no rounding to agree on)."""
    generator = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randint(-800, 800, (4, 8), generator=generator).float() / 8,
        "i": torch.randint(-99999, 99999, (2, 3, 4), generator=generator, dtype=torch.int32),
        "h": (torch.randint(-400, 400, (3, 20), generator=generator).float() / 4).half(),
        "y": torch.randint(-1600, 1600, (6, 32), generator=generator).float() / 4,
    }


def main(seed: int, path: str) -> None:
    inputs = data(seed)
    torch.save(inputs, path)
    cuda = {k: v.cuda() for k, v in inputs.items()}
    PrintTiles()(cuda["x"], cuda["i"], cuda["h"])
    torch.cuda.synchronize()
    PrintOneBlock()(cuda["y"])
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
