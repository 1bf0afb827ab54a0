# Quickstart: `make demo` (venv + install + report on a bundled sample) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Every dependency, direct and transitive, at the version and with the hashes CI tested (docs/ci.md, "The
# project's own dependencies"); `make lock` refreshes it from pyproject.toml and requirements/lock.in.
LOCK := requirements/lock.txt

.PHONY: demo test test-deps test-latest test-oldest lock goldens bench bench-nccl bench-scale bench-whatif bench-inspector-scale fuzz samples \
	record-gloo record-cuda clean

# The end-to-end collector tests run real jobs under torchrun; they need this CPU build of torch.
TORCH_PIN ?= torch==2.13.0
# The tool that writes the lock (and the oldest set, for test-oldest); installed beside, never in the venv.
UV_PIN ?= uv==0.13.9
TOOLS := .venv-tools
# The suite on every core (pytest-xdist); TEST_JOBS=0 runs it in this process.
TEST_JOBS ?= auto
PYTEST = -q -p no:cacheprovider $(if $(filter 0,$(TEST_JOBS)),-p no:xdist,-n $(TEST_JOBS))

# The venv holds the lock and nothing else (pip checks every hash), then tracelens itself, built without
# fetching anything (its build backend is in the lock). A changed lock makes a new venv.
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tracelens report sample_traces/wfbp_100
	@echo "Run it as $(BIN)/tracelens, or first: . $(BIN)/activate"
	@echo "In a browser: $(BIN)/tracelens dashboard sample_traces/wfbp_100"
	@echo "As one HTML file: add --format html -o report.html to the report command"

# Every test but those marked slow (pyproject.toml), on every core. ALL=1 (CI: .ci/run) then runs the slow
# ones in this one process: real jobs and a real browser, timed, with no other test competing for the cores.
test: $(STAMP)
	$(BIN)/pytest $(PYTEST) -m "not slow"
	$(if $(ALL),$(BIN)/pytest -q -p no:cacheprovider -p no:xdist -m slow)

# The newest release of every dependency, in a venv of its own (torch stays TORCH_PIN, the CPU build).
# A failure here is a bug to fix; docs/ci.md says what the last run found.
test-latest:
	$(PYTHON) -m venv --clear .venv-latest
	.venv-latest/bin/python -m pip install --quiet --upgrade pip
	.venv-latest/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[test,dashboard]' \
		$(TORCH_PIN)
	.venv-latest/bin/python -m pip freeze --exclude-editable > .venv-latest/versions.txt
	.venv-latest/bin/pytest $(PYTEST) -m "not slow"
	.venv-latest/bin/pytest -q -p no:cacheprovider -p no:xdist -m slow

# pyproject.toml's lower bounds: the oldest release each direct dependency allows (what it needs resolved as
# usual), in a venv of its own. Not in CI (docs/ci.md).
# (requirements/lock.in is left out: its names have no lower bounds of ours; torch brings its own.)
test-oldest: $(TOOLS)/bin/uv
	$(TOOLS)/bin/uv pip compile pyproject.toml --extra test --extra dashboard \
		--resolution lowest-direct --python-version 3.11 --index-url https://pypi.org/simple --quiet \
		-o .venv-oldest.txt
	$(PYTHON) -m venv --clear .venv-oldest
	.venv-oldest/bin/python -m pip install --quiet -r .venv-oldest.txt 'setuptools>=77' $(TORCH_PIN)
	.venv-oldest/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	.venv-oldest/bin/pytest $(PYTEST) -m "not slow"
	.venv-oldest/bin/pytest -q -p no:cacheprovider -p no:xdist -m slow

# Rewrite the lock with the newest releases pyproject.toml and requirements/lock.in allow, for Python 3.11 on
# Linux (x86-64 and aarch64 alike: one file with markers). Review its diff like any other change.
lock: $(TOOLS)/bin/uv
	$(TOOLS)/bin/uv pip compile pyproject.toml requirements/lock.in --extra test --extra dashboard \
		--universal --python-version 3.11 --generate-hashes --upgrade --index-url https://pypi.org/simple \
		--custom-compile-command "make lock" --quiet -o $(LOCK)

$(TOOLS)/bin/uv:
	$(PYTHON) -m venv --clear $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet $(UV_PIN)

# Rewrite tests/golden/ from the current code; review the diff before committing.
goldens: $(STAMP)
	$(BIN)/python tests/golden/regen.py

# torch without its dependencies: they are in the lock.
test-deps: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps $(TORCH_PIN)

bench: $(STAMP)
	$(BIN)/python bench/bench_floor.py
	$(BIN)/python bench/bench_parse.py
	$(BIN)/python bench/bench_nsys.py
	$(BIN)/python bench/bench_figures.py

# A big NCCL log (bench/RESULTS.md, "A big NCCL log"): one healthy corpus log repeated to 59 and 200 MB in a
# temporary folder, parse and verdict seconds and peak RSS; BEFORE=DIR also times the package under DIR.
bench-nccl: $(STAMP)
	$(BIN)/python bench/bench_nccl_log.py $(if $(BEFORE),--before $(BEFORE))

# NCCL Inspector logs of thousands of ranks (bench/RESULTS.md, "NCCL Inspector logs of thousands of ranks"):
# generated logs of 256, 1,024 and 4,096 ranks x 2,000 collectives under /tmp/tl-inspector-scale (6.7 GB at
# the largest, deleted after each size), a report's seconds and peak RSS in a new process, the late rank and the
# slow link checked. SIZES=RANKSxCOLLECTIVES,... for others.
SIZES ?=
bench-inspector-scale: $(STAMP)
	$(BIN)/python bench/bench_inspector_scale.py $(if $(SIZES),--sizes $(SIZES))

# Predictions against re-runs (bench/RESULTS.md): records examples/ddp_train.py with `tracelens collect` at each
# knob, interleaved (REPEATS rounds, ~13 s a recording on 2 cores; ONLY=straggler|buckets|item for one group),
# and prints the verdict's predicted saving beside the step time the change gave. Needs `make test-deps`.
REPEATS ?= 5
ONLY ?=
bench-whatif: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/bench_whatif.py --repeats $(REPEATS) $(if $(ONLY),--only $(ONLY))

# Rank scaling (bench/RESULTS.md, "Rank scaling"): copies of a corpus rank under /tmp/tl-bench, wall and
# peak memory of every process; the local executor at every size, Dask at the small sizes (~7 min on 2
# cores). QUICK=1 for fewer sizes; SCALE_FLAGS for more (--hta, --before DIR).
bench-scale: $(STAMP)
	$(BIN)/python bench/bench_scale.py --executors local,warm $(if $(QUICK),--quick) $(SCALE_FLAGS)
	$(BIN)/python bench/bench_scale.py --executors dask --quick

# The hostile-input fuzzer: N mutated cases of each kind (traces, exports, run folders, history databases,
# config files, saved reports, output paths, NCCL Inspector logs; tests/fuzz/README.md); SEED to repeat a
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
	rm -rf $(VENV) .venv-latest .venv-oldest .venv-oldest.txt $(TOOLS) build dist *.egg-info .pytest_cache .hypothesis
