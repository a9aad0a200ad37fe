"""The vocabulary of a build: what an op can be built as, and the ids users see.

A kernel file declares its `SPACE` (dtypes, ndims, op switches and how the runtime
calls it), and, if it tunes, its `TUNING` (the buckets of a size its launcher tells
apart, and the sample calls that represent each; aot/plan/tuning.py reads the tables).
Enumeration crosses it with the target arches into `Variant`s, the unit a user
lists, selects and builds (`rms_norm-sm_90-fp16-nd3`). Each variant is compiled
into a few `Spec`ializations (32/64-bit indexing, unit strides, 16-byte alignment)
among which the runtime picks per call.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Dtype:
    """One element type under its four names."""

    short: str  # what users type (`--dtypes fp16`) and ids show
    torch: str  # the attribute of the torch module
    triton: str  # ninetoothed's and Triton's name
    dlpack: tuple[int, int]  # DLPack (type code, bits): how the launcher recognises it


DTYPES: Mapping[str, Dtype] = {
    dtype.short: dtype
    for dtype in (
        Dtype("fp16", "float16", "fp16", (2, 16)),
        Dtype("bf16", "bfloat16", "bf16", (4, 16)),
        Dtype("fp32", "float32", "fp32", (2, 32)),
        Dtype("fp64", "float64", "fp64", (2, 64)),
        Dtype("i8", "int8", "i8", (0, 8)),
        Dtype("i16", "int16", "i16", (0, 16)),
        Dtype("i32", "int32", "i32", (0, 32)),
        Dtype("i64", "int64", "i64", (0, 64)),
        Dtype("u8", "uint8", "u8", (1, 8)),
        Dtype("bool", "bool", "i1", (6, 8)),
        # FP8 (DLPack 1.1's kDLFloat8_e4m3fn and kDLFloat8_e5m2), for the quantized
        # results of ops built on FP8_ARCHES only; no op is built in them.
        Dtype("fp8e4m3", "float8_e4m3fn", "fp8e4nv", (10, 8)),
        Dtype("fp8e5m2", "float8_e5m2", "fp8e5", (12, 8)),
    )
}
FLOATS = ("fp16", "bf16", "fp32")
INTEGERS = ("i8", "i16", "i32", "i64", "u8")
BOOL = ("bool",)
# The arches with FP8 conversions and tensor-core products (Ada, Hopper, Blackwell).
FP8_ARCHES = ("sm_89", "sm_90", "sm_100", "sm_120")
FP8_NOTE = "FP8 needs sm_89 or newer (Ada, Hopper, Blackwell)"
# The kinds of specialisation an op may build; every op builds the first four unless its
# SPACE says otherwise. "wide-aligned": 64-bit kernels with the aligned kernels'
# assumptions, one per bucket as those are, for ops whose calls pass 2^31 elements in
# the normal course (a server's KV cache) rather than as an exception.
SPECS = ("aligned", "unit", "generic", "wide", "wide-aligned")
DEFAULT_SPECS = SPECS[:4]

COALESCE_MODES = ("all", "leading", "none")


@dataclasses.dataclass(frozen=True)
class VariantSpace:
    """What one op can be built as, and how the runtime hands it tensors.

    `coalesce` says which dims of the non-`fixed` tensors the runtime may merge:
    "all" (element-wise ops), "leading" (all but the last, row-wise reductions)
    or "none". `unit_dims` names, per tensor parameter, the dims that may be
    specialised to stride 1 (default: the last one; a kernel file's
    `unit_dims(variant)` overrides it per variant); `unspecialized` tensors are
    never specialised (masks, tables read once). `specs` picks which kinds of
    specialisation to build (SPECS; see `Spec`). `switch_dtypes` limits a switch
    to some dtypes: for the others only its first value is built. `in_place` says
    whether an output may be the very tensor an input is (element-wise ops).
    `workspace` names a tensor the launcher allocates (and partly zeroes) for
    each launch, e.g. for programs that combine partial results. `dims` names the
    dims of tensors the runtime does not coalesce (`fixed` ones, or all where
    `coalesce` is "none"): dims of one name have one size, which the launcher
    checks and allocates outputs by (mm: input ("rows", "inner"), other ("inner",
    "columns"), output ("rows", "columns")); `broadcast` inputs may have fewer dims
    or dims of size 1 there, as torch broadcasts (addmm's added tensor).
    `descriptors` names the inputs some kernels read through TMA descriptors, which
    cannot step a dim by 0 bytes: where one is expanded (a dim of stride 0 and size
    past 1), the launcher takes the call to kernels that read it by pointer (that dim
    counts as no 16-byte stride, so the aligned kernels, the ones with descriptors, are
    out).
    """

    dtypes: tuple[str, ...]
    ndims: tuple[int, ...]
    switches: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    switch_dtypes: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    coalesce: str = "all"
    fixed: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ("output",)
    unit_dims: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    unspecialized: tuple[str, ...] = ()
    specs: tuple[str, ...] = DEFAULT_SPECS
    # The most dims the unit-stride and aligned specialisations are built at (None:
    # every ndim); calls with more take the generic kernel. An arrangement that
    # flattens more dims than Triton's alignment analysis follows gains nothing there.
    specialized_ndims: int | None = None
    in_place: bool | None = None  # None: element-wise ops (coalesce "all") only
    # A premake parameter the launcher allocates per launch instead of the caller
    # passing it (its size: the kernel file's `workspace(config)`, per program).
    workspace: str | None = None
    # A premake scalar (int64) the launcher sets to a number no other launch of the
    # process has, e.g. to tag counters in a workspace it need not zero.
    launch_id: str | None = None
    dims: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    broadcast: tuple[str, ...] = ()
    descriptors: tuple[str, ...] = ()
    # The arches the op is built for (None: every one), and why, for the error a call
    # on another GPU gets (FP8_ARCHES, FP8_NOTE).
    arches: tuple[str, ...] | None = None
    arches_note: str = ""

    @property
    def allows_in_place(self) -> bool:
        return self.coalesce == "all" if self.in_place is None else self.in_place

    def __post_init__(self) -> None:
        unknown = set(self.dtypes) - set(DTYPES)
        if unknown:
            raise ValueError(f"unknown dtypes {sorted(unknown)}; known: {sorted(DTYPES)}")
        if self.coalesce not in COALESCE_MODES:
            raise ValueError(f"coalesce must be one of {COALESCE_MODES}, not {self.coalesce!r}")
        if set(self.switch_dtypes) - set(self.switches):
            raise ValueError("switch_dtypes names a switch that is not in switches")
        if not self.specs or set(self.specs) - set(SPECS):
            raise ValueError(f"specs must be some of {SPECS}, not {self.specs}")
        if self.specialized_ndims is not None and "generic" not in self.specs:
            raise ValueError("specialized_ndims needs the generic kernel for wider calls")
        if set(self.broadcast) - set(self.dims) or set(self.broadcast) & set(self.outputs):
            raise ValueError("broadcast names an output, or an input whose dims are not named")
        if set(self.descriptors) & (set(self.outputs) | set(self.broadcast)):
            raise ValueError("descriptors names an output or a broadcast input")
        if self.arches is not None and (not self.arches or not self.arches_note):
            raise ValueError("arches needs at least one arch and a note saying why")

    def builds_for(self, arch: str) -> bool:
        return self.arches is None or arch in self.arches

    def switch_choices(self, dtype: str) -> list[tuple[tuple[str, str], ...]]:
        """Every combination of switch values built for `dtype`, in declared order."""
        combos: list[tuple[tuple[str, str], ...]] = [()]
        for name, values in self.switches.items():
            if dtype not in self.switch_dtypes.get(name, (dtype,)):
                values = values[:1]
            combos = [(*combo, (name, value)) for combo in combos for value in values]
        return combos

    def all_switch_choices(self) -> list[tuple[tuple[str, str], ...]]:
        """Every combination of switch values built for some dtype."""
        seen: dict[tuple[tuple[str, str], ...], None] = {}
        for dtype in self.dtypes:
            seen.update(dict.fromkeys(self.switch_choices(dtype)))
        return list(seen)


def group_key(op: str, switches: tuple[tuple[str, str], ...]) -> str:
    """`gelu-approximate=tanh`: how the runtime names an op with its switches set."""
    return "-".join([op, *(f"{name}={value}" for name, value in switches)])


@dataclasses.dataclass(frozen=True, order=True)
class Variant:
    """One op built for one arch, dtype, ndim and set of switch values."""

    op: str
    arch: str
    dtype: str
    ndim: int
    switches: tuple[tuple[str, str], ...] = ()
    # The largest ndim built for this op: only it gets a 64-bit kernel (the runtime pads
    # calls with fewer dims to it). Not part of the id.
    widest: bool = True

    @property
    def id(self) -> str:
        return "-".join(
            [self.op, self.arch, self.dtype, f"nd{self.ndim}"]
            + [f"{name}={value}" for name, value in self.switches]
        )

    @property
    def group(self) -> str:
        return group_key(self.op, self.switches)


@dataclasses.dataclass(frozen=True)
class Spec:
    """The assumptions one compiled kernel of a variant makes about its arguments.

    `width` is the integer type of sizes and strides (32, or 64 for tensors whose
    offsets overflow int32). `unit` lists, per tensor argument in order, the dim
    whose stride is compiled as the constant 1 (None: no such dim). `aligned`
    adds 16-byte aligned pointers, unit dims' sizes divisible by 16 and other
    strides divisible by 16, which lets Triton emit 128-bit loads.
    """

    width: int
    unit: tuple[int | None, ...] = ()
    aligned: bool = False

    @property
    def name(self) -> str:
        parts = [f"i{self.width}"]
        if any(dim is not None for dim in self.unit):
            parts.append("u" + "".join("x" if dim is None else str(dim) for dim in self.unit))
        if self.aligned:
            parts.append("a16")
        return "-".join(parts)


@dataclasses.dataclass(frozen=True)
class Config:
    """Launch choices for one variant: `premake` keyword arguments (block sizes and
    other compile-time choices) and Triton's `num_warps`/`num_stages`. None leaves
    the choice to ninetoothed's defaults for the target.

    `persistent` > 0 caps the grid at that many programs per multiprocessor of the
    GPU the call runs on (the kernel loops over its tiles); `split` > 1 multiplies
    the grid by a factor the launcher picks per call, up to `split`, so that the
    programs fill the multiprocessors (the premake gets `split`, and splits its work
    that many ways); `num_ctas` > 1 launches programs in clusters of that many."""

    premake: Mapping[str, int | str | bool] = dataclasses.field(default_factory=dict)
    num_warps: int | None = None
    num_stages: int | None = None
    persistent: int = 0
    num_ctas: int = 1
    split: int = 1

    def as_dict(self) -> dict[str, object]:
        """The JSON form tuning tables and manifests hold."""
        return {
            "premake": dict(sorted(self.premake.items())),
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "persistent": self.persistent,
            "num_ctas": self.num_ctas,
            "split": self.split,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Config:
        fields = {"premake", "num_warps", "num_stages", "persistent", "num_ctas", "split"}
        unknown = set(data) - fields
        if unknown:
            raise ValueError(f"unknown configuration fields {sorted(unknown)}")
        premake = data.get("premake", {})
        if not isinstance(premake, Mapping):
            raise ValueError(f"premake must be a mapping, not {premake!r}")
        return cls(
            premake=dict(premake),
            num_warps=data.get("num_warps"),  # type: ignore[arg-type]
            num_stages=data.get("num_stages"),  # type: ignore[arg-type]
            persistent=int(data.get("persistent", 0)),  # type: ignore[call-overload]
            num_ctas=int(data.get("num_ctas", 1)),  # type: ignore[call-overload]
            split=int(data.get("split", 1)),  # type: ignore[call-overload]
        )

    @property
    def key(self) -> str:
        """Equal for equal configurations (a Config holds a dict: it is not hashable)."""
        return json.dumps(self.as_dict(), sort_keys=True)

    def __str__(self) -> str:
        parts = [f"{name}={value}" for name, value in sorted(self.premake.items())]
        parts += [f"warps={self.num_warps}", f"stages={self.num_stages}"]
        if self.persistent:
            parts.append(f"persistent={self.persistent}")
        if self.num_ctas != 1:
            parts.append(f"ctas={self.num_ctas}")
        if self.split != 1:
            parts.append(f"split={self.split}")
        return " ".join(parts)


UNBOUNDED = 2**63 - 1  # the largest bucket key size, as the launcher stores it (INT64_MAX)
Range = tuple[int, int]  # key sizes, inclusive
EVERY: Range = (0, UNBOUNDED)
ALL = "all"  # the one bucket of ops without a TUNING


@dataclasses.dataclass(frozen=True)
class Operand:
    """One tensor of a sample call: random normal values of `shape`; `transposed`
    makes it contiguous with its last two dims swapped and passes its `.mT`, the
    layout of an nn.Linear weight used as `x @ W.t()`."""

    shape: tuple[int, ...]
    transposed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "transposed": self.transposed}


@dataclasses.dataclass(frozen=True)
class Bucket:
    """Calls whose key size is at most `upto` (None: every larger one) and, where the
    op's TUNING has a `key2`, whose second key size is at most `upto2` (None: every
    larger one), with the calls a tuning run times for it (shapes of real models)."""

    name: str
    upto: int | None = None
    samples: tuple[tuple[Operand, ...], ...] = ()
    upto2: int | None = None


@dataclasses.dataclass(frozen=True)
class Tuning:
    """What an op's speed depends on, as its launcher and tuner see it.

    `key` names the argument and dim whose size picks a call's bucket (for a matrix
    product, the rows of its left operand); `key2`, if given, a second size that splits
    the calls of one `upto` further (a product's columns): consecutive buckets with one
    `upto` take its calls by `upto2`, the last the rest. `function` is the
    ntops_prebuilt function a tuning run calls on each sample and `reference` the torch
    function (a name under `torch`, dotted: `nn.functional.softmax`) its result is
    checked against, both called with the sample's operands and the keyword arguments
    `options`, and those `switch_options` adds for the variant's switch values
    (`{"mask": {"causal": {"is_causal": True}}}`). `specs` names the specialisations a
    tuning wheel builds (those the samples run); the buckets' winners are built for
    every specialisation that assumes 16-byte alignment, the fallbacks keep the last
    bucket's configuration."""

    function: str
    reference: str
    key: tuple[str, int]
    buckets: tuple[Bucket, ...]
    specs: tuple[str, ...] = ()
    options: Mapping[str, bool | int | float | str] = dataclasses.field(default_factory=dict)
    key2: tuple[str, int] | None = None
    switch_options: Mapping[str, Mapping[str, Mapping[str, bool | int | float | str]]] = (
        dataclasses.field(default_factory=dict)
    )

    def __post_init__(self) -> None:
        names = [bucket.name for bucket in self.buckets]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"buckets need distinct names, got {names}")
        if self.key2 is None and any(bucket.upto2 is not None for bucket in self.buckets):
            raise ValueError("buckets bound `upto2` only where the tuning names a `key2`")
        columns = self._columns()
        _check_bounds("upto", [column[0].upto for column in columns])
        for column in columns:
            _check_bounds("upto2", [bucket.upto2 for bucket in column])

    def _columns(self) -> list[list[Bucket]]:
        """The buckets in runs of one `upto`."""
        columns: list[list[Bucket]] = []
        for bucket in self.buckets:
            if columns and columns[-1][0].upto == bucket.upto:
                columns[-1].append(bucket)
            else:
                columns.append([bucket])
        return columns

    def ranges(self) -> dict[str, tuple[Range, Range]]:
        """Each bucket's sizes of `key` and of `key2` (every size where there is none)."""
        ranges, low = {}, 0
        for column in self._columns():
            upto = column[0].upto
            high = UNBOUNDED if upto is None else upto
            low2 = 0
            for bucket in column:
                high2 = UNBOUNDED if bucket.upto2 is None else bucket.upto2
                ranges[bucket.name] = ((low, high), (low2, high2))
                low2 = high2 + 1
            low = high + 1
        return ranges

    @property
    def keys(self) -> tuple[tuple[str, int], ...]:
        return (self.key,) if self.key2 is None else (self.key, self.key2)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(bucket.name for bucket in self.buckets)


def _check_bounds(name: str, bounds: list[int | None]) -> None:
    """Bounds of consecutive buckets: increasing, the last one None (it takes the rest)."""
    if bounds[-1] is not None or None in bounds[:-1]:
        raise ValueError(f"every bucket but the last needs `{name}`; the last takes the rest")
    if bounds[:-1] != sorted(set(bounds[:-1])):  # type: ignore[type-var]
        raise ValueError(f"bucket bounds `{name}` must increase, got {bounds}")
