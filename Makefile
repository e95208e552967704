# goaai's two commands: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# The PostgreSQL pass of `make test` uses DATABASE_URL when it points at PostgreSQL,
# otherwise this local server (the one CI provides).
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: install browser nginx pgvector run cluster test vendor lint typecheck pytest pytest-postgres clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# The browser tests drive Debian's Chromium; install it when it is missing and this
# machine can (root with apt-get). Otherwise those tests say why they are skipped.
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing Chromium for the browser tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; }; \
	  else \
	    echo "Chromium is missing (apt-get install chromium chromium-driver): browser tests will be skipped."; \
	  fi; \
	fi

# The deployment tests (tests/deploy) and `make cluster` run Debian's nginx; install
# it when it is missing and this machine can. Its service is never started.
nginx:
	@if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing nginx for the deployment tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q nginx >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q nginx >/dev/null; }; \
	  else \
	    echo "nginx is missing (apt-get install nginx): deployment tests will be skipped."; \
	  fi; \
	fi

# Memory ranked by meaning compares vectors with pgvector on PostgreSQL: install
# Debian's package for the local server when it is missing and this machine can.
# Where Debian has none (bookworm), goaai computes the similarity in plain SQL.
pgvector:
	@v=$$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1); \
	if [ -n "$$v" ] && [ ! -f /usr/share/postgresql/$$v/extension/vector.control ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q postgresql-$$v-pgvector >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q postgresql-$$v-pgvector >/dev/null 2>&1; } || \
	      echo "postgresql-$$v-pgvector is not in this machine's Debian: vectors are compared in plain SQL."; \
	  else \
	    echo "pgvector is missing (apt-get install postgresql-$$v-pgvector): vectors are compared in plain SQL."; \
	  fi; \
	fi

# `make run HOST=0.0.0.0 PORT=8080` serves on another address (printed before the
# server starts; a host other than this machine's loopback needs ALLOWED_HOSTS).
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py ensure_admin --host '$(HOST)' --port '$(PORT)'
	$(VENV)/bin/daphne -b '$(HOST)' -p '$(PORT)' goaai.asgi:application

# ESLint for the web UI's JavaScript, installed as package-lock.json pins it.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# The browser libraries the chat and the timeline load (markdown, sanitizing, code
# highlighting), copied from node_modules at the versions package-lock.json pins,
# with their licences; the copies are committed, as Django commits its admin's
# jQuery. Source-map comments are dropped (the maps are not copied).
VENDOR := sessions_app/static/sessions_app/vendor
HLJS := node_modules/@highlightjs/cdn-assets
vendor: node_modules/.installed
	rm -rf $(VENDOR)/marked $(VENDOR)/dompurify $(VENDOR)/highlight.js
	mkdir -p $(VENDOR)/marked $(VENDOR)/dompurify $(VENDOR)/highlight.js
	sed '/^\/\/# sourceMappingURL=/d' node_modules/marked/lib/marked.esm.js > $(VENDOR)/marked/marked.esm.js
	cp node_modules/marked/LICENSE $(VENDOR)/marked/LICENSE
	sed '/^\/\/# sourceMappingURL=/d' node_modules/dompurify/dist/purify.es.mjs > $(VENDOR)/dompurify/purify.es.js
	cp node_modules/dompurify/LICENSE node_modules/dompurify/LICENSE-MPL $(VENDOR)/dompurify/
	sed '/^\/\/# sourceMappingURL=/d' $(HLJS)/es/highlight.min.js > $(VENDOR)/highlight.js/highlight.min.js
	cp $(HLJS)/styles/github.min.css $(HLJS)/styles/github-dark.min.css $(HLJS)/LICENSE $(VENDOR)/highlight.js/
	node -e 'for (const p of ["marked", "dompurify", "@highlightjs/cdn-assets"]) console.log(p, require("./node_modules/" + p + "/package.json").version)' > $(VENDOR)/VERSIONS

lint: install node_modules/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	node_modules/.bin/eslint --max-warnings=0 sessions_app/static runs_app/static

typecheck: install
	$(VENV)/bin/mypy

# The suite on SQLite (embedded default), then on PostgreSQL when DATABASE_URL points
# at it or in CI, where a missing server must fail the build rather than skip.
pytest: install browser nginx
	env -u DATABASE_URL $(PY) manage.py makemigrations --check --dry-run
	env -u DJANGO_SETTINGS_MODULE $(VENV)/bin/pytest -p no:django -W ignore::pytest.PytestConfigWarning --confcutdir=tests/runtime_core tests/runtime_core
	env -u DATABASE_URL $(VENV)/bin/pytest

pytest-postgres: install pgvector
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

# goaai scaled out on this machine: nginx on 127.0.0.1:8080 in front of
# CLUSTER_SERVERS daphne servers, CLUSTER_WORKERS Celery workers, the local
# PostgreSQL (database goaai_cluster) and Redis (database 12). Ctrl-C stops it all.
CLUSTER_SERVERS ?= 2
CLUSTER_WORKERS ?= 2
$(VENV)/bin/honcho: | $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev,deploy]'

cluster: install nginx $(VENV)/bin/honcho
	CLUSTER_SERVERS=$(CLUSTER_SERVERS) CLUSTER_WORKERS=$(CLUSTER_WORKERS) $(PY) deploy/cluster.py

test: lint typecheck pytest pytest-postgres

clean:
	rm -rf $(VENV) node_modules staticfiles .pytest_cache .mypy_cache .ruff_cache
