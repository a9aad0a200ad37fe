"""Hand-written kernels in a premake's place (aot/declare/plain.py), generated and compiled
on a CPU: a Triton one standing in for relu's, and the Gluon prefill of
scaled_dot_product_attention on sm_90."""

import dataclasses

import pytest
import triton
import triton.language as tl

from ntops_aot.aot.compile import codegen
from ntops_aot.aot.compile.cubins import compile_kernel
from ntops_aot.aot.declare.plain import Plain
from ntops_aot.aot.declare.space import Variant
from ntops_aot.aot.errors import UnsupportedKernel

SDPA = Variant(
    "scaled_dot_product_attention", "sm_90", "bf16", 4, (("head_dim", "128"), ("mask", "causal"))
)


@pytest.fixture
def prefill(toolchain, registry):
    """The generated kernels of SDPA's prefill bucket, by spec name."""
    op = registry[SDPA.op]
    config = op.config(SDPA, "prefill")
    return {k.spec.name: k for k in codegen.generate(toolchain, op, SDPA, config)}


def test_the_aligned_prefill_is_the_gluon_kernel(prefill):
    aligned = prefill["i32-u333333-a16"]
    assert aligned.function == "attention_prefill"
    assert "gluon.jit" in aligned.source
    names = [arg.name for arg in aligned.args]
    described = {(p.kind, names[p.arg] if p.arg >= 0 else None, p.dim) for p in aligned.params}
    assert ("pointer", "query", -1) in described
    assert ("size", "key", 3) in described
    assert ("stride", "output", 2) in described
    assert ("scalar", "offset", -1) in described
    constants = {p.name: p.value for p in aligned.params if p.kind == "constant"}
    assert constants == {"block_d": 128, "BLOCK_N": 128, "STAGES": 2}
    assert aligned.grid == "((query_size_2 + 127) // 128) * query_size_0 * query_size_1"
    # The other specialisations keep the generated kernel (TMA needs aligned rows).
    assert {k.function for name, k in prefill.items() if name != "i32-u333333-a16"} == {
        "ntops_scaled_dot_product_attention"
    }


def test_the_gluon_kernel_compiles_warp_specialised(toolchain, prefill):
    kernel = compile_kernel(toolchain, prefill["i32-u333333-a16"])
    # Two consumer warp groups and a producer warp (a warp group's worth).
    assert kernel.num_warps == 12
    assert kernel.shared <= 232448
    assert kernel.scratch > 0  # the descriptors it makes on the device
    assert kernel.types[0] == "*bf16"


def test_other_arches_and_masks_keep_generated_kernels(toolchain, registry):
    op = registry[SDPA.op]
    for variant in (
        dataclasses.replace(SDPA, arch="sm_80"),
        dataclasses.replace(SDPA, switches=(("head_dim", "128"), ("mask", "bool"))),
        dataclasses.replace(SDPA, switches=(("head_dim", "32"), ("mask", "causal"))),
    ):
        config = op.config(variant, "prefill")
        kernels = codegen.generate(toolchain, op, variant, config)
        assert {k.function for k in kernels} == {"ntops_scaled_dot_product_attention"}, variant


@triton.jit
def _copy(input, output, input_size_0, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(
        output + offsets,
        tl.load(input + offsets, mask=offsets < input_size_0),
        mask=offsets < input_size_0,
    )


@triton.jit
def _relu(output, input, input_size_0, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < input_size_0
    x = tl.load(input + offsets, mask=inside)
    tl.store(output + offsets, tl.maximum(x, 0.0), mask=inside)


def test_a_plain_triton_kernel_compiles_in_the_premakes_place(toolchain, registry, monkeypatch):
    """relu's generated kernels replaced by a hand-written one: the call's arguments stay
    the premake's, the parameters follow the kernel's names and order."""
    op = registry["relu"]
    variant = Variant("relu", "sm_90", "fp16", 1)
    grid = "(input_size_0 + 1023) // 1024"
    monkeypatch.setattr(
        op.module, "plain", lambda *_: Plain(_relu, grid, {"BLOCK": 1024}), raising=False
    )
    kernels = codegen.generate(toolchain, op, variant, op.config(variant))
    names = [arg.name for arg in kernels[0].args]
    for kernel in kernels:
        assert kernel.function == "_relu"
        assert kernel.grid == grid
        assert [(p.kind, names[p.arg] if p.arg >= 0 else p.value) for p in kernel.params] == [
            ("pointer", "output"),
            ("pointer", "input"),
            ("size", "input"),
            ("constant", 1024),
        ]
    compiled = compile_kernel(toolchain, kernels[0])
    assert compiled.function == "_relu"
    assert [p.kind for p in compiled.params] == ["pointer", "pointer", "size"]


def test_a_plain_kernel_names_arguments_it_does_not_have(toolchain, registry, monkeypatch):
    """A parameter that names nothing of the premake's fails the build with its name."""
    op = registry["relu"]
    variant = Variant("relu", "sm_90", "fp16", 1)

    @triton.jit
    def wrong(input, missing, BLOCK: tl.constexpr):
        pass

    monkeypatch.setattr(
        op.module, "plain", lambda *_: Plain(wrong, "1", {"BLOCK": 64}), raising=False
    )
    with pytest.raises(UnsupportedKernel, match="missing"):
        codegen.generate(toolchain, op, variant, op.config(variant))


def test_plain_constants_may_not_shadow_the_application(toolchain, registry, monkeypatch):
    op = registry["relu"]
    variant = Variant("relu", "sm_90", "fp16", 1)
    monkeypatch.setattr(
        op.module, "plain", lambda *_: Plain(_copy, "1", {"input": 1}), raising=False
    )
    with pytest.raises(UnsupportedKernel, match="input"):
        codegen.generate(toolchain, op, variant, op.config(variant))


def test_plain_wants_a_jit_function():
    with pytest.raises(TypeError, match=r"triton\.jit or @gluon\.jit"):
        Plain(lambda: None, "1")


@pytest.mark.parametrize(("bucket", "copy"), [("prefill-gluon", 16), ("prefill-gluon-wide", 64)])
def test_the_paged_prefill_buckets_are_the_gluon_kernel(toolchain, registry, bucket, copy):
    """paged_attention's prefill-gluon buckets on sm_90: the Gluon kernel copying `copy`
    keys at a time in the aligned 32-bit specialisation (compiled warp-specialised), the
    generated one elsewhere."""
    op = registry["paged_attention"]
    variant = Variant("paged_attention", "sm_90", "bf16", 3, (("head_dim", "128"),))
    config = op.config(variant, bucket)
    kernels = {k.spec.name: k for k in codegen.generate(toolchain, op, variant, config)}
    aligned = [
        k for name, k in kernels.items() if name.startswith("i32-") and name.endswith("-a16")
    ]
    assert [k.function for k in aligned] == ["paged_prefill"]
    assert {p.name: p.value for p in aligned[0].params}["COPY"] == copy
    others = {k.function for k in kernels.values()} - {"paged_prefill"}
    assert others == {"ntops_paged_attention"}
    assert "block_table_size_0" in aligned[0].grid
    assert compile_kernel(toolchain, aligned[0]).num_warps == 12
    for arch in ("sm_80", "sm_89"):
        other = dataclasses.replace(variant, arch=arch)
        generated = codegen.generate(toolchain, op, other, op.config(other, bucket))
        assert {k.function for k in generated} == {"ntops_paged_attention"}, arch
