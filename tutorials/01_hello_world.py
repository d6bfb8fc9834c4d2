"""Seed tutorial, program 1: Hello World (unchanged apart from the import)."""
import torch
import tilus_tvm as tilus


# define the kernel by subclassing `tilus.Script`
class MyKernel(tilus.Script):
    def __call__(self):
        # the configuration settings
        self.attrs.blocks = 1  # one thread block
        self.attrs.warps = 1  # one warp per thread block

        self.printf("Hello, World!")


# instantiate the kernel
kernel = MyKernel()

# launch the kernel on GPU
kernel()
torch.cuda.synchronize()
