# `make demo` and `make test` work on a fresh clone: both create .venv through `make setup`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup chromium demo test docs bench clean

setup: $(STAMP) chromium

# The HTML report tests render pages in headless Chromium (Debian's `chromium`). Installed only when
# missing, as root with apt; anything else leaves a note, never a failed setup: those tests then skip
# and say why.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1; } || \
	  echo "note: Chromium is not installed (as root: apt-get install chromium); the HTML report tests will skip"

$(STAMP): pyproject.toml requirements-dev.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
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
