# Two commands do all set-up on a fresh machine:
#   make serve   create .venv, install (llama-cpp-python compiles; the audio extra too), pull the default model,
#                serve it on :8080
#   make test    the same set-up, then the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MODEL ?= smollm2-135m-instruct
ARGS ?=

.PHONY: setup serve test unit bench reference parity clean redis-server chromium

$(STAMP): pyproject.toml setup.py mlxcel/engine/_topset.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e '.[test,audio,cluster]'
	touch $(STAMP)

setup: $(STAMP)

serve: setup
	$(BIN)/mlxcel pull $(MODEL)
	$(BIN)/mlxcel serve -m $(MODEL) $(ARGS)

# The reference llama-server (same llama.cpp, built once into ~/.cache/mlxcel/reference)
# lets the parity tests compare both servers request by request.
reference: setup
	$(BIN)/python bench/reference.py

# The state-store tests start a real redis-server of their own (Debian's package).
redis-server:
	command -v redis-server >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server)

# The web UI tests drive Debian's Chromium (through Playwright, which downloads no browser).
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

test: setup reference redis-server chromium
	$(BIN)/mlxcel pull $(MODEL)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

unit: setup redis-server
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

parity: setup reference
	$(BIN)/mlxcel pull $(MODEL)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/e2e/test_reference_parity.py

bench: setup
	$(BIN)/mlxcel pull $(MODEL)
	$(BIN)/python bench/run.py $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info
