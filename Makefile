# spark-streams-eos: `make demo` runs the main example end to end, `make test` runs lint and
# the test suite. Both create .venv and install the project first when needed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo cluster-demo test lint unit slow bench chaos docs clean

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

# the suite on every core (at most 4 workers, each with its own Spark; a test file stays on
# one worker, so a module's fixtures are made once)
unit: $(STAMP)
	$(BIN)/pytest -n auto --maxprocesses 4 --dist loadfile

slow: $(STAMP)
	$(BIN)/pytest -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/produce_consume.py

# the fault campaign: an hour of mixed faults (kills, fault points, pauses, executor and
# worker losses, full disks, storage errors, resets, lost answers, latency) on two instances
# on local-cluster, the root on an S3-compatible server behind the fault proxy
CHAOS_SECONDS ?= 3600
# every kind: those that take an instance out one at a time, the storage and worker faults
# every 3 s or so after the last one healed (two lanes), so that an hour holds 300 faults
CHAOS_FAULTS ?= all
chaos: $(STAMP)
	mkdir -p .chaos
	PATH="$(CURDIR)/$(BIN):$$PATH" JDK_JAVA_OPTIONS=-XX:TieredStopAtLevel=1 \
		$(BIN)/streams-eos crashtest examples/wordcount.py \
		--generate 20000 --faults $(CHAOS_FAULTS) --instances 2 --master 'local-cluster[1,1,1024]' \
		--object-store --duration $(CHAOS_SECONDS) --interval 3 \
		--workdir .chaos/run-$$(date +%Y%m%d-%H%M%S) --report .chaos/report.json

# the documentation site (docs/, mkdocs.yml) into site/, with MkDocs' strict checks
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .demo .cluster-demo .chaos site .pytest_cache .mypy_cache .ruff_cache *.egg-info
