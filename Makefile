# locklab: `make run-scenario` and `make test` work on a fresh machine (they build .venv).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= checkout-deadlock
ARGS ?=
PROFILE ?= quick

.PHONY: help venv dev lock run-scenario compare verify test lint format bench servers-up servers-down soak docs clean

help:
	@echo "make run-scenario SCENARIO=<id> [ARGS='-n 40 --arrival stagger:5ms']"
	@echo "make compare SCENARIO=<id> | make verify [PROFILE=quick|published] | make test | make lint | make bench"
	@echo "make servers-up | make servers-down | make docs (the site from docs/, built --strict)"

# Every install comes from requirements/lock.txt: exact versions with their hashes, for the
# lab, its tests, lint and docs (Python 3.11 on Linux). pip and setuptools come from the lock
# too, and the lab itself is installed without build isolation, so that nothing is resolved
# anew on the day of the install. `make lock` refreshes the lock from pyproject.toml's ranges.
LOCK := requirements/lock.txt
PIP_TOOLS := pip-tools==7.6.2

$(BIN)/locklab: pyproject.toml $(LOCK)
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	@touch $@

venv: $(BIN)/locklab

# test, lint and format need the dev tools: a venv made by a plain `pip install -e .` has
# locklab but no pytest, so install the lock into it when one of them is missing.
DEV_TOOLS := pytest ruff mypy
dev: venv
	@for t in $(DEV_TOOLS); do \
	  [ -x $(BIN)/$$t ] || { echo "$(BIN)/$$t missing: installing $(LOCK)"; \
	    $(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK) && break; }; \
	done

# Resolve pyproject.toml's ranges again (today's releases) into the lock, with pip-tools in
# a venv of its own so that it never mixes into .venv. Run it on Python 3.11 (CI's).
lock:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet $(PIP_TOOLS)
	CUSTOM_COMPILE_COMMAND="make lock" .venv-lock/bin/pip-compile --quiet --upgrade --extra dev --extra versions --extra docs \
	  --generate-hashes --allow-unsafe --strip-extras \
	  --no-emit-find-links --no-emit-index-url --no-emit-trusted-host \
	  -o $(LOCK) pyproject.toml requirements/build.in
	rm -rf .venv-lock

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

# The docs site (mkdocs.yml) into site/: the lock when mkdocs or its theme is missing,
# then a strict build (a broken link or a page left out of the nav fails it).
docs: venv
	@[ -x $(BIN)/mkdocs ] && $(BIN)/python -c 'import material' 2>/dev/null || \
	  { echo "mkdocs or mkdocs-material missing in $(VENV): installing $(LOCK)"; \
	    $(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK); }
	$(BIN)/mkdocs build --strict

servers-up: venv
	$(BIN)/locklab servers up

servers-down: venv
	$(BIN)/locklab servers down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
