# spark-streams-eos: `make demo` runs the main example end to end, `make test` runs lint and
# the test suite. Both create .venv and install the project first when needed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo cluster-demo test lint unit slow bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is needed")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/demo.sh

# the word count on a standalone master and two workers started from pyspark's installation
cluster-demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/cluster_demo.sh

test: lint unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

slow: $(STAMP)
	$(BIN)/pytest -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/produce_consume.py

clean:
	rm -rf $(VENV) .demo .cluster-demo .pytest_cache .mypy_cache .ruff_cache *.egg-info
