"""The gpu_topology module and the gpufleet filters, run by ansible-playbook against recorded host trees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.hostfacts import read_host
from tests.conftest import FIXTURES, REPO

HOSTS = sorted(p.name for p in (FIXTURES / "hosts").iterdir() if p.is_dir())

PLAYBOOK = """
- hosts: localhost
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


def run_playbook(tmp_path: Path, root: Path, extra: dict | None = None) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    variables = {"root": str(root), "out": str(tmp_path / "out.json"), "host_label": root.name, **(extra or {})}
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            json.dumps(variables),
            str(play),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("name", HOSTS)
def test_module_returns_the_facts_of_each_recorded_machine(tmp_path: Path, name: str):
    root = FIXTURES / "hosts" / name
    proc = run_playbook(tmp_path, root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads((tmp_path / "out.json").read_text())["facts"]
    mapping = load_catalog().gpus_by_pci_id
    # the module ships gpufleet/hostfacts.py to the host: it must answer exactly what the library answers
    assert facts == json.loads(json.dumps(read_host(str(root), mapping)))
    if name == "numa-unknown":
        assert {g["numa_node"] for g in facts["gpus"]} == {None}
    if name.startswith("dgx"):
        assert facts["gpus"] and all(g["model"] and g["mig_capable"] for g in facts["gpus"])


def test_plan_filter_on_the_controller(tmp_path: Path):
    proc = run_playbook(
        tmp_path, FIXTURES / "hosts/hgx-h200", {"profile": {"hugepages_1g_per_gpu": 2, "vfs_per_nic": 4}}
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())["plan"]
    assert result["host"] == "hgx-h200"
    assert "hugepages=0:8,1:8" in result["kernel_args"] and "intel_iommu=on" in result["kernel_args"]
    # the default 4-16 cores per GPU: 48 cores a node, one for the system, four GPUs: 11 cores (22 CPUs) each
    assert len(result["gpus"]) == 8 and all(len(g["cpus"]) == 22 for g in result["gpus"])


def test_plan_filter_refusal_fails_the_task_with_the_reason(tmp_path: Path):
    proc = run_playbook(tmp_path, FIXTURES / "hosts/dgx-a100", {"profile": {"cores_per_gpu": 9}})
    assert proc.returncode != 0
    assert "host dgx-a100: NUMA node 1 has 16 physical cores for 2 GPU(s); cores_per_gpu min 9 needs 18" in proc.stdout


def test_module_check_mode_and_missing_root(tmp_path: Path):
    proc = run_playbook(tmp_path, tmp_path / "nowhere")
    assert proc.returncode != 0 and "no NUMA node under" in proc.stdout


def test_module_fails_naming_the_file_when_a_fact_is_garbage(tmp_path: Path):
    root = tmp_path / "lab-vm"
    shutil.copytree(FIXTURES / "hosts/lab-vm", root)
    (root / "sys/devices/system/node/node1/cpulist").write_text("3-2\n")
    proc = run_playbook(tmp_path, root)
    assert proc.returncode != 0
    assert f"{root}/sys/devices/system/node/node1/cpulist: is not a CPU list: the range 3-2 is reversed" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
