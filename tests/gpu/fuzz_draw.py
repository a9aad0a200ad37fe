"""How a fuzz case is drawn (tests/gpu/fuzz.py): shapes, layouts, values, numbers
and out= tensors, every choice from a generator seeded with the case's seed and index."""

import math
import random

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_dense

from tests.gpu.fuzz_inputs import DTYPES, Base, Case, Operand, apply, contiguous_strides, numel

# Per tensor: sizes up to ~70 in up to 5 dims would make billions of elements.
MAX_NUMEL = 1 << 16
RANGES = {  # (low, high) pairs: small values, and the whole range
    torch.int8: ((-100, 100), (-128, 128)),
    torch.uint8: ((0, 100), (0, 256)),
    torch.int16: ((-100, 100), (-(2**15), 2**15)),
    torch.int32: ((-100, 100), (-(2**31), 2**31)),
    torch.int64: ((-100, 100), (-(2**62), 2**62)),
}
SENTINEL = {torch.bool: True, torch.uint8: 177}  # others: NaN, or -77
NDIMS = {0: 1, 1: 3, 2: 4, 3: 3, 4: 2, 5: 1}  # weights
OUT_FORMS = {"none": 52, "fresh": 22, "input": 10, "overlap": 4, "internal": 3, "dtype": 3}
OUT_FORMS |= {"shape": 3, "cpu": 1}


class Draw:
    """Draws one case: every choice comes from `rng` (seeded with "seed-index") and
    every tensor value from `generator` (seeded from `rng`), in a fixed order."""

    def __init__(self, seed, index):
        self.rng = random.Random(f"{seed}-{index}")
        self.generator = torch.Generator().manual_seed(self.rng.getrandbits(63))
        self.bases, self.shapes, self.logical = [], {}, {}
        self.notes, self.outside = [], []
        self.dtype = None
        self.precision = "highest"

    def case(self, seed, index, op, args, kwargs):
        return Case(
            seed, index, op, self.dtype, tuple(self.bases), tuple(args), dict(kwargs),
            dict(self.shapes), tuple(dict.fromkeys(self.notes)), tuple(self.outside),
            self.precision,
        )  # fmt: skip

    # ---- choices ---------------------------------------------------------------

    def chance(self, p):
        return self.rng.random() < p

    def pick(self, options):
        return self.rng.choice(tuple(options))

    def weighted(self, weights):
        return self.rng.choices(tuple(weights), tuple(weights.values()))[0]

    def note(self, text):
        self.notes.append(text)

    def out_of_space(self, reason):
        self.outside.append(reason)

    def principal(self, dtypes):
        """The call's dtype: one the op is built for, or (one call in 12) another."""
        others = [dtype for dtype in DTYPES if dtype not in dtypes]
        self.dtype = self.pick(others if others and self.chance(1 / 12) else dtypes)
        return self.dtype

    # ---- shapes ----------------------------------------------------------------

    def size(self, long=True):
        roll = self.rng.random()
        if roll < 0.03:
            return 0
        if roll < 0.2:
            return 1
        if roll < 0.96 or not long:
            return self.rng.randint(2, 70)
        return self.rng.randint(71, 3000)

    def shape(self, low=0, high=5):
        ndims = {n: w for n, w in NDIMS.items() if low <= n <= high}
        return capped([self.size() for _ in range(self.weighted(ndims))])

    def broadcast(self, shape):
        """A shape that broadcasts with `shape`: some of its trailing dims, some made 1,
        maybe a new leading dim, maybe larger where `shape` has 1."""
        partner = []
        for size in shape[len(shape) - self.rng.randint(0, len(shape)) :]:
            grown = self.rng.randint(2, 9)
            if size == 1 and self.chance(0.3) and numel(partner) * grown <= 4096:
                partner.append(grown)
            else:
                partner.append(1 if self.chance(0.3) else size)
        if len(partner) == len(shape) < 5 and self.chance(0.15):
            partner.insert(0, self.pick((1, 2, 3)))
        return tuple(partner)

    # ---- tensors ---------------------------------------------------------------

    def tensor(self, shape, dtype, *, domain=None, layout="any", specials="all", scale=None,
               exotic=True, values=None, on_cpu=False):  # fmt: skip
        """An Operand of `shape` and `dtype`: for layout "any", contiguous or a sliced,
        permuted or expanded view ("plain": contiguous, "strided": not expanded,
        "expanded": expanded); maybe with the negative bit, maybe wrapped (exotic);
        holding `values` or random ones."""
        shape = tuple(shape)
        base_shape, steps, expand, inner = self._layout(shape, "plain" if on_cpu else layout)
        if values is None:
            logical = self.values(inner, dtype, domain, specials, scale)
        else:
            logical = values
            for dim in expand:
                logical = logical.narrow(dim, 0, 1)
        neg = exotic and dtype.is_floating_point and self.chance(0.04)
        imag = neg and dtype == torch.float32 and self.chance(0.5)
        if imag:
            base = torch.full(base_shape, complex(math.nan, math.nan), dtype=torch.complex64)
            raw = base.imag
        else:
            sentinel = math.nan if dtype.is_floating_point else SENTINEL.get(dtype, -77)
            base = raw = torch.full(base_shape, sentinel, dtype=dtype)
        for step in steps:
            raw = apply(raw, step)
        raw.copy_(-logical if neg else logical)
        steps = [("imag",)] * imag + steps
        if expand:
            steps.append(("expand", shape))
        if neg and not imag:
            steps.append(("neg",))
        if neg:
            self.note("a tensor with the negative bit set")
        wrap = None
        # Not both: a wrapper around a tensor with the negative bit came out of the
        # harness's two copies with opposite signs (references fuzzed against
        # themselves, tests/unit/test_fuzz_harness.py: seed 0, cases 288 and 1044 once
        # the FP8 ops joined the draw), a fault of the copies, not of the calls.
        if exotic and not neg and self.chance(0.02):
            wrap = self.pick(("subclass", "fake"))
            self.out_of_space(f"a {wrap} tensor")
        operand = Operand(len(self.bases), tuple(steps), wrap)
        self.bases.append(Base(base, on_cpu))
        self.shapes[operand] = (shape, dtype)
        self.logical[operand] = logical
        return operand

    def view_of(self, operand, steps, shape):
        """Another view of `operand`'s memory: its steps and then `steps`."""
        view = Operand(operand.base, operand.steps + tuple(steps))
        self.shapes[view] = (tuple(shape), self.shapes[operand][1])
        return view

    def view(self, operand):
        """`operand` as a view of its base's CPU values."""
        view = self.bases[operand.base].values
        for step in operand.steps:
            view = apply(view, step)
        return view

    def dense(self, operand):
        """Whether `operand` is a permutation of a contiguous tensor, in device memory."""
        return not self.bases[operand.base].on_cpu and is_dense(self.view(operand))

    def _layout(self, shape, layout):
        """(base shape, slice and permute steps, expanded dims, pre-expansion shape)."""
        ndim = len(shape)
        expand = set()
        if layout == "expanded" or (layout == "any" and self.chance(0.15)):
            expand = {d for d in range(ndim) if shape[d] > 1 and self.chance(0.5)}
            if layout == "expanded" and not expand:
                expand = {d for d in range(ndim) if shape[d] > 1}
        inner = tuple(1 if d in expand else size for d, size in enumerate(shape))
        order = list(range(ndim))
        if layout in ("any", "strided") and ndim > 1 and self.chance(0.3):
            self.rng.shuffle(order)  # storage dim j holds view dim order[j]
        sliced = layout in ("any", "strided") and self.chance(0.3)
        # or dense but offset, with room past its end (for out= views that overlap it)
        padded = layout in ("any", "strided") and not sliced and self.chance(0.2)
        base_shape, steps = [], []
        spread = numel(max(size, 1) for size in inner)  # steps multiply the base's elements
        for j, dim in enumerate(order):
            size = inner[dim]
            every = self.pick((1, 1, 2, 3)) if sliced and spread < 4 * MAX_NUMEL else 1
            spread *= every
            start = self.pick((0, 0, 1, 2)) if sliced else 0
            pad = self.pick((0, 0, 1)) if sliced else 0
            if padded and j == 0:
                start, pad = self.pick((0, 1)), self.pick((1, 2))
            stop = start + (size - 1) * every + 1 if size else start
            base_shape.append(stop + pad)
            if (start, every, pad) != (0, 1, 0):
                steps.append(("slice", j, start, stop, every))
        if order != sorted(order):
            steps.append(("permute", tuple(order.index(d) for d in range(ndim))))
        return tuple(base_shape), steps, sorted(expand), inner

    def values(self, shape, dtype, domain=None, specials="all", scale=None):
        """Random values: normal floats at a random scale (positive ones for domain
        "positive"), now and then with special values; integers small or over their
        whole range; bools."""
        generator = self.generator
        if dtype == torch.bool:
            return torch.rand(shape, generator=generator) < 0.5
        if not dtype.is_floating_point:
            low, high = self.pick(RANGES[dtype])
            return torch.randint(low, high, shape, generator=generator).to(dtype)
        scale = scale or self.pick((1.0,) * 6 + (1e-2, 1e-4, 30.0, 1e3))
        x = torch.randn(shape, generator=generator, dtype=torch.float64) * scale
        if domain == "positive":
            x = x.abs() + 0.01 * scale
        x = x.to(dtype)
        if specials and x.numel() and self.chance(0.1):
            pool = special_values(dtype, specials)
            flat = x.view(-1)
            for _ in range(self.rng.randint(1, min(4, x.numel()))):
                flat[self.rng.randrange(x.numel())] = self.pick(pool)
            self.note("special values (nan, inf, -0.0, huge, tiny or subnormal)")
        return x

    def number(self, dtype, near=None):
        """A Python number to combine with a tensor of `dtype`: one of its kind, now and
        then another kind (outside where torch would promote), or one of `near`'s
        values (an Operand: comparisons that hit equal elements)."""
        values = self.logical.get(near)
        if values is not None and values.numel() and self.chance(0.3):
            value = values.reshape(-1)[self.rng.randrange(values.numel())].item()
            if dtype in (torch.float16, torch.bfloat16) and self.chance(0.5):
                value *= 1 + 2**-13  # rounds back to the element in the tensor's dtype
            return value
        kind = dtype if self.chance(0.9) else self.pick(DTYPES)
        if kind == torch.bool:
            value = self.pick((True, False))
        elif kind.is_floating_point:
            value = self.pick((0.0, 1.0, -1.0, 2.0, 0.5, -1.5, 3.0, 0.1, 1e-3, 7.0, -2.0))
            value = self.pick((math.nan, math.inf, -math.inf)) if self.chance(0.04) else value
        else:
            value = self.pick((0, 1, -1, 2, 7, 100, 300, -129, 2**40))
        self.promotes(dtype, value)
        return value

    def promotes(self, dtype, other, shape=(2,)):
        """Marks the call outside the built space where `other` (a number or a dtype of
        a 0-dim tensor) with a tensor of `dtype` and `shape` promotes to another dtype:
        the kernels compute in their input's."""
        given = torch.zeros((), dtype=other) if isinstance(other, torch.dtype) else other
        promoted = torch.result_type(torch.zeros(shape, dtype=dtype), given)
        if promoted != dtype:
            what = f"a 0-dim {other} tensor" if given is not other else f"the number {other!r}"
            self.out_of_space(f"{what} promotes {dtype} to {promoted}")

    def out(self, inputs, shape, dtype, *, in_place=True):
        """An out= tensor for a result of `shape` and `dtype`, or None: a fresh one in
        any layout, of another dtype, shape (both outside the built space) or device,
        and for element-wise ops (`in_place`) an input itself, memory partly
        overlapping an input's, or one with elements that share memory."""
        form = self.weighted(OUT_FORMS)
        shape = tuple(shape)
        if not in_place and form in ("input", "overlap", "internal"):
            form = "fresh"  # what torch does with those is undefined (it may race)
        if form == "input":
            same = [x for x in inputs if isinstance(x, Operand) and not x.wrap]
            same = [x for x in same if self.shapes[x] == (shape, dtype)]
            if same:
                self.note("out= is an input")
                return self.pick(same)
        if form == "overlap":
            overlapping = self._overlapping(inputs, shape, dtype)
            if overlapping is not None:
                return overlapping
        if form == "internal" and any(size > 1 for size in shape):
            self.note("out= has elements that share memory")
            return self.tensor(shape, dtype, layout="expanded", exotic=False)
        if form == "dtype":
            self.out_of_space("out= of another dtype than the result's")
            dtype = self.pick(other for other in DTYPES if other != dtype)
        if form == "shape":
            self.out_of_space("out= of another shape (torch resizes it)")
            shape = (*shape[:-1], shape[-1] + 1) if shape else (2,)
        if form == "cpu":
            self.note("out= on the CPU")
            return self.tensor(shape, dtype, layout="plain", exotic=False, on_cpu=True)
        if form == "none":
            return None
        return self.tensor(shape, dtype, layout="any" if in_place else "strided", exotic=False)

    def _overlapping(self, inputs, shape, dtype):
        """An out= view one element off a dense input's memory (torch cannot tell
        overlaps of other layouts, and lets the result race)."""
        size = numel(shape)
        for x in inputs:
            if not isinstance(x, Operand) or x.wrap or not self.dense(x) or size < 2:
                continue
            base = self.bases[x.base].values
            start = self.view(x).storage_offset()
            fits = [o for o in (start + 1, start - 1) if o >= 0 and o + size <= base.numel()]
            if base.dtype == dtype and fits:
                offset = fits[0]
                self.note("out= partly overlaps an input's memory")
                step = ("as_strided", shape, contiguous_strides(shape), offset)
                view = Operand(x.base, (step,))
                self.shapes[view] = (shape, dtype)
                return view
        return None


def capped(sizes):
    """`sizes` with the largest halved until the tensor has at most MAX_NUMEL elements
    (or would have, with its zero sizes made 1)."""
    sizes = list(sizes)
    while numel(max(size, 1) for size in sizes) > MAX_NUMEL:
        largest = sizes.index(max(sizes))
        sizes[largest] //= 2
    return tuple(sizes)


def special_values(dtype, kind):
    """Special values of `dtype`: for kind "all" non-finite, signed zero, huge, tiny and
    subnormal ones; for "finite-range" all but the huge (sums of them overflow in an
    order-dependent way)."""
    info = torch.finfo(dtype)
    values = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0, -1.0, info.tiny, info.tiny / 4]
    return [*values, info.max, -info.max, info.eps] if kind == "all" else values
