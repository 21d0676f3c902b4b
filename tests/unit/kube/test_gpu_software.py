"""Helm values for the GPU Operator and the device plugin: only the charts' own keys, driver ownership, MIG and
sharing configs in NVIDIA's formats."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML

from gpufleet.kube.gpu_software import (
    DEFAULT_DEVICE_PLUGIN_CONFIG,
    DEVICE_PLUGIN_CHART,
    GPU_CLUSTER,
    GPU_OPERATOR_CHART,
    DraDriver,
    GpuSoftware,
    SandboxWorkloads,
    SharingConfig,
    device_plugin_values,
    for_baremetal,
    label_patch,
    operator_values,
    software_labels,
    toleration,
)
from gpufleet.kube.labels import DEPLOY_DEVICE_PLUGIN_LABEL, DRA_OPERAND_LABELS, GPU_PRESENT_LABEL, MIG_CONFIG_LABEL
from gpufleet.mig.outputs import CONFIGMAP_KEY, DISABLED_CONFIG
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack_text
from tests.charts import chart_keys, needs_charts, unknown_keys
from tests.stacks import release_block

MIG_CONFIG = {
    "version": "v1",
    "mig-configs": {
        "h100-inference": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
    },
}


def _load(text: str):
    return YAML(typ="safe").load(text)


VARIANTS = {
    "operator owns everything": GpuSoftware(driver_preinstalled=False, toolkit_preinstalled=False),
    "MIG on cloud VMs, sharing, monitoring": GpuSoftware(
        driver_preinstalled=True,
        toolkit_preinstalled=True,
        mig_strategy="mixed",
        mig_parted_config=MIG_CONFIG,
        sharing=(SharingConfig("a100-time-slicing", "time-slicing", 4), SharingConfig("l4-mps", "mps", 2)),
        taints=("sku=gpu:NoSchedule",),
        mig_with_reboot=True,
        monitoring=True,
    ),
    "GPU VMs, passed through only": GpuSoftware(
        driver_preinstalled=True, toolkit_preinstalled=True, sandbox=SandboxWorkloads(passthrough=True)
    ),
    "DRA: a GPUCluster with the operator's driver, ComputeDomains, unadvertised nodes": GpuSoftware(
        driver_preinstalled=False,
        toolkit_preinstalled=False,
        operator_cr=GPU_CLUSTER,
        dra=DraDriver(version="v0.5.0", compute_domains=True),
        unadvertised=True,
    ),
}


@needs_charts
@pytest.mark.parametrize("software", VARIANTS.values(), ids=VARIANTS.keys())
def test_values_use_only_the_charts_keys(software: GpuSoftware):
    assert unknown_keys(operator_values(software), chart_keys("gpu-operator")) == []
    assert unknown_keys(device_plugin_values(software), chart_keys("nvidia-device-plugin")) == []


@needs_charts
def test_the_key_check_catches_a_misspelled_key():
    values = operator_values(VARIANTS["operator owns everything"])
    values["migManager"]["cofnig"] = {"name": "x"}
    values["devicePlugin"]["config"]["data"]["anything"] = "free-form: allowed"
    assert unknown_keys(values, chart_keys("gpu-operator")) == ["migManager.cofnig"]


def test_driver_and_toolkit_are_left_to_whoever_installed_them():
    hosts = operator_values(GpuSoftware(driver_preinstalled=True, toolkit_preinstalled=True))
    assert hosts["driver"] == {"enabled": False} and hosts["toolkit"] == {"enabled": False}
    operator = operator_values(GpuSoftware(driver_preinstalled=False, toolkit_preinstalled=False))
    assert operator["driver"] == {"enabled": True} and operator["toolkit"] == {"enabled": True}


def test_mig_manager_gets_the_planners_config_and_a_default_that_disables_mig():
    values = operator_values(VARIANTS["MIG on cloud VMs, sharing, monitoring"])
    assert values["mig"] == {"strategy": "mixed"}
    manager = values["migManager"]
    assert manager["enabled"] is True and manager["config"]["create"] is True
    assert manager["config"]["default"] == DISABLED_CONFIG
    assert manager["env"] == [{"name": "WITH_REBOOT", "value": "true"}]
    config = _load(manager["config"]["data"][CONFIGMAP_KEY])
    assert config["version"] == "v1"
    assert config["mig-configs"]["h100-inference"] == MIG_CONFIG["mig-configs"]["h100-inference"]
    assert config["mig-configs"][DISABLED_CONFIG] == [{"devices": "all", "mig-enabled": False}]


def test_without_mig_the_mig_manager_is_off_and_no_reboot_is_asked_for():
    values = operator_values(GpuSoftware(driver_preinstalled=True, toolkit_preinstalled=True, mig_with_reboot=True))
    assert values["migManager"] == {"enabled": False}
    assert "mig" not in values


def test_passthrough_vms_alone_turn_on_the_vfio_manager_and_leave_the_vgpu_managers_off():
    values = operator_values(VARIANTS["GPU VMs, passed through only"])
    assert values["sandboxWorkloads"] == {"enabled": True, "defaultWorkload": "container", "mode": "kubevirt"}
    assert values["vfioManager"] == values["sandboxDevicePlugin"] == {"enabled": True}
    assert values["vgpuManager"] == values["vgpuDeviceManager"] == {"enabled": False}
    assert "sandboxWorkloads" not in operator_values(VARIANTS["operator owns everything"])


def test_sharing_configs_follow_the_device_plugin_format():
    software = VARIANTS["MIG on cloud VMs, sharing, monitoring"]
    data = operator_values(software)["devicePlugin"]["config"]["data"]
    assert set(data) == {DEFAULT_DEVICE_PLUGIN_CONFIG, "a100-time-slicing", "l4-mps"}
    assert _load(data["a100-time-slicing"]) == {
        "version": "v1",
        "flags": {"migStrategy": "mixed"},
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    }
    assert _load(data["l4-mps"])["sharing"] == {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}
    assert _load(data[DEFAULT_DEVICE_PLUGIN_CONFIG]) == {"version": "v1", "flags": {"migStrategy": "mixed"}}
    # the standalone chart takes the same configs
    assert device_plugin_values(software)["config"]["map"] == data


def test_daemonsets_tolerate_the_gpu_nodes_taints():
    sku_gpu = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    assert toleration("sku=gpu:NoSchedule") == sku_gpu
    assert toleration("dedicated:NoExecute") == {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}
    values = operator_values(VARIANTS["MIG on cloud VMs, sharing, monitoring"])
    assert sku_gpu in values["daemonsets"]["tolerations"]
    assert values["dcgmExporter"]["serviceMonitor"] == {"enabled": False}  # gpufleet's own scrapes it
    assert values["dcgmExporter"]["config"]["name"] == "gpufleet-dcgm-metrics"


BAREMETAL_MIG_STACK = (
    """
config:
  gpufleet:stage: prod
  gpufleet:region: onprem
"""
    + release_block()
    + """  gpufleet:baremetal:
    inventory: inventories/prod-onprem
    host_groups:
      - name: hgx
        gpu_model: H100-SXM5-80GB
        gpus_per_host: 8
        mig:
          config_name: hgx-half
          devices:
            - {gpus: [0, 1, 2, 3], profiles: {3g.40gb: 2}}
"""
)


def test_bare_metal_values_come_from_the_host_groups_plan(catalog):
    loaded = load_stack_text(BAREMETAL_MIG_STACK, "Pulumi.prod-onprem.yaml", catalog=catalog)
    assert loaded.ok, loaded.diagnostics
    plan = plan_stack(loaded.stack, catalog)
    software = for_baremetal(plan.host_groups, plan.baremetal.mig_parted_config)
    assert software.driver_preinstalled and software.toolkit_preinstalled
    assert software.mig_strategy == "mixed"  # GPUs 4-7 stay whole
    values = operator_values(software)
    configs = _load(values["migManager"]["config"]["data"][CONFIGMAP_KEY])["mig-configs"]
    assert set(configs) == {"hgx-half", DISABLED_CONFIG}


def test_a_gpu_cluster_replaces_the_cluster_policy_and_leaves_out_its_operands():
    values = operator_values(GpuSoftware(True, True, operator_cr=GPU_CLUSTER, dra=DraDriver(None, False)))
    assert (values["clusterPolicy"], values["gpuCluster"]) == ({"deployCR": False}, {"deployCR": True})
    assert values["draDriver"] == {"computeDomains": {"enabled": False}}  # no pin: the chart's version
    assert values["devicePlugin"] == values["gfd"] == values["migManager"] == {"enabled": False}
    assert values["driver"] == {"enabled": False}  # AKS or the host roles installed it: no NVIDIADriver either


def test_advertiser_none_sets_each_charts_off_switches_and_the_patch_never_removes_them():
    plugin = {"mig_config": None, "device_plugin_config": DEFAULT_DEVICE_PLUGIN_CONFIG}
    assert software_labels(GPU_OPERATOR_CHART, **plugin, advertiser="none") == {DEPLOY_DEVICE_PLUGIN_LABEL: "false"}
    assert software_labels(GPU_OPERATOR_CHART, **plugin, advertiser="none", operator_cr=GPU_CLUSTER) == dict.fromkeys(
        DRA_OPERAND_LABELS, "false"
    )
    assert software_labels(DEVICE_PLUGIN_CHART, **plugin, advertiser="none") == {DEPLOY_DEVICE_PLUGIN_LABEL: "false"}
    assert software_labels(DEVICE_PLUGIN_CHART, **plugin)[GPU_PRESENT_LABEL] == "true"
    # a GPUCluster has no MIG manager: the layout's label is not set (the host role or AKS applies the layout)
    assert MIG_CONFIG_LABEL not in software_labels(
        GPU_OPERATOR_CHART,
        mig_config="h100-small",
        device_plugin_config=None,
        advertiser="dra",
        operator_cr=GPU_CLUSTER,
    )
    off = label_patch(GPU_OPERATOR_CHART, {DEPLOY_DEVICE_PLUGIN_LABEL: "false"})
    assert off[DEPLOY_DEVICE_PLUGIN_LABEL] == "false"
    # elsewhere the operator writes the key ("true"): gpufleet's patch leaves it alone rather than remove it
    assert DEPLOY_DEVICE_PLUGIN_LABEL not in label_patch(GPU_OPERATOR_CHART, {MIG_CONFIG_LABEL: "all-disabled"})
