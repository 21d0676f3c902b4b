"""Shared test helpers: paths to the repository and its fixtures."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLE_STACKS = sorted(p for p in REPO.glob("Pulumi.*.yaml") if p.name != "Pulumi.yaml")
# Validation depends on the date (VM size retirements); tests pin it unless a fixture says otherwise.
TODAY = dt.date(2026, 11, 21)


def gpufleet(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m gpufleet ARGS`` in its own process (no stdin, output captured, never raising on its exit code)."""
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def catalog():
    from gpufleet.catalog import load_catalog

    return load_catalog()
