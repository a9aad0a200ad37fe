"""Kernel files, the functions the wheel exports and their tests match one to one,
all following the kernel files' declarations (`API`): nothing here lists an op."""

import importlib
import inspect

import pytest

from ntops_aot.aot.declare import api as api_

# What the runtime exports beside the declared functions: configuration.
SETTINGS = {"set_default_num_warps", "set_default_num_stages", "set_default_max_num_configs"}


def _declared(registry):
    return [api for op in registry.values() for api in op.apis()]


def test_exports_exactly_the_declared_functions_with_their_signatures(registry, installed):
    functions = {
        name for name in installed.torch.__all__ if inspect.isfunction(getattr(installed, name))
    }
    declared = {api["name"]: api for api in _declared(registry)}
    # A wrapper's other functions (flash_attn_varlen_func over paged_attention's op).
    assert functions == set(declared) | SETTINGS | installed.torch.EXPORTED
    for name, api in declared.items():
        function = getattr(installed, name)
        assert str(inspect.signature(function)) == api["signature"], name
        assert getattr(installed.torch, name) is function


def test_signatures_are_the_references_where_torch_spells_them(registry):
    """A declared signature has the parameters of the torch function it names as its
    reference (torch's Python-level functions; builtins hide theirs), in its order,
    less the ones torch has that the wheel lacks: a subsequence of torch's."""
    checked = 0
    for api in _declared(registry):
        module, _, name = api["reference"].rpartition(".")
        if not module.startswith("torch"):
            continue
        try:
            theirs = list(
                inspect.signature(getattr(importlib.import_module(module), name)).parameters
            )
        except (TypeError, ValueError):
            continue  # a builtin
        if theirs == ["args", "kwargs"]:
            continue  # a dispatcher (F.max_pool2d's boolean_dispatch) hides them as builtins do
        ours = [param["name"] for param in api["params"]]
        assert _in_order(ours, theirs), f"{api['name']}{tuple(ours)}: not in the order of {theirs}"
        checked += 1
    assert checked >= 5


def _in_order(ours, theirs):
    """Whether `ours` is a subsequence of `theirs`: every name there, in its order."""
    remaining = iter(theirs)
    return all(name in remaining for name in ours)


def test_the_order_check_refuses_a_reordered_or_foreign_parameter():
    theirs = ["input", "p", "training", "inplace"]
    assert _in_order(["input", "p", "inplace"], theirs)
    assert not _in_order(["input", "training", "p"], theirs)
    assert not _in_order(["input", "p", "generator"], theirs)


def test_every_declared_function_has_samples_of_its_own_parameters(registry):
    for api in _declared(registry):
        names = {param["name"] for param in api["params"]}
        assert api["samples"], f"{api['name']}: no samples to test it on"
        for sample in api["samples"]:
            assert set(sample["values"]) <= names, api["name"]
            required = {param["name"] for param in api["params"] if param["required"]}
            assert required <= set(sample["values"]), api["name"]


def test_ordinary_ops_switches_are_picked_by_their_parameters(registry):
    for name, op in registry.items():
        for api in op.apis():
            if api["wrapper"] is None:
                assert set(api["switches"]) == set(op.space.switches), name


def test_every_kernel_file_has_the_three_parts_and_an_api(registry):
    for name, op in registry.items():
        module = op.module
        assert callable(module.premake), name
        assert any(attribute.startswith("arrangement") for attribute in vars(module)), name
        assert any(attribute.startswith("application") for attribute in vars(module)), name
        assert op.apis(), name


def test_declarations_are_read_as_torch_reads_schemas():
    params = api_.parse("(Tensor input, Tensor|Number other, *, Scalar alpha=1, Tensor? out=None)")
    assert [(p.name, p.type, p.keyword, p.required) for p in params] == [
        ("input", "Tensor", False, True),
        ("other", "Tensor|Number", False, True),
        ("alpha", "Scalar", True, False),
        ("out", "Tensor?", True, False),
    ]
    described = api_.describe(
        "add",
        api_.Api(
            "(Tensor input, Tensor|Number other, *, Scalar alpha=1, Tensor? out=None)", "torch.add"
        ),
        {"other": ("tensor", "scalar")},
        "kernels/add.py",
    )
    assert described["signature"] == "(input, other, *, alpha=1, out=None)"
    assert described["kernel"] == ["input", "other", "alpha"]
    assert {o["name"]: o["schema"] for o in described["overloads"]} == {
        "Tensor": "(Tensor input, Tensor other, *, Scalar alpha=1) -> Tensor",
        "out": "(Tensor input, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
        "Scalar": "(Tensor input, Scalar other, *, Scalar alpha=1) -> Tensor",
        "Scalar_out": (
            "(Tensor input, Scalar other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"
        ),
    }
    relu = api_.describe(
        "relu", api_.Api("(Tensor input, bool inplace=False)", "F.relu"), {}, "relu"
    )
    assert [o["schema"] for o in relu["overloads"]] == [
        "(Tensor input) -> Tensor",
        "(Tensor(a!) input) -> Tensor(a!)",
    ]


def test_declarations_that_cannot_be_rendered_are_refused():
    with pytest.raises(ValueError, match="picked by no parameter"):
        api_.describe("gelu", api_.Api("(Tensor input)", "F.gelu"), {"approximate": ("none",)}, "g")
    with pytest.raises(ValueError, match="cannot read"):
        api_.parse("(Tensor input, complex z)")
    with pytest.raises(ValueError, match="unknown"):
        api_.describe(
            "abs", api_.Api("(Tensor input)", "torch.abs", (api_.sample(x=(3,)),)), {}, "a"
        )


def _altered(op, **space):
    """Kernel file `op` with its SPACE changed, as a module of its own."""
    import dataclasses
    import types

    module = types.ModuleType(f"{op.module.__name__}_altered")
    module.__dict__.update({k: v for k, v in vars(op.module).items() if not k.startswith("__")})
    module.SPACE = dataclasses.replace(op.space, **space)
    return type(op)(op.name, module)


def _defaults(op):
    from ntops_aot.aot.declare.registry import every_variant

    buckets = op.tuning.names if op.tuning else ("all",)
    return {v.id: {b: op.config(v, b) for b in buckets} for v in every_variant(op.name, op.space)}


@pytest.mark.parametrize(
    ("op", "space", "words"),
    [
        ("mm", {"dims": {"input": ("rows",), "output": ("rows", "columns")}}, "1 names for its 2"),
        ("mm", {"dims": {"input": ("rows", "inner"), "other": ("inner", "n"),
                         "output": ("rows", "m/k")}}, r"each bound by an input"),
        ("add", {"dims": {"input": ("n",)}}, "which the launcher coalesces"),
        ("scaled_dot_product_attention", {"dims": {"query": ("b", "h", "s", "d={width}")}},
         "names no switch value"),
    ],
)  # fmt: skip
def test_declarations_are_checked_when_a_kernel_file_is_loaded(registry, op, space, words):
    """A SPACE the launcher could not serve is refused by the registry, naming the
    kernel file, before any variant compiles (it used to fail after all had)."""
    from ntops_aot.aot.declare.registry import check
    from ntops_aot.aot.errors import UnsupportedKernel

    altered = _altered(registry[op], **space)
    check(registry[op], _defaults(registry[op]))  # the file as it is passes
    with pytest.raises(UnsupportedKernel, match=f"kernels.{op}_altered: .*{words}"):
        check(altered, _defaults(altered))


def _kernel_sources(module):
    """The source of an op's kernel file and of the kernels/_lib modules it imports."""
    sources = [inspect.getsource(module)]
    for value in vars(module).values():
        home = getattr(inspect.getmodule(value), "__name__", "")
        if "._lib." in home:
            sources.append(inspect.getsource(importlib.import_module(home)))
    return "\n".join(sources)


def test_ops_whose_kernels_load_by_tma_name_their_descriptors(registry):
    """A descriptor cannot step a dim by 0 bytes: every op whose kernels may load a
    tensor through TMA declares which (SPACE.descriptors), so that the launcher keeps
    expanded ones off those kernels (a broadcast row of x @ W.t() at 130 rows read
    garbage before)."""
    for name, op in registry.items():
        source = _kernel_sources(op.module)
        loads_by_tma = "make_tensor_descriptor" in source or "tma.async_copy" in source
        assert bool(op.space.descriptors) == loads_by_tma, name
