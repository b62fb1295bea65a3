# The two commands of the README: `make bench` (main job, needs a CUDA GPU) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: venv test bench lint offline-bundle
venv:
	SSDBENCH_VENV=$(VENV) scripts/setup_venv.sh

test: venv
	$(PY) -m pytest -q $(ARGS)

bench: venv
	$(PY) run_bench.py $(ARGS)

lint: venv
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# Offline GPU nodes: build once (cached per machine), copy .offline/ to the node, then there:
#   .offline/install.sh .offline /path/to/prefix && source /path/to/prefix/env.sh
offline-bundle: venv
	PATH=$(abspath $(VENV))/bin:$$PATH scripts/offline/build_bundle.sh .offline
