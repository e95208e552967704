# goaai's two commands: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# The PostgreSQL pass of `make test` uses DATABASE_URL when it points at PostgreSQL,
# otherwise this local server (the one CI provides).
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: install run test lint typecheck pytest pytest-postgres clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py ensure_admin
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) goaai.asgi:application

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy

# The suite on SQLite (embedded default), then on PostgreSQL when DATABASE_URL points
# at it or in CI, where a missing server must fail the build rather than skip.
pytest: install
	env -u DATABASE_URL $(PY) manage.py makemigrations --check --dry-run
	env -u DATABASE_URL $(VENV)/bin/pytest

pytest-postgres: install
	@case "$${DATABASE_URL:-}" in \
	  postgres://*|postgresql://*) url="$$DATABASE_URL" ;; \
	  *) if [ "$${CI:-}" = "true" ]; then url="$(POSTGRES_URL)"; else url=""; fi ;; \
	esac; \
	if [ -z "$$url" ]; then \
	  echo "Skipping the PostgreSQL pass: set DATABASE_URL=postgres://... to run it."; \
	else \
	  echo "PostgreSQL pass on $$url"; \
	  DATABASE_URL="$$url" $(VENV)/bin/pytest; \
	fi

test: lint typecheck pytest pytest-postgres

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .mypy_cache .ruff_cache
