# The two set-up commands: `make run` (service on the embedded SQLite default)
# and `make test` (the whole suite, on SQLite and PostgreSQL). Both create the
# virtual environment first: `make run` installs what serving needs, `make test`
# the dev extras too (matplotlib for `fairmatch simulate`'s plots among them).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test docs bench clean

# serving needs only the runtime dependencies; the tests add the dev extras
RUNTIME_STAMP := $(VENV)/.runtime-stamp

$(RUNTIME_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# `make run PORT=8080 HOST=0.0.0.0`: where to listen, else the settings server.host and server.port
# (127.0.0.1:8000). Read from make's command line only: a HOST or PORT in the environment is
# often another program's (FAIRMATCH_SERVER__PORT is this one's).
SERVE_ARGS := $(if $(filter command line,$(origin HOST)),--host '$(HOST)') \
              $(if $(filter command line,$(origin PORT)),--port '$(PORT)')

run: $(RUNTIME_STAMP)
	@echo "the fairmatch command, in another terminal: . $(BIN)/activate, then fairmatch --help"
	$(BIN)/fairmatch serve $(strip $(SERVE_ARGS))

# The checks first (lint, format, types, the docs site), then the suite: two workers (one per
# core); a module's tests of one backend stay together with their servers. Last, the DIRAC
# extension (integrations/dirac): DIRAC 9.1.22 in a venv of its own, its classes and unit
# tests against a real fairmatch, DIRAC's databases on MariaDB.
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site
	$(BIN)/python -m pytest -n 2 --dist loadgroup
	FAIRMATCH_BIN=$(abspath $(BIN)) integrations/dirac/ci/run-tests.sh

# The documentation site (docs/, mkdocs.yml) served at http://127.0.0.1:8001 and rebuilt on
# every change; the reference pages are rendered from the code. DOCS_ARGS=build: build it into site/.
DOCS_ARGS ?= serve --dev-addr 127.0.0.1:8001
docs: install
	$(BIN)/mkdocs $(DOCS_ARGS) --strict

# The benchmark (docs/explanation/performance.md) on the PostgreSQL at 127.0.0.1:5432, e.g.
# make bench BENCH_ARGS=--quick   or   BENCH_ARGS="--only lhcb,soak --seconds 30"
bench: install
	$(BIN)/python -m pip install --quiet -e ".[dev,bench]"
	$(BIN)/python -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) integrations/dirac/.venv .pytest_cache fairmatch.db fairmatch.db-shm fairmatch.db-wal
