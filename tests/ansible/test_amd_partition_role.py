"""The amd_partition role run by ansible-playbook on this machine against TEST DOUBLES of the amdgpu driver's
partition files and of amd-smi (tests/lab/standins/fake_amd.py: a stand-in sysfs tree of eight MI300X GPUs, its
``amd-smi``, and its ``reload`` standing in for ``modprobe -r amdgpu && modprobe amdgpu``), one tree per host of the
inventory: memory mode first with a driver reload only where allowed, then compute modes; a second run changes
nothing; check mode changes nothing; a memory change without a reload is reported, changes nothing and fails
verification saying why; a plan the GPUs cannot take is refused before any change. The lab runs the same role in a
system container after the amd_driver role (tests/lab/test_containers.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.host.hostfacts import amd_gpu_partitions
from tests.ansible_playbook import ansible_playbook, failures, recap
from tests.lab.standins import FAKE_AMD

PLAY = """
- hosts: all
  gather_facts: false
  environment:
    GPUFLEET_FAKE_AMD_SYSFS: "{{ amd_partition_sysfs_root }}"
  tasks:
    - name: The amd_partition role
      ansible.builtin.include_role:
        name: amd_partition
    - name: Its verify tasks
      ansible.builtin.include_role:
        name: amd_partition
        tasks_from: verify
      when: not ansible_check_mode
    - name: Keep what the role says
      ansible.builtin.copy:
        content: "{{ {'reload_required': amd_partition_reload_required} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      check_mode: false
      changed_when: false  # the test's own file, not the host's state
"""
ALL_CPX = [{"compute": "CPX", "gpus": "all"}]
# host: (the GPUs' modes at the start (compute, memory), the role's variables)
CASES = {
    # NPS4 with CPX: the memory request, the reload (which puts every GPU in CPX), nothing left to write
    "cpx-nps4": (("SPX", "NPS1"), {"amd_partition_memory": "NPS4", "amd_partition_groups": ALL_CPX,
                                   "amd_partition_reload_ok": True}),
    # compute modes per group, GPU 7 skipped, memory as it is: no reload
    "groups": (("SPX", "NPS1"), {"amd_partition_memory": "NPS1", "amd_partition_skipped_gpus": [7],
                                 "amd_partition_groups": [{"compute": "CPX", "gpus": 3},
                                                          {"compute": "DPX", "gpus": 4}]}),
    # back from CPX/NPS4 to SPX/NPS1: SPX does not run with NPS4, so the reload must come first
    "back-to-spx": (("CPX", "NPS4"), {"amd_partition_memory": "NPS1", "amd_partition_reload_ok": True,
                                      "amd_partition_groups": [{"compute": "SPX", "gpus": "all"}]}),
    # a memory change the role may not reload for: nothing changes, verification says why
    "pending": (("SPX", "NPS1"), {"amd_partition_memory": "NPS4", "amd_partition_groups": ALL_CPX}),
    # groups that leave a GPU out: refused before any change
    "refused": (("SPX", "NPS1"), {"amd_partition_groups": [{"compute": "CPX", "gpus": 7}]}),
}  # fmt: skip
NO_SMI = "groups"  # this host has no amd-smi: verification reads sysfs
CHECKED = ("cpx-nps4", "back-to-spx", "groups")  # the cases run in check mode on fresh trees


def build(tmp_path: Path, host: str, compute: str, memory: str) -> dict:
    """The host's stand-in tree, its amd-smi (a script named amd-smi running the double) and variables."""
    d = tmp_path / host
    (d / "bin").mkdir(parents=True)
    (d / "impl").mkdir()
    (d / "impl/amd-smi").symlink_to(FAKE_AMD)  # the double acts as amd-smi when called by that name
    (d / "bin/amd-smi").write_text(f'#!/bin/sh\nexec {sys.executable} {d / "impl/amd-smi"} "$@"\n')
    (d / "bin/amd-smi").chmod(0o755)
    proc = subprocess.run(
        [sys.executable, str(FAKE_AMD), "build", "--gpus", "8", "--compute", compute, "--memory", memory],
        env={"GPUFLEET_FAKE_AMD_SYSFS": str(d / "sys")}, check=True, stdin=subprocess.DEVNULL, capture_output=True,
    )  # fmt: skip
    assert proc.returncode == 0
    return {
        "amd_partition_sysfs_root": str(d / "sys"),
        "amd_partition_smi": str(d / "bin/amd-smi") if host != NO_SMI else str(d / "bin/none"),
        "amd_partition_reload_command": [sys.executable, str(FAKE_AMD), "reload"],
        "out": str(d / "out.json"),
    }


def modes(tmp_path: Path, host: str) -> list[tuple[str, str]]:
    return [
        (g["partition"]["compute"], g["partition"]["memory"]) for g in amd_gpu_partitions(str(tmp_path / host / "sys"))
    ]


def snapshot(tmp_path: Path, host: str) -> dict[str, str]:
    """Every file of the host's tree and the double's state (applied modes, requests, the log of writes)."""
    root = tmp_path / host
    return {
        str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file() and "out" not in p.name
    }


def reloads(tmp_path: Path, host: str) -> int:
    return json.loads((tmp_path / host / "state.json").read_text())["log"].count("driver reloaded")


def play(directory: Path, hosts: dict[str, dict], *options: str) -> str:
    """PLAY on ``hosts`` (each a local connection with this Python), with ``options`` (``--check``...): its output."""
    directory.mkdir()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (directory / "hosts.yml").write_text(json.dumps({"all": {"vars": local, "hosts": hosts}}))  # JSON is YAML
    (directory / "play.yml").write_text(PLAY)
    proc = ansible_playbook(*options, "-i", directory / "hosts.yml", directory / "play.yml", local=False)
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The play on every case, twice; and in check mode on fresh trees of two cases."""
    tmp_path = tmp_path_factory.mktemp("amd-partition")
    hosts = {host: {**build(tmp_path, host, *start), **variables} for host, (start, variables) in CASES.items()}
    first = play(tmp_path / "play1", hosts)
    after_first = {host: modes(tmp_path, host) for host in CASES}
    second = play(tmp_path / "play2", hosts)
    checked = tmp_path / "check"
    check_hosts = {host: {**build(checked, host, *CASES[host][0]), **CASES[host][1]} for host in CHECKED}
    before_check = {host: snapshot(checked, host) for host in check_hosts}
    check = play(checked / "play", check_hosts, "--check", "--diff")
    return {
        "dir": tmp_path,
        "first": first,
        "after_first": after_first,
        "second": second,
        "check": check,
        "check_dir": checked,
        "before_check": before_check,
    }


def out(tmp_path: Path, host: str) -> dict:
    return json.loads((tmp_path / host / "out.json").read_text())


def test_nps4_with_cpx_requests_the_memory_mode_reloads_once_and_has_no_compute_left_to_write(runs):
    tmp_path, output = runs["dir"], runs["first"]
    assert runs["after_first"]["cpx-nps4"] == [("CPX", "NPS4")] * 8
    # the memory request and the reload changed; the reload left every GPU in CPX, so no compute write
    assert recap(output)["cpx-nps4"]["changed"] == 2, output[-3000:]
    assert reloads(tmp_path, "cpx-nps4") == 1
    assert out(tmp_path, "cpx-nps4") == {"reload_required": False}
    assert "8 AMD GPU(s) in their planned partitions (amd-smi): CPX, CPX, CPX, CPX, CPX, CPX, CPX, CPX / NPS4" in output


def test_compute_groups_go_to_the_gpus_in_pci_order_after_the_skipped_ones_without_a_reload(runs):
    tmp_path, output = runs["dir"], runs["first"]
    assert runs["after_first"]["groups"] == [("CPX", "NPS1")] * 3 + [("DPX", "NPS1")] * 4 + [("SPX", "NPS1")]
    assert recap(output)["groups"]["changed"] == 1, output[-3000:]  # one task wrote the seven GPUs
    assert reloads(tmp_path, "groups") == 0
    assert "7 AMD GPU(s) in their planned partitions (sysfs): CPX, CPX, CPX, DPX, DPX, DPX, DPX / NPS1" in output


def test_going_back_to_spx_nps1_reloads_first_since_spx_does_not_run_with_nps4(runs):
    tmp_path = runs["dir"]
    assert runs["after_first"]["back-to-spx"] == [("SPX", "NPS1")] * 8
    log = json.loads((tmp_path / "back-to-spx/state.json").read_text())["log"]
    assert not [line for line in log if line.startswith("refused")], log  # no write the kernel would refuse
    assert reloads(tmp_path, "back-to-spx") == 1


def test_a_memory_change_without_a_reload_changes_nothing_and_fails_verification_saying_why(runs):
    tmp_path, output = runs["dir"], runs["first"]
    assert runs["after_first"]["pending"] == [("SPX", "NPS1")] * 8
    assert reloads(tmp_path, "pending") == 0
    assert recap(output)["pending"]["changed"] == 0 and recap(output)["pending"]["failed"] == 1
    assert "amd_partition_reload_ok is false: nothing changed; the compute partitions wait for the reload too" in output
    assert failures(output, "pending"), output[-3000:]
    message = output[output.index("fatal: [pending]") :]
    assert (
        "GPUs 0-7: memory partition NPS1, planned NPS4 (amd-smi): it takes a driver reload (modprobe -r amdgpu &&"
        " modprobe amdgpu), which amd_partition_reload_ok does not allow" in message
    )
    assert "GPUs 0-7: compute partition SPX, planned CPX (amd-smi): left for after that reload" in message
    assert json.loads((tmp_path / "pending/state.json").read_text())["gpus"][0]["requested_memory"] is None


def test_groups_that_leave_a_gpu_out_are_refused_before_any_change(runs):
    output = runs["first"]
    assert runs["after_first"]["refused"] == [("SPX", "NPS1")] * 8
    message = "\n".join(failures(output, "refused"))
    assert "the groups assign 7 GPUs, but the host has 8 to assign (8 AMD GPUs, 0 skipped)" in message


def test_a_second_run_changes_nothing(runs):
    output = runs["second"]
    counts = recap(output)
    assert {h: counts[h]["changed"] for h in CASES} == dict.fromkeys(CASES, 0), output[-3000:]
    assert {h: counts[h]["failed"] for h in CASES} == {**dict.fromkeys(CASES, 0), "pending": 1, "refused": 1}
    assert reloads(runs["dir"], "cpx-nps4") == reloads(runs["dir"], "back-to-spx") == 1  # no second reload


def test_check_mode_reports_the_memory_change_and_the_reloads_compute_changes_and_changes_nothing(runs):
    output, checked = runs["check"], runs["check_dir"]
    counts = recap(output)
    assert {h: (counts[h]["changed"], counts[h]["failed"]) for h in CHECKED} == {
        "cpx-nps4": (1, 0),  # the memory request; the reload (skipped in check mode) would leave CPX: nothing more
        "back-to-spx": (1, 0),  # the memory request; the reload would leave SPX for NPS1: nothing more
        "groups": (1, 0),  # the compute modes of seven GPUs
    }, output[-3000:]
    gpu0 = "sys/bus/pci/devices/0000:05:00.0"
    for line in (
        f"-{checked}/cpx-nps4/{gpu0}/current_memory_partition: NPS1",
        f"+{checked}/cpx-nps4/{gpu0}/current_memory_partition: NPS4",
        f"-{checked}/back-to-spx/{gpu0}/current_memory_partition: NPS4",
        f"+{checked}/back-to-spx/{gpu0}/current_memory_partition: NPS1",
        f"-{checked}/groups/{gpu0}/current_compute_partition: SPX",
        f"+{checked}/groups/{gpu0}/current_compute_partition: CPX",
    ):
        assert line in output.splitlines(), line
    assert f"{checked}/groups/sys/bus/pci/devices/0000:e5:00.0/current_compute_partition" not in output  # skipped
    assert f"{checked}/back-to-spx/{gpu0}/current_compute_partition" not in output
    for host, before in runs["before_check"].items():
        assert snapshot(checked, host) == before, host
