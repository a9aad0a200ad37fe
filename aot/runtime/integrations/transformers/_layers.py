"""The forwards that replace a model's modules: RMSNorm, the gated MLP, nn.Linear, and the
rotary embedding (its tables, and the family's apply_rotary_pos_emb). Each checks its
call against what the wheel serves (`Served.refusal`) and launches the wheel's kernels,
or warns once and runs the module's own forward."""

import torch

from ... import torch as nt
from ._served import fall_back


def rms_norm(module, original, served, offset):
    """RMSNorm: Llama's `weight * x / rms(x)` (offset 0) or Gemma's `(1 + weight) * x /
    rms(x)` (offset 1, its weight stored less one). Gemma adds the one in float32 and
    rounds once; here (1 + weight) is rounded to the model's dtype first (bf16: 2^-8 of
    the weight, within the tests' bf16 bound)."""
    what = type(module).__name__
    eps = module.variance_epsilon if hasattr(module, "variance_epsilon") else module.eps

    def forward(hidden_states):
        weight = module.weight
        why = served.refusal("rms_norm", hidden_states, weight)
        if why is not None:
            fall_back(what, why)
            return original(hidden_states)
        if offset:
            weight = weight + offset
        return nt.rms_norm(hidden_states, weight.shape, weight, eps)

    return forward


# The gated MLPs' activations the wheel has kernels for, by their transformers class:
# silu with the product in one kernel (silu_mul), gelu's tanh form in two (gelu, mul).
ACTIVATIONS = {
    "SiLU": ("silu_mul",),
    "SiLUActivation": ("silu_mul",),
    "GELUTanh": ("gelu", "mul"),
    "PytorchGELUTanh": ("gelu", "mul"),
}


def gated_mlp(module, original, served):
    """down_proj(act(gate_proj(x)) * up_proj(x)), the projections being the module's own
    (nn.Linear, themselves served by `linear`)."""
    what = type(module).__name__
    ops = ACTIVATIONS[type(module.act_fn).__name__]

    def forward(x):
        for op in ops:
            why = served.refusal(op, x)
            if why is not None:
                fall_back(what, why)
                return original(x)
        gate, up = module.gate_proj(x), module.up_proj(x)
        if ops == ("silu_mul",):
            hidden = nt.silu_mul(gate, up)
        else:
            hidden = nt.mul(nt.gelu(gate, approximate="tanh"), up)
        return module.down_proj(hidden)

    return forward


def linear(module, original, served):
    """nn.Linear: `x @ weight.t()` (+ bias) over x's leading dims as rows; the wheel's
    products take the weight in nn.Linear's layout as it is (a transposed view)."""

    def forward(x):
        weight, bias = module.weight, module.bias
        if bias is None:
            why = served.refusal("mm", x, weight)
        else:
            why = served.refusal("addmm", x, weight, bias)
        if why is not None:
            fall_back("nn.Linear", why)
            return original(x)
        rows = x.reshape(-1, x.shape[-1])
        out = nt.mm(rows, weight.t()) if bias is None else nt.addmm(bias, rows, weight.t())
        return out.view(*x.shape[:-1], out.shape[-1])

    return forward


def half_tables(original):
    """A rotary embedding's forward returning the first halves of its tables, (batch or
    1, seq, head_dim / 2): the wheel's rotation reads those, and the families' tables
    are `cat((freqs, freqs))` of them (no cat, and no second half, to compute). Only the
    family's `rotary` below reads them; it tells them from full ones by their size."""

    def forward(*args, **kwargs):
        cos, sin = original(*args, **kwargs)
        half = cos.shape[-1] // 2
        return cos[..., :half], sin[..., :half]

    return forward


def rotary(stock, served, what):
    """The family's apply_rotary_pos_emb, for every model of the family in the process:
    full tables (a model `apply` did not patch) go to `stock` as they came; half tables
    (from `half_tables`) to the wheel, or, where it cannot serve them, to `stock` made
    whole again."""

    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        if cos.shape[-1] == q.shape[-1]:
            return stock(q, k, cos, sin, *args, **kwargs)
        if args or kwargs:  # the families' attention passes four; anything else is stock's
            why = "arguments beyond (q, k, cos, sin)"
        else:
            why = served.refusal("rotary_position_embedding", q, k, cos, sin)
        if why is not None:
            fall_back(what, why)
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
            return stock(q, k, cos, sin, *args, **kwargs)
        return _rotated(q, cos, sin), _rotated(k, cos, sin)

    apply_rotary_pos_emb.stock = stock
    return apply_rotary_pos_emb


def _rotated(x, cos, sin):
    """x (batch, heads, seq, head_dim), as the families' attention holds it (a transposed
    view of its projection), rotated in halves (rotate_half's pairs) by tables (1 or
    batch, seq, head_dim / 2), in one launch; a position per row of the batch (left
    padding) makes batch and seq one dim."""
    batch, heads, seq, dim = x.shape
    rows = x.transpose(1, 2)
    if cos.shape[0] == 1:
        cos, sin = cos[0], sin[0]
    else:
        rows = rows.reshape(1, batch * seq, heads, dim)
        cos, sin = cos.reshape(batch * seq, dim // 2), sin.reshape(batch * seq, dim // 2)
    out = nt.rotary_position_embedding(rows, sin, cos, interleaved=False)
    return out.reshape(batch, seq, heads, dim).transpose(1, 2)
