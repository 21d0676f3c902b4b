"""AMD Instinct in the plan (docs/amd.md): an AMD pool is driven by AMD's software alone (AKS installs no driver, no
NVIDIA chart or label reaches it), a host group's partitions become the logical GPUs and memory the catalog's rule
gives, the host view hands the roles the partitions and the AMD pins, and the release block keeps absent AMD pins
out of the plan."""

from __future__ import annotations

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.plan import hosts
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack_text
from tests.conftest import TODAY
from tests.stacks import release_block

AKS_HEAD = """\
config:
  gpufleet:stage: dev
  gpufleet:region: eastus
{release}  gpufleet:aks:
    cluster:
      network: {{vnet_cidr: 10.40.0.0/16, subnet_cidr: 10.40.0.0/20}}
    gpu_software: {{amd_driver_image: registry.example.net/amd/amdgpu-driver}}
    gpu_pools:
"""
MI300X_POOL = """\
      - name: mi300x
        vm_size: Standard_ND96isr_MI300X_v5
        count: 1
"""
PARTITIONED_POOL = """\
      - name: mi300xcpx
        vm_size: Standard_ND96isr_MI300X_v5
        count: 2
        amd_partitions: {managed_by: operator, profile: cpx-nps4, memory: NPS4, devices: [{compute: CPX}]}
"""
NVIDIA_POOL = """\
      - name: h100
        vm_size: Standard_ND96isr_H100_v5
        count: 1
"""
BAREMETAL = """\
config:
  gpufleet:stage: dev
  gpufleet:region: onprem
{release}  gpufleet:baremetal:
    inventory: inventories/dev-onprem
    host_groups:
      - name: mi300x
        gpu_model: MI300X
        gpus_per_host: 8
        amd_partitions:
          profile: mixed-nps1
          memory: NPS1
          devices: [{{compute: CPX, gpus: 4}}, {{compute: SPX, gpus: 3}}]
          skipped_gpus: [7]
"""
AMD_PINS = {"amd_gpu_operator": "v1.5.1", "amdgpu": "30.10.1", "rocm": "7.0.1"}


def _load(text: str):
    loaded = load_stack_text(text, "stack.yaml", catalog=load_catalog(), today=TODAY)
    assert not loaded.diagnostics, "\n".join(str(e) for e in loaded.diagnostics)
    return plan_stack(loaded.stack, load_catalog())


def _errors(text: str) -> list[str]:
    loaded = load_stack_text(text, "stack.yaml", catalog=load_catalog(), today=TODAY)
    return [str(e) for e in loaded.diagnostics]


def test_an_amd_pool_gets_no_aks_driver_and_no_nvidia_label():
    plan = _load(AKS_HEAD.format(release=release_block(**AMD_PINS)) + MI300X_POOL + NVIDIA_POOL)
    amd, nvidia = plan.pools
    assert (amd.vendor, amd.driver, amd.aks_gpu_driver) == ("amd", "operator", "None")
    assert not [k for k in amd.labels if k.startswith("nvidia.com/")], amd.labels
    assert (nvidia.vendor, nvidia.aks_gpu_driver) == ("nvidia", "Install")
    assert plan.cluster.gpu_software is not None  # the NVIDIA pool keeps NVIDIA's chart


def test_a_cluster_of_amd_pools_alone_installs_no_nvidia_chart():
    plan = _load(AKS_HEAD.format(release=release_block(**AMD_PINS)) + MI300X_POOL + PARTITIONED_POOL)
    assert plan.cluster.gpu_software is None and plan.cluster.gpu_chart is None
    partitioned = plan.pools[1].amd_partitions
    assert partitioned.logical_gpus == {"cpx_nps4": 64}  # 8 GPUs x 8 CPX partitions
    assert partitioned.memory_gib == {"cpx_nps4": 24.0}  # 192 GiB / 8 (AMD: 24 GB per CPX partition)


def test_a_host_groups_partitions_and_the_amd_pins_reach_the_roles():
    plan = _load(BAREMETAL.format(release=release_block(**AMD_PINS)))
    group = plan.host_groups[0]
    assert group.vendor == "amd"
    assert group.amd_partitions.logical_gpus == {"cpx_nps1": 32, "spx_nps1": 3}
    view = hosts.host_view(plan, ["mi300x"])
    assert view["vendor"] == "amd"
    assert view["release"]["amdgpu"] == "30.10.1" and view["release"]["rocm"] == "7.0.1"
    parts = view["amd_partitions"]
    assert (parts["managed_by"], parts["memory"], parts["skipped_gpus"]) == ("host", "NPS1", [7])
    assert parts["groups"] == [{"compute": "CPX", "gpus": 4}, {"compute": "SPX", "gpus": 3}]


def test_absent_amd_pins_stay_out_of_the_plans_release():
    plan = _load(AKS_HEAD.format(release=release_block()) + NVIDIA_POOL)
    assert not {"amd_gpu_operator", "amdgpu", "rocm"} & set(plan.release)


@pytest.mark.parametrize(
    ("stack", "key", "fragment"),
    [
        (AKS_HEAD.format(release=release_block()) + MI300X_POOL, "release.amd_gpu_operator", "pin its chart version"),
        (BAREMETAL.format(release=release_block(amd_gpu_operator="v1.5.1")), "release.amdgpu", "amd_driver role"),
        (
            AKS_HEAD.format(release=release_block(**{**AMD_PINS, "amd_gpu_operator": "v1.4.0"})) + MI300X_POOL,
            "release.amd_gpu_operator",
            "knows the AMD GPU Operator chart v1.5.1, not v1.4.0",
        ),
        (
            AKS_HEAD.format(release=release_block(**AMD_PINS)) + MI300X_POOL + "        driver: aks\n",
            "aks.gpu_pools[0].driver",
            "AKS installs no AMD driver",
        ),
        (
            BAREMETAL.format(release=release_block(**AMD_PINS)).replace("memory: NPS1", "memory: NPS2"),
            "baremetal.host_groups[0].amd_partitions.devices[0].compute",
            "CPX with NPS2 is not a partition mode of MI300X: CPX runs with NPS1 or NPS4; NPS2 runs with DPX",
        ),
        (
            BAREMETAL.format(release=release_block(**AMD_PINS)).replace("skipped_gpus: [7]", "skipped_gpus: []"),
            "baremetal.host_groups[0].amd_partitions.devices",
            "assign 7 GPUs and skip 0: 7, but a node has 8",
        ),
    ],
)
def test_wrong_amd_input_is_an_error_at_its_key(stack: str, key: str, fragment: str):
    errors = _errors(stack)
    assert any(key in e and fragment in e for e in errors), errors
