"""Stage 1: the variant space of every op, crossed with arches and filters."""

import pathlib

import pytest

from ntops_aot.aot.declare.registry import OpInfo
from ntops_aot.aot.declare.space import Spec, Variant, VariantSpace
from ntops_aot.aot.errors import UsageError
from ntops_aot.aot.plan import select as enumeration
from ntops_aot.aot.toolchain.targets import TARGETS

KERNELS = pathlib.Path(__file__).parents[2] / "kernels"


def test_every_kernel_file_is_an_op(registry):
    files = {path.stem for path in KERNELS.glob("*.py")} - {"__init__"}
    assert set(registry) == files


def test_variant_ids_name_op_arch_dtype_ndim_and_switches():
    assert Variant("rms_norm", "sm_90", "fp16", 3).id == "rms_norm-sm_90-fp16-nd3"
    variant = Variant("gelu", "sm_80", "bf16", 2, (("approximate", "tanh"),))
    assert variant.id == "gelu-sm_80-bf16-nd2-approximate=tanh"
    assert variant.group == "gelu-approximate=tanh"


def test_spec_names():
    assert Spec(32, (1, 0, 1), aligned=True).name == "i32-u101-a16"
    assert Spec(32, (None, 1)).name == "i32-ux1"
    assert Spec(64).name == "i64"


def test_counts_are_dtypes_by_ndims_by_switch_values(registry):
    """Every op's variants per arch: its dtypes x ndims x switch values, where a switch
    limited to some dtypes (`switch_dtypes`) has only its first value for the others."""
    total = 0
    for name, op in registry.items():
        space = op.space
        count = 0
        for dtype in space.dtypes:
            choices = 1
            for switch, values in space.switches.items():
                limited = switch in space.switch_dtypes and dtype not in space.switch_dtypes[switch]
                choices *= 1 if limited else len(values)
            count += choices * len(space.ndims)
        assert len(enumeration.variants(registry, [name], ["sm_90"])) == count, name
        total += count
    assert len(enumeration.variants(registry, sorted(registry), ["sm_90"])) == total


def test_a_precision_switch_limited_to_fp32_multiplies_only_fp32():
    space = VariantSpace(
        dtypes=("fp16", "fp32"),
        ndims=(2,),
        switches={"fp32_precision": ("tf32", "ieee")},
        switch_dtypes={"fp32_precision": ("fp32",)},
    )
    assert [dict(switches) for switches in space.switch_choices("fp16")] == [
        {"fp32_precision": "tf32"}
    ]
    assert len(space.switch_choices("fp32")) == 2


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


def _infos(registry):
    """What planning knows of each op (registry.OpInfo), as far as selection reads it."""
    return {
        name: OpInfo(name, op.module.__name__, op.space, op.tuning, apis=op.apis())
        for name, op in registry.items()
    }


def test_selection_by_name_glob_and_all(registry):
    infos = _infos(registry)
    assert enumeration.select_ops(infos, ["softm*", "add"]) == ["add", "softmax"]
    assert enumeration.select_ops(infos, ["all"]) == sorted(registry)
    # an op is selected by a function it serves too
    assert enumeration.select_ops(infos, ["lt", "bitwise_or"]) == ["bitwise", "comparison"]
    assert enumeration.select_ops(infos, ["matmul"]) == ["mm"]
    assert enumeration.select_arches(["all"]) == list(TARGETS)
    assert enumeration.select_arches(["sm_90", "sm_80"]) == ["sm_80", "sm_90"]


def test_unknown_names_list_what_exists(registry):
    # the functions an op serves after its name (a list that grows with the ops)
    with pytest.raises(UsageError, match=r"ops: abs, .*, bitwise \(bitwise_and, bitwise_or\)"):
        enumeration.select_ops(_infos(registry), ["fft"])
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
    named = {"input": ("n",), "output": ("n",)}
    for broadcast in (("output",), ("weight",)):  # an output, a tensor with no named dims
        with pytest.raises(ValueError, match="broadcast"):
            VariantSpace(dtypes=("fp16",), ndims=(1,), dims=named, broadcast=broadcast)
    VariantSpace(dtypes=("fp16",), ndims=(1,), dims=named, broadcast=("input",))
