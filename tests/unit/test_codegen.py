"""Stage 2: premake -> Triton source, with the target's properties, on a CPU."""

import ast
import json
import os
import subprocess
import sys

import pytest

from ntops_aot.aot.compile import codegen
from ntops_aot.aot.declare.space import Config, Variant
from ntops_aot.aot.toolchain.targets import TARGETS


@pytest.fixture
def generate(toolchain, registry):
    def generate(variant, config=None):
        op = registry[variant.op]
        return codegen.generate(toolchain, op, variant, config or op.config(variant))

    return generate


def test_parameters_map_to_arguments(generate):
    kernels = generate(Variant("add", "sm_90", "fp16", 2))
    assert [k.spec.name for k in kernels] == ["i32-u111-a16", "i32-u111", "i32", "i64"]
    params = kernels[0].params
    names = [arg.name for arg in kernels[0].args]
    assert names == ["input", "other", "alpha", "output"]
    described = {(p.kind, names[p.arg], p.dim) for p in params}
    assert ("pointer", "input", -1) in described
    assert ("stride", "output", 1) in described
    assert ("scalar", "alpha", -1) in described
    assert len(params) == 3 * (1 + 2 + 2) + 1


def test_specs_compile_unit_strides_as_constants(generate):
    aligned, unit, generic, wide = generate(Variant("add", "sm_90", "fp32", 1))
    assert aligned.signature.count("constexpr") == 3
    assert generic.signature.count("constexpr") == 0
    assert set(wide.signature) >= {"i64", "*fp32", "fp32"}
    assert "i32" not in wide.signature
    assert len(aligned.divisible) == 6  # three pointers and three sizes
    assert unit.divisible == ()


def test_element_wise_specialisations_stop_at_two_dims(generate):
    """Past 2 dims the flattened arrangement keeps nothing the specialisations assume:
    4-dim calls take the generic kernel."""
    four = generate(Variant("add", "sm_90", "fp16", 4, widest=True))
    assert [k.spec.name for k in four] == ["i32", "i64"]
    two = generate(Variant("add", "sm_90", "fp16", 2))
    assert [k.spec.name for k in two][:2] == ["i32-u111-a16", "i32-u111"]


def test_specialised_ndims_need_the_generic_kernel():
    from ntops_aot.aot.declare.space import VariantSpace

    with pytest.raises(ValueError, match="generic"):
        VariantSpace(dtypes=("fp16",), ndims=(4,), specs=("unit",), specialized_ndims=2)


def test_wide_aligned_kernels_are_64_bit_with_the_aligned_assumptions(generate):
    """paged_attention declares "wide-aligned": a server's cache passes 2^31 elements, so
    its 64-bit kernels get the aligned kernels' assumptions (128-bit loads, pipelined),
    tried after the 32-bit ones and built per bucket as they are."""
    from ntops_aot.aot.compile.variant import selector
    from ntops_aot.aot.plan.builds import Build

    variant = Variant("paged_attention", "sm_90", "bf16", 3, (("head_dim", "128"),))
    kernels = generate(variant)
    names = [k.spec.name for k in kernels]
    assert [name.split("-")[0] for name in names] == ["i32", "i64", "i64"]
    aligned32, aligned64, wide = kernels
    assert aligned64.spec.aligned
    assert aligned64.spec.unit == aligned32.spec.unit
    # sizes and strides in 64 bits (the scalars the op declares int32 stay so)
    assert aligned64.signature.count("i32") < aligned32.signature.count("i32")
    assert aligned64.signature.count("i64") > aligned32.signature.count("i64")
    assert len(aligned64.divisible) == len(aligned32.divisible)
    assert not wide.spec.aligned
    assert len(wide.divisible) < len(aligned64.divisible)  # the workspace only
    per_bucket = selector(Build(Config(), aligned=True))
    assert [per_bucket(k.spec) for k in kernels] == [True, True, False]
    # The other ops keep the four default kinds.
    assert [k.spec.name for k in generate(Variant("add", "sm_90", "fp32", 1))][-1] == "i64"


def test_64_bit_kernels_compute_offsets_in_64_bits(generate):
    generic, wide = generate(Variant("add", "sm_90", "fp32", 1))[2:]
    assert "program_id(0).to(triton.language.int64)" in wide.source
    assert "program_id(0).to(" not in generic.source
    ast.parse(wide.source)


def test_defaults_follow_the_target_not_the_host(generate):
    """ninetoothed sizes its pipeline from the shared memory it is told about."""
    variant = Variant("softmax", "sm_86", "fp16", 2)
    small = generate(variant, Config())[0]
    large = generate(Variant("softmax", "sm_90", "fp16", 2), Config())[0]
    assert small.num_stages == TARGETS["sm_86"].max_shared_mem // 2**15 == 3
    assert large.num_stages == TARGETS["sm_90"].max_shared_mem // 2**15 == 7


def test_grids_are_expressions_over_sizes(generate):
    kernel = generate(Variant("softmax", "sm_90", "fp16", 2))[0]
    names = {node.id for node in ast.walk(ast.parse(kernel.grid)) if isinstance(node, ast.Name)}
    sizes = {p.name for p in kernel.params if p.kind == "size"}
    assert names
    assert names <= sizes


def test_persistent_grids_are_capped_at_the_multiprocessors(generate, registry):
    variant = Variant("mm", "sm_90", "bf16", 2, (("fp32_precision", "tf32"),))
    op = registry["mm"]
    tiles = generate(variant, op.config(variant, "batched"))[0]
    persistent = generate(variant, op.config(variant, "prefill"))[0]
    assert op.config(variant, "prefill").persistent == 1
    assert "min" not in tiles.grid
    assert persistent.grid.startswith("min(")
    names = {n.id for n in ast.walk(ast.parse(persistent.grid)) if isinstance(n, ast.Name)}
    sizes = {p.name for p in persistent.params if p.kind == "size"}
    assert names - sizes == {"min", "max", codegen.MULTIPROCESSORS}
    # 128x256 tiles of a 4096 x 4096 output: 512 tiles, 132 programs on an H100.
    values = dict.fromkeys(sizes, 4096) | {"min": min, "max": max, codegen.MULTIPROCESSORS: 132}
    assert eval(persistent.grid, values) == 132
    assert eval(tiles.grid, dict.fromkeys(sizes, 4096)) == (4096 // 64) * (4096 // 64)


def test_cluster_grids_count_clusters(registry):
    """A program of num_ctas blocks: persistent and split grids count what fits."""
    clustered = Config({}, 8, 3, persistent=1, num_ctas=2)
    grid = codegen._launched("tiles", clustered)
    assert eval(grid, {"tiles": 512, codegen.MULTIPROCESSORS: 132}) == 66


def test_constexpr_tensors_are_compiled_in_not_passed(generate):
    """A premake's constexpr tensors (a configuration's choices) become constants of
    the kernel: no argument of the call, no parameter of the launch."""
    variant = Variant("mm", "sm_90", "bf16", 2, (("fp32_precision", "tf32"),))
    aligned = generate(variant)[0]
    assert [arg.name for arg in aligned.args] == ["input", "other", "output"]
    constants = [p for p in aligned.params if p.kind == "constant"]
    assert {128, 256, 64, "tf32"} <= {p.value for p in constants}  # the tile, the precision
    assert all(aligned.signature[aligned.params.index(p)] == "constexpr" for p in constants)
    # TMA only where the spec guarantees 16-byte alignment: the premake saw the spec.
    assert "make_tensor_descriptor" in aligned.source
    tma = {p.name: p.value for p in constants}
    generic = generate(variant)[-2]
    assert generic.spec.name == "i32"
    assert {p.name: p.value for p in generic.params if p.kind == "constant"} != tma


def test_generation_is_deterministic(generate):
    variant = Variant("rms_norm", "sm_90", "bf16", 3, (("weight", "given"),))
    first, second = generate(variant), generate(variant)
    assert [k.source for k in first] == [k.source for k in second]


def test_building_leaves_the_home_directory_alone(tmp_path):
    """ninetoothed makes ~/.ninetoothed on import; builds keep it out of HOME."""
    home = tmp_path / "home"
    home.mkdir()
    script = (
        "import pathlib\n"
        "from ntops_aot.aot import build\n"
        "options = build.BuildOptions(\n"
        "    arches=('sm_90',), ops=('gelu',), dtypes=('fp32',), ndims=(1,),\n"
        f"    build_dir=pathlib.Path({str(tmp_path / 'gen')!r}),\n"
        f"    out_dir=pathlib.Path({str(tmp_path / 'dist')!r}),\n"
        ")\n"
        "print(build.build(options).wheel)\n"
    )
    env = dict(os.environ, HOME=str(home))
    env.pop("TRITON_CACHE_DIR", None)
    subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True)
    assert list(home.iterdir()) == []
    assert (tmp_path / "gen" / "cache" / "toolchain" / "triton").is_dir()


@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_every_target_describes_itself_to_triton(toolchain, arch):
    with toolchain.target(TARGETS[arch]) as driver:
        import triton

        assert triton.runtime.driver.active is driver
    properties = driver.utils.get_device_properties(driver.get_current_device())
    assert properties["max_shared_mem"] == TARGETS[arch].max_shared_mem
    assert driver.get_current_target().arch == TARGETS[arch].capability
    json.dumps(properties)
