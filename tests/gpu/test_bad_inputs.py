"""Bad input, call by call: every one gets an exception of torch's kinds whose message
names the op, and the process (its CUDA context included) carries on."""

import math

import torch

H = torch.float16
SDPA, ROPE = "scaled_dot_product_attention", "rotary_position_embedding"
FP8, GROUP_FP8 = "scaled_fp8_quant", "per_token_group_quant_fp8"
MM8, BLOCK8 = "scaled_mm", "w8a8_block_fp8_matmul"
E4M3 = torch.float8_e4m3fn


def cuda(*shape, dtype=torch.float32):
    return torch.randn(shape, device="cuda").to(dtype)


def _cases(nt):
    x, y, h = cuda(4, 5), cuda(4, 5), cuda(4, 5, dtype=H)
    ints = torch.arange(20, device="cuda", dtype=torch.int32).view(4, 5)
    freed = cuda(4, 5)
    freed.untyped_storage().resize_(0)
    sparse, cpu = x.to_sparse(), torch.randn(4, 5)
    nested = torch.nested.nested_tensor([cuda(2, 5), cuda(3, 5)], layout=torch.jagged)
    leaf = cuda(4, 5).requires_grad_()
    with torch.inference_mode():
        frozen = cuda(4, 5)
    q, k = cuda(1, 4, 3, 64, dtype=H), cuda(1, 2, 10, 64, dtype=H)
    sdpa, rope, gqa = (
        nt.scaled_dot_product_attention,
        nt.rotary_position_embedding,
        {"enable_gqa": True},
    )
    a, b = cuda(8, 16), cuda(16, 4)
    group_fp8 = nt.per_token_group_quant_fp8
    a8, w8, one = cuda(32, 64).to(E4M3), cuda(48, 64).to(E4M3), cuda(1)
    a8b, w8b, block8 = cuda(32, 256).to(E4M3), cuda(96, 256).to(E4M3), nt.w8a8_block_fp8_matmul
    table = cuda(3, 4)
    return [
        ("add", lambda: nt.add(x, cuda(3, 5))),
        ("add", lambda: nt.add(x, y, out=cuda(4, 6))),
        ("add", lambda: nt.add(x, h)),
        ("add", lambda: nt.add(x, [1.0])),
        ("add", lambda: nt.add(x, "1")),
        ("add", lambda: nt.add(x, y, alpha="2")),
        ("add", lambda: nt.add(x, cpu)),
        ("add", lambda: nt.add(x, freed)),
        ("add", lambda: nt.add(x, sparse)),
        ("add", lambda: nt.add(x, x, out=x[:1].expand(4, 5))),
        ("add", lambda: nt.add(x, x[:1], out=x)),
        ("add", lambda: nt.add(leaf, y, out=cuda(4, 5))),
        ("add", lambda: nt.add(x, y, out=frozen)),
        ("add", lambda: nt.add(x.double(), x.double())),
        ("add", lambda: nt.add(ints, 0.5)),
        ("sub", lambda: nt.sub(x, True)),
        ("sub", lambda: nt.sub(ints > 3, ints > 2)),
        ("mul", lambda: nt.mul(x, cuda(2, 5))),
        ("div", lambda: nt.div(x, y, rounding_mode="round")),
        ("div", lambda: nt.div(x, y, rounding_mode="none")),
        ("pow", lambda: nt.pow(x, cuda(5, 4))),
        ("pow", lambda: nt.pow(x, None)),
        ("lt", lambda: nt.lt(x, cuda(7))),
        ("bitwise_and", lambda: nt.bitwise_and(x, y)),
        ("bitwise_or", lambda: nt.bitwise_or(ints, ints.long())),
        ("bitwise_not", lambda: nt.bitwise_not(x)),
        ("relu", lambda: nt.relu(nested)),
        ("relu", lambda: nt.relu(leaf, inplace=True)),
        ("relu", lambda: nt.relu(cpu)),
        ("silu", lambda: nt.silu(x.double())),
        ("silu_mul", lambda: nt.silu_mul(x, cuda(3, 5))),
        ("gelu", lambda: nt.gelu(x, approximate="fast")),
        ("exp", lambda: nt.exp(ints)),
        ("clamp", lambda: nt.clamp(x)),
        ("clamp", lambda: nt.clamp(x, min="0")),
        ("clamp", lambda: nt.clamp(x, x, 0.5)),
        ("clamp", lambda: nt.clamp(x, x.double())),
        ("dropout", lambda: nt.dropout(x, p=1.5)),
        ("dropout", lambda: nt.dropout(cpu)),
        ("softmax", lambda: nt.softmax(x, 2)),
        ("softmax", lambda: nt.softmax(x, 0.5)),
        ("softmax", lambda: nt.softmax(cpu, -1)),
        ("rms_norm", lambda: nt.rms_norm(x, (4,))),
        ("rms_norm", lambda: nt.rms_norm(x, (5,), cuda(4))),
        ("layer_norm", lambda: nt.layer_norm(x, (6,))),
        ("layer_norm", lambda: nt.layer_norm(x, (5,), None, cuda(3))),
        ("mm", lambda: nt.mm(a, a)),
        ("mm", lambda: nt.mm(a, b, out=cuda(8, 5))),
        ("mm", lambda: nt.mm(cuda(2, 3, 4), b)),
        ("mm", lambda: nt.mm(a, b.half())),
        ("bmm", lambda: nt.bmm(a, b)),
        ("bmm", lambda: nt.bmm(cuda(2, 8, 16), cuda(3, 16, 4))),
        ("addmm", lambda: nt.addmm(cuda(3), a, b)),
        ("addmm", lambda: nt.addmm(cuda(4), a, b, beta="1")),
        ("addmm", lambda: nt.addmm(a[0, :4], a, b, out=a[:, :4])),
        ("matmul", lambda: nt.matmul(torch.tensor(1.0, device="cuda"), b)),
        ("matmul", lambda: nt.matmul(a, a)),
        ("matmul", lambda: nt.matmul(a, b, out=cuda(2, 2))),
        (SDPA, lambda: sdpa(q, k, k)),
        (SDPA, lambda: sdpa(q[0], k, k, **gqa)),
        (SDPA, lambda: sdpa(q, k, k, dropout_p=0.1, **gqa)),
        (SDPA, lambda: sdpa(q, k[:, :0], k[:, :0], **gqa)),
        (SDPA, lambda: sdpa(q, k, k.float(), **gqa)),
        (SDPA, lambda: sdpa(q[..., :48], k[..., :48], k[..., :48], **gqa)),
        (SDPA, lambda: sdpa(q, k, k, cuda(3, 3), **gqa)),
        (SDPA, lambda: sdpa(q, k, k, ints, **gqa)),
        (SDPA, lambda: sdpa(q, k, k, is_causal=True, attn_mask=q, **gqa)),
        (SDPA, lambda: sdpa(q, k, k, present_key=k[:, :, :1], **gqa)),
        (SDPA, lambda: sdpa(q, k, k, present_key=k[:, :, :1], present_key_slot=10, **gqa)),
        (SDPA, lambda: sdpa(q, k, k, present_key=k[:, :, :2], present_key_slot=k[:, :, :1], **gqa)),
        (ROPE, lambda: rope(cuda(2, 3, 4, 7), table, table)),
        (ROPE, lambda: rope(cuda(2, 3, 4, 8), table[:2], table)),
        (GROUP_FP8, lambda: nt.per_token_group_quant_fp8(ints, 5)),
        (GROUP_FP8, lambda: nt.per_token_group_quant_fp8(cuda(4, 200), 128)),
        (GROUP_FP8, lambda: nt.per_token_group_quant_fp8(cuda(4, 256), 64)),
        (GROUP_FP8, lambda: nt.per_token_group_quant_fp8(cuda(4, 256), 0)),
        (GROUP_FP8, lambda: nt.per_token_group_quant_fp8(cuda(4, 256), 128, eps=-1.0)),
        (GROUP_FP8, lambda: group_fp8(cuda(2, 4, 256), 128, column_major_scales=True)),
        (GROUP_FP8, lambda: nt.per_token_group_quant_fp8(torch.randn(4, 256), 128)),
        (GROUP_FP8, lambda: nt.per_token_group_quant_fp8(cuda(4, 256).to(torch.float64), 128)),
        (FP8, lambda: nt.scaled_fp8_quant(ints)),
        (FP8, lambda: nt.scaled_fp8_quant(x, torch.ones(1, device="cuda", dtype=H))),
        (FP8, lambda: nt.scaled_fp8_quant(x, torch.ones(2, device="cuda"))),
        (FP8, lambda: nt.scaled_fp8_quant(x, torch.ones(1))),
        (FP8, lambda: nt.scaled_fp8_quant(cpu)),
        (FP8, lambda: nt.scaled_fp8_quant(cuda(0))),
        (FP8, lambda: nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True, scale_ub=0.0)),
        (FP8, lambda: nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True, scale_ub=math.nan)),
        (FP8, lambda: nt.scaled_fp8_quant(x, torch.ones(1, device="cuda"), scale_ub=2.0)),
        (FP8, lambda: nt.scaled_fp8_quant(x, scale_ub=torch.ones(1, device="cuda"))),
        (FP8, lambda: nt.scaled_fp8_quant(x, scale_ub=2.0)),  # per tensor: vLLM's assert
        (MM8, lambda: nt.scaled_mm(a8, w8.t(), one, one)),  # out_dtype None: FP8 results
        (MM8, lambda: nt.scaled_mm(cuda(32, 64, dtype=H), w8.t(), one, one, out_dtype=H)),
        (MM8, lambda: nt.scaled_mm(a8, w8, one, one, out_dtype=H)),  # K differs
        (MM8, lambda: nt.scaled_mm(a8, w8.t(), cuda(3, 1), one, out_dtype=H)),
        (MM8, lambda: nt.scaled_mm(a8, w8.t(), one.cpu(), one, out_dtype=H)),
        (MM8, lambda: nt.scaled_mm(a8, w8.t(), one, one, cuda(48), out_dtype=H)),
        (MM8, lambda: nt.scaled_mm(a8, w8.t(), one.half(), one, out_dtype=H)),
        (BLOCK8, lambda: block8(a8b, w8b, cuda(32, 2), cuda(1, 2), [64, 64])),
        (BLOCK8, lambda: block8(a8b, w8b, cuda(32, 3), cuda(1, 2), [128, 128])),
        (BLOCK8, lambda: block8(a8b, w8b, cuda(32, 2), cuda(2, 2), [128, 128])),
        (BLOCK8, lambda: block8(a8b[:, :200], w8b[:, :200], cuda(32, 2), cuda(1, 2), [128, 128])),
        (BLOCK8, lambda: block8(a8b, w8b, cuda(32, 2), cuda(1, 2), [128, 128], torch.int8)),
    ]  # fmt: skip


KINDS = (TypeError, ValueError, RuntimeError, IndexError)


def test_every_bad_call_gets_an_error_that_names_its_op(nt):
    cases = _cases(nt)
    assert len(cases) >= 60
    unclear = []
    for number, (op, call) in enumerate(cases):
        try:
            call()
        except KINDS as error:
            if op not in str(error):
                unclear.append(f"case {number} ({op}): {type(error).__name__}: {error}")
        except Exception as error:  # an internal error: unclear by definition
            unclear.append(f"case {number} ({op}): {type(error).__name__}: {error}")
        else:
            unclear.append(f"case {number} ({op}): accepted")
    assert not unclear, "\n".join(unclear)
    torch.cuda.synchronize()  # nothing bad reached the GPU
    x = cuda(64)
    torch.testing.assert_close(nt.add(x, x), x + x)
