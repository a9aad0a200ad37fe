"""ntops_prebuilt.integrations.transformers under torch.compile, on the CPU (run with
transformers_cases.py): the served path traces into the wheel's torch.library ops with no
graph break, prefill and a static cache's decode step (the meta device, where the ops'
fakes run); transformers' compiled decode with a static cache gives stock's tokens (the
ops' CPU kernels their references); fallbacks warn while Dynamo traces without breaking
the graph; FakeTensorMode takes the served path."""

import collections
import warnings

import pytest
import torch
import transformers
from torch._subclasses.fake_tensor import FakeTensorMode

import ntops_prebuilt.integrations.transformers as ntt
import ntops_prebuilt.torch as nt
from ntops_prebuilt import _library
from ntops_prebuilt.integrations.transformers import _served
from tests.hf_models import prompts, tiny
from tests.unit.transformers_fixtures import FAMILIES, REFERENCES, fallbacks


@pytest.fixture
def ops_on_the_cpu(monkeypatch):
    """The served path on the CPU through the wheel's torch.library ops, as the GPU runs
    it: the integration's calls go to each function's route (what a call under Dynamo
    takes, and eagerly here), and its op runs the function's reference as its CPU kernel.
    Returns the ntops_prebuilt ops the compiled graphs hold (a recording backend)."""
    library = torch.library.Library("ntops_prebuilt", "IMPL")
    for name, reference in REFERENCES.items():
        if name in ("flash_attn_with_kvcache", "flash_attn_varlen_func"):
            continue  # their op is paged_attention's; see below (varlen: not compiled here)
        packet = getattr(torch.ops.ntops_prebuilt, name)
        for overload in packet.overloads():
            schema = getattr(packet, overload)._schema
            label = name if overload == "default" else f"{name}.{overload}"
            if not overload.endswith("out"):
                library.impl(label, _by_name(reference, schema), "CPU")
        if hasattr(torch.ops.ntops_prebuilt, f"{name}_"):  # in place, returning nothing
            schema = getattr(torch.ops.ntops_prebuilt, f"{name}_").default._schema
            library.impl(f"{name}_", _by_name(reference, schema, inplace=True), "CPU")
        monkeypatch.setattr(nt, name, _library.traced(name))
    monkeypatch.setattr(_served, "DEVICE", "cpu")
    graphs = collections.Counter()

    def recording(graph, example_inputs):
        targets = (str(node.target) for node in graph.graph.nodes)
        graphs.update(t.split(".")[1] for t in targets if t.startswith("ntops_prebuilt."))
        return graph.forward

    yield recording, graphs
    library._destroy()


def _by_name(reference, schema, **fixed):
    """`reference` called with an op's arguments by name (torch's functions take some by
    name only) and `fixed` ones; causal_variant, which F.scaled_dot_product_attention
    lacks, only unset. An in-place op's kernel returns nothing, as its schema says."""
    names = [argument.name for argument in schema.arguments]

    def kernel(*args, **kwargs):
        named = {**dict(zip(names, args, strict=False)), **kwargs, **fixed}
        assert named.pop("causal_variant", None) is None, named
        result = reference(**named)
        return None if fixed.get("inplace") else result

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
    served = {"rms_norm", "rotary_position_embedding_", "mm"}  # rotated in place
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
    # q and k rotated in place, in the fused projections' result
    ops = {"rms_norm", "rotary_position_embedding_", "scaled_dot_product_attention"}
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
