"""tests/upstream.py, which runs upstream ntops's suite against the wheel: its `ntops`
package is the wheel under upstream's names, and its counts are by function."""

import os
import subprocess
import sys
import textwrap

from tests import upstream

IMPORTS = """
import ntops, ntops_prebuilt
from ntops.torch.add import add
from ntops.torch.utils import set_default_max_num_configs
from ntops.kernels.scaled_dot_product_attention import CausalVariant
assert ntops.torch.add is add is ntops_prebuilt.torch.add
assert ntops.torch.softmax is ntops_prebuilt.torch.softmax
assert CausalVariant is ntops_prebuilt.torch.CausalVariant
print("shim")
"""


def test_the_shim_is_the_wheel_under_upstreams_names(installed, tmp_path):
    upstream.write_shim(tmp_path / "shim", ["add", "softmax"])
    path = os.pathsep.join([str(tmp_path / "shim"), *sys.path])
    done = subprocess.run([sys.executable, "-c", IMPORTS], env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True)  # fmt: skip
    assert done.stdout.strip() == "shim", done.stderr[-2000:]


def test_outcomes_are_counted_by_function(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        textwrap.dedent("""
        <testsuites><testsuite>
        <testcase classname="tests.test_max" name="test_max_dim[a]"/>
        <testcase classname="tests.test_max" name="test_max_dim[b]"><failure/></testcase>
        <testcase classname="tests.test_sort" name="test_sort[a]"><skipped/></testcase>
        <testcase classname="tests.test_sort" name="test_sort[b]"><error/></testcase>
        </testsuite></testsuites>
    """)
    )
    found = upstream.counts(junit)
    assert dict(found["max"]) == {"passed": 1, "failed": 1}
    assert dict(found["sort"]) == {"skipped": 1, "failed": 1}
