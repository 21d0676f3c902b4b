"""The nvidia_driver role's own resolve step per platform (the host's facts -> the install plan through the role's
filter and argument spec) and its rendered apt source, run by ansible-playbook with each platform's facts: one run,
each case a host of its own (connection local) with its platform's facts and role variables.

The lab installs Debian's packages for real (``make test-slow``); this pins what the role would do elsewhere."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpufleet.host.driver import Platform, plan_driver
from tests.ansible_playbook import ansible_env, failures, playbook_on_hosts, recap
from tests.conftest import REPO, Shared

# A module that reports the facts of another platform (what `setup` would gather there)
FACTS_MODULE = """#!/usr/bin/python
import json, sys
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""
PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Report the platform's facts
      platform_facts:
        facts: "{{ platform }}"
    - name: Resolve
      ansible.builtin.include_role:
        name: nvidia_driver
        tasks_from: resolve
    - name: Keep the plan
      ansible.builtin.copy:
        content: "{{ __nvidia_driver | to_json }}"
        dest: "{{ out }}/plan.json"
        mode: "0644"
    - name: Render the apt source the debian source writes
      ansible.builtin.template:
        src: "{{ playbook_dir }}/debian.sources.j2"
        dest: "{{ out }}/debian.sources"
        mode: "0644"
      when: __nvidia_driver.source == 'debian'
"""
PLATFORMS = {
    "ubuntu-2404": Platform("Ubuntu", "Debian", "24", "noble", "6.8.0-51-generic"),
    "debian-12": Platform("Debian", "Debian", "12", "bookworm", "6.1.0-28-amd64"),
    "rhel-9": Platform("RedHat", "RedHat", "9", "Plow", "5.14.0-503.el9.x86_64"),
}

DEBIAN_OWN = {"nvidia_driver_source": "debian", "nvidia_driver_branch": "535"}
RESOLVED = [
    ("ubuntu-2404", {}, {"branch": "580"}),
    ("ubuntu-2404", {"nvidia_driver_secure_boot": "true"}, {"branch": "580", "secure_boot": True}),
    ("debian-12", {}, {"branch": "580"}),
    ("debian-12", DEBIAN_OWN, {"branch": "535", "source": "debian"}),
    ("rhel-9", {"nvidia_driver_nvswitches": [{"pci": "0000:05:00.0"}]}, {"branch": "580", "nvswitches": 1}),
    ("rhel-9", {"nvidia_driver_kernel_modules": "proprietary"}, {"branch": "580", "kernel_modules": "proprietary"}),
]  # fmt: skip
REFUSED = [
    ({"nvidia_driver_gpus": [{"model": "V100-SXM2-16GB"}]}, "open kernel modules do not support V100-SXM2-16GB"),
    ({"nvidia_driver_source": "debian"}, "Debian bookworm ships driver branch 535, not 580"),
    ({"nvidia_driver_kernel_modules": "closed"}, "nvidia_driver_kernel_modules"),  # the argument spec's choices
]
# Every case is a host of one run (its role variables are its host variables): resolved-N and refused-N (on Debian 12)
CASES = {f"resolved-{i}": (platform, role_vars) for i, (platform, role_vars, _) in enumerate(RESOLVED)} | {
    f"refused-{i}": ("debian-12", role_vars) for i, (role_vars, _) in enumerate(REFUSED)
}


def facts(platform: Platform) -> dict[str, str]:
    """What ``setup`` would gather on ``platform`` (of what the role reads)."""
    return {
        "distribution": platform.distribution,
        "os_family": platform.os_family,
        "distribution_major_version": platform.major_version,
        "distribution_release": platform.codename,
        "kernel": platform.kernel,
    }


def resolve_cases(tmp_path: Path) -> tuple[str, int, str, str]:
    """The playbook on every case: (directory with a HOST/ of outputs per host, exit status, stdout, stderr)."""
    (tmp_path / "library").mkdir()
    (tmp_path / "library/platform_facts.py").write_text(FACTS_MODULE)
    (tmp_path / "debian.sources.j2").write_text((REPO / "roles/nvidia_driver/templates/debian.sources.j2").read_text())
    hosts = {}
    for host, (platform, role_vars) in CASES.items():
        (tmp_path / host).mkdir()
        hosts[host] = {"platform": facts(PLATFORMS[platform]), "out": str(tmp_path / host),
                       "nvidia_driver_secure_boot": "false", **role_vars}  # fmt: skip
    env = ansible_env(ANSIBLE_LIBRARY=str(tmp_path / "library"), ANSIBLE_ROLES_PATH=str(REPO / "roles"))
    proc = playbook_on_hosts(tmp_path, PLAYBOOK, hosts, env=env)
    return str(tmp_path), proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def resolved(shared: Shared) -> tuple[Path, subprocess.CompletedProcess]:
    out, rc, stdout, stderr = shared("resolve", resolve_cases)
    return Path(out), subprocess.CompletedProcess("ansible-playbook", rc, stdout, stderr)


def plan_of(resolved: tuple[Path, subprocess.CompletedProcess], host: str) -> dict:
    """The plan ``host`` kept, after checking that none of its tasks failed."""
    out, proc = resolved
    assert recap(proc.stdout)[host]["failed"] == 0, "\n".join(failures(proc.stdout, host)) or proc.stderr
    return json.loads((out / host / "plan.json").read_text())


@pytest.mark.parametrize(("platform", "role_vars", "expected"), RESOLVED)
def test_the_role_resolves_each_platform_to_gpufleets_plan(resolved, platform, role_vars, expected):
    host = f"resolved-{RESOLVED.index((platform, role_vars, expected))}"
    assert CASES[host] == (platform, role_vars)
    assert plan_of(resolved, host) == plan_driver(PLATFORMS[platform], **expected).to_dict()


def test_the_debian_source_renders_deb822_stanzas_with_the_non_free_components(resolved):
    host = f"resolved-{next(i for i, case in enumerate(RESOLVED) if case[:2] == ('debian-12', DEBIAN_OWN))}"
    assert plan_of(resolved, host)["source"] == "debian"
    stanzas = [dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith("#"))
               for block in (resolved[0] / host / "debian.sources").read_text().strip().split("\n\n")]  # fmt: skip
    assert [s["Suites"] for s in stanzas] == ["bookworm bookworm-updates", "bookworm-security"]
    assert {s["Components"] for s in stanzas} == {"contrib non-free non-free-firmware"}
    assert {s["URIs"] for s in stanzas} == {"http://deb.debian.org/debian", "http://deb.debian.org/debian-security"}


@pytest.mark.parametrize(("role_vars", "message"), REFUSED)
def test_the_role_refuses_before_touching_the_host(resolved, role_vars, message):
    host = f"refused-{REFUSED.index((role_vars, message))}"
    out, proc = resolved
    assert proc.returncode != 0
    assert recap(proc.stdout)[host]["failed"] == 1, proc.stdout[-3000:]
    assert message in "\n".join(failures(proc.stdout, host))
    assert not (out / host / "plan.json").exists()
