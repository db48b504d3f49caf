# lancet-mlir: `make demo` runs the main job on a bundled example, `make test` runs every test.
# Both create the virtual environment (.venv) and install the project into it when needed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-full pytest lit lint bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,torch]'
	touch $(STAMP)

demo: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python examples/demo.py

# two phases: the tests in parallel (one worker per core, at most 4), then the `serial` ones
# (they measure time or start MPI ranks) alone; both run, and either failing fails the target
PYTEST := PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q
test: $(STAMP)
	$(PYTEST) -n auto --maxprocesses 4 --dist worksteal -m "not slow and not serial" test/python; \
	parallel=$$?; \
	$(PYTEST) -m "serial and not slow" test/python; \
	serial=$$?; \
	test $$parallel -eq 0 && test $$serial -eq 0

# everything, the slow tests too: the README/docs commands at their documented sizes
test-full: $(STAMP)
	$(PYTEST) test/python

lit: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/lit -v test

lint: $(STAMP)
	$(BIN)/ruff check lancet_mlir test bench examples
	$(BIN)/pyright --pythonpath $(BIN)/python

bench: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/run_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
