# One command each: `make install`, `make test`; see README.md.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY ?= $(BIN)/python
# The newest torch pip can pair with the pinned Triton: a CUDA or a CPU build, as the
# index has them (README.md says which and why); the CPU suite passes with either.
TORCH ?= torch
# The oldest torch the wheels claim (aot/package/wheel.py's MIN_TORCH, newest patch release),
# in a venv of its own: tests/unit/test_oldest_torch.py registers the ops there.
OLDEST_TORCH ?= torch==2.4.1
OLDEST ?= .venv-oldest
ARCH ?= sm_90
OPS ?= all
OUT ?= dist
SEED ?= 0
CASES ?= 30000

.PHONY: install test lint build gpu-test fuzz bench bench-layer bench-products bench-serving bench-transformers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# --no-cache-dir: the two torch builds bring 6 GB of CUDA libraries; a cached copy of
# their downloads would double that on a CI machine's disk.
install: $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-cache-dir "$(TORCH)" -e '.[test]'
	test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --no-cache-dir "$(OLDEST_TORCH)" numpy pytest

test:
	$(PY) -m pytest tests -q

# The launcher's hand-written C as .clang-format says (clang-format -i to fix).
C_SOURCES := $(wildcard aot/csrc/*.c aot/csrc/*.h)

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/clang-format --dry-run -Werror $(C_SOURCES)

build:
	$(BIN)/ntops-aot build --arch $(ARCH) --ops $(OPS) --out $(OUT)

# On a CUDA machine with the wheel installed (or on PYTHONPATH).
gpu-test:
	$(PY) -m pytest -m gpu tests -q

# Differential fuzzing against torch (tests/gpu/fuzz.py); a short run is part of gpu-test.
fuzz:
	$(PY) tests/gpu/fuzz.py --seed $(SEED) --cases $(CASES) --json fuzz.json

bench:
	$(PY) tests/benchmarks/bench_add.py --json bench.json
	$(PY) tests/benchmarks/bench_launch.py --json bench_launch.json
	$(PY) tests/benchmarks/bench_ops.py --json bench_ops.json
	$(PY) tests/benchmarks/bench_layer.py --json bench_layer.json --png bench_layer.png
	$(PY) tests/benchmarks/bench_transformers.py --json bench_transformers.json --png bench_transformers.png

bench-layer:
	$(PY) tests/benchmarks/bench_layer.py --json bench_layer.json --png bench_layer.png

# A Llama-3-8B-shaped transformers model, stock and after ntops_prebuilt's apply(model),
# eager and compiled (issue 33); needs transformers (and matplotlib for the PNG).
bench-transformers:
	$(PY) tests/benchmarks/bench_transformers.py --json bench_transformers.json --png bench_transformers.png

bench-layer-fp8:
	$(PY) tests/benchmarks/bench_layer_fp8.py --json bench_layer_fp8.json

# The projections of three models at 1 to 2048 rows against cuBLAS (issue 29), the quick
# subset; the full grid: $(PY) tests/benchmarks/bench_products.py --json bench_products.json
bench-products:
	$(PY) tests/benchmarks/bench_products.py --quick --json bench_products.json

# Paged attention and serving steps of the layer against FlashInfer, which must be
# importable (pip install flashinfer-python; its kernels JIT-compile at first use).
bench-serving:
	$(PY) tests/benchmarks/bench_paged_attention.py --json bench_paged_attention.json
	$(PY) tests/benchmarks/bench_serving.py --json bench_serving.json

clean:
	rm -rf generated $(OUT) bench.json bench_launch.json bench_ops.json bench_layer.json bench_layer.png bench_products.json bench_paged_attention.json bench_serving.json bench_transformers.json bench_transformers.png fuzz.json
