# One entry point on a fresh machine with Python 3.11 and pip:
#   make demo   creates .venv, installs the project, runs the main job
#   make test   creates/uses the same .venv and runs the whole suite
#   make docs   builds the documentation site into docs/_build/html
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test docs bench fuzz lint format

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/mjxrunner run $(or $(MODEL),cartpole) --num-envs 1024 --steps 3000

# Two workers, whole files each so a module's compiled fixtures are built once: the
# suite is compile-bound, and one process left the second core idle once the
# background jobs were done (the last 15 of 37 minutes, cold, on 2 cores).
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The pages of docs/ and the API reference from the docstrings; any warning fails it
# (tests/test_docs.py builds it the same way).
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

# Regenerates benchmarks/results/ (JSON, PNG, README.md); run it on a quiet machine.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(if $(DEVICE),--device $(DEVICE))

# The hostile-input properties with ~25x the suite's examples (benchmarks/fuzz.py).
fuzz: $(STAMP)
	$(BIN)/python benchmarks/fuzz.py

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .
