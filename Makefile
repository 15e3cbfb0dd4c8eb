# Two commands do all set-up on a fresh machine:
#   make serve   create .venv, install (llama-cpp-python compiles), pull the default model, serve it on :8080
#   make test    the same set-up, then the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MODEL ?= smollm2-135m-instruct
ARGS ?=

.PHONY: setup serve test unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

serve: setup
	$(BIN)/mlxcel pull $(MODEL)
	$(BIN)/mlxcel serve -m $(MODEL) $(ARGS)

test: setup
	$(BIN)/mlxcel pull $(MODEL)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

unit: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

bench: setup
	$(BIN)/mlxcel pull $(MODEL)
	$(BIN)/python bench/run.py $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info
