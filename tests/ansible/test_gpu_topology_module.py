"""The gpu_topology module and the gpufleet filters, run by ansible-playbook against recorded host trees.

One run of the playbook checks every case: each is a host of the inventory (connection local) with its own host
root, output file and tuning profile, so a host whose task fails (a missing root, a garbage fact, a refused plan)
stops only itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.host.hostfacts import read_host
from tests.ansible_playbook import failures, playbook_on_hosts, recap
from tests.conftest import FIXTURES, Shared

HOSTS = sorted(p.name for p in (FIXTURES / "hosts").iterdir() if p.is_dir())

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Discover
      gpu_topology:
        host_root: "{{ root }}"
        gpu_catalog: "{{ {} | gpufleet_gpu_catalog }}"
    - name: Plan
      ansible.builtin.set_fact:
        tuning_plan: "{{ gpu_topology | gpufleet_topology_plan(profile, host_label) }}"
      when: profile is defined
    - name: Save
      ansible.builtin.copy:
        content: "{{ {'facts': gpu_topology, 'plan': tuning_plan | default(None)} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""
# The cases besides one host per recorded machine (named after it)
PLANNED = "plan-hgx-h200"
REFUSED = "refused-dgx-a100"
MISSING = "missing-root"
GARBAGE = "garbage-cpulist"


def cases(tmp_path: Path) -> dict[str, tuple[Path, str, dict | None]]:
    """{host: (its host root, the label its plan names, its tuning profile or None: no plan)}."""
    garbage = tmp_path / "lab-vm"
    shutil.copytree(FIXTURES / "hosts/lab-vm", garbage)
    (garbage / "sys/devices/system/node/node1/cpulist").write_text("3-2\n")
    return {
        **{name: (FIXTURES / "hosts" / name, name, None) for name in HOSTS},
        PLANNED: (FIXTURES / "hosts/hgx-h200", "hgx-h200", {"hugepages_1g_per_gpu": 2, "vfs_per_nic": 4}),
        REFUSED: (FIXTURES / "hosts/dgx-a100", "dgx-a100", {"cores_per_gpu": 9}),
        MISSING: (tmp_path / "nowhere", MISSING, None),
        GARBAGE: (garbage, GARBAGE, None),
    }


def run_cases(tmp_path: Path) -> tuple[str, int, str]:
    """The playbook on every case: (directory of HOST.json outputs, exit status, output)."""
    hosts = {}
    for host, (root, label, profile) in cases(tmp_path).items():
        hosts[host] = {"root": str(root), "out": str(tmp_path / f"{host}.json"), "host_label": label}
        if profile is not None:
            hosts[host]["profile"] = profile
    proc = playbook_on_hosts(tmp_path, PLAYBOOK, hosts)
    return str(tmp_path), proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def run(shared: Shared) -> tuple[Path, int, str]:
    out, rc, output = shared("topology", run_cases)
    return Path(out), rc, output


def saved(run: tuple[Path, int, str], host: str) -> dict:
    """What ``host`` saved, after checking that none of its tasks failed."""
    out, _, output = run
    assert recap(output)[host]["failed"] == 0, "\n".join(failures(output, host))
    return json.loads((out / f"{host}.json").read_text())


def refusal(run: tuple[Path, int, str], host: str) -> str:
    """The failed task's line of ``host``, after checking that it failed the run and saved nothing."""
    out, rc, output = run
    assert rc != 0 and recap(output)[host]["failed"] == 1, output[-3000:]
    assert not (out / f"{host}.json").exists()
    (line,) = failures(output, host)
    return line


@pytest.mark.parametrize("name", HOSTS)
def test_module_returns_the_facts_of_each_recorded_machine(run, name: str):
    root = FIXTURES / "hosts" / name
    facts = saved(run, name)["facts"]
    mapping = load_catalog().gpus_by_pci_id
    # the module ships gpufleet/host/hostfacts.py to the host: it must answer exactly what the library answers
    assert facts == json.loads(json.dumps(read_host(str(root), mapping)))
    if name == "numa-unknown":
        assert {g["numa_node"] for g in facts["gpus"]} == {None}
    if name.startswith("dgx"):
        assert facts["gpus"] and all(g["model"] and g["mig_capable"] for g in facts["gpus"])


def test_plan_filter_on_the_controller(run):
    result = saved(run, PLANNED)["plan"]
    assert result["host"] == "hgx-h200"
    assert "hugepages=0:8,1:8" in result["kernel_args"] and "intel_iommu=on" in result["kernel_args"]
    # the default 4-16 cores per GPU: 48 cores a node, one for the system, four GPUs: 11 cores (22 CPUs) each
    assert len(result["gpus"]) == 8 and all(len(g["cpus"]) == 22 for g in result["gpus"])


def test_plan_filter_refusal_fails_the_task_with_the_reason(run):
    line = refusal(run, REFUSED)
    assert "host dgx-a100: NUMA node 1 has 16 physical cores for 2 GPU(s); cores_per_gpu min 9 needs 18" in line


def test_module_check_mode_and_missing_root(run):
    assert "no NUMA node under" in refusal(run, MISSING)


def test_module_fails_naming_the_file_when_a_fact_is_garbage(run):
    root = run[0] / "lab-vm"
    line = refusal(run, GARBAGE)
    assert f"{root}/sys/devices/system/node/node1/cpulist: is not a CPU list: the range 3-2 is reversed" in line
    assert "Traceback" not in run[2]
