"""Stacks with AMD Instinct GPUs for the AMD GPU Operator's tests (tests/unit/kube/test_amd_*.py,
tests/infra/test_amd_program.py), written inline until the example stacks carry them: an AKS cluster of MI300X pools
beside an NVIDIA one, one of MI300X pools alone, and bare-metal stacks with an MI300X host group (alone, and beside an
H100 one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.catalog import load_catalog
from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import StackPlan
from gpufleet.spec.load import load_stack_text
from gpufleet.spec.models import Stack
from tests.conftest import TODAY
from tests.stacks import release_block

AMD_PINS = {"amd_gpu_operator": "v1.5.1", "amdgpu": "30.10.1", "rocm": "7.0.1"}

AKS_HEAD = """\
config:
  gpufleet:stage: dev
  gpufleet:region: eastus
{release}  gpufleet:aks:
    cluster:
      network: {{vnet_cidr: 10.40.0.0/16, subnet_cidr: 10.40.0.0/20}}
      security: {{api_server: {{authorized_ip_ranges: [203.0.113.0/28]}}}}
    gpu_software: {{amd_driver_image: registry.example.net/amd/amdgpu-driver, amd_driver_image_secret: amd-driver-push}}
    gpu_pools:
"""
# whole MI300X GPUs (amd.com/gpu), spot: AKS's own spot taint and label
MI300X = """\
      - name: mi300x
        vm_size: Standard_ND96isr_MI300X_v5
        count: 1
        spot: {max_price: -1}
        upgrade: {max_unavailable: 1}
"""
# every MI300X in CPX over NPS4 by the operator's Device Config Manager, under a taint of its own
MI300X_CPX = """\
      - name: mi300xcpx
        vm_size: Standard_ND96isr_MI300X_v5
        count: 2
        taints: ["amd.com/gpu=present:NoSchedule"]
        amd_partitions: {managed_by: operator, profile: cpx-nps4, memory: NPS4, devices: [{compute: CPX}]}
"""
# NVIDIA beside them, with the GPU Operator (its driver), under the default sku=gpu taint
H100 = """\
      - name: h100
        vm_size: Standard_ND96isr_H100_v5
        count: 1
        driver: operator
"""
# NVIDIA beside them with AKS's driver: the standalone device plugin chart, which deploys no NFD
H100_PLUGIN = """\
      - name: h100
        vm_size: Standard_NC40ads_H100_v5
        count: 1
"""

BAREMETAL_HEAD = """\
config:
  gpufleet:stage: dev
  gpufleet:region: onprem
{release}  gpufleet:baremetal:
    inventory: inventories/dev-onprem
    host_groups:
"""
MI300X_GROUP = """\
      - name: mi300x
        gpu_model: MI300X
        gpus_per_host: 8
        amd_partitions:
          profile: mixed-nps1
          memory: NPS1
          devices: [{compute: CPX, gpus: 4}, {compute: SPX, gpus: 3}]
          skipped_gpus: [7]
"""
H100_GROUP = """\
      - name: h100
        gpu_model: H100-SXM5-80GB
        gpus_per_host: 8
"""

MIXED = AKS_HEAD.format(release=release_block(**AMD_PINS)) + MI300X + MI300X_CPX + H100
MIXED_PLUGIN = AKS_HEAD.format(release=release_block(**AMD_PINS)) + MI300X + MI300X_CPX + H100_PLUGIN
AMD_ONLY = AKS_HEAD.format(release=release_block(**AMD_PINS)) + MI300X + MI300X_CPX
BAREMETAL = BAREMETAL_HEAD.format(release=release_block(**AMD_PINS)) + MI300X_GROUP
BAREMETAL_MIXED = BAREMETAL + H100_GROUP

AKS_FILE = "Pulumi.dev-eastus.yaml"
BAREMETAL_FILE = "Pulumi.dev-onprem.yaml"


def load(text: str, name: str = AKS_FILE) -> Stack:
    """A stack from its text, which must validate."""
    loaded = load_stack_text(text, name, catalog=load_catalog(), today=TODAY)
    assert loaded.ok and loaded.stack is not None, "\n".join(str(d) for d in loaded.diagnostics)
    return loaded.stack


def plan(text: str, name: str = AKS_FILE) -> StackPlan:
    return plan_stack(load(text, name), load_catalog())


def edited(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` (which it has once) replaced."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def write(directory: Path, text: str, name: str = AKS_FILE) -> str:
    """Write a stack file into ``directory``; its stack name."""
    (directory / name).write_text(text)
    return name.removeprefix("Pulumi.").removesuffix(".yaml")


def get(data: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        data = data[key]
    return data
