"""Shared test helpers: paths to the repository and its fixtures."""

from __future__ import annotations

import atexit
import datetime as dt
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.cli_server import SERVER

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLE_STACKS = sorted(p for p in REPO.glob("Pulumi.*.yaml") if p.name != "Pulumi.yaml")
# Validation depends on the date (VM size retirements); tests pin it unless a fixture says otherwise.
TODAY = dt.date(2026, 11, 21)

# A user's own configuration never decides a test: a price table in ~/.config/gpufleet takes precedence over the
# shipped one (docs/azure.md), so the whole run, its subprocesses included, gets an empty configuration folder.
_EMPTY_CONFIG = tempfile.mkdtemp(prefix="gpufleet-tests-config-")
os.environ["XDG_CONFIG_HOME"] = _EMPTY_CONFIG
atexit.register(shutil.rmtree, _EMPTY_CONFIG, ignore_errors=True)


def gpufleet(
    *args: str, cwd: Path = REPO, timeout: float = 120, env: Mapping[str, str] | None = None, nice: int = 0
) -> subprocess.CompletedProcess[str]:
    """``python -m gpufleet ARGS`` in its own process (no stdin, output captured, never raising on its exit code),
    in environment ``env`` (by default this one), ``nice`` lower in CPU priority than this one."""
    return subprocess.run(
        [*(["nice", "-n", str(nice)] if nice else []), sys.executable, "-m", "gpufleet", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def cli(
    *args: str, cwd: Path = REPO, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``gpufleet ARGS`` as :func:`gpufleet` runs it (environment ``env``, by default this one), in a process forked
    from one that has imported gpufleet already (tests/cli_server.py): for tests of what a command does, not of how
    Python starts it."""
    return SERVER.run(list(args), cwd=cwd, env=os.environ if env is None else env, timeout=timeout)


@pytest.fixture(scope="session")
def catalog():
    from gpufleet.catalog import load_catalog

    return load_catalog()


Shared = Callable[[str, Callable[[Path], Any]], Any]


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Shared:
    """``shared(NAME, make)``: what ``make(directory)`` returns (as JSON reads it back), made once per test session.

    For the module fixtures that cost seconds (an ansible-playbook run): pytest-xdist may hand a module's tests to
    more than one worker, and each would make the fixture again. Here the first worker that asks makes it, in a
    directory every worker can read; the others wait for it (a lock on NAME.lock) and read its result. make test
    hands out whole modules (``--dist loadfile``), so the lock is a guard, not a wait."""

    def get(name: str, make: Callable[[Path], Any]) -> Any:
        if worker_id == "master":  # no xdist: this process is the session
            return json.loads(json.dumps(make(tmp_path_factory.mktemp(name))))
        root = tmp_path_factory.getbasetemp().parent  # the session's, above each worker's own
        directory, result = root / name, root / f"{name}.json"
        with (root / f"{name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not result.exists():
                shutil.rmtree(directory, ignore_errors=True)  # what a worker that failed making it left
                directory.mkdir()
                result.write_text(json.dumps(make(directory)))
        return json.loads(result.read_text())

    return get
