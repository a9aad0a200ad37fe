"""HF transformers models on the wheel's kernels, in one call:

    import ntops_prebuilt.integrations.transformers as ntt

    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16, device_map="cuda")
    patched = ntt.apply(model)  # its attention, RMSNorms, rotary embedding, MLPs, nn.Linears
    model.generate(...)  # eager, or with cache_implementation="static" under torch.compile
    patched.remove()  # transformers' own forwards again

For the Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2 and Gemma 3 (text) families, on
transformers 4.56 to 5.x (tested: 4.56.2 and 5.24.0). Like Liger-Kernel's
`apply_liger_kernel_to_llama(model=...)`, `apply` replaces forwards of the model's own
modules (nothing of another model changes); attention goes through transformers'
AttentionInterface as attn_implementation "ntops", which `register()` alone also makes
available (`from_pretrained(..., attn_implementation="ntops")`: attention only).

What the wheel cannot serve runs transformers' own code, with one warning
(`FallbackWarning`) per part and reason: an op the wheel was not built with, a dtype or
head dim it has no kernels for, CPU tensors, gradients, dropout, softcapped attention
under a mask. Under torch.compile the wheel's functions are torch.library ops and the
warnings are given while Dynamo traces: nothing here breaks a graph. Continuous batching
(`generate_batch`, paged caches) is not served in this version: transformers takes only
its own implementation names there.
"""

import dataclasses
import sys
from collections.abc import Callable

import torch
import transformers
from packaging.version import Version
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from . import _attention, _layers
from ._served import FallbackWarning, Served, fall_back

__all__ = ["FAMILIES", "NAME", "FallbackWarning", "Patched", "apply", "register"]

NAME = "ntops"
OLDEST = Version("4.56")  # AttentionMaskInterface with sdpa's masks, set_attn_implementation
# config.model_type -> (the prefix of its module classes, 1 where RMSNorm scales by 1 + weight).
FAMILIES = {
    "llama": ("Llama", 0),
    "mistral": ("Mistral", 0),
    "qwen2": ("Qwen2", 0),
    "qwen3": ("Qwen3", 0),
    "gemma": ("Gemma", 1),
    "gemma2": ("Gemma2", 1),
    "gemma3_text": ("Gemma3", 1),
}
# What `apply` replaces, by the ops each kind needs in the wheel.
OPS = {
    "norm": ("rms_norm",),
    "mlp": (),  # its activation's (_layers.ACTIVATIONS)
    "linear": ("mm", "addmm"),
    "rotary": ("rotary_position_embedding",),
}


@dataclasses.dataclass
class Patched:
    """What `apply` replaced in `model` (`modules`: kind -> the modules' names), and
    `remove()`, which puts transformers' forwards and attention back."""

    model: torch.nn.Module
    modules: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    undo: list[Callable[[], None]] = dataclasses.field(default_factory=list)

    def remove(self):
        while self.undo:
            self.undo.pop()()
        self.modules.clear()


def register(device=None):
    """Make attn_implementation "ntops" the wheel's attention, with sdpa's masks, for
    kernels that run on `device` (default: the current CUDA device, if any)."""
    served = Served.of_wheel(_capability(device))
    AttentionInterface.register(NAME, _attention.attention(served))
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return served


def apply(model, *, attention=True, norms=True, rotary=True, mlp=True, linear=True):
    """Run `model` (a transformers model of one of FAMILIES, with its dtype and device
    set) on the wheel's kernels: the parts asked for, where the wheel has their ops.
    Returns the `Patched` record; nothing is patched (with a warning) for another
    family or a transformers older than OLDEST."""
    patched = Patched(model)
    family = _family(model)
    if family is None:
        return patched
    prefix, offset = family
    served = Served.of_wheel(_capability(_device(model)))
    if attention:
        _use_attention(model, patched, device=_device(model))
    wanted = {"norm": norms, "mlp": mlp, "linear": linear, "rotary": rotary}
    for name, module in model.named_modules():
        kind = _kind(module, prefix)
        if kind is None or not wanted[kind] or _replaced(module):
            continue
        if not _has_ops(served, kind, module):
            continue
        original = module.forward
        if kind == "norm":
            forward = _layers.rms_norm(module, original, served, offset)
        elif kind == "mlp":
            forward = _layers.gated_mlp(module, original, served)
        elif kind == "linear":
            forward = _layers.linear(module, original, served)
        else:
            _install_rotary(sys.modules[type(module).__module__], served)
            forward = _layers.half_tables(original)
        _replace(module, forward, patched)
        patched.modules.setdefault(kind, []).append(name)
    return patched


def _family(model):
    """The model's (prefix, offset) from FAMILIES, or None with a warning."""
    what = type(model).__name__
    if Version(transformers.__version__).release < OLDEST.release:
        fall_back(what, f"transformers {transformers.__version__} is older than {OLDEST}")
        return None
    model_type = getattr(model.config, "model_type", None)
    if model_type not in FAMILIES:
        fall_back(what, f"model_type {model_type!r} is not one of {', '.join(FAMILIES)}")
        return None
    return FAMILIES[model_type]


def _kind(module, prefix):
    """Which of OPS' kinds `module` is, by its class (the family's own, or nn.Linear)."""
    if type(module) is torch.nn.Linear:
        return "linear"
    name = type(module).__name__
    for kind, suffix in (("norm", "RMSNorm"), ("mlp", "MLP"), ("rotary", "RotaryEmbedding")):
        if name == prefix + suffix:
            return kind
    return None


def _has_ops(served, kind, module):
    """Whether the wheel has every op `kind` needs for `module`; if not, a warning."""
    what = "nn.Linear" if kind == "linear" else type(module).__name__
    ops = OPS[kind]
    if kind == "mlp":
        activation = type(module.act_fn).__name__
        if activation not in _layers.ACTIVATIONS:
            fall_back(
                what, f"its activation {activation} (the wheel fuses silu and gelu's tanh form)"
            )
            return False
        ops = _layers.ACTIVATIONS[activation]
    for op in ops:
        why = served.missing(op)
        if why is not None:
            fall_back(what, why)
            return False
    return True


def _use_attention(model, patched, device):
    """attn_implementation "ntops" for `model`, the one it had back on `remove()`."""
    register(device)
    before = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    if model.config._attn_implementation != NAME:
        fall_back(type(model).__name__, "its attention takes no attn_implementation by name")
        return
    patched.undo.append(lambda: model.set_attn_implementation(before))
    patched.modules["attention"] = [NAME]


def _install_rotary(modeling, served):
    """The family module's apply_rotary_pos_emb, made `_layers.rotary` of it (once per
    process: it runs stock code on the tables of models `apply` did not patch)."""
    stock = modeling.apply_rotary_pos_emb
    if getattr(stock, "stock", None) is None:
        what = f"{modeling.__name__.rsplit('.', 1)[-1]}.apply_rotary_pos_emb"
        modeling.apply_rotary_pos_emb = _layers.rotary(stock, served, what)


def _replaced(module):
    """Whether `module`'s forward is already one of `apply`'s (a second `apply`)."""
    return getattr(module.__dict__.get("forward"), "ntops_prebuilt", False)


def _replace(module, forward, patched):
    """`module.forward` made `forward` (an attribute of the instance), and undone."""
    before = module.__dict__.get("forward")
    forward.ntops_prebuilt = True
    module.forward = forward

    def undo():
        if before is None:
            del module.forward
        else:
            module.forward = before

    patched.undo.append(undo)


def _device(model):
    return next((parameter.device for parameter in model.parameters()), None)


def _capability(device):
    """The compute capability (90 for sm_90) of `device`, of the current CUDA device for
    a device that is not CUDA's, or None without one."""
    if device is not None and torch.device(device).type == "cuda":
        index = torch.device(device).index
    elif torch.cuda.is_available():
        index = torch.cuda.current_device()
    else:
        return None
    major, minor = torch.cuda.get_device_capability(index)
    return major * 10 + minor
