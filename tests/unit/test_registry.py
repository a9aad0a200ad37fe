"""Kernels, runtime functions and tests match one to one, and the runtime has the
ntops.torch names and signatures (and the fusions beyond them, marked)."""

import inspect
import pathlib

ROOT = pathlib.Path(__file__).parents[2]

SIGNATURES = {
    "scaled_dot_product_attention": (
        "(query, key, value, attn_mask=None, dropout_p=0, is_causal=False, scale=None, "
        "enable_gqa=False, causal_variant=None, present_key=None, present_value=None, "
        "present_key_slot=None, present_value_slot=None)"
    ),
    "rotary_position_embedding": "(input, sin_table, cos_table, interleaved=True, inplace=False)",
    "layer_norm": "(input, normalized_shape, weight=None, bias=None, eps=1e-05)",
    "rms_norm": "(input, normalized_shape, weight=None, eps=None)",
    "mm": "(input, mat2, *, out=None)",
    "bmm": "(input, mat2, *, out=None)",
    "addmm": "(input, mat1, mat2, *, beta=1, alpha=1, out=None)",
    "matmul": "(input, other, *, out=None)",
    "relu": "(input, inplace=False)",
    "gelu": "(input, approximate='none')",
    "silu": "(input, inplace=False)",
    "silu_mul": "(input, other, *, out=None)",  # beyond ntops.torch: SwiGLU's fused gate
    "sigmoid": "(input, *, out=None)",
    "tanh": "(input, *, out=None)",
    "softmax": "(input, dim, dtype=None)",
    "dropout": "(input, p=0.5, training=True, inplace=False)",
    "abs": "(input, *, out=None)",
    "neg": "(input, *, out=None)",
    "add": "(input, other, *, alpha=1, out=None)",
    "sub": "(input, other, *, alpha=1, out=None)",
    "mul": "(input, other, *, out=None)",
    "div": "(input, other, *, rounding_mode=None, out=None)",
    "pow": "(input, exponent, *, out=None)",
    "exp": "(input, *, out=None)",
    "rsqrt": "(input, *, out=None)",
    "sin": "(input, *, out=None)",
    "cos": "(input, *, out=None)",
    "clamp": "(input, min=None, max=None, *, out=None)",
    **dict.fromkeys(("eq", "ne", "lt", "le", "gt", "ge"), "(input, other, *, out=None)"),
    "bitwise_and": "(input, other, *, out=None)",
    "bitwise_or": "(input, other, *, out=None)",
    "bitwise_not": "(input, *, out=None)",
    "isnan": "(input)",
    "isinf": "(input)",
    "set_default_num_warps": "(num_warps)",
    "set_default_num_stages": "(num_stages)",
    "set_default_max_num_configs": "(max_num_configs)",
}
# Runtime functions that route to other ops' kernels or configure the build.
WITHOUT_KERNELS = {
    "matmul",
    "set_default_num_warps",
    "set_default_num_stages",
    "set_default_max_num_configs",
}


def test_exports_exactly_the_ntops_torch_functions(installed):
    functions = {
        name for name in installed.torch.__all__ if inspect.isfunction(getattr(installed, name))
    }
    assert functions == set(SIGNATURES)
    for name, signature in SIGNATURES.items():
        assert str(inspect.signature(getattr(installed, name))) == signature, name
        assert getattr(installed.torch, name) is getattr(installed, name)


def test_every_op_has_a_runtime_function_and_nothing_else_does(registry, installed):
    assert set(registry) == set(SIGNATURES) - WITHOUT_KERNELS


def test_every_op_has_gpu_tests(registry):
    gpu = "".join(path.read_text() for path in (ROOT / "tests" / "gpu").glob("test_*.py"))
    for name in SIGNATURES:
        called = f"nt.{name}(" in gpu or f'"{name}"' in gpu
        assert called, f"no GPU test calls ntops_prebuilt.{name}"


def test_every_kernel_file_has_the_three_parts(registry):
    for name, op in registry.items():
        module = op.module
        assert callable(module.premake), name
        assert any(attribute.startswith("arrangement") for attribute in vars(module)), name
        assert any(attribute.startswith("application") for attribute in vars(module)), name
