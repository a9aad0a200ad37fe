"""A runtime wrapper on the CPU: ntops_prebuilt's hand-written modules (aot/runtime)
loaded as a package whose launcher runs each launch's kernel under Triton's
interpreter (tests/unit/test_interpreted.py's `make`), so that an interpreted check
covers what a wrapper does around its kernels (dims moved, chunks and the launches
over their results, out=) as well as the kernels, against torch on the CPU.

Only for a fresh interpreter-mode process (the interpreted checks run in one): it
takes the name `ntops_prebuilt` in sys.modules."""

import importlib
import pathlib
import sys
import types

import torch

RUNTIME = pathlib.Path(__file__).parents[2] / "aot" / "runtime"
PACKAGE = "ntops_prebuilt"
SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
SHORT |= {torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64"}


class SubclassError(TypeError):
    """The launcher's refusal of tensor subclasses (the checks pass plain tensors)."""


def load(make, module, groups):
    """Runtime module `module` (its name in aot/runtime), with launches of the groups
    `groups` ({op: {group key: switches}}, as _ops.GROUPS has them) running `make`'s
    kernels, and chunk sizes from the kernel files' CONFIGs."""
    package = types.ModuleType(PACKAGE)
    package.__path__ = [str(RUNTIME)]
    sys.modules[PACKAGE] = package
    launcher = types.ModuleType(f"{PACKAGE}._C")
    launcher.group = lambda key: key
    launcher.launch = _launcher(make, groups)
    launcher.SubclassError = SubclassError
    launcher.overrides_dispatch = lambda kind: True
    launcher.increment_versions = lambda tensors: None
    ops = types.ModuleType(f"{PACKAGE}._ops")
    ops.GROUPS, ops.APIS = groups, []
    ops.TENSOR, ops.NUMBER, ops.GIVEN, ops.NONE = "tensor", "scalar", "given", "none"
    manifest = types.ModuleType(f"{PACKAGE}._manifest")
    manifest.manifest = lambda: {"variants": _variants(make, groups)}
    for name, stand_in in (("_C", launcher), ("_ops", ops), ("_manifest", manifest)):
        sys.modules[f"{PACKAGE}.{name}"] = stand_in
        setattr(package, name, stand_in)
    return importlib.import_module(f"{PACKAGE}.{module}")


def _variants(make, groups):
    """The manifest's variants as the runtime reads them: each group's switches and
    configuration."""
    return [
        {
            "op": op,
            "switches": dict(values),
            "buckets": {"all": {"config": {"premake": dict(_config(make, op, values))}}},
        }
        for op, keys in groups.items()
        for values in keys.values()
    ]


def _config(make, op, values, dtype="fp32", ndim=2):
    """The configuration of op's kernels of switch values `values`: its kernel file's
    `config(variant)` (tuned ones: its CONFIG)."""
    from ntops_aot.aot.declare.space import Variant

    module = make.registry[op].module
    if getattr(module, "TUNING", None) or not hasattr(module, "config"):
        return module.CONFIG.premake
    return module.config(Variant(op, "sm_90", dtype, ndim, tuple(values.items()))).premake


def _outputs(make, op, values):
    """Where op's outputs are among a launch's arguments: the parameters of its
    application for switch `values` (premake's, where the file has one: steps of an op
    take different arguments) less the ones the launcher gives (a workspace, the
    launch's id)."""
    module = make.registry[op].module
    premake = getattr(module, "premake", None)
    application = premake(2, "fp32", **values)[1] if premake else module.application
    code = application.__code__
    given = (module.SPACE.workspace, module.SPACE.launch_id)
    names = [name for name in code.co_varnames[: code.co_argcount] if name not in given]
    return [names.index(name) for name in module.SPACE.outputs if name in names]


def _launcher(make, groups):
    """launch(group, *args): the group's kernel, for its first tensor's dtype and its
    widest tensor's ndim (rows of 2 dims, strided_copy's 4), on the arguments as given
    (as the launcher passes tensors it does not coalesce); nothing where an output is
    empty, as the launcher (empty inputs are launched on: addmv's of no columns)."""
    switches = {key: (op, values) for op, keys in groups.items() for key, values in keys.items()}
    kernels = {}

    def launch(group, *args):
        tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
        op, values = switches[group]
        if all(args[at].numel() for at in _outputs(make, op, values)):
            key = (group, SHORT[tensors[0].dtype], max(tensor.ndim for tensor in tensors))
            if key not in kernels:
                config = _config(make, op, values, key[1], key[2])
                kernels[key] = make(op, key[2], key[1], **values, **config)
            kernels[key](*args)

    return launch
