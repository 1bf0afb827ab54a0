# Quickstart: `make demo` (venv + install + report on a bundled sample) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test bench samples clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tracelens report sample_traces/wfbp_100

test: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python bench/bench_parse.py
	$(BIN)/python bench/bench_nsys.py

samples: $(STAMP)
	for s in wfbp_100 one_bucket compute_bound_8 serialized legacy_wfbp straggler; do \
		$(BIN)/python -m tracelens.synth $$s sample_traces/$$s; done
	$(BIN)/python -c "from tracelens import synth; synth.write_nsys(synth.SCENARIOS['wfbp_100'], \
		'sample_traces/nsys_wfbp_100', per_rank=False)"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis
