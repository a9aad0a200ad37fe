"""ntops_prebuilt.integrations.transformers on the GPU, for every family it serves (small
random models from tests/hf_models.py, no downloads): greedy generate() gives stock
transformers' tokens in float32, eagerly and with a static cache under torch.compile
(fullgraph: a graph break fails), and bf16 logits stay as close to float32's as stock
bf16's do; batches with and without left padding. What falls back (Gemma 2's softcapped
attention in float32 or under a mask) is asserted by its one warning, so a part that
silently stopped being served fails too. Skipped where transformers is not installed
(.device/tf.sh installs it on the device machine)."""

import importlib
import warnings

import pytest
import torch
from packaging.version import Version

from tests.hf_models import CONFIGS, prompts, tiny

transformers = pytest.importorskip("transformers")

FAMILIES = sorted(CONFIGS)
NEW_TOKENS = 8
# How much further from float32's logits bf16 ones may be than stock bf16's (relative
# Frobenius norms, over the positions that are not padding); the floor is for models
# whose stock bf16 error happens to be tiny.
WORSE, FLOOR = 2.0, 5e-3
DTYPE_REFUSED = (
    "ntops_prebuilt: Gemma2Attention's attention runs transformers' own code: float32 "
    "tensors (its paged_attention kernels are bfloat16, float16)"
)
MASK_REFUSED = (
    "ntops_prebuilt: Gemma2Attention's attention runs transformers' own code: softcapping "
    "with an attention mask (padding, or a static cache): the wheel's softcapped attention "
    "takes lengths, not masks"
)


@pytest.fixture
def ntt(nt, monkeypatch):
    from ntops_prebuilt.integrations import transformers as integration
    from ntops_prebuilt.integrations.transformers import _served

    monkeypatch.setattr(_served, "_WARNED", set())  # each test sees its own warnings
    return integration


def expected_fallbacks(family, dtype, masked):
    """The one warning a family's case gives: Gemma 2's softcapped attention is built for
    half types, and takes no mask (padding, a static cache's)."""
    if family != "gemma2":
        return []
    if dtype == torch.float32:
        return [DTYPE_REFUSED]
    return [MASK_REFUSED] if masked else []


def generate(model, ids, mask, **options):
    with torch.no_grad():
        return model.generate(
            ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, **options
        )


def patched(ntt, family, dtype, device="cuda", **overrides):
    """A model of `family` with `apply`'s forwards (inside catch_warnings: its warnings,
    of ops the wheel lacks, would join the case's)."""
    warnings.simplefilter("always")
    model = tiny(family, dtype=dtype, device=device, **overrides)
    ntt.apply(model)
    return model


def fallbacks(ntt, caught):
    return sorted({str(w.message) for w in caught if issubclass(w.category, ntt.FallbackWarning)})


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("padding", [0, 3])
def test_greedy_tokens_match_stock_in_float32(ntt, family, padding):
    ids, mask = prompts(padding=padding, device="cuda")
    want = generate(tiny(family, device="cuda"), ids, mask)
    with warnings.catch_warnings(record=True) as caught:
        model = patched(ntt, family, torch.float32)
        got = generate(model, ids, mask)
    assert torch.equal(got, want), (got, want)
    assert fallbacks(ntt, caught) == expected_fallbacks(family, torch.float32, padding)


def relative(got, want, kept):
    got, want = got[kept].double(), want[kept].double()
    return ((got - want).norm() / want.norm()).item()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("padding", [0, 3])
def test_bf16_logits_as_close_to_float32_as_stocks(ntt, family, padding):
    ids, mask = prompts(padding=padding, device="cuda")
    kept = mask.bool()
    with torch.no_grad():
        reference = tiny(family, device="cuda")(ids, attention_mask=mask).logits
        stock = tiny(family, dtype=torch.bfloat16, device="cuda")(ids, attention_mask=mask).logits
        with warnings.catch_warnings(record=True) as caught:
            model = patched(ntt, family, torch.bfloat16)
            ours = model(ids, attention_mask=mask).logits
    assert fallbacks(ntt, caught) == expected_fallbacks(family, torch.bfloat16, padding)
    ours_error, stock_error = relative(ours, reference, kept), relative(stock, reference, kept)
    assert ours_error <= max(WORSE * stock_error, FLOOR), (ours_error, stock_error)


@pytest.mark.parametrize("family", FAMILIES)
def test_static_cache_under_torch_compile_matches_stock(ntt, family):
    """transformers' own compile of the decode step (generate with a static cache), as
    fullgraph Dynamo graphs run eagerly (Inductor: the Llama case below)."""
    from transformers import CompileConfig

    torch._dynamo.reset()
    ids, mask = prompts(padding=0, device="cuda")
    want = generate(tiny(family, device="cuda"), ids, mask)
    config = CompileConfig(fullgraph=True, backend="eager", mode=None)
    with warnings.catch_warnings(record=True) as caught:
        model = patched(ntt, family, torch.float32)
        got = generate(model, ids, mask, cache_implementation="static", compile_config=config)
    assert torch.equal(got, want), (got, want)
    assert fallbacks(ntt, caught) == expected_fallbacks(family, torch.float32, masked=True)


def test_llama_under_inductor_with_cuda_graphs(ntt):
    """transformers' default compile (Inductor, reduce-overhead: CUDA graphs) of the
    decode step, fullgraph, the wheel's ops inside the graphs."""
    from transformers import CompileConfig

    torch._dynamo.reset()
    ids, mask = prompts(padding=0, device="cuda")
    want = generate(tiny("llama", device="cuda"), ids, mask)
    config = CompileConfig(fullgraph=True)
    with warnings.catch_warnings(record=True) as caught:
        model = patched(ntt, "llama", torch.float32)
        got = generate(model, ids, mask, cache_implementation="static", compile_config=config)
        again = generate(model, ids, mask, cache_implementation="static", compile_config=config)
    assert torch.equal(got, want), (got, want)
    assert torch.equal(again, want), (again, want)
    assert fallbacks(ntt, caught) == []


def test_cpu_calls_of_a_patched_cuda_model_fall_back(ntt):
    """A model patched on the GPU, then moved to the CPU, runs transformers' code there."""
    ids, mask = prompts()
    with torch.no_grad():
        want = tiny("qwen2")(ids, attention_mask=mask).logits
        with warnings.catch_warnings(record=True) as caught:
            model = patched(ntt, "qwen2", torch.float32, device="cpu").cuda()
            model(ids.cuda(), attention_mask=mask.cuda())
            assert fallbacks(ntt, caught) == []
            got = model.cpu()(ids, attention_mask=mask).logits
    assert torch.equal(got, want)
    assert len(fallbacks(ntt, caught)) == 5, fallbacks(ntt, caught)


# Continuous batching (`generate_batch`, transformers 5.x) under `ntt.batching(model)`.
TIE = 1e-2  # logits this close to float32's best are ties bf16 may pick either of
BATCH_REFUSED = (
    "ntops_prebuilt: LlamaAttention's attention runs transformers' own code: float32 "
    "tensors (its paged_attention kernels are bfloat16, float16)"
)


def requests():
    """Three prompts of 5, 6 and 7 tokens: prefills of different lengths, then decodes."""
    ids, _ = prompts(batch=3, length=7, padding=0)
    return [row[: 5 + i].tolist() for i, row in enumerate(ids)]


def test_batching_where_transformers_updates_the_cache_itself_warns_once(ntt):
    """Older 5.x releases hand paged attention functions the cache: `batching` leaves
    such a model's attention as it is, with one warning (runs where that transformers
    is installed: the device machine's own, 5.17.0)."""
    if ntt._batching.packed_batches():
        pytest.skip(f"transformers {transformers.__version__} passes packed batches")
    model = tiny("llama", device="cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ntt.batching(model):
            assert model.config._attn_implementation == "sdpa"
    assert len(fallbacks(ntt, caught)) == 1
    assert "passes paged attention functions its cache" in fallbacks(ntt, caught)[0]


def paging_options(cuda_graphs):
    """ContinuousBatchingConfig's arguments for 16 pages of 16 tokens, 64 tokens a
    batch, by the names this transformers takes (`page_size`; `block_size` before it);
    a skip where it takes neither."""
    import inspect

    takes = inspect.signature(transformers.ContinuousBatchingConfig).parameters
    page = next((name for name in ("page_size", "block_size") if name in takes), None)
    if page is None:
        pytest.skip(f"transformers {transformers.__version__}: no page size to set")
    if cuda_graphs is not None and "use_cuda_graph" not in takes:
        pytest.skip(f"transformers {transformers.__version__}: no use_cuda_graph to set")
    options = {"num_blocks": 16, "max_batch_tokens": 64, page: 16, "use_cuda_graph": cuda_graphs}
    return {name: value for name, value in options.items() if name in takes}


def generate_batch(model, cuda_graphs=None):
    """Greedy tokens per request, over a small paged cache (16 pages of 16 tokens)."""
    if Version(transformers.__version__).major < 5:
        pytest.skip("continuous batching's packed calls are transformers 5.x's")
    from ntops_prebuilt.integrations.transformers import _batching

    if not _batching.packed_batches():
        pytest.skip(f"transformers {transformers.__version__} updates the cache in paged| calls")
    config = transformers.GenerationConfig(
        max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0
    )
    paging = transformers.ContinuousBatchingConfig(**paging_options(cuda_graphs))
    with torch.no_grad():
        out = model.generate_batch(
            requests(), generation_config=config, continuous_batching_config=paging
        )
    return [out[name].generated_tokens for name in sorted(out)]


def test_generate_batch_in_float32_falls_back_to_stocks_tokens(ntt):
    """The wheel's varlen attention is built for half types: float32 runs transformers'
    sdpa over the packed batch, with one warning."""
    want = generate_batch(tiny("llama", device="cuda"))
    with warnings.catch_warnings(record=True) as caught:
        model = patched(ntt, "llama", torch.float32)
        with ntt.batching(model):
            got = generate_batch(model)
    assert got == want
    assert fallbacks(ntt, caught) == [BATCH_REFUSED]


@pytest.mark.parametrize("cuda_graphs", [False, True])
@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_generate_batch_in_bf16_picks_float32s_best_tokens(ntt, monkeypatch, family, cuda_graphs):
    """bf16 generate_batch on the wheel's flash_attn_varlen_func (Gemma 3: sliding layers
    of a window shorter than the prompts): each token it picks is float32's best
    (teacher-forced logits of stock float32) up to twice stock bf16's largest error there
    (bf16 may swap near ties, so its tokens are not stock's)."""
    window = {"sliding_window": 3} if family == "gemma3_text" else {}
    calls, varlen = [], ntt._batching.nt.flash_attn_varlen_func

    def counted(*args, **kwargs):
        calls.append(1)
        return varlen(*args, **kwargs)

    monkeypatch.setattr(ntt._batching.nt, "flash_attn_varlen_func", counted)
    with warnings.catch_warnings(record=True) as caught:
        model = patched(ntt, family, torch.bfloat16, **window)
        with ntt.batching(model):
            got = generate_batch(model, cuda_graphs)
    assert fallbacks(ntt, caught) == []
    # two layers, a call a step at least; replayed CUDA graphs call no Python
    assert len(calls) >= (2 if cuda_graphs else 2 * NEW_TOKENS)
    reference = tiny(family, device="cuda", **window)
    stock = tiny(family, torch.bfloat16, "cuda", **window)
    for prompt, tokens in zip(requests(), got, strict=True):
        ids = torch.tensor([prompt + tokens[:-1]], device="cuda")
        with torch.no_grad():
            want = reference(ids).logits[0, len(prompt) - 1 :]
            error = (stock(ids).logits[0, len(prompt) - 1 :].float() - want).abs().max()
        picked = want.gather(-1, torch.tensor(tokens, device="cuda")[:, None])[:, 0]
        assert (want.max(-1).values - picked <= 2 * error + TIE).all(), (tokens, error)


# FP8 checkpoints: transformers' FP8Linear (finegrained FP8, "quant_method": "fp8") on the
# wheel's FP8 kernels, built for sm_89 and sm_90.
FP8_BOUND = 0.1  # relative logits error against float32 products of the same weights
FP8_WORSE = 1.5  # ... and against stock FP8Linear's, where it runs


def fp8_device():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("the wheel's FP8 kernels are built for sm_89 and sm_90")


def stock_fp8_logits(model, ids, mask):
    """Stock FP8Linear's logits, or None where it cannot run here: 4.56 compiles its
    Triton kernels at the first call; 5.x loads them from the hub
    (kernels-community/finegrained-fp8), which this machine cannot reach."""
    try:
        with torch.no_grad():
            return model(ids, attention_mask=mask).logits
    except ImportError:
        return None


@pytest.mark.parametrize("family", ["llama", "qwen2"])  # Qwen2: q, k and v with biases
@pytest.mark.parametrize("block_size", [(128, 128), None], ids=["blocks", "tensor"])
def test_fp8_checkpoint_logits_near_its_weights_float32_products(ntt, family, block_size):
    """bf16 activations over FP8 weights: logits within FP8_BOUND of float32 products of
    the same quantized weights, and, where stock FP8Linear runs, within FP8_WORSE of its
    error."""
    from tests.hf_models import dequantized, fp8

    fp8_device()
    if block_size is None and Version(transformers.__version__).major < 5:
        pytest.skip("transformers 4.x's FP8Linear takes blocks only")
    ids, mask = prompts(padding=3, device="cuda")
    kept = mask.bool()
    model = fp8(tiny(family, dtype=torch.bfloat16, device="cuda"), block_size=block_size)
    with torch.no_grad():
        want = dequantized(model).float()(ids, attention_mask=mask).logits
    stock = stock_fp8_logits(model, ids, mask)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ntt.apply(model)
        with torch.no_grad():
            ours = model(ids, attention_mask=mask).logits
    assert fallbacks(ntt, caught) == []
    error = relative(ours, want, kept)
    assert error < FP8_BOUND, error
    if stock is not None:
        stock_error = relative(stock, want, kept)
        assert error <= max(FP8_WORSE * stock_error, FLOOR), (error, stock_error)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_fbgemm_checkpoint_logits_near_its_weights_float32_products(ntt, family):
    """FBGEMM FP8 checkpoints (FbgemmFp8Linear: a weight scale per output feature, each
    token's activations bounded at 1200): logits within FP8_BOUND of float32 products of
    the same quantized weights. Stock needs fbgemm_gpu's kernels, which this machine
    does not have: not compared."""
    from tests.hf_models import fbgemm, fp8_dense

    fp8_device()
    ids, mask = prompts(padding=3, device="cuda")
    kept = mask.bool()
    model = fbgemm(tiny(family, dtype=torch.bfloat16, device="cuda"))
    with torch.no_grad():
        want = fp8_dense(model)(ids, attention_mask=mask).logits
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
        with torch.no_grad():
            ours = model(ids, attention_mask=mask).logits
    assert fallbacks(ntt, caught) == []
    assert len(patched.modules["fbgemm_fp8_linear"]) == 7 * model.config.num_hidden_layers
    error = relative(ours, want, kept)
    assert error < FP8_BOUND, error


@pytest.mark.parametrize("strategy", ["channel", "tensor"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_compressed_checkpoint_logits_near_stocks(ntt, family, strategy):
    """compressed-tensors FP8 checkpoints (CompressedTensorsFP8Linear, loaded with
    `use_optimized_inference=True`: a weight scale per output feature, per-token
    activations): logits within FP8_BOUND of float32 products of the same quantized
    weights, and within FP8_WORSE of stock's error (torch's scaled_mm, cuBLASLt)."""
    from tests.hf_models import compressed, fp8_dense

    fp8_device()
    integration = importlib.import_module("transformers.integrations.compressed_tensors")
    if not hasattr(integration, "CompressedTensorsFP8Linear"):
        pytest.skip("this transformers has no CompressedTensorsFP8Linear (5.x's)")
    ids, mask = prompts(padding=3, device="cuda")
    kept = mask.bool()
    model = compressed(tiny(family, dtype=torch.bfloat16, device="cuda"), strategy)
    with torch.no_grad():
        for module in model.modules():  # biases that are not 0 (transformers' init)
            if type(module).__name__ == "CompressedTensorsFP8Linear" and module.bias is not None:
                module.bias.normal_(0, 0.5)
        want = fp8_dense(model)(ids, attention_mask=mask).logits
        stock = model(ids, attention_mask=mask).logits
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
        with torch.no_grad():
            ours = model(ids, attention_mask=mask).logits
    assert fallbacks(ntt, caught) == []
    assert len(patched.modules["compressed_fp8_linear"]) == 7 * model.config.num_hidden_layers
    error, stock_error = relative(ours, want, kept), relative(stock, want, kept)
    assert error < FP8_BOUND, error
    assert error <= max(FP8_WORSE * stock_error, FLOOR), (error, stock_error)


@pytest.mark.parametrize("checkpoint", ["fp8", "fbgemm", "compressed"])
def test_fp8_checkpoint_under_torch_compile_gives_eagers_tokens(ntt, checkpoint):
    """FP8 products in a fullgraph Dynamo graph (static cache): the tokens the same
    model gives eagerly. FP8Linear's blocks over float32 activations; FbgemmFp8Linear's
    (its bound a number, read at `apply`) over bf16 ones, its products' dtype; and
    CompressedTensorsFP8Linear's over bf16 ones."""
    from transformers import CompileConfig

    from tests import hf_models

    fp8_device()
    torch._dynamo.reset()
    ids, mask = prompts(padding=0, device="cuda")
    if checkpoint == "fp8":
        model = hf_models.fp8(tiny("llama", device="cuda"))
    elif checkpoint == "fbgemm":
        model = hf_models.fbgemm(tiny("llama", dtype=torch.bfloat16, device="cuda"))
    else:
        model = hf_models.compressed(tiny("llama", dtype=torch.bfloat16, device="cuda"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ntt.apply(model)
        want = generate(model, ids, mask)
        config = CompileConfig(fullgraph=True, backend="eager", mode=None)
        got = generate(model, ids, mask, cache_implementation="static", compile_config=config)
    assert torch.equal(got, want), (got, want)
    assert fallbacks(ntt, caught) == []
