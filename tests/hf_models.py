"""Small randomly initialised models of the transformers families that
ntops_prebuilt.integrations.transformers serves (its FAMILIES), built from configs (no
downloads): the CPU cases' and the GPU tests' one table. Two layers, four query heads over
two key/value heads of 64 (every family's head dim is one the wheel's attention and its
softcapped attention are built for), biases where the family has them (Qwen2), windows
and softcapping where it has them (Mistral, Gemma 2 and 3) longer than the tests' prompts
unless a test asks otherwise."""

import inspect

import torch

SIZES = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 128,
    "max_position_embeddings": 512,
}
# config.model_type -> what its config takes beyond SIZES.
CONFIGS = {
    "llama": {},
    "mistral": {"sliding_window": 4096},
    "qwen2": {},
    "qwen3": {},
    "gemma": {},
    "gemma2": {"sliding_window": 4096},
    "gemma3_text": {"sliding_window": 4096},
}
# Stock attention is sdpa's, but for Gemma 2, whose softcapping sdpa ignores (4.56) or
# refuses (5.x): its eager attention is the reference there.
STOCK_ATTENTION = {"gemma2": "eager"}


def tiny(model_type, dtype=torch.float32, device="cpu", seed=0, **overrides):
    """A model of `model_type` (CONFIGS) in eval mode, its RMSNorm weights drawn around
    their initial values (ones, or zeros where the family scales by 1 + weight) so that
    the norms' weights matter."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **{**SIZES, **CONFIGS[model_type], **overrides})
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation=STOCK_ATTENTION.get(model_type, "sdpa")
        )
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__.endswith("RMSNorm"):
                module.weight.add_(torch.randn_like(module.weight) * 0.1)
    return model.to(dtype).eval()


def prompts(batch=2, length=7, padding=2, vocab=SIZES["vocab_size"], device="cpu", seed=0):
    """(input_ids, attention_mask): random tokens, the first row left-padded by
    `padding` positions, as generate() batches prompts of different lengths."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, :padding] = 0
    ids[0, :padding] = 0
    return ids.to(device), mask.to(device)


def fp8(model, block_size=(128, 128), activation_scale=None):
    """`model` as a finegrained FP8 checkpoint loads (FineGrainedFP8Config, "quant_method":
    "fp8"): every nn.Linear but the head made transformers' FP8Linear, its weight
    quantized as transformers' quantizer does (float8_e4m3fn, scaled per `block_size`
    block by amax / 448, kept as `weight_scale_inv`; one block of the whole weight where
    None), with a static `activation_scale` where given (5.x). Built on the linears'
    device, in place; returns the model."""
    from transformers.integrations.finegrained_fp8 import FP8Linear

    takes = inspect.signature(FP8Linear).parameters  # 4.56: bias=, 5.x: has_bias=

    def quantized(linear):
        has_bias = {"has_bias" if "has_bias" in takes else "bias": linear.bias is not None}
        made = FP8Linear(
            linear.in_features, linear.out_features, block_size=block_size, **has_bias,
            **({"activation_scheme": "static"} if activation_scale is not None else {}),
        )  # fmt: skip
        weight, scale_inv = _fp8_blocks(linear.weight.detach().float(), block_size)
        made.weight = torch.nn.Parameter(weight, requires_grad=False)
        made.weight_scale_inv = torch.nn.Parameter(scale_inv, requires_grad=False)
        if activation_scale is not None:
            scale = torch.tensor(activation_scale, device=linear.weight.device)
            made.activation_scale = torch.nn.Parameter(scale, requires_grad=False)
        return made

    return _fp8_linears(model, quantized)


def _fp8_linears(model, quantized):
    """`model` with every nn.Linear but the head replaced by `quantized(linear)` (built
    on the linear's device), given the linear's bias (in the model's dtype, as loading
    casts it), no parameter requiring gradients; in place; returns the model."""
    for name, linear in list(model.named_modules()):
        if type(linear) is not torch.nn.Linear or name == "lm_head":
            continue
        with torch.device(linear.weight.device):
            made = quantized(linear)
        if linear.bias is not None:
            made.bias = torch.nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        made.requires_grad_(False)
        model.set_submodule(name, made)
    return model


def _fp8_blocks(weight, block_size):
    """(float8_e4m3fn weight, float32 scale inverses) of a float32 (N, K) weight, per
    (block_n, block_k) block (whole where None): scale inverse amax / 448 (1 for a block
    of zeros), values weight / scale inverse saturated."""
    n, k = weight.shape
    bn, bk = (n, k) if block_size is None else block_size
    blocks = weight.reshape(n // bn, bn, k // bk, bk)
    amax = blocks.abs().amax(dim=(1, 3))
    inverse = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    values = (blocks / inverse[:, None, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    if block_size is None:
        inverse = inverse.reshape(())
    return values.reshape(n, k), inverse


def dequantized(model):
    """A copy of an `fp8` model with nn.Linears of its FP8 weights times their scales
    (float32 products of exactly the quantized weights: the FP8 path's error is then its
    activations' quantization and its rounding)."""
    import copy

    dense = copy.deepcopy(model)
    for name, module in list(dense.named_modules()):
        if type(module).__name__ != "FP8Linear":
            continue
        n, k = module.weight.shape
        bn, bk = (n, k) if module.block_size is None else module.block_size
        scales = module.weight_scale_inv.float().reshape(n // bn, k // bk)
        blocks = module.weight.float().reshape(n // bn, bn, k // bk, bk) * scales[:, None, :, None]
        with torch.device(module.weight.device):
            linear = torch.nn.Linear(k, n, bias=module.bias is not None)
        linear.weight = torch.nn.Parameter(blocks.reshape(n, k), requires_grad=False)
        if module.bias is not None:
            linear.bias = torch.nn.Parameter(module.bias.detach().clone(), requires_grad=False)
        dense.set_submodule(name, linear)
    return dense


def fbgemm(model, ub=1200.0):
    """`model` as an FBGEMM FP8 checkpoint loads: every nn.Linear but the head made
    FbgemmFp8Linear, its weight quantized per output feature as FBGEMM's quantizer does
    (float8_e4m3fn, scale amax / 448 a row), the activation bound (FbgemmFp8Config's
    activation_scale_ub, 1200 by default) filled in, as the quantizer fills it after
    loading. Built on the linears' device, in place; returns the model."""
    from transformers.integrations import fbgemm_fp8

    def quantized(linear):
        made = fbgemm_fp8.FbgemmFp8Linear(
            linear.in_features, linear.out_features, linear.bias is not None
        )
        values, scale = _fp8_blocks(linear.weight.detach().float(), (1, linear.in_features))
        made.weight = torch.nn.Parameter(values, requires_grad=False)
        made.weight_scale = torch.nn.Parameter(scale, requires_grad=False)  # (out, 1)
        made.input_scale_ub.fill_(ub)
        return made

    return _fp8_linears(model, quantized)


def compressed(model, strategy="channel"):
    """`model` as a compressed-tensors FP8 checkpoint loads with
    `use_optimized_inference=True`: every nn.Linear but the head made
    CompressedTensorsFP8Linear, its weight quantized as llm-compressor's FP8 schemes do
    (float8_e4m3fn; scale amax / 448 per output feature, "channel", or one for the
    weight, "tensor"), the scale laid out as transformers' loader leaves it ((1, out),
    a tensor's spread). Built on the linears' device, in place; returns the model."""
    from transformers.integrations import compressed_tensors

    def quantized(linear):
        made = compressed_tensors.CompressedTensorsFP8Linear(
            linear.in_features, linear.out_features, linear.bias is not None
        )
        rows = (1, linear.in_features) if strategy == "channel" else None
        values, scale = _fp8_blocks(linear.weight.detach().float(), rows)
        made.weight = torch.nn.Parameter(values, requires_grad=False)
        spread = scale.reshape(1, -1).expand(1, linear.out_features).contiguous()
        made.weight_scale = torch.nn.Parameter(spread, requires_grad=False)
        return made

    return _fp8_linears(model, quantized)


def fp8_dense(model):
    """A float32 copy of an `fbgemm` or `compressed` model with nn.Linears of its FP8
    weights times their scales (one per output feature)."""
    import copy

    from transformers.integrations import compressed_tensors, fbgemm_fp8

    kinds = (fbgemm_fp8.FbgemmFp8Linear, compressed_tensors.CompressedTensorsFP8Linear)
    copied = copy.deepcopy(model)
    for name, module in list(copied.named_modules()):
        if type(module) not in kinds:
            continue
        with torch.device(module.weight.device):
            linear = torch.nn.Linear(
                module.in_features, module.out_features, module.bias is not None
            )
        weight = module.weight.float() * module.weight_scale.float().reshape(-1, 1)
        linear.weight = torch.nn.Parameter(weight, requires_grad=False)
        if module.bias is not None:
            linear.bias = torch.nn.Parameter(module.bias.float(), requires_grad=False)
        copied.set_submodule(name, linear)
    return copied.float()
