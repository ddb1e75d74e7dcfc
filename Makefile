# The entry points: `make up` starts the whole Host, `make test` runs every test, `make lint`
# checks style and types.
# Each sets up what it needs: a virtual environment with sumi installed, and the
# Kafka broker's jars (fetched once through Maven into ~/.cache/sumi).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: up test lint bench walls browser
up: $(VENV)/.ready walls
	$(BIN)/sumi up

test: $(VENV)/.ready walls browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The OS walls of the worker runtimes (docs/security.md): bubblewrap, installed when it is
# missing and we are root on a Debian-like system; otherwise say what that costs.
walls:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && { apt-get install -y -q bubblewrap || { apt-get update -q && apt-get install -y -q bubblewrap; }; } >/dev/null; } \
	  || echo "bubblewrap is missing: python workers are refused, javascript runs behind weaker walls (docs/security.md)"

# The dashboard's browser tests drive Debian's chromium through Playwright (never a browser
# download): installed when it is missing and we are root on a Debian-like system.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && { apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } >/dev/null; } \
	  || echo "chromium is missing: the dashboard's browser tests fail"

# ruff and mypy come with the `test` extra; mypy is strict (pyproject.toml) on sumi and sumi_projections.
lint: $(VENV)/.ready
	$(BIN)/ruff check services projections tests
	$(BIN)/ruff format --check services projections tests
	$(BIN)/mypy

bench: $(VENV)/.ready
	$(BIN)/python tests/bench/bench_runtime.py

$(VENV)/.ready: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	$(BIN)/python -m sumi.infra >/dev/null
	touch $@
