"""Each role's Molecule scenario (create -> converge -> idempotence -> verify -> destroy) on a fresh lab host.

The scenarios start with the lab session (tests/lab/conftest.py), ``GPUFLEET_MOLECULE_JOBS`` at a time, beside the
other lab tests; each test here waits for its own scenario's result."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO
from tests.lab import molecule_runner as runner
from tests.lab.conftest import Lanes

ROLES = runner.ROLES


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


@pytest.mark.parametrize("role", [pytest.param(r, marks=pytest.mark.slow) if runner.slow(r) else r for r in ROLES])
def test_molecule_scenario(role: str, lanes: Lanes):
    returncode, output, seconds = lanes.scenarios[role].result()
    print(f"molecule test ({role}): {seconds:.0f} s")
    assert returncode == 0, output[-6000:]
    # Molecule fails the run when the idempotence step finds a change; check that the step and verify did run
    for step in ("converge", "idempotence", "verify"):
        assert re.search(rf"\b{step}\b", output), f"the {step} step did not run:\n{output[-3000:]}"
