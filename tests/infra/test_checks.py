"""Each check of tests/infra/checks.py reports its rule when the rule is broken: a check that cannot fail would
make the program's tests worthless (mocks accept anything)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.azure.baseline import RULE_NAMES
from gpufleet.catalog import load_catalog
from gpufleet.spec.load import load_stack
from tests.charts import needs_charts
from tests.conftest import REPO
from tests.infra import checks
from tests.infra.harness import Registered, run_program

BROKEN_FIXTURE = REPO / "tests/fixtures/infra/broken-aks-resources.json"


@pytest.fixture(scope="module")
def eastus() -> list[Registered]:
    return run_program("prod-eastus").recorder.resources


@pytest.fixture(scope="module")
def stack():
    return load_stack(REPO / "Pulumi.prod-eastus.yaml").stack


def broken(resources: list[Registered], typ: str, which: str | int, edit: Callable[[dict[str, Any]], None]):
    """A copy of ``resources`` with one resource's inputs edited: an AgentPool by its pool's name (registration
    order is not fixed), anything else by its index."""
    out = copy.deepcopy(resources)
    found = checks.of_type(out, typ)
    if isinstance(which, str):
        (target,) = [r for r in found if r.inputs.get("tags", {}).get("gpufleet-pool") == which]
    else:
        target = found[which]
    edit(target.inputs)
    return out


def test_enum_check(eastus):
    assert checks.enum_problems(eastus) == []
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.update(gpuInstanceProfile="MIG8g"))
    assert checks.enum_problems(bad) == [
        "AgentPool nvlmigc749: gpuInstanceProfile 'MIG8g' is not one of ['MIG1g', 'MIG2g', 'MIG3g', 'MIG4g', 'MIG7g']"
    ]
    bad = broken(eastus, checks.AGENT_POOL, "t4spot", lambda i: i["gpuProfile"].update(driver="Skip"))
    assert checks.enum_problems(bad) != []
    bad = broken(eastus, checks.CLUSTER, 0, lambda i: i["autoUpgradeProfile"].update(nodeOSUpgradeChannel="Daily"))
    assert "nodeOSUpgradeChannel 'Daily'" in checks.enum_problems(bad)[0]


def test_pool_name_check(eastus):
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.update(agentPoolName="nvl-mig-pool-1"))
    assert checks.pool_name_problems(bad) == ["pool name 'nvl-mig-pool-1' is not an AKS Linux pool name"]
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.update(agentPoolName="system"))
    assert checks.pool_name_problems(bad) == ["pool name 'system' is used twice"]


def test_count_check(eastus):
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.pop("count"))
    assert checks.count_problems(bad) == ["AgentPool nvlmigc749: no count"]
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.update(count=9))
    assert checks.count_problems(bad) == ["AgentPool nvlmigc749: count 9 outside [2.0, 8.0]"]
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.update(enableAutoScaling=False))
    assert checks.count_problems(bad) == ["AgentPool nvlmigc749: minCount/maxCount without autoscaling"]


def test_inline_pool_check(eastus):
    gpu_pool = checks.of_type(eastus, checks.AGENT_POOL)[0].inputs  # either GPU pool will do

    def inline(inputs: dict[str, Any]) -> None:
        inputs["agentPoolProfiles"].append({"name": "gpu", "mode": "User", "vmSize": gpu_pool["vmSize"]})

    problems = checks.inline_pool_problems(broken(eastus, checks.CLUSTER, 0, inline), load_catalog())
    assert len(problems) == 2 and "is inline" in problems[1]


def test_spot_check(eastus):
    bad = broken(eastus, checks.AGENT_POOL, "t4spot", lambda i: i["upgradeSettings"].update(maxSurge="1"))
    assert checks.spot_problems(bad) == ["AgentPool t4spot028f: spot pool with upgradeSettings.maxSurge"]
    bad = broken(eastus, checks.AGENT_POOL, "t4spot", lambda i: i.update(nodeTaints=["sku=gpu:NoSchedule"]))
    assert checks.spot_problems(bad) == [
        "AgentPool t4spot028f: spot pool without AKS's own spot taint and label (a diff on every refresh)"
    ]
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.update(spotMaxPrice=0.5))
    assert checks.spot_problems(bad) == ["AgentPool nvlmigc749: spot settings on a regular pool"]


def test_taint_and_label_check(eastus, stack):
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.update(nodeTaints=[]))
    assert checks.taint_label_problems(bad, stack) == ["pool nvlmig: taints [], the stack says ['sku=gpu:NoSchedule']"]
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i["nodeLabels"].pop("nvidia.com/mig.config"))
    assert "lack {'nvidia.com/mig.config': 'nvl-balanced'}" in checks.taint_label_problems(bad, stack)[0]
    bad = broken(eastus, checks.AGENT_POOL, "nvlmig", lambda i: i.update(gpuInstanceProfile="MIG1g"))
    assert checks.taint_label_problems(bad, stack) == ["pool nvlmig: gpuInstanceProfile MIG1g, want None"]


def test_driver_ownership_check(eastus):
    def values(edit: Callable[[dict[str, Any]], None]) -> list[Registered]:
        return broken(eastus, checks.RELEASE, 0, lambda i: edit(i["values"]))

    assert checks.driver_problems(values(lambda v: v["driver"].update(enabled=False))) == [
        "driver.enabled is False; pools without an AKS driver: ['nvlmigc749', 't4spot028f']"
    ]
    # one pool keeps the AKS driver: the operator must skip it (nvidia.com/gpu.deploy.driver=false)
    bad = broken(eastus, checks.AGENT_POOL, "t4spot", lambda i: i["gpuProfile"].update(driver="Install"))
    assert checks.driver_problems(bad) == [
        "AgentPool t4spot028f: AKS driver True, nvidia.com/gpu.deploy.driver=false False"
    ]
    bad = broken(eastus, checks.RELEASE, 0, lambda i: i.update(chart="nvidia-device-plugin"))
    assert "no GPU Operator" in checks.driver_problems(bad)[0]


@needs_charts
def test_helm_key_check(eastus):
    bad = broken(eastus, checks.RELEASE, 0, lambda i: i["values"]["migManager"].update(withReboot=True))
    assert checks.helm_key_problems(bad) == ["chart gpu-operator has no value migManager.withReboot"]


def test_kubernetes_object_check(eastus):
    bad = broken(eastus, checks.RELEASE, 0, lambda i: i["values"]["migManager"]["config"].update(name="MIG Config"))
    assert "ConfigMap MIG Config" in checks.kubernetes_object_problems(bad)[0]
    bad = broken(eastus, checks.RELEASE, 0, lambda i: i["values"]["devicePlugin"]["config"].update(data={"a": 1}))
    assert checks.kubernetes_object_problems(bad) != []


def test_release_check(eastus, stack):
    bad = broken(eastus, checks.RELEASE, 0, lambda i: i.update(version="v25.3.0"))
    assert checks.release_problems(bad, stack) == ["gpu-operator release version v25.3.0, pinned v26.7.0"]
    no_identity = copy.deepcopy(eastus)
    checks.the(no_identity, checks.K8S_PROVIDER).inputs.pop("clusterIdentifier")
    assert checks.release_problems(no_identity, stack) == ["no single Kubernetes provider with a clusterIdentifier"]


def test_a_deliberately_broken_fixture_fails_the_checks():
    """tests/fixtures/infra/broken-aks-resources.json: what a careless program could register (a GPU pool inline,
    an invalid pool name, an OS SKU AKS does not have, a spot pool with surge nodes and without AKS's spot taint,
    min/max without autoscaling)."""
    resources = [Registered(**r) for r in json.loads(BROKEN_FIXTURE.read_text())["resources"]]
    problems = (
        checks.enum_problems(resources)
        + checks.pool_name_problems(resources)
        + checks.count_problems(resources)
        + checks.inline_pool_problems(resources, load_catalog())
        + checks.spot_problems(resources)
    )
    assert problems == [
        "AgentPool gpu_spot: osSKU 'Ubuntu1804' is not one of ['AzureLinux', 'AzureLinux3', 'CBLMariner', 'Ubuntu',"
        " 'Ubuntu2204', 'Windows2019', 'Windows2022']",
        "pool name 'gpu_spot' is not an AKS Linux pool name",
        "AgentPool gpu_spot: minCount/maxCount without autoscaling",
        "ManagedCluster broken: inline pools ['system', 'h100'], want only one System pool",
        "ManagedCluster broken: GPU pool h100 (Standard_ND96isr_H100_v5) is inline",
        "AgentPool gpu_spot: spot pool with upgradeSettings.maxSurge",
        "AgentPool gpu_spot: spot pool without AKS's own spot taint and label (a diff on every refresh)",
    ]


EASTUS_CLUSTER_ID = f"/mock/{checks.CLUSTER}/gpufleet-prod-eastus"
SECRETS = "azureKeyvaultSecretsProvider"
# rule -> the resource to break, which one, the edit, and the rules that then fail
BASELINE_BREAKS: dict[str, tuple[str, str | int, Callable[[dict[str, Any]], None], set[str]]] = {
    "Azure.AKS.AuthorizedIPs": (checks.CLUSTER, 0, lambda i: i.pop("apiServerAccessProfile"), set()),
    "Azure.AKS.NetworkPolicy": (checks.CLUSTER, 0, lambda i: i["networkProfile"].update(networkPolicy="none"), set()),
    "Azure.AKS.LocalAccounts": (checks.CLUSTER, 0, lambda i: i.update(disableLocalAccounts=False), set()),
    "Azure.AKS.ManagedAAD": (checks.CLUSTER, 0, lambda i: i.pop("aadProfile"), {"Azure.AKS.AzureRBAC"}),
    "Azure.AKS.AzureRBAC": (checks.CLUSTER, 0, lambda i: i["aadProfile"].update(enableAzureRBAC=False), set()),
    "Azure.AKS.DefenderProfile": (
        checks.CLUSTER,
        0,
        lambda i: i["securityProfile"]["defender"]["securityMonitoring"].update(enabled=False),
        set(),
    ),
    "Azure.AKS.AzurePolicyAddOn": (checks.CLUSTER, 0, lambda i: i["addonProfiles"].pop("azurepolicy"), set()),
    "Azure.AKS.AuditLogs": (
        checks.DIAGNOSTIC_SETTING,
        0,
        lambda i: i.update(logs=[x for x in i["logs"] if x["category"] != "guard"]),
        set(),
    ),
    "Azure.AKS.PlatformLogs": (checks.DIAGNOSTIC_SETTING, 0, lambda i: i.pop("metrics"), set()),
    "gpufleet.AKS.EgressControl": (
        checks.CLUSTER,
        0,
        lambda i: i["networkProfile"].update(outboundType="loadBalancer"),
        set(),
    ),
    "gpufleet.AKS.ImageCleaner": (
        checks.CLUSTER,
        0,
        lambda i: i["securityProfile"]["imageCleaner"].update(enabled=False),
        set(),
    ),
    "Azure.AKS.SecretStore": (
        checks.CLUSTER,
        0,
        lambda i: i["addonProfiles"][SECRETS].update(enabled=False),
        {"Azure.AKS.SecretStoreRotation"},
    ),
    "Azure.AKS.SecretStoreRotation": (
        checks.CLUSTER,
        0,
        lambda i: i["addonProfiles"][SECRETS]["config"].update(enableSecretRotation="false"),
        set(),
    ),
    "gpufleet.AKS.EncryptionAtHost": (
        checks.AGENT_POOL,
        "t4spot",
        lambda i: i.update(enableEncryptionAtHost=False),
        set(),
    ),
}


def test_every_baseline_rule_can_be_broken():
    assert set(BASELINE_BREAKS) == set(RULE_NAMES)


@pytest.mark.parametrize("rule", sorted(BASELINE_BREAKS))
def test_baseline_check(eastus, rule: str):
    assert all(checks.baseline_results(eastus, EASTUS_CLUSTER_ID).values())
    typ, which, edit, also = BASELINE_BREAKS[rule]
    results = checks.baseline_results(broken(eastus, typ, which, edit), EASTUS_CLUSTER_ID)
    assert {name for name, ok in results.items() if not ok} == {rule, *also}


def test_baseline_wiring_check(eastus):
    assert checks.baseline_wiring_problems(eastus, EASTUS_CLUSTER_ID) == []
    bad = broken(eastus, checks.SUBNET, 0, lambda i: i.pop("natGateway"))
    assert checks.baseline_wiring_problems(bad, EASTUS_CLUSTER_ID)[0] == (
        "userAssignedNATGateway, but the nodes' subnet has no NAT gateway"
    )
    bad = broken(eastus, checks.CLUSTER, 0, lambda i: i["networkProfile"].pop("networkDataplane"))
    assert checks.baseline_wiring_problems(bad, EASTUS_CLUSTER_ID) == [
        "networkPolicy cilium without networkDataplane cilium"
    ]
    bad = broken(
        eastus, checks.CLUSTER, 0, lambda i: i["apiServerAccessProfile"].update(authorizedIPRanges=["203.0.113.0/28"])
    )
    assert (
        "is not among the API server's authorized ranges" in checks.baseline_wiring_problems(bad, EASTUS_CLUSTER_ID)[0]
    )
    bad = broken(eastus, checks.DIAGNOSTIC_SETTING, 0, lambda i: i.update(workspaceId="/elsewhere"))
    assert "report elsewhere than the workspace" in checks.baseline_wiring_problems(bad, EASTUS_CLUSTER_ID)[0]
    bad = broken(eastus, checks.DIAGNOSTIC_SETTING, 0, lambda i: i.update(resourceUri="/other"))
    setting = checks.of_type(eastus, checks.DIAGNOSTIC_SETTING)[0].name
    assert checks.baseline_wiring_problems(bad, EASTUS_CLUSTER_ID) == [
        f"DiagnosticSetting {setting}: resourceUri /other, not the cluster"
    ]
