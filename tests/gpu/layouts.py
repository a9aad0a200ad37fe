"""Tensors laid out to meet (or miss) exactly the assumptions of one kernel spec.

A spec name reads `i32-u101-a16`: 32-bit indexing; per tensor argument the dim of
unit stride (x: none); 16-byte aligned pointers with sizes and strides divisible
by 16. Dims are padded apart so that the launcher cannot merge them: a view built
for ndim n runs an n-dim kernel.
"""

import dataclasses
import math

import torch

WIDE = 2**31 + 64  # a stride past int32: the launcher must pick 64-bit indexing
# Shapes for a spec's tensors, their last ndim dims: sizes divisible by 16 for aligned
# specs, odd ones for the others.
SHAPES = {"aligned": (3, 5, 2, 48), "odd": (3, 5, 2, 37)}
# Domain "special"'s values: NaN of either sign, infinities, signed zeros, ties of
# rounding (x.5, and 0.25 at one decimal) and the edges of ops' domains (1: acosh).
SPECIAL = (math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 2.5, -1.5, 0.25)
SPECIAL += (1.0, -1.0)
# The manifest's dtype names (aot/declare/space.py's DTYPES), as torch dtypes.
BY_NAME = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
    "fp64": torch.float64,
    "i8": torch.int8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "u8": torch.uint8,
    "bool": torch.bool,
    "fp8e4m3": torch.float8_e4m3fn,
    "fp8e5m2": torch.float8_e5m2,
}


@dataclasses.dataclass(frozen=True)
class Spec:
    width: int
    unit: tuple  # per tensor argument: dim or None
    aligned: bool

    @classmethod
    def parse(cls, name, num_tensors):
        parts = name.split("-")
        unit = (None,) * num_tensors
        for part in parts[1:]:
            if part.startswith("u"):
                unit = tuple(None if c == "x" else int(c) for c in part[1:])
        return cls(int(parts[0][1:]), unit, "a16" in parts)


def spec_shape(ndim, spec):
    """The shape of an `ndim`-dim kernel's tensors for `spec` (a Spec)."""
    return SHAPES["aligned" if spec.aligned else "odd"][4 - ndim :]


def size_in(served, size):
    """A size in the range a kernel serves (the launcher picks by rows and columns):
    `size` itself, else the range's low end plus as much over a multiple of 16."""
    low, high = served
    return size if low <= size <= high else min(high, -(-low // 16) * 16 + size % 16)


def values(shape, dtype, domain=None, device="cuda"):
    """Random values of `dtype`: normal floats (positive ones with domain "positive",
    a quarter of them `SPECIAL` ones at random places with domain "special", no two
    equal with domain "distinct"), complex numbers of such parts, small integers, or
    bools."""
    if dtype.is_complex:
        return torch.view_as_complex(values((*shape, 2), dtype.to_real(), domain, device))
    if dtype.is_floating_point and domain == "distinct":
        return _distinct(shape, dtype, device)
    if dtype.is_floating_point:
        base = torch.randn(shape, device=device)
        if domain == "special":
            pool = torch.tensor(SPECIAL, device=device)
            picked = pool[torch.randint(len(SPECIAL), shape, device=device)]
            base = torch.where(torch.rand(shape, device=device) < 0.25, picked, base)
        return (base.abs() + 0.25 if domain == "positive" else base).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, device=device) > 0.5
    low = 0 if dtype == torch.uint8 else -100
    return torch.randint(low, 100, shape, device=device, dtype=dtype)


def _distinct(shape, dtype, device):
    """Values of `shape` without ties, for functions whose order of equal elements torch
    leaves open (topk's indices): drawn without replacement from the finite values of
    `dtype` (bfloat16's for wider types: 65,279 of them; 63,487 of float16's), over the
    whole tensor or, for larger ones, along its last dim; a row longer still (a flat
    buffer a test views) is drawn with replacement."""
    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)
    narrow = torch.float16 if dtype == torch.float16 else torch.bfloat16
    pool = bits.view(narrow).float()
    pool = pool[pool.isfinite() & ~((pool == 0) & pool.signbit())]
    count = math.prod(shape)
    row = count if count <= pool.numel() else shape[-1]
    if row > pool.numel():
        drawn = pool[torch.randint(pool.numel(), (count,))]
    else:
        rows = [pool[torch.randperm(pool.numel())[:row]] for _ in range(count // max(row, 1))]
        drawn = torch.cat([pool[:0], *rows])
    return drawn.reshape(shape).to(dtype).to(device)


def strided(shape, dtype, *, unit, aligned, wide=False, domain=None, device="cuda"):
    """A random tensor of `shape` whose dim `unit` (or none) has stride 1, whose other
    dims are padded so that no two merge, and whose pointer is 16-byte aligned or not.
    `wide` puts 2^31 elements between the two entries of the outermost dim."""
    ndim = len(shape)
    if wide:
        outer = ([d for d in range(ndim) if d != unit] or [unit])[0]
        shape = tuple(2 if d == outer else size for d, size in enumerate(shape))
    order = [d for d in range(ndim) if d != unit] + ([unit] if unit is not None else [])
    strides = [0] * ndim
    step = 1 if unit is not None else 2
    for position, dim in enumerate(reversed(order)):
        if position == 0:
            strides[dim] = step
            continue
        inner = order[len(order) - position]
        step = strides[inner] * shape[inner] + (16 if aligned else 1)
        if aligned:
            step = -(-step // 16) * 16
        strides[dim] = step
    if wide:
        strides[outer] = WIDE if not aligned else -(-WIDE // 16) * 16
    offset = 0 if aligned else 1
    span = offset + sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True))
    storage = torch.empty(span + 1, dtype=dtype, device=device)
    view = storage.as_strided(shape, strides, offset)
    view.copy_(values(shape, dtype, domain, device))
    return view


def assert_kernel(nt, expected):
    ran = nt._C.last_kernel()
    assert ran == expected, f"expected {expected} to run, {ran} ran"
