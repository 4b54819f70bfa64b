# `make demo` and `make test` work on a fresh clone: both create .venv through `make setup`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup chromium demo test check-style docs bench bench-quick clean

setup: $(STAMP)

# Optional, never part of setup: the HTML report tests render pages in headless Chromium and skip
# without it. This target says what it installs before installing it, and installs nothing unless
# run as root with apt-get.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
	  echo "Chromium is already installed ($$(command -v chromium || command -v chromium-browser))."; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing Debian's 'chromium' package and its dependencies (apt-get update; apt-get install -y chromium),"; \
	  echo "used only by the HTML report tests to render pages headless."; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else \
	  echo "make chromium installs Debian's 'chromium' package as root with apt-get; install Chromium yourself"; \
	  echo "(for example: sudo apt-get install chromium). Without it the HTML report tests skip and say why."; \
	  exit 1; \
	fi

$(STAMP): pyproject.toml requirements-dev.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: setup
	$(VENV)/bin/torchpact demo

# Our own bytecode is dropped first: Python reuses a .pyc while its source has the same size and mtime
# second, so a file rewritten within a second (a merge, a checkout) can go on running its old code; one such
# file once made a cross-rank test fail on every run, here and in CI.
# The style check runs first: a finding stops the suite before it starts.
test: check-style
	find src tests bench -name __pycache__ -type d -prune -exec rm -rf {} +
	$(PY) -m pytest -q -n 2

# ruff and mypy as pyproject.toml configures them (also run by `make test`).
check-style: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

docs: setup
	$(PY) -m torchpact.docs docs/rules
	$(PY) -m torchpact.lint.write_manifest

# Every benchmark to its end (corpora are fetched on first use, or the bench says why it skipped);
# `bench-quick` runs a small part of each, as a smoke test of a fresh clone.
bench: setup
	$(PY) bench/all.py

bench-quick: setup
	$(PY) bench/all.py --quick

clean:
	rm -rf $(VENV) build src/*.egg-info
