# gpufleet — every target installs what it needs first (see scripts/bootstrap.sh).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Big downloads are cached outside the repository.
export PIP_CACHE_DIR ?= $(HOME)/.cache/gpufleet/pip
STAMP := $(VENV)/.gpufleet-installed
# Tools run from the project's virtualenv (ansible-lint also looks for ansible there).
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help setup test test-slow lint bench lab lab-down clean

help:
	@echo "make setup      create .venv and install gpufleet with its dev tools (idempotent)"
	@echo "make test       lint + every test (installs what it needs first)"
	@echo "make test-slow  the long scenarios kept out of 'make test'"
	@echo "make lint       ruff, yamllint, ansible-lint (production profile)"
	@echo "make bench      performance figures"
	@echo "make lab        bring up the local bare-metal lab and converge it"

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap.sh
	@scripts/bootstrap.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "==> installing gpufleet and its tools into $(VENV) (first run downloads ~300 MB, cached in $(PIP_CACHE_DIR))"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint -q

test: setup lint
	$(BIN)/python -m pytest -m "not slow"

# pytest exits 5 when no test is selected; say so rather than fail.
test-slow: setup
	@$(BIN)/python -m pytest -m slow; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test-slow: no slow scenarios exist yet"; exit 0; fi; exit $$rc

bench: setup
	$(BIN)/python benchmarks/run.py

# Until the lab exists, say so in one line and fail; nothing is started.
lab lab-down:
	$(error gpufleet: the local lab is not built yet (it arrives with the lab issue); nothing was started)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build *.egg-info
