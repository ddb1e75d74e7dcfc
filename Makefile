# The two entry points: `make up` starts the whole Host, `make test` runs every test.
# Each sets up what it needs: a virtual environment with sumi installed, and the
# Kafka broker's jars (fetched once through Maven into ~/.cache/sumi).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: up test lint bench
up: $(VENV)/.ready
	$(BIN)/sumi up

test: $(VENV)/.ready
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.ready
	$(BIN)/ruff check services projections tests
	$(BIN)/mypy

bench: $(VENV)/.ready
	$(BIN)/python tests/bench/bench_runtime.py

$(VENV)/.ready: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	$(BIN)/python -m sumi.infra._kafka >/dev/null
	touch $@
