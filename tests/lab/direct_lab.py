"""The lab without libvirt (QEMU directly), driven through the CLI as a user would with
``GPUFLEET_LAB_BACKEND=qemu``: one host up, its status, a command on it, down. tests/lab/conftest.py runs it in the
VM lane beside TestLab (processes of its own, so its environment never reaches the other lab tests, at the lanes'
CPU priority: molecule_runner.LANE_NICE) and
test_lab.py::test_lab_without_libvirt_uses_qemu_directly_and_says_redfish_is_unavailable checks what it saw."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.lab.molecule_runner import lane_lab

PREFIX = "direct"


@dataclass(frozen=True)
class DirectRun:
    up: subprocess.CompletedProcess[str]  # `gpufleet lab up` (its progress lines on stdout)
    status: list[dict]  # `gpufleet lab status --json` while the host runs
    numactl: subprocess.CompletedProcess[str] | None  # `numactl -H` on the host over SSH
    console: str  # the host's serial console log as `lab status` named it, read while the host runs
    inventory: str  # the inventory `lab up` wrote
    down: subprocess.CompletedProcess[str]  # `gpufleet lab down`
    status_after: subprocess.CompletedProcess[str]  # `gpufleet lab status --json` after it


def _gpufleet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return lane_lab(PREFIX, env, *args)


def run(work: Path, base_env: dict[str, str]) -> DirectRun:
    """One host of a QEMU-only lab up, looked at, and down again (always, once `lab up` ran)."""
    from gpufleet.lab import image, ssh

    env = {**base_env, "GPUFLEET_LAB_BACKEND": "qemu", "NO_COLOR": "1"}
    inventory = work / "hosts.yml"
    up = _gpufleet(env, "up", "--fresh", "--inventory", str(inventory))
    try:
        status = json.loads(_gpufleet(env, "status", "--json").stdout or "[]") if up.returncode == 0 else []
        numactl = ssh.run(image.ssh_key(), status[0]["ssh_port"], "numactl -H") if status else None
        console = Path(status[0]["console"]).read_text(errors="replace") if status else ""
    finally:
        down = _gpufleet(env, "down")
    written = inventory.read_text() if inventory.exists() else ""
    return DirectRun(up, status, numactl, console, written, down, _gpufleet(env, "status", "--json"))
