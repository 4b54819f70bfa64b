# `make demo` and `make test` work on a fresh clone: both create .venv through `make setup`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test docs bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: setup
	$(VENV)/bin/torchpact demo

test: setup
	$(PY) -m pytest -q -n 2

docs: setup
	$(PY) -m torchpact.docs docs/rules

bench: setup
	$(PY) bench/lint_speed.py
	$(PY) bench/lint_corpus.py
	$(PY) bench/run_overhead.py
	$(PY) bench/export_check.py

clean:
	rm -rf $(VENV) build src/*.egg-info
