"""Slurm lines of a bare-metal host (gpufleet/host/slurm.py, `gpufleet topology slurm`, docs/queues.md) from recorded
hosts' facts (tests/fixtures/hosts): the node line matches the machine, MIG GPUs are left to NVML autodetection and
counted by profile, whole GPUs keep their explicit gres.conf line with their NUMA node's cores."""

from __future__ import annotations

import json
import re

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.host.hostfacts import parse_cpulist, read_host
from gpufleet.host.slurm import AUTODETECT_NVML, slurm_node
from gpufleet.host.topology import plan
from gpufleet.spec.models import MigLayout, TuningProfile
from tests.conftest import FIXTURES, cli
from tests.stacks import release_block

DGX = FIXTURES / "hosts" / "dgx-h100"
HALF_MIG = MigLayout.model_validate(
    {"config_name": "half", "devices": [{"gpus": [0, 1, 2, 3], "profiles": {"1g.10gb": 2, "3g.40gb": 1}}]}
)


@pytest.fixture(scope="module")
def dgx():
    facts = read_host(str(DGX), load_catalog().gpus_by_pci_id)
    return facts, plan(facts, TuningProfile(hugepages_1g_per_gpu=8), "dgx-h100")


def _fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split())


def test_a_dgx_h100s_node_line_is_two_sockets_of_56_cores_with_its_eight_gpus(dgx):
    facts, p = dgx
    node = slurm_node(facts, p, "gpu-a01", None)
    fields = _fields(node.node_line)
    assert fields["NodeName"] == "gpu-a01"
    assert (fields["Sockets"], fields["CoresPerSocket"], fields["ThreadsPerCore"]) == ("2", "56", "2")
    # 2 TiB less the 64 x 1 GiB hugepages (8 per GPU) set aside for them
    assert fields["RealMemory"] == str(2 * 1024 * 1024 - 64 * 1024)
    assert fields["Gres"] == "gpu:h100-sxm5-80gb:8"
    assert node.gres_conf == tuple(p.gres_conf) and AUTODETECT_NVML not in node.gres_conf


def test_mig_gpus_are_autodetected_and_counted_by_profile(dgx):
    facts, p = dgx
    node = slurm_node(facts, p, "gpu-a01", HALF_MIG)
    assert node.gres_conf[0] == AUTODETECT_NVML
    files = [re.search(r"File=(\S+)", line)[1] for line in node.gres_conf[1:]]
    assert files == ["/dev/nvidia4", "/dev/nvidia5", "/dev/nvidia6", "/dev/nvidia7"]  # the GPUs left whole
    # GPUs 0-3: 2 x 1g.10gb + 1 x 3g.40gb each; 4-7 whole
    assert _fields(node.node_line)["Gres"] == "gpu:h100-sxm5-80gb:4,gpu:1g.10gb:8,gpu:3g.40gb:4"


def test_each_whole_gpus_cores_are_on_its_own_numa_node(dgx):
    facts, p = dgx
    node = slurm_node(facts, p, "gpu-a01", HALF_MIG)
    logical = {
        tuple(c["cpus"]): i for i, c in enumerate(sorted(facts["cores"], key=lambda c: (c["package"], c["cpus"][0])))
    }
    numa = {i: c["numa_node"] for c in facts["cores"] for key, i in logical.items() if key == tuple(c["cpus"])}
    for line in node.gres_conf[1:]:
        index = int(re.search(r"/dev/nvidia(\d+)", line)[1])
        gpu = next(a for a in p.gpus if a.index == index)
        cores = parse_cpulist(re.search(r"Cores=(\S+)", line)[1])
        assert {numa[c] for c in cores} == {gpu.numa_node}


def test_the_command_takes_the_layout_and_profile_from_the_stacks_host_group(tmp_path):
    stack = tmp_path / "Pulumi.prod-onprem.yaml"
    stack.write_text(
        "config:\n  gpufleet:stage: prod\n  gpufleet:region: onprem\n"
        + release_block()
        + """  gpufleet:baremetal:
    inventory: inventories/prod-onprem
    host_groups:
      - name: h100mig
        gpu_model: H100-SXM5-80GB
        gpus_per_host: 8
        mig:
          config_name: all-1g
          devices:
            - gpus: all
              profiles: {1g.10gb: 7}
"""
    )
    args = ["topology", "slurm", "--host-root", str(DGX), "--stack", str(stack), "--host-group", "h100mig", "--json"]
    proc = cli(*args, "--node-name", "gpu-m01")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["gres_conf"] == [AUTODETECT_NVML]
    assert result["slurm_conf"].endswith(" Gres=gpu:1g.10gb:56")
    assert result["slurm_conf"].startswith("NodeName=gpu-m01 ")
    missing = cli(*args[:-2], "nope")
    assert missing.returncode == 2 and "no host group 'nope'" in missing.stderr


def test_a_host_group_without_a_stack_is_a_usage_error():
    proc = cli("topology", "slurm", "--host-root", str(DGX), "--host-group", "h100")
    assert proc.returncode == 2 and "--stack" in proc.stderr
