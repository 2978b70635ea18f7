# Two commands a new user needs: `make quickstart` and `make test`. Both install first.
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.serl-installed
BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.serl-bench-installed
# The tests run on TEST_WORKERS pytest-xdist workers, one intra-op thread each (tests/conftest.py);
# TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

.PHONY: install quickstart lint test test-fast bench clean

$(STAMP): pyproject.toml setup.py requirements.txt scripts/install.sh $(wildcard requirements/*.txt)
	PYTHON=$(PYTHON) bash scripts/install.sh $(VENV)
	touch $(STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/serl train --config configs/quickstart.yaml

# The habits (issue 60): lint, format and types, ahead of the tests (about 20 s on a cold cache);
# configured in pyproject.toml, and run on each commit by .pre-commit-config.yaml.
lint: $(STAMP)
	$(VENV)/bin/ruff check serl tests
	$(VENV)/bin/ruff format --check serl tests
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/python -m pytest -q -rs --durations=15 $(XDIST) tests

test-fast: lint
	$(VENV)/bin/python -m pytest -q -rs $(XDIST) -m "not slow" tests

# The six benchmarks of bench/README.md (about 45 min on a quiet 2-core machine); TRL goes
# into a separate .venv-bench that sees serl's venv, never into serl's own.
$(BENCH_STAMP): $(STAMP) bench/requirements.txt bench/install.sh
	bash bench/install.sh $(VENV) $(BENCH_VENV)
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(VENV)/bin/python bench/run_all.py --trl-python $(BENCH_VENV)/bin/python

clean:
	rm -rf $(VENV) $(BENCH_VENV) runs .pytest_cache .mypy_cache .ruff_cache
