"""Kernels, runtime functions and tests match one to one, and the runtime has the
ntops.torch names and signatures."""

import ast
import inspect
import pathlib

ROOT = pathlib.Path(__file__).parents[2]
RUNTIME = ROOT / "aot" / "runtime" / "torch.py"

SIGNATURES = {
    "add": "(input, other, *, alpha=1, out=None)",
    "gelu": "(input, approximate='none')",
    "mm": "(input, mat2, *, out=None)",
    "mul": "(input, other, *, out=None)",
    "rms_norm": "(input, normalized_shape, weight=None, eps=None)",
    "softmax": "(input, dim, dtype=None)",
}


def runtime_functions():
    tree = ast.parse(RUNTIME.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }


def runtime_groups():
    tree = ast.parse(RUNTIME.read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "group"
        and isinstance(node.args[0], ast.Constant)
    }


def test_every_op_has_a_runtime_function_and_nothing_else_does(registry):
    assert runtime_functions() == set(registry)


def test_every_switch_combination_is_reachable_from_the_runtime(registry):
    from ntops_aot.aot.space import group_key

    expected = {
        group_key(name, switches)
        for name, op in registry.items()
        for switches in op.space.all_switch_choices()
    }
    assert runtime_groups() == expected


def test_every_op_has_gpu_tests(registry):
    semantics = (ROOT / "tests" / "gpu" / "test_semantics.py").read_text()
    every_kernel = (ROOT / "tests" / "gpu" / "test_every_kernel.py").read_text()
    for name in registry:
        assert f"nt.{name}(" in semantics, f"tests/gpu/test_semantics.py never calls {name}"
        assert f'"{name}"' in every_kernel or f"nt.{name}(" in every_kernel, name


def test_every_kernel_file_has_the_three_parts(registry):
    for name, op in registry.items():
        module = op.module
        assert callable(module.premake), name
        assert any(attribute.startswith("arrangement") for attribute in vars(module)), name
        assert any(attribute.startswith("application") for attribute in vars(module)), name


def test_exports_have_the_ntops_torch_signatures(installed):
    for name, signature in SIGNATURES.items():
        assert str(inspect.signature(getattr(installed, name))) == signature
        assert getattr(installed.torch, name) is getattr(installed, name)
    public = {name for name in installed.__all__ if callable(getattr(installed, name))}
    assert public - {"CudaError", "NotBuiltError", "manifest", "preload"} == set(SIGNATURES)
