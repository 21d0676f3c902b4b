"""Shared test helpers: paths to the repository and its fixtures."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLE_STACKS = sorted(p for p in REPO.glob("Pulumi.*.yaml") if p.name != "Pulumi.yaml")
# Validation depends on the date (VM size retirements); tests pin it unless a fixture says otherwise.
TODAY = dt.date(2026, 11, 21)


@pytest.fixture(scope="session")
def catalog():
    from gpufleet.catalog import load_catalog

    return load_catalog()
