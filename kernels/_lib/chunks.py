"""Rows cut into chunks: a program per chunk of a row, for reductions whose rows may be
long and few (an LLM's vocabulary of logits at batch 1, a whole tensor as one row).

A chunk is `blocks` tiles of `block_size` elements, fixed at build time; the number of
chunks a row has follows from its length at run time. A row of one chunk is reduced in
one launch; the results of longer ones are one per chunk, (rows, chunks), which a
second launch reduces as rows of their own (aot/runtime/_reductions.py): no program
waits for another, nothing is allocated by the values, and a CUDA graph captures both.
"""


def arrange_chunks(tensor, block_size, blocks):
    """(rows, n) -> one program per row and chunk, seeing (blocks,) tiles of (block_size,)."""
    arranged = tensor.tile((1, block_size)).tile((1, blocks))
    arranged.dtype = arranged.dtype.squeeze(0)
    arranged.dtype.dtype = arranged.dtype.dtype.squeeze(0)
    return arranged


def arrange_blocks(tensor, rows, block_size, blocks):
    """(rows, n) -> one program per block of `rows` rows and chunk of their length,
    seeing (blocks,) tiles of (rows, block_size): for rows that lie side by side in
    memory (stride 1 along dim 0), each tile read along its rows' first dim."""
    arranged = tensor.tile((rows, block_size)).tile((1, blocks))
    arranged.dtype = arranged.dtype.squeeze(0)
    return arranged


def arrange_block_results(tensor, rows):
    """(rows, chunks) -> the (rows,) elements of each program's block and chunk."""
    arranged = tensor.tile((rows, 1))
    arranged.dtype = arranged.dtype.squeeze(1)
    return arranged


def arrange_results(tensor):
    """(rows, chunks) -> the one element of each program's chunk."""
    return tensor.tile((1, 1))


def chunk_size(config):
    """The elements of one chunk under `config` (a Config of block_size and blocks)."""
    return config.premake["block_size"] * config.premake["blocks"]
