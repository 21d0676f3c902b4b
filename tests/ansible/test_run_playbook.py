"""gpufleet.lab.ansible_run on a real ansible-playbook (localhost): the recap, each task's time, the strategy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.lab.ansible_run import run_playbook
from tests.conftest import REPO

PLAY = """\
- name: Two timed tasks
  hosts: all
  gather_facts: false
  tasks:
    - name: Wait a second
      ansible.builtin.wait_for:
        timeout: 1
    - name: Run a command
      ansible.builtin.command:
        argv: [{python}, -c, "print('hello')"]
      changed_when: false
    - name: Wait again when asked (skipped)
      ansible.builtin.wait_for:
        timeout: 1
      when: false
    - name: Note a change
      ansible.builtin.debug:
        msg: changed
      changed_when: true
      notify: Wait in a handler
  handlers:
    - name: Wait in a handler
      ansible.builtin.wait_for:
        timeout: 1
      changed_when: true
"""


@pytest.fixture
def play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path / "cache"))  # run_playbook keeps its log in the lab's dir
    (tmp_path / "cache/lab").mkdir(parents=True)
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY.format(python=sys.executable))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    here:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    return playbook, inventory


@pytest.mark.parametrize("strategy", [None, "linear"])
def test_each_task_is_timed_and_the_recap_read(play: tuple[Path, Path], strategy: str | None):
    result = run_playbook(*play, repo=REPO, strategy=strategy)
    assert result.rc == 0, result.output[-2000:]
    assert result.recap["here"]["ok"] == 4 and result.recap["here"]["failed"] == 0
    assert [(t.name, t.changed, t.handler) for t in result.tasks] == [
        ("Wait a second", False, False),
        ("Run a command", False, False),
        ("Wait again when asked (skipped)", False, False),
        ("Note a change", True, False),
        ("Wait in a handler", True, True),  # a notified handler is timed on its own, not in the task before it
    ]
    assert 2.0 <= result.seconds_of("wait") < result.seconds
    # what the lab's reboot phase counts: only tasks that changed a host, not a skipped one's evaluation
    assert 1.0 <= result.seconds_of("wait", changed_only=True) < result.seconds_of("wait") - 1.0
    assert result.seconds_of("no such task") == 0
    assert result.log.is_file() and "PLAY RECAP" in result.log.read_text()
    # the log ends with where the time went: the slowest tasks first, handlers marked
    table = result.log.read_text().split("# gpufleet: the 5 slowest tasks (seconds until the next began)\n")[1]
    rows = [(float(line.split()[0]), line.split(None, 1)[1]) for line in table.splitlines()]
    assert [seconds for seconds, _ in rows] == sorted((seconds for seconds, _ in rows), reverse=True)
    assert {name for _, name in rows} >= {"Wait a second", "handler Wait in a handler"} and rows[0][0] >= 0.9


def test_the_project_runs_plays_with_its_mitogen_strategy():
    dump = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-config"), "dump", "--only-changed"],
        env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": str(Path(sys.executable).parent)},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
    ).stdout
    assert "DEFAULT_STRATEGY(" in dump and "= gpufleet_linear" in dump, dump
