"""Shared tiling of row-wise reductions over the last dim.

Each program owns one row and sees it as `num_blocks` tiles of `block_size`
elements, so one compiled kernel serves every row length: the runtime merges the
leading dims, and an AOT build cannot specialise on the row length as a JIT would.
"""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.space import Config

# 1024 elements per tile, 4 warps: a row of 8192 fp16 is 8 iterations of 16-byte loads.
BLOCK_SIZE = 1024
CONFIG = Config(num_warps=4, num_stages=2)
# Row normalizations read rows of a model's hidden size (2048-8192 in Llama, Qwen and
# Mistral): one 4096-element tile in 8 warps takes Llama-3-8B's row in one load per
# pass. In 1024-element tiles a decode step's single row was four dependent loads per
# pass: 4.9 us on an H100, 2.7 in one tile (torch.compile's kernel: 2.1-2.4).
NORM_CONFIG = Config({"block_size": 4096}, num_warps=8, num_stages=2)


def arrange_rows(tensor, block_size=BLOCK_SIZE):
    """(*rows, n) -> one program per row, seeing (num_blocks,) tiles of (block_size,)."""
    leading = tensor.ndim - 1
    arranged = tensor.tile((1,) * leading + (block_size,)).tile((1,) * leading + (-1,))
    arranged.dtype = arranged.dtype.squeeze(tuple(range(leading)))
    arranged.dtype.dtype = arranged.dtype.dtype.squeeze(tuple(range(leading)))
    return arranged


def arrangement(*tensors, block_size=BLOCK_SIZE):
    """Every tensor by rows (`arrange_rows`): ops that read and write whole rows."""
    return tuple(arrange_rows(tensor, block_size) for tensor in tensors)


def arrange_vector(vector, rows, block_size=BLOCK_SIZE):
    """A (n,) vector read by every row of `rows` (the result of `arrange_rows`)."""
    arranged = vector.tile((block_size,)).tile((-1,))
    for _ in range(rows.ndim - 1):
        arranged = arranged.unsqueeze(0)
    return arranged.expand((*tuple(rows.shape[:-1]), -1))


def online_max_sum(input, compute):
    """The row's maximum and the sum of exp(x - maximum), in dtype `compute`, from one
    pass over the tiles of `input` (arranged by `arrange_rows`, padded with -inf): the
    running sum is rescaled whenever the maximum grows (online softmax). ninetoothed
    inlines it into softmax's and log_softmax's applications.

    While every element seen is -inf the sum stays 0 (exponents taken from 0, not
    from -inf: -inf - -inf is NaN), so a row whose first tile is all -inf, as a
    left-padded row masked with -inf is, sums its later elements as torch does; a
    row of -inf only sums to 0, and its softmax is NaN as torch's is."""
    row_max = ntl.cast(float("-inf"), compute)
    row_sum = ntl.cast(0.0, compute)
    for i in range(input.shape[0]):
        x = ntl.cast(input[i], compute)
        new_max = ntl.maximum(row_max, ntl.max(x, 0))
        shift = ntl.where(new_max == float("-inf"), 0.0, new_max)
        row_sum = row_sum * ntl.exp(row_max - shift) + ntl.sum(ntl.exp(x - shift), 0)
        row_max = new_max
    return row_max, row_sum
