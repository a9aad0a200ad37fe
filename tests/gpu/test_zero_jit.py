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
    x = torch.randn(6, 42, 123, device="cuda", dtype=dtype)
    nt.add(x, x, alpha=2); nt.mul(x, x); nt.gelu(x); nt.gelu(x, approximate="tanh")
    nt.softmax(x, 1); nt.rms_norm(x, (123,)); nt.rms_norm(x, (123,), x[0, 0])
    nt.mm(x[0], x[0].t())
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
