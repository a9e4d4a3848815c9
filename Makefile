# locklab: `make run-scenario` and `make test` work on a fresh machine (they build .venv).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= checkout-deadlock
ARGS ?=
PROFILE ?= quick

.PHONY: help venv dev run-scenario compare verify test lint format bench servers-up servers-down soak docs clean

help:
	@echo "make run-scenario SCENARIO=<id> [ARGS='-n 40 --arrival stagger:5ms']"
	@echo "make compare SCENARIO=<id> | make verify [PROFILE=quick|published] | make test | make lint | make bench"
	@echo "make servers-up | make servers-down | make docs (the site from docs/, built --strict)"

$(BIN)/locklab: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

venv: $(BIN)/locklab

# test, lint and format need the dev tools: install them when one is missing (a venv made
# by a plain `pip install -e .` has locklab but no pytest), whatever the files' dates.
DEV_TOOLS := pytest ruff mypy
dev: venv
	@for t in $(DEV_TOOLS); do \
	  [ -x $(BIN)/$$t ] || { echo "$(BIN)/$$t missing: installing the dev extra"; \
	    $(BIN)/pip install --quiet -e '.[dev]' && break; }; \
	done

run-scenario: venv
	$(BIN)/locklab run $(SCENARIO) --variant all $(ARGS)

compare: venv
	$(BIN)/locklab compare $(SCENARIO) $(ARGS)

verify: venv
	$(BIN)/locklab verify --profile $(PROFILE) $(ARGS)

test: dev
	$(BIN)/pytest -q $(ARGS)

lint: dev
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

format: dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: venv
	@# `locklab bench redis` compares with redis-benchmark (Debian's redis-tools)
	@command -v redis-benchmark >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-tools >/dev/null; } || \
	  echo "WARNING: could not install redis-tools; locklab bench redis will say it is missing" >&2
	$(BIN)/locklab bench $(ARGS)

# Kill / Ctrl-C / server-death trials, counted (minutes; not part of `make test`).
soak: venv
	$(BIN)/python tests/soak.py $(ARGS)

# The docs site (mkdocs.yml) into site/: the docs extra when mkdocs or its theme is missing,
# then a strict build (a broken link or a page left out of the nav fails it).
docs: venv
	@[ -x $(BIN)/mkdocs ] && $(BIN)/python -c 'import material' 2>/dev/null || \
	  { echo "mkdocs or mkdocs-material missing in $(VENV): installing the docs extra"; \
	    $(BIN)/pip install --quiet -e '.[docs]'; }
	$(BIN)/mkdocs build --strict

servers-up: venv
	$(BIN)/locklab servers up

servers-down: venv
	$(BIN)/locklab servers down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
