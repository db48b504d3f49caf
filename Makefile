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

test: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -m "not slow" test/python

# everything, the slow tests too: the README/docs commands at their documented sizes
test-full: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q test/python

lit: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/lit -v test

lint: $(STAMP)
	$(BIN)/ruff check lancet_mlir test bench examples
	$(BIN)/pyright --pythonpath $(BIN)/python

bench: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/run_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
