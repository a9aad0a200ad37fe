"""Stage 1: the variant space of every op, crossed with arches and filters."""

import pathlib

import pytest

from ntops_aot.aot import enumerate as enumeration
from ntops_aot.aot.errors import UsageError
from ntops_aot.aot.space import Spec, Variant, VariantSpace
from ntops_aot.aot.targets import TARGETS

KERNELS = pathlib.Path(__file__).parents[2] / "kernels"


def test_every_kernel_file_is_an_op(registry):
    shared = {"element_wise", "reduction", "matmul", "parts"}
    files = {path.stem for path in KERNELS.glob("*.py")} - {"__init__"} - shared
    assert set(registry) == files
    assert len(registry) == 38


def test_variant_ids_name_op_arch_dtype_ndim_and_switches():
    assert Variant("rms_norm", "sm_90", "fp16", 3).id == "rms_norm-sm_90-fp16-nd3"
    variant = Variant("gelu", "sm_80", "bf16", 2, (("approximate", "tanh"),))
    assert variant.id == "gelu-sm_80-bf16-nd2-approximate=tanh"
    assert variant.group == "gelu-approximate=tanh"


def test_spec_names():
    assert Spec(32, (1, 0, 1), aligned=True).name == "i32-u101-a16"
    assert Spec(32, (None, 1)).name == "i32-ux1"
    assert Spec(64).name == "i64"


def test_counts_per_op(registry):
    counts = {name: len(enumeration.variants(registry, [name], ["sm_90"])) for name in registry}
    # dtypes x ndims x switch values; mm's precision switch only multiplies fp32.
    assert counts["add"] == 3 * 3 * 2
    assert counts["eq"] == 9 * 3 * 2
    assert counts["div"] == 3 * 3 * 3 * 2
    assert counts["softmax"] == 4 * 2  # float dtypes and fp64 x ndims
    assert counts["clamp"] == 3 * 3 * 4  # float dtypes x ndims x (number, tensor) per bound
    assert counts["silu_mul"] == 3 * 3  # float dtypes x ndims
    assert counts["mm"] == counts["bmm"] == counts["addmm"] == 4
    assert counts["scaled_dot_product_attention"] == 3 * 5 * 4  # dtypes x head dims x masks
    assert sum(counts.values()) == 842


def test_only_the_widest_ndim_built_gets_64_bit_kernels(registry):
    found = enumeration.variants(registry, ["add"], ["sm_90"], ["fp16"], [1, 2])
    assert [(v.ndim, v.widest) for v in found] == [(1, False), (1, False), (2, True), (2, True)]


def test_filters_and_arches(registry):
    found = enumeration.variants(registry, ["add", "mm"], ["sm_80", "sm_90"], ["fp16"], [1, 2])
    assert [v.id for v in found] == [
        "add-sm_80-fp16-nd1-other=tensor",
        "add-sm_80-fp16-nd1-other=scalar",
        "add-sm_80-fp16-nd2-other=tensor",
        "add-sm_80-fp16-nd2-other=scalar",
        "add-sm_90-fp16-nd1-other=tensor",
        "add-sm_90-fp16-nd1-other=scalar",
        "add-sm_90-fp16-nd2-other=tensor",
        "add-sm_90-fp16-nd2-other=scalar",
        "mm-sm_80-fp16-nd2-fp32_precision=tf32",
        "mm-sm_90-fp16-nd2-fp32_precision=tf32",
    ]


def test_selection_by_name_glob_and_all(registry):
    assert enumeration.select_ops(registry, ["soft*", "add"]) == ["add", "softmax"]
    assert enumeration.select_ops(registry, ["all"]) == sorted(registry)
    assert enumeration.select_arches(["all"]) == list(TARGETS)
    assert enumeration.select_arches(["sm_90", "sm_80"]) == ["sm_80", "sm_90"]


def test_unknown_names_list_what_exists(registry):
    with pytest.raises(UsageError, match="ops: abs, add, addmm, bitwise_and"):
        enumeration.select_ops(registry, ["conv"])
    with pytest.raises(UsageError, match="arches: sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"):
        enumeration.select_arches(["sm_75"])
    with pytest.raises(UsageError, match="dtypes: fp16, bf16, fp32, fp64, i8"):
        enumeration.variants(registry, ["add"], ["sm_90"], ["fp8"])
    with pytest.raises(UsageError, match="nothing to build"):
        enumeration.variants(registry, ["mm"], ["sm_90"], None, [3])


def test_spaces_validate_themselves():
    with pytest.raises(ValueError, match="unknown dtypes"):
        VariantSpace(dtypes=("fp8",), ndims=(1,))
    with pytest.raises(ValueError, match="coalesce"):
        VariantSpace(dtypes=("fp16",), ndims=(1,), coalesce="some")
