"""The typed plan of a stack: what the planners decided, handed to the Pulumi program (``infra/``), the Ansible
roles (through the ``gpufleet_plan`` lookup's host view), ``gpufleet plan`` and ``gpufleet render``. Frozen
dataclasses, built once per stack by :func:`gpufleet.plan.build.plan_stack`; the consumers map them and decide nothing.

Where the plan passes on a part of the stack unchanged (the network, the security settings, a tuning profile) it
holds the validated spec object itself: typed, frozen, and one fact in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

from pydantic import BaseModel

from gpufleet.catalog.aks import ApiLevel
from gpufleet.spec.models import (
    Advertiser,
    AutoscalerProfile,
    BaremetalHost,
    Metal3Settings,
    Network,
    PoolTuning,
    Remediation,
    Rollout,
    Security,
    Spot,
    SystemPool,
    Team,
    TuningProfile,
    Upgrade,
    Vgpu,
    Virtualization,
)

# A field whose None value is left out of the plan's plain data (``to_dict``), and whose spec object is dumped
# without its None values: the JSON of ``gpufleet plan`` shows what is set.
OMIT_NONE = {"omit_none": True}


def plain(value: Any, omit_none: bool = False) -> Any:
    """A plan object as JSON-able data: dataclasses and spec models as dicts, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in fields(value):
            item = getattr(value, f.name)
            skip = f.metadata.get("omit_none", False)
            if item is None and skip:
                continue
            out[f.name] = plain(item, skip)
        return out
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=omit_none)
    if isinstance(value, dict):
        return {str(k): plain(v, omit_none) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, omit_none) for v in value]
    return value


# What a GPU node's GPUs serve, as the GPU Operator's sandbox workloads name it (nvidia.com/gpu.workload.config)
GpuWorkload = Literal["container", "vm-passthrough", "vm-vgpu"]

# How the GPU Operator is configured: a ClusterPolicy (the device plugin stack) or a GPUCluster (the DRA stack); the
# v26.7.0 chart renders one of them (clusterPolicy.deployCR / gpuCluster.deployCR, and fails with both). gpufleet
# derives it from the advertisers (docs/architecture.md, Decisions).
OperatorCr = Literal["ClusterPolicy", "GPUCluster"]


@dataclass(frozen=True)
class ChartRelease:
    """A Helm release of the stack's GPU software, computed without Pulumi or Ansible: the Pulumi program installs
    it, ``gpufleet render`` renders it with helm, the roles install it (bare metal), the tests check it."""

    chart: str  # gpu-operator or nvidia-device-plugin
    version: str  # as the chart's repository lists it (chart_version)
    repository: str
    namespace: str
    values: dict[str, Any]
    namespace_labels: dict[str, str] | None = None  # the release's namespace gets them when it is created

    @property
    def name(self) -> str:
        """The release name (the chart's name, as the roles and the Pulumi program install it)."""
        return self.chart


@dataclass(frozen=True)
class PoolApi:
    """How a pool reaches AKS: ``level`` sdk (the typed SDK resource) or stable/preview (the generic ARM resource at
    ``version``), and the fields that need that level, with the reason."""

    level: ApiLevel
    version: str
    needs: tuple[str, ...] = field(default=())

    @property
    def preview(self) -> bool:
        return self.level == "preview"

    @property
    def generic(self) -> bool:
        """The pool goes through ``resources.Resource`` (its API is newer than the SDK's)."""
        return self.level != "sdk"


@dataclass(frozen=True)
class NodeCounts:
    """Nodes of a pool: now, and the autoscaler's bounds (both ``count`` without autoscaling)."""

    count: int
    min: int
    max: int


@dataclass(frozen=True)
class MigPlan:
    """The MIG layout of a pool's nodes or of a host group's hosts.

    ``managed_by``: ``aks`` (AKS's ``gpuInstanceProfile``), ``operator`` (the GPU Operator's MIG manager applies
    ``config_name``) or ``host`` (the ``mig`` role applies it to bare-metal hosts). ``instances_per_node``: MIG
    instances of each profile per node (a host is a node); None for a host group whose hosts' GPU count the stack
    leaves open."""

    managed_by: Literal["aks", "operator", "host"]
    config_name: str | None = field(default=None, metadata=OMIT_NONE)
    gpu_instance_profile: str | None = field(default=None, metadata=OMIT_NONE)
    instances_per_node: dict[str, int] | None = None
    strategy: Literal["single", "mixed"] | None = field(default=None, metadata=OMIT_NONE)
    resources: dict[str, int] | None = field(default=None, metadata=OMIT_NONE)
    profiles: tuple[str, ...] = ()  # the layout's MIG profiles (the DRA claim templates of a dra pool)
    # GPUs per node the layout leaves whole (no MIG); None: the node's GPU count is unknown and the layout does not
    # cover every GPU (devices: all), so some may be
    whole_gpus: int | None = 0


@dataclass(frozen=True)
class AmdPartitionGroupPlan:
    """GPUs of a node in one AMD compute partition mode (DCM's computePartition and numGPUsAssigned)."""

    compute: str  # SPX, DPX, QPX, CPX
    gpus: int | Literal["all"]


@dataclass(frozen=True)
class AmdPartitionPlan:
    """The AMD Instinct partitions of a pool's nodes or a host group's hosts (gpufleet.mig.amd_partitions).

    ``managed_by``: ``host`` (the ``amd_partition`` role) or ``operator`` (the AMD GPU Operator's Device Config
    Manager applies ``profile``, chosen by the node label ``dcm.amd.com/gpu-config-profile``). ``logical_gpus``: per
    pair (``cpx_nps4``) the logical GPUs a node gets, None where the node's GPU count is unknown; ``memory_gib``: the
    memory of each logical GPU of each pair (derived: the GPU's memory split evenly)."""

    managed_by: Literal["host", "operator"]
    profile: str
    memory: str  # NPS1, NPS2, NPS4
    groups: tuple[AmdPartitionGroupPlan, ...]
    skipped_gpus: tuple[int, ...]
    logical_gpus: dict[str, int] | None
    memory_gib: dict[str, float]

    @property
    def pairs(self) -> tuple[str, ...]:
        """The layout's pairs as resource suffixes (``cpx_nps4``), in the order of its groups."""
        return tuple(dict.fromkeys(f"{g.compute}_{self.memory}".lower() for g in self.groups))


@dataclass(frozen=True)
class SharingPlan:
    """GPU sharing of a pool's nodes; ``config_name`` is the device-plugin config its nodes are labelled with."""

    mode: Literal["none", "time-slicing", "mps"]
    replicas: int | None = field(default=None, metadata=OMIT_NONE)
    config_name: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class EgressPlan:
    """How nodes reach the internet (AKS ``outboundType``) and what the Pulumi program sets up for it."""

    outbound_type: str
    create_nat_gateway: bool  # the program creates a NAT gateway and its public IP for the subnet it creates
    nat_gateway_id: str | None = field(metadata=OMIT_NONE)  # the stack's own NAT gateway
    route_table_id: str | None = field(metadata=OMIT_NONE)  # userDefinedRouting: the stack's route table
    attach_to_subnet: bool  # the program attaches the NAT gateway / route table to the subnet it creates
    authorize_nat_ip: bool  # the created NAT gateway's address joins the API server's authorized ranges


@dataclass(frozen=True)
class MonitoringPlan:
    """The Log Analytics workspace of a cluster, what its diagnostic setting sends there, and whether Microsoft
    Defender for Containers reports to it."""

    workspace_id: str | None = field(metadata=OMIT_NONE)  # the stack's workspace; None: the program creates one
    workspace_name: str | None = field(metadata=OMIT_NONE)  # the workspace the program creates
    retention_days: int
    log_categories: tuple[str, ...]
    metric_categories: tuple[str, ...]
    defender: bool


@dataclass(frozen=True)
class AddonPlan:
    """An AKS add-on the cluster manages (``addonProfiles``): on or explicitly off, with its config."""

    name: str
    enabled: bool
    config: dict[str, str]


@dataclass(frozen=True)
class PoolPlan:
    """One AKS GPU node pool, with every value the Pulumi program sets on its ``AgentPool``."""

    name: str
    aks_name: str  # the node pool's name in AKS (gpufleet.azure.aks.aks_pool_name)
    vm_size: str
    series: str
    gpu_model: str
    mig_capable: bool  # whole GPUs of a MIG-capable model (not a fraction of one)
    gpus_per_node: int | float
    gpu_partition: str | None
    vcpus: int
    memory_gib: float
    infiniband: bool
    nodes: NodeCounts
    autoscaling: bool
    spot: bool
    spot_settings: Spot | None = field(metadata=OMIT_NONE)  # price cap and eviction policy of a spot pool
    zones: tuple[str, ...]
    os_sku: str
    kubernetes: str
    node_public_ip: bool
    driver: str
    aks_gpu_driver: str
    taints: tuple[str, ...]
    labels: dict[str, str]
    mig: MigPlan | None
    sharing: SharingPlan
    upgrade: Upgrade = field(metadata=OMIT_NONE)
    tuning: PoolTuning
    gpus_total: dict[str, int | float]
    tags: dict[str, str]
    encryption_at_host: bool
    advertiser: Advertiser  # what makes its GPUs allocatable (docs/kubernetes.md)
    nvlink_multi_node: bool  # its GPUs' NVLink domain spans nodes (GB200/GB300 NVL72): DRA ComputeDomains
    # kind agentpool: an AKS node pool; nap: a Karpenter NodePool of node auto-provisioning (gpufleet.kube.nap)
    kind: Literal["agentpool", "nap"] = "agentpool"
    # managed: AKS runs the driver, device plugin and DCGM exporter (gpuProfile.nvidia.managementMode Managed)
    gpu_management: Literal["unmanaged", "managed"] = "unmanaged"
    # the AKS API the pool's AgentPool needs (gpufleet.azure.aks_api.pool_api); None for kind nap
    api: PoolApi | None = None
    vendor: Literal["nvidia", "amd"] = "nvidia"  # whose GPU software serves the pool (docs/amd.md)
    amd_partitions: AmdPartitionPlan | None = field(default=None, metadata=OMIT_NONE)

    @property
    def kubelet_config(self) -> bool:
        """AKS gets a kubeletConfig: a CPU or topology manager policy is set."""
        return self.tuning.cpu_manager_policy != "none" or self.tuning.topology_manager_policy != "none"


@dataclass(frozen=True)
class ClusterPlan:
    """The AKS cluster of a stack: names, the system pool, the settings passed on, and its GPU software."""

    name: str
    resource_group: str
    location: str
    kubernetes: str
    sku_tier: str
    system_pool: SystemPool
    system_pool_taints: tuple[str, ...]
    network: Network = field(metadata=OMIT_NONE)
    security: Security
    # the secure baseline's settings (gpufleet.azure.baseline), decided once from network and security
    network_dataplane: str | None  # cilium with the Cilium network policy, else AKS's default
    egress: EgressPlan
    monitoring: MonitoringPlan | None  # None: no workspace, no diagnostic setting, no Defender
    addons: tuple[AddonPlan, ...]
    image_cleaner_hours: int | None  # None: Image Cleaner off
    system_pool_encryption_at_host: bool
    autoscaler: AutoscalerProfile
    tags: dict[str, str]
    gpu_chart: str | None  # the NVIDIA chart; None: no NVIDIA pool
    mig_strategy: Literal["single", "mixed"] | None
    mig_parted_config: dict[str, Any] | None
    gpu_software: ChartRelease | None  # NVIDIA's GPU software; None: no NVIDIA pool
    # the GPU Operator's custom resource (from the pools' advertisers); None with the standalone device plugin chart
    operator_cr: OperatorCr | None
    # Auto: node auto-provisioning (Karpenter) is on, for the stack's kind nap pools (nodeProvisioningProfile.mode)
    node_provisioning: Literal["Manual", "Auto"] = "Manual"
    # a Prometheus operator scrapes the GPU metrics (aks.gpu_software.monitoring): gpufleet.kube.monitoring's objects
    gpu_metrics: bool = False
    # GPU faults of the pools' nodes (aks.remediation): gpufleet.kube.node_remediation's objects; None: not configured
    remediation: Remediation | None = field(default=None, metadata=OMIT_NONE)
    # the AMD GPU Operator's release for the AMD pools (gpufleet.kube.amd_operator); None: no AMD pool
    amd_gpu_software: ChartRelease | None = field(default=None, metadata=OMIT_NONE)

    def addon(self, name: str) -> AddonPlan | None:
        """The add-on ``name`` when it is enabled."""
        return next((a for a in self.addons if a.name == name and a.enabled), None)


@dataclass(frozen=True)
class HostGroupPlan:
    """A bare-metal host group: its GPUs, its tuning profile (resolved), its MIG layout, what its GPUs serve
    (containers, or VMs: passed through or split into vGPUs), and the node labels the GPU software's role sets on its
    hosts, per chart."""

    name: str
    gpu_model: str | None
    mig_capable: bool | None
    gpus_per_host: int | None
    tuning_profile: str
    tuning: TuningProfile
    mig: MigPlan | None
    node_labels: dict[str, dict[str, str]]  # chart -> labels (gpufleet.kube.gpu_software.software_labels)
    # the GPU Operator's workload config of its nodes (gpufleet.kube.gpu_software.gpu_workload); None: hosts without
    # GPUs
    gpu_workload: GpuWorkload | None = None
    # GPU VMs on these hosts: the vfio role binds their devices; vgpu (below) for vm-vgpu groups
    virtualization: Virtualization | None = field(default=None, metadata=OMIT_NONE)
    advertiser: Advertiser = "device-plugin"  # what makes its GPUs allocatable (docs/kubernetes.md)
    nvlink_multi_node: bool = False  # its GPUs' NVLink domain spans hosts (GB200/GB300 NVL72): DRA ComputeDomains
    vendor: Literal["nvidia", "amd"] | None = None  # its GPUs' vendor; None: hosts without GPUs
    amd_partitions: AmdPartitionPlan | None = field(default=None, metadata=OMIT_NONE)

    @property
    def vgpu(self) -> Vgpu | None:
        """The stack's vGPU settings of a vm-vgpu group (its virtualization's vgpu)."""
        return self.virtualization.vgpu if self.virtualization is not None else None

    @property
    def mig_layout(self) -> str:
        """The layout the ``mig`` role applies (``""``: none)."""
        return self.mig.config_name or "" if self.mig is not None else ""

    @property
    def compute_domains(self) -> bool:
        """The DRA driver runs ComputeDomains on these hosts (advertiser ``dra``, NVLink across hosts): it starts
        their IMEX daemons itself, so the hosts' own ``nvidia-imex`` service must not run (docs/kubernetes.md)."""
        return self.advertiser == "dra" and self.nvlink_multi_node


@dataclass(frozen=True)
class BaremetalPlan:
    """The bare-metal side: inventory, rollout, the one mig-parted config of every host group's layout, and the
    release of each chart ``kubernetes.yml`` can install (driver and toolkit from the host roles)."""

    inventory: str
    rollout: Rollout
    mig_parted_config: dict[str, Any] | None
    releases: dict[str, ChartRelease]
    operator_cr: OperatorCr = "ClusterPolicy"  # the gpu-operator release's custom resource (from the advertisers)
    engine: Literal["redfish", "metal3"] = "redfish"  # who drives the hosts' BMCs: the program, or Metal3/Ironic
    hosts: tuple[BaremetalHost, ...] = ()  # the BMC-managed servers the Pulumi program creates (validated)
    metal3: Metal3Settings | None = None  # engine metal3: the management cluster and namespace
    converge: bool = False  # pulumi up runs ansible/site.yml on the hosts it created
    remediation: Remediation = field(default_factory=Remediation)  # what remediate.yml does about Xids
    dcgm_diag_level: int = 1  # dcgmi diag -r LEVEL, verify.yml's dcgm check (gpufleet.fleet.dcgm_diag.diag_level)
    canaries: tuple[str, ...] = ()  # hosts the canary_verified promotion gate looks at


@dataclass(frozen=True)
class StackPlan:
    stack: str
    stage: str
    region: str
    release: dict[str, str]
    cluster: ClusterPlan | None = None
    pools: tuple[PoolPlan, ...] = ()
    baremetal: BaremetalPlan | None = None
    host_groups: tuple[HostGroupPlan, ...] = ()
    teams: tuple[Team, ...] = ()  # who queues GPU work (gpufleet.kube.queues: Kueue's ClusterQueues and LocalQueues)

    def to_dict(self) -> dict[str, Any]:
        return plain(self)

    def host_group_of(self, group_names: Iterable[str]) -> HostGroupPlan | None:
        """A host's group: the first of the stack's host groups, in the stack's order, among the host's inventory
        groups (Ansible's ``group_names``); None when it is in none. Its tuning, MIG layout and node labels all come
        from this one group."""
        names = set(group_names)
        return next((g for g in self.host_groups if g.name in names), None)

    def host_group(self, name: str) -> HostGroupPlan:
        """The host group ``name``; :class:`ValueError` naming the stack's groups when there is none."""
        for group in self.host_groups:
            if group.name == name:
                return group
        known = ", ".join(g.name for g in self.host_groups)
        raise ValueError(f"host group {name!r} is not in stack {self.stack}; its host groups are: {known}")
