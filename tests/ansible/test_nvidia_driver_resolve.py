"""The nvidia_driver role's own resolve step per platform (the host's facts -> the install plan through the role's
filter and argument spec) and its rendered apt source, run by ansible-playbook with each platform's facts.

The lab installs Debian's packages for real (``make test-slow``); this pins what the role would do elsewhere."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpufleet.driver import Platform, plan_driver
from tests.ansible_playbook import ansible_env, ansible_playbook
from tests.conftest import REPO

# A module that reports the facts of another platform (what `setup` would gather there)
FACTS_MODULE = """#!/usr/bin/python
import json, sys
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""
PLAYBOOK = """
- hosts: localhost
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


def resolve(tmp_path: Path, platform: Platform, role_vars: dict) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "library").mkdir(exist_ok=True)
    (tmp_path / "library/platform_facts.py").write_text(FACTS_MODULE)
    (tmp_path / "debian.sources.j2").write_text((REPO / "roles/nvidia_driver/templates/debian.sources.j2").read_text())
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    facts = {
        "distribution": platform.distribution,
        "os_family": platform.os_family,
        "distribution_major_version": platform.major_version,
        "distribution_release": platform.codename,
        "kernel": platform.kernel,
    }
    variables = {"platform": facts, "out": str(tmp_path), "nvidia_driver_secure_boot": "false", **role_vars}
    env = ansible_env(ANSIBLE_LIBRARY=str(tmp_path / "library"), ANSIBLE_ROLES_PATH=str(REPO / "roles"))
    proc = ansible_playbook(tmp_path / "play.yml", extra_vars=variables, env=env)
    return proc, tmp_path


@pytest.mark.parametrize(
    ("platform", "role_vars", "expected"),
    [
        ("ubuntu-2404", {}, {"branch": "580"}),
        ("ubuntu-2404", {"nvidia_driver_secure_boot": "true"}, {"branch": "580", "secure_boot": True}),
        ("debian-12", {}, {"branch": "580"}),
        ("debian-12", DEBIAN_OWN, {"branch": "535", "source": "debian"}),
        ("rhel-9", {"nvidia_driver_nvswitches": [{"pci": "0000:05:00.0"}]}, {"branch": "580", "nvswitches": 1}),
        ("rhel-9", {"nvidia_driver_kernel_modules": "proprietary"}, {"branch": "580", "kernel_modules": "proprietary"}),
    ],
)  # fmt: skip
def test_the_role_resolves_each_platform_to_gpufleets_plan(tmp_path, platform, role_vars, expected):
    proc, out = resolve(tmp_path, PLATFORMS[platform], role_vars)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert json.loads((out / "plan.json").read_text()) == plan_driver(PLATFORMS[platform], **expected).to_dict()


def test_the_debian_source_renders_deb822_stanzas_with_the_non_free_components(tmp_path):
    proc, out = resolve(
        tmp_path, PLATFORMS["debian-12"], {"nvidia_driver_source": "debian", "nvidia_driver_branch": "535"}
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    stanzas = [dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith("#"))
               for block in (out / "debian.sources").read_text().strip().split("\n\n")]  # fmt: skip
    assert [s["Suites"] for s in stanzas] == ["bookworm bookworm-updates", "bookworm-security"]
    assert {s["Components"] for s in stanzas} == {"contrib non-free non-free-firmware"}
    assert {s["URIs"] for s in stanzas} == {"http://deb.debian.org/debian", "http://deb.debian.org/debian-security"}


@pytest.mark.parametrize(
    ("role_vars", "message"),
    [
        ({"nvidia_driver_gpus": [{"model": "V100-SXM2-16GB"}]}, "open kernel modules do not support V100-SXM2-16GB"),
        ({"nvidia_driver_source": "debian"}, "Debian bookworm ships driver branch 535, not 580"),
        ({"nvidia_driver_kernel_modules": "closed"}, "nvidia_driver_kernel_modules"),  # the argument spec's choices
    ],
)
def test_the_role_refuses_before_touching_the_host(tmp_path, role_vars, message):
    proc, _ = resolve(tmp_path, PLATFORMS["debian-12"], role_vars)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
