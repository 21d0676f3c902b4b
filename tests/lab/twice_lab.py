"""Two ``gpufleet lab up`` of one new lab at once, as two terminals (or two CI jobs) would start them: each process
is followed at once by what a user runs next, a command on the host over SSH. tests/lab/conftest.py runs it in the
VM lane beside TestLab (processes of their own, at the lanes' CPU priority) and
test_lab.py::test_two_lab_ups_of_one_lab_at_once_take_turns_and_end_with_one_lab checks what it saw."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.lab.molecule_runner import lane_lab

PREFIX = "twice"


@dataclass(frozen=True)
class Up:
    proc: subprocess.CompletedProcess[str]  # `gpufleet lab up` (its progress lines on stdout)
    host: list[str]  # on the host over SSH the moment this `lab up` returned: its name, its NVMe controllers bound
    inventory: str  # the inventory this `lab up` wrote


@dataclass(frozen=True)
class TwiceRun:
    ups: list[Up]
    status: list[dict]  # `gpufleet lab status --json` after both
    state: str  # the lab's state file after both
    down: subprocess.CompletedProcess[str]
    status_after: subprocess.CompletedProcess[str]


def _gpufleet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return lane_lab(PREFIX, env, *args)


def _up(env: dict[str, str], inventory: Path) -> Up:
    from gpufleet.lab import image, ssh

    proc = _gpufleet(env, "up", "--inventory", str(inventory))
    host: list[str] = []
    if proc.returncode == 0:
        port = json.loads(_gpufleet(env, "status", "--json").stdout or "[{}]")[0].get("ssh_port")
        command = "hostname; ls /sys/bus/pci/drivers/nvme | grep -c :"
        host = ssh.run(image.ssh_key(), port, command, timeout=60).stdout.split() if port else []
    return Up(proc, host, inventory.read_text() if inventory.exists() else "")


def run(work: Path, base_env: dict[str, str]) -> TwiceRun:
    """A new lab (``lab down`` first: nothing left of an earlier run), brought up by two processes at once, looked
    at, and taken down again (always)."""
    from gpufleet.lab.config import lab_dir

    env = {**base_env, "NO_COLOR": "1"}
    _gpufleet(env, "down")
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            ups = list(pool.map(lambda i: _up(env, work / f"hosts-{i}.yml"), (1, 2)))
        status = json.loads(_gpufleet(env, "status", "--json").stdout or "[]")
        state_file = lab_dir() / f"lab-{PREFIX}.json"
        state = state_file.read_text() if state_file.exists() else ""
    finally:
        down = _gpufleet(env, "down")
    return TwiceRun(ups, status, state, down, _gpufleet(env, "status", "--json"))
