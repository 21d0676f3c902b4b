"""The nvidia_container_toolkit role's inputs: every variable has one default, declared in argument_specs and listed
in the README; the stack's release becomes the packages' pinned versions; the apt source is NVIDIA's documented
line (rendered by Ansible from the role's own files, one run: each case is a host of its own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.ansible_playbook import playbook_on_hosts
from tests.conftest import REPO, Shared

ROLE = REPO / "roles/nvidia_container_toolkit"
PLAYBOOK = """
- hosts: all
  gather_facts: false
  vars:
    role: "{{ repo }}/roles/nvidia_container_toolkit"
  tasks:
    - name: The role's defaults and variables, as the role loads them
      ansible.builtin.include_vars: "{{ item }}"
      loop:
        - "{{ role }}/defaults/main.yml"
        - "{{ role }}/vars/main.yml"
        - "{{ role }}/vars/Debian.yml"
    - name: The case's own values (facts outrank the variables just loaded, as extra vars would)
      ansible.builtin.set_fact:
        "{{ item.key }}": "{{ item.value }}"
      loop: "{{ variables | dict2items }}"
    - name: The stack's release
      ansible.builtin.set_fact:
        nvidia_container_toolkit_version: "{{ lookup('gpufleet_plan', stack).release.container_toolkit }}"
      when: stack | length > 0
    - name: Render the apt source
      ansible.builtin.template:
        src: "{{ role }}/templates/nvidia-container-toolkit.list.j2"
        dest: "{{ out }}.list"
        mode: "0644"
    - name: Save what the install tasks would ask for
      ansible.builtin.copy:
        content: >-
          {{ {'version': __nvidia_container_toolkit_package_version, 'apt': __nvidia_container_toolkit_apt_specs | list,
              'dnf': __nvidia_container_toolkit_dnf_specs | list} | to_json }}
        dest: "{{ out }}.json"
        mode: "0644"
"""
STACKS = ["Pulumi.lab-local.yaml", "tests/fixtures/gpu-software/Pulumi.prod-onprem.yaml"]
# Every case is a host of one run: {host: (stack, the role variables it sets)}
CASES = {
    **{f"stack-{i}": (str(REPO / stack), {}) for i, stack in enumerate(STACKS)},
    "revision": ("", {"nvidia_container_toolkit_version": "1.17.8", "nvidia_container_toolkit_package_revision": "2"}),
    "defaults": ("", {}),
    "mirror": ("", {"nvidia_container_toolkit_repo_url": "http://mirror.example.invalid/nvct",
                    "nvidia_container_toolkit_repo_channel": "experimental"}),
}  # fmt: skip


def render_cases(tmp_path: Path) -> dict[str, tuple[dict, str]]:
    """{host: (what its install tasks would ask for, its apt source)}, from one run of the playbook."""
    hosts = {
        host: {"repo": str(REPO), "stack": stack, "variables": variables, "out": str(tmp_path / host)}
        for host, (stack, variables) in CASES.items()
    }
    proc = playbook_on_hosts(tmp_path, PLAYBOOK, hosts)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        host: (json.loads((tmp_path / f"{host}.json").read_text()), (tmp_path / f"{host}.list").read_text())
        for host in CASES
    }


@pytest.fixture(scope="module")
def rendered(shared: Shared) -> dict[str, tuple[dict, str]]:
    return shared("toolkit", render_cases)


def test_every_variable_has_one_default_declared_in_argument_specs_and_the_readme():
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    main = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(defaults) == set(main)
    for name, spec in main.items():
        assert spec.get("default") == defaults[name], name
    readme = (ROLE / "README.md").read_text()
    for name in defaults:
        assert f"| `{name}` |" in readme, name
    verify = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["verify"]["options"]
    for name, spec in verify.items():
        assert spec.get("default") == defaults[name], name


@pytest.mark.parametrize("stack", STACKS)
def test_the_stacks_release_pins_all_four_packages(rendered, stack):
    release = yaml.safe_load((REPO / stack).read_text())["config"]["gpufleet:release"]
    assert release["container_toolkit"] == "v1.20.0"
    pinned, _ = rendered[f"stack-{STACKS.index(stack)}"]  # the gpufleet_plan lookup, as kubernetes.yml
    assert pinned == {
        "version": "1.20.0-1",
        "apt": [
            "nvidia-container-toolkit=1.20.0-1",
            "nvidia-container-toolkit-base=1.20.0-1",
            "libnvidia-container-tools=1.20.0-1",
            "libnvidia-container1=1.20.0-1",
        ],
        "dnf": [
            "nvidia-container-toolkit-1.20.0-1",
            "nvidia-container-toolkit-base-1.20.0-1",
            "libnvidia-container-tools-1.20.0-1",
            "libnvidia-container1-1.20.0-1",
        ],
    }


def test_a_release_without_v_and_another_revision(rendered):
    pinned, _ = rendered["revision"]
    assert pinned["version"] == "1.17.8-2"


def test_the_apt_source_is_nvidias_flat_repository_signed_by_its_key(rendered):
    _, source = rendered["defaults"]
    lines = [line for line in source.splitlines() if not line.startswith("#")]
    assert lines == [
        "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /"
    ]
    _, mirror = rendered["mirror"]
    assert "] http://mirror.example.invalid/nvct/experimental/deb/$(ARCH) /" in mirror
