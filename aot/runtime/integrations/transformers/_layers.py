"""The forwards that replace a model's modules: RMSNorm, the gated MLP, nn.Linear, and the
rotary embedding (its tables, and the family's apply_rotary_pos_emb). Each checks its
call against what the wheel serves (`Served.refusal`) and launches the wheel's kernels,
or warns once and runs the module's own forward."""

import torch

from ... import torch as nt
from ..._library import compiling
from ._fused import BLOCK, activation_bound, blocks_product, rows_product
from ._served import fall_back


def rms_norm(module, original, served, offset):
    """RMSNorm: Llama's `weight * x / rms(x)` (offset 0) or Gemma's `(1 + weight) * x /
    rms(x)` (offset 1, its weight stored less one). Gemma adds the one in float32 and
    rounds once; here (1 + weight) is rounded to the model's dtype first (bf16: 2^-8 of
    the weight, within the tests' bf16 bound), once per weight (`_plus`), not per call."""
    what = type(module).__name__
    eps = module.variance_epsilon if hasattr(module, "variance_epsilon") else module.eps
    plus = _plus(offset) if offset else None

    def forward(hidden_states):
        weight = parameter(module, "weight")
        why = served.refusal("rms_norm", hidden_states, weight)
        if why is not None:
            fall_back(what, why)
            return original(hidden_states)
        if plus is not None:
            weight = plus(weight)
        return nt.rms_norm(hidden_states, weight.shape, weight, eps)

    return forward


_MISSING = object()


def parameter(module, name):
    """`module.<name>`, a parameter (or None where one is registered as None): eagerly
    from the module's parameters' dict, as its forward reads it at every call (nn.Module's
    __getattr__ took 0.86 us a lookup on this 2-core CPU, the dict 0.05); under Dynamo,
    and where something else took the name, as an attribute."""
    if not compiling():
        found = module._parameters.get(name, _MISSING)
        if found is not _MISSING:
            return found
    return getattr(module, name)


def _plus(offset):
    """`weight + offset`, kept while the weight is unchanged: eagerly, its storage and
    version counter (load_state_dict's copies move it; writes through `.data` do not,
    and are not seen); a Dynamo graph adds it in the graph."""
    kept = {}

    def plus(weight):
        if compiling():
            return weight + offset
        key = (weight.data_ptr(), weight._version, weight.dtype, weight.device)
        if kept.get("key") != key:
            kept["key"], kept["value"] = key, weight + offset
        return kept["value"]

    return plus


# The gated MLPs' activations the wheel has kernels for, by their transformers class:
# silu with the product in one kernel (silu_mul), gelu's tanh form in two (gelu, mul).
ACTIVATIONS = {
    "SiLU": ("silu_mul",),
    "SiLUActivation": ("silu_mul",),
    "GELUTanh": ("gelu", "mul"),
    "PytorchGELUTanh": ("gelu", "mul"),
}


def gated_mlp(module, original, served, fused=None):
    """down_proj(act(gate_proj(x)) * up_proj(x)): gate and up as one product where they
    are `fused` (their halves side by side), else the module's own (nn.Linear, served
    by `linear`); down_proj the module's."""
    what = type(module).__name__
    ops = ACTIVATIONS[type(module.act_fn).__name__]

    def forward(x):
        whys = [served.refusal(op, x) for op in ops]
        if fused is not None:
            whys.append(fused.refusal(served, x))
        why = next((why for why in whys if why is not None), None)
        if why is not None:
            fall_back(what, why)
            return original(x)
        if fused is None:
            gate, up = module.gate_proj(x), module.up_proj(x)
        else:
            fused.current()
            both = fused(x)
            size = both.shape[-1] // 2
            gate, up = both[..., :size], both[..., size:]
        if ops == ("silu_mul",):
            hidden = nt.silu_mul(gate, up)
        else:
            hidden = nt.mul(nt.gelu(gate, approximate="tanh"), up)
        return module.down_proj(hidden.reshape(*x.shape[:-1], hidden.shape[-1]))

    return forward


def linear(module, original, served, what="nn.Linear"):
    """nn.Linear: `x @ weight.t()` (+ bias) over x's leading dims as rows; the wheel's
    products take the weight in nn.Linear's layout as it is (a transposed view)."""

    def forward(x):
        weight, bias = parameter(module, "weight"), parameter(module, "bias")
        if bias is None:
            why = served.refusal("mm", x, weight)
        else:
            why = served.refusal("addmm", x, weight, bias)
        if why is not None:
            fall_back(what, why)
            return original(x)
        rows = x.reshape(-1, x.shape[-1])
        out = nt.mm(rows, weight.t()) if bias is None else nt.addmm(bias, rows, weight.t())
        return out.view(*x.shape[:-1], out.shape[-1])

    return forward


# transformers' FP8Linear (finegrained FP8 checkpoints, "quant_method": "fp8"): the ops
# its two weight layouts take, by block_size (None: one scale for the whole weight).
FP8_OPS = {
    "blocks": ("per_token_group_quant_fp8", "w8a8_block_fp8_matmul"),
    "tensor": ("scaled_fp8_quant", "scaled_mm"),
}
FP8_BLOCK = (BLOCK, BLOCK)  # the blocks w8a8_block_fp8_matmul was built for


def fp8_ops(module):
    """The wheel's ops an FP8Linear's forward launches (a dequantized one: a product's)."""
    if module.weight.element_size() > 1:
        return ("mm",) if module.bias is None else ("addmm",)
    return FP8_OPS["tensor" if module.block_size is None else "blocks"]


def fp8_linear(module, original, served):
    """transformers' FP8Linear: float8_e4m3fn weights (nn.Linear's layout) with float32
    scales per 128 x 128 block (`weight_scale_inv`, DeepSeek-style checkpoints) or one
    for the whole weight. Activations are quantized as transformers' kernels do, per
    token and group of 128 for blocks (per_token_group_quant_fp8, then
    w8a8_block_fp8_matmul), per token for a per-tensor weight, or by the checkpoint's
    static `activation_scale` (scaled_fp8_quant, then scaled_mm); products in fp32,
    rounded once to x's dtype, the bias added after. A weight held dequantized (the
    `dequantize` option) is an nn.Linear's product. Stock transformers runs these
    through Triton kernels it compiles at the first call (4.56) or loads from the hub
    (`kernels-community/finegrained-fp8`, 5.x): here nothing is compiled or fetched."""
    what = "FP8Linear"
    dense = linear(module, original, served, what)

    def forward(x):
        if module.weight.element_size() > 1:
            return dense(x)
        why = _fp8_refusal(module, served, x)
        if why is not None:
            fall_back(what, why)
            return original(x)
        rows = x.reshape(-1, x.shape[-1])
        weight, bias = module.weight, module.bias
        if module.block_size is None:
            static = getattr(module, "activation_scale", None)
            values, scales = nt.scaled_fp8_quant(rows, static, use_per_token_if_dynamic=True)
            served_bias = bias is not None and bias.dtype == x.dtype
            out = nt.scaled_mm(
                values, weight.t(), scales, module.weight_scale_inv,
                bias=bias if served_bias else None, out_dtype=x.dtype,
            )  # fmt: skip
            if bias is not None and not served_bias:
                out = out + bias
        else:
            out = blocks_product(rows, weight, module.weight_scale_inv, x.dtype)
            if bias is not None:
                out = out + bias
        return out.view(*x.shape[:-1], out.shape[-1])

    return forward


def _fp8_refusal(module, served, x):
    """Why the wheel cannot run this FP8Linear call, or None."""
    quantize, product = fp8_ops(module)
    why = served.refusal(quantize, x)
    if why is not None:
        return why
    if module.weight.dtype != torch.float8_e4m3fn:
        return f"{module.weight.dtype} weights (the wheel's FP8 products take float8_e4m3fn)"
    scales = module.weight_scale_inv
    if scales.dtype != torch.float32:
        return f"weight scales of {scales.dtype} (the wheel's FP8 products take float32 ones)"
    if module.weight.device != x.device or scales.device != x.device:
        return "weights on another device than the input"
    static = getattr(module, "activation_scale", None)
    if module.block_size is None:
        if scales.numel() != 1:
            return f"weight scales of shape {list(scales.shape)} without a block size"
        if static is not None and (static.numel() != 1 or static.dtype != torch.float32):
            return "an activation scale that is not one float32 value"
        return None
    if tuple(module.block_size) != FP8_BLOCK:
        return f"blocks of {list(module.block_size)} (its {product} kernels take 128 x 128)"
    if static is not None:
        return "a static activation scale with block-scaled weights (built: dynamic, per group)"
    if x.shape[-1] % FP8_BLOCK[1]:
        return f"in_features {x.shape[-1]}, not a multiple of 128 (its {product} kernels')"
    return None


def fbgemm_fp8_linear(module, original, served):
    """transformers' FbgemmFp8Linear (FBGEMM FP8 checkpoints, "quant_method":
    "fbgemm_fp8"): float8_e4m3fn weights (nn.Linear's layout) with a float32 scale per
    output feature (`weight_scale`, (out, 1)); activations quantized per token, each
    token's largest magnitude held at `input_scale_ub` (the config's
    activation_scale_ub, 1200 by default), then the row-wise scaled product, in bf16
    as FBGEMM's f8f8bf16_rowwise gives it, the (float32) bias added after as stock
    adds it (`_fused.rows_product`). Stock needs fbgemm_gpu's kernels
    (`torch.ops.fbgemm`): without it such a checkpoint does not run at all."""
    what = "FbgemmFp8Linear"
    bound = activation_bound(module)

    def forward(x):
        why = _rows_refusal(module, served, x, bound)
        if why is not None:
            fall_back(what, why)
            return original(x)
        rows = x.reshape(-1, x.shape[-1])
        out = rows_product(rows, module.weight, module.weight_scale, bound)
        if module.bias is not None:
            out = out + module.bias
        return out.view(*x.shape[:-1], out.shape[-1])

    return forward


def _rows_refusal(module, served, x, bound=None):
    """Why the wheel cannot run this call of a row-wise FP8 linear (FbgemmFp8Linear's,
    with its activation `bound`; CompressedTensorsFP8Linear's), or None."""
    why = served.refusal("scaled_fp8_quant", x)
    if why is not None:
        return why
    weight, scales = module.weight, module.weight_scale
    if weight.dtype != torch.float8_e4m3fn:
        return f"{weight.dtype} weights (the wheel's FP8 products take float8_e4m3fn)"
    if scales.dtype != torch.float32 or scales.numel() != weight.shape[0]:
        return (
            f"weight scales of {scales.dtype} and shape {list(scales.shape)} (the wheel's "
            "row-wise products take one float32 scale per output feature)"
        )
    if weight.device != x.device or scales.device != x.device:
        return "weights on another device than the input"
    if bound is not None and not bound > 0:
        return f"an activation bound of {bound} (input_scale_ub: not filled by the quantizer)"
    if weight.shape[0] % 16 or weight.shape[1] % 16:
        return f"a weight of {list(weight.shape)} (the FP8 products take multiples of 16)"
    return None


def compressed_fp8_linear(module, original, served):
    """transformers' CompressedTensorsFP8Linear (compressed-tensors FP8 checkpoints, the
    W8A8 "float" schemes, loaded with `use_optimized_inference=True`): float8_e4m3fn
    weights (nn.Linear's layout) with a float32 scale per output feature (`weight_scale`,
    (1, out): a per-tensor scale spread at load); activations quantized per token,
    dynamically, whatever the checkpoint's activation scheme, as stock does; then the
    row-wise scaled product in the activations' dtype, the bias added by it
    (`_fused.rows_product`). Stock runs torch's scaled_mm: cuBLASLt's FP8 kernels."""
    what = "CompressedTensorsFP8Linear"

    def forward(x):
        why = _rows_refusal(module, served, x)
        if why is not None:
            fall_back(what, why)
            return original(x)
        rows = x.reshape(-1, x.shape[-1])
        out = rows_product(rows, module.weight, module.weight_scale, None, x.dtype, module.bias)
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
    view of its projection), rotated by `rotate` into a new tensor."""
    return rotate(x.transpose(1, 2), cos, sin, inplace=False).transpose(1, 2)


def rotate(x, cos, sin, inplace=True):
    """x (batch, seq, heads, head_dim) rotated in halves (rotate_half's pairs) by tables
    (1 or batch, seq, head_dim / 2), in one launch: in place (x, a view of a fused
    projection's result, is returned), or into a new tensor. A position per row of the
    batch (left padding) makes batch and seq one dim: in place, a view of x (which a
    projection's rows are), else what reshape makes."""
    batch, seq, heads, dim = x.shape
    if cos.shape[0] == 1:
        rows, cos, sin = x, cos[0], sin[0]
    else:
        shape = (1, batch * seq, heads, dim)
        rows = x.view(shape) if inplace else x.reshape(shape)
        cos, sin = cos.reshape(batch * seq, dim // 2), sin.reshape(batch * seq, dim // 2)
    out = nt.rotary_position_embedding(rows, sin, cos, interleaved=False, inplace=inplace)
    return out.view(batch, seq, heads, dim)
