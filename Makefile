# gpufleet — every target installs what it needs first (see scripts/bootstrap.sh).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Big downloads are cached outside the repository: uv's (the Python packages) and pip's (helm's wheel).
export PIP_CACHE_DIR ?= $(HOME)/.cache/gpufleet/pip
export UV_CACHE_DIR ?= $(HOME)/.cache/gpufleet/uv
# uv installs the ~1.2 GB of packages into a new venv in about 15 s with its cache full (pip took 93 s with its
# own, 2026-11-28, the same resolution); pinned, installed into the venv by the venv's own pip.
UV_VERSION := 0.13.9
STAMP := $(VENV)/.gpufleet-installed
# Tools run from the project's virtualenv (ansible-lint also looks for ansible there).
export PATH := $(abspath $(BIN)):$(PATH)

# When this make started (before any prerequisite): `make test` and `make lab` report their whole time from it.
STARTED := $(shell date +%s)

.PHONY: help setup test test-fast test-slow fuzz lint bench lab lab-down clean

help:
	@echo "make setup      create .venv and install gpufleet with its dev tools, a pinned helm and its charts, promtool and prometheus, fence_redfish (idempotent)"
	@echo "make test       lint + every test (installs what it needs first)"
	@echo "make test-fast  every test but the lab's (no VMs, no containers; a few minutes)"
	@echo "make test-slow  the long scenarios kept out of 'make test'"
	@echo "make fuzz       the fuzz test with FUZZ_SEEDS fresh random seeds (default 10), each printed"
	@echo "make lint       ruff, pylint's duplicate-code check, yamllint, ansible-lint (production profile)"
	@echo "make bench      performance figures"
	@echo "make lab        bring up the local bare-metal lab, converge it, report its state (stays running)"
	@echo "make lab-down   stop the lab"

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap.sh scripts/install_helm.py scripts/fetch_charts.py gpufleet/catalog/charts.yaml \
  scripts/install_promtool.sh scripts/install_fence_agents.sh scripts/debian_package.sh
	@scripts/bootstrap.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "==> installing gpufleet and its tools into $(VENV) with uv $(UV_VERSION) (first run downloads ~300 MB, cached in $(UV_CACHE_DIR))"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	@$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev,lab]'
	@$(BIN)/python scripts/install_helm.py
	@$(BIN)/python scripts/fetch_charts.py
	@scripts/install_promtool.sh $(BIN)
	@scripts/install_fence_agents.sh $(BIN)
	@touch $@

# The linters run side by side (each on one core; make -O prints each one's output whole) and lint fails when any
# of them does. pylint only for copied logic: 6+ similar lines anywhere in the code (the hostfacts, driverstate and
# vfio module_utils are symlinks to gpufleet/host/hostfacts.py, gpufleet/host/driverstate.py and gpufleet/host/vfio.py, the same
# files).
LINTERS := lint-ruff lint-duplicates lint-yaml lint-ansible
.PHONY: $(LINTERS)
lint: setup
	@$(MAKE) --no-print-directory -j$(words $(LINTERS)) -O $(LINTERS)

lint-ruff:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

lint-duplicates:
	$(BIN)/pylint --disable=all --enable=duplicate-code --min-similarity-lines=6 --ignore-imports=yes \
	  --ignore-docstrings=yes --ignore-comments=yes --ignore-signatures=yes --recursive=y --score=no \
	  --ignore-paths='ansible/plugins/module_utils/gpufleet_(hostfacts|driverstate|vfio|owners).py' gpufleet infra ansible roles

lint-yaml:
	$(BIN)/yamllint --strict .

lint-ansible:
	$(BIN)/ansible-lint -q

# The fast suites' workers: two per core, whole modules each (the largest first). A module's tests that share one
# ansible-playbook run (tests/conftest.py's shared) then run on one worker, none waiting on another's, and the
# ansible-playbook runs, which leave a core partly idle while their controller waits on its forks, have a second
# worker beside them: 274 s against 301-346 s with one worker per core handing out single tests (2 cores).
TEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc) )))

# The linters and the fast tests first, side by side (ansible-lint alone keeps one core busy for over a minute;
# -Oline: each line printed whole), then the lab (real VMs: the image is built once and cached in
# ~/.cache/gpufleet/lab; its tests share hosts in order, so they run in one process). The lab run ends with the
# tests that took over a minute, and make test with the lab's steps against their budget (tests/lab/budget.yaml),
# also when a lab test failed. A step over budget is named, not failed: timings vary with the machine's load, and
# make bench counts it as a missed target.
test: setup
	@$(MAKE) --no-print-directory -j$(words $(LINTERS) test-fast) -Oline $(LINTERS) test-fast
	$(BIN)/python -m pytest -m "not slow" --durations=0 --durations-min=60 tests/lab || { $(BIN)/gpufleet lab budget; exit 1; }
	@$(BIN)/python -c "import time; from pathlib import Path; from gpufleet.lab.job import record; \
	  s = time.time() - $(STARTED); record('make-test', {'total_seconds': round(s)}, Path('.')); \
	  print(f'make test passed in {s / 60:.1f} min (kept in build/timings/make-test.json for make bench)')"
	@$(BIN)/gpufleet lab budget

test-fast: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests/unit tests/infra tests/ansible

# pytest exits 5 when no test is selected; say so rather than fail. -s prints each scenario's wall time.
# The slow scenarios run one VM at a time: a TCG thread per vCPU can use both cores there (gpufleet/lab/accel.py).
# nvidia_driver's DKMS build runs natively in a system container (tests/molecule/dkms_build.yml).
test-slow: setup
	@GPUFLEET_LAB_TCG_THREADS=multi $(BIN)/python -m pytest -m slow -s tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test-slow: no slow scenarios exist yet"; exit 0; fi; exit $$rc

# The fuzz test with fresh random seeds (make test runs its fixed seed and the regression cases): make fuzz FUZZ_SEEDS=50
FUZZ_SEEDS ?= 10
fuzz: setup
	$(BIN)/python scripts/fuzz.py $(FUZZ_SEEDS) --workers $(TEST_WORKERS)

bench: setup
	$(BIN)/python benchmarks/run.py

# The local bare-metal lab: up (image cached), converge with ansible/site.yml, verify, then each phase's time and
# the total (from the start of make, setup included); it stays running. LAB_ARGS passes options to
# `gpufleet lab run` (e.g. LAB_ARGS="--hosts 3 --fresh"; the lab tests run it on their own hosts with --prefix).
LAB_ARGS ?=
lab: setup
	$(BIN)/gpufleet lab run --since $(STARTED) $(LAB_ARGS)

lab-down: setup
	$(BIN)/gpufleet lab down

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build *.egg-info
