"""Nothing compiles at run time: every op runs in a fresh process with neither
triton nor ninetoothed imported and no compiler cache written."""

import json
import os
import subprocess
import sys

SCRIPT = """
import json, sys, torch
import ntops_prebuilt as nt
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    x = torch.randn(6, 42, 128, device="cuda", dtype=dtype)
    for name in ("abs", "neg", "exp", "rsqrt", "sin", "cos", "sigmoid", "tanh", "relu", "silu",
                 "gelu", "isnan", "isinf"):
        getattr(nt, name)(x)
    for name in ("add", "sub", "mul", "div", "pow", "eq", "ne", "lt", "le", "gt", "ge"):
        getattr(nt, name)(x, x)
        getattr(nt, name)(x, 2)
    nt.clamp(x, -1, 1); nt.dropout(x, 0.5); nt.softmax(x, 1)
    nt.rms_norm(x, (128,)); nt.layer_norm(x, (128,), x[0, 0], x[0, 1])
    nt.mm(x[0], x[0].t()); nt.bmm(x, x.transpose(1, 2)); nt.addmm(x[0, 0, :42], x[0], x[1].t())
    nt.matmul(x, x[0].t())
    q = x.view(2, 3, 42, 128)
    nt.scaled_dot_product_attention(q, q, q, is_causal=True)
    nt.rotary_position_embedding(q, x[0, :3, :64], x[0, :3, 64:])
for dtype in (torch.int32, torch.bool):
    i = torch.ones(64, device="cuda", dtype=dtype)
    nt.bitwise_and(i, i); nt.bitwise_or(i, True if dtype == torch.bool else 1); nt.bitwise_not(i)
    nt.eq(i, i)
torch.cuda.synchronize()
compilers = ("triton", "ninetoothed")
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in compilers)))
"""


def test_no_compiler_is_loaded_and_no_cache_written(nt, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), TRITON_CACHE_DIR=str(tmp_path / "triton-cache"))
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(run.stdout.splitlines()[-1]) == []
    # The CUDA driver makes ~/.nv/ComputeCache at start-up; a PTX JIT would fill it.
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert written == [], written
