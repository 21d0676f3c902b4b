"""Helm values for a cluster's GPU software: the NVIDIA GPU Operator, or the NVIDIA device plugin alone.

One source for both consumers: the Pulumi program (AKS clusters) and the ``gpu_operator`` / ``device_plugin``
roles (bare-metal Kubernetes) call these functions; neither keeps a template of its own. Only keys that exist
in the charts are written (tests compare them with key lists taken from the charts' ``values.yaml``):

- GPU Operator chart: ``driver.enabled`` / ``toolkit.enabled`` (false where AKS or the host roles installed
  them), ``mig.strategy``, ``migManager.config`` (a ConfigMap created by the release, holding the mig-parted
  config from the MIG planner), ``migManager.env`` ``WITH_REBOOT=true`` on cloud VMs (where a MIG mode change
  needs a reboot), ``devicePlugin.config`` (named device-plugin configs, chosen per node by the label
  ``nvidia.com/device-plugin.config``), ``dcgmExporter.serviceMonitor.enabled``, ``daemonsets.tolerations``;
  on bare-metal clusters with GPU VM host groups, the sandbox workloads (``sandboxWorkloads``, ``vfioManager``,
  ``sandboxDevicePlugin``, and with vGPU ``vgpuManager`` / ``vgpuDeviceManager``): the operator then deploys, per
  node, the operands of the node's ``nvidia.com/gpu.workload.config`` (docs/virtualization.md).
- Device plugin chart: ``config.map`` / ``config.default``, ``migStrategy``, ``tolerations``.

Device-plugin config format (``version: v1``): ``flags.migStrategy`` and ``sharing.timeSlicing`` or
``sharing.mps`` with ``resources: [{name, replicas}]`` (NVIDIA k8s-device-plugin README, "Shared Access to
GPUs").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpufleet.kube.labels import (
    DEPLOY_DEVICE_PLUGIN_LABEL,
    DEVICE_PLUGIN_CONFIG_LABEL,
    DRA_OPERAND_LABELS,
    GPU_PRESENT_LABEL,
    GPU_WORKLOAD_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    VGPU_CONFIG_LABEL,
)
from gpufleet.mig.outputs import CONFIGMAP_KEY, DISABLED_CONFIG, cluster_strategy, dump_yaml, with_disabled
from gpufleet.plan.model import ChartRelease, GpuWorkload, HostGroupPlan, OperatorCr, PoolPlan

if TYPE_CHECKING:
    from gpufleet.spec.models import Advertiser, Vgpu, Virtualization
    from gpufleet.spec.models import GpuSoftware as GpuSoftwareSettings

# The GPU Operator's daemonsets are privileged (driver, toolkit, device plugin, MIG manager, DCGM): Pod Security
# admission must let them run in its namespace.
PRIVILEGED_NAMESPACE_LABELS = {"pod-security.kubernetes.io/enforce": "privileged"}

# The charts gpufleet installs (their names in NVIDIA's repositories)
GPU_OPERATOR_CHART = "gpu-operator"
DEVICE_PLUGIN_CHART = "nvidia-device-plugin"

MigStrategy = Literal["single", "mixed"]
SharingMode = Literal["time-slicing", "mps"]
# What a GPU node's GPUs serve (gpufleet.plan.model.GpuWorkload)
CONTAINER_WORKLOAD: GpuWorkload = "container"
# gpufleet's VMs are KubeVirt's (sandboxWorkloads.mode; the other mode, kata, runs containers in VMs)
SANDBOX_MODE = "kubevirt"

# The GPU Operator's custom resource (gpufleet.plan.model.OperatorCr)
CLUSTER_POLICY: OperatorCr = "ClusterPolicy"
GPU_CLUSTER: OperatorCr = "GPUCluster"

MIG_CONFIGMAP = "gpufleet-mig-parted-config"
DEVICE_PLUGIN_CONFIGMAP = "gpufleet-device-plugin-config"
# the DCGM exporter's metrics list (gpufleet/catalog/dcgm_metrics.yaml), a ConfigMap the chart creates
DCGM_METRICS_CONFIGMAP = "gpufleet-dcgm-metrics"
DEFAULT_DEVICE_PLUGIN_CONFIG = "default"  # used on nodes without the nvidia.com/device-plugin.config label
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# The charts' own default toleration of their controllers and of NFD's worker (kept when gpufleet adds its own:
# a values list replaces the chart's list)
CONTROL_PLANE_TOLERATION = {
    "key": "node-role.kubernetes.io/control-plane",
    "operator": "Equal",
    "value": "",
    "effect": "NoSchedule",
}


@dataclass(frozen=True)
class SharingConfig:
    """A named device-plugin config that lets ``replicas`` pods share each GPU (or MIG instance)."""

    name: str  # the value of the node label nvidia.com/device-plugin.config
    mode: SharingMode
    replicas: int


@dataclass(frozen=True)
class SandboxWorkloads:
    """GPU VMs in the cluster (the GPU Operator's sandbox workloads): host groups that pass whole GPUs through (the
    VFIO manager binds them to vfio-pci), and the vGPU manager image of those that give VMs vGPUs (the validated
    stack's ``vgpu``: one image per cluster)."""

    passthrough: bool
    vgpu: Vgpu | None = None


@dataclass(frozen=True)
class DraDriver:
    """The NVIDIA DRA driver a GPUCluster deploys: its image tag (None: the chart's, draDriver.version), and whether
    its ComputeDomain half runs (multi-node NVLink: a DRA pool or host group whose GPUs' NVLink domain spans nodes)."""

    version: str | None
    compute_domains: bool


def operator_cr(advertisers: Iterable[str]) -> OperatorCr:
    """The GPU Operator's custom resource for GPU nodes with these advertisers: a GPUCluster where one is ``dra``
    (the spec's rules keep device-plugin nodes out of such a cluster), else a ClusterPolicy."""
    return GPU_CLUSTER if "dra" in set(advertisers) else CLUSTER_POLICY


def dra_driver_version(pins: Mapping[str, Any]) -> str | None:
    """The DRA driver image tag of the stack's release pin ``dra_driver`` (``v0.5.0``: the image's tags carry the
    ``v``), None without one (the chart's default, draDriver.version v0.5.0 in v26.7.0)."""
    # TODO(issue 24, item 1): read release.dra_driver as a typed field once the Release model has it.
    pin = pins.get("dra_driver")
    return f"v{str(pin).removeprefix('v')}" if pin else None


def gpu_workload(virtualization: Virtualization | None) -> GpuWorkload:
    """The GPU Operator's workload config of a GPU host group's nodes: ``vm-passthrough`` or ``vm-vgpu`` where its
    virtualization gives VMs GPUs (``device: gpu``), ``container`` otherwise."""
    if virtualization is None or virtualization.device != "gpu":
        return CONTAINER_WORKLOAD
    return "vm-vgpu" if virtualization.vgpu is not None else "vm-passthrough"


@dataclass(frozen=True)
class GpuSoftware:
    """What a cluster's GPU software depends on (for bare metal, built from a stack plan by ``for_baremetal``)."""

    driver_preinstalled: bool  # AKS or the nvidia_driver role installed the driver: the operator must not
    toolkit_preinstalled: bool  # likewise for the NVIDIA Container Toolkit
    mig_strategy: MigStrategy | None = None
    mig_parted_config: dict[str, Any] | None = None
    sharing: tuple[SharingConfig, ...] = ()
    taints: tuple[str, ...] = ()  # taints on the GPU nodes ("key=value:Effect"): the daemonsets tolerate them
    # taints on the nodes meant for cluster add-ons (AKS's system pool): the operator and NFD's master and garbage
    # collector run there, so they tolerate them
    system_taints: tuple[str, ...] = ()
    mig_with_reboot: bool = False  # cloud VMs need a reboot to change MIG mode
    monitoring: bool = False  # a Prometheus operator scrapes DCGM exporter (gpufleet.kube.monitoring's ServiceMonitor)
    sandbox: SandboxWorkloads | None = None  # GPU VM host groups (bare metal); None: every GPU node runs containers
    operator_cr: OperatorCr = CLUSTER_POLICY  # the GPU Operator's custom resource (GPUCluster: the DRA stack)
    dra: DraDriver | None = None  # the DRA driver of a GPUCluster
    unadvertised: bool = False  # some GPU nodes have advertiser none: the standalone device plugin stays off them


def toleration(taint: str) -> dict[str, str]:
    """A Kubernetes toleration matching a taint written ``key[=value]:Effect``."""
    spec, _, effect = taint.rpartition(":")
    key, eq, value = spec.partition("=")
    out = {"key": key, "operator": "Equal" if eq else "Exists"}
    if eq:
        out["value"] = value
    out["effect"] = effect
    return out


def tolerations(taints: Iterable[str]) -> list[dict[str, str]]:
    """The GPU toleration every NVIDIA daemonset carries, plus one per distinct node taint."""
    out = [dict(GPU_TOLERATION)]
    for taint in taints:
        t = toleration(taint)
        if t not in out:
            out.append(t)
    return out


def _controller_tolerations(software: GpuSoftware) -> list[dict[str, str]]:
    out = [dict(CONTROL_PLANE_TOLERATION)]
    out += [t for t in map(toleration, software.system_taints) if t not in out]
    return out


def device_plugin_config(mig_strategy: MigStrategy | None, sharing: SharingConfig | None = None) -> dict[str, Any]:
    """One device-plugin config (``version: v1``)."""
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": mig_strategy or "none"}}
    if sharing is not None:
        key = "timeSlicing" if sharing.mode == "time-slicing" else "mps"
        # with MIG strategy "mixed" the resources are nvidia.com/mig-<profile>; the plugin applies sharing to
        # the resource names listed, so list the whole-GPU name (what "single" and no-MIG nodes expose)
        config["sharing"] = {key: {"resources": [{"name": "nvidia.com/gpu", "replicas": sharing.replicas}]}}
    return config


def device_plugin_configs(software: GpuSoftware) -> dict[str, str]:
    """Named configs as the ConfigMap data both charts take: the default plus one per sharing config."""
    configs = {DEFAULT_DEVICE_PLUGIN_CONFIG: device_plugin_config(software.mig_strategy)}
    for sharing in software.sharing:
        configs[sharing.name] = device_plugin_config(software.mig_strategy, sharing)
    return {name: dump_yaml(config) for name, config in configs.items()}


def _mig_configmap_data(config: dict[str, Any]) -> dict[str, str]:
    return {CONFIGMAP_KEY: dump_yaml(with_disabled(config))}


def operator_values(software: GpuSoftware) -> dict[str, Any]:
    """Values for the GPU Operator chart (``nvidia/gpu-operator``): its ClusterPolicy, or its GPUCluster."""
    gpu_tolerations = tolerations(software.taints)
    values: dict[str, Any] = {
        "operator": {"tolerations": _controller_tolerations(software)},
        "driver": {"enabled": not software.driver_preinstalled},
        "toolkit": {"enabled": not software.toolkit_preinstalled},
        # the operands (driver, toolkit, device plugin, GFD, DCGM exporter, MIG manager, validator; the DRA driver)
        "daemonsets": {"tolerations": gpu_tolerations},
        # NFD's worker must run on every GPU node: the operator deploys its operands only where NFD found an NVIDIA
        # PCI device (feature.node.kubernetes.io/pci-10de.present); daemonsets.tolerations does not reach it
        "node-feature-discovery": {
            "worker": {"tolerations": [dict(CONTROL_PLANE_TOLERATION), *gpu_tolerations]},
            "master": {"tolerations": _controller_tolerations(software)},
            "gc": {"tolerations": _controller_tolerations(software)},
        },
        "dcgmExporter": dcgm_exporter_values(software),
    }
    if software.operator_cr == GPU_CLUSTER:
        return values | gpu_cluster_values(software)
    return values | cluster_policy_values(software)


def dcgm_exporter_values(software: GpuSoftware) -> dict[str, Any]:
    """The DCGM exporter: with monitoring, gpufleet's metrics list (a ConfigMap the chart creates from
    ``config.data``). The operator's own ServiceMonitor stays off either way: with monitoring, gpufleet's
    (:mod:`gpufleet.kube.monitoring`) scrapes the exporter and adds each series' node and pool, which the operator's
    cannot (it has no ``attachMetadata``); two would scrape every GPU twice."""
    values: dict[str, Any] = {"serviceMonitor": {"enabled": False}}
    if software.monitoring:
        from gpufleet.catalog.dcgm import load_dcgm_catalog

        values["config"] = {"name": DCGM_METRICS_CONFIGMAP, "create": True, "data": load_dcgm_catalog().csv()}
    return values


def gpu_cluster_values(software: GpuSoftware) -> dict[str, Any]:
    """The GPUCluster instead of the ClusterPolicy (the chart renders one: it fails with both), with the DRA driver's
    version and its ComputeDomain half only where NVLink spans nodes (the chart's default turns it on). A GPUCluster
    deploys the DRA driver, DCGM and its exporter, never the device plugin, GFD or the MIG manager: those are off, and
    their ConfigMaps are not created. An operator-installed driver comes from the NVIDIADriver CR, which the chart
    requires with a GPUCluster (templates/validations.yaml: "the NVIDIADriver CRD must be enabled")."""
    dra = software.dra or DraDriver(version=None, compute_domains=False)
    dra_values: dict[str, Any] = {"computeDomains": {"enabled": dra.compute_domains}}
    if dra.version is not None:
        dra_values["version"] = dra.version
    values: dict[str, Any] = {
        "clusterPolicy": {"deployCR": False},
        "gpuCluster": {"deployCR": True},
        "draDriver": dra_values,
        "devicePlugin": {"enabled": False},
        "gfd": {"enabled": False},
        "migManager": {"enabled": False},
    }
    if not software.driver_preinstalled:
        values["driver"] = {"enabled": True, "nvidiaDriverCRD": {"enabled": True}}
    return values


def cluster_policy_values(software: GpuSoftware) -> dict[str, Any]:
    """The ClusterPolicy's device plugin (its named configs), MIG strategy and manager, and sandbox workloads."""
    values: dict[str, Any] = {
        "devicePlugin": {
            "config": {
                "create": True,
                "name": DEVICE_PLUGIN_CONFIGMAP,
                "default": DEFAULT_DEVICE_PLUGIN_CONFIG,
                "data": device_plugin_configs(software),
            }
        },
    }
    if software.mig_strategy is not None:
        values["mig"] = {"strategy": software.mig_strategy}
    mig_manager: dict[str, Any] = {"enabled": software.mig_parted_config is not None}
    if software.mig_parted_config is not None:
        mig_manager["config"] = {
            "create": True,
            "name": MIG_CONFIGMAP,
            "default": DISABLED_CONFIG,  # the MIG manager's default: MIG off on every GPU
            "data": _mig_configmap_data(software.mig_parted_config),
        }
        if software.mig_with_reboot:
            mig_manager["env"] = [{"name": "WITH_REBOOT", "value": "true"}]
    values["migManager"] = mig_manager
    if software.sandbox is not None:
        values |= sandbox_values(software.sandbox)
    return values


def sandbox_values(sandbox: SandboxWorkloads) -> dict[str, Any]:
    """The GPU Operator's sandbox workloads: on, nodes without a workload label running containers (the default
    workload), the sandbox device plugin (it advertises passed-through GPUs and vGPUs to KubeVirt), the VFIO manager
    where GPUs are passed through, the vGPU manager (the user's private image) and vGPU device manager with vGPU. The
    operator deploys them only on nodes labelled for VMs (``nvidia.com/gpu.workload.config``)."""
    values: dict[str, Any] = {
        "sandboxWorkloads": {"enabled": True, "defaultWorkload": CONTAINER_WORKLOAD, "mode": SANDBOX_MODE},
        "sandboxDevicePlugin": {"enabled": True},
        "vfioManager": {"enabled": sandbox.passthrough},
        "vgpuManager": {"enabled": sandbox.vgpu is not None},
        "vgpuDeviceManager": {"enabled": sandbox.vgpu is not None},
    }
    if sandbox.vgpu is not None:
        vgpu = sandbox.vgpu
        values["vgpuManager"] |= {
            "repository": vgpu.manager_repository,
            "image": vgpu.manager_image,
            "version": vgpu.manager_version,
        }
        if vgpu.image_pull_secrets:
            values["vgpuManager"]["imagePullSecrets"] = list(vgpu.image_pull_secrets)
    return values


def device_plugin_values(software: GpuSoftware) -> dict[str, Any]:
    """Values for the device plugin chart (``nvdp/nvidia-device-plugin``), for nodes whose driver and toolkit
    are installed already (AKS-managed driver, or the host roles)."""
    values: dict[str, Any] = {
        "migStrategy": software.mig_strategy or "none",
        "config": {"map": device_plugin_configs(software), "default": DEFAULT_DEVICE_PLUGIN_CONFIG},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}, *tolerations(software.taints)],
    }
    if software.unadvertised:
        values["affinity"] = device_plugin_affinity()
    if any(sharing.mode == "mps" for sharing in software.sharing):
        # The chart's MPS control daemon runs only where GPU Feature Discovery labelled nvidia.com/mps.capable=true
        # (a node whose config shares GPUs with MPS); GFD, and the NFD it brings, are off in this chart by default.
        # NFD's worker must reach the GPU nodes, its master and garbage collector the add-on nodes.
        values["gfd"] = {"enabled": True}
        values["nfd"] = {
            "worker": {"tolerations": [dict(CONTROL_PLANE_TOLERATION), *tolerations(software.taints)]},
            "master": {"tolerations": _controller_tolerations(software)},
            "gc": {"tolerations": _controller_tolerations(software)},
        }
    return values


# The standalone device plugin chart's own node affinity (k8s-device-plugin v0.20.0 values.yaml, affinity: a node NFD
# found an NVIDIA PCI device on, a Tegra node, or one labelled nvidia.com/gpu.present=true); a values affinity
# replaces it, so gpufleet writes it out whole.
DEVICE_PLUGIN_NODE_TERMS = (
    ("feature.node.kubernetes.io/pci-10de.present", "true"),
    ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"),
    (GPU_PRESENT_LABEL, "true"),
)


def device_plugin_affinity() -> dict[str, Any]:
    """The chart's node affinity with each term also requiring that the node is not of advertiser none (its
    ``nvidia.com/gpu.deploy.device-plugin`` label, the GPU Operator's off switch, is not ``false``): the nodes of a
    cluster whose pools are partly unadvertised."""
    off = {"key": DEPLOY_DEVICE_PLUGIN_LABEL, "operator": "NotIn", "values": ["false"]}
    terms = [
        {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}, dict(off)]}
        for key, value in DEVICE_PLUGIN_NODE_TERMS
    ]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def for_baremetal(
    host_groups: Iterable[HostGroupPlan],
    mig_parted_config: dict[str, Any] | None,
    *,
    driver_preinstalled: bool = True,
    toolkit_preinstalled: bool = True,
    dra_version: str | None = None,
) -> GpuSoftware:
    """Bare-metal Kubernetes: the nvidia_driver and nvidia_container_toolkit roles install driver and toolkit on
    the hosts (pass False for a cluster where the operator should); MIG layouts come from the host groups, and so do
    the sandbox workloads (host groups whose GPUs go to VMs) and the advertisers (a GPUCluster with the DRA driver
    of ``dra_version`` where one is dra)."""
    groups = list(host_groups)
    vms = [g for g in groups if g.gpu_workload not in (None, CONTAINER_WORKLOAD)]
    sandbox = None
    if vms:
        vgpu = next((g.vgpu for g in vms if g.vgpu is not None), None)
        sandbox = SandboxWorkloads(passthrough=any(g.gpu_workload == "vm-passthrough" for g in vms), vgpu=vgpu)
    # NVIDIA's GPUs only: AMD host groups get the AMD GPU Operator (gpufleet.kube.amd_operator)
    gpu_groups = [(g.advertiser, g.nvlink_multi_node) for g in groups if g.gpu_model is not None and g.vendor != "amd"]
    return GpuSoftware(
        driver_preinstalled=driver_preinstalled,
        toolkit_preinstalled=toolkit_preinstalled,
        mig_strategy=baremetal_mig_strategy(groups),
        mig_parted_config=mig_parted_config,
        sandbox=sandbox,
        **_advertising(gpu_groups, dra_version),
    )


def _advertising(targets: Sequence[tuple[Advertiser, bool]], dra_version: str | None) -> dict[str, Any]:
    """The GpuSoftware fields the GPU targets' advertisers decide (``targets``: each one's advertiser and whether
    its NVLink domain spans nodes): the operator's custom resource, its DRA driver, unadvertised nodes."""
    cr = operator_cr(a for a, _ in targets)
    dra = None
    if cr == GPU_CLUSTER:
        dra = DraDriver(version=dra_version, compute_domains=any(a == "dra" and multi for a, multi in targets))
    return {"operator_cr": cr, "dra": dra, "unadvertised": any(a == "none" for a, _ in targets)}


def aks_mig_strategy(pools: Iterable[PoolPlan]) -> MigStrategy | None:
    """The MIG strategy of an AKS cluster's device plugin (the chart's): it serves the AKS-MIG pools too, but not
    those whose GPU stack AKS manages (AKS's own plugin, with the pool's strategy)."""
    return cluster_strategy(p.mig.strategy for p in pools if p.mig and p.mig.strategy and p.gpu_management != "managed")


def baremetal_mig_strategy(groups: Iterable[HostGroupPlan]) -> MigStrategy | None:
    """The MIG strategy of a bare-metal cluster's device plugin, from its host groups' layouts."""
    return cluster_strategy(g.mig.strategy for g in groups if g.mig and g.mig.strategy)


def cluster_chart(driver_by_operator: bool, mig_by_operator: bool, dra: bool = False) -> str:
    """The chart an AKS cluster's GPU software comes from: the GPU Operator when a pool leaves it the driver
    (``driver: operator``, AKS ``gpuProfile.driver: None``), a MIG layout (``mig.managed_by: operator``) or its
    GPUs to the DRA driver (``advertiser: dra``: its GPUCluster deploys it); otherwise AKS installs driver and toolkit
    on every pool and the device plugin alone is enough."""
    return GPU_OPERATOR_CHART if driver_by_operator or mig_by_operator or dra else DEVICE_PLUGIN_CHART


def for_aks(
    pools: Sequence[PoolPlan],
    system_taints: Iterable[str],
    mig_parted_config: dict[str, Any] | None,
    *,
    monitoring: bool = False,
    dra_version: str | None = None,
    gpu_taints: Iterable[str] | None = None,
) -> GpuSoftware:
    """An AKS cluster: the operator's driver (and toolkit) daemonsets run only when a pool's AKS driver is
    ``None``; on the other pools of such a cluster the ``nvidia.com/gpu.deploy.driver=false`` label keeps them off
    (:func:`gpufleet.plan.build.pool_labels`). MIG layouts come from the operator-managed pools, sharing configs
    from the pools' ``sharing`` (named as their ``nvidia.com/device-plugin.config`` label), and the daemonsets
    tolerate every GPU pool's taints (``gpu_taints``: those of the cluster's other GPU pools too, AMD's, so that
    NFD's worker labels their nodes; NVIDIA's operands stay off them by their node selection, NFD's
    ``pci-10de`` and ``nvidia.com/gpu.present``, which AMD nodes never get). A MIG mode change needs a reboot on
    Azure VMs (``WITH_REBOOT``)."""
    operator_driver = any(p.aks_gpu_driver == "None" for p in pools)
    sharing = tuple(
        SharingConfig(name=p.sharing.config_name, mode=p.sharing.mode, replicas=p.sharing.replicas)
        for p in pools
        if p.sharing.mode != "none" and p.sharing.config_name and p.sharing.replicas
    )
    # spot pools' AKS taint included
    taints = tuple(dict.fromkeys([*(t for p in pools for t in p.taints), *(gpu_taints or ())]))
    return GpuSoftware(
        driver_preinstalled=not operator_driver,
        toolkit_preinstalled=not operator_driver,
        mig_strategy=aks_mig_strategy(pools),
        mig_parted_config=mig_parted_config,
        sharing=sharing,
        taints=taints,
        system_taints=tuple(system_taints),
        mig_with_reboot=True,
        monitoring=monitoring,
        **_advertising([(p.advertiser, p.nvlink_multi_node) for p in pools], dra_version),
    )


def deploys_nfd(chart: str, software: GpuSoftware) -> bool:
    """Whether ``chart`` with ``software``'s values deploys Node Feature Discovery: the GPU Operator always (its
    ``nfd.enabled``), the device plugin chart only with GPU Feature Discovery (MPS sharing:
    :func:`device_plugin_values`; its subchart's condition is ``nfd.enabled,gfd.enabled``). A cluster runs one NFD:
    the AMD GPU Operator's chart brings its own only where this one does not (gpufleet.kube.amd_operator)."""
    return chart == GPU_OPERATOR_CHART or any(sharing.mode == "mps" for sharing in software.sharing)


# -- charts, versions and the node labels their software reads -------------------------------------------------

# The stack's release pin of each chart (``gpufleet:release``), by chart name.
CHART_PINS = {GPU_OPERATOR_CHART: "gpu_operator", DEVICE_PLUGIN_CHART: "device_plugin"}
# The node labels each chart's software reads, which gpufleet sets from the stack (and so owns): the GPU
# Operator's MIG manager applies ``nvidia.com/mig.config``; the device plugin (the operator's, or the standalone
# chart's) picks its named config by ``nvidia.com/device-plugin.config``; the standalone chart's default affinity
# schedules it only on nodes that NFD found an NVIDIA PCI device on, or that carry ``nvidia.com/gpu.present=true``
# (the operator deploys NFD and sets that label itself); the operator deploys a node's sandbox or container operands
# by ``nvidia.com/gpu.workload.config``, and its vGPU device manager applies ``nvidia.com/vgpu.config``.
NODE_LABELS = {
    GPU_OPERATOR_CHART: (MIG_CONFIG_LABEL, DEVICE_PLUGIN_CONFIG_LABEL, GPU_WORKLOAD_CONFIG_LABEL, VGPU_CONFIG_LABEL),
    DEVICE_PLUGIN_CHART: (GPU_PRESENT_LABEL, DEVICE_PLUGIN_CONFIG_LABEL),
}
# The labels that keep an advertiser off a node of advertiser none, "false" (gpufleet.kube.labels): under a
# ClusterPolicy the operator's device plugin, under a GPUCluster its DRA operands, with the standalone chart gpufleet's
# affinity (device_plugin_affinity). gpufleet sets them there and nowhere else, and does not remove them elsewhere: on
# the other nodes the operator writes the same keys ("true"), and taking them away would make it deploy and delete the
# operand by turns. A node that leaves advertiser none loses them by hand (docs/kubernetes.md).
OFF_SWITCHES: dict[tuple[str, OperatorCr], tuple[str, ...]] = {
    (GPU_OPERATOR_CHART, CLUSTER_POLICY): (DEPLOY_DEVICE_PLUGIN_LABEL,),
    (GPU_OPERATOR_CHART, GPU_CLUSTER): DRA_OPERAND_LABELS,
    (DEVICE_PLUGIN_CHART, CLUSTER_POLICY): (DEPLOY_DEVICE_PLUGIN_LABEL,),
}
OFF_SWITCH_LABELS = frozenset(label for labels in OFF_SWITCHES.values() for label in labels)


def _chart(chart: str) -> str:
    if chart not in CHART_PINS:
        raise ValueError(f"unknown chart {chart!r}; one of {', '.join(CHART_PINS)}")
    return chart


def chart_version(chart: str, release: Mapping[str, str]) -> str:
    """The version the chart's repository lists for the stack's pin: the GPU Operator's chart versions carry a
    leading ``v`` (``v26.7.0``), the device plugin's do not (``0.20.0``); the stack may write either."""
    bare = release[CHART_PINS[_chart(chart)]].removeprefix("v")
    return f"v{bare}" if chart == GPU_OPERATOR_CHART else bare


def software_labels(
    chart: str,
    *,
    mig_config: str | None,
    device_plugin_config: str | None,
    workload: GpuWorkload = CONTAINER_WORKLOAD,
    vgpu_config: str | None = None,
    advertiser: Advertiser = "device-plugin",
    operator_cr: OperatorCr = CLUSTER_POLICY,
) -> dict[str, str]:
    """The labels of a GPU node that ``chart``'s software reads, gpufleet's only source of them (AKS pools and
    bare-metal host groups alike): ``nvidia.com/mig.config`` (the GPU Operator's MIG manager applies that layout; a
    GPUCluster has none), ``nvidia.com/device-plugin.config`` (the named device-plugin config),
    ``nvidia.com/gpu.present=true`` (the standalone device plugin's daemonset runs only there). A node whose GPUs go to
    VMs (``workload`` other than container) gets instead ``nvidia.com/gpu.workload.config`` (the GPU Operator deploys
    its sandbox operands there and none of its container ones) and ``nvidia.com/vgpu.config`` (``vgpu_config``, the
    vGPU device manager's config); the standalone device plugin, which serves containers, stays off it. A node of
    advertiser none gets the advertiser's off switches (:data:`OFF_SWITCHES`) instead of the device plugin's labels.
    A None leaves its label off."""
    labels: dict[str, str] = {}
    if workload != CONTAINER_WORKLOAD:
        labels[GPU_WORKLOAD_CONFIG_LABEL] = workload
        if vgpu_config is not None:
            labels[VGPU_CONFIG_LABEL] = vgpu_config
    elif advertiser == "none":
        labels |= dict.fromkeys(OFF_SWITCHES[(_chart(chart), operator_cr)], "false")
    elif advertiser == "device-plugin":
        labels[GPU_PRESENT_LABEL] = "true"
        if device_plugin_config is not None:
            labels[DEVICE_PLUGIN_CONFIG_LABEL] = device_plugin_config
    if workload == CONTAINER_WORKLOAD and mig_config is not None and operator_cr == CLUSTER_POLICY:
        labels[MIG_CONFIG_LABEL] = mig_config
    wanted = {*NODE_LABELS[_chart(chart)], *OFF_SWITCH_LABELS}
    return {k: v for k, v in labels.items() if k in wanted}


def label_patch(chart: str, labels: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch of the labels gpufleet owns for ``chart``: those that do not apply map to None (removed); a
    node's off switches (:data:`OFF_SWITCHES`) are set, never removed."""
    patch: dict[str, str | None] = {key: labels.get(key) for key in NODE_LABELS[_chart(chart)]}
    return patch | {key: value for key, value in labels.items() if key in OFF_SWITCH_LABELS}


# -- the release a stack installs ------------------------------------------------------------------------------


def chart_release(
    chart: str, pins: Mapping[str, str], settings: GpuSoftwareSettings, software: GpuSoftware, namespace: str | None
) -> ChartRelease:
    """The release of ``chart`` at the stack's pinned version (``pins``: ``gpufleet:release``), with the values of
    ``software``, from the repository of ``settings`` (a stack's ``aks.gpu_software``, or its defaults), in
    ``namespace`` (default: the chart's name)."""
    operator = _chart(chart) == GPU_OPERATOR_CHART
    return ChartRelease(
        chart=chart,
        version=chart_version(chart, pins),
        repository=settings.gpu_operator_repository if operator else settings.device_plugin_repository,
        namespace=namespace or chart,
        values=operator_values(software) if operator else device_plugin_values(software),
        namespace_labels=dict(PRIVILEGED_NAMESPACE_LABELS) if operator else None,
    )
