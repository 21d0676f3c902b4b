"""The nvidia_driver role's imex tasks (roles/nvidia_driver/tasks/imex.yml) run by ansible-playbook on this machine:
where the DRA driver runs ComputeDomains (``nvidia_driver_mask_imex``), the host's nvidia-imex service ends masked
and stopped, a second run changes nothing, check mode changes nothing, and other hosts' units are left alone.

This machine runs no systemd, so ``systemctl`` is a TEST DOUBLE (first on PATH) that keeps one unit's state in
files of a directory per host (``enabled``: what ``is-enabled`` prints, empty when the unit is not installed;
``active``) and answers what ansible.builtin.systemd_service and the tasks call: ``show`` (LoadState, ActiveState),
``is-enabled``, ``is-active``, ``mask``, ``stop``; every call is appended to ``calls``. The lab runs the same tasks
against a real systemd (tests/lab/test_lab.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.ansible_playbook import ansible_env, ansible_playbook, failures, playbook_on_hosts, recap

SYSTEMCTL_STANDIN = """#!/bin/sh
# TEST DOUBLE of systemctl: one unit's state in $IMEX_STANDIN/{enabled,active}
d="$IMEX_STANDIN"
echo "$*" >> "$d/calls"
for unit; do :; done
enabled=$(cat "$d/enabled"); active=$(cat "$d/active")
case "$1" in
  show)
    load=loaded; [ "$enabled" = masked ] && load=masked; [ -z "$enabled" ] && load=not-found
    printf 'Id=%s\\nLoadState=%s\\nActiveState=%s\\n' "$unit" "$load" "$active";;
  is-enabled)
    if [ -z "$enabled" ]; then echo "Failed to get unit file state for $unit: No such file or directory" >&2; exit 1; fi
    echo "$enabled"; [ "$enabled" = enabled ];;
  is-active) echo "$active"; [ "$active" = active ];;
  mask) echo masked > "$d/enabled";;
  stop) echo inactive > "$d/active";;
  *) echo "systemctl test double: unexpected call: $*" >&2; exit 1;;
esac
"""
PLAY = """
- hosts: all
  gather_facts: false
  environment:
    IMEX_STANDIN: "{{ standin }}"
  tasks:
    - name: The nvidia_driver role's imex tasks
      ansible.builtin.include_role:
        name: nvidia_driver
        tasks_from: imex
"""
# host: (is-enabled, is-active before, nvidia_driver_mask_imex)
HOSTS = {
    "running": ("enabled", "active", True),  # the nvidia-imex package's unit, enabled and started
    "not-installed": ("", "inactive", True),  # masked before the package comes
    "masked": ("masked", "inactive", True),
    "other-group": ("enabled", "active", False),  # not a DRA ComputeDomain group: left as it is
}


def state(directory: Path) -> tuple[str, str]:
    return (directory / "enabled").read_text().strip(), (directory / "active").read_text().strip()


def run(tmp_path: Path, fresh: bool = True) -> tuple[str, dict[str, dict[str, int]]]:
    """The play on every host of HOSTS (their units as HOSTS says when ``fresh``); its output and recap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(SYSTEMCTL_STANDIN)
    (bin_dir / "systemctl").chmod(0o755)
    hosts = {}
    for host, (enabled, active, mask) in HOSTS.items():
        d = tmp_path / host
        d.mkdir(exist_ok=True)
        if fresh:
            (d / "enabled").write_text(enabled + "\n")
            (d / "active").write_text(active + "\n")
            (d / "calls").write_text("")
        hosts[host] = {"standin": str(d), "nvidia_driver_mask_imex": mask}
    (tmp_path / "play").mkdir(exist_ok=True)
    proc = playbook_on_hosts(tmp_path / "play", PLAY, hosts, env=ansible_env(bin_dir))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output, recap(output)


@pytest.fixture(scope="module")
def converged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, int]], dict]:
    tmp = tmp_path_factory.mktemp("imex")
    _, first = run(tmp)
    after = {host: state(tmp / host) for host in HOSTS}
    _, second = run(tmp, fresh=False)
    return tmp, first, {"after": after, "second": second}


def test_a_dra_compute_domain_host_ends_with_imex_masked_and_stopped(converged):
    tmp, first, runs = converged
    assert runs["after"]["running"] == ("masked", "inactive")
    assert first["running"]["changed"] == 2  # masked, stopped
    calls = (tmp / "running" / "calls").read_text().splitlines()
    assert "mask nvidia-imex.service" in calls and "stop nvidia-imex.service" in calls


def test_imex_is_masked_before_its_package_is_installed(converged):
    _, first, runs = converged
    assert runs["after"]["not-installed"] == ("masked", "inactive")
    assert first["not-installed"]["changed"] == 1


def test_a_second_run_changes_nothing(converged):
    _, first, runs = converged
    assert first["masked"]["changed"] == 0
    assert {host: counts["changed"] for host, counts in runs["second"].items()} == dict.fromkeys(HOSTS, 0)


def test_other_host_groups_keep_their_unit_as_it_is(converged):
    tmp, first, runs = converged
    assert runs["after"]["other-group"] == ("enabled", "active")
    assert first["other-group"]["changed"] == 0
    assert (tmp / "other-group" / "calls").read_text() == ""  # not even read


def test_check_mode_reports_the_change_and_changes_nothing(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(SYSTEMCTL_STANDIN)
    (bin_dir / "systemctl").chmod(0o755)
    d = tmp_path / "running"
    d.mkdir()
    (d / "enabled").write_text("enabled\n")
    (d / "active").write_text("active\n")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {"running": local | {"standin": str(d), "nvidia_driver_mask_imex": True}}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": hosts}}))  # JSON is YAML
    (tmp_path / "play.yml").write_text(PLAY)
    proc = ansible_playbook("-i", tmp_path / "hosts.yml", "--check", tmp_path / "play.yml", local=False,
                            env=ansible_env(bin_dir))  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and not failures(output, "running"), output[-4000:]
    assert recap(output)["running"]["changed"] == 2
    assert state(d) == ("enabled", "active")
    calls = (d / "calls").read_text().splitlines()
    assert not [c for c in calls if c.split()[0] in ("mask", "stop")], calls
