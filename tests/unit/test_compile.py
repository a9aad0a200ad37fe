"""Stage 3: cubins for the target arch, compiled on a machine with no GPU."""

import dataclasses
import pathlib
import re
import subprocess

import pytest

from ntops_aot.aot.compile import codegen
from ntops_aot.aot.compile.codegen import GeneratedKernel, Param
from ntops_aot.aot.compile.cubins import compile_kernel
from ntops_aot.aot.declare.arguments import Arg
from ntops_aot.aot.declare.space import Spec, Variant
from ntops_aot.aot.errors import CompileError


def cuobjdump(*args):
    import triton

    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return subprocess.run([str(tool), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def compiled(toolchain, registry):
    def compiled(variant):
        op = registry[variant.op]
        generated = codegen.generate(toolchain, op, variant, op.config(variant))
        return [compile_kernel(toolchain, kernel) for kernel in generated]

    return compiled


@pytest.mark.parametrize(("arch", "target"), [("sm_80", "sm_80"), ("sm_90", "sm_90a")])
def test_cubins_are_for_the_target_arch(compiled, tmp_path, arch, target):
    kernels = compiled(Variant("add", arch, "fp16", 1))
    for kernel in kernels:
        assert kernel.target == target
        assert kernel.cubin[:4] == b"\x7fELF"
        path = tmp_path / f"{kernel.sha256}.cubin"
        path.write_bytes(kernel.cubin)
        sass = cuobjdump("-sass", str(path))
        assert f"code for {target}" in sass
        assert f"Function : {kernel.function}" in sass
        # Every runtime parameter plus Triton's trailing scratch pointers, no more.
        elf = cuobjdump("-elf", str(path))
        assert (
            len(re.findall(r"EIATTR_KPARAM_INFO", elf))
            == len(kernel.params) + kernel.scratch_params
        )


def test_constants_leave_the_parameter_list(compiled):
    aligned, _, generic, _ = compiled(Variant("softmax", "sm_90", "fp32", 2))
    assert len(generic.params) - len(aligned.params) == 2  # the two row strides of 1
    assert all(p.kind != "stride" or p.dim != 1 for p in aligned.params)
    assert aligned.types[0] == "*fp32"


def test_matmul_tiles_need_dynamic_shared_memory(compiled):
    kernel = compiled(Variant("mm", "sm_90", "bf16", 2, (("fp32_precision", "tf32"),)))[0]
    assert kernel.shared > 48 * 1024  # the launcher must opt in above 48 KiB
    assert kernel.num_warps == 8


DESCRIPTOR_KERNEL = """import triton
import triton.language

@triton.jit
def ntops_descriptor(x_pointer, n):
    tile = triton.language.make_tensor_descriptor(
        x_pointer, shape=[n], strides=[1], block_shape=[64]
    )
    tile.store([0], tile.load([0]) + 1)
"""


def handwritten(name, arch, source, divisible):
    """A one-tensor kernel written directly in Triton, bypassing codegen."""
    return GeneratedKernel(
        variant=Variant(name, arch, "fp32", 1),
        spec=Spec(32),
        args=(Arg("x", 1, "fp32"),),
        source=source,
        function="ntops_descriptor",
        params=(Param("x_pointer", "pointer", 0), Param("n", "size", 0, 0)),
        signature=("*fp32", "i32"),
        divisible=divisible,
        grid="n",
        num_warps=4,
        num_stages=1,
    )


def test_kernels_needing_global_scratch_record_it(toolchain):
    """Device-side TMA descriptors live in global scratch, which the launcher allocates
    per launch (Triton's own AOT refuses such kernels): its size comes from the compile."""
    source = handwritten("descriptor", "sm_90", DESCRIPTOR_KERNEL, (0, 1))
    kernel = compile_kernel(toolchain, source)
    assert kernel.scratch == 128  # one descriptor per program
    assert kernel.scratch_align >= 64
    assert kernel.scratch_params == 2  # global, then profile scratch pointers


def test_launch_parameters_are_what_the_compile_made(toolchain, registry):
    """A warp-specialised kernel comes back with more warps than its configuration
    asked for; the launcher must launch what was compiled."""
    op = registry["mm"]
    variant = Variant("mm", "sm_90", "bf16", 2, (("fp32_precision", "tf32"),))
    specialised = next(c for c in op.candidates(variant, "prefill") if c.premake["warp_specialize"])
    (generated,) = codegen.generate(
        toolchain, op, variant, specialised, keep=lambda spec: spec.name == "i32-u101-a16"
    )
    kernel = compile_kernel(toolchain, generated)
    assert specialised.num_warps == 4
    assert kernel.num_warps == 12
    assert kernel.shared > 200 * 1024


def test_tiles_past_the_shared_memory_of_the_arch_fail_the_build(toolchain, registry):
    op = registry["mm"]
    variant = Variant("mm", "sm_86", "fp16", 2, (("fp32_precision", "tf32"),))
    huge = dataclasses.replace(op.config(variant, "prefill"), num_stages=6)
    huge = dataclasses.replace(
        huge, premake={**huge.premake, "block_size_m": 256, "block_size_n": 256}
    )
    (generated,) = codegen.generate(
        toolchain, op, variant, huge, keep=lambda spec: spec.name == "i32-u111-a16"
    )
    with pytest.raises(CompileError, match="a block on sm_86 gets at most 101376"):
        compile_kernel(toolchain, generated)


def test_triton_errors_name_the_kernel(toolchain):
    broken = DESCRIPTOR_KERNEL.replace("tile.load([0]) + 1", "undefined_name")
    kernel = handwritten("broken", "sm_80", broken, ())
    with pytest.raises(CompileError, match="broken-sm_80-fp32-nd1/i32: Triton failed"):
        compile_kernel(toolchain, kernel)


def test_triton_errors_in_called_functions_say_where_and_what(toolchain):
    """An error inside a Triton function the kernel calls: the report shows the line
    in the callee and the reason, not only the call site."""
    broken = DESCRIPTOR_KERNEL.replace(
        "tile.store([0], tile.load([0]) + 1)", "tile.store([0], helper(tile) + 1)"
    ) + (
        "\n@triton.jit\ndef helper(tile):\n"
        "    return tile.load([triton.language.zeros((2,), triton.language.int64)])\n"
    )
    kernel = handwritten("broken", "sm_90", broken, ())
    with pytest.raises(CompileError) as raised:
        compile_kernel(toolchain, kernel)
    assert "def helper(tile):" in str(raised.value)
