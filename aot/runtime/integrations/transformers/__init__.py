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
available (`from_pretrained(..., attn_implementation="ntops")`: attention only). Where
the attention, rotation and products are all the wheel's, the attention modules' forward
is `_self_attention`'s, over q/k/v projections fused into one product, and the MLPs'
gate and up projections are one product too (`_fused`: the parameters become rows of one
storage; `remove()` gives them their own again).

What the wheel cannot serve runs transformers' own code, with one warning
(`FallbackWarning`) per part and reason: an op the wheel was not built with, a dtype or
head dim it has no kernels for, CPU tensors, gradients, dropout, softcapped attention
under a mask. Under torch.compile the wheel's functions are torch.library ops and the
warnings are given while Dynamo traces: nothing here breaks a graph.

Continuous batching (transformers 5.x's `generate_batch`) runs within `batching(model)`,
as attn_implementation "ntops_flash" (PAGED) on the wheel's flash_attn_varlen_func
(`_batching`; its decode fast path over block tables stays transformers' to turn off).
"""

import contextlib
import dataclasses
import sys
from collections.abc import Callable

import torch
import transformers
from packaging.version import Version
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from . import _attention, _batching, _fused, _layers, _self_attention
from ._attention import NAME
from ._batching import PAGED
from ._fused import Fused
from ._served import FallbackWarning, Served, fall_back

__all__ = [
    "FAMILIES", "NAME", "PAGED", "FallbackWarning", "Patched", "apply", "batching", "register",
]  # fmt: skip

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
    "fp8_linear": (),  # its weight layout's (_layers.FP8_OPS)
    "fbgemm_fp8_linear": ("scaled_fp8_quant", "scaled_mm"),
    "compressed_fp8_linear": ("scaled_fp8_quant", "scaled_mm"),
    "rotary": ("rotary_position_embedding",),
    "self_attention": ("rotary_position_embedding",),  # and a product (`_fits`)
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
    """Make attn_implementation "ntops" the wheel's attention, with sdpa's masks, and
    "ntops_flash" (PAGED) continuous batching's (`generate_batch`), for kernels that run
    on `device` (default: the current CUDA device, if any)."""
    served = Served.of_wheel(_capability(device))
    AttentionInterface.register(NAME, _attention.attention(served))
    AttentionInterface.register(PAGED, _batching.attention(served))
    for name in (NAME, PAGED):
        AttentionMaskInterface.register(name, sdpa_mask)
    return served


@contextlib.contextmanager
def batching(model):
    """Within: `model.generate_batch(...)` (transformers 5.x continuous batching) on the
    wheel's flash_attn_varlen_func, attn_implementation PAGED ("ntops_flash"; `_batching`
    says why that name). Set on the config itself: `set_attn_implementation` loads a
    flash name's functions through flash_attn or a hub kernel, and finds neither. The
    attn_implementation the model had is back on leaving. A transformers whose
    continuous batching hands attention functions its cache to update
    (`_batching.packed_batches`: before the 5.2x releases) keeps its own attention,
    with one warning."""
    register(_device(model))
    if not _batching.packed_batches():
        fall_back(
            f"{type(model).__name__}'s continuous batching",
            f"transformers {transformers.__version__} passes paged attention functions "
            'its cache to update ("paged|sdpa", "paged|flash_attention_2"); '
            f'"{PAGED}" serves the packed batches of newer releases (tested: 5.24.0)',
        )
        yield model
        return
    before = model.config._attn_implementation
    model.config._attn_implementation = PAGED
    try:
        yield model
    finally:
        model.config._attn_implementation = before


def apply(model, *, attention=True, norms=True, rotary=True, mlp=True, linear=True):
    """Run `model` (a transformers model of one of FAMILIES, with its dtype and device
    set) on the wheel's kernels: the parts asked for, where the wheel has their ops.
    Returns the `Patched` record; nothing is patched (with a warning) for another
    family or a transformers older than OLDEST."""
    patched = Patched(model)
    family = _family(model)
    if family is None:
        return patched
    served = Served.of_wheel(_capability(_device(model)))
    if attention:
        _use_attention(model, patched, device=_device(model))
    wanted = {"norm": norms, "mlp": mlp, "linear": linear, "rotary": rotary}
    wanted |= {"fp8_linear": linear, "fbgemm_fp8_linear": linear, "compressed_fp8_linear": linear}
    # The attention modules' own forward, over fused projections, where the attention,
    # the rotation and the products are all the wheel's.
    wanted["self_attention"] = "attention" in patched.modules and rotary and linear
    for name, module in model.named_modules():
        kind = _kind(module, family[0])
        if kind is None or not wanted[kind] or _replaced(module):
            continue
        theirs = _fused.foreign_forward(module)
        if theirs is not None:  # another library's forward: replacing it would drop it
            fall_back(_what(kind, module), f"its forward is {theirs}, set on the module: kept")
            continue
        if not _has_ops(served, kind, module):
            continue
        forward = _forward(kind, module, served, family[1], patched, fuse=linear)
        if forward is None:
            continue
        _replace(module, forward, patched)
        if kind != "self_attention":
            patched.modules.setdefault(kind, []).append(name)
        if getattr(forward, "fused", None) is not None:
            patched.modules.setdefault("projections", []).append(name)
    return patched


def _forward(kind, module, served, offset, patched, fuse):
    """The forward that replaces `module`'s, or None to keep transformers'. Projections
    it fuses (`forward.fused`) are unfused again on `patched.remove()`."""
    original = module.forward
    if kind == "norm":
        return _layers.rms_norm(module, original, served, offset)
    if kind == "linear":
        return _layers.linear(module, original, served)
    if kind == "fp8_linear":
        return _layers.fp8_linear(module, original, served)
    if kind == "fbgemm_fp8_linear":
        return _layers.fbgemm_fp8_linear(module, original, served)
    if kind == "compressed_fp8_linear":
        return _layers.compressed_fp8_linear(module, original, served)
    if kind == "rotary":
        _install_rotary(sys.modules[type(module).__module__], served)
        return _layers.half_tables(original)
    if kind == "mlp":
        linears = [module.gate_proj, module.up_proj]
        fused = Fused(module, linears) if fuse and _fits(served, linears) else None
        forward = _layers.gated_mlp(module, original, served, fused)
    else:
        updates = _self_attention.convention(original)
        linears = _self_attention.fusable(module)
        if updates is None or linears is None or not _fits(served, linears):
            return None
        functions = {NAME: _attention.attention(served), PAGED: _batching.attention(served)}
        forward, fused = _self_attention.forward(
            module, original, served, functions, updates, _extras(module)
        )
    if fused is not None:
        patched.undo.append(fused.unshare)
    forward.fused = fused
    return forward


def _fits(served, linears):
    """Whether `linears` can be one product of the wheel's (no warning: the linears
    served one by one say what the wheel lacks)."""
    return Fused.fits(linears) and all(served.missing(op) is None for op in Fused.ops(linears))


def _extras(module):
    """The keyword arguments the family's attention forward gives the attention function
    beyond the common ones: its sliding window (Mistral's from the config), Gemma 2's
    softcapping."""
    extras = {}
    if hasattr(module, "sliding_window"):
        extras["sliding_window"] = module.sliding_window
    elif module.config.model_type == "mistral":
        extras["sliding_window"] = getattr(module.config, "sliding_window", None)
    if module.config.model_type == "gemma2":
        extras["softcap"] = module.attn_logit_softcapping
    return extras


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
    """Which of OPS' kinds `module` is, by its class (the family's own, nn.Linear, or
    transformers' FP8Linear of finegrained FP8 checkpoints, FbgemmFp8Linear of FBGEMM
    FP8 ones and CompressedTensorsFP8Linear of compressed-tensors FP8 ones)."""
    if type(module) is torch.nn.Linear:
        return "linear"
    name, where = type(module).__name__, type(module).__module__
    if name == "FP8Linear" and where.endswith("integrations.finegrained_fp8"):
        return "fp8_linear"
    if name == "FbgemmFp8Linear" and where.endswith("integrations.fbgemm_fp8"):
        return "fbgemm_fp8_linear"
    if name == "CompressedTensorsFP8Linear" and where.endswith("integrations.compressed_tensors"):
        return "compressed_fp8_linear"
    suffixes = (
        ("norm", "RMSNorm"), ("mlp", "MLP"), ("rotary", "RotaryEmbedding"),
        ("self_attention", "Attention"),
    )  # fmt: skip
    for kind, suffix in suffixes:
        if name == prefix + suffix:
            return kind
    return None


def _what(kind, module):
    """What a warning about `module` of `kind` names."""
    return "nn.Linear" if kind == "linear" else type(module).__name__


def _has_ops(served, kind, module):
    """Whether the wheel has every op `kind` needs for `module`; if not, a warning."""
    what = _what(kind, module)
    ops = _layers.fp8_ops(module) if kind == "fp8_linear" else OPS[kind]
    if kind == "self_attention":  # its parts, served one by one, warn for themselves
        return all(served.missing(op) is None for op in ops)
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
