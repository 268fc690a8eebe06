# Two commands do all set-up on a fresh machine: `make quickstart` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch; any other torch spec pulls a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0

.PHONY: quickstart test lint ui install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet $(TORCH_CPU)
	$(BIN)/pip install --quiet -e . $(TORCH_CPU)
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[dev]' $(TORCH_CPU)
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

quickstart: install
	$(BIN)/seedwheel run --profile quickstart

test: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest

lint: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

ui: install
	$(BIN)/seedwheel ui

clean:
	rm -rf $(VENV) .seedwheel .seedwheel-dagster
