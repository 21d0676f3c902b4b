"""The AMD GPU Operator's release from a stack's plan (gpufleet.kube.amd_operator), without helm: the DeviceConfig
the chart renders from its values (selector, driver, advertiser, naming strategy, metrics exporter, DCM), the node
labels the operator reads on AMD pools and host groups, the tolerations, which chart brings the cluster's one NFD, the
bare-metal release in the host view, and AMD's owners per node (gpufleet.spec.owners). The render with the real chart
is tests/unit/kube/test_amd_render.py."""

from __future__ import annotations

import json

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.kube import amd_operator
from gpufleet.kube.labels import AMD_GPU_FEATURE_LABEL, AMD_GPU_OPERATOR_LABEL, DCM_PROFILE_LABEL
from gpufleet.kube.monitoring import monitoring_objects
from gpufleet.plan import hosts
from gpufleet.plan.model import AmdPartitionGroupPlan, AmdPartitionPlan, ChartRelease
from gpufleet.spec import owners
from gpufleet.spec.load import load_stack_text
from gpufleet.spec.models import GpuPool, HostGroup
from tests.conftest import TODAY, cli
from tests.unit.kube.amd_stacks import (
    AKS_FILE,
    AMD_ONLY,
    BAREMETAL,
    BAREMETAL_FILE,
    BAREMETAL_MIXED,
    MIXED,
    MIXED_PLUGIN,
    edited,
    plan,
    write,
)

AMD = amd_operator.AMD_GPU_OPERATOR_CHART
SKU = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
SPOT = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
AMD_TAINT = {"key": "amd.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
SYSTEM = {"key": "CriticalAddonsOnly", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
CONTROL_PLANE = {
    "key": "node-role.kubernetes.io/control-plane",
    "operator": "Equal",
    "value": "",
    "effect": "NoSchedule",
}
DCM_TAINT = {"key": "amd-dcm", "operator": "Equal", "value": "up", "effect": "NoExecute"}


def _amd(text: str) -> ChartRelease:
    release = plan(text).cluster.amd_gpu_software
    assert release is not None
    return release


def _spec(release: ChartRelease) -> dict:
    return release.values["deviceConfig"]["spec"]


def _nulls(value: object, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{path}[{i}]")]
    return [path] if value is None else []


# -- the release and its DeviceConfig ------------------------------------------------------------------------------


def test_an_aks_cluster_installs_the_pinned_amd_chart_into_its_privileged_namespace():
    release = _amd(AMD_ONLY)
    assert (release.chart, release.version) == ("gpu-operator-charts", "v1.5.1")
    assert release.repository == "https://rocm.github.io/gpu-operator"
    assert release.namespace == "kube-amd-gpu"
    assert release.namespace_labels == {"pod-security.kubernetes.io/enforce": "privileged"}
    # the chart renders the DeviceConfig from these values on install and on every upgrade
    assert release.values["crds"] == {"defaultCR": {"install": True, "upgrade": True}}


@pytest.mark.parametrize("text", [MIXED, MIXED_PLUGIN, AMD_ONLY])
def test_the_values_hold_no_null_which_pulumi_would_drop_before_helm_sees_it(text):
    # Pulumi leaves a null out of a map (tests/infra's mocks show it), so a null could not remove a chart's value
    assert _nulls(_amd(text).values) == []
    assert _nulls(plan(BAREMETAL, BAREMETAL_FILE).baremetal.releases[AMD].values) == []


def test_a_cluster_of_amd_pools_alone_has_no_nvidia_release():
    cluster = plan(AMD_ONLY).cluster
    assert cluster.gpu_software is None and cluster.gpu_chart is None and cluster.operator_cr is None
    assert plan(MIXED).cluster.gpu_software.chart == "gpu-operator"


def test_on_aks_the_operator_installs_the_driver_at_the_stacks_amdgpu_pin_through_kmm():
    release = _amd(AMD_ONLY)
    driver = _spec(release)["driver"]
    assert driver["enable"] is True and driver["version"] == "30.10.1"
    # the stack's repository for the image KMM builds, with its credentials (not the chart's placeholder)
    assert driver["image"] == "registry.example.net/amd/amdgpu-driver"
    assert driver["imageRegistrySecret"] == {"name": "amd-driver-push"}
    assert release.values["kmm"]["enabled"] is True and release.values["kmm"]["watch"] is True
    assert SYSTEM in release.values["kmm"]["controller"]["manager"]["tolerations"]


def test_on_bare_metal_the_amd_driver_role_owns_the_driver():
    release = plan(BAREMETAL, BAREMETAL_FILE).baremetal.releases[AMD]
    driver = _spec(release)["driver"]
    # the host's driver, at the version the role installs (for the record: the operator installs nothing)
    assert driver == {"enable": False, "version": "30.10.1"}
    assert release.values["kmm"] == {"enabled": False, "watch": False}  # no KMM, so no cert-manager needed
    # the host view's flag is NVIDIA's chart's: AMD hosts keep the amd_driver role's driver (no image repository for
    # an operator-built one on bare metal)
    view = hosts.host_view(plan(BAREMETAL, BAREMETAL_FILE), ["mi300x"], driver_preinstalled=False)
    operator_driver = view["charts"][AMD]["values"]["deviceConfig"]["spec"]["driver"]
    assert operator_driver["enable"] is False
    assert view["driver_owner"] == "host"  # what verify's owners column expects on the host


def test_the_deviceconfig_selects_gpufleets_label_and_nfds_amd_label():
    assert _spec(_amd(MIXED))["selector"] == {AMD_GPU_OPERATOR_LABEL: "true", AMD_GPU_FEATURE_LABEL: "true"}
    pools = {p.name: p for p in plan(MIXED).pools}
    assert pools["mi300x"].labels[AMD_GPU_OPERATOR_LABEL] == "true"
    assert pools["mi300xcpx"].labels[AMD_GPU_OPERATOR_LABEL] == "true"
    assert AMD_GPU_OPERATOR_LABEL not in pools["h100"].labels
    assert not [k for k in pools["mi300x"].labels if k.startswith("nvidia.com/")]


def test_an_amd_spot_pool_carries_akss_spot_label():
    pool = next(p for p in plan(AMD_ONLY).pools if p.name == "mi300x")
    assert pool.labels["kubernetes.azure.com/scalesetpriority"] == "spot"


def test_the_device_plugin_names_resources_mixed_with_a_partitioned_pool_and_single_without():
    assert _spec(_amd(AMD_ONLY))["devicePlugin"]["devicePluginArguments"] == {"resource_naming_strategy": "mixed"}
    whole = edited(AMD_ONLY, "        amd_partitions: {managed_by: operator, profile: cpx-nps4, memory: NPS4,"
                   " devices: [{compute: CPX}]}\n", "")  # fmt: skip
    spec = _spec(_amd(whole))
    assert spec["devicePlugin"]["devicePluginArguments"] == {"resource_naming_strategy": "single"}
    assert spec["configManager"] == {"enable": False}  # nothing to partition: no DCM
    assert "defaultDCMConfigMap" not in _amd(whole).values


def dra_release() -> ChartRelease:
    """AMD_ONLY's release with its pools' advertiser dra (the stack itself: the rules take AMD's DRA driver on
    Kubernetes 1.32 or later)."""
    text = edited(AMD_ONLY, "        count: 1\n", "        count: 1\n        advertiser: dra\n")
    text = edited(text, "        count: 2\n", "        count: 2\n        advertiser: dra\n")
    release = plan(text).cluster.amd_gpu_software
    assert release is not None
    return release


def test_dra_pools_get_the_dra_driver_and_no_device_plugin():
    release = dra_release()
    spec = _spec(release)
    assert spec["devicePlugin"]["enableDevicePlugin"] is False and "devicePluginArguments" not in spec["devicePlugin"]
    assert spec["draDriver"]["enable"] is True and AMD_TAINT in spec["draDriver"]["tolerations"]
    assert release.values["draDriver"] == {"deviceClass": {"create": True}}
    assert _amd(AMD_ONLY).values["draDriver"] == {"deviceClass": {"create": False}}


def test_the_metrics_exporter_runs_on_port_5000_under_every_amd_pools_taints():
    exporter = _spec(_amd(MIXED))["metricsExporter"]
    assert exporter["enable"] is True and exporter["port"] == 5000
    assert exporter["tolerations"] == [SKU, SPOT, AMD_TAINT]


def test_operands_tolerate_the_amd_pools_taints_and_controllers_the_system_pools():
    release = _amd(MIXED)
    spec = _spec(release)
    for key in ("devicePluginTolerations", "nodeLabellerTolerations"):
        assert spec["devicePlugin"][key] == [SKU, SPOT, AMD_TAINT]
    controllers = release.values["controllerManager"]["manager"]["tolerations"]
    assert SYSTEM in controllers and AMD_TAINT not in controllers
    # the chart's own control-plane tolerations are kept (a values list replaces the chart's)
    assert CONTROL_PLANE in controllers


def test_the_dcm_gets_one_profile_per_operator_layout_and_the_pool_its_label():
    release = _amd(AMD_ONLY)
    spec = _spec(release)
    assert spec["configManager"]["enable"] is True
    assert spec["configManager"]["config"] == {"name": "gpufleet-dcm-config"}
    assert AMD_TAINT in spec["configManager"]["configManagerTolerations"]
    config = json.loads(release.values["defaultDCMConfigMap"]["data"]["config.json"])
    assert config["gpu-config-profiles"] == {
        "cpx-nps4": {
            "skippedGPUs": {"ids": []},
            "profiles": [{"computePartition": "CPX", "memoryPartition": "NPS4", "numGPUsAssigned": 8}],
        }
    }
    assert release.values["defaultDCMConfigMap"]["install"] is False  # gpufleet creates it: dcm_config_map
    cm = amd_operator.dcm_config_map(release)
    assert cm["metadata"] == {"name": "gpufleet-dcm-config", "namespace": "kube-amd-gpu"}
    pool = next(p for p in plan(AMD_ONLY).pools if p.name == "mi300xcpx")
    assert pool.labels[DCM_PROFILE_LABEL] == "cpx-nps4"


def test_an_operator_partitioned_host_group_gets_its_profile_with_counts_and_skipped_gpus():
    text = edited(BAREMETAL, "          profile: mixed-nps1\n", "          managed_by: operator\n"
                  "          profile: mixed-nps1\n")  # fmt: skip
    planned = plan(text, BAREMETAL_FILE)
    release = planned.baremetal.releases[AMD]
    profile = json.loads(release.values["defaultDCMConfigMap"]["data"]["config.json"])["gpu-config-profiles"]
    assert profile["mixed-nps1"] == {
        "skippedGPUs": {"ids": [7]},
        "profiles": [
            {"computePartition": "CPX", "memoryPartition": "NPS1", "numGPUsAssigned": 4},
            {"computePartition": "SPX", "memoryPartition": "NPS1", "numGPUsAssigned": 3},
        ],
    }
    view = hosts.host_view(planned, ["mi300x"])["charts"][AMD]
    assert view["node_labels"] == {AMD_GPU_OPERATOR_LABEL: "true", DCM_PROFILE_LABEL: "mixed-nps1"}
    assert view["config_map"]["data"] == release.values["defaultDCMConfigMap"]["data"]


def test_host_managed_partitions_get_no_dcm_and_no_profile_label():
    planned = plan(BAREMETAL, BAREMETAL_FILE)
    view = hosts.host_view(planned, ["mi300x"])["charts"][AMD]
    assert view["node_labels"] == {AMD_GPU_OPERATOR_LABEL: "true"}
    assert view["label_patch"] == {AMD_GPU_OPERATOR_LABEL: "true", DCM_PROFILE_LABEL: None}
    assert view["config_map"] is None
    assert _spec(planned.baremetal.releases[AMD])["configManager"] == {"enable": False}


def test_the_host_view_keeps_nvidias_charts_and_adds_amds_only_where_there_are_amd_groups():
    mixed = plan(BAREMETAL_MIXED, BAREMETAL_FILE)
    view = hosts.host_view(mixed, ["h100"])
    assert set(view["charts"]) == {"gpu-operator", "nvidia-device-plugin", AMD}
    assert view["charts"][AMD]["node_labels"] == {}  # an H100 host: nothing of AMD's
    assert view["charts"]["gpu-operator"]["node_labels"]["nvidia.com/device-plugin.config"] == "default"
    amd_host = hosts.host_view(mixed, ["mi300x"])
    assert amd_host["charts"]["gpu-operator"]["node_labels"] == {}
    # NVIDIA's GPU Operator brings NFD there: the AMD chart brings none
    assert mixed.baremetal.releases[AMD].values["node-feature-discovery"] == {"enabled": False}
    assert plan(BAREMETAL, BAREMETAL_FILE).baremetal.releases[AMD].values["node-feature-discovery"]["enabled"] is True


def test_two_layouts_under_one_dcm_profile_name_are_refused_naming_both():
    def layout(compute: str) -> AmdPartitionPlan:
        return AmdPartitionPlan("operator", "p", "NPS1", (AmdPartitionGroupPlan(compute, "all"),), (), None, {})

    targets = [
        amd_operator.AmdTarget("a", "device-plugin", layout("CPX"), gpus=8),
        amd_operator.AmdTarget("b", "device-plugin", layout("SPX"), gpus=8),
    ]
    with pytest.raises(amd_operator.AmdOperatorError, match="a and b name DCM profile 'p' for different layouts"):
        amd_operator.dcm_config(targets)
    same = [targets[0], amd_operator.AmdTarget("c", "device-plugin", layout("CPX"), gpus=8)]
    assert list(amd_operator.dcm_config(same)["gpu-config-profiles"]) == ["p"]


def test_an_amd_pool_of_advertiser_none_is_refused_and_a_host_group_of_it_left_out_of_the_deviceconfig():
    # on AKS the operator also installs the driver: a pool it does not serve would have none
    text = edited(AMD_ONLY, "        count: 2\n", "        count: 2\n        advertiser: none\n")
    loaded = load_stack_text(text, AKS_FILE, catalog=load_catalog(), today=TODAY)
    assert any("its nodes would have no AMD driver at all" in d.message for d in loaded.diagnostics)
    # on bare metal the amd_driver role installs it: the operator leaves the group alone
    text = edited(BAREMETAL, "        gpus_per_host: 8\n", "        gpus_per_host: 8\n        advertiser: none\n")
    planned = plan(text, BAREMETAL_FILE)
    labels = planned.host_groups[0].node_labels[AMD]
    assert AMD_GPU_OPERATOR_LABEL not in labels and DCM_PROFILE_LABEL not in labels
    assert _spec(planned.baremetal.releases[AMD])["configManager"] == {"enable": False}


# -- one NFD per cluster -------------------------------------------------------------------------------------------


def test_the_amd_chart_brings_nfd_only_where_nvidias_chart_does_not():
    assert _amd(MIXED).values["node-feature-discovery"] == {"enabled": False}  # the GPU Operator's NFD
    alone = _amd(MIXED_PLUGIN).values["node-feature-discovery"]  # the standalone device plugin deploys none
    assert alone["enabled"] is True
    # its worker labels every GPU node: the NVIDIA pool's taint too, and the chart's own tolerations stay
    assert SKU in alone["worker"]["tolerations"] and AMD_TAINT in alone["worker"]["tolerations"]
    assert DCM_TAINT in alone["worker"]["tolerations"]
    assert _amd(AMD_ONLY).values["node-feature-discovery"]["enabled"] is True


def test_nvidias_nfd_worker_tolerates_the_amd_pools_taints_so_it_labels_them():
    values = plan(MIXED).cluster.gpu_software.values
    assert AMD_TAINT in values["node-feature-discovery"]["worker"]["tolerations"]


# -- owners per node ---------------------------------------------------------------------------------------------


def test_an_amd_pools_driver_is_the_amd_operators_and_its_advertiser_the_deviceconfigs():
    pool = GpuPool.model_validate({"name": "mi300x", "vm_size": "Standard_ND96isr_MI300X_v5", "count": 1})
    table = owners.owners(owners.pool_claims(pool, ("aks", "gpu_pools", 0)))
    assert {c: claim.owner for c, claim in table.items()} == {
        "driver": owners.AMD_OPERATOR_DRIVER,
        "advertiser": owners.AMD_DEVICE_PLUGIN,
    }
    dra = GpuPool.model_validate({**pool.model_dump(exclude_unset=True), "advertiser": "dra"})
    assert owners.owners(owners.pool_claims(dra, ("aks", "gpu_pools", 0)))["advertiser"].owner == owners.AMD_DRA_DRIVER


def test_an_amd_host_groups_driver_is_the_amd_driver_roles():
    group = HostGroup.model_validate({"name": "mi300x", "gpu_model": "MI300X", "gpus_per_host": 8})
    claims = owners.host_group_claims(group, ("baremetal", "host_groups", 0))
    assert [(c.concern, c.owner) for c in claims] == [
        ("driver", owners.AMD_HOST_DRIVER),
        ("advertiser", owners.AMD_DEVICE_PLUGIN),
    ]
    nvidia = HostGroup.model_validate({"name": "h100", "gpu_model": "H100-SXM5-80GB"})
    assert owners.owners(owners.host_group_claims(nvidia, ("baremetal", "host_groups", 1)))["driver"].owner == (
        "the nvidia_driver role"
    )


def test_one_clusters_amd_targets_cannot_mix_the_device_plugin_and_dra():
    def claim(i: int, advertiser: str) -> owners.Claim:
        pool = GpuPool.model_validate(
            {"name": f"mi{i}", "vm_size": "Standard_ND96isr_MI300X_v5", "count": 1, "advertiser": advertiser}
        )
        return owners.owners(owners.pool_claims(pool, ("aks", "gpu_pools", i)))["advertiser"]

    (finding,) = owners.deviceconfig_conflicts([claim(0, "device-plugin"), claim(1, "none"), claim(2, "dra")])
    assert finding.path == ("aks", "gpu_pools", 2, "advertiser")
    assert "the AMD DRA driver" in finding.message and "the AMD device plugin" in finding.message
    assert list(owners.deviceconfig_conflicts([claim(0, "dra"), claim(1, "none"), claim(2, "dra")])) == []


# -- the readers of a plan without NVIDIA's release -------------------------------------------------------------


def test_monitoring_of_an_amd_only_cluster_goes_to_the_amd_namespace():
    text = edited(AMD_ONLY, "    gpu_software: {", "    gpu_software: {monitoring: true, ")
    objects = monitoring_objects(plan(text), None)
    assert objects and {o["metadata"]["namespace"] for o in objects} == {"kube-amd-gpu"}


def test_gpufleet_plan_shows_the_amd_release_of_an_amd_only_cluster(tmp_path):
    name = write(tmp_path, AMD_ONLY)
    proc = cli("plan", str(tmp_path / f"Pulumi.{name}.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "AMD GPU software: gpu-operator-charts v1.5.1 with a DeviceConfig, namespace kube-amd-gpu" in proc.stdout
    assert "  GPU software:" not in proc.stdout
    assert "AMD partitions cpx-nps4 (NPS4, applied by the AMD GPU Operator's DCM): 64 x cpx_nps4 per node" in (
        proc.stdout
    )
