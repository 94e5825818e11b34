# EGG developer entry points. CI runs `make test` (through .ci/run) on a CPU-only machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of torch; on a GPU machine install your CUDA build of torch first (the stamp below
# only installs it when no torch is present).
TORCH_SPEC ?= torch==2.13.0
DEMO_TASK ?= examples/softmax.py
# Runs the LangGraph dev server executes at once (each on its own thread).
STUDIO_JOBS ?= 4
export LANGGRAPH_CLI_NO_ANALYTICS := 1

.PHONY: install demo studio test test-fast lint gpu-test clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev,ray]"
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/egg optimize $(DEMO_TASK) --device auto --seeds 2 --out out/demo

studio: install
	$(BIN)/langgraph dev --no-browser --n-jobs-per-worker $(STUDIO_JOBS)

test: install
	$(BIN)/python -m pytest -m "not gpu" -q --durations=25

test-fast: install
	$(BIN)/python -m pytest -m "not gpu and not slow" -q

gpu-test: install
	$(BIN)/python -m pytest -m gpu -q

lint: install
	$(BIN)/ruff check graph nodes tools evals tests
	$(BIN)/ruff format --check graph nodes tools evals tests

clean:
	rm -rf out .egg .pytest_cache .ruff_cache
