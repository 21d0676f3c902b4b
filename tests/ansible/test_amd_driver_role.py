"""The amd_driver role's platform step (tasks/os.yml: AMD's repository line per OS, one failed task for an OS AMD's
repositories do not serve) and the apt files it writes (templates: the deb822 source with Signed-By, the pin of AMD's
origin above the distribution's packages, the sysctl file), run by ansible-playbook with each platform's facts: one
run, each case a host of its own (connection local). Nothing is installed here: the lab installs the role's packages
from stand-in repositories in a system container (tests/lab/test_containers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ansible_playbook import ansible_env, failures, playbook_on_hosts, recap
from tests.conftest import REPO

ROLE = REPO / "roles/amd_driver"
FACTS_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""
PLAY = f"""
- hosts: all
  gather_facts: false
  tasks:
    - name: Report the platform's facts
      platform_facts:
        facts: "{{{{ platform }}}}"
    - name: The role's platform step
      ansible.builtin.include_role:
        name: amd_driver
        tasks_from: os
        public: true
    - name: Render the role's files
      ansible.builtin.template:
        src: "{ROLE}/templates/{{{{ item }}}}.j2"
        dest: "{{{{ out }}}}/{{{{ item }}}}"
        mode: "0644"
      loop: [amd.sources, amd.pref, sysctl.conf]
"""


def platform(distribution: str, version: str, arch: str = "x86_64") -> dict[str, str]:
    return {
        "distribution": distribution,
        "distribution_version": version,
        "distribution_major_version": version.split(".")[0],
        "os_family": "Debian" if distribution in ("Debian", "Ubuntu") else "RedHat",
        "architecture": arch,
        "kernel": "6.8.0-51-generic",
    }


MIRROR = {"amd_driver_amdgpu_repo": "http://mirror.example/amdgpu/30.10.1/ubuntu",
          "amd_driver_rocm_repo": "https://rocm-mirror.example/rocm/apt/7.0.1"}  # fmt: skip
LOCAL = {"amd_driver_amdgpu_repo": "file:///srv/amdgpu", "amd_driver_rocm_repo": "file:///srv/rocm"}
# host: (platform, role variables, the suite)
SERVED = {
    "debian-12": (platform("Debian", "12.8"), {}, "jammy"),
    "ubuntu-2204": (platform("Ubuntu", "22.04"), {}, "jammy"),
    "ubuntu-2404": (platform("Ubuntu", "24.04"), {}, "noble"),
    "suite-set": (platform("Debian", "12.8"), {"amd_driver_suite": "noble"}, "noble"),
    "mirror": (platform("Ubuntu", "24.04"), MIRROR, "noble"),
    "local": (platform("Debian", "12.8"), LOCAL, "jammy"),
}
REFUSED = {
    "rhel-9": platform("RedHat", "9.4"),
    "ubuntu-2210": platform("Ubuntu", "22.10"),
    "debian-13": platform("Debian", "13.1"),
    "arm64": platform("Ubuntu", "24.04", "aarch64"),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp_path = tmp_path_factory.mktemp("amd-driver")
    library = tmp_path / "library"
    library.mkdir()
    (library / "platform_facts.py").write_text(FACTS_MODULE)
    hosts = {}
    for host, (facts, variables, _) in SERVED.items():
        (tmp_path / host).mkdir()
        hosts[host] = {"platform": facts, "out": str(tmp_path / host), **variables}
    for host, facts in REFUSED.items():
        hosts[host] = {"platform": facts, "out": str(tmp_path)}
    env = ansible_env(ANSIBLE_LIBRARY=f"{library}:{REPO / 'ansible/plugins/modules'}")
    (tmp_path / "play").mkdir()
    proc = playbook_on_hosts(tmp_path / "play", PLAY, hosts, env=env)
    return tmp_path, proc.stdout + proc.stderr


def test_each_served_os_gets_its_line_of_amds_repositories(run):
    tmp_path, output = run
    counts = recap(output)
    for host, (_, variables, suite) in SERVED.items():
        assert counts[host]["failed"] == 0, output[-3000:]
        sources = (tmp_path / host / "amd.sources").read_text()
        amdgpu = variables.get("amd_driver_amdgpu_repo", "https://repo.radeon.com/amdgpu/30.10.1/ubuntu")
        rocm = variables.get("amd_driver_rocm_repo", "https://repo.radeon.com/rocm/apt/7.0.1")
        stanzas = [s for s in sources.split("\n\n") if "Types: deb" in s]
        assert [s[s.index("Types:") :] for s in stanzas] == [
            f"Types: deb\nURIs: {uri}\nSuites: {suite}\nComponents: main\nArchitectures: amd64\n"
            "Signed-By: /etc/apt/keyrings/rocm.asc" + ("\n" if uri == rocm else "")
            for uri in (amdgpu, rocm)
        ], host


def pins(tmp_path: Path, host: str) -> list[str]:
    return [line for line in (tmp_path / host / "amd.pref").read_text().splitlines() if not line.startswith("#")]


def test_amds_origin_is_pinned_above_the_distributions_packages(run):
    tmp_path, _ = run
    assert pins(tmp_path, "debian-12") == ["Package: *", "Pin: origin repo.radeon.com", "Pin-Priority: 1001"]
    # a mirror with each repository on its own host: both origins
    assert pins(tmp_path, "mirror") == [
        "Package: *", "Pin: origin mirror.example", "Pin-Priority: 1001", "",
        "Package: *", "Pin: origin rocm-mirror.example", "Pin-Priority: 1001",
    ]  # fmt: skip
    # local (file:) repositories: apt's origin of a local repository is ""
    assert pins(tmp_path, "local") == ["Package: *", 'Pin: origin ""', "Pin-Priority: 1001"]


def test_numa_balancing_is_off_in_the_sysctl_file(run):
    tmp_path, _ = run
    text = (tmp_path / "debian-12" / "sysctl.conf").read_text()
    assert [line for line in text.splitlines() if not line.startswith("#")] == ["kernel.numa_balancing = 0"]


def test_an_os_amds_repositories_do_not_serve_is_refused_by_one_task_saying_so(run):
    _, output = run
    counts = recap(output)
    for host, facts in REFUSED.items():
        assert counts[host]["failed"] == 1 and counts[host]["changed"] == 0, output[-3000:]
        found = failures(output, host)
        assert len(found) == 1, found
        assert (
            f"amd_driver: {facts['distribution']} {facts['distribution_version']} ({facts['architecture']}) is not"
            " served by AMD's amdgpu and ROCm repositories for Instinct GPUs; the role supports Ubuntu 22.04, Ubuntu"
            " 24.04 and Debian 12 on x86_64" in found[0]
        ), host
        assert "Refuse an OS AMD's repositories do not serve" in output
