"""verify.yml's AMD columns (amdgpu: the amd_driver role's verify tasks; partitions: the amd_partition role's), run
for real by ansible-playbook against this machine (connection local), as tests/ansible/test_verify_playbook.py runs
the NVIDIA checks: each host of the inventory is a scenario with a plan this machine meets (its helpers), the host's
topology given as the recorded-shape MI300X host (tests/fixtures/hosts/mi300x-epyc, a TEST DOUBLE; the extra var
``gpu_topology`` outranks the module's facts) and TEST DOUBLES of what the AMD checks read: ``dpkg-query`` and
``modinfo`` first on PATH, ``/sys/module/amdgpu/version`` below the host's root, and the amdgpu partition files and
amd-smi of tests/lab/standins/fake_amd.py. The stack (written here) pins amdgpu 30.10.1 and ROCm 7.0.1 and has a host
group whose partitions the host manages (CPX/NPS4) and one whose partitions the AMD GPU Operator manages.

Stacks that pin no AMD release keep the NVIDIA table as it was: test_verify_playbook.py's rows are exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.host.hostfacts import read_host
from tests.ansible.test_verify_playbook import KUBELET, NODE0_2M, Scenario, plan, row, skips, table
from tests.ansible_playbook import ansible_playbook
from tests.conftest import FIXTURES
from tests.lab.standins import FAKE_AMD

pytestmark = pytest.mark.skipif(not NODE0_2M.exists(), reason="this machine has no 2 MiB hugepage counter on node 0")

STACK = """
config:
  gpufleet:stage: lab
  gpufleet:region: amdverify
  gpufleet:release:
    kubernetes: "1.36"
    gpu_operator: v26.7.0
    device_plugin: v0.20.0
    driver_branch: "595"
    mig_parted: v0.15.0
    container_toolkit: v1.20.0
    dra_driver: v0.5.0
    nfd: v0.19.0
    amdgpu: "30.10.1"
    rocm: "7.0.1"
  gpufleet:baremetal:
    inventory: inventories/lab-local
    rollout: {serial: 4, max_fail_percentage: 100, reboot_ok: false}
    host_groups:
      - name: mi300x
        gpu_model: MI300X
        gpus_per_host: 8
        amd_partitions: {profile: cpx-nps4, memory: NPS4, devices: [{compute: CPX, gpus: all}]}
      - name: mi300x_dcm
        gpu_model: MI300X
        gpus_per_host: 8
        amd_partitions: {managed_by: operator, profile: cpx-nps4, memory: NPS4, devices: [{compute: CPX, gpus: all}]}
"""
AMD = {
    "amdgpu-dkms": "1:6.14.14.30100100-2212064.22.04",
    "amd-smi-lib": "26.0.1.70001-42~22.04",
    "rocminfo": "1.0.0.70001-42~22.04",
    "rocm-smi-lib": "7.8.0.70001-42~22.04",
}
CATALOG = load_catalog().gpus_by_pci_id
MI300X = read_host(str(FIXTURES / "hosts/mi300x-epyc"), CATALOG)
NO_GPU = read_host(str(FIXTURES / "hosts/no-gpu"), CATALOG)


def amd_host(d: Path, packages: dict[str, str], modes: tuple[str, str], topology: dict) -> dict[str, Any]:
    """A host's TEST DOUBLES below ``d``: dpkg-query listing ``packages``, modinfo and a loaded amdgpu 6.14.14, eight
    stand-in MI300X GPUs in ``modes`` (compute, memory) with their amd-smi; its variables."""
    bin_dir, root = d / "bin", d / "root"
    (d / "impl").mkdir(parents=True)
    bin_dir.mkdir()
    (root / "sys/module/amdgpu").mkdir(parents=True)
    (root / "sys/module/amdgpu/version").write_text("6.14.14\n")
    (d / "dpkg.out").write_text("".join(f"ii  {name}={version}\n" for name, version in packages.items()))
    scripts = {
        "dpkg-query": f"#!/bin/sh\ncat '{d / 'dpkg.out'}'\n",
        "modinfo": "#!/bin/sh\necho 6.14.14\n",
        "amd-smi": f"#!/bin/sh\nGPUFLEET_FAKE_AMD_SYSFS='{d / 'sys'}' exec '{sys.executable}' '{d / 'impl/amd-smi'}'"
        ' "$@"\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (d / "impl/amd-smi").symlink_to(FAKE_AMD)
    subprocess.run(
        [sys.executable, str(FAKE_AMD), "build", "--gpus", "8", "--compute", modes[0], "--memory", modes[1]],
        env={"GPUFLEET_FAKE_AMD_SYSFS": str(d / "sys")}, check=True, capture_output=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    python = d / "python"
    python.write_text(f"#!/bin/sh\nPATH='{bin_dir}':\"$PATH\" exec '{sys.executable}' \"$@\"\n")
    python.chmod(0o755)
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": str(python),
        "amd_driver_host_root": str(root),
        "amd_partition_sysfs_root": str(d / "sys"),
        "amd_partition_smi": str(bin_dir / "amd-smi"),
        "verify_test_topology": topology,
        "verify_test_plan": plan(Scenario("met", "ok")),
        "gpufleet_remediation_file": str(d / "remediation.json"),
    }


# host: (its group, its packages, its GPUs' modes, its topology)
HOSTS = {
    "amd-ok": ("mi300x", AMD, ("CPX", "NPS4"), MI300X),
    # Debian's rocminfo where AMD's belongs; the GPUs still in SPX/NPS1: the reload the rollout does not allow
    "amd-debian-rocminfo": ("mi300x", AMD | {"rocminfo": "5.2.3-2"}, ("SPX", "NPS1"), MI300X),
    "amd-dcm": ("mi300x_dcm", AMD, ("SPX", "NPS1"), MI300X),
    "no-amd-gpu": (None, {}, ("SPX", "NPS1"), NO_GPU),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    tmp_path = tmp_path_factory.mktemp("verify-amd")
    stack = tmp_path / "stack/Pulumi.lab-amdverify.yaml"
    stack.parent.mkdir()
    stack.write_text(STACK)
    (tmp_path / "kubelet.conf").write_text(KUBELET)
    inventory: dict[str, Any] = {"all": {"hosts": {}, "children": {}}}
    for host, (group, packages, modes, topology) in HOSTS.items():
        variables = amd_host(tmp_path / host, packages, modes, topology) | {"verify_test_stack": str(stack)}
        where = inventory["all"]["children"].setdefault(group, {"hosts": {}}) if group else inventory["all"]
        where["hosts"][host] = variables
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))  # JSON is YAML
    extra = {
        "gpufleet_plan": "{{ verify_test_plan }}",
        "gpufleet_stack": "{{ verify_test_stack }}",
        "gpu_topology": "{{ verify_test_topology }}",
        "numa_pinning_kubelet_dropin": str(tmp_path / "kubelet.conf"),
    }
    proc = ansible_playbook("-i", tmp_path / "hosts.yml", "ansible/playbooks/verify.yml", local=False, extra_vars=extra)
    return proc.returncode, proc.stdout + proc.stderr


def test_an_amd_host_as_planned_passes_its_amd_checks(run):
    _, output = run
    lines = table(output)
    cells = row(lines, "amd-ok")
    assert (cells["result"], cells["amdgpu"], cells["partitions"]) == ("ok", "ok", "ok"), "\n".join(lines)
    assert "AMD GPU(s) in their planned partitions (amd-smi): CPX, CPX, CPX, CPX, CPX, CPX, CPX, CPX / NPS4" in output
    assert "amdgpu 30.10.1 (amdgpu-dkms 1:6.14.14.30100100-2212064.22.04) and ROCm 7.0.1 installed; amdgpu 6.14.14" in (
        output
    )
    # the NVIDIA checks do not apply to it, and say why
    assert skips(lines, "amd-ok")["driver"] == "no NVIDIA GPU, and nvidia_driver_branch is not set"


def test_debians_rocminfo_and_a_partition_left_for_a_reload_fail_naming_why(run):
    rc, output = run
    assert rc == 2, output[-3000:]
    lines = table(output)
    cells = row(lines, "amd-debian-rocminfo")
    assert (cells["result"], cells["amdgpu"], cells["partitions"]) == ("FAIL", "FAIL", "FAIL")
    found = [line for line in lines[lines.index("failures:") + 1 :] if line.startswith("  amd-debian-rocminfo  ")]
    assert found == [
        "  amd-debian-rocminfo  amdgpu: rocminfo 5.2.3-2 is not ROCm 7.0.1's (AMD's versions of it carry .70001-): is"
        " AMD's repository pinned above the distribution's packages?",
        "  amd-debian-rocminfo  partitions: GPUs 0-7: memory partition NPS1, planned NPS4 (amd-smi): it takes a driver"
        " reload (modprobe -r amdgpu && modprobe amdgpu), which amd_partition_reload_ok does not allow; GPUs 0-7:"
        " compute partition SPX, planned CPX (amd-smi): left for after that reload",
    ]


def test_partitions_the_operator_manages_and_hosts_without_amd_gpus_are_skipped_saying_why(run):
    _, output = run
    lines = table(output)
    assert row(lines, "amd-dcm")["amdgpu"] == "ok"
    assert skips(lines, "amd-dcm")["partitions"] == (
        "its host group's partitions are the AMD GPU Operator's (managed_by: operator)"
    )
    reasons = skips(lines, "no-amd-gpu")
    assert reasons["amdgpu"] == reasons["partitions"] == "no AMD GPU"
