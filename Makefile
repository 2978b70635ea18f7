# Two commands a new user needs: `make quickstart` and `make test`. Both install first.
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.serl-installed

.PHONY: install quickstart test test-fast bench clean

$(STAMP): pyproject.toml requirements.txt scripts/install.sh
	PYTHON=$(PYTHON) bash scripts/install.sh $(VENV)
	touch $(STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/serl train --config configs/quickstart.yaml

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -rs --durations=15 tests

test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -q -rs -m "not slow" tests

clean:
	rm -rf $(VENV) runs .pytest_cache
