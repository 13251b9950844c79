# Two commands set everything up: `make run` and `make test`.
# Each bootstraps .venv (python3 -m venv + editable install with dev extras) once;
# the stamp file makes later invocations skip the install unless pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/agentload run --tasks airline/000-019,retail/000-019 --num-episodes 40 --concurrency 8 --sim-speedup 2 --out results/demo --overwrite

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache build dist
