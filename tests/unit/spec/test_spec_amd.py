"""AMD Instinct in a stack (docs/amd.md): the AMD example stacks are valid and round-trip, a
Standard_ND96isr_MI300X_v5 pool is validated like an NVIDIA pool (the same pool rules, findings at the same keys),
and only the AMD rules tell it apart. The refusals themselves, one rule per file, are tests/fixtures/invalid/amd_*.yaml
and vm_size_amd_gpu.yaml (test_spec_invalid.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.spec.load import dump_stack, load_stack, load_stack_text
from tests.conftest import REPO, TODAY
from tests.stacks import release_block

SECURE = "v1:RVhBTVBMRQ==:cmVwbGFjZSBtZSB3aXRoIHB1bHVtaSBjb25maWcgc2V0IC0tc2VjcmV0"  # the example's placeholder
AMD_EXAMPLES = [REPO / "examples/aks/Pulumi.dev-eastus.yaml", REPO / "examples/baremetal/Pulumi.dev-onprem.yaml"]


@pytest.mark.parametrize("path", AMD_EXAMPLES, ids=lambda p: p.stem)
def test_amd_example_stack_is_valid_and_round_trips(path: Path):
    result = load_stack(path, today=TODAY)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    # the BMC password stays a secret: the round trip hands its placeholder back, as test_baremetal_spec.py does
    secrets = {key: SECURE for key in result.secret_keys}
    again = load_stack_text(dump_stack(result.stack, secrets), path.name, today=TODAY)
    assert again.ok, again.diagnostics
    assert again.stack == result.stack


def test_the_onprem_example_pins_amds_host_software_and_partitions_on_the_host():
    stack = load_stack(AMD_EXAMPLES[1], today=TODAY).stack
    assert stack is not None and stack.baremetal is not None
    assert (stack.release.amdgpu, stack.release.rocm) == ("30.10.1", "7.0.1")
    (group,) = stack.baremetal.host_groups
    assert (group.gpu_model, group.gpus_per_host) == ("MI300X", 8)
    assert group.amd_partitions is not None and group.amd_partitions.managed_by == "host"
    assert {h.host_group for h in stack.baremetal.hosts} == {"mi300x"}


def _findings(pools: str, **pins: str) -> list[str]:
    text = f"""config:
  gpufleet:stage: dev
  gpufleet:region: westeurope
{release_block(**{"amd_gpu_operator": "v1.5.1", "amdgpu": "30.10.1", **pins})}  gpufleet:aks:
    cluster:
      network: {{vnet_cidr: 10.0.0.0/16, subnet_cidr: 10.0.0.0/20}}
    gpu_software: {{amd_driver_image: registry.example.net/amd/amdgpu-driver}}
    gpu_pools:
{pools}"""
    loaded = load_stack_text(text, "Pulumi.dev-westeurope.yaml", today=TODAY)
    return [f"{d.path}: {d.message}" for d in loaded.diagnostics]


MI300X = "      - {name: mi300x, vm_size: Standard_ND96isr_MI300X_v5, %s}\n"
H100 = "      - {name: h100, vm_size: Standard_ND96isr_H100_v5, %s}\n"


@pytest.mark.parametrize(
    "keys",
    [
        "count: 1",
        "count: 1, driver: operator",  # the AMD GPU Operator's driver, said out loud
        "count: 0, autoscaling: {min: 0, max: 4}, scale_to_zero: true, zones: ['1', '2']",
        "count: 0, autoscaling: {min: 0, max: 2}, scale_to_zero: true, spot: {max_price: -1}",
        "count: 1, os_sku: Ubuntu2404, tuning: {cpu_manager_policy: static, topology_manager_policy: single-numa-node}",
        "count: 1, amd_partitions: {managed_by: operator, profile: cpx-nps1, memory: NPS1, devices: [{compute: CPX}]}",
    ],
)
def test_an_mi300x_pool_takes_what_an_nvidia_pool_takes(keys: str):
    assert _findings(MI300X % keys) == []
    assert _findings(H100 % keys.split(", amd_partitions")[0]) == []  # the same pool on NVIDIA, partitions aside


@pytest.mark.parametrize(
    ("keys", "path", "fragment"),
    [
        ("count: 5, autoscaling: {min: 1, max: 3}", "count", "count 5 must be within autoscaling min 1 and max 3"),
        ("count: 1, zones: ['4']", "zones[0]", "'4'"),
        ("count: 1, spot: {max_price: -1}, upgrade: {max_surge: '10%'}", "upgrade", "spot"),
    ],
)
def test_an_mi300x_pool_is_refused_where_an_nvidia_pool_is_and_at_the_same_key(keys: str, path: str, fragment: str):
    amd, nvidia = _findings(MI300X % keys), _findings(H100 % keys)
    assert len(amd) == len(nvidia) == 1, (amd, nvidia)
    assert amd[0].startswith(f"aks.gpu_pools[0].{path}") and fragment in amd[0]
    assert amd[0].split(": ", 1)[0] == nvidia[0].split(": ", 1)[0]


def test_amd_partitions_on_an_nvidia_pool_are_refused():
    keys = "count: 1, amd_partitions: {managed_by: operator, profile: p, memory: NPS1, devices: [{compute: CPX}]}"
    (finding,) = _findings(H100 % keys)
    assert finding.startswith("aks.gpu_pools[0].amd_partitions: ") and "partition it with mig" in finding
