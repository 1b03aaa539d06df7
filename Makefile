# Node Flow. `make run` starts the server on the embedded SQLite default;
# `make test` runs the suite (on PostgreSQL too when DATABASE_URL points at it).
VENV ?= .venv
PY := $(VENV)/bin/python
ADDR ?= 127.0.0.1:8000
# Two test processes (pytest-xdist), one per core of the machine CI runs on;
# PYTEST_ARGS="-n 0 -k semaphore" runs a narrowed set in this process.
PYTEST_ARGS ?= -n 2

.PHONY: run test test-sqlite test-postgres lint venv migrate bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	@test -x $(PY) || $$(scripts/find-python) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@touch $@

migrate: venv
	$(PY) manage.py migrate --noinput

run: migrate
	$(PY) manage.py nodeflow_bootstrap
	$(PY) manage.py nodeflow_run --addr $(ADDR)

# The whole suite on PostgreSQL (when DATABASE_URL is a postgres URL), then on SQLite.
test: venv
	@case "$${DATABASE_URL:-}" in postgres*) $(MAKE) --no-print-directory test-postgres ;; esac
	@$(MAKE) --no-print-directory test-sqlite

# The suite's own processes count metrics into a directory of their own,
# emptied first, not the one `make run` serves for the same database
# (docs/metrics.md); the stacks the tests start use their databases' own.
TEST_METRICS := $(CURDIR)/var/prometheus/test-run

test-postgres: venv
	@echo "== tests on PostgreSQL ($${DATABASE_URL})"
	rm -rf $(TEST_METRICS)-postgres
	PROMETHEUS_MULTIPROC_DIR=$(TEST_METRICS)-postgres $(PY) -m pytest $(PYTEST_ARGS)

test-sqlite: venv
	@echo "== tests on SQLite"
	rm -rf $(TEST_METRICS)-sqlite
	env -u DATABASE_URL PROMETHEUS_MULTIPROC_DIR=$(TEST_METRICS)-sqlite $(PY) -m pytest $(PYTEST_ARGS)

# Static checks (pyproject.toml): ruff's lint, import order and format check,
# mypy over the product packages, and every `# noqa` / `type: ignore` saying why.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	@! git grep -nE '# (noqa(: [A-Z0-9, ]+)?|type: ignore(\[[-a-z, ]+\])?) *$$' -- '*.py' \
		|| { echo "each noqa and type: ignore above must say why (' - reason' or '  # reason')"; exit 1; }

# The benchmark (tools/bench.py; PostgreSQL: DATABASE_URL=postgres://…). The
# soak and the stress run: README, "Tools".
bench: venv
	$(PY) manage.py nodeflow_bench

clean:
	rm -rf $(VENV) var/*.sqlite3*
