"""Each role's Molecule scenario (create -> converge -> idempotence -> verify -> destroy) on a fresh lab host."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.lab.conftest import require_virtualization

ROLES = sorted(p.parent.parent.parent.name for p in (REPO / "roles").glob("*/molecule/default/molecule.yml"))


def test_every_role_has_a_molecule_scenario_from_the_template():
    template = (REPO / "tests/molecule/molecule.yml").read_text().split("\n", 2)[2]  # without its header line
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
    assert roles == ROLES
    for role in roles:
        scenario = REPO / "roles" / role / "molecule/default"
        assert (scenario / "molecule.yml").read_text().split("\n", 1)[1] == template, role
        for playbook in ("converge.yml", "verify.yml"):
            assert (scenario / playbook).is_file(), f"{role}: {playbook}"
        assert "that: true" not in (scenario / "verify.yml").read_text()


@pytest.mark.parametrize("role", ROLES)
def test_molecule_scenario(role: str, tmp_path: Path):
    require_virtualization()
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "ephemeral"),
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
    }
    proc = subprocess.run(
        [str(bin_dir / "molecule"), "test", "--scenario-name", "default"],
        cwd=REPO / "roles" / role,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    output = proc.stdout + proc.stderr
    (tmp_path / "molecule.log").write_text(output)
    assert proc.returncode == 0, output[-6000:]
    # Molecule fails the run when the idempotence step finds a change; check that the step and verify did run
    for step in ("converge", "idempotence", "verify"):
        assert re.search(rf"\b{step}\b", output), f"the {step} step did not run:\n{output[-3000:]}"
