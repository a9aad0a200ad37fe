"""Hand-written kernels in a premake's place (aot/declare/plain.py), generated on a CPU."""

import pytest
import triton
import triton.language as tl

from ntops_aot.aot.compile import codegen
from ntops_aot.aot.compile.cubins import compile_kernel
from ntops_aot.aot.declare.plain import Plain
from ntops_aot.aot.declare.space import Variant
from ntops_aot.aot.errors import UnsupportedKernel


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
