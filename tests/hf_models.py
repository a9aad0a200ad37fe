"""Small randomly initialised models of the transformers families that
ntops_prebuilt.integrations.transformers serves (its FAMILIES), built from configs (no
downloads): the CPU cases' and the GPU tests' one table. Two layers, four query heads over
two key/value heads of 64 (every family's head dim is one the wheel's attention and its
softcapped attention are built for), biases where the family has them (Qwen2), windows
and softcapping where it has them (Mistral, Gemma 2 and 3) longer than the tests' prompts
unless a test asks otherwise."""

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
