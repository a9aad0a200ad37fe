/* The integer functions launch grids are written in: aot/package/cexpr.py turns each kernel's
 * grid (a Python expression over sizes) into C that calls these, and the rendered
 * kernels.c includes them. Core: nothing here needs CUDA or Python. */
#ifndef NTOPS_GRID_H
#define NTOPS_GRID_H

#include <stdint.h>

/* Floor division and modulo with Python's semantics, for the launch grids
 * ninetoothed derives; a zero divisor only arises for empty tensors, which are
 * never launched. */
static inline int64_t nt_floordiv(int64_t a, int64_t b) {
    if (b == 0)
        return 0;
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static inline int64_t nt_floormod(int64_t a, int64_t b) {
    return b == 0 ? 0 : a - nt_floordiv(a, b) * b;
}

static inline int64_t nt_min(int64_t a, int64_t b) { return a < b ? a : b; }

static inline int64_t nt_max(int64_t a, int64_t b) { return a > b ? a : b; }

/* Split K: into how many parts (1 to `most`) to cut the K of each of `tiles` output
 * tiles, so that the programs' last wave over `slots` multiprocessors is full: the
 * fewest parts that fill it to 90% or more, else those that fill it most. A part
 * costs a partial tile's round trip through L2, a wave left a third empty costs a
 * third of a wave. Memory-bound products (decode sizes) run at the speed of their
 * fullest waves: 192 tiles on 132 multiprocessors leave the second wave 45% full;
 * cut in 2, 384 programs fill 3 waves to 97%. (This is the rule's one home: the
 * tests compare it with their own statement of it.) */
static inline int64_t nt_parts(int64_t tiles, int64_t slots, int64_t most) {
    int64_t best = 1, best_fill = -1;
    if (tiles <= 0 || slots <= 0)
        return 1;
    for (int64_t parts = 1; parts <= most; ++parts) {
        int64_t programs = tiles * parts, waves = (programs + slots - 1) / slots;
        int64_t fill = programs * 100 / (waves * slots);
        if (fill >= 90)
            return parts;
        if (fill > best_fill) {
            best = parts;
            best_fill = fill;
        }
    }
    return best;
}

#endif
