"""Shared tiling of element-wise ops: every tensor flattened and cut into blocks.

The runtime coalesces dims before launching, so a contiguous tensor of any ndim
arrives here as one dim and its blocks are contiguous runs of memory.
"""

from ntops_aot.aot.space import Config

# 1024 elements and 4 warps: 8 elements (fp32: two 128-bit loads) per thread.
BLOCK_SIZE = 1024
CONFIG = Config(num_warps=4, num_stages=1)


def arrangement(*tensors, block_size=BLOCK_SIZE):
    return tuple(
        tensor if tensor.ndim == 0 else tensor.flatten().tile((block_size,)) for tensor in tensors
    )
