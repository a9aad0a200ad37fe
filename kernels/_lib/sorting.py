"""Sorting rows, and selecting a row's k first elements, as torch orders floats: -0.0
equal to 0.0, NaN after +inf (every NaN alike), equal elements in index order (a
stable sort, so indices are torch's stable sort's).

Both order 64-bit keys: an order key of the value in the high 32 bits (`order_key`,
flipped for a descending order: the index order of equal elements stays), the
element's position in the low 32, which makes every key distinct and the sort
stable; the values written are gathered from the row by position, so they are the
input's own bits (-0.0 stays -0.0).

`sort_tile`: rows that fit one tile, sorted in registers (Triton's bitonic sort),
`ROWS` rows a program. `select_row`: the k first of a longer row (topk), a program
per row: a radix select over the order keys, 8 bits a pass, finds the k-th key
(`kth_key`); one more pass gathers the elements before it and the first of its
ties into the outputs' k slots (`gather_candidates`), which are then sorted in one
tile (`sort_candidates`). The outputs are the only memory written: no workspace, and
nothing the host waits for.
"""

import triton
import triton.language as tl

# ninetoothed copies these functions' source, not this module's globals, into the
# kernels it generates: the constants are written out where they are used.
# - 0x7FFFFFFF, a padding key's high word: past every element's (NaN's is at most
#   that, and the padding's positions come after the row's), so padding sorts last;
# - 8 bits a radix pass, 256 bins its histogram;
# - 4096: where gather_candidates stops counting ties (more than any k takes).


@triton.jit
def order_key(x):
    """Signed 32-bit keys in torch's order of the values `x` (fp16, bf16 or fp32):
    -0.0 and 0.0 one key, every NaN one key above +inf's. A half type's 16 bits are
    the key's high half, its low half zero. Zeros and NaN are told by their bits,
    not by comparing floats (Triton's interpreter compares bf16 as integers)."""
    if x.dtype.primitive_bitwidth == 16:
        bits = x.to(tl.int16, bitcast=True).to(tl.int32) << 16
        nan = 0x7FFF0000
        infinity = 0x7F800000 if x.dtype == tl.bfloat16 else 0x7C000000
    else:
        bits = x.to(tl.int32, bitcast=True)
        nan = 0x7FFFFFFF
        infinity = 0x7F800000
    magnitude = bits & 0x7FFFFFFF
    key = tl.where(bits < 0, bits ^ nan, bits)  # sign-magnitude to two's complement
    key = tl.where(magnitude == 0, 0, key)
    return tl.where(magnitude > infinity, nan, key)


@triton.jit
def ranked(x, descending):
    """`order_key` of `x`, its order reversed where `descending` (a runtime flag)."""
    key = order_key(x)
    return tl.where(descending != 0, ~key, key)


@triton.jit
def sort_key(x, descending, position, inside):
    """Sort keys of a tile's elements `x` at `position` (padding, last, where not
    `inside`): the `ranked` order key above the position, in 32 bits for half types
    (their ranks' 16 bits above a 16-bit position: the bitonic network exchanges half
    the registers of 64-bit keys; H100, sorting bf16 rows of 1000: 32.2 us in 64-bit
    keys), in 64 for fp32."""
    rank = ranked(x, descending)
    if x.dtype.primitive_bitwidth == 16:
        # A descending rank's low half is ones (~key): cleared. Padding takes NaN's
        # rank, the highest, above positions past the row's (a gather's indices).
        key = tl.where(inside, rank & -65536, 0x7FFF0000) | position
    else:
        high = tl.where(inside, rank, 0x7FFFFFFF).to(tl.int64)
        key = (high << 32) | position.to(tl.int64)
    return key


@triton.jit
def key_position(key):
    """The position a `sort_key` holds."""
    if key.dtype == tl.int32:  # noqa: SIM108 (a static branch: one key type compiled)
        position = key & 0xFFFF
    else:
        position = (key & 0xFFFFFFFF).to(tl.int32)
    return position


@triton.jit
def sort_tile(
    input, values, indices, rows, n, k, s_in_r, s_in_c, s_val_r, s_val_c, s_idx_r, s_idx_c,
    descending, ROWS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Rows of up to BLOCK elements, ROWS rows a program: each sorted whole, its first
    `k` (the outputs' row length: all of it for sort, fewer for topk) written. One row
    is a 1-dim tile: a (1, 4096) tile's shuffles took ptxas 417 s, the 1-dim tile's 6 s
    (sm_90, Triton 3.9)."""
    if ROWS == 1:  # the grid's programs are the rows
        row = tl.program_id(0)
        column = tl.arange(0, BLOCK)
        inside = column < n
        kept = column < k
    else:
        row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
        column = tl.arange(0, BLOCK)[None, :]
        inside = (row < rows) & (column < n)
        kept = (row < rows) & (column < k)
    x = tl.load(input + row * s_in_r + column * s_in_c, mask=inside)
    tl.static_assert(BLOCK <= 65536)  # positions fit a half type's 32-bit keys
    key = tl.sort(sort_key(x, descending, column, inside))
    position = key_position(key)
    gathered = tl.gather(x, position, len(x.shape) - 1)
    tl.store(values + row * s_val_r + column * s_val_c, gathered, mask=kept)
    tl.store(indices + row * s_idx_r + column * s_idx_c, position.to(tl.int64), mask=kept)


@triton.jit
def select_row(
    input, values, indices, n, k, s_in_r, s_in_c, s_val_r, s_val_c, s_idx_r, s_idx_c,
    descending, BLOCK: tl.constexpr, CANDIDATES: tl.constexpr,
):  # fmt: skip
    """The first `k` (at most CANDIDATES) elements of a row of `n` in the order
    `descending` says (topk's `largest`), sorted: one program per row, the row read in
    tiles of BLOCK once a radix pass (at most two for half types, four for fp32) and
    once more to gather them into their k slots of `values` and `indices`, which are
    then sorted in one tile."""
    row = tl.program_id(0)
    input += row * s_in_r
    values += row * s_val_r
    indices += row * s_idx_r
    kth, ties, low = kth_key(input, n, k, s_in_c, descending, BLOCK)
    gather_candidates(input, values, indices, n, k, kth >> low, ties, low, s_in_c, s_val_c,
                      s_idx_c, descending, BLOCK, 0)  # fmt: skip
    # The slots were written by other threads of the program: a barrier orders them.
    tl.debug_barrier()
    sort_candidates(values, indices, k, s_val_c, s_idx_c, descending, CANDIDATES)


@triton.jit
def select_part(
    input, values, indices, n, width, s_in_r, s_in_c, s_val_r, s_val_c, s_idx_r, s_idx_c,
    descending, size, BLOCK: tl.constexpr,
):  # fmt: skip
    """topk's first pass over long rows at small batches: program (row, part) of a grid
    of rows x cdiv(n, BLOCK) selects the k first elements (k = width / parts) of its
    part, parts = n // size of `size` elements each (a multiple of BLOCK, read BLOCK at
    a time), the last taking the rest of the row too (every part holds k or more where
    k <= size), into slots part * k.. of the row's `values` and `indices` (indices into
    the row), unsorted: of each value, the elements in index order, and the parts in
    order, so that a stable selection over the slots (the second pass) keeps equal
    elements in index order. Programs past the last part do nothing."""
    slots = tl.cdiv(n, BLOCK)
    program = tl.program_id(0)
    row = program // slots
    part = program % slots
    parts = n // size
    if part < parts:
        k = width // parts
        start = part * size
        length = tl.where(part == parts - 1, n - start, size)
        source = input + row * s_in_r + start * s_in_c
        kth, ties, low = kth_key(source, length, k, s_in_c, descending, BLOCK)
        gather_candidates(
            source, values + row * s_val_r + part * k * s_val_c,
            indices + row * s_idx_r + part * k * s_idx_c, length, k, kth >> low, ties, low,
            s_in_c, s_val_c, s_idx_c, descending, BLOCK, start,
        )  # fmt: skip


@triton.jit
def kth_key(input, n, k, stride, descending, BLOCK: tl.constexpr):
    """(key, ties, low): the k first elements of the row are those whose order key
    (`ranked`) shifted right by `low` is below `key`'s, and the first `ties` of those
    equal to it. A radix select from the high bits down: each pass counts, among the
    elements whose higher bits are the prefix found so far, the elements of each value
    of the next 8 bits, and extends the prefix by the value where the k-th falls; it
    stops once the key's bits are all found (two passes for half types' 16 bits, four
    for fp32's) or where the k first take every element of that value."""
    LOWEST: tl.constexpr = 32 - input.dtype.element_ty.primitive_bitwidth
    bins = tl.arange(0, 256)
    prefix = k * 0
    need = k
    shift = k * 0 + 24
    done = k * 0
    while (shift >= LOWEST) & (done == 0):
        # The prefix's bits (none in the first pass: shifting -1 by 32 in 64 bits).
        high = (tl.full((), -1, tl.int64) << (shift + 8)).to(tl.int32)
        sign = tl.where(shift == 24, 128, 0)  # the sign bit: unsigned order
        counts = tl.zeros((256,), tl.int32)
        for start in range(0, n, BLOCK):
            position = start + tl.arange(0, BLOCK)
            rank = ranked(tl.load(input + position * stride, mask=position < n), descending)
            inside = (position < n) & ((rank & high) == (prefix & high))
            digits = ((rank >> shift) & 255) ^ sign
            counts += tl.histogram(digits, 256, mask=inside)
        # The digit whose elements hold the k-th: the first whose running count reaches it.
        chosen = tl.sum((tl.cumsum(counts, 0) < need).to(tl.int32), 0)
        need -= tl.sum(tl.where(bins < chosen, counts, 0), 0)
        done = (need == tl.sum(tl.where(bins == chosen, counts, 0), 0)).to(tl.int32)
        prefix = prefix | ((chosen ^ sign) << shift)
        shift -= 8
    return prefix, need, shift + 8


@triton.jit
def gather_candidates(
    input, values, indices, n, k, threshold, ties, low, s_in, s_val, s_idx, descending,
    BLOCK: tl.constexpr, first,
):  # fmt: skip
    """Write the elements whose order key shifted right by `low` is below `threshold`
    (k - ties of them) in slots 0.., and the first `ties` of those equal to it after
    them, each in index order, with their indices counted from `first` (where `input`
    starts in its row). Tiles without any are passed over."""
    before_kth = k - ties
    # Elements before the k-th and ties seen so far, packed (ties << 16 | before) so that
    # one scan counts both: a tile adds fewer than 2^16 of each, before-elements number
    # fewer than k, and the ties' count stops at 4096 (more than any k takes).
    seen = k * 0
    for start in range(0, n, BLOCK):
        position = start + tl.arange(0, BLOCK)
        inside = position < n
        x = tl.load(input + position * s_in, mask=inside)
        rank = ranked(x, descending) >> low
        before = inside & (rank < threshold)
        tie = inside & (rank == threshold)
        flags = before.to(tl.int32) | (tie.to(tl.int32) << 16)
        found = tl.sum(flags, 0)
        if found != 0:
            running = tl.cumsum(flags, 0) - flags + seen  # exclusive
            slot = tl.where(before, running & 0xFFFF, before_kth + (running >> 16))
            taken = before | (tie & ((running >> 16) < ties))
            tl.store(values + slot * s_val, x, mask=taken)
            tl.store(indices + slot * s_idx, (first + position).to(tl.int64), mask=taken)
            seen += found
            seen = (tl.minimum(seen >> 16, 4096) << 16) | (seen & 0xFFFF)


@triton.jit
def sort_candidates(values, indices, k, s_val, s_idx, descending, CANDIDATES: tl.constexpr):
    """Sort the k slots of `values` (and their `indices`) in place: keyed by slot,
    which keeps equal values in index order (the slots of equal values were given in
    index order)."""
    slot = tl.arange(0, CANDIDATES)
    inside = slot < k
    # .cg: from L2, where the other threads' writes are (not a stale L1 line).
    x = tl.load(values + slot * s_val, mask=inside, cache_modifier=".cg")
    index = tl.load(indices + slot * s_idx, mask=inside, cache_modifier=".cg")
    tl.static_assert(CANDIDATES <= 65536)  # positions fit a half type's 32-bit keys
    key = tl.sort(sort_key(x, descending, slot, inside))
    order = key_position(key)
    # Every thread has loaded: the sort's results depend on every slot.
    tl.store(values + slot * s_val, tl.gather(x, order, 0), mask=inside)
    tl.store(indices + slot * s_idx, tl.gather(index, order, 0), mask=inside)
