"""Running the roles' Molecule scenarios (used by tests/lab/conftest.py, which starts them, and test_molecule.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, gpufleet

ROLES = sorted(p.parent.parent.parent.name for p in (REPO / "roles").glob("*/molecule/default/molecule.yml"))
SLOW_MARK = "# gpufleet: slow"  # in a scenario's converge.yml: it runs in `make test-slow` only
CONTAINER_MARK = "# gpufleet: container"  # a line of a scenario's converge.yml: its host is a system container
# nvidia_driver under software emulation: the driver's packages with their update-initramfs runs, a reboot, the
# re-converge and verify (its DKMS build runs natively first, tests/molecule/dkms_build.yml); vfio's reboots.
SLOW_LIMIT_S = 3 * 3600
# The scenarios run beside TestLab at a lower CPU priority (molecule and what it starts: ansible-playbook, `gpufleet
# lab up`, whose VMs run at it too, gpufleet/lab/virt.py): under software emulation the lab is bound by CPU, and
# TestLab's chain of steps is the longest. Run level, the scenarios ended minutes before it, and its last steps left
# a core ~40% idle (2026-11-28); yielding, they take the cycles TestLab leaves and TestLab's chain shortens.
LANE_NICE = 5


def _converge(role: str) -> str:
    """The text of ``role``'s scenario playbook, whose marks and tasks say how and where the scenario runs."""
    return (REPO / "roles" / role / "molecule/default/converge.yml").read_text()


def slow(role: str) -> bool:
    return SLOW_MARK in _converge(role)


def in_container(role: str) -> bool:
    """A scenario whose host is a system container (tests/molecule/create.yml reads the same line)."""
    return CONTAINER_MARK in _converge(role).splitlines()


def lane(role: str, jobs: int) -> str:
    """Which of the lab session's two lanes runs ``role``'s scenario (tests/lab/conftest.py): ``containers`` for a
    system container's when there are two jobs or more, ``vms`` otherwise (with one job, the one lane)."""
    return "containers" if jobs > 1 and in_container(role) else "vms"


def may_reboot(role: str) -> bool:
    """Scenarios whose converge may reboot the host take about twice as long as the others."""
    return slow(role) or "reboot" in _converge(role)


def run_scenario(role: str, work: Path, base_env: dict[str, str]) -> tuple[int, str, float]:
    """Molecule's run of ``role``'s scenario in ``base_env``: the environment as the lab session started, not
    ``os.environ`` when the scenario's turn comes (a lab test's monkeypatched variable would otherwise reach the
    scenarios started during that test)."""
    bin_dir = Path(sys.executable).parent
    env = {
        **base_env,
        "PATH": f"{bin_dir}:{base_env.get('PATH', '')}",
        "MOLECULE_EPHEMERAL_DIRECTORY": str(work / "ephemeral"),
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
        # each task's time in the scenario's log, and the slowest at the end of each step: where its time went
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
    }
    started = time.monotonic()
    log = work / "molecule.log"  # written as the scenario runs: `tail -f` it to follow a long scenario
    with log.open("w") as out:
        proc = subprocess.run(
            ["nice", "-n", str(LANE_NICE), str(bin_dir / "molecule"), "test", "--scenario-name", "default"],
            cwd=REPO / "roles" / role,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=SLOW_LIMIT_S if slow(role) else 2400,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    return proc.returncode, log.read_text(), time.monotonic() - started


def lane_lab(prefix: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``gpufleet lab ARGS`` on the one-host lab ``prefix``, as the lanes run it: a process of its own in ``env``, at
    the lanes' CPU priority (the lab without libvirt, the two `lab up`s at once)."""
    return gpufleet("lab", *args, "--prefix", prefix, "--hosts", "1", timeout=900, env=env, nice=LANE_NICE)
