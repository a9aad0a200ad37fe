"""The attention runtime's choices before its launch, without a GPU: which KV-cache
writes the kernel makes itself and which are copied first, and the launcher's argument
rules (`_C.attention_rules`), which must pass exactly the calls Python's checks pass."""

import pytest
import torch

H = torch.float16


def _fused(installed, rules, queries, visible, new_k, new_v, slots):
    """The entries the launch writes itself, as scaled_dot_product_attention decides
    them: the launcher's rules (`_C.attention_rules`), or Python's (-1: `_present`'s)."""
    if rules == "python":
        return -1
    query = torch.randn(new_k.shape[0], 2 * new_k.shape[1], queries, new_k.shape[3], dtype=H)
    head_dims = (new_k.shape[3],)
    ruled = installed._C.attention_rules(query, *visible, new_k, new_v, *slots, True, head_dims, 16)
    return ruled[0]


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("rules", ["native", "python"])
def test_a_decode_steps_cache_entries_ride_on_the_attention_launch(installed, batch, rules):
    """Where the slots are the attended caches' last few positions, the attention kernel
    gets the new entries to write (nothing is copied here), in the layout a fused QKV
    projection's views have: their size-1 dims' strides differ. Other slots, more than
    16 entries or queries and other dtypes are copied before the launch. The launcher
    decides (`_C.attention_rules`), or Python where it cannot read the tensors."""
    present = installed._attention._present
    heads_kv, head_dim, position = 2, 64, 40

    def step(seq):
        # As Llama's attention takes them from its (tokens, features) projection rows.
        qkv = torch.randn(batch * seq, 8 * head_dim, dtype=H)
        heads = qkv[:, : 6 * head_dim].view(batch, seq, 6, head_dim)
        new_k = heads[:, :, 4:].transpose(1, 2)
        new_v = qkv[:, 6 * head_dim :].view(batch, seq, 2, head_dim).transpose(1, 2)
        caches = [torch.zeros(batch, heads_kv, 100, head_dim, dtype=H) for _ in range(2)]
        end = position + seq
        visible = [cache[:, :, :end] for cache in caches]
        return new_k, new_v, caches, visible, [cache[:, :, position:end] for cache in caches]

    def launch(queries, visible, new_k, new_v, slots):
        fused = _fused(installed, rules, queries, visible, new_k, new_v, slots)
        return present(queries, *visible, new_k, new_v, *slots, fused)

    new_k, new_v, caches, visible, slots = step(1)
    got = launch(1, visible, new_k, new_v, slots)
    assert got[0] is new_k
    assert got[1] is new_v
    assert got[2] == 1
    assert not caches[0].any()  # the kernel writes them

    new_k, new_v, caches, visible, _ = step(1)
    heads = [cache[:, :, :1] for cache in caches]  # not the attended tail: copied
    assert launch(1, visible, new_k, new_v, heads)[2] == 0
    assert torch.equal(caches[0][:, :, :1], new_k)

    new_k, new_v, caches, visible, slots = step(17)  # a chunk: copied
    assert launch(17, visible, new_k, new_v, slots)[2] == 0
    assert torch.equal(caches[1][:, :, position : position + 17], new_v)

    new_k, new_v, caches, visible, slots = step(1)
    assert launch(1, visible, new_k.float(), new_v.float(), slots)[2] == 0
    assert torch.equal(caches[0][:, :, position : position + 1], new_k)

    # Past 16 queries the prefill kernels run, which write no cache (the Gluon one):
    # even a tail of one entry is copied.
    new_k, new_v, caches, visible, slots = step(1)
    assert launch(17, visible, new_k, new_v, slots)[2] == 0
    assert torch.equal(caches[0][:, :, position : position + 1], new_k)


def _python_rules(attention, args, enable_gqa):
    """What Python's checks say of a call: None where they pass, else the error's type."""
    query, key, value, pk, pv, ks, vs = args
    try:
        attention._sdpa_checks(query, key, value, None, 0, False, enable_gqa)
        attention._check_cache(pk, ks, "key")
        attention._check_cache(pv, vs, "value")
    except Exception as error:
        return type(error)
    return None


def test_the_launchers_attention_rules_agree_with_pythons(installed):
    """`_C.attention_rules` passes a call (its new entries, its result and shapes) only
    where Python's checks pass it too, with the tail rule's count; it passes every
    plain call Python passes, and says None (Python checks) for a tensor subclass."""
    from tests.subclasses import Wrapper

    attention = installed._attention
    rules = installed._C.attention_rules
    dims = attention._HEAD_DIMS
    d = dims[0]
    cache = torch.zeros(2, 2, 10, d, dtype=H)
    new = torch.randn(2, 2, 1, d, dtype=H)
    slot = cache[:, :, 9:]
    query = torch.randn(2, 4, 1, d, dtype=H)
    good = (query, cache, cache, new, new, slot, slot)
    calls = {
        "decode with the tail": (good, True, 1),
        "no cache": ((query, cache, cache, None, None, None, None), True, 0),
        "caches as parameters": (
            (query, *[torch.nn.Parameter(cache, requires_grad=False)] * 2, None, None, None, None),
            True,
            0,
        ),
        "keys only": ((query, cache, cache, new, None, slot, None), True, 0),
        "not the tail": ((query, cache, cache, new, new, cache[:, :, 8:9], slot), True, 0),
        "new entries of fp32": ((query, cache, cache, new.float(), new, slot, slot), True, 0),
        "17 queries": ((torch.randn(2, 4, 17, d, dtype=H), *good[1:]), True, 0),
        "heads without gqa": (good, False, None),
        "3-D query": ((query[0], *good[1:]), True, None),
        "int query": ((query.to(torch.int16), *good[1:]), True, None),
        "fp32 keys": ((query, cache.float(), cache.float(), *good[3:]), True, None),
        "values of other shape": ((query, cache, cache[:, :, :9], *good[3:]), True, None),
        "other batch": ((query[:1], *good[1:]), True, None),
        "other head_dim": ((query[..., :8], *good[1:]), True, None),
        "5 query heads": ((torch.randn(2, 5, 1, d, dtype=H), *good[1:]), True, None),
        "no key heads": ((query, cache[:, :0], cache[:, :0], *good[3:]), True, None),
        "unpaired slot": ((query, cache, cache, new, new, None, slot), True, None),
        "slot of another shape": (
            (query, cache, cache, new, new, cache[:, :, 8:], slot),
            True,
            None,
        ),
        "a wrapper": ((Wrapper(query), *good[1:]), True, None),
        "a wrapped entry": ((query, cache, cache, Wrapper(new), new, slot, slot), True, None),
        "a list": (([1.0], *good[1:]), True, None),
    }
    if d * 2 not in dims:
        wide = torch.randn(2, 4, 1, 2 * d, dtype=H)
        kv = torch.zeros(2, 2, 10, 2 * d, dtype=H)
        calls["head_dim not built"] = ((wide, kv, kv, None, None, None, None), True, None)
    for name, (args, gqa, fused) in calls.items():
        ruled = rules(*args, gqa, dims, 16)
        refused = _python_rules(attention, args, gqa)
        if fused is None:
            assert ruled is None, name
            if not isinstance(args[0], Wrapper) and not isinstance(args[3], Wrapper):
                assert refused is not None, name  # Python raises what the launcher declined
            continue
        assert refused is None, name
        assert ruled is not None, name
        query = args[0]
        out = ruled[1]
        assert ruled[0] == fused, name
        assert ruled[2:] == (*query.shape, args[1].shape[1], args[1].shape[2]), name
        assert out.shape == query.shape
        assert out.stride() == torch.empty(query.shape).stride()
        assert out.dtype == query.dtype
        assert out.is_contiguous()
        assert out.data_ptr() != query.data_ptr()
