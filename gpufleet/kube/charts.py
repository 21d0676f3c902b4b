"""The stack's GPU charts rendered by a real helm, and where the rendered GPU software would run.

``helm template`` renders the pinned charts with exactly the values the stack installs
(:mod:`gpufleet.kube.gpu_software`, the code the Pulumi program and the Ansible roles use). A values file that every
schema accepts can still deploy nothing, so the rendered objects are then placed on the nodes the stack describes: each
AKS pool (with the labels and taints gpufleet and AKS put on its nodes), the AKS system pool, each bare-metal host
group.

Placing GPU software is a fixpoint, because its components label nodes for each other:

- NFD's worker, where it runs on a GPU node, labels it ``feature.node.kubernetes.io/pci-10de.present=true``;
- the GPU Operator (a Deployment; it acts once it runs anywhere) labels nodes with that NFD label
  ``nvidia.com/gpu.present=true``, then adds ``nvidia.com/gpu.deploy.<operand>=true`` for every operand of the node's
  GPU workload unless the node already has that label (gpufleet's ``nvidia.com/gpu.deploy.driver=false`` on
  AKS-driver pools), and ``nvidia.com/gpu.deploy.mig-manager=true`` on MIG-capable GPUs of container nodes (the
  operator's ``controllers/state_manager.go``). The GPU workload is ``container`` everywhere unless the ClusterPolicy
  turns sandbox workloads on; then it is the node's ``nvidia.com/gpu.workload.config`` (``vm-passthrough``:
  the VFIO manager, the sandbox device plugin and validator; ``vm-vgpu``: the vGPU manager and device manager, the
  sandbox device plugin and validator), else the policy's default workload;
- the operands are DaemonSets the operator creates from the ClusterPolicy: node selector
  ``nvidia.com/gpu.deploy.<operand>=true``, tolerations ``spec.daemonsets.tolerations``;
- GPU Feature Discovery, where it runs, labels ``nvidia.com/mig.capable`` and, on nodes whose device-plugin config
  shares GPUs with MPS, ``nvidia.com/mps.capable=true`` (the MPS control daemon selects on it).

AMD Instinct nodes (the AMD GPU Operator's chart, :mod:`gpufleet.kube.amd_operator`) take part too: NFD's worker
(whichever chart's: a cluster runs one) labels an AMD node ``feature.node.kubernetes.io/amd-gpu=true`` where the AMD
chart's NodeFeatureRule is rendered, never ``pci-10de``; the AMD operator's operands are DaemonSets it creates from the
rendered DeviceConfig (node selector its ``selector``, each operand's tolerations), and while it installs the driver
KMM's worker pods (the Module's selector and tolerations) label each node they load it on
``kmm.node.kubernetes.io/<namespace>.<DeviceConfig>.ready``, which the other operands then select. Each GPU DaemonSet
serves one vendor's GPUs: NVIDIA's on AMD nodes, or AMD's on NVIDIA nodes, is a problem (NFD's worker serves both).

The scheduler's part (taints, node selectors, required node affinity) is :mod:`gpufleet.kube.scheduling`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.azure.aks import aks_node_labels
from gpufleet.azure.cost import StackCost
from gpufleet.common.atomic import replace_dir
from gpufleet.kube.amd_operator import AMD_GPU_OPERATOR_CHART, DEVICE_CONFIG, dcm_config_map, operand_pods
from gpufleet.kube.dra import DraPlan, dra_plan
from gpufleet.kube.gpu_software import (
    CLUSTER_POLICY,
    CONTAINER_WORKLOAD,
    DEVICE_PLUGIN_CHART,
    GPU_CLUSTER,
    GPU_OPERATOR_CHART,
    SANDBOX_MODE,
    ChartRelease,
    GpuWorkload,
    OperatorCr,
)
from gpufleet.kube.labels import (
    AMD_GPU_FEATURE_LABEL,
    DEPLOY_DRIVER_LABEL,
    DRA_OPERAND_LABELS,
    GPU_PRESENT_LABEL,
    GPU_WORKLOAD_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
)
from gpufleet.kube.monitoring import monitoring_objects
from gpufleet.kube.node_remediation import BMC_SECRET_PREFIX, MONITOR_FILE, NodeRemediationPlan, node_remediation_plan
from gpufleet.kube.queues import KueuePlan, kueue_plan
from gpufleet.kube.scheduling import NodeShape, Placement, Taint, why_not
from gpufleet.mig.outputs import DISABLED_CONFIG
from gpufleet.plan.model import StackPlan

CHARTS_DIR_ENV = "GPUFLEET_CHARTS_DIR"
HELM_SECONDS = 120

NFD_GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"
# the AMD chart's NodeFeatureRule (templates/gpu-nfd-default-rule.yaml, installdefaultNFDRule): AMD Instinct PCI ids ->
# feature.node.kubernetes.io/amd-gpu=true
AMD_NFD_RULE = "amd-gpu-label-nfd-rule"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."


class ChartError(Exception):
    """The stack's charts cannot be rendered (missing chart, wrong version, helm failed): one line for the user."""


# -- the pinned charts and helm ---------------------------------------------------------------------------------


def charts_dir() -> Path:
    """``$GPUFLEET_CHARTS_DIR``, else ``~/.cache/gpufleet/charts`` (where ``helm pull`` puts them, see docs)."""
    from gpufleet.common.paths import cache_dir

    return Path(os.environ.get(CHARTS_DIR_ENV) or cache_dir() / "charts")


# Folder names of unpacked charts besides ``<chart>-<version>``: the reference copies (../shared/reference/charts) name
# ROCm's generically named chart after its project.
LOCAL_NAMES = {AMD_GPU_OPERATOR_CHART: "amd-gpu-operator"}
# The charts' vendors: whose GPUs their GPU DaemonSets serve
CHART_VENDORS = {GPU_OPERATOR_CHART: "nvidia", DEVICE_PLUGIN_CHART: "nvidia", AMD_GPU_OPERATOR_CHART: "amd"}
VENDOR_WORDS = {"nvidia": "NVIDIA's", "amd": "AMD's"}


def pull_command(release: ChartRelease, directory: Path) -> str:
    """What a user runs to get the chart: ``helm pull`` from the stack's repository into ``directory``."""
    return f"helm pull {release.chart} --repo {release.repository} --version {release.version} -d {directory}"


def _chart_names(release: ChartRelease) -> list[str]:
    """``<chart>-<version>`` with the version as given, without its ``v`` and with one (a chart's file or folder), and
    the same under the chart's local folder name (:data:`LOCAL_NAMES`)."""
    bare = release.version.removeprefix("v")
    names = (release.chart, *([LOCAL_NAMES[release.chart]] if release.chart in LOCAL_NAMES else []))
    return list(dict.fromkeys(f"{name}-{version}" for name in names for version in (release.version, bare, f"v{bare}")))


def has_chart(release: ChartRelease, directory: Path) -> bool:
    """Whether ``directory`` holds a ``<chart>-<version>.tgz`` or ``<chart>-<version>/`` of ``release`` (which
    :func:`find_chart` then reads, refusing one of another version)."""
    return any((directory / f"{name}.tgz").is_file() or (directory / name).is_dir() for name in _chart_names(release))


def find_chart(release: ChartRelease, directory: Path) -> Path:
    """The chart of ``release`` in ``directory``: ``<chart>-<version>.tgz`` (what ``helm pull`` writes) or an unpacked
    ``<chart>-<version>/`` whose Chart.yaml has that version (the version written with or without its ``v``)."""
    bare = release.version.removeprefix("v")
    for name in _chart_names(release):
        if (directory / f"{name}.tgz").is_file():
            return directory / f"{name}.tgz"
        unpacked = directory / name
        if unpacked.is_dir():
            found = _chart_yaml_version(unpacked / "Chart.yaml")
            if (found or "").removeprefix("v") != bare:
                raise ChartError(f"{unpacked}/Chart.yaml is version {found!r}, not {release.version}")
            return unpacked
    others = sorted(p.name for p in directory.glob(f"{release.chart}-*")) if directory.is_dir() else []
    have = f" (it has {', '.join(others)})" if others else ""
    raise ChartError(
        f"chart {release.chart} {release.version} is not in {directory}{have}; get it with: "
        f"{pull_command(release, directory)}, or point {CHARTS_DIR_ENV} at a directory that has it"
    )


def _chart_yaml_version(path: Path) -> str | None:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(path.read_text())
    except (OSError, ValueError, YAMLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a Chart.yaml"
        raise ChartError(f"cannot read {path}: {reason}") from None
    return str(data.get("version")) if isinstance(data, dict) else None


@dataclass(frozen=True)
class PinnedChart:
    """A chart release the example stacks pin and the tests render, with what a ``helm pull`` of it must match."""

    chart: str
    version: str  # as the repository lists it
    repository: str  # gpufleet's default repository of the chart
    sha256: str | None  # of the .tgz helm pull writes; None where nobody recorded it
    files_sha256: str  # chart_files_digest of the chart

    @property
    def release(self) -> ChartRelease:
        return ChartRelease(self.chart, self.version, repository=self.repository, namespace=self.chart, values={})


def pinned_charts() -> tuple[PinnedChart, ...]:
    """The pinned charts (gpufleet/catalog/charts.yaml), each from gpufleet's default repository of it."""
    from gpufleet.catalog import read_catalog_yaml
    from gpufleet.spec.models import AMD_GPU_OPERATOR_REPOSITORY, DEVICE_PLUGIN_REPOSITORY, GPU_OPERATOR_REPOSITORY

    repositories = {
        GPU_OPERATOR_CHART: GPU_OPERATOR_REPOSITORY,
        DEVICE_PLUGIN_CHART: DEVICE_PLUGIN_REPOSITORY,
        AMD_GPU_OPERATOR_CHART: AMD_GPU_OPERATOR_REPOSITORY,
    }
    entries = read_catalog_yaml("charts.yaml")["charts"]
    return tuple(PinnedChart(repository=repositories[entry["chart"]], **entry) for entry in entries)


def _digested(name: str) -> bool:
    """The files of a chart that helm renders and the tests read keys from, which ``helm package`` copies unchanged
    (not Chart.yaml, whose version a release pipeline sets, nor charts/, whose subcharts may be folders or .tgz)."""
    return name == "values.yaml" or name.startswith(("templates/", "crds/"))


def chart_files_digest(chart: Path) -> str:
    """The digest of a chart's values.yaml, templates/ and crds/ (:func:`_digested`), the same for the unpacked chart
    and its .tgz; in the unpacked chart: ``find values.yaml templates crds -type f | LC_ALL=C sort | xargs sha256sum |
    sha256sum``."""
    files = {name: data for name, data in chart_files(chart).items() if _digested(name)}
    listing = "".join(f"{hashlib.sha256(files[n]).hexdigest()}  {n}\n" for n in sorted(files, key=str.encode))
    return hashlib.sha256(listing.encode()).hexdigest()


def pulled_chart_problem(tgz: Path, pin: PinnedChart) -> str | None:
    """What makes a ``helm pull`` of ``pin`` not the pinned chart, in a few words (None: nothing): the .tgz's sha256
    where one is recorded, its Chart.yaml's name and version, and its files' digest (:func:`chart_files_digest`)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = tgz.read_bytes()
        if pin.sha256 is not None and (got := hashlib.sha256(data).hexdigest()) != pin.sha256:
            return f"its sha256 is {got}, not the recorded {pin.sha256}"
        with tarfile.open(tgz) as tar:
            member = tar.extractfile(f"{pin.chart}/Chart.yaml")
            meta = YAML(typ="safe").load(member.read()) if member is not None else None
        digest = chart_files_digest(tgz)
    except (OSError, KeyError, tarfile.TarError, YAMLError) as exc:
        return f"it is not a chart archive of {pin.chart} ({exc})"
    name, version = (meta.get("name"), meta.get("version")) if isinstance(meta, dict) else (None, None)
    if name != pin.chart or str(version).removeprefix("v") != pin.version.removeprefix("v"):
        return f"its Chart.yaml says {name} {version}, not {pin.chart} {pin.version}"
    if digest != pin.files_sha256:
        return f"its values.yaml, templates and crds have digest {digest}, not the recorded {pin.files_sha256}"
    return None


def helm_binary() -> str:
    """The helm ``make setup`` installed into the virtualenv, else one on the PATH."""
    beside = Path(sys.executable).parent / "helm"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("helm")
    if found is None:
        raise ChartError("helm is not installed; run `make setup` (it installs a pinned helm into .venv/bin)")
    return found


def kube_version(kubernetes: str) -> str:
    """helm's ``--kube-version`` for a stack's ``release.kubernetes`` (``1.33`` -> ``v1.33.0``)."""
    parts = kubernetes.removeprefix("v").split(".")
    return "v" + ".".join([*parts, "0", "0"][:3])


# Kubernetes serves resource.k8s.io/v1 (DRA) by default from 1.34; helm template, offline, knows only the APIs it is
# told of, and the GPU Operator's chart refuses a GPUCluster unless the DeviceClass API is among them
# (templates/validations.yaml: "pass --api-versions resource.k8s.io/v1/DeviceClass").
DRA_API_VERSION = "resource.k8s.io/v1/DeviceClass"
DRA_SERVED_FROM = (1, 34)


def api_versions(kubernetes: str) -> list[str]:
    """helm's ``--api-versions`` arguments for the APIs a cluster of ``kubernetes`` serves that the charts ask for."""
    major, minor = (int(x) for x in kubernetes.removeprefix("v").split(".")[:2])
    return ["--api-versions", DRA_API_VERSION] if (major, minor) >= DRA_SERVED_FROM else []


def helm_template(release: ChartRelease, chart: Path, kubernetes: str, helm: str) -> str:
    """``helm template`` of ``chart`` with the release's values, CRDs included (what a GitOps tool applies)."""
    with tempfile.TemporaryDirectory(prefix="gpufleet-values-") as tmp:
        values = Path(tmp) / "values.json"  # JSON is YAML: helm reads it as a values file
        values.write_text(json.dumps(release.values))
        cmd = [
            helm, "template", release.name, str(chart), "--namespace", release.namespace, "--values", str(values),
            "--kube-version", kube_version(kubernetes), "--include-crds", *api_versions(kubernetes),
        ]  # fmt: skip
        try:
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HELM_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            raise ChartError(f"helm template {release.chart} did not finish in {HELM_SECONDS} s") from None
        except OSError as exc:
            raise ChartError(f"cannot run {helm}: {exc.strerror}") from None
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit status {proc.returncode}"
        raise ChartError(
            f"helm template {release.chart} {release.version} failed: {why} (the chart at {chart} is damaged or not "
            f"the published one: pull it again with {pull_command(release, chart.parent)})"
        )
    return proc.stdout


def parse_objects(text: str) -> list[dict[str, Any]]:
    """The objects of helm's multi-document YAML stream (empty documents dropped). PyYAML's C loader: the CRDs make
    the GPU Operator's output 360 KB, which ruamel's loader takes 0.6 s to read and this 0.04 s."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return [doc for doc in yaml.load_all(text, Loader=loader) if isinstance(doc, dict)]
    except yaml.YAMLError as exc:
        raise ChartError(f"helm's output is not YAML: {exc}") from None


# -- where the rendered software runs ---------------------------------------------------------------------------

PASSTHROUGH: GpuWorkload = "vm-passthrough"
VGPU: GpuWorkload = "vm-vgpu"
VM_WORKLOADS: tuple[GpuWorkload, ...] = (PASSTHROUGH, VGPU)
GPU_WORKLOADS: tuple[GpuWorkload, ...] = (CONTAINER_WORKLOAD, *VM_WORKLOADS)
# what a target's GPUs do, in the reasons a DaemonSet is or is not meant for it
WORKLOAD_WORDS = {
    CONTAINER_WORKLOAD: "run containers",
    PASSTHROUGH: "are passed through to VMs",
    VGPU: "are split into vGPUs for VMs",
}


@dataclass(frozen=True)
class Target:
    """A pool or host group as its nodes will look to the scheduler."""

    name: str
    kind: str  # "GPU pool", "system pool", "host group"
    node: NodeShape
    gpu: bool
    mig_capable: bool = False
    driver_by_operator: bool = False  # the GPU Operator's driver daemonset is meant to run here
    mps: bool = False  # the node's device-plugin config shares GPUs with MPS
    workload: GpuWorkload = CONTAINER_WORKLOAD  # what the stack has its GPUs serve (HostGroupPlan.gpu_workload)
    advertiser: str = "device-plugin"  # what makes its GPUs allocatable: device-plugin, dra or none
    aks_managed: bool = False  # AKS runs the node's GPU stack (gpu_management: managed): no chart's GPU software may
    vendor: str | None = "nvidia"  # its GPUs' vendor (nvidia, amd); None: no GPUs


def stack_targets(plan: StackPlan, chart: str, also: Iterable[str] = ()) -> list[Target]:
    """The nodes the stack's GPU software must serve: AKS pools (gpufleet's labels and taints plus AKS's own) and
    the system pool, or bare-metal host groups (the labels the roles of ``chart`` and of the charts ``also`` set)."""
    targets: list[Target] = []
    if plan.cluster is not None:
        system = plan.cluster.system_pool
        labels = aks_node_labels(system.name, system.vm_size, mode="system", gpu=False)
        taints = tuple(Taint.parse(t) for t in plan.cluster.system_pool_taints)
        targets.append(Target(system.name, "system pool", NodeShape(system.name, labels, taints), gpu=False))
        for pool in plan.pools:
            labels = {**aks_node_labels(pool.aks_name, pool.vm_size, mode="user", gpu=True), **pool.labels}
            taints = tuple(Taint.parse(t) for t in pool.taints)
            targets.append(
                Target(
                    pool.name,
                    "GPU pool",
                    NodeShape(pool.name, labels, taints),
                    gpu=True,
                    mig_capable=pool.mig_capable,
                    driver_by_operator=pool.driver == "operator",
                    mps=pool.sharing.mode == "mps",
                    advertiser=pool.advertiser,
                    aks_managed=pool.gpu_management == "managed",
                    vendor=pool.vendor,
                )
            )
    for group in plan.host_groups:
        labels = {"kubernetes.io/os": "linux"}
        for name in (chart, *also):
            labels |= group.node_labels.get(name, {})
        targets.append(
            Target(
                group.name,
                "host group",
                NodeShape(group.name, labels),
                gpu=group.gpu_model is not None,
                mig_capable=bool(group.mig_capable),
                workload=group.gpu_workload or CONTAINER_WORKLOAD,
                advertiser=group.advertiser,
                vendor=group.vendor,
            )
        )
    return targets


@dataclass(frozen=True)
class Operand:
    """A DaemonSet the GPU Operator creates from the ClusterPolicy: its spec key, its name, the node label the
    operator sets to deploy it (``nvidia.com/gpu.deploy.<label>``) and the GPU workloads whose nodes get that label
    (gpu-operator controllers/state_manager.go: gpuStateLabels, isStateEnabled; assets/state-*/*daemonset.yaml)."""

    key: str | None  # None: the sandbox validator, which has no key of its own
    daemonset: str
    label: str
    workloads: tuple[GpuWorkload, ...] = (CONTAINER_WORKLOAD,)
    default: bool = True  # enabled when the ClusterPolicy leaves spec.<key>.enabled unset
    sandbox: bool = False  # deployed only with spec.sandboxWorkloads.enabled
    mode: str | None = None  # deployed only in this spec.sandboxWorkloads.mode (the CRD's default: kubevirt)
    needed: bool = False  # nodes of its GPU workloads cannot serve VMs without it (the sandbox ones only)

    def enabled(self, spec: Mapping[str, Any]) -> bool:
        sandbox = spec.get("sandboxWorkloads") or {}
        if self.sandbox and not sandbox.get("enabled", False):
            return False
        if self.mode is not None and sandbox.get("mode", SANDBOX_MODE) != self.mode:
            return False
        return self.key is None or bool((spec.get(self.key) or {}).get("enabled", self.default))


OPERANDS = (
    Operand("driver", "nvidia-driver-daemonset", "driver"),
    Operand("toolkit", "nvidia-container-toolkit-daemonset", "container-toolkit"),
    Operand("validator", "nvidia-operator-validator", "operator-validator"),
    Operand("devicePlugin", "nvidia-device-plugin-daemonset", "device-plugin"),
    Operand("dcgm", "nvidia-dcgm", "dcgm"),
    Operand("dcgmExporter", "nvidia-dcgm-exporter", "dcgm-exporter"),
    Operand("gfd", "gpu-feature-discovery", "gpu-feature-discovery"),
    Operand("migManager", "nvidia-mig-manager", "mig-manager"),  # its label only on MIG-capable GPUs
    Operand("nodeStatusExporter", "nvidia-node-status-exporter", "node-status-exporter", default=False),
    # sandbox workloads (the kata mode's device plugin and confidential-computing manager are left out: gpufleet's
    # VMs are KubeVirt's, and the operator no longer deploys its kata manager)
    Operand(
        "sandboxDevicePlugin",
        "nvidia-sandbox-device-plugin-daemonset",
        "sandbox-device-plugin",
        VM_WORKLOADS,
        default=False,
        sandbox=True,
        mode=SANDBOX_MODE,
        needed=True,
    ),
    Operand(None, "nvidia-sandbox-validator", "sandbox-validator", VM_WORKLOADS, sandbox=True),
    Operand("vfioManager", "nvidia-vfio-manager", "vfio-manager", (PASSTHROUGH,), False, sandbox=True, needed=True),
    Operand("vgpuManager", "nvidia-vgpu-manager-daemonset", "vgpu-manager", (VGPU,), False, sandbox=True, needed=True),
    Operand(
        "vgpuDeviceManager", "nvidia-vgpu-device-manager", "vgpu-device-manager", (VGPU,), False, True, needed=True
    ),
)
# the operands whose part in the labelling fixpoint or in not_needed is their own (the others are plain "operand")
OPERAND_ROLES = {"gfd": "gfd", "devicePlugin": "device-plugin", "driver": "driver", "migManager": "mig-manager"}
MPS_CONTROL_DAEMON = "nvidia-device-plugin-mps-control-daemon"


def state_labels(workload: str) -> tuple[str, ...]:
    """The operand labels the operator adds to a GPU node of ``workload`` (the MIG manager's apart: it adds that one
    to container nodes with MIG-capable GPUs only)."""
    return tuple(
        DEPLOY_LABEL_PREFIX + o.label for o in OPERANDS if workload in o.workloads and o.label != "mig-manager"
    )


@dataclass(frozen=True)
class OperatorPolicy:
    """What the operator's node labelling reads from the rendered ClusterPolicy."""

    mig_disabled_default: bool = False  # migManager.config.default all-disabled: MIG-capable nodes get it as MIG config
    sandbox: bool = False  # sandboxWorkloads.enabled: each GPU node runs the operands of its GPU workload
    default_workload: GpuWorkload = CONTAINER_WORKLOAD  # sandboxWorkloads.defaultWorkload, where it is a valid one
    cr: OperatorCr = CLUSTER_POLICY  # a rendered GPUCluster: every GPU node gets the DRA stack's deploy labels
    amd_nfd_rule: bool = False  # the AMD chart's NodeFeatureRule is rendered: NFD labels AMD GPU nodes amd-gpu=true

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]]) -> OperatorPolicy:
        objects = list(objects)
        rules = [(o.get("metadata") or {}).get("name") for o in objects if o.get("kind") == "NodeFeatureRule"]
        amd_rule = AMD_NFD_RULE in rules
        return dataclasses.replace(cls._of(objects), amd_nfd_rule=amd_rule)

    @classmethod
    def _of(cls, objects: Iterable[Mapping[str, Any]]) -> OperatorPolicy:
        for obj in objects:
            if obj.get("kind") == "GPUCluster":
                return cls(cr=GPU_CLUSTER)
            if obj.get("kind") == "ClusterPolicy":
                spec = obj.get("spec") or {}
                sandbox = spec.get("sandboxWorkloads") or {}
                default = sandbox.get("defaultWorkload")
                return cls(
                    mig_disabled_default=(spec.get("migManager") or {}).get("config", {}).get("default")
                    == DISABLED_CONFIG,
                    sandbox=bool(sandbox.get("enabled", False)),
                    default_workload=default if default in GPU_WORKLOADS else CONTAINER_WORKLOAD,
                )
        return cls()

    def workload(self, labels: Mapping[str, str]) -> str:
        """A node's GPU workload as the operator reads it: its label (when valid), else the default; container for
        every node without sandbox workloads."""
        if not self.sandbox:
            return CONTAINER_WORKLOAD
        value = labels.get(GPU_WORKLOAD_CONFIG_LABEL)
        return value if value in GPU_WORKLOADS else self.default_workload


@dataclass(frozen=True)
class Workload:
    """A rendered (or operator-created) pod template and what it does on the nodes it runs on."""

    chart: str
    kind: str  # DaemonSet or Deployment
    name: str
    placement: Placement
    role: str  # nfd-worker, gfd, operator, device-plugin, mps-control-daemon, driver, mig-manager, controller, ...
    serves: tuple[GpuWorkload, ...] | None = None  # the GPU workloads it is for; None: every node (NFD's worker)
    advertiser: str | None = None  # the advertiser of the nodes it is for (device-plugin, dra); None: any
    vendor: str | None = None  # whose GPUs it is for (nvidia, amd); None: any (NFD's worker, the controllers)
    sets: tuple[tuple[str, str], ...] = ()  # labels a node gets where it runs (KMM's module-ready label)


def _role(name: str, labels: Mapping[str, str]) -> str:
    component = labels.get("app.kubernetes.io/component") or labels.get("app") or ""
    if name.endswith("node-feature-discovery-worker") or component == "worker":
        return "nfd-worker"
    if "gpu-feature-discovery" in name:
        return "gfd"
    if "mps-control-daemon" in name:
        return "mps-control-daemon"
    if name.endswith("device-plugin") or "nvidia-device-plugin" in name:
        return "device-plugin"
    if component == "gpu-operator":
        return "operator"
    return "controller"


# the charts' own GPU DaemonSets (the standalone device plugin's) serve containers
CONTAINER_ROLES = ("gfd", "device-plugin", "mps-control-daemon")
# the device plugin and what comes with it serve the nodes it advertises
DEVICE_PLUGIN_ROLES = ("device-plugin", "mps-control-daemon")


def workloads(chart: str, objects: Iterable[Mapping[str, Any]], namespace: str = "") -> list[Workload]:
    """The chart's DaemonSets and Deployments (Helm hooks left out), and the operand DaemonSets the GPU Operator
    creates from a rendered ClusterPolicy or GPUCluster, or the AMD GPU Operator from a rendered DeviceConfig (in the
    release's ``namespace``). The GPU DaemonSets are tagged with the chart's vendor."""
    vendor = CHART_VENDORS.get(chart)
    return [
        w if w.role == "nfd-worker" or w.kind != "DaemonSet" or w.vendor else dataclasses.replace(w, vendor=vendor)
        for w in _workloads(chart, objects, namespace)
    ]


def _workloads(chart: str, objects: Iterable[Mapping[str, Any]], namespace: str) -> list[Workload]:
    out: list[Workload] = []
    for obj in objects:
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        if kind in ("DaemonSet", "Deployment") and "helm.sh/hook" not in (meta.get("annotations") or {}):
            template = obj["spec"]["template"]
            labels = {**(meta.get("labels") or {}), **((template.get("metadata") or {}).get("labels") or {})}
            placement = Placement.from_pod_spec(template.get("spec") or {})
            role = _role(meta["name"], labels)
            serves = (CONTAINER_WORKLOAD,) if kind == "DaemonSet" and role in CONTAINER_ROLES else None
            advertiser = "device-plugin" if kind == "DaemonSet" and role in DEVICE_PLUGIN_ROLES else None
            out.append(Workload(chart, kind, meta["name"], placement, role, serves, advertiser))
        elif kind == "ClusterPolicy":
            out.extend(_operands(chart, obj["spec"]))
        elif kind == "GPUCluster":
            out.extend(_gpu_cluster_operands(chart, obj["spec"]))
        elif kind == "NVIDIADriver":
            out.append(_nvidia_driver(chart, obj))
        elif kind == "DeviceConfig":
            out.extend(_amd_operands(chart, obj, namespace))
    return out


def _amd_operands(chart: str, obj: Mapping[str, Any], namespace: str) -> list[Workload]:
    """The DaemonSets the AMD GPU Operator makes from a DeviceConfig (:func:`gpufleet.kube.amd_operator.operand_pods`;
    the driver's are KMM's worker pods, one per node, placed as a DaemonSet's)."""
    return [
        Workload(chart, "DaemonSet", op.name, Placement.from_pod_spec(op.pod), op.role, (CONTAINER_WORKLOAD,),
                 op.advertiser, "amd", op.sets)
        for op in operand_pods(obj, (obj.get("metadata") or {}).get("namespace") or namespace)
    ]  # fmt: skip


def _operands(chart: str, spec: Mapping[str, Any]) -> list[Workload]:
    tolerations = (spec.get("daemonsets") or {}).get("tolerations") or []
    out = []
    for op in OPERANDS:
        if not op.enabled(spec):
            continue
        selector = {DEPLOY_LABEL_PREFIX + op.label: "true"}
        placement = Placement.from_pod_spec({"nodeSelector": selector, "tolerations": tolerations})
        role = OPERAND_ROLES.get(op.key or "", "operand")
        advertiser = "device-plugin" if role in DEVICE_PLUGIN_ROLES else None
        out.append(Workload(chart, "DaemonSet", op.daemonset, placement, role, op.workloads, advertiser))
        if op.key == "devicePlugin":  # the operator's MPS control daemon comes with its device plugin
            mps = Placement.from_pod_spec(
                {"nodeSelector": {**selector, MPS_CAPABLE_LABEL: "true"}, "tolerations": tolerations}
            )
            daemon = Workload(chart, "DaemonSet", MPS_CONTROL_DAEMON, mps, "mps-control-daemon", op.workloads)
            out.append(dataclasses.replace(daemon, advertiser="device-plugin"))
    return out


# -- the GPUCluster's operands (GPU Operator v26.7.0: internal/state/gpucluster*.go, manifests/state-dra-driver,
# state-dra-validation, state-dcgm, state-dcgm-exporter) ----------------------------------------------------------

# The deploy labels the operator adds to every GPU node (nvidia.com/gpu.present=true) of a GPUCluster, unless set
# (controllers/state_manager.go:131-137 gpuClusterStateLabels; nodelabeling_controller.go updateGPUClusterStateLabels)
GPU_CLUSTER_STATE_LABELS = (DEPLOY_DRIVER_LABEL, *DRA_OPERAND_LABELS)
# The DRA kubelet plugin's required node affinity besides its deploy label: a node NFD found an NVIDIA PCI device on,
# a Tegra node, or one labelled nvidia.com/gpu.present=true (manifests/state-dra-driver/0500_daemonset.yaml)
_DRA_PLUGIN_TERMS = (
    ("feature.node.kubernetes.io/pci-10de.present", "true"),
    ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"),
    (GPU_PRESENT_LABEL, "true"),
)
DRA_KUBELET_PLUGIN = "nvidia-dra-driver-kubelet-plugin"


@dataclass(frozen=True)
class GpuClusterOperand:
    """A DaemonSet the operator creates from a GPUCluster: its name, deploy label, the spec key that turns it on or
    off (None: always) and its default, and its required node affinity terms (each one label: value; none: none)."""

    daemonset: str
    label: str
    key: str | None = None
    default: bool = True
    terms: tuple[tuple[str, str], ...] = ()
    role: str = "operand"

    def enabled(self, spec: Mapping[str, Any]) -> bool:
        return self.key is None or bool((spec.get(self.key) or {}).get("enabled", self.default))


# Each of them reaches the GPUs through DRA (the kubelet plugin advertises them; the others hold an admin-access claim
# on gpu.nvidia.com, manifests/state-*/0400_resourceclaimtemplate.yaml), so they are for dra nodes only.
GPU_CLUSTER_OPERANDS = (
    GpuClusterOperand(DRA_KUBELET_PLUGIN, DRA_OPERAND_LABELS[0], terms=_DRA_PLUGIN_TERMS, role="dra-kubelet-plugin"),
    GpuClusterOperand("nvidia-dra-validator", DRA_OPERAND_LABELS[1], terms=((GPU_PRESENT_LABEL, "true"),)),
    GpuClusterOperand("nvidia-dcgm-dra", DRA_OPERAND_LABELS[2], key="dcgm", default=False),
    GpuClusterOperand("nvidia-dcgm-exporter-dra", DRA_OPERAND_LABELS[3], key="dcgmExporter"),
)
# the ComputeDomain controller (a Deployment, with computeDomains on): it tolerates the control plane,
# CriticalAddonsOnly (AKS's system pool) and the daemonsets' tolerations, and only prefers control-plane nodes
# (manifests/state-dra-driver/0600_controller-deployment.yaml)
DRA_CONTROLLER = "nvidia-dra-driver-controller"
_DRA_CONTROLLER_TOLERATIONS = (
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
)


def _gpu_cluster_operands(chart: str, spec: Mapping[str, Any]) -> list[Workload]:
    tolerations = (spec.get("daemonsets") or {}).get("tolerations") or []
    out = []
    for op in GPU_CLUSTER_OPERANDS:
        if not op.enabled(spec):
            continue
        pod: dict[str, Any] = {"nodeSelector": {op.label: "true"}, "tolerations": tolerations}
        if op.terms:
            terms = [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]} for k, v in op.terms]
            required = {"nodeSelectorTerms": terms}
            pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
        placement = Placement.from_pod_spec(pod)
        out.append(Workload(chart, "DaemonSet", op.daemonset, placement, op.role, (CONTAINER_WORKLOAD,), "dra"))
    if ((spec.get("draDriver") or {}).get("computeDomains") or {}).get("enabled", True):
        controller = Placement.from_pod_spec({"tolerations": [*_DRA_CONTROLLER_TOLERATIONS, *tolerations]})
        out.append(Workload(chart, "Deployment", DRA_CONTROLLER, controller, "controller"))
    return out


def _nvidia_driver(chart: str, obj: Mapping[str, Any]) -> Workload:
    """The driver DaemonSet an NVIDIADriver CR makes (one per OS the operator finds on its nodes): the driver deploy
    label and the CR's node selector, its tolerations (gpu-operator manifests/state-driver/0500_daemonset.yaml)."""
    spec = obj.get("spec") or {}
    selector = {**(spec.get("nodeSelector") or {}), DEPLOY_DRIVER_LABEL: "true"}
    placement = Placement.from_pod_spec({"nodeSelector": selector, "tolerations": spec.get("tolerations") or []})
    name = f"nvidia-gpu-driver-{obj['metadata']['name']}"
    return Workload(chart, "DaemonSet", name, placement, "driver", (CONTAINER_WORKLOAD,))


def _runs(workload: Workload, target: Target, labels: Mapping[str, str]) -> list[str]:
    return why_not(workload.placement, NodeShape(target.name, labels, target.node.taints))


def converge(
    loads: list[Workload], targets: list[Target], policy: OperatorPolicy | None = None
) -> dict[str, dict[str, str]]:
    """The labels each target's nodes end up with once the GPU software has run (see the module docstring)."""
    policy = policy or OperatorPolicy()
    labels = {t.name: dict(t.node.labels) for t in targets}
    operator_runs = False
    for _ in range(8):  # each pass adds labels only; a handful of passes reach the fixpoint
        before = ({name: dict(node) for name, node in labels.items()}, operator_runs)
        operator_runs = any(not _runs(w, t, labels[t.name]) for w in loads if w.role == "operator" for t in targets)
        for t in targets:
            node = labels[t.name]
            here = [w for w in loads if w.kind == "DaemonSet" and not _runs(w, t, node)]
            running = {w.role for w in here}
            for w in here:
                node.update(w.sets)
            if t.gpu and "nfd-worker" in running and t.vendor == "amd":
                if policy.amd_nfd_rule:
                    node[AMD_GPU_FEATURE_LABEL] = "true"
            elif t.gpu and "nfd-worker" in running:
                node[NFD_GPU_LABEL] = "true"
            if t.gpu and "gfd" in running:
                node[MIG_CAPABLE_LABEL] = "true" if t.mig_capable else "false"
                if t.mps:
                    node[MPS_CAPABLE_LABEL] = "true"
            if operator_runs and node.get(NFD_GPU_LABEL) == "true":
                node.setdefault(GPU_PRESENT_LABEL, "true")
            if operator_runs and node.get(GPU_PRESENT_LABEL) == "true" and policy.cr == GPU_CLUSTER:
                for key in GPU_CLUSTER_STATE_LABELS:
                    node.setdefault(key, "true")
            elif operator_runs and node.get(GPU_PRESENT_LABEL) == "true":
                workload = policy.workload(node)
                for key in state_labels(workload):
                    node.setdefault(key, "true")
                if workload == CONTAINER_WORKLOAD and node.get(MIG_CAPABLE_LABEL) == "true":
                    node.setdefault(DEPLOY_LABEL_PREFIX + "mig-manager", "true")
                    if policy.mig_disabled_default:
                        node.setdefault(MIG_CONFIG_LABEL, DISABLED_CONFIG)
        if (labels, operator_runs) == before:
            break
    return labels


def _not_its_workload(workload: Workload, target: Target) -> str | None:
    """Why ``workload`` is not for ``target``'s GPUs (another vendor's, their GPU workload is not one it serves, or
    their advertiser is another), or None."""
    if workload.vendor is not None and target.vendor is not None and workload.vendor != target.vendor:
        return f"its GPUs are {VENDOR_WORDS[target.vendor]}; it serves {VENDOR_WORDS[workload.vendor]}"
    if workload.serves is not None and target.workload not in workload.serves:
        serves = " and ".join(workload.serves)
        return f"its GPUs {WORKLOAD_WORDS[target.workload]} ({target.workload}); it serves {serves} nodes"
    container = target.workload == CONTAINER_WORKLOAD
    if workload.advertiser is not None and container and target.advertiser != workload.advertiser:
        return f"its advertiser is {target.advertiser}; it serves {workload.advertiser} nodes"
    return None


def _aks_managed(target: Target) -> str | None:
    """Why no chart's GPU software is for ``target``: AKS runs its GPU stack there; or None."""
    return (
        "AKS runs its driver, device plugin and DCGM exporter here (gpu_management: managed)"
        if target.aks_managed
        else None
    )


def not_needed(workload: Workload, target: Target) -> str | None:
    """Why ``workload`` need not run on GPU target ``target``, or None when it must."""
    if (reason := _aks_managed(target) or _not_its_workload(workload, target)) is not None:
        return reason
    if workload.vendor == "amd" and target.advertiser == "none":
        return (
            "its advertiser is none: the AMD GPU Operator serves none of its GPUs (its nodes lack the DeviceConfig's"
            " selector label)"
        )
    if workload.role == "driver" and not target.driver_by_operator:
        return "the driver is installed by AKS or the host roles here, not by the operator"
    if workload.role == "mig-manager" and not target.mig_capable:
        return "its GPUs have no MIG"
    if workload.role == "mps-control-daemon" and not target.mps:
        return "its GPUs are not shared with MPS"
    if workload.role == "gfd" and target.advertiser == "none":
        return "its advertiser is none: no pod is scheduled on the GPU labels GPU Feature Discovery sets"
    return None


@dataclass(frozen=True)
class Miss:
    target: str
    why: str
    intended: bool  # the workload is not meant to run there (e.g. the operator's driver on an AKS-driver pool)


@dataclass(frozen=True)
class Coverage:
    chart: str
    kind: str
    name: str
    runs_on: tuple[str, ...]
    misses: tuple[Miss, ...]
    unwanted: tuple[Miss, ...] = ()  # GPU targets it runs on but is not for (another GPU workload's DaemonSet)

    @property
    def problems(self) -> list[str]:
        """What is wrong: a GPU DaemonSet missing a target it must serve or running on one it is not for, a
        Deployment with nowhere to run."""
        out = [f"{self.kind} {self.name} would not run on {m.target}: {m.why}" for m in self.misses if not m.intended]
        out += [f"{self.kind} {self.name} would run on {m.target}, which it is not for: {m.why}" for m in self.unwanted]
        if self.kind == "Deployment" and not self.runs_on:
            out.append(f"Deployment {self.name} fits no pool or host group")
        return out


def coverage(loads: list[Workload], targets: list[Target], labels: Mapping[str, Mapping[str, str]]) -> list[Coverage]:
    """For each workload, the targets it runs on and, for DaemonSets, the GPU targets it does not run on, and why,
    and those it runs on but is not for."""
    out = []
    for w in loads:
        runs_on, misses, unwanted = [], [], []
        for t in targets:
            reasons = _runs(w, t, labels[t.name])
            if not reasons:
                runs_on.append(t.name)
                if w.kind == "DaemonSet" and t.gpu and (reason := _aks_managed(t) or _not_its_workload(w, t)):
                    unwanted.append(Miss(t.name, reason, intended=False))
            elif w.kind == "DaemonSet" and t.gpu:
                reason = not_needed(w, t)
                misses.append(Miss(t.name, reason or "; ".join(reasons), intended=reason is not None))
        out.append(Coverage(w.chart, w.kind, w.name, tuple(runs_on), tuple(misses), tuple(unwanted)))
    return out


def unadvertised(chart: str, loads: list[Workload], targets: list[Target]) -> list[Coverage]:
    """The advertiser each container GPU target of ``chart``'s vendor needs (device plugin, DRA kubelet plugin) where
    ``chart``'s render deploys none at all (a GPUCluster has no device plugin, a ClusterPolicy or the device plugin
    chart no DRA driver, a DeviceConfig one of the two): each a DaemonSet that runs nowhere and misses those
    targets."""
    vendor = CHART_VENDORS.get(chart)
    roles = {w.role for w in loads if (w.chart == chart if vendor == "amd" else w.vendor != "amd")}
    needs = {
        "device-plugin": ("device-plugin", "nvidia-device-plugin"),
        "dra": ("dra-kubelet-plugin", DRA_KUBELET_PLUGIN),
    }
    if vendor == "amd":
        needs = {
            "device-plugin": ("device-plugin", f"{DEVICE_CONFIG}-device-plugin"),
            "dra": ("dra-kubelet-plugin", f"{DEVICE_CONFIG}-dra-driver"),
        }
    out = []
    for advertiser, (role, name) in needs.items():
        hosts = [
            t.name
            for t in targets
            if t.gpu and t.workload == CONTAINER_WORKLOAD and t.advertiser == advertiser and t.vendor == vendor
        ]
        if not hosts or role in roles:
            continue
        if vendor == "amd":
            key = "devicePlugin.enableDevicePlugin" if advertiser == "device-plugin" else "draDriver.enable"
            why = f"the rendered DeviceConfig does not turn its {advertiser} on ({key}): one DeviceConfig runs one"
        elif advertiser == "device-plugin":
            why = "the chart renders a GPUCluster, which deploys no device plugin (a ClusterPolicy does)"
        elif chart == GPU_OPERATOR_CHART:
            why = "the chart renders no GPUCluster (gpuCluster.deployCR), whose operator deploys the DRA driver"
        else:
            why = f"the {chart} chart has no DRA driver: DRA pools and host groups need the {GPU_OPERATOR_CHART} chart"
        out.append(Coverage(chart, "DaemonSet", name, (), tuple(Miss(h, why, intended=False) for h in hosts)))
    return out


def undeployed(chart: str, loads: list[Workload], targets: list[Target]) -> list[Coverage]:
    """The operands the stack's GPU VM hosts need that ``chart``'s render does not deploy at all (sandbox workloads
    off, an operand off, or a chart without them): each a DaemonSet that runs nowhere and misses those hosts; and
    the advertiser GPU targets need that it does not deploy (:func:`unadvertised`)."""
    deployed = {w.name for w in loads}
    out = unadvertised(chart, loads, targets)
    if CHART_VENDORS.get(chart) == "amd":  # no sandbox workloads: the AMD host groups' GPUs serve containers
        return out
    for op in OPERANDS:
        hosts = [t.name for t in targets if t.gpu and t.workload in op.workloads]
        if not op.needed or op.daemonset in deployed or not hosts:
            continue
        if chart == GPU_OPERATOR_CHART:
            mode = f", sandboxWorkloads.mode {op.mode}" if op.mode else ""
            why = f"the ClusterPolicy does not deploy it (it needs sandboxWorkloads.enabled{mode} and {op.key}.enabled)"
        else:
            why = f"the {chart} chart has no sandbox workloads: GPU VM host groups need the {GPU_OPERATOR_CHART} chart"
        out.append(Coverage(chart, "DaemonSet", op.daemonset, (), tuple(Miss(h, why, intended=False) for h in hosts)))
    return out


def place(rendered: Iterable[RenderedChart], targets: list[Target]) -> tuple[dict[str, dict[str, str]], list[Coverage]]:
    """The rendered charts' workloads placed on ``targets``: the labels the nodes end up with, where each workload
    runs, and the operands GPU VM hosts need that no chart deploys."""
    rendered = list(rendered)
    loads = [w for c in rendered for w in workloads(c.release.chart, c.objects, c.release.namespace)]
    labels = converge(loads, targets, OperatorPolicy.of(o for c in rendered for o in c.objects))
    missing = [c for chart in rendered for c in undeployed(chart.release.chart, loads, targets)]
    return labels, coverage(loads, targets, labels) + missing


# -- the render -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedChart:
    release: ChartRelease
    manifest: str  # helm's output, as a GitOps tool would apply it
    objects: list[dict[str, Any]]

    @property
    def file(self) -> str:
        return f"{self.release.chart}.yaml"

    def kinds(self) -> dict[str, int]:
        return dict(sorted(Counter(str(o.get("kind")) for o in self.objects).items()))


@dataclass(frozen=True)
class GeneratedFile:
    """Objects gpufleet generates beside the charts (DRA: docs/kubernetes.md), written as one YAML file."""

    name: str  # what it holds: dra (claim templates, ComputeDomains), device-classes, kueue
    file: str
    header: str  # the comment at the top of the file: what it is and how to use it
    objects: list[dict[str, Any]]

    def kinds(self) -> dict[str, int]:
        return dict(sorted(Counter(str(o.get("kind")) for o in self.objects).items()))

    def text(self) -> str:
        from gpufleet.mig.outputs import dump_yaml

        comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in self.header.splitlines())
        return comment + "---\n".join(dump_yaml(o) for o in self.objects)


def generated_files(
    dra: DraPlan | None,
    queues: KueuePlan | None = None,
    monitoring: list[dict[str, Any]] | None = None,
    remediation: NodeRemediationPlan | None = None,
) -> list[GeneratedFile]:
    """The files of a stack's DRA objects (none without DRA targets), Kueue queues (:mod:`gpufleet.kube.queues`), GPU
    monitoring (none without a Prometheus operator: :mod:`gpufleet.kube.monitoring`) and node remediation (none unless
    the cluster remediates: :mod:`gpufleet.kube.node_remediation`)."""
    files = _dra_files(dra) if dra is not None else []
    if queues is not None:
        files.append(queues_file(queues))
    if remediation is not None:
        files.append(remediation_file(remediation))
    if monitoring:
        files.append(
            GeneratedFile(
                "monitoring",
                "gpufleet-monitoring.yaml",
                "GPU monitoring: the DCGM exporter's ServiceMonitor (and ScrapeConfig for AKS-managed GPU pools), the\n"
                "GPU alerts (PrometheusRule) and the stack's Grafana dashboard (a ConfigMap for Grafana's sidecar).\n"
                "Apply with kubectl apply -f gpufleet-monitoring.yaml once the GPU software is installed\n"
                "(docs/monitoring.md).",
                monitoring,
            )
        )
    return files


def _dra_files(dra: DraPlan) -> list[GeneratedFile]:
    targets = ", ".join(dra.targets)
    return [
        GeneratedFile(
            "dra",
            "gpufleet-dra.yaml",
            f"ResourceClaimTemplates for the GPUs of {targets}, and a ComputeDomain example per pool whose NVLink\n"
            "spans nodes. Namespaced objects without a namespace: apply them into each namespace whose pods claim\n"
            "GPUs, e.g. kubectl apply -n team-a -f gpufleet-dra.yaml (docs/kubernetes.md).",
            dra.objects(),
        ),
        GeneratedFile(
            "device-classes",
            "dra-deviceclasses.yaml",
            "The DeviceClasses the GPU Operator's GPUCluster installs, for reference: do not apply (the operator\n"
            "owns them). Each claim template names one.",
            dra.device_class_objects(),
        ),
        GeneratedFile(
            "kueue",
            "kueue-device-class-mappings.yaml",
            "Kueue: merge resources.deviceClassMappings into your Kueue Configuration (controller_manager_config.yaml\n"
            "of the kueue-manager-config ConfigMap), then cover these resource names in your ClusterQueues.",
            [dra.kueue_configuration()],
        ),
    ]


def queues_file(queues: KueuePlan) -> GeneratedFile:
    skipped = "".join(f"\nNo flavor for {s.target}: {s.why}." for s in queues.skipped)
    return GeneratedFile(
        "queues",
        "gpufleet-kueue.yaml",
        "Kueue: a ResourceFlavor per GPU pool or host group, a ClusterQueue per team with its share of each\n"
        "flavor's GPUs, a LocalQueue in each team's namespace (docs/queues.md). Apply after Kueue's CRDs; a job\n"
        "names its team's queue with the label kueue.x-k8s.io/queue-name." + skipped,
        queues.objects(),
    )


def remediation_file(remediation: NodeRemediationPlan) -> GeneratedFile:
    release = remediation.release
    secrets = ""
    if any(g.remediator == "power-cycle" for g in remediation.groups):
        secrets = (f"\nEach power-cycled host's BMC password goes in Secret {BMC_SECRET_PREFIX}<host> (key --password)"
                   f" in namespace {release.namespace}.")  # fmt: skip
    return GeneratedFile(
        "remediation",
        "gpufleet-remediation.yaml",
        "GPU fault remediation (docs/remediation.md): node-problem-detector's kernel log monitor for NVIDIA Xids\n"
        f"(mount it into NPD and add {MONITOR_FILE} to its --config.system-log-monitor), Node Healthcheck"
        f" {release.node_healthcheck.version}'s\nchecks and their remediators' templates (namespace"
        f" {release.namespace}, where the operators run).{secrets}\n" + "\n".join(remediation.summary()),
        remediation.objects(),
    )


@dataclass(frozen=True)
class Render:
    stack: str
    charts: list[RenderedChart]
    targets: list[Target]
    labels: dict[str, dict[str, str]]  # the targets' labels once the GPU software has run
    coverage: list[Coverage] = field(default_factory=list)
    generated: list[GeneratedFile] = field(default_factory=list)  # gpufleet's own objects (queues, DRA)

    @property
    def problems(self) -> list[str]:
        return [p for c in self.coverage for p in c.problems]

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: ``{stack, charts:[{name, version, file, objects}], generated:[{name, file, objects}],
        daemonsets:[{chart, name, runs_on, misses:[{target, why, intended}], unwanted:[{target, why}]}],
        deployments:[{chart, name, runs_on}], nodes:[...]}``."""
        return {
            "stack": self.stack,
            "charts": [
                {"name": c.release.chart, "version": c.release.version, "file": c.file, "objects": c.kinds()}
                for c in self.charts
            ],
            "generated": [{"name": g.name, "file": g.file, "objects": g.kinds()} for g in self.generated],
            "daemonsets": [
                {
                    "chart": c.chart,
                    "name": c.name,
                    "runs_on": list(c.runs_on),
                    "misses": [{"target": m.target, "why": m.why, "intended": m.intended} for m in c.misses],
                    "unwanted": [{"target": m.target, "why": m.why} for m in c.unwanted],
                }
                for c in self.coverage
                if c.kind == "DaemonSet"
            ],
            "deployments": [
                {"chart": c.chart, "name": c.name, "runs_on": list(c.runs_on)}
                for c in self.coverage
                if c.kind == "Deployment"
            ],
            "nodes": self.nodes(),
        }

    def nodes(self) -> list[dict[str, Any]]:
        """The labels and taints gpufleet and the platform put on each target's nodes (before the software runs)."""
        return [
            {
                "target": t.name,
                "kind": t.kind,
                "labels": dict(sorted(t.node.labels.items())),
                "taints": [str(x) for x in t.node.taints],
            }
            for t in self.targets
        ]


def releases(plan: StackPlan, baremetal_chart: str = GPU_OPERATOR_CHART) -> list[ChartRelease]:
    """What the stack installs: the AKS cluster's releases (NVIDIA's where it has NVIDIA pools, the AMD GPU Operator's
    where it has AMD pools), or the bare-metal cluster's (kubernetes.yml's chart where a host group has NVIDIA GPUs,
    the AMD GPU Operator's where one has AMD GPUs and the stack pins it)."""
    if plan.cluster is not None:
        return [r for r in (plan.cluster.gpu_software, plan.cluster.amd_gpu_software) if r is not None]
    if plan.baremetal is None:
        return []
    out = []
    if any(g.gpu_model and g.vendor != "amd" for g in plan.host_groups):
        out.append(plan.baremetal.releases[baremetal_chart])
    if AMD_GPU_OPERATOR_CHART in plan.baremetal.releases:
        out.append(plan.baremetal.releases[AMD_GPU_OPERATOR_CHART])
    return out


def dcm_file(wanted: Iterable[ChartRelease]) -> GeneratedFile | None:
    """The AMD GPU Operator's DCM ConfigMap, which gpufleet creates beside the chart (:mod:`gpufleet.kube.amd_operator`
    says why); None where no release runs the DCM."""
    objects = [o for o in map(dcm_config_map, wanted) if o is not None]
    if not objects:
        return None
    return GeneratedFile(
        "amd-dcm",
        "gpufleet-amd-dcm.yaml",
        "The AMD GPU Operator's Device Config Manager profiles (its DeviceConfig's configManager.config names this\n"
        "ConfigMap; the chart does not create it). Apply before or with the chart; a node's profile is its label\n"
        "dcm.amd.com/gpu-config-profile, which gpufleet sets (docs/amd.md).",
        objects,
    )


def render(
    plan: StackPlan,
    *,
    directory: Path | None = None,
    baremetal_chart: str = GPU_OPERATOR_CHART,
    progress: Callable[[str], None] | None = None,
    cost: StackCost | None = None,
) -> Render:
    """Render the stack's charts with helm and place their workloads on the stack's targets (``cost``: the stack's,
    for the idle-GPU alerts' $/hour; :mod:`gpufleet.kube.monitoring`)."""
    directory = directory or charts_dir()
    wanted = releases(plan, baremetal_chart)
    helm = helm_binary() if wanted else ""
    rendered = []
    for release in wanted:
        chart = find_chart(release, directory)
        if progress is not None:
            progress(f"helm template {release.chart} {release.version} ({chart})")
        manifest = helm_template(release, chart, plan.release["kubernetes"], helm)
        rendered.append(RenderedChart(release, manifest, parse_objects(manifest)))
    names = [r.chart for r in wanted] or [baremetal_chart]
    targets = stack_targets(plan, names[0], names[1:])
    labels, placed = place(rendered, targets)
    from gpufleet.catalog import load_catalog

    generated = generated_files(
        dra_plan(plan, load_catalog()),
        kueue_plan(plan, baremetal_chart),
        monitoring_objects(plan, cost),
        node_remediation_plan(plan),
    )
    if (dcm := dcm_file(wanted)) is not None:
        generated.append(dcm)
    return Render(plan.stack, rendered, targets, labels, placed, generated)


def _rendered_files(out: Path) -> list[str]:
    """The files an earlier render wrote into ``out``, as its ``summary.json`` names them (none when there is none)."""
    try:
        data = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return []
    parts = [data.get(key) for key in ("charts", "generated")] if isinstance(data, dict) else []
    listed = [item for part in parts if isinstance(part, list) for item in part]
    names = [item.get("file") for item in listed if isinstance(item, dict)]
    return [n for n in names if isinstance(n, str)] + ["nodes.yaml"]


def write(result: Render, out: Path) -> list[Path]:
    """Write one YAML per chart, gpufleet's generated files (DRA), ``nodes.yaml`` and ``summary.json`` into ``out``
    (created; its parent must exist), all at once: the files are written beside it first, so a failure leaves no
    partial directory, and moved in crash-safely; an earlier render's files this one does not write are removed
    (other files are kept), and two renders into ``out`` at once take turns (docs/render.md)."""
    from gpufleet.mig.outputs import dump_yaml

    parent = out.resolve().parent
    if not parent.is_dir():
        raise ChartError(f"cannot write to {out}: directory {parent} does not exist")
    if out.exists() and not out.is_dir():
        raise ChartError(f"cannot write to {out}: it is not a directory")
    files = {c.file: c.manifest for c in result.charts}
    files |= {g.file: g.text() for g in result.generated}
    files["nodes.yaml"] = dump_yaml({"nodes": result.nodes()})
    files["summary.json"] = json.dumps(result.to_dict(), indent=2) + "\n"
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=parent))
    except OSError as exc:
        raise ChartError(f"cannot write to {out}: {exc.strerror}") from None
    try:
        for name, text in files.items():
            (staging / name).write_text(text)
        replace_dir(staging, out, earlier=_rendered_files)
    except OSError as exc:
        raise ChartError(f"cannot write to {out}: {exc.strerror}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / name for name in files]


def chart_values_keys(chart: Path) -> set[str]:
    """Every key path of a chart's values.yaml and of its subcharts' (under their aliases), as dotted paths; an empty
    mapping in the chart (``data: {}``) takes keys of the user's choosing and is written ``path.*``. The chart is a
    folder or a .tgz (what ``helm pull`` writes), its subcharts folders or .tgz files in its ``charts/``."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")

    def walk(node: Any, prefix: str) -> Iterable[str]:
        for key, value in node.items():
            path = f"{prefix}{key}"
            yield path
            if isinstance(value, dict):
                yield from walk(value, path + ".") if value else [path + ".*"]

    def load(files: Mapping[str, bytes], name: str) -> Any:
        return (yaml.load(files[name].decode()) if name in files else None) or {}

    files = chart_files(chart)
    aliases = {d["name"]: d.get("alias") or d["name"] for d in load(files, "Chart.yaml").get("dependencies") or []}
    keys = set(walk(load(files, "values.yaml"), ""))
    for sub in _subcharts(files):
        name = load(sub, "Chart.yaml")["name"]
        keys.add(aliases.get(name, name))
        keys |= set(walk(load(sub, "values.yaml"), f"{aliases.get(name, name)}."))
    return keys


def chart_files(chart: Path) -> dict[str, bytes]:
    """A chart's files by their path in it, from its folder or its .tgz (where they are below the chart's name)."""
    if chart.is_dir():
        return {p.relative_to(chart).as_posix(): p.read_bytes() for p in chart.rglob("*") if p.is_file()}
    return _tgz_files(chart.read_bytes())


def _tgz_files(data: bytes) -> dict[str, bytes]:
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for info in tar.getmembers():
            handle = tar.extractfile(info) if info.isfile() else None
            if handle is not None:
                files[info.name.partition("/")[2]] = handle.read()
    return files


def _subcharts(files: Mapping[str, bytes]) -> list[dict[str, bytes]]:
    """The files of each subchart in a chart's ``charts/``, a folder or a .tgz, in the order of their names."""
    subs: dict[str, dict[str, bytes]] = {}
    for name, data in files.items():
        parts = name.split("/", 2)
        if parts[0] == "charts" and len(parts) == 3:
            subs.setdefault(parts[1], {})[parts[2]] = data
        elif parts[0] == "charts" and len(parts) == 2 and parts[1].endswith(".tgz"):
            subs[parts[1]] = _tgz_files(data)
    return [subs[name] for name in sorted(subs)]
