"""The lab's locks between processes: one lab's `up`/`down` take turns (prefix_lock), other labs go on, and the
machine-wide lock (lab_lock) is separate from both. The lab test of two real `lab up`s at once is
tests/lab/test_lab.py::test_two_lab_ups_of_one_lab_at_once_take_turns_and_end_with_one_lab."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.lab.config import lab_lock, prefix_lock

TAKE = """
import sys
from gpufleet.lab.config import lab_lock, prefix_lock
lock = prefix_lock(sys.argv[2], print) if sys.argv[1] == "prefix" else lab_lock(print)
with lock:
    print("taken", flush=True)
"""


def take(kind: str, name: str = "") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", TAKE, kind, name], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))


def test_a_second_command_on_one_lab_waits_and_says_so_while_other_labs_go_on():
    with prefix_lock("twice"):
        other_lab, shared = take("prefix", "other"), take("machine")
        assert other_lab.communicate(timeout=30)[0] == "taken\n"  # another lab is not held up
        assert shared.communicate(timeout=30)[0] == "taken\n"  # nor the machine-wide lock
        same = take("prefix", "twice")
        assert same.stdout is not None
        assert same.stdout.readline() == "waiting for another gpufleet lab command on lab 'twice' to finish\n"
        with pytest.raises(subprocess.TimeoutExpired):
            same.wait(timeout=1)  # it waits as long as this one holds the lab
    assert same.communicate(timeout=30)[0] == "taken\n" and same.returncode == 0


def test_the_machine_wide_lock_waits_too():
    with lab_lock():
        second = take("machine")
        assert second.stdout is not None
        assert second.stdout.readline() == "waiting for another gpufleet lab command on this machine\n"
    assert second.communicate(timeout=30)[0] == "taken\n"
