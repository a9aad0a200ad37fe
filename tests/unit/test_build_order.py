"""The order a build compiles its variants in: the slowest first, from the cache's
timings of the last build or, in a cold cache, from the seed the project ships
(aot/compile/seconds.json), so that no long variant starts last."""

import json

from ntops_aot.aot.compile import stage
from ntops_aot.aot.declare.registry import every_variant
from ntops_aot.aot.declare.space import Variant

ATTENTION = Variant(
    "scaled_dot_product_attention", "sm_80", "fp32", 4, (("head_dim", "256"), ("mask", "float"))
)
ADD = Variant("add", "sm_80", "fp16", 1, (("other", "tensor"),))


def test_a_cold_build_starts_its_slowest_variants_first(tmp_path):
    timings = stage._Timings(tmp_path / "timings.json")  # a cold cache: no timings
    assert timings.get(ATTENTION.id) > 5 > 1 >= timings.get(ADD.id)


def test_a_warm_build_goes_by_the_last_build(tmp_path):
    path = tmp_path / "timings.json"
    path.write_text(json.dumps({ATTENTION.id: 0.5, ADD.id: 40.0}))
    timings = stage._Timings(path)
    assert timings.get(ADD.id) == 40.0
    assert timings.get(ATTENTION.id) == 0.5


def test_the_seed_names_variants_that_exist(registry):
    """A renamed op or switch leaves the seed stale: refresh it from a cold build's
    timings (`python -m ntops_aot.aot.compile.stage CACHE_DIR/timings.json`)."""
    seed = json.loads(stage.SEED.read_text())
    known = {
        stage._unarched(variant.id)
        for name, op in registry.items()
        for variant in every_variant(name, op.space)
    }
    assert set(seed) <= known, sorted(set(seed) - known)
    assert all(seconds >= 1.0 for seconds in seed.values())
