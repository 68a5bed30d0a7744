# The two set-up commands are `make cluster` and `make test`; both create the venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test test-unit test-integration cluster bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-unit: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit tests/property

test-integration: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/integration

bench: venv
	$(BIN)/python bench/state_bench.py

clean:
	rm -rf $(VENV) build *.egg-info
