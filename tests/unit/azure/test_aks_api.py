"""gpufleet's typed model of the AgentPool properties it sends (gpufleet/azure/aks_api.py) against the AKS REST API's
published definitions (tests/fixtures/aks-api), and the API version each pool takes."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import typing
from pathlib import Path

import pytest
from pulumi_azure_native import containerservice as cs

from gpufleet.azure import aks_api
from gpufleet.azure.aks import _needs_newer_api, aks_pool_name
from gpufleet.catalog import load_catalog
from gpufleet.catalog.aks import load_aks_catalog
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack, load_stack_text
from gpufleet.spec.models import GpuOsSku
from tests.aks_api_spec import definitions, enum, field_definition
from tests.conftest import REPO, TODAY
from tests.stacks import release_block

AKS = load_aks_catalog()
PREVIEW_STACK = REPO / "examples" / "aks" / "Pulumi.preview-westeurope.yaml"
# every example stack with AKS pools
STACKS = [p for p in (*sorted(REPO.glob("Pulumi.*-*.yaml")), PREVIEW_STACK) if "gpufleet:aks:" in p.read_text()]


def _values(literal: object) -> set[str]:
    return set(typing.get_args(literal))


@pytest.mark.parametrize(
    ("literal", "definition", "version"),
    [
        (aks_api.OSSKU, "OSSKU", "2026-05-01"),
        (aks_api.OSSKU, "OSSKU", "2026-05-02-preview"),
        (aks_api.GPUDriver, "GPUDriver", "2026-05-01"),
        (aks_api.GPUDriver, "GPUDriver", "2026-05-02-preview"),
        (aks_api.GPUInstanceProfile, "GPUInstanceProfile", "2026-05-01"),
        (aks_api.GPUInstanceProfile, "GPUInstanceProfile", "2026-05-02-preview"),
        (aks_api.ManagementMode, "ManagementMode", "2026-05-02-preview"),
        (aks_api.MigStrategy, "MigStrategy", "2026-05-02-preview"),
        (aks_api.AgentPoolMode, "AgentPoolMode", "2026-05-02-preview"),
    ],
)
def test_every_enum_value_gpufleet_sends_is_one_the_api_publishes(literal: object, definition: str, version: str):
    assert _values(literal) <= set(enum(version, definition))


def test_the_managed_gpu_fields_are_preview_only_and_the_catalog_says_so():
    """gpuProfile.nvidia is in the preview API's definitions and not in the GA one's; aks.yaml's field list matches."""
    for field in AKS.fields:
        assert field.api == "preview"
        assert field_definition(AKS.api.preview, field.path) is not None, field.path
        assert field_definition(AKS.api.stable, field.path) is None, field.path
    assert set(definitions(AKS.api.stable)["GPUProfile"]["properties"]) == {"driver"}


def test_each_os_skus_api_level_is_the_oldest_of_gpufleets_apis_whose_enum_has_it():
    sdk = {e.value for e in cs.OSSKU}  # pulumi-azure-native's containerservice: API 2025-09-01
    for sku in AKS.os_skus:
        expected = "sdk" if sku.name in sdk else "stable" if sku.name in enum(AKS.api.stable, "OSSKU") else "preview"
        assert sku.api == expected, sku.name
    assert {s.name for s in AKS.os_skus} == _values(GpuOsSku) == _values(aks_api.OSSKU)


def test_the_sdks_api_is_the_one_pulumi_azure_native_speaks():
    source = inspect.getsource(sys.modules[cs.AgentPool.__module__])
    assert f"Uses Azure REST API version {AKS.api.sdk}." in source


def test_to_arm_writes_the_apis_property_names_and_leaves_unset_fields_out():
    props = aks_api.AgentPoolProperties(
        vm_size="Standard_NC24ads_A100_v4",
        orchestrator_version="1.34",
        count=2,
        enable_auto_scaling=False,
        os_sku="Ubuntu2404",
        gpu_profile=aks_api.GpuProfile("Install", aks_api.NvidiaGpuProfile("Managed", "Single")),
        node_taints=("sku=gpu:NoSchedule",),
        node_labels={"a": "b"},
        upgrade_settings=aks_api.UpgradeSettings(max_surge="33%"),
        enable_node_public_ip=False,
        enable_encryption_at_host=True,
        tags={},
        gpu_instance_profile="MIG3g",
    )
    arm = props.to_arm(vnet_subnet_id="/subnets/nodes")
    assert (
        arm["osSKU"] == "Ubuntu2404" and arm["enableNodePublicIP"] is False and arm["vnetSubnetID"] == "/subnets/nodes"
    )
    assert arm["gpuProfile"] == {"driver": "Install", "nvidia": {"managementMode": "Managed", "migStrategy": "Single"}}
    assert arm["upgradeSettings"] == {"maxSurge": "33%"}
    assert "minCount" not in arm and "spotMaxPrice" not in arm and "kubeletConfig" not in arm
    assert aks_api.pool_api(props, AKS) == aks_api.PoolApi(
        "preview", "2026-05-02-preview", ("osSKU Ubuntu2404", "gpuProfile.nvidia.managementMode",
                                          "gpuProfile.nvidia.migStrategy")
    )  # fmt: skip
    ga = dataclasses.replace(props, gpu_profile=aks_api.GpuProfile("Install"))
    assert aks_api.pool_api(ga, AKS) == aks_api.PoolApi("stable", "2026-05-01", ("osSKU Ubuntu2404",))
    assert aks_api.pool_api(dataclasses.replace(ga, os_sku="AzureLinux3"), AKS) == aks_api.PoolApi("sdk", "2025-09-01")


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.stem)
def test_the_pool_name_changes_exactly_where_the_plan_moves_a_pool_off_the_sdk(path: Path):
    """gpufleet.azure.aks decides from the stack which pools leave the typed SDK resource (part of their AKS name); the
    plan decides it from the properties (PoolPlan.api). Both agree on every example pool."""
    loaded = load_stack(path, today=TODAY)
    assert loaded.stack is not None and loaded.stack.aks is not None
    plan = plan_stack(loaded.stack, load_catalog())
    for spec, pool in zip(loaded.stack.aks.gpu_pools, plan.pools, strict=True):
        if pool.api is not None:
            assert _needs_newer_api(spec) == pool.api.generic, pool.name
            assert aks_pool_name(spec) == pool.aks_name


def test_plan_json_names_each_pools_api_and_the_preview_fields():
    loaded = load_stack(PREVIEW_STACK, today=TODAY)
    assert loaded.stack is not None
    pools = {p["name"]: p for p in plan_stack(loaded.stack, load_catalog()).to_dict()["pools"]}
    assert pools["t4managed"]["api"] == {
        "level": "preview",
        "version": "2026-05-02-preview",
        "needs": ["osSKU Ubuntu2404", "gpuProfile.nvidia.managementMode"],
    }
    assert pools["a100al3"]["api"] == {"level": "sdk", "version": "2025-09-01", "needs": []}
    assert pools["t4nap"]["api"] is None and pools["t4nap"]["kind"] == "nap"


def _stack(pools: str, *, preview: bool = False, kubernetes: str = "1.34") -> list[str]:
    text = f"""config:
  gpufleet:stage: dev
  gpufleet:region: westeurope
{release_block(kubernetes=kubernetes)}  gpufleet:aks:
    preview: {str(preview).lower()}
    cluster:
      network: {{vnet_cidr: 10.0.0.0/16, subnet_cidr: 10.0.0.0/20}}
    gpu_pools:
{pools}"""
    loaded = load_stack_text(text, "Pulumi.dev-westeurope.yaml", today=TODAY)
    return [f"{d.path}: {d.message}" for d in loaded.diagnostics]


def test_os_skus_follow_the_kubernetes_versions_aks_supports_them_on():
    def os_findings(sku: str, kubernetes: str) -> list[str]:
        # the release table refuses Kubernetes outside today's supported range on its own (test_releases.py)
        return [f for f in _stack(pool % sku, kubernetes=kubernetes) if not f.startswith("release.")]

    pool = "      - {name: t4, vm_size: Standard_NC4as_T4_v3, count: 1, os_sku: %s}\n"
    assert _stack(pool % "Ubuntu2404", kubernetes="1.36") == []
    assert os_findings("Ubuntu2404", "1.32") == []
    (finding,) = os_findings("Ubuntu2404", "1.31")
    assert finding.startswith("aks.gpu_pools[0].os_sku: os_sku Ubuntu2404 is supported on Kubernetes 1.32 to 1.38,")
    assert "valid here: Ubuntu, Ubuntu2204, AzureLinux3" in finding
    (retired,) = os_findings("AzureLinux", "1.31")  # Azure Linux 2.0 before 1.32: retired
    assert "is not available on Azure Linux 2.0 (retired) in AKS" in retired
    assert os_findings("AzureLinux3", "1.37")[0].startswith(
        "aks.gpu_pools[0].os_sku: os_sku AzureLinux3 is supported on Kubernetes 1.28 to 1.36"
    )


def test_a_managed_gpu_pool_with_the_autoscaler_or_the_operators_driver_is_refused():
    scaled = "      - {name: t4, vm_size: Standard_NC4as_T4_v3, count: 1, gpu_management: managed,\n"
    scaled += "         autoscaling: {min: 1, max: 3}}\n"
    assert _stack(scaled, preview=True) == [
        "aks.gpu_pools[0].autoscaling: AKS-managed GPU pools take no cluster autoscaler while the feature is in"
        " preview: remove autoscaling (count sets the nodes), or use gpu_management: unmanaged"
    ]
    operator = (
        "      - {name: t4, vm_size: Standard_NC4as_T4_v3, count: 1, gpu_management: managed, driver: operator}\n"
    )
    (finding,) = _stack(operator, preview=True)
    assert finding.startswith("aks.gpu_pools[0].driver: driver: the GPU Operator (aks.gpu_pools[0].driver: operator)")
    assert "use driver: aks (AKS ignores gpuProfile.driver None on a managed pool), or gpu_management: unmanaged" in (
        finding
    )


def test_a_mig_strategy_belongs_to_a_managed_pool():
    pool = "      - {name: a100, vm_size: Standard_NC24ads_A100_v4, count: 1,\n"
    pool += "         mig: {managed_by: aks, profile: MIG1g, strategy: single}}\n"
    (finding,) = _stack(pool, preview=True)
    assert "mig.strategy is the MIG strategy of AKS's own device plugin (gpu_management: managed)" in finding


def test_nap_pools_take_max_nodes_not_counts_and_turn_autoscaling_off_in_the_cluster():
    nap = "      - {name: napt4, kind: nap, vm_size: Standard_NC4as_T4_v3, max_nodes: 3}\n"
    assert _stack(nap) == []
    assert _stack("      - {name: napt4, kind: nap, vm_size: Standard_NC4as_T4_v3, count: 1}\n") == [
        "aks.gpu_pools[0].count: count does not apply to kind nap: NAP creates nodes for pending pods, up to"
        " max_nodes; a nap pool has no count",
        "aks.gpu_pools[0].max_nodes: missing required key 'max_nodes': the most nodes NAP creates for the pool",
    ]
    scaled = "      - {name: t4, vm_size: Standard_NC4as_T4_v3, count: 1, autoscaling: {min: 1, max: 2}}\n"
    (finding,) = _stack(nap + scaled)
    assert finding.startswith("aks.gpu_pools[1].autoscaling: with node auto-provisioning on (pool 'napt4', kind nap)")
    (family,) = _stack(
        "      - {name: napt4, kind: nap, vm_size: Standard_NC4as_T4_v3, max_nodes: 3, os_sku: AzureLinux3}\n"
    )
    assert family.startswith("aks.gpu_pools[0].os_sku: an AKSNodeClass has no image family AzureLinux3")
    assert _stack("      - {name: t4, vm_size: Standard_NC4as_T4_v3}\n") == [
        "aks.gpu_pools[0].count: missing required key 'count': nodes now (AKS requires it with autoscaling)"
    ]
