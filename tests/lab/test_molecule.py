"""Each role's Molecule scenario (create -> converge -> idempotence -> verify -> destroy) on a fresh lab host.

The scenarios run side by side, ``GPUFLEET_MOLECULE_JOBS`` at a time (default 2: on a 2-core machine under
software emulation a host's work is mostly one guest CPU busy at a time, so two hosts nearly halve the time);
each test waits for its own scenario's result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.lab.conftest import require_virtualization

ROLES = sorted(p.parent.parent.parent.name for p in (REPO / "roles").glob("*/molecule/default/molecule.yml"))
SLOW_MARK = "# gpufleet: slow"  # in a scenario's converge.yml: it runs in `make test-slow` only
# nvidia_driver under software emulation: DKMS conftests ~35 min, compiling the open modules ~45 min, two
# update-initramfs runs ~10 min each, then the re-converge and verify.
SLOW_LIMIT_S = 3 * 3600


def _slow(role: str) -> bool:
    return SLOW_MARK in (REPO / "roles" / role / "molecule/default/converge.yml").read_text()


def _included_roles(role: str) -> set[str]:
    """The roles a role's tasks run with include_role / import_role."""
    text = "\n".join(p.read_text() for p in (REPO / "roles" / role / "tasks").glob("*.yml"))
    return set(re.findall(r"(?:include|import)_role:\s*\n\s+name:\s*(\w+)", text))


def test_every_role_has_a_molecule_scenario_from_the_template():
    """A role without a scenario of its own is a shared task set (gpu_chart): it must run in two roles' scenarios."""
    template = (REPO / "tests/molecule/molecule.yml").read_text().split("\n", 2)[2]  # without its header line
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
    for shared in sorted(set(roles) - set(ROLES)):
        callers = [role for role in ROLES if shared in _included_roles(role)]
        assert len(callers) >= 2, f"{shared} has no Molecule scenario and is not shared by two roles that have one"
    for role in ROLES:
        scenario = REPO / "roles" / role / "molecule/default"
        assert (scenario / "molecule.yml").read_text().split("\n", 1)[1] == template, role
        for playbook in ("converge.yml", "verify.yml"):
            assert (scenario / playbook).is_file(), f"{role}: {playbook}"
        assert "that: true" not in (scenario / "verify.yml").read_text()


def _may_reboot(role: str) -> bool:
    """Scenarios whose converge may reboot the host take about twice as long as the others."""
    return _slow(role) or "reboot" in (REPO / "roles" / role / "molecule/default/converge.yml").read_text()


def _run_scenario(role: str, work: Path) -> tuple[int, str, float]:
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "MOLECULE_EPHEMERAL_DIRECTORY": str(work / "ephemeral"),
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
    }
    started = time.monotonic()
    log = work / "molecule.log"  # written as the scenario runs: `tail -f` it to follow a long scenario
    with log.open("w") as out:
        proc = subprocess.run(
            [str(bin_dir / "molecule"), "test", "--scenario-name", "default"],
            cwd=REPO / "roles" / role,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=SLOW_LIMIT_S if _slow(role) else 2400,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    return proc.returncode, log.read_text(), time.monotonic() - started


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The selected roles' scenarios, started on first use and run ``GPUFLEET_MOLECULE_JOBS`` at a time."""
    require_virtualization()
    jobs = max(1, int(os.environ.get("GPUFLEET_MOLECULE_JOBS", "2")))
    selected = [
        item.callspec.params["role"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_molecule_scenario"
    ]
    selected.sort(key=lambda role: not _may_reboot(role))  # longest first
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures: dict[str, Future[tuple[int, str, float]]] = {
            role: pool.submit(_run_scenario, role, tmp_path_factory.mktemp(f"molecule-{role}")) for role in selected
        }
        yield futures
        for future in futures.values():  # never leave a scenario (and its lab host) running after the tests
            future.cancel()


@pytest.mark.parametrize("role", [pytest.param(r, marks=pytest.mark.slow) if _slow(r) else r for r in ROLES])
def test_molecule_scenario(role: str, scenarios: dict[str, Future[tuple[int, str, float]]]):
    returncode, output, seconds = scenarios[role].result()
    print(f"molecule test ({role}): {seconds:.0f} s")
    assert returncode == 0, output[-6000:]
    # Molecule fails the run when the idempotence step finds a change; check that the step and verify did run
    for step in ("converge", "idempotence", "verify"):
        assert re.search(rf"\b{step}\b", output), f"the {step} step did not run:\n{output[-3000:]}"
