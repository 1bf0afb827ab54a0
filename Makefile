# Quickstart: `make demo` (venv + install + report on a bundled sample) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-deps goldens bench bench-scale fuzz samples record-gloo record-cuda clean

# The end-to-end collector tests run real jobs under torchrun; they need this CPU build of torch.
TORCH_PIN ?= torch==2.13.0

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dashboard]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tracelens report sample_traces/wfbp_100
	@echo "In a browser: $(BIN)/tracelens dashboard sample_traces/wfbp_100"
	@echo "As one HTML file: add --format html -o report.html to the report command"

test: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider

# Rewrite tests/golden/ from the current code; review the diff before committing.
goldens: $(STAMP)
	$(BIN)/python tests/golden/regen.py

test-deps: $(STAMP)
	$(BIN)/python -m pip install --quiet $(TORCH_PIN)

bench: $(STAMP)
	$(BIN)/python bench/bench_floor.py
	$(BIN)/python bench/bench_parse.py
	$(BIN)/python bench/bench_nsys.py
	$(BIN)/python bench/bench_figures.py

# Rank scaling (bench/RESULTS.md, "Rank scaling"): copies of a corpus rank under /tmp/tl-bench, wall and
# peak memory of every process; the local executor at every size, Dask at the small sizes (~7 min on 2
# cores). QUICK=1 for fewer sizes; SCALE_FLAGS for more (--hta, --before DIR).
bench-scale: $(STAMP)
	$(BIN)/python bench/bench_scale.py --executors local,warm $(if $(QUICK),--quick) $(SCALE_FLAGS)
	$(BIN)/python bench/bench_scale.py --executors dask --quick

# The hostile-input fuzzer: N mutated cases of each kind (traces, exports, run folders, history databases,
# config files; tests/fuzz/README.md); SEED to repeat a
# run, JOBS driver processes (default: one per core). Failing cases land in tests/fuzz/findings/.
N ?= 5000
SEED ?=
JOBS ?=
fuzz: $(STAMP)
	$(BIN)/python tests/fuzz/run.py $(N) $(if $(SEED),--seed $(SEED)) $(if $(JOBS),--jobs $(JOBS))

# Rewrite the generated samples (the test fixture tests/fixtures/synth); git shows no diff unless it changed.
samples: $(STAMP)
	$(BIN)/python scripts/make_samples.py

# Re-record the real CPU gloo samples with `tracelens collect` (needs `make test-deps`).
record-gloo: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python examples/record_samples.py gloo

# Re-record the single-GPU NCCL samples (needs a CUDA machine with torch in the venv).
record-cuda: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python examples/record_samples.py cuda

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis
