"""The AMD GPU Operator for a cluster's AMD Instinct pools or host groups: its Helm release, its DeviceConfig, the node
labels it reads, and the DaemonSets it makes from the DeviceConfig (docs/amd.md, "Kubernetes").

The chart is ROCm's ``gpu-operator-charts`` (pinned: ../shared/reference/charts/amd-gpu-operator-v1.5.1). Its operator
does nothing until a ``DeviceConfig`` (``amd.com/v1alpha1``) exists; it then creates the operands from it: the driver
(a KMM Module, with ``driver.enable``), the device plugin and node labeller, or the DRA driver, the metrics exporter and
the Device Config Manager (DCM, which applies partition profiles). gpufleet writes that DeviceConfig through the
chart's own values: ``templates/default-deviceconfig.yaml`` renders ``deviceConfig.spec`` into the DeviceConfig
``default`` on install (``crds.defaultCR.install``) and, with ``crds.defaultCR.upgrade: true``, on every upgrade, so
the one Helm release holds the whole configuration (Pulumi and the Ansible role install it as they install NVIDIA's;
the chart's pre-delete hook removes the DeviceConfig before the operator goes). Every spec key gpufleet writes is one
that template copies. The DCM's ConfigMap is the one object beside the chart: v1.5.1 declares
``defaultDCMConfigMap`` in its values.yaml but has no template for it (the operator creates ``default-dcm-config``, with
AMD's sample profiles, only where ``configManager.config`` names none), so gpufleet keeps the ConfigMap's data in
the release's values (``defaultDCMConfigMap``, ``install: false``: a later chart that renders it would not make a
second one) and creates it itself (:func:`dcm_config_map`).

What gpufleet decides, once per cluster (one DeviceConfig):

- ``selector``: gpufleet's ``gpufleet.io/amd-gpu-operator=true`` (set on the AMD pools and host groups the operator
  serves) and NFD's ``feature.node.kubernetes.io/amd-gpu=true``, so the operands run on exactly those nodes;
- ``driver.enable``: on AKS (AKS installs no AMD driver) with ``version`` the stack's ``release.amdgpu``; off on bare
  metal, whose ``amd_driver`` role installs it (also where NVIDIA's chart installs NVIDIA's). Where the operator
  installs it, its KMM builds the driver as an image and pushes it to the stack's ``aks.gpu_software.amd_driver_image``
  (with ``amd_driver_image_secret``): the rules require it on AKS, since the operator's own default repository is an
  in-cluster registry AKS does not have; where the driver is the host's the chart's image placeholder is left, unused;
- the advertiser: the device plugin, with the resource naming strategy of :mod:`gpufleet.kube.amd_resources`, or the
  DRA driver where the AMD targets' advertiser is ``dra``: never both (the operator refuses both);
- the metrics exporter on port 5000; the Device Config Manager with gpufleet's ConfigMap where a target's partitions
  are ``managed_by: operator``, each such target labelled ``dcm.amd.com/gpu-config-profile=<profile>``;
- tolerations: every AMD pool's taints for the operands, the system pool's for the controllers (the chart's own kept),
  every GPU pool's for NFD's worker where this chart deploys NFD (one NFD per cluster: NVIDIA's GPU Operator chart
  brings its own, which then labels the AMD nodes too);
- KMM (and with it cert-manager, for KMM's webhook certificate) only where the operator installs the driver; the
  chart's remediation controller off (its Deployment takes no tolerations, and the DeviceConfig's remediation
  workflow is off).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.kube.amd_resources import naming_strategy
from gpufleet.kube.gpu_software import CONTROL_PLANE_TOLERATION, PRIVILEGED_NAMESPACE_LABELS, toleration
from gpufleet.kube.labels import AMD_GPU_FEATURE_LABEL, AMD_GPU_OPERATOR_LABEL, DCM_PROFILE_LABEL
from gpufleet.plan.model import AmdPartitionPlan, ChartRelease, HostGroupPlan, PoolPlan

if TYPE_CHECKING:
    from gpufleet.spec.models import Advertiser
    from gpufleet.spec.models import GpuSoftware as GpuSoftwareSettings

# The chart's name in ROCm's repository, and the stack's release pin of it (gpufleet:release)
AMD_GPU_OPERATOR_CHART = "gpu-operator-charts"
AMD_RELEASE_PIN = "amd_gpu_operator"
DEVICE_CONFIG = "default"  # the DeviceConfig the chart renders (templates/default-deviceconfig.yaml)
DCM_CONFIGMAP = "gpufleet-dcm-config"
DCM_CONFIG_KEY = "config.json"
METRICS_PORT = 5000
# The operand images whose release the chart leaves at :latest and a source pins (../shared/reference/amd-instinct.md
# §4: "image rocm/device-metrics-exporter:v1.5.1", "image rocm/device-config-manager:v1.5.1"): pinned, so the metrics
# the monitoring rules read (gpufleet/catalog/amd_metrics.yaml, exporter v1.5.1) are the ones that run. The device
# plugin, node labeller and DRA driver images keep the chart's tags: no source here names their v1.5.1 tags.
METRICS_EXPORTER_IMAGE = "rocm/device-metrics-exporter:v1.5.1"
CONFIG_MANAGER_IMAGE = "rocm/device-config-manager:v1.5.1"
# What DCM stops and restarts on a node while it repartitions (AMD's default, in the chart's values and docs)
DCM_SYSTEMD_SERVICES = ("amd-metrics-exporter", "gpuagent")
# The chart's own tolerations of NFD's worker (kept where gpufleet's list replaces the chart's), and of the
# controllers'
AMD_NFD_WORKER_TOLERATIONS = (
    {"key": "amd-dcm", "operator": "Equal", "value": "up", "effect": "NoExecute"},
    {"key": "amd-gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"},
)
MASTER_TOLERATION = {"key": "node-role.kubernetes.io/master", "operator": "Equal", "value": "", "effect": "NoSchedule"}
# The labels of a node that the AMD chart's software reads and gpufleet sets (and so owns)
AMD_NODE_LABELS = (AMD_GPU_OPERATOR_LABEL, DCM_PROFILE_LABEL)


class AmdOperatorError(ValueError):
    """Something one DeviceConfig cannot express (two layouts under one DCM profile name)."""


@dataclass(frozen=True)
class AmdTarget:
    """An AMD pool or host group as the AMD GPU Operator sees it."""

    name: str
    advertiser: Advertiser
    partitions: AmdPartitionPlan | None = None
    taints: tuple[str, ...] = ()
    gpus: int | None = None  # GPUs per node; None: unknown

    @property
    def served(self) -> bool:
        """The operator serves it: every advertiser but none (the DeviceConfig has no per-node switch of its own)."""
        return self.advertiser != "none"

    @property
    def dcm_profile(self) -> str | None:
        """The DCM profile its nodes are labelled with: its layout's, where the operator's DCM applies it."""
        parts = self.partitions
        return parts.profile if parts is not None and parts.managed_by == "operator" and self.served else None


@dataclass(frozen=True)
class AmdGpuSoftware:
    """What one cluster's DeviceConfig and the chart's values depend on."""

    targets: tuple[AmdTarget, ...]
    driver_by_operator: bool  # the operator installs the driver (KMM): AKS, or hosts whose roles do not
    driver_version: str | None = None  # release.amdgpu (None: the chart's default)
    driver_image: str | None = None  # where the operator's KMM pushes the driver image it builds (no tag)
    driver_image_secret: str | None = None  # the Secret with that repository's credentials
    system_taints: tuple[str, ...] = ()  # the nodes of cluster add-ons (AKS's system pool): the controllers tolerate
    nfd: bool = True  # this chart deploys NFD: no other chart of the cluster does
    nfd_taints: tuple[str, ...] = ()  # every GPU node's taints: NFD's worker must label them all

    @property
    def served(self) -> tuple[AmdTarget, ...]:
        return tuple(t for t in self.targets if t.served)

    @property
    def dra(self) -> bool:
        """The DRA driver advertises the GPUs (a served target's advertiser is dra; the rules keep them one kind)."""
        return any(t.advertiser == "dra" for t in self.served)


def node_labels(advertiser: Advertiser, dcm_profile: str | None) -> dict[str, str]:
    """The labels of an AMD node that the AMD GPU Operator reads, gpufleet's one source of them (AKS pools and host
    groups alike): the DeviceConfig's selector label, unless its advertiser is none, and the DCM profile of an
    operator-partitioned one."""
    if advertiser == "none":
        return {}
    labels = {AMD_GPU_OPERATOR_LABEL: "true"}
    if dcm_profile is not None:
        labels[DCM_PROFILE_LABEL] = dcm_profile
    return labels


def label_patch(labels: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch of the labels gpufleet owns for the AMD chart: those that do not apply map to None (removed)."""
    return {key: labels.get(key) for key in AMD_NODE_LABELS}


def pool_target(pool: PoolPlan) -> AmdTarget:
    gpus = int(pool.gpus_per_node) if float(pool.gpus_per_node).is_integer() else None
    return AmdTarget(pool.name, pool.advertiser, pool.amd_partitions, tuple(pool.taints), gpus)


def group_target(group: HostGroupPlan) -> AmdTarget:
    return AmdTarget(group.name, group.advertiser, group.amd_partitions, (), group.gpus_per_host)


def for_aks(
    pools: Iterable[PoolPlan],
    system_taints: Iterable[str],
    *,
    driver_version: str | None,
    nfd: bool,
    nfd_taints: Iterable[str],
    driver_image: str | None = None,
    driver_image_secret: str | None = None,
) -> AmdGpuSoftware:
    """An AKS cluster's AMD pools: AKS installs no AMD driver, so the operator does (``release.amdgpu``), building its
    image into ``driver_image``."""
    return AmdGpuSoftware(
        targets=tuple(pool_target(p) for p in pools),
        driver_by_operator=True,
        driver_version=driver_version,
        driver_image=driver_image,
        driver_image_secret=driver_image_secret,
        system_taints=tuple(system_taints),
        nfd=nfd,
        nfd_taints=tuple(dict.fromkeys(nfd_taints)),
    )


def for_baremetal(groups: Iterable[HostGroupPlan], *, driver_version: str | None, nfd: bool) -> AmdGpuSoftware:
    """A bare-metal cluster's AMD host groups: the ``amd_driver`` role installs the driver (always: an operator-built
    AMD driver would need an image repository bare-metal stacks do not name); host groups carry no taints gpufleet
    knows of."""
    return AmdGpuSoftware(
        targets=tuple(group_target(g) for g in groups),
        driver_by_operator=False,
        driver_version=driver_version,
        nfd=nfd,
    )


# -- the Device Config Manager's profiles -------------------------------------------------------------------------


def dcm_profile(partitions: AmdPartitionPlan, gpus: int | None) -> dict[str, Any]:
    """One ``gpu-config-profiles`` entry: a ``profiles`` item per device group (``numGPUsAssigned``: its GPUs; left
    out for ``all`` where the node's GPU count is unknown, as in AMD's ``*_all`` profiles) and the skipped GPUs."""
    profiles = []
    for group in partitions.groups:
        entry: dict[str, Any] = {"computePartition": group.compute, "memoryPartition": partitions.memory}
        count = group.gpus if group.gpus != "all" else gpus - len(partitions.skipped_gpus) if gpus else None
        if count is not None:
            entry["numGPUsAssigned"] = count
        profiles.append(entry)
    return {"skippedGPUs": {"ids": list(partitions.skipped_gpus)}, "profiles": profiles}


def dcm_config(targets: Iterable[AmdTarget]) -> dict[str, Any] | None:
    """DCM's ``config.json``: a profile per layout the operator applies (None: no target has one). Targets may share
    a profile only with the same layout (:class:`AmdOperatorError` otherwise)."""
    profiles: dict[str, dict[str, Any]] = {}
    owner: dict[str, str] = {}
    for target in targets:
        name = target.dcm_profile
        if name is None:
            continue
        assert target.partitions is not None
        entry = dcm_profile(target.partitions, target.gpus)
        if name in profiles and profiles[name] != entry:
            raise AmdOperatorError(
                f"{owner[name]} and {target.name} name DCM profile {name!r} for different layouts; one node label"
                " value selects one layout: give each layout its own profile name"
            )
        profiles.setdefault(name, entry)
        owner.setdefault(name, target.name)
    if not profiles:
        return None
    return {"gpu-config-profiles": profiles, "gpuClientSystemdServices": {"names": list(DCM_SYSTEMD_SERVICES)}}


# -- the chart's values -------------------------------------------------------------------------------------------


def _tolerations(taints: Iterable[str], keep: Sequence[Mapping[str, str]] = ()) -> list[dict[str, str]]:
    out = [dict(t) for t in keep]
    for taint in taints:
        if (t := toleration(taint)) not in out:
            out.append(t)
    return out


def operand_tolerations(software: AmdGpuSoftware) -> list[dict[str, str]]:
    """Every AMD pool's taints, once each (the operands' pod specs take them as they are)."""
    return _tolerations(t for target in software.targets for t in target.taints)


def controller_tolerations(software: AmdGpuSoftware) -> list[dict[str, str]]:
    """The chart's control-plane tolerations and the system nodes' taints."""
    return _tolerations(software.system_taints, (MASTER_TOLERATION, CONTROL_PLANE_TOLERATION))


def selector() -> dict[str, str]:
    """The DeviceConfig's node selector (the module docstring says why both labels)."""
    return {AMD_GPU_OPERATOR_LABEL: "true", AMD_GPU_FEATURE_LABEL: "true"}


def device_config_spec(software: AmdGpuSoftware) -> dict[str, Any]:
    """``deviceConfig.spec``, which the chart renders into the DeviceConfig (merged over the chart's defaults: every
    value gpufleet owns is written, none left to a null, which not every path to helm keeps)."""
    tolerations = operand_tolerations(software)
    served = software.served
    dcm = dcm_config(served) is not None
    driver: dict[str, Any] = {"enable": software.driver_by_operator}
    if software.driver_by_operator:
        if software.driver_image is None:
            raise AmdOperatorError(
                "the AMD GPU Operator would install the driver, and no image repository is named for the driver image"
                " it builds (aks.gpu_software.amd_driver_image)"
            )
        driver["image"] = software.driver_image
        if software.driver_image_secret is not None:
            driver["imageRegistrySecret"] = {"name": software.driver_image_secret}
    if software.driver_version is not None:  # with the host's driver: the version its role installs, for the record
        driver["version"] = software.driver_version
    if software.driver_by_operator:
        driver["tolerations"] = tolerations
    spec: dict[str, Any] = {
        "selector": selector(),
        "driver": driver,
        "devicePlugin": {
            "enableDevicePlugin": not software.dra,
            "enableNodeLabeller": True,
            "devicePluginTolerations": tolerations,
            "nodeLabellerTolerations": tolerations,
        },
        "draDriver": {"enable": software.dra},
        "metricsExporter": {
            "enable": True,
            "port": METRICS_PORT,
            "image": METRICS_EXPORTER_IMAGE,
            "tolerations": tolerations,
        },
        "configManager": {"enable": dcm},
    }
    if not software.dra:
        strategy = naming_strategy(t.partitions for t in served)
        spec["devicePlugin"]["devicePluginArguments"] = {"resource_naming_strategy": strategy}
    else:
        spec["draDriver"]["tolerations"] = tolerations
    if dcm:
        spec["configManager"] |= {
            "image": CONFIG_MANAGER_IMAGE,
            "config": {"name": DCM_CONFIGMAP},
            "configManagerTolerations": tolerations,
        }
    return spec


def amd_operator_values(software: AmdGpuSoftware) -> dict[str, Any]:
    """Values for the AMD GPU Operator chart (``rocm/gpu-operator-charts``); only keys its values.yaml has."""
    controllers = controller_tolerations(software)
    nfd: dict[str, Any] = {"enabled": software.nfd}
    if software.nfd:
        nfd |= {
            "worker": {"tolerations": _tolerations(software.nfd_taints, AMD_NFD_WORKER_TOLERATIONS)},
            "master": {"tolerations": controllers},
            "gc": {"tolerations": controllers},
        }
    kmm: dict[str, Any] = {"enabled": software.driver_by_operator, "watch": software.driver_by_operator}
    if software.driver_by_operator:
        kmm |= {
            "controller": {"manager": {"tolerations": controllers}},
            "webhookServer": {"webhookServer": {"tolerations": controllers}},
        }
    values: dict[str, Any] = {
        "controllerManager": {"manager": {"tolerations": controllers}},
        "node-feature-discovery": nfd,
        # the NodeFeatureRule that labels AMD GPU nodes feature.node.kubernetes.io/amd-gpu, for whichever NFD runs
        "installdefaultNFDRule": True,
        "kmm": kmm,
        "remediation": {"enabled": False, "installCRDs": False},
        "crds": {"defaultCR": {"install": True, "upgrade": True}},
        "draDriver": {"deviceClass": {"create": software.dra}},
        "deviceConfig": {"spec": device_config_spec(software)},
    }
    config = dcm_config(software.served)
    if config is not None:
        text = json.dumps(config, indent=2) + "\n"
        values["defaultDCMConfigMap"] = {"install": False, "name": DCM_CONFIGMAP, "data": {DCM_CONFIG_KEY: text}}
    return values


def chart_version(pins: Mapping[str, Any]) -> str:
    """The chart version of the stack's ``release.amd_gpu_operator`` as ROCm's repository lists it (``v1.5.1``)."""
    return f"v{str(pins[AMD_RELEASE_PIN]).removeprefix('v')}"


def amd_chart_release(pins: Mapping[str, Any], settings: GpuSoftwareSettings, software: AmdGpuSoftware) -> ChartRelease:
    """The AMD GPU Operator's release at the stack's pin, from the repository and into the namespace of ``settings``
    (a stack's ``aks.gpu_software``, or its defaults), privileged as NVIDIA's (its operands are)."""
    return ChartRelease(
        chart=AMD_GPU_OPERATOR_CHART,
        version=chart_version(pins),
        repository=settings.amd_gpu_operator_repository,
        namespace=settings.amd_namespace,
        values=amd_operator_values(software),
        namespace_labels=dict(PRIVILEGED_NAMESPACE_LABELS),
    )


def dcm_config_map(release: ChartRelease) -> dict[str, Any] | None:
    """The DCM ConfigMap of an AMD release, from its values (None: the release runs no DCM): the object gpufleet
    creates beside the chart (the Pulumi program, ``gpufleet render``)."""
    config = release.values.get("defaultDCMConfigMap")
    if release.chart != AMD_GPU_OPERATOR_CHART or not config:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config["name"], "namespace": release.namespace},
        "data": dict(config["data"]),
    }


# -- the DaemonSets the operator makes from a DeviceConfig (for gpufleet render's placement) -------------------------

# KMM's module-ready label, which the operator adds to its operands' node selectors while it installs the driver
# (kmm pkg/labels GetKernelModuleReadyNodeLabel; ROCm/gpu-operator v1.5.1 internal/plugin, metricsexporter,
# configmanager, testrunner: ShouldUseKMM)
KMM_READY_LABEL = "kmm.node.kubernetes.io/{namespace}.{name}.ready"
# What the operator adds to its operands' own tolerations (internal/kmmmodule SetKMMModuleAsDesired,
# metricsexporter, configmanager)
UNHEALTHY_TOLERATION = {"key": "amd-gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"}
KMM_EXTRA_TOLERATIONS = (
    {"key": "amd-gpu-driver-upgrade", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    {"key": "amd-dcm", "operator": "Equal", "value": "up"},
    UNHEALTHY_TOLERATION,
)


@dataclass(frozen=True)
class OperandPod:
    """A DaemonSet (or, for the driver, KMM's per-node worker pods) the operator makes from a DeviceConfig: its name,
    its part (driver, device-plugin, dra-kubelet-plugin, node-labeller, metrics-exporter, partitions, test-runner),
    the advertiser of the nodes it is for (None: any), its pod spec's scheduling fields, and the labels a node gets
    where it runs (KMM's module-ready label, once the driver is loaded)."""

    name: str
    role: str
    pod: dict[str, Any]
    advertiser: str | None = None
    sets: tuple[tuple[str, str], ...] = ()


def kmm_ready_label(namespace: str, name: str) -> str:
    return KMM_READY_LABEL.format(namespace=namespace, name=name)


def operand_pods(device_config: Mapping[str, Any], namespace: str) -> list[OperandPod]:
    """The operands of a rendered DeviceConfig, as ROCm/gpu-operator v1.5.1 makes them (internal/plugin/plugin.go,
    nodelabeller, metricsexporter, configmanager, testrunner, kmmmodule): named ``<DeviceConfig>-<operand>``; node
    selector the operand's own ``selector``, else ``spec.selector``, plus KMM's ready label where the operator
    installs the driver (not the node labeller's); tolerations the operand's, plus what the operator adds. Defaults
    as the CRD's: driver, device plugin and node labeller on, the rest off."""
    spec = device_config.get("spec") or {}
    name = (device_config.get("metadata") or {}).get("name", DEVICE_CONFIG)
    base = dict(spec.get("selector") or {AMD_GPU_FEATURE_LABEL: "true"})
    driver = spec.get("driver") or {}
    kmm = bool(driver.get("enable", True)) and driver.get("driverType") != "pf-passthrough"
    ready = {kmm_ready_label(namespace, name): ""} if kmm else {}

    def pod(part: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        chosen = part.get("selector") or base
        return {"nodeSelector": {**chosen, **ready}, "tolerations": [dict(t) for t in tolerations]}

    out = []
    if kmm:
        tolerations = [*(driver.get("tolerations") or []), *KMM_EXTRA_TOLERATIONS]
        kmm_pod = {"nodeSelector": base, "tolerations": tolerations}
        loaded = tuple(ready.items())
        out.append(OperandPod(f"kmm-worker (Module {name})", "driver", kmm_pod, sets=loaded))
    plugin = spec.get("devicePlugin") or {}
    if plugin.get("enableDevicePlugin", True):
        tolerations = plugin.get("devicePluginTolerations") or []
        out.append(OperandPod(f"{name}-device-plugin", "device-plugin", pod({}, tolerations), "device-plugin"))
    if plugin.get("enableNodeLabeller", True):
        labeller = {"nodeSelector": base, "tolerations": list(plugin.get("nodeLabellerTolerations") or [])}
        out.append(OperandPod(f"{name}-node-labeller", "node-labeller", labeller))
    dra = spec.get("draDriver") or {}
    if dra.get("enable", False):
        dra_pod = pod(dra, dra.get("tolerations") or [])
        out.append(OperandPod(f"{name}-dra-driver", "dra-kubelet-plugin", dra_pod, "dra"))
    exporter = spec.get("metricsExporter") or {}
    if exporter.get("enable", False):
        tolerations = [*(exporter.get("tolerations") or []), UNHEALTHY_TOLERATION]
        out.append(OperandPod(f"{name}-metrics-exporter", "metrics-exporter", pod(exporter, tolerations)))
    tests = spec.get("testRunner") or {}
    if tests.get("enable", False):
        out.append(OperandPod(f"{name}-test-runner", "test-runner", pod(tests, tests.get("tolerations") or [])))
    dcm = spec.get("configManager") or {}
    if dcm.get("enable", False):
        tolerations = [AMD_NFD_WORKER_TOLERATIONS[0], *(dcm.get("configManagerTolerations") or [])]
        out.append(OperandPod(f"{name}-device-config-manager", "partitions", pod(dcm, tolerations)))
    return out
