"""sort, argsort, msort and topk (kernels/sort.py): values and indices compared exactly
with torch's stable sort (the kernels sort stably whatever `stable` says; torch's
unstable sort may order ties otherwise), topk with the stable sort's first k: equal
elements in index order, NaN after +inf (first where descending), -0.0 equal to 0.0
(the values written are the input's own bits)."""

import math
import types

import pytest
import torch

from tests.gpu.layouts import strided

# Row lengths a tile kernel's test sorts, unaligned and aligned (sizes of 16), and the
# "select" kernel's (topk of rows longer than the largest tile), with its k.
LENGTHS = {"64": (37, 48), "1024": (123, 1008), "select": (9000, 9008), "parts": (9000, 9008)}
SELECTED = (37, 48)
# The longest rows sorted, and topk's largest k (aot/runtime/_sort.py's LONGEST and
# CANDIDATES).
LONGEST = CANDIDATES = 1024
# The most rows whose topk of long rows runs in parts (aot/runtime/_sort.py's).
PARTED_ROWS = 256


def num_tensors(variant):
    return 3  # input, values, indices


def stable_sort(input, dim=-1, descending=False, stable=False):
    """torch.sort, stably whatever `stable` says: the kernels' order of equal elements.
    On the CPU: its NaN are all largest, as torch's comparisons take them (torch's CUDA
    radix sort, which its stable sort is, puts a NaN with the sign bit below -inf)."""
    order = torch.sort(input.cpu(), dim=dim, descending=descending, stable=True)
    return torch.return_types.sort(tuple(part.to(input.device) for part in order))


def stable_argsort(input, dim=-1, descending=False, stable=False):
    return stable_sort(input, dim, descending).indices


def stable_msort(input):
    return stable_sort(input, dim=0).values


def stable_topk(input, k, dim=-1, largest=True, sorted=True):
    """torch.topk as the stable sort's first k: of equal elements the first ones."""
    if input.ndim == 0:
        return torch.topk(input, k, dim, largest, sorted)
    order = stable_sort(input, dim=dim, descending=largest)
    values, indices = (part.narrow(dim, 0, k) for part in order)
    return torch.return_types.topk((values.contiguous(), indices.contiguous()))


def run(nt, variant, spec, dtype, bucket):
    """Two rows 2^31 elements apart for the 64-bit kernels, else 5 (37 for the 16-row
    tiles), special values among normal ones and a run of ties; sorted descending by
    the tile kernels, topk's largest for "select"."""
    tile = variant["switches"]["tile"]
    n = LENGTHS[tile][spec.aligned]
    wide = spec.width == 64
    # "select" takes topk of long rows from PARTED_ROWS rows on, "parts" below.
    rows = {"64": 37, "select": PARTED_ROWS + 1}.get(tile, 5)
    x = strided(
        (2 if wide else rows, n), dtype, unit=spec.unit[0], aligned=spec.aligned, wide=wide,
        domain="special",
    )  # fmt: skip
    x[0, 1:9] = x[0, 12]  # ties
    if tile == "select":
        k = SELECTED[spec.aligned]
        return nt.topk(x, k), stable_topk(x, k)
    if tile == "parts":  # its pass alone: a tile kernel's second pass would run last
        k = SELECTED[spec.aligned]
        return _first_pass(nt, x, k), stable_topk(x, k)
    return nt.sort(x, descending=True), stable_sort(x, descending=True)


def _first_pass(nt, x, k):
    """topk of `x`'s rows from the "parts" kernel's candidates: the k first of them by
    torch's stable sort over the slots (what the runtime's second pass computes), their
    indices looked up in the kernel's."""
    sort = nt._sort
    rows, n = x.shape
    width = (n // sort.PART) * k
    candidates = torch.empty(rows, width, dtype=x.dtype, device=x.device)
    found = torch.empty(rows, width, dtype=torch.int64, device=x.device)
    sort._launch(sort._PARTS, x, candidates, found, 1, sort.PART)
    values, slots = (part[:, :k] for part in stable_sort(candidates, descending=True))
    return torch.return_types.topk((values.contiguous(), found.gather(1, slots)))


def check(result, reference, variant, dtype):
    exactly(result, reference)


def exactly(result, reference):
    """Equal to the reference, NaN where it has NaN, the sign of zeros kept: a tensor
    (argsort's, msort's) or (values, indices)."""
    if isinstance(reference, torch.Tensor):
        _same(result, reference)
        return
    assert isinstance(result, tuple), type(result)
    for got, want in zip(result, reference, strict=True):
        _same(got, want)


def _same(got, want):
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    if got.is_floating_point():
        assert torch.equal(got.signbit(), want.signbit())


def calls(name, dtype):
    """Forms the samples leave out: a 0-dim input, an empty dim, topk's k of 0, and
    sort's out= of its values."""
    from tests.calls import Call

    def zero_dim(make):
        return ((make((), dtype), 1) if name == "topk" else (make((), dtype),)), {}

    def empty(make):
        return ((make((3, 0), dtype), 0) if name == "topk" else (make((3, 0), dtype),)), {}

    found = [Call(f"{name} of a 0-dim input", name, zero_dim), Call(f"{name} empty", name, empty)]
    if name == "sort":  # out= the values (the out= overload; the pair is test_ops's)

        def values_out(make):
            return (make((6, 42), dtype, domain="distinct"),), {"out": make((6, 42), dtype)}

        found.append(Call("sort out= the values", name, values_out, reference=_sorted_into))
    if name == "topk":
        found.append(Call("topk k=0", name, lambda make: ((make((5, 7), dtype), 0), {})))
    return found


def _sorted_into(input, dim=-1, descending=False, stable=False, *, out):
    """sort with out= its values (ntops.torch's form, as max's): torch's sort of
    them, written into `out`."""
    values, indices = stable_sort(input, dim, descending)
    return torch.return_types.sort((out.copy_(values), indices))


def fuzz_specs():
    """sort's, argsort's, msort's and topk's (one kernel serves them), each against
    torch's stable order."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    names = ("sort",)
    return {
        "sort": Spec(_draw, stable_sort, FLOATS, names=names),
        "argsort": Spec(_draw, stable_argsort, FLOATS, kernel="sort", names=names),
        "msort": Spec(_draw, stable_msort, FLOATS, kernel="sort", names=names),
        "topk": Spec(_draw, stable_topk, FLOATS, kernel="sort", names=names),
    }


def _draw(d, op):
    """Any shape and layout, now and then small integers (ties everywhere) or rows of a
    vocabulary's length (topk; sort refuses rows past 1024); a random dim, descending
    or largest or not; topk's k up to the row, 1 and 1024 now and then."""
    from tests.gpu.fuzz_inputs import FLOATS

    dtype = d.principal(FLOATS)
    long = op == "topk" and d.chance(0.1)
    shape = (d.rng.randint(1, 3), d.pick((5000, 128256))) if long else d.shape()
    values = None
    if d.chance(0.3):
        values = torch.randint(-3, 3, shape, generator=d.generator).to(dtype)
    x = d.tensor(shape, dtype, values=values)
    ndim = len(shape)
    if op == "msort":
        if ndim and shape[0] > LONGEST:
            d.out_of_space(f"rows past {LONGEST}")
        return (x,), {}
    dim = d.rng.randint(-ndim, ndim - 1) if ndim else d.pick((0, -1))
    size = shape[dim] if ndim else 1
    if op == "topk":
        k = d.pick((1, size, d.rng.randint(0, size), min(size, 1024), d.rng.randint(-1, size + 1)))
        if k > CANDIDATES and k <= size:
            d.out_of_space(f"topk of k past {CANDIDATES}")
        return (x, k), {"dim": dim, "largest": d.chance(0.7), "sorted": d.chance(0.8)}
    if size > LONGEST:
        d.out_of_space(f"rows past {LONGEST}")
    kwargs = {"dim": dim, "descending": d.chance(0.5)}
    if d.chance(0.3):
        kwargs["stable"] = d.chance(0.5)
    return (x,), kwargs


def interpreted(make):
    """The kernels under Triton's interpreter (CPU), against torch's stable sort: rows
    of ties (small integers), NaN of both signs, infinities and signed zeros, ascending
    and descending, fp32, fp16 and bf16; a non-last dim (the rows a transposed view's
    columns, as the runtime passes dim 0) and topk's first k of a tile; "select"
    sorting rows whole, and its k first of rows of a vocabulary's length (128256) for
    k = 1 and 1024, largest or not, with ties at the k-th and a row of one value; and
    the runtime's wrapper around them (`_check_runtime`)."""
    torch.manual_seed(0)
    _check_runtime(make)
    for dtype in DTYPES:
        kernel = make("sort", 2, DTYPES[dtype], tile="64")
        x = _with_specials(torch.randint(-4, 4, (37, 50)).to(dtype))
        for descending in (False, True):
            _check(kernel, x, x.shape[1], descending)
        _check(kernel, x, 17, False)  # topk from a tile: its first k
        _check_columns(kernel, x)
    x = _with_specials(torch.randint(-4, 4, (2, 1000)).to(torch.float16))
    kernel = make("sort", 2, "fp16", tile="1024")
    _check(kernel, x, 1000, True)
    _check_columns(kernel, x)
    _check(make("sort", 2, "fp16", tile="select"), x, 1000, False)
    for dtype, cases in (
        (torch.bfloat16, ((1, True), (1024, True))),
        (torch.float32, ((1024, False),)),
    ):
        kernel = make("sort", 2, DTYPES[dtype], tile="select")
        x = torch.randn(3, 128256).to(dtype)
        x[0, 5000:5100] = x[0].max()  # ties at the top: k=1 and k=1024 take the first
        x[0, 6000:6100] = x[0].min()
        x[1, 100], x[1, 90000], x[1, 128255] = math.nan, math.inf, -math.nan
        x[2] = 0.5  # one value: the first k
        x[2, 7] = -0.0
        for k, largest in cases:
            _check(kernel, x, k, largest)


DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
SPECIALS = (math.nan, -0.0, 0.0, math.inf, -math.inf, -math.nan, 0.0, -0.0)


def _with_specials(x):
    """`x` with SPECIALS at the start of its first row."""
    x.view(-1, x.shape[-1])[0, : len(SPECIALS)] = torch.tensor(SPECIALS)
    return x


def _outputs(shape, dtype):
    return torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=torch.int64)


def _check_columns(kernel, x):
    """dim 0 of `x`'s transpose: the kernel's rows are a view's columns, as the runtime
    passes a non-last dim, and so are its outputs."""
    column = x.t().contiguous()
    values, indices = _outputs(column.shape, x.dtype)
    kernel(column.t(), values.t(), indices.t(), 1)
    exactly((values, indices), stable_sort(column, dim=0, descending=True))


def _check(kernel, x, k, descending):
    """The kernel's first `k` of each row of `x` against the stable sort's."""
    values, indices = _outputs((x.shape[0], k), x.dtype)
    kernel(x, values, indices, int(descending))
    exactly((values, indices), stable_topk(x, k, largest=descending))


# The kernels' groups, as the wheel names them (aot/runtime/_sort.py reads them).
GROUPS = {
    "sort": {f"sort-tile={tile}": {"tile": tile} for tile in ("64", "1024", "select", "parts")}
}


def _check_runtime(make):
    """aot/runtime/_sort.py on the CPU (tests/ops/_runtime.py: its launches run the
    kernels interpreted), against torch: every dim of a 3-dim tensor (moved last, as a
    view where its dims merge, else through copies), argsort, msort of a transposed
    view, topk of a middle dim, 0-dim and empty inputs, a call in slices of rows (its
    32-bit limit lowered to force them), topk of a long row (the "select" kernel), and
    sort's out=."""
    nt = _runtime(make)
    cube = _with_specials(torch.randint(-3, 3, (4, 6, 20)).to(torch.bfloat16))
    for dim in (0, 1, 2, -1):
        for descending in (False, True):
            exactly(nt.sort(cube, dim, descending), stable_sort(cube, dim, descending))
    exactly(nt.argsort(cube, 1, True), stable_argsort(cube, 1, True))
    exactly(nt.msort(cube.transpose(0, 2)), stable_msort(cube.transpose(0, 2)))
    exactly(nt.topk(cube, 3, 1, largest=False), stable_topk(cube, 3, 1, largest=False))
    one = torch.tensor(-2.5)
    exactly(nt.sort(one), torch.sort(one))
    exactly(nt.topk(one, 1), torch.topk(one, 1))
    exactly(nt.sort(torch.empty(3, 0)), torch.sort(torch.empty(3, 0)))
    exactly(nt.topk(cube, 0), torch.topk(cube, 0))
    rows = torch.randn(40, 30)
    nt._OFFSETS = 200  # slices of 6 rows
    exactly(nt.sort(rows, 1, True), stable_sort(rows, 1, True))
    nt._OFFSETS = 2**31 - 1
    logits = torch.randn(2, 5000).to(torch.bfloat16)
    exactly(nt.topk(logits, 50), stable_topk(logits, 50))
    _check_parts(nt)
    _check_out(nt, cube)


def _check_parts(nt):
    """topk of long rows in passes (few rows: the "parts" kernel, then a tile, "select"
    or parts again over the candidates): 4 parts of 2048, the last with the row's 808 more;
    ties at the k-th across parts (the first indices kept), NaN of both signs,
    infinities, signed zeros, a row of one value; largest and smallest; k = 1, one
    whose candidates a tile sorts, one that "select" takes, and 1024."""
    x = torch.randint(-50, 50, (3, 9000)).to(torch.bfloat16)
    x[0, 2040:2060] = 60.0  # ties across the first two parts' border
    x[0, 8990:9000] = 60.0  # and in the last part's remainder
    x[1, :8] = torch.tensor(SPECIALS)
    x[1, 4100], x[1, 8999] = math.nan, -math.inf
    x[2] = 0.5
    x[2, 6000] = -0.0
    for k in (1, 37, 300, 1024):
        for largest in (True, False):
            exactly(nt.topk(x, k, largest=largest), stable_topk(x, k, largest=largest))
    nt._PARTED_ROWS = 0  # the same rows by one program each ("select")
    exactly(nt.topk(x, 300), stable_topk(x, 300))
    nt._PARTED_ROWS = 256
    # Parts of two tiles (k = 1024: parts of 2048 would leave half the row): 4 parts'
    # 4096 candidates, which "select" takes.
    assert nt._part_size(1, 17000, 1024) == 2 * nt.PART
    long = torch.randint(-9, 9, (1, 17000)).to(torch.float32)
    long[0, 16990:] = math.inf
    for largest in (True, False):
        exactly(nt.topk(long, 1024, largest=largest), stable_topk(long, 1024, largest=largest))
    # Candidates in parts again (parts kept while they leave half the row or less): 8
    # parts' 8192, then 4 parts' 4096, which "select" takes.
    share, nt._SHARE_AGAIN = nt._SHARE_AGAIN, 2
    exactly(nt.topk(long, 1024), stable_topk(long, 1024))
    nt._SHARE_AGAIN = share


def _check_out(nt, cube):
    """sort's out=: (values, indices), upstream's form (torch's too), and the values
    alone; written and returned."""
    values, indices = torch.empty_like(cube), torch.empty(cube.shape, dtype=torch.int64)
    result = nt.sort(cube, 1, True, out=(values, indices))
    assert result.values is values
    assert result.indices is indices
    exactly((values, indices), stable_sort(cube, 1, True))
    taken = nt.sort(cube, 0, out=values)  # the values alone, as max's out= takes them
    assert taken.values is values
    exactly(taken, stable_sort(cube, 0))
    with pytest.raises(TypeError, match=r"out must be torch\.int64"):
        nt.sort(cube, out=(values, indices.float()))
    with pytest.raises(TypeError, match="pair"):
        nt.sort(cube, out=(values,))


def _runtime(make):
    """The runtime module with `make`'s kernels behind its launches (sort's premake
    takes no configuration: its tiles are switch values)."""
    from ntops_aot.aot.declare.space import Config
    from tests.ops._runtime import load

    def configured(op, ndim, dtype="fp32", **options):
        return make(op, ndim, dtype, **options)

    from ntops_aot.kernels import sort

    configured.made = make.made
    # The kernel file's space and parameters (both applications take the same), an
    # empty configuration.
    module = types.SimpleNamespace(
        CONFIG=Config(), SPACE=sort.SPACE, application=sort.application_tile
    )
    configured.registry = {"sort": types.SimpleNamespace(module=module)}
    return load(configured, "_sort", GROUPS)
