"""The Pulumi program for examples/aks/Pulumi.preview-westeurope.yaml under mocks: the pools that need a newer AKS API
than the SDK's reach Azure through the generic ARM resource at that version with exactly the properties gpufleet's
typed model holds, the others through the typed AgentPool, and a NAP pool as Karpenter objects on the cluster."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pulumi_azure_native import containerservice as cs

from tests.aks_api_spec import karpenter_validator
from tests.charts import crd_errors
from tests.conftest import REPO
from tests.infra import checks
from tests.infra.harness import Registered, Run, run_program

ROOT = REPO / "examples" / "aks"
STACK = "preview-westeurope"
CLUSTER = "gpufleet-preview-westeurope"
SUBNET = f"/mock/azure-native:network:Subnet/{CLUSTER}-nodes"
NODE_CLASS = "kubernetes:karpenter.azure.com/v1beta1:AKSNodeClass"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"


@pytest.fixture(scope="module")
def run() -> Run:
    return run_program(STACK, ROOT)


def _pool(run: Run, pool: str) -> Registered:
    (found,) = [p for p in checks.agent_pools(run.recorder.resources) if p.inputs["tags"]["gpufleet-pool"] == pool]
    return found


def _arm(run: Run, pool: str) -> dict[str, Any]:
    (found,) = [
        r.inputs
        for r in checks.of_type(run.recorder.resources, checks.ARM_RESOURCE)
        if r.inputs["properties"]["tags"]["gpufleet-pool"] == pool
    ]
    return found


def test_a_managed_gpu_pool_goes_through_the_preview_api_with_exactly_the_typed_models_properties(run: Run):
    resource = _arm(run, "t4managed")
    assert {k: v for k, v in resource.items() if k != "properties"} == {
        "apiVersion": "2026-05-02-preview",
        "resourceProviderNamespace": "Microsoft.ContainerService",
        "parentResourcePath": f"managedClusters/{CLUSTER}",
        "resourceType": "agentPools",
        "resourceName": "t4manage506a",
        "resourceGroupName": f"{CLUSTER}-rg",
    }
    assert resource["properties"] == {
        "mode": "User",
        "type": "VirtualMachineScaleSets",
        "osType": "Linux",
        "osSKU": "Ubuntu2404",
        "vmSize": "Standard_NC4as_T4_v3",
        "orchestratorVersion": "1.36",
        "count": 1,
        "enableAutoScaling": False,  # AKS-managed GPU pools take no cluster autoscaler during the preview
        "gpuProfile": {"driver": "Install", "nvidia": {"managementMode": "Managed"}},
        "nodeTaints": ["sku=gpu:NoSchedule"],
        # AKS's device plugin and DCGM exporter run there: the GPU Operator's operands must not, and the standalone
        # device plugin's DaemonSet does not (no nvidia.com/gpu.present)
        "nodeLabels": {
            "gpufleet.io/pool": "t4managed",
            "gpufleet.io/gpu-model": "T4",
            "nvidia.com/gpu.deploy.operands": "false",
        },
        "scaleSetPriority": "Regular",
        "upgradeSettings": {"maxSurge": "33%"},
        "vnetSubnetID": SUBNET,
        "enableNodePublicIP": False,
        "enableEncryptionAtHost": True,
        "tags": {"cost-center": "ml-platform", "gpufleet-pool": "t4managed", "managed-by": "gpufleet"},
    }


def test_a_managed_mig_pool_on_azure_linux_3_sends_its_profile_and_strategy(run: Run):
    properties = _arm(run, "a100mgd")["properties"]
    assert _arm(run, "a100mgd")["apiVersion"] == "2026-05-02-preview"
    assert (properties["osSKU"], properties["gpuInstanceProfile"]) == ("AzureLinux3", "MIG1g")
    assert properties["gpuProfile"] == {
        "driver": "Install",
        "nvidia": {"managementMode": "Managed", "migStrategy": "Mixed"},
    }
    assert "nvidia.com/gpu.present" not in properties["nodeLabels"]


def test_an_azure_linux_3_mig_pool_the_sdk_can_describe_stays_a_typed_agent_pool(run: Run):
    pool = _pool(run, "a100al3")
    assert pool.type == checks.AGENT_POOL
    i = pool.inputs
    assert (i["osSKU"], i["gpuInstanceProfile"], i["gpuProfile"]) == ("AzureLinux3", "MIG3g", {"driver": "Install"})
    assert cs.OSSKU(i["osSKU"]) is cs.OSSKU.AZURE_LINUX3  # the SDK's own enum (API 2025-09-01) has it
    # gpufleet's device plugin advertises the instances: its DaemonSet runs where the label says
    assert i["nodeLabels"]["nvidia.com/gpu.present"] == "true"


def test_every_property_sent_through_the_arm_resource_is_one_the_typed_sdk_has_or_a_newer_api_added(run: Run):
    """The ARM resource checks nothing: each property name gpufleet sends exists in the SDK's AgentPool (API
    2025-09-01) or is one the catalog lists as newer (gpuProfile.nvidia, checked in
    tests/unit/azure/test_aks_api.py)."""
    sdk = {
        getattr(prop.fget, "_pulumi_name", None)
        for prop in vars(cs.AgentPoolArgs).values()
        if isinstance(prop, property)
    }
    for pool in ("t4managed", "a100mgd"):
        properties = _arm(run, pool)["properties"]
        assert set(properties) <= sdk, set(properties) - sdk
        assert set(properties["gpuProfile"]) == {"driver", "nvidia"}


def test_a_nap_pool_is_an_aksnodeclass_and_a_nodepool_on_the_cluster_valid_against_their_crds(run: Run):
    (node_class,) = checks.of_type(run.recorder.resources, NODE_CLASS)
    (node_pool,) = checks.of_type(run.recorder.resources, NODE_POOL)
    provider = checks.the(run.recorder.resources, checks.K8S_PROVIDER)
    for obj in (node_class, node_pool):
        assert obj.provider.rsplit("::", 1)[0].endswith(f"::{provider.name}")  # the cluster's provider
        assert crd_errors(karpenter_validator(obj.inputs), obj.inputs) == []
    assert node_class.inputs["spec"] == {
        "imageFamily": "Ubuntu2404",
        "gpu": {"mode": "Driver"},
        "tags": {"gpufleet-pool": "t4nap", "managed-by": "gpufleet"},
        "security": {"encryptionAtHost": True},
    }
    spec = node_pool.inputs["spec"]
    assert spec["template"]["spec"]["nodeClassRef"]["name"] == node_class.inputs["metadata"]["name"]
    requirements = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
    assert requirements["karpenter.azure.com/sku-name"] == ["Standard_NC8as_T4_v3"]
    assert requirements["karpenter.sh/capacity-type"] == ["spot"]
    assert spec["limits"] == {"cpu": "32"}  # max_nodes 4 x 8 vCPUs
    assert spec["template"]["spec"]["taints"] == [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]
    # no agent pool for it: NAP creates the nodes
    assert "t4nap" not in {p.inputs["tags"]["gpufleet-pool"] for p in checks.agent_pools(run.recorder.resources)}


def test_the_cluster_turns_on_node_auto_provisioning_without_default_node_pools(run: Run):
    cluster = checks.the(run.recorder.resources, checks.CLUSTER).inputs
    assert cluster["nodeProvisioningProfile"] == {"mode": "Auto", "defaultNodePools": "None"}
    assert (
        checks.the(run_program("dev-westeurope").recorder.resources, checks.CLUSTER).inputs.get(
            "nodeProvisioningProfile"
        )
        is None
    )


def test_moving_a_pool_to_a_newer_api_makes_a_new_pool_instead_of_moving_the_resource(tmp_path: Path):
    """The typed AgentPool and the ARM resource are different Pulumi resources for one AKS pool: moving between them
    in place would create the one and then delete the other (the pool). The pool's AKS name changes instead, so a
    new pool is made before the old one goes; a pool that stays on the SDK keeps its name."""
    text = (REPO / "Pulumi.dev-westeurope.yaml").read_text()
    before = {p.inputs["agentPoolName"] for p in checks.agent_pools(run_program("dev-westeurope").recorder.resources)}
    shutil.copy(REPO / "Pulumi.dev-westeurope.yaml", tmp_path)
    old = "        vm_size: Standard_NC24ads_A100_v4\n"
    (tmp_path / "Pulumi.dev-westeurope.yaml").write_text(text.replace(old, old + "        os_sku: Ubuntu2404\n"))
    moved = run_program("dev-westeurope", tmp_path)
    after = {p.inputs["agentPoolName"] for p in checks.agent_pools(moved.recorder.resources)}
    (new,) = after - before
    assert new.startswith("a100mig") and len(before - after) == 1
    assert _arm(moved, "a100mig")["apiVersion"] == "2026-05-01"  # Ubuntu2404 is GA: the stable API, no preview


def test_gpufleets_device_plugin_takes_the_mig_strategy_of_the_pools_it_serves_not_of_aks_managed_ones(run: Run):
    """a100mgd's instances are AKS's device plugin's (mixed); gpufleet's serves a100al3's (one profile: single)."""
    release = checks.the(run.recorder.resources, checks.RELEASE)
    assert (release.inputs["chart"], release.inputs["values"]["migStrategy"]) == ("nvidia-device-plugin", "single")
