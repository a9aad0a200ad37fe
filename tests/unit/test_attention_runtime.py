"""The attention runtime's choices before its launch, without a GPU: which KV-cache
writes the kernel makes itself and which are copied first."""

import pytest
import torch

H = torch.float16


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("rules", ["native", "python"])
def test_a_decode_steps_cache_entries_ride_on_the_attention_launch(
    installed, monkeypatch, batch, rules
):
    """Where the slots are the attended caches' last few positions, the attention kernel
    gets the new entries to write (nothing is copied here), in the layout a fused QKV
    projection's views have: their size-1 dims' strides differ. Other slots, more than
    16 entries or queries and other dtypes are copied before the launch. The launcher
    decides (`_C.tail_entries`), or Python where it cannot read the tensors (-1)."""
    if rules == "python":
        monkeypatch.setattr(installed._attention, "tail_entries", lambda *args: -1)
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

    new_k, new_v, caches, visible, slots = step(1)
    got = present(1, *visible, new_k, new_v, *slots)
    assert got[0] is new_k
    assert got[1] is new_v
    assert got[2] == 1
    assert not caches[0].any()  # the kernel writes them

    new_k, new_v, caches, visible, _ = step(1)
    heads = [cache[:, :, :1] for cache in caches]  # not the attended tail: copied
    assert present(1, *visible, new_k, new_v, *heads)[2] == 0
    assert torch.equal(caches[0][:, :, :1], new_k)

    new_k, new_v, caches, visible, slots = step(17)  # a chunk: copied
    assert present(17, *visible, new_k, new_v, *slots)[2] == 0
    assert torch.equal(caches[1][:, :, position : position + 17], new_v)

    new_k, new_v, caches, visible, slots = step(1)
    assert present(1, *visible, new_k.float(), new_v.float(), *slots)[2] == 0
    assert torch.equal(caches[0][:, :, position : position + 1], new_k)

    # Past 16 queries the prefill kernels run, which write no cache (the Gluon one):
    # even a tail of one entry is copied.
    new_k, new_v, caches, visible, slots = step(1)
    assert present(17, *visible, new_k, new_v, *slots)[2] == 0
    assert torch.equal(caches[0][:, :, position : position + 1], new_k)


def test_the_launchers_tail_rule_reads_only_plain_tensors(installed):
    """`_C.tail_entries` says -1 (Python decides) for a tensor it does not read itself,
    and counts the entries of a tail slot."""
    from tests.subclasses import Wrapper

    cache = torch.zeros(1, 2, 10, 64, dtype=H)
    new = torch.randn(1, 2, 1, 64, dtype=H)
    slot = cache[:, :, 9:]
    tail = installed._C.tail_entries
    assert tail(cache, cache, new, new, slot, slot, 16) == 1
    assert tail(cache, cache, new, new, cache[:, :, 8:9], slot, 16) == 0  # not the last
    assert tail(cache, cache, new, new, slot, slot, 0) == 0  # more than `most`
    assert tail(cache, cache, Wrapper(new), new, slot, slot, 16) == -1
