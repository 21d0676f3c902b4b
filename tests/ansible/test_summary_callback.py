"""The gpufleet_summary callback (ansible/plugins/callback/), enabled by ansible.cfg, on a real ansible-playbook:
after the recap, one line per host that did not finish the play. The lab's converge tests drop a host's SSH
connection and reboot a host mid-play (tests/lab/test_lab.py); here hosts fail, are refused a connection, or fail and
are rescued, with the Mitogen strategy (ansible.cfg's) and Ansible's own."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path

import pytest

from gpufleet.lab.ansible_run import run_playbook
from tests.conftest import REPO

PLAY = """\
- name: Three hosts, three ends
  hosts: all
  gather_facts: false
  tasks:
    - name: Reach every host
      ansible.builtin.ping:
    - name: Fail on the broken host
      ansible.builtin.fail:
        msg: "the plan asks for 64 pages and the node has room for 10\\nsecond line"
      when: inventory_hostname == 'broken'
    - name: Fail and be told to go on
      ansible.builtin.fail:
        msg: ignored
      ignore_errors: true
      when: inventory_hostname == 'fine'
    - name: Fail and be rescued
      when: inventory_hostname == 'fine'
      block:
        - name: Fail inside a block
          ansible.builtin.fail:
            msg: rescued
      rescue:
        - name: Rescue it
          ansible.builtin.debug:
            msg: rescued
    - name: Finish the play
      ansible.builtin.debug:
        msg: done
"""


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, int]:
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path / "cache"))  # run_playbook keeps its log in the lab's dir
    (tmp_path / "cache/lab").mkdir(parents=True)
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    port = closed_port()
    local = f"ansible_connection: local, ansible_python_interpreter: {sys.executable}"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n"
        f"    fine: {{{local}}}\n"
        f"    broken: {{{local}}}\n"
        f"    gone: {{ansible_host: 127.0.0.1, ansible_port: {port}, ansible_user: root,"
        " ansible_ssh_common_args: '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes'}\n"
    )
    return playbook, inventory, port


@pytest.mark.parametrize("strategy", [None, "linear"])
def test_each_host_that_did_not_finish_gets_one_line_after_the_recap(play, strategy: str | None):
    playbook, inventory, port = play
    result = run_playbook(playbook, inventory, repo=REPO, strategy=strategy)
    assert result.rc != 0
    assert result.recap["fine"]["failed"] == 0 and result.recap["fine"]["rescued"] == 1
    summary = result.output.split("PLAY RECAP")[1]
    lines = [line for line in summary.splitlines() if line.startswith(("gpufleet:", "  ", "Re-run"))]
    assert lines[0] == "gpufleet: 2 of 3 host(s) did not finish the play; the others were not held up:", summary
    assert lines[1] == (
        '  broken  failed at task "Fail on the broken host": the plan asks for 64 pages and the node has room for 10'
    )
    assert lines[2].startswith('  gone    unreachable at task "Reach every host": '), lines[2]
    assert f"port {port}" in lines[2] and "Connection refused" in lines[2] and "\n" not in lines[2]
    assert lines[3] == "Re-run the play once the host answers: each role changes only what is still undone."
    assert "fine " not in summary.split("gpufleet:")[1]  # ignored and rescued failures finish the play
    assert result.stopped.splitlines() == lines  # what `gpufleet lab converge` and `lab run` print


def test_nothing_is_added_when_every_host_finishes(play):
    playbook, inventory, _port = play
    result = run_playbook(playbook, inventory, repo=REPO, limit="fine")
    assert result.rc == 0, result.output[-2000:]
    assert "gpufleet:" not in result.output.split("PLAY RECAP")[1] and result.stopped == ""


def load_callback():
    spec = importlib.util.spec_from_file_location("summary", REPO / "ansible/plugins/callback/gpufleet_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "result",
    [
        # Mitogen's, as lab hosts' runs recorded them with their sshd sessions killed mid-play: as an unreachable
        # task (the kill landed between calls; the same when a host rebooted), and as a failed one (during a call)
        {
            "msg": "Task failed: Mitogen was disconnected from the remote environment while a call was in-progress. "
            "If you feel this is in error, please file a bug. Original error was: the respondent Context has "
            "disconnected",
            "unreachable": True,
        },
        {"msg": "Task failed: the respondent Context has disconnected", "failed": True},
        # and as the next call met the host's interpreter gone (a fresh clone's lab run, 2026-11-29)
        {"msg": "Task failed: no route to 5, my ID is 0", "failed": True},
    ],
)
def test_a_connection_lost_mid_task_under_mitogen_reads_as_such(result: dict):
    """The reader is told what the controller can know, not asked to file a bug, and to re-run the play."""
    why, lost = load_callback().reason(result, unreachable="unreachable" in result)
    assert lost and why.startswith(
        "the connection to the host was lost during the task (the host rebooted, powered off, or its SSH connection"
        " or network dropped) ["
    ), why
    words = why.rpartition(" [")[2].removesuffix("]")
    assert words in ("the respondent Context has disconnected", "no route to 5, my ID is 0")


def test_a_long_message_is_cut_to_one_short_line():
    why, lost = load_callback().reason({"msg": "x" * 1000 + "\nsecond"}, unreachable=False)
    assert len(why) == 240 and why.endswith("...") and not lost
