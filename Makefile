# locklab: `make run-scenario` and `make test` work on a fresh machine (they build .venv).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= checkout-deadlock
ARGS ?=
PROFILE ?= quick

.PHONY: help venv run-scenario compare verify test lint format bench servers-up servers-down soak clean

help:
	@echo "make run-scenario SCENARIO=<id> [ARGS='-n 40 --arrival stagger:5ms']"
	@echo "make compare SCENARIO=<id> | make verify [PROFILE=quick|published] | make test | make lint | make bench"
	@echo "make servers-up | make servers-down"

$(BIN)/locklab: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

venv: $(BIN)/locklab

run-scenario: venv
	$(BIN)/locklab run $(SCENARIO) --variant all $(ARGS)

compare: venv
	$(BIN)/locklab compare $(SCENARIO) $(ARGS)

verify: venv
	$(BIN)/locklab verify --profile $(PROFILE) $(ARGS)

test: venv
	$(BIN)/pytest -q $(ARGS)

lint: venv
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: venv
	$(BIN)/locklab bench $(ARGS)

# Kill / Ctrl-C / server-death trials, counted (minutes; not part of `make test`).
soak: venv
	$(BIN)/python tests/soak.py $(ARGS)

servers-up: venv
	$(BIN)/locklab servers up

servers-down: venv
	$(BIN)/locklab servers down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
