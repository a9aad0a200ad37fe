"""ntops_prebuilt.integrations.transformers on the CPU, run by test_transformers.py in a
pytest of its own with a full wheel on the path, for the transformers installed:

- which modules `apply` replaces in each family's model, and `remove` putting them back;
- calls the wheel cannot serve (CPU tensors, gradients, an op or activation it lacks, an
  unbuilt head dim, softcapping under a mask) run transformers' own code, with one
  warning per part and reason, and give transformers' results bit for bit;
- the calls it serves, mapped onto the wheel's functions as transformers computes them:
  the wheel's functions replaced by their torch references and the served device made
  the CPU, logits and greedy tokens as transformers' own;
- under torch.compile, the served path traces into the wheel's torch.library ops with no
  graph break, prefill and a static cache's decode step (the meta device, where the
  ops' fakes run), and fallbacks warn while Dynamo traces without breaking the graph.
"""

import collections
import subprocess
import sys
import warnings

import pytest
import torch
import transformers
from torch._subclasses.fake_tensor import FakeTensorMode

import ntops_prebuilt.integrations.transformers as ntt
import ntops_prebuilt.torch as nt
from ntops_prebuilt import _library, _rotary, _silu_mul
from ntops_prebuilt.integrations.transformers import _served
from tests.hf_models import CONFIGS, prompts, tiny

F = torch.nn.functional
FAMILIES = sorted(CONFIGS)


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    """Each case sees its own warnings (the integration warns once per process)."""
    monkeypatch.setattr(_served, "_WARNED", set())


def fallbacks(caught):
    return sorted({str(w.message) for w in caught if issubclass(w.category, ntt.FallbackWarning)})


def logits(model, ids, mask):
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits


def test_every_family_has_a_model():
    assert set(ntt.FAMILIES) == set(CONFIGS)


def test_importing_the_wheel_imports_no_transformers():
    code = "import sys, ntops_prebuilt; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_apply_replaces_the_familys_modules_and_remove_restores_them(family):
    model = tiny(family)
    prefix = ntt.FAMILIES[family][0]
    expected = collections.defaultdict(list)
    for name, module in model.named_modules():
        kind = {
            f"{prefix}RMSNorm": "norm",
            f"{prefix}MLP": "mlp",
            f"{prefix}RotaryEmbedding": "rotary",
            "Linear": "linear",
        }.get(type(module).__name__)
        if kind is not None:
            expected[kind].append(name)
    before = model.config._attn_implementation
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
    assert fallbacks(caught) == []
    assert patched.modules == {**expected, "attention": [ntt.NAME]}
    assert len(expected["norm"]) >= 5
    assert len(expected["linear"]) == 15
    assert model.config._attn_implementation == ntt.NAME
    assert all(
        "forward" in model.get_submodule(n).__dict__ for names in expected.values() for n in names
    )
    patched.remove()
    assert model.config._attn_implementation == before
    assert not any("forward" in module.__dict__ for module in model.modules())


@pytest.mark.parametrize("family", FAMILIES)
def test_cpu_tensors_run_transformers_own_code_with_one_warning_each(family):
    model = tiny(family)
    ids, mask = prompts()
    want = logits(model, ids, mask)
    ntt.apply(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = logits(model, ids, mask)
        again = logits(model, ids, mask)
    assert torch.equal(got, want)
    assert torch.equal(again, want)
    messages = fallbacks(caught)
    assert len(messages) == 5, messages  # norm, rotary, attention, MLP, nn.Linear; once
    assert all("cpu tensors (the wheel's kernels run on CUDA devices)" in m for m in messages)


def test_a_second_apply_replaces_nothing_again(served_by_references):
    model = tiny("gemma3_text")
    ids, mask = prompts()
    first = ntt.apply(model)
    want = logits(model, ids, mask)
    second = ntt.apply(model)
    assert second.modules == {"attention": [ntt.NAME]}
    assert torch.equal(logits(model, ids, mask), want)
    second.remove()
    first.remove()
    assert not any("forward" in module.__dict__ for module in model.modules())


def test_gradients_run_transformers_own_code():
    model = tiny("llama")
    ids, mask = prompts()
    ntt.apply(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(ids, attention_mask=mask).logits.sum().backward()  # the CPU's reason comes first
    assert model.lm_head.weight.grad is not None
    assert fallbacks(caught)


# The wheel's functions as their references compute them, on CPU tensors: what the
# served path hands the wheel, checked against transformers' own computation.
def _softcapped(q, k_cache, v_cache, softmax_scale=None, causal=False, softcap=0.0):
    """flash_attn_with_kvcache over a dense cache, as FlashAttention defines it."""
    group = q.shape[2] // k_cache.shape[2]
    keys, values = (t.repeat_interleave(group, dim=2).float() for t in (k_cache, v_cache))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), keys) * softmax_scale
    scores = softcap * torch.tanh(scores / softcap) if softcap else scores
    if causal:  # bottom-right: query i sees keys up to i + seq_k - seq_q
        seq_q, seq_k = q.shape[1], k_cache.shape[1]
        seen = torch.ones(seq_q, seq_k, dtype=torch.bool).tril(seq_k - seq_q)
        scores = scores.masked_fill(~seen, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), values).to(q.dtype)


REFERENCES = {
    "rms_norm": F.rms_norm,
    "mm": torch.mm,
    "addmm": torch.addmm,
    "silu_mul": _silu_mul.reference,
    "gelu": F.gelu,
    "mul": torch.mul,
    "rotary_position_embedding": _rotary.reference,
    "scaled_dot_product_attention": F.scaled_dot_product_attention,
    "flash_attn_with_kvcache": _softcapped,
}


@pytest.fixture
def served_by_references(monkeypatch):
    """The served path on the CPU: each of the wheel's functions the integration calls,
    counted, computed by its reference."""
    calls = collections.Counter()
    for name, reference in REFERENCES.items():

        def counted(*args, _name=name, _reference=reference, **kwargs):
            calls[_name] += 1
            return _reference(*args, **kwargs)

        monkeypatch.setattr(nt, name, counted)
    monkeypatch.setattr(_served, "DEVICE", "cpu")
    # The softcapped attention is built for half types only; its mapping is checked in
    # float32 as the rest.
    wheel = _served.Served.of_wheel(None)
    dtypes = {**wheel.dtypes, "paged_attention": (*wheel.dtypes["paged_attention"], torch.float32)}
    widened = type(wheel)(dtypes, wheel.head_dims, None)
    monkeypatch.setattr(_served.Served, "of_wheel", classmethod(lambda cls, capability: widened))
    return calls


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("padding", [0, 2])
def test_served_calls_compute_what_transformers_computes(family, padding, served_by_references):
    model = tiny(family)
    ids, mask = prompts(padding=padding)
    want = logits(model, ids, mask)
    want_tokens = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
    ntt.apply(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = logits(model, ids, mask)
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
    kept = mask.bool()  # a padded query's row is whatever the attention makes of no keys
    torch.testing.assert_close(got[kept], want[kept], rtol=1e-4, atol=1e-5)
    assert torch.equal(tokens, want_tokens)
    calls = served_by_references
    assert calls["rms_norm"], calls
    assert calls["rotary_position_embedding"], calls
    assert calls["mm"] + calls["addmm"] >= 15, calls
    assert calls["silu_mul"] or (calls["gelu"] and calls["mul"]), calls
    if family == "gemma2" and padding:  # softcapping under a padding mask: eager's
        assert calls["flash_attn_with_kvcache"] == calls["scaled_dot_product_attention"] == 0
        assert fallbacks(caught) == [
            "ntops_prebuilt: Gemma2Attention's attention runs transformers' own code: "
            "softcapping with an attention mask (padding, or a static cache): the wheel's "
            "softcapped attention takes lengths, not masks"
        ]
    else:
        assert calls["flash_attn_with_kvcache"] or calls["scaled_dot_product_attention"], calls
        assert fallbacks(caught) == []


def test_unpatched_models_of_a_patched_family_stay_transformers_own(served_by_references):
    other = tiny("llama", seed=1)
    ids, mask = prompts()
    want = logits(other, ids, mask)
    ntt.apply(tiny("llama"))  # its family's apply_rotary_pos_emb now dispatches on tables
    assert torch.equal(logits(other, ids, mask), want)
    assert served_by_references["rotary_position_embedding"] == 0


def test_what_the_wheel_cannot_serve_is_named(monkeypatch, served_by_references):
    lacking = _served.Served.of_wheel(None)
    lacking = type(lacking)(
        {op: d for op, d in lacking.dtypes.items() if op != "rms_norm"},
        lacking.head_dims,
        None,
    )
    monkeypatch.setattr(_served.Served, "of_wheel", classmethod(lambda cls, capability: lacking))
    cases = (
        ("llama", {}, torch.float32),
        ("llama", {"head_dim": 48}, torch.float32),
        ("qwen2", {"hidden_act": "relu"}, torch.float32),
        ("mistral", {}, torch.float64),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for family, overrides, dtype in cases:
            model = tiny(family, dtype=dtype, **overrides)
            ids, mask = prompts()
            patched = ntt.apply(model)
            want = logits(model, ids, mask)
            patched.remove()
            assert torch.equal(want, logits(model, ids, mask))
        gpt2 = transformers.AutoModelForCausalLM.from_config(
            transformers.GPT2Config(n_embd=64, n_layer=1, n_head=2, vocab_size=128)
        )
        assert ntt.apply(gpt2).modules == {}
    own = "runs transformers' own code: "
    assert fallbacks(caught) == [
        f"ntops_prebuilt: GPT2LMHeadModel {own}model_type 'gpt2' is not one of "
        + ", ".join(ntt.FAMILIES),
        f"ntops_prebuilt: LlamaAttention's attention {own}head_dim 48 (its "
        "scaled_dot_product_attention kernels take 32, 64, 96, 128, 256)",
        f"ntops_prebuilt: LlamaRMSNorm {own}the wheel has no rms_norm kernels "
        "(`ntops-aot build --ops rms_norm` adds them)",
        f"ntops_prebuilt: MistralAttention's attention {own}float64 tensors (its "
        "scaled_dot_product_attention kernels are bfloat16, float16, float32)",
        f"ntops_prebuilt: MistralMLP {own}float64 tensors (its silu_mul kernels are "
        "bfloat16, float16, float32)",
        f"ntops_prebuilt: MistralRMSNorm {own}the wheel has no rms_norm kernels "
        "(`ntops-aot build --ops rms_norm` adds them)",
        f"ntops_prebuilt: Qwen2MLP {own}its activation ReLU (the wheel fuses silu and gelu's "
        "tanh form)",
        f"ntops_prebuilt: Qwen2RMSNorm {own}the wheel has no rms_norm kernels "
        "(`ntops-aot build --ops rms_norm` adds them)",
        f"ntops_prebuilt: modeling_mistral.apply_rotary_pos_emb {own}float64 tensors (its "
        "rotary_position_embedding kernels are bfloat16, float16, float32)",
        f"ntops_prebuilt: nn.Linear {own}float64 tensors (its mm kernels are bfloat16, "
        "float16, float32)",
    ]


@pytest.fixture
def ops_on_the_cpu(monkeypatch):
    """The served path on the CPU through the wheel's torch.library ops, as the GPU runs
    it: the integration's calls go to each function's route (what a call under Dynamo
    takes, and eagerly here), and its op runs the function's reference as its CPU kernel.
    Returns the ntops_prebuilt ops the compiled graphs hold (a recording backend)."""
    library = torch.library.Library("ntops_prebuilt", "IMPL")
    for name, reference in REFERENCES.items():
        if name == "flash_attn_with_kvcache":  # its op is paged_attention's; see below
            continue
        packet = getattr(torch.ops.ntops_prebuilt, name)
        for overload in packet.overloads():
            schema = getattr(packet, overload)._schema
            label = name if overload == "default" else f"{name}.{overload}"
            if not overload.endswith("out"):
                library.impl(label, _by_name(reference, schema), "CPU")
        monkeypatch.setattr(nt, name, _library.traced(name))
    monkeypatch.setattr(_served, "DEVICE", "cpu")
    graphs = collections.Counter()

    def recording(graph, example_inputs):
        targets = (str(node.target) for node in graph.graph.nodes)
        graphs.update(t.split(".")[1] for t in targets if t.startswith("ntops_prebuilt."))
        return graph.forward

    yield recording, graphs
    library._destroy()


def _by_name(reference, schema):
    """`reference` called with an op's arguments by name (torch's functions take some by
    name only); causal_variant, which F.scaled_dot_product_attention lacks, only unset."""
    names = [argument.name for argument in schema.arguments]

    def kernel(*args, **kwargs):
        named = {**dict(zip(names, args, strict=False)), **kwargs}
        assert named.pop("causal_variant", None) is None, named
        return reference(**named)

    return kernel


@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_static_cache_decoding_gives_stock_tokens(family, ops_on_the_cpu):
    """The GPU's test_static_cache_under_torch_compile_matches_stock on the CPU:
    transformers' own compile of the decode step (fullgraph), whose first call is
    a model forward that mutates the dict of kwargs it was given (a graph break in
    the wheel's routes before they bound arguments without inspect)."""
    recording, graphs = ops_on_the_cpu
    ids, mask = prompts(padding=0)
    options = {"attention_mask": mask, "max_new_tokens": 4, "do_sample": False}
    with torch.no_grad():
        want = tiny(family).generate(ids, **options)
    model = tiny(family)
    ntt.apply(model)
    config = transformers.CompileConfig(fullgraph=True, backend=recording, mode=None)
    config._compile_all_devices = True  # transformers compiles on CUDA devices only, else
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = model.generate(ids, **options, cache_implementation="static", compile_config=config)
    assert torch.equal(got, want)
    served = {"rms_norm", "rotary_position_embedding", "mm"}
    served |= {"gelu", "mul"} if family.startswith("gemma") else {"silu_mul"}
    if family == "gemma2":  # its softcapped attention is built for half types
        assert fallbacks(caught) == [
            "ntops_prebuilt: Gemma2Attention's attention runs transformers' own code: "
            "float32 tensors (its paged_attention kernels are bfloat16, float16)"
        ]
    else:
        served.add("scaled_dot_product_attention")
        assert fallbacks(caught) == []
    assert served <= set(graphs), graphs


# Under torch.compile: the meta device stands for CUDA (the wheel's ops have fakes, and
# the compiled graph runs them on meta tensors), the whole model traced by Dynamo.
@pytest.fixture
def on_meta(monkeypatch):
    monkeypatch.setattr(_served, "DEVICE", "meta")
    with torch.device("meta"):
        probe = tiny("llama", dtype=torch.bfloat16, device="meta")
    try:
        probe(torch.zeros(1, 2, dtype=torch.long, device="meta"))
    except RuntimeError as error:  # 4.56's rotary embedding enters autocast on "meta"
        pytest.skip(f"transformers {transformers.__version__} runs no model on meta: {error}")


def _static_cache(model, length):
    config = model.config
    try:
        return transformers.StaticCache(config=config, max_cache_len=length)
    except TypeError:  # 4.56's
        return transformers.StaticCache(
            config=config, max_batch_size=1, max_cache_len=length, device="meta", dtype=model.dtype
        )


def _traced(model, **inputs):
    """(ntops_prebuilt ops in the graphs, graph breaks) of Dynamo tracing model(**inputs)."""
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(**inputs)
    ops = {
        str(node.target).split(".")[1]
        for graph in explained.graphs
        for node in graph.graph.nodes
        if str(node.target).startswith("ntops_prebuilt.")
    }
    return ops, explained.graph_break_count


@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_served_path_has_no_graph_break(family, on_meta):
    model = tiny(family, dtype=torch.bfloat16, device="meta")
    ntt.apply(model)
    ops = {"rms_norm", "rotary_position_embedding", "scaled_dot_product_attention"}
    ops |= {"gelu", "mul"} if family.startswith("gemma") else {"silu_mul"}
    if family == "gemma2":
        # Dynamo makes masks of what eager leaves causal (transformers skips none while
        # compiling, on torch before 2.14): softcapped attention under a mask falls back.
        ops -= {"scaled_dot_product_attention"}
    ids = torch.zeros(1, 7, dtype=torch.long, device="meta")
    static = {
        "past_key_values": _static_cache(model, 16),
        "cache_position": torch.tensor([7], device="meta"),
        "use_cache": True,
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for inputs in ({"input_ids": ids, "use_cache": False}, {"input_ids": ids[:, :1], **static}):
            found, breaks = _traced(model, **inputs)
            assert breaks == 0
            assert ops <= found, found
            assert family != "gemma2" or "paged_attention" not in found, found
    if family == "gemma2":  # once, while the prefill was traced
        assert len(fallbacks(caught)) == 1
        assert "softcapping" in fallbacks(caught)[0]
    else:
        assert fallbacks(caught) == []


def test_compiled_fallbacks_warn_without_graph_breaks():
    model = tiny("llama")
    ids, mask = prompts()
    torch._dynamo.reset()
    with torch.no_grad():
        stock = torch._dynamo.explain(model)(input_ids=ids, attention_mask=mask).graph_break_count
    ntt.apply(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch._dynamo.reset()
        with torch.no_grad():
            explained = torch._dynamo.explain(model)(input_ids=ids, attention_mask=mask)
    assert explained.graph_break_count == stock, explained.break_reasons
    assert len(fallbacks(caught)) == 5


def test_fake_tensors_take_the_served_path(on_meta):
    """FakeTensorMode (what torch.export and compile's fake propagation pass), eagerly:
    the wheel's functions route fakes to their ops, whose fakes check the shapes."""
    model = tiny("qwen3", dtype=torch.float16, device="meta")
    ntt.apply(model)
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake, torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = torch.zeros(2, 5, dtype=torch.long, device="meta")
        out = model(ids).logits
    assert out.shape == (2, 5, 128)
    assert out.dtype == torch.float16
    assert fallbacks(caught) == []
