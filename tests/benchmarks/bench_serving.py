"""Serving steps of the Llama-3-8B layer (bench_layer.py's weights, bf16): a decode step of
64 and of 256 requests whose caches hold 128..8192 tokens (uniform), over a paged KV
cache of 16- and 64-token pages, and a mixed step (a 512-token prefill chunk after 1024
cached tokens beside 63 decodes), the tokens of a step packed as an engine batches them.

Three layers on the same weights and inputs, each eager and in a CUDA graph:
- ntops: every kernel prebuilt; decode attention is flash_attn_with_kvcache (the new
  keys and values written into their pages by the same launch), the mixed step's is
  flash_attn_varlen_func after its new entries are copied into their slots (torch's
  index_copy_, as engines write a slot mapping);
- torch: the same math on dense tensors, each request's cache a padded row of a
  (batch, heads, longest, head_dim) cache, masked past its length;
- flashinfer: torch's projections with FlashInfer's attention over the paged cache
  (BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper for the mixed
  step), planned once per step outside the timing, as engines plan once for all layers.

Every layer is checked against torch's before anything is timed. Wall and GPU us as
bench_layer.py measures them (its `measure`: medians, the columns taking turns).

    python tests/benchmarks/bench_serving.py --json OUT.json [--quick]
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import bench_layer as layer
from bench_layer import BF16, LLAMA_8B, F

import ntops_prebuilt as nt

# The serving steps are Llama-3-8B's (bench_layer's weights).
HIDDEN, HEADS, KV_HEADS, HEAD_DIM = (
    LLAMA_8B.hidden,
    LLAMA_8B.heads,
    LLAMA_8B.kv_heads,
    LLAMA_8B.head_dim,
)
INTERMEDIATE, Q_SIZE, KV_SIZE = LLAMA_8B.intermediate, LLAMA_8B.q_size, LLAMA_8B.kv_size
EPS, ROPE_THETA = LLAMA_8B.eps, LLAMA_8B.rope_theta


@dataclasses.dataclass(frozen=True)
class Serving:
    name: str
    q_lens: tuple
    cached: tuple
    page: int


def scenarios(quick):
    generator = torch.Generator().manual_seed(0)
    found = []
    for batch in (64,) if quick else (64, 256):
        cached = tuple(torch.randint(128, 8193, (batch,), generator=generator).tolist())
        for page in (16, 64):
            found.append(Serving(f"decode-b{batch}-page{page}", (1,) * batch, cached, page))
    cached = (1024, *torch.randint(128, 8193, (63,), generator=generator).tolist())
    for page in (16,) if quick else (16, 64):
        found.append(Serving(f"mixed-512+63-page{page}", (512,) + (1,) * 63, cached, page))
    return found


@dataclasses.dataclass
class Batch:
    """A step's inputs: packed tokens, per-token rotary tables, the paged cache (shared
    by the ntops and FlashInfer layers: a step writes the same entries each time), its
    page table and slots, and torch's dense padded cache."""

    x: torch.Tensor
    half: tuple
    full: tuple
    k_pages: torch.Tensor
    v_pages: torch.Tensor
    table: torch.Tensor
    cached: torch.Tensor  # (batch,) int32: keys before the step
    after: torch.Tensor  # (batch,) int32: keys after it
    cu_q: torch.Tensor
    slots: torch.Tensor  # (tokens,) int64: each new entry's row of the flattened pages
    k_dense: torch.Tensor
    v_dense: torch.Tensor
    dense_at: tuple  # (request, position) index of each new entry in the dense cache
    serving: Serving


def make_batch(serving):
    generator = torch.Generator("cuda").manual_seed(layer.SEED + 1)
    q_lens, cached = list(serving.q_lens), list(serving.cached)
    after = [c + q for c, q in zip(cached, q_lens, strict=True)]
    tokens, page = sum(q_lens), serving.page
    x = layer.randn(generator, tokens, HIDDEN)
    positions = torch.cat([torch.arange(c, a) for c, a in zip(cached, after, strict=True)])
    inverse = ROPE_THETA ** -(torch.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angles = (positions[:, None] * inverse).cuda()
    half = (angles.sin().to(BF16), angles.cos().to(BF16))
    full = tuple(torch.cat((t, t), -1) for t in half)
    needed = [-(-a // page) for a in after]
    order = torch.randperm(sum(needed), generator=torch.Generator().manual_seed(5))
    table = torch.zeros(len(q_lens), max(needed), dtype=torch.int64)
    used = 0
    for b, count in enumerate(needed):
        table[b, :count] = order[used : used + count]
        used += count
    shape = (sum(needed), page, KV_HEADS, HEAD_DIM)
    k_pages, v_pages = (layer.randn(generator, *shape) for _ in "kv")
    longest = max(after)
    k_dense = torch.zeros(len(q_lens), KV_HEADS, longest, HEAD_DIM, dtype=BF16, device="cuda")
    v_dense = torch.zeros_like(k_dense)
    requests, where = [], []
    for b, (c, a) in enumerate(zip(cached, after, strict=True)):
        rows = table[b, torch.arange(a) // page] * page + torch.arange(a) % page
        k_dense[b, :, :a] = k_pages.view(-1, KV_HEADS, HEAD_DIM)[rows.cuda()].transpose(0, 1)
        v_dense[b, :, :a] = v_pages.view(-1, KV_HEADS, HEAD_DIM)[rows.cuda()].transpose(0, 1)
        requests += [b] * (a - c)
        where += list(range(c, a))
    slots = torch.cat(
        [table[b, torch.arange(c, a) // page] * page + torch.arange(c, a) % page
         for b, (c, a) in enumerate(zip(cached, after, strict=True))]
    )  # fmt: skip
    int32 = {"dtype": torch.int32, "device": "cuda"}
    return Batch(
        x, half, full, k_pages, v_pages, table.to(**int32), torch.tensor(cached, **int32),
        torch.tensor(after, **int32),
        torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], **int32),
        slots.cuda(), k_dense, v_dense,
        (torch.tensor(requests, device="cuda"), torch.tensor(where, device="cuda")), serving,
    )  # fmt: skip


def decode_step(batch):
    return max(batch.serving.q_lens) == 1


def ntops_attention(weights, batch):
    tokens = batch.x.shape[0]
    h = nt.rms_norm(batch.x, (HIDDEN,), weights.input_norm, EPS)
    qkv = nt.mm(h, weights.qkv.t())
    heads = qkv[:, : Q_SIZE + KV_SIZE].view(1, tokens, HEADS + KV_HEADS, HEAD_DIM)
    nt.rotary_position_embedding(heads, *batch.half, interleaved=False, inplace=True)
    q = qkv[:, :Q_SIZE].view(tokens, HEADS, HEAD_DIM)
    k = qkv[:, Q_SIZE : Q_SIZE + KV_SIZE].view(tokens, KV_HEADS, HEAD_DIM)
    v = qkv[:, Q_SIZE + KV_SIZE :].view(tokens, KV_HEADS, HEAD_DIM)
    if decode_step(batch):
        out = nt.flash_attn_with_kvcache(
            q.unsqueeze(1), batch.k_pages, batch.v_pages, k.unsqueeze(1), v.unsqueeze(1),
            cache_seqlens=batch.cached, block_table=batch.table, causal=True,
        )  # fmt: skip
    else:
        _write_pages(batch, k, v)
        out = nt.flash_attn_varlen_func(
            q, batch.k_pages, batch.v_pages, batch.cu_q, None, max(batch.serving.q_lens),
            max(batch.serving.cached) + 1, causal=True, block_table=batch.table,
            seqused_k=batch.after,
        )  # fmt: skip
    return out.reshape(tokens, Q_SIZE)


def _write_pages(batch, k, v):
    batch.k_pages.view(-1, KV_HEADS, HEAD_DIM).index_copy_(0, batch.slots, k)
    batch.v_pages.view(-1, KV_HEADS, HEAD_DIM).index_copy_(0, batch.slots, v)


def ntops_layer(weights, batch):
    x = nt.addmm(batch.x, ntops_attention(weights, batch), weights.o.t())
    h = nt.mm(nt.rms_norm(x, (HIDDEN,), weights.post_norm, EPS), weights.gate_up.t())
    return nt.addmm(x, nt.silu_mul(h[:, :INTERMEDIATE], h[:, INTERMEDIATE:]), weights.down.t())


def _projected(weights, batch):
    """torch's projections and rotation: q (tokens, heads, dim), k, v (tokens, kv, dim)."""
    tokens = batch.x.shape[0]
    h = F.rms_norm(batch.x, (HIDDEN,), weights.input_norm, EPS)
    q, k, v = F.linear(h, weights.qkv).split((Q_SIZE, KV_SIZE, KV_SIZE), -1)
    q, k = q.view(tokens, HEADS, HEAD_DIM), k.view(tokens, KV_HEADS, HEAD_DIM)
    sin, cos = (t[:, None, :] for t in batch.full)
    q = q * cos + layer.rotate_half(q) * sin
    k = k * cos + layer.rotate_half(k) * sin
    return q, k, v.view(tokens, KV_HEADS, HEAD_DIM)


def torch_attention(weights, batch):
    """Dense padded caches, masked past each request's keys: decodes in one
    scaled_dot_product_attention, a prefill chunk in one of its own."""
    q, k, v = _projected(weights, batch)
    requests, positions = batch.dense_at
    batch.k_dense[requests, :, positions] = k
    batch.v_dense[requests, :, positions] = v
    longest = batch.k_dense.shape[2]
    seen = torch.arange(longest, device="cuda")[None, :] < batch.after[:, None]
    q_lens = batch.serving.q_lens
    outs = []
    first = 0
    if not decode_step(batch):  # the chunk: causal, its queries at the end of its keys
        length, keys = q_lens[0], batch.serving.cached[0] + q_lens[0]
        chunk = q[:length].transpose(0, 1)[None]
        mask = torch.ones(length, keys, dtype=torch.bool, device="cuda").tril(keys - length)
        out = F.scaled_dot_product_attention(
            chunk, batch.k_dense[:1, :, :keys], batch.v_dense[:1, :, :keys], mask,
            enable_gqa=True,
        )  # fmt: skip
        outs.append(out[0].transpose(0, 1))
        first = 1
    decodes = q[first * q_lens[0] :].unsqueeze(2)  # (requests, heads, 1, dim)
    out = F.scaled_dot_product_attention(
        decodes, batch.k_dense[first:], batch.v_dense[first:], seen[first:, None, None, :],
        enable_gqa=True,
    )  # fmt: skip
    outs.append(out[:, :, 0])
    return torch.cat(outs).reshape(-1, Q_SIZE)


def _mlp(weights, x, attention):
    x = x + F.linear(attention, weights.o)
    h = F.rms_norm(x, (HIDDEN,), weights.post_norm, EPS)
    gate, up = F.linear(h, weights.gate_up).chunk(2, -1)
    return x + F.linear(F.silu(gate) * up, weights.down)


def torch_layer(weights, batch):
    return _mlp(weights, batch.x, torch_attention(weights, batch))


class FlashInferAttention:
    """FlashInfer's wrappers over the paged cache, planned once for the step."""

    def __init__(self, flashinfer, batch):
        workspace = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        page = batch.serving.page
        needed = (batch.after + page - 1) // page
        indptr = torch.cat([needed.new_zeros(1), needed.cumsum(0)]).to(torch.int32)
        indices = torch.cat([batch.table[b, :n] for b, n in enumerate(needed.tolist())])
        last = (batch.after - (needed - 1) * page).to(torch.int32)
        common = (HEADS, KV_HEADS, HEAD_DIM, page)
        types = {"q_data_type": BF16, "kv_data_type": BF16}
        if decode_step(batch):
            self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True,
                paged_kv_indptr_buffer=indptr, paged_kv_indices_buffer=indices,
                paged_kv_last_page_len_buffer=last,
            )  # fmt: skip
            self.wrapper.plan(indptr, indices, last, *common, **types)
        else:
            self.wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
            self.wrapper.plan(batch.cu_q, indptr, indices, last, *common, causal=True, **types)

    def __call__(self, weights, batch):
        q, k, v = _projected(weights, batch)
        _write_pages(batch, k, v)
        out = self.wrapper.run(q, (batch.k_pages, batch.v_pages))
        return _mlp(weights, batch.x, out.reshape(-1, Q_SIZE))


def run(serving, weights, flashinfer, effort):
    batch = make_batch(serving)
    reference = torch_layer(weights, batch)
    fi = FlashInferAttention(flashinfer, batch)
    methods, errors = {}, {}
    for name, fn in (
        ("ntops", lambda: ntops_layer(weights, batch)),
        ("torch", lambda: torch_layer(weights, batch)),
        ("flashinfer", lambda: fi(weights, batch)),
    ):
        try:
            found, error = layer.eager_and_graph(
                serving.name, f"{name} eager", f"{name} graph", fn, reference
            )
        except Exception as failed:  # a column that cannot run says why; the others run
            errors[name] = f"{type(failed).__name__}: {failed}"[:300]
            print(f"{serving.name} {name}: {errors[name]}", file=sys.stderr)
            continue
        methods |= found
        errors |= error
    figures = layer.measure(methods, effort)
    return {"errors": errors, "us": figures}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--quick", action="store_true", help="batch 64 and page 16 only")
    args = parser.parse_args()
    import flashinfer

    weights = layer.make_weights(LLAMA_8B)
    effort = layer.QUICK if args.quick else layer.Effort(calls=10, repeats=5)
    report = {"device": torch.cuda.get_device_name(), "flashinfer": flashinfer.__version__}
    rows = {}
    for serving in scenarios(args.quick):
        rows[serving.name] = run(serving, weights, flashinfer, effort)
        us = rows[serving.name]["us"]
        line = "  ".join(f"{name} {v['gpu_us']:.0f}/{v['wall_us']:.0f}" for name, v in us.items())
        print(f"{serving.name}: {line}  (gpu/wall us)", flush=True)
        torch.cuda.empty_cache()
    report["rows"] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
