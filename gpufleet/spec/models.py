"""The typed shape of a stack (``Pulumi.<stage>-<region>.yaml``, keys under the ``gpufleet:`` namespace).

These models check structure only: key names, types, enums, ranges and rules internal to one object. Rules that
need the hardware catalog or several sections (VM size retired, MIG profile of that GPU, pool names unique...)
live in :mod:`gpufleet.spec.rules`, so both kinds of error are reported together.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpufleet.catalog import AmdComputeMode, AmdMemoryMode
from gpufleet.spec.types import (
    LABEL_KEY_RE,
    Action,
    Cidr,
    DriverBranch,
    Identifier,
    IpAddress,
    KubernetesVersion,
    LabelValue,
    PercentOrCount,
    SemVer,
    StrictModel,
    Taint,
    Zone,
    invalid,
    label_value,
    matching,
)

# -- release -------------------------------------------------------------------------------------------------

# AMD's driver releases are numbered like 30.10.1 (ROCm 7.0 era) or 6.4.1 (before); ROCm like 7.0.1
AmdgpuVersion = Annotated[str, matching(r"\d+\.\d+(\.\d+)?", "an amdgpu release such as '30.10.1'")]
RocmVersion = Annotated[str, matching(r"\d+\.\d+(\.\d+)?", "a ROCm release such as '7.0.1'")]


class Release(StrictModel):
    """Pinned versions: the block promotion copies from stack to stack, and only it. Every pin is required, so a
    promotion always moves all of them; which combinations go together is the release table's (gpufleet/catalog/
    releases.yaml), checked by :func:`gpufleet.spec.rules.check_release`."""

    kubernetes: KubernetesVersion
    gpu_operator: SemVer = Field(description="NVIDIA GPU Operator Helm chart version")
    device_plugin: SemVer = Field(description="NVIDIA device plugin Helm chart version")
    driver_branch: DriverBranch = Field(description="NVIDIA driver branch, e.g. '580'")
    mig_parted: SemVer
    container_toolkit: SemVer
    dra_driver: SemVer = Field(description="NVIDIA DRA driver for GPUs (dra-driver-nvidia-gpu) version, e.g. v0.5.0")
    nfd: SemVer = Field(description="Node Feature Discovery version the GPU charts carry, e.g. v0.19.0")
    # AMD Instinct pins (docs/amd.md): required where the stack has AMD GPUs (gpufleet.spec.rules), absent otherwise
    amd_gpu_operator: SemVer | None = Field(None, description="AMD GPU Operator Helm chart version, e.g. v1.5.1")
    amdgpu: AmdgpuVersion | None = Field(None, description="AMD's amdgpu driver release (amdgpu-dkms), e.g. '30.10.1'")
    rocm: RocmVersion | None = Field(
        None, description="the ROCm release the hosts get (amd-smi, rocminfo), e.g. '7.0.1'"
    )


# -- tuning --------------------------------------------------------------------------------------------------


class CoresPerGpu(StrictModel):
    """Physical cores pinned to each GPU, as a range: the planner gives every GPU its NUMA node's fair share of the
    cores left after the system's, within ``min`` and ``max`` (the node's share of a 16-core NPS4 node with two
    GPUs is 8; of a 56-core node with four, 14). A plain number in a stack means exactly that many."""

    min: int = Field(4, ge=1, le=128, description="fewest cores per GPU; a node that cannot give them is refused")
    max: int = Field(16, ge=1, le=128, description="most cores per GPU; the rest of the node stays for other pods")

    @model_validator(mode="before")
    @classmethod
    def _exactly(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return {"min": v, "max": v}
        return v

    @model_validator(mode="after")
    def _ordered(self) -> CoresPerGpu:
        if self.min > self.max:
            raise invalid(f"min ({self.min}) is above max ({self.max})")
        return self

    def __str__(self) -> str:
        return str(self.min) if self.min == self.max else f"{self.min}-{self.max}"


class TuningProfile(StrictModel):
    """How a bare-metal host is tuned; the topology planner turns it into a per-host plan."""

    cores_per_gpu: CoresPerGpu = Field(
        default_factory=CoresPerGpu,
        description="physical cores pinned to each GPU: {min, max} (the node's share within them) or a number",
    )
    reserved_cores: int | None = Field(
        None,
        ge=0,
        le=1024,
        description="physical cores kept for the system, from NUMA nodes without GPUs first (default: one per node)",
    )
    hugepages_1g_per_gpu: int = Field(0, ge=0, le=4096)
    hugepages_1g_per_node: int = Field(0, ge=0, le=4096)
    hugepages_2m_per_node: int = Field(0, ge=0, le=1_048_576)
    vfs_per_nic: int = Field(0, ge=0, le=256, description="SR-IOV virtual functions per capable device")
    sriov_device_classes: list[Literal["ethernet", "infiniband", "nvme"]] = Field(
        default_factory=lambda: ["ethernet", "infiniband"],
        min_length=1,
        description="which SR-IOV capable devices get vfs_per_nic VFs (nvme: NVMe controllers, as in the lab)",
    )
    isolation: bool = Field(False, description="isolcpus/nohz_full/rcu_nocbs for the GPU cores")

    @model_validator(mode="after")
    def _one_hugepage_basis(self) -> TuningProfile:
        if self.hugepages_1g_per_gpu and self.hugepages_1g_per_node:
            raise invalid("set hugepages_1g_per_gpu or hugepages_1g_per_node, not both")
        return self


DEFAULT_TUNING_PROFILE = "default"


class PoolTuning(StrictModel):
    """Node tuning AKS can apply: kubelet CPU/topology managers, transparent hugepages."""

    cpu_manager_policy: Literal["none", "static"] = "none"
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = "none"
    # AKS has no vm.nr_hugepages sysctl: kept so a stack that sets it gets the reason (spec.rules.check_pool)
    hugepages_2m: int = Field(0, ge=0, description="refused: AKS cannot reserve hugepages")
    transparent_hugepages: Literal["always", "madvise", "never"] | None = None

    @model_validator(mode="after")
    def _topology_needs_static(self) -> PoolTuning:
        if self.topology_manager_policy in ("restricted", "single-numa-node") and (self.cpu_manager_policy != "static"):
            raise invalid(
                f"topology_manager_policy {self.topology_manager_policy!r} aligns CPUs only with"
                " cpu_manager_policy 'static'"
            )
        return self


# -- MIG -----------------------------------------------------------------------------------------------------


# AKS's gpuInstanceProfile values (the MIG profile every GPU of an AKS-managed pool gets)
AksMigProfile = Literal["MIG1g", "MIG2g", "MIG3g", "MIG4g", "MIG7g"]


def _gpus_selector(v: Any) -> str | tuple[int, ...]:
    if v == "all":
        return "all"
    if isinstance(v, list | tuple) and v and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        if any(i < 0 for i in v):
            raise invalid("GPU indices start at 0")
        if len(set(v)) != len(v):
            raise invalid("a GPU index is listed twice")
        return tuple(v)
    raise invalid("expected 'all' or a non-empty list of GPU indices, e.g. [0, 1]")


GpuSelector = Annotated[
    str | tuple[int, ...],
    PlainValidator(_gpus_selector, json_schema_input_type=Any),
    PlainSerializer(lambda v: v if v == "all" else list(v), return_type=Any),
]


class MigDeviceGroup(StrictModel):
    """mig-parted style: which GPUs of a host, and the instances on each of them."""

    gpus: GpuSelector = "all"
    profiles: dict[str, Annotated[int, Field(ge=1)]] = Field(min_length=1)


class MigLayout(StrictModel):
    """A named mig-parted layout (the value of the ``nvidia.com/mig.config`` label)."""

    config_name: LabelValue
    devices: list[MigDeviceGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _groups_disjoint(self) -> MigLayout:
        if len(self.devices) > 1 and any(g.gpus == "all" for g in self.devices):
            raise invalid("a device group with gpus: all must be the only group")
        seen: set[int] = set()
        for group in self.devices:
            if group.gpus == "all":
                continue
            if overlap := seen & set(group.gpus):
                raise invalid(f"GPU {sorted(overlap)[0]} is in two device groups")
            seen |= set(group.gpus)
        return self


class AksManagedMig(StrictModel):
    """AKS partitions every GPU of the pool with one profile (``gpuInstanceProfile``). On a pool with
    ``gpu_management: managed`` AKS's own device plugin advertises the instances, with ``strategy`` (AKS
    ``gpuProfile.nvidia.migStrategy``): ``single`` as ``nvidia.com/gpu``, ``mixed`` as ``nvidia.com/mig-<profile>``."""

    managed_by: Literal["aks"]
    profile: AksMigProfile
    strategy: Literal["single", "mixed"] | None = Field(
        None, description="gpu_management managed only: how AKS's device plugin advertises the instances"
    )


class OperatorManagedMig(MigLayout):
    """The GPU Operator's MIG manager applies a mig-parted layout, chosen by node label."""

    managed_by: Literal["operator"]


PoolMig = Annotated[AksManagedMig | OperatorManagedMig, Field(discriminator="managed_by")]


class AmdPartitionGroup(StrictModel):
    """GPUs of a node in one compute partition mode (a Device Config Manager profile entry: computePartition,
    numGPUsAssigned)."""

    compute: AmdComputeMode
    gpus: int | Literal["all"] = Field("all", description="how many of the node's GPUs (in PCI order), or all")

    @field_validator("gpus")
    @classmethod
    def _positive(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= 64:
            raise invalid(f"{v} is not a GPU count: 1-64, or 'all'")
        return v


class AmdPartitions(StrictModel):
    """AMD Instinct partitions of a node's GPUs (docs/amd.md): one memory (NPS) mode for the whole node (the driver
    applies it hive-wide), compute modes per group of GPUs; ``managed_by`` host: the ``amd_partition`` role sets them
    on bare-metal hosts; operator: the AMD GPU Operator's Device Config Manager applies the ``profile`` chosen by the
    node label ``dcm.amd.com/gpu-config-profile``."""

    managed_by: Literal["host", "operator"] = "host"
    profile: LabelValue = Field(description="the layout's name: the Device Config Manager profile and its node label")
    memory: AmdMemoryMode = Field("NPS1", description="the memory partition mode of every GPU of the node")
    devices: list[AmdPartitionGroup] = Field(min_length=1)
    skipped_gpus: list[Annotated[int, Field(ge=0, le=63)]] = Field(
        default_factory=list, description="GPU indexes (PCI order) left as they are (DCM's skippedGPUs)"
    )

    @model_validator(mode="after")
    def _groups(self) -> AmdPartitions:
        if len(self.devices) > 1 and any(g.gpus == "all" for g in self.devices):
            raise invalid("a device group with gpus: all must be the only group")
        if len(set(self.skipped_gpus)) != len(self.skipped_gpus):
            raise invalid("skipped_gpus names a GPU twice")
        return self


# -- AKS -----------------------------------------------------------------------------------------------------


# The system pool is inline in the typed ManagedCluster (pulumi_azure_native containerservice, API 2025-09-01), so it
# takes that API's Linux OS SKUs; GPU pools also take Ubuntu2404, which they get through a newer API version
# (gpufleet.catalog.aks, docs/kubernetes.md). Which image each gives on which Kubernetes version: aks.yaml.
OsSku = Literal["Ubuntu", "Ubuntu2204", "AzureLinux", "AzureLinux3"]
GpuOsSku = Literal["Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux", "AzureLinux3"]
# AKS retired the SkipGPUDriverInstall node pool tag on 2025-08-14 (learn.microsoft.com/azure/aks/use-nvidia-gpu,
# "Skip GPU driver installation"); gpuProfile.driver None replaces it (gpufleet: driver: operator).
RETIRED_POOL_TAGS = {"SkipGPUDriverInstall": "driver: operator (AKS gpuProfile.driver None)"}
RESERVED_TAG_KEYS = ("gpufleet-pool", "managed-by")


class Autoscaling(StrictModel):
    min: int = Field(ge=0, le=1000)
    max: int = Field(ge=1, le=1000)


class Spot(StrictModel):
    max_price: float = Field(-1, description="USD per hour; -1 pays up to the on-demand price")
    eviction_policy: Literal["Delete", "Deallocate"] = "Delete"

    @field_validator("max_price")
    @classmethod
    def _price(cls, v: float) -> float:
        if v != -1 and (v <= 0 or round(v, 5) != v):
            raise invalid("max_price is -1 (up to on-demand) or a positive price with at most 5 decimals")
        return v


class Upgrade(StrictModel):
    """Rolling upgrade of a pool: exactly one of max_surge / max_unavailable."""

    max_surge: PercentOrCount | None = None
    max_unavailable: PercentOrCount | None = None
    drain_timeout_minutes: int | None = Field(None, ge=5, le=1440)

    @model_validator(mode="after")
    def _exactly_one(self) -> Upgrade:
        if (self.max_surge is None) == (self.max_unavailable is None):
            raise invalid("set exactly one of max_surge or max_unavailable")
        return self


class Sharing(StrictModel):
    """How pods share a GPU: not at all, time-slicing, or MPS (device plugin ``sharing`` config)."""

    mode: Literal["none", "time-slicing", "mps"] = "none"
    replicas: int | None = Field(None, ge=2, le=64)

    @model_validator(mode="after")
    def _replicas(self) -> Sharing:
        if self.mode == "none" and self.replicas is not None:
            raise invalid("replicas applies only to mode 'time-slicing' or 'mps'")
        if self.mode != "none" and self.replicas is None:
            raise invalid(f"mode {self.mode!r} needs replicas (2-64): how many pods share one GPU")
        return self


DEFAULT_GPU_TAINTS = ("sku=gpu:NoSchedule",)

# What makes a pool's (a host group's) GPUs allocatable to pods (docs/kubernetes.md):
# - device-plugin: the NVIDIA device plugin advertises them as the extended resources nvidia.com/gpu (and
#   nvidia.com/mig-<profile>); the GPU Operator's ClusterPolicy, or the standalone device plugin chart;
# - dra: the NVIDIA DRA driver publishes them in ResourceSlices (Dynamic Resource Allocation, resource.k8s.io/v1),
#   pods claim them through ResourceClaims; the GPU Operator's GPUCluster;
# - none: nothing advertises them; no pod can be given one of its GPUs through Kubernetes (the driver, and on
#   device-plugin clusters the monitoring, stay). For GPUs that serve something else: a host-level service, another
#   scheduler.
Advertiser = Literal["device-plugin", "dra", "none"]
ADVERTISER_FIELD = Field(
    "device-plugin",
    description="what advertises the GPUs to Kubernetes: device-plugin (extended resources nvidia.com/gpu), dra (the"
    " NVIDIA DRA driver: ResourceSlices and ResourceClaims, through the GPU Operator's GPUCluster), or none",
)


def _pool_tags(v: dict[str, str]) -> dict[str, str]:
    """Azure tags a stack puts on a pool's VMs: not a retired AKS control tag, not one of gpufleet's own."""
    retired = {k.lower(): (k, replacement) for k, replacement in RETIRED_POOL_TAGS.items()}
    for key, value in v.items():
        if key.lower() in retired:
            name, replacement = retired[key.lower()]
            raise invalid(f"AKS retired the {name} node pool tag on 2025-08-14; remove it and set {replacement}")
        if key in RESERVED_TAG_KEYS:
            raise invalid(f"tag {key!r} is set by gpufleet; reserved: {', '.join(RESERVED_TAG_KEYS)}")
        if not 1 <= len(key) <= 512 or any(c in key for c in "<>%&\\?/"):
            raise invalid(f"{key!r} is not an Azure tag name: 1-512 characters, none of < > % & \\ ? /")
        if len(value) > 256:
            raise invalid(f"the value of tag {key!r} is longer than Azure's 256 characters")
    return v


class GpuPool(StrictModel):
    name: str
    kind: Literal["agentpool", "nap"] = Field(
        "agentpool", description="agentpool: an AKS node pool; nap: node auto-provisioning (a Karpenter NodePool)"
    )
    vm_size: str
    count: int | None = Field(
        None, ge=0, le=1000, description="nodes now; AKS requires it even with autoscaling (not for kind nap)"
    )
    max_nodes: int | None = Field(None, ge=1, le=1000, description="kind nap only: the most nodes NAP creates")
    autoscaling: Autoscaling | None = None
    scale_to_zero: bool = Field(False, description="allow autoscaling.min = 0")
    zones: list[Zone] = Field(default_factory=list)
    taints: list[Taint] = Field(default_factory=lambda: list(DEFAULT_GPU_TAINTS))
    labels: dict[str, str] = Field(default_factory=dict)
    spot: Spot | None = None
    os_sku: GpuOsSku = "Ubuntu"
    driver: Literal["aks", "operator"] = Field("aks", description="who installs the NVIDIA driver")
    gpu_management: Literal["unmanaged", "managed"] = Field(
        "unmanaged",
        description="managed: AKS runs the driver, device plugin and DCGM exporter (gpuProfile.nvidia.managementMode)",
    )
    tags: Annotated[dict[str, str], AfterValidator(_pool_tags)] = Field(
        default_factory=dict, description="Azure tags of the pool's VMs, beside gpufleet's"
    )
    mig: PoolMig | None = None
    sharing: Sharing = Field(default_factory=Sharing)
    tuning: PoolTuning = Field(default_factory=PoolTuning)
    upgrade: Upgrade | None = Field(None, description="default: max_surge '33%', or max_unavailable 1 on spot")
    advertiser: Advertiser = ADVERTISER_FIELD
    amd_partitions: AmdPartitions | None = Field(
        None, description="AMD GPUs: compute x memory partitions (managed_by operator: the AMD GPU Operator's DCM)"
    )

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if len(key) > 316 or not LABEL_KEY_RE.fullmatch(key):
                raise invalid(f"{key!r} is not a Kubernetes label key")
            label_value(value)
        return v

    @model_validator(mode="after")
    def _mig_strategy_is_aks_managed(self) -> GpuPool:
        # the pool's owners (driver, advertiser, MIG) are judged in gpufleet.spec.owners, at the keys that chose them
        if isinstance(self.mig, AksManagedMig) and self.mig.strategy is not None and self.gpu_management != "managed":
            raise invalid(
                "mig.strategy is the MIG strategy of AKS's own device plugin (gpu_management: managed); without it"
                " gpufleet's device plugin advertises the instances and picks the strategy itself"
            )
        return self

    @property
    def amd(self) -> bool:
        """The pool's size has AMD GPUs (the catalog's; an unknown size: no)."""
        from gpufleet.catalog import load_catalog

        catalog = load_catalog()
        size = catalog.vm_size(self.vm_size)
        return size is not None and catalog.gpu(size.gpu).vendor == "amd"

    @property
    def aks_gpu_driver(self) -> Literal["Install", "None"]:
        """AKS ``gpuProfile.driver``: AKS installs the driver unless the GPU Operator owns it; it installs no AMD driver
        (the AMD GPU Operator does: AKS documents its AMD pools with the GPU driver install skipped)."""
        return "None" if self.driver == "operator" or self.amd else "Install"

    @property
    def node_range(self) -> tuple[int, int, int]:
        """Nodes (min, now, max): the autoscaler's bounds and ``count``; a NAP pool starts empty and grows to
        ``max_nodes``."""
        if self.kind == "nap":
            return 0, 0, self.max_nodes or 0
        count = self.count or 0
        return (self.autoscaling.min, count, self.autoscaling.max) if self.autoscaling else (count, count, count)

    @property
    def mig_strategy(self) -> Literal["single", "mixed"] | None:
        """The MIG strategy AKS's device plugin uses on a managed pool with AKS MIG (single unless the stack says)."""
        if self.gpu_management != "managed" or not isinstance(self.mig, AksManagedMig):
            return None
        return self.mig.strategy or "single"

    @property
    def effective_upgrade(self) -> Upgrade:
        if self.upgrade is not None:
            return self.upgrade
        # AKS gives spot pools no surge nodes; 33% is AKS's recommendation for production pools.
        return Upgrade(max_unavailable="1") if self.spot else Upgrade(max_surge="33%")


class SystemPool(StrictModel):
    name: str = "system"
    vm_size: str = "Standard_D4ds_v5"
    count: int = Field(3, ge=1, le=1000)
    zones: list[Zone] = Field(default_factory=lambda: ["1", "2", "3"])
    os_sku: OsSku = "Ubuntu"


def _resource_id(provider_path: str, example: str) -> Any:
    """An Azure resource id under a resource group, e.g. ``Microsoft.Network/routeTables/<name>``."""
    pattern = r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/" + provider_path
    return matching(pattern, f"a resource id /subscriptions/<id>/resourceGroups/<rg>/providers/{example}")


SubnetId = Annotated[
    str,
    _resource_id(
        r"Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+",
        "Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>",
    ),
]
RouteTableId = Annotated[
    str, _resource_id(r"Microsoft\.Network/routeTables/[^/]+", "Microsoft.Network/routeTables/<name>")
]
NatGatewayId = Annotated[
    str, _resource_id(r"Microsoft\.Network/natGateways/[^/]+", "Microsoft.Network/natGateways/<name>")
]
WorkspaceId = Annotated[
    str,
    _resource_id(r"Microsoft\.OperationalInsights/workspaces/[^/]+", "Microsoft.OperationalInsights/workspaces/<name>"),
]


class Egress(StrictModel):
    """How nodes reach the internet (AKS ``outboundType``, fixed at creation). The default sends egress through a NAT
    gateway the Pulumi program creates for its subnet; ``userDefinedRouting`` sends it through the stack's route
    table (a firewall as next hop); ``loadBalancer`` leaves it unfiltered (rule gpufleet.AKS.EgressControl)."""

    outbound_type: Literal["userAssignedNATGateway", "userDefinedRouting", "loadBalancer"] = "userAssignedNATGateway"
    route_table_id: RouteTableId | None = Field(
        None, description="userDefinedRouting: the route table (default route to the firewall) of the nodes' subnet"
    )
    nat_gateway_id: NatGatewayId | None = Field(
        None,
        description="userAssignedNATGateway: the stack's own NAT gateway (required with existing_subnet_id: the"
        " one already on that subnet); default: the program creates one for its subnet",
    )

    @model_validator(mode="after")
    def _coherent(self) -> Egress:
        if self.outbound_type == "userDefinedRouting" and self.route_table_id is None:
            raise invalid(
                "userDefinedRouting needs route_table_id: the route table whose default route leads to your firewall"
                " (or use userAssignedNATGateway, the default)"
            )
        if self.route_table_id is not None and self.outbound_type != "userDefinedRouting":
            raise invalid(f"route_table_id applies only to outbound_type userDefinedRouting, not {self.outbound_type}")
        if self.nat_gateway_id is not None and self.outbound_type != "userAssignedNATGateway":
            raise invalid(
                f"nat_gateway_id applies only to outbound_type userAssignedNATGateway, not {self.outbound_type}"
            )
        return self


class Network(StrictModel):
    """Either a new VNet + subnet (vnet_cidr, subnet_cidr) or an existing subnet (existing_subnet_id)."""

    vnet_cidr: Cidr | None = None
    subnet_cidr: Cidr | None = None
    existing_subnet_id: SubnetId | None = None
    plugin_mode: Literal["overlay"] | None = "overlay"
    pod_cidr: Cidr = "192.168.0.0/16"
    service_cidr: Cidr = "172.16.0.0/16"
    dns_service_ip: IpAddress = ipaddress.IPv4Address("172.16.0.10")
    policy: Literal["cilium", "calico", "azure", "none"] = Field(
        "cilium", description="the NetworkPolicy engine (cilium: Azure CNI powered by Cilium); none fails a rule"
    )
    egress: Egress = Field(default_factory=Egress)

    @model_validator(mode="after")
    def _shape(self) -> Network:
        new = self.vnet_cidr is not None or self.subnet_cidr is not None
        if new and self.existing_subnet_id:
            raise invalid("give vnet_cidr + subnet_cidr (a new network) or existing_subnet_id, not both")
        if not new and not self.existing_subnet_id:
            raise invalid("give vnet_cidr + subnet_cidr (a new network) or existing_subnet_id")
        if new:
            if self.vnet_cidr is None or self.subnet_cidr is None:
                raise invalid("a new network needs both vnet_cidr and subnet_cidr")
            vnet, subnet = ipaddress.ip_network(self.vnet_cidr), ipaddress.ip_network(self.subnet_cidr)
            if not subnet.subnet_of(vnet):  # type: ignore[arg-type]
                raise invalid(f"subnet_cidr {subnet} is not inside vnet_cidr {vnet}")
        service = ipaddress.ip_network(self.service_cidr)
        if self.dns_service_ip not in service:
            raise invalid(f"dns_service_ip {self.dns_service_ip} is not inside service_cidr {service}")
        if (
            self.existing_subnet_id
            and self.egress.outbound_type == "userAssignedNATGateway"
            and self.egress.nat_gateway_id is None
        ):
            raise invalid(
                "an existing subnet keeps its own egress: give egress.nat_gateway_id (the NAT gateway on that subnet)"
                " or egress.outbound_type userDefinedRouting with route_table_id (its route table)"
            )
        return self


# AKS takes at most 200 authorized IP ranges (learn.microsoft.com/azure/aks/api-server-authorized-ip-ranges).
MAX_AUTHORIZED_IP_RANGES = 200


class ApiServer(StrictModel):
    """Who reaches the Kubernetes API server: the authorized ranges (the platform team's and the deploying runner's
    egress addresses), or, for a private cluster, only the cluster's network (rule Azure.AKS.AuthorizedIPs)."""

    authorized_ip_ranges: list[Cidr] = Field(default_factory=list, max_length=MAX_AUTHORIZED_IP_RANGES)
    private: bool = Field(
        False, description="a private cluster: no public endpoint (pulumi up runs inside the network)"
    )

    @model_validator(mode="after")
    def _one_way(self) -> ApiServer:
        if self.private and self.authorized_ip_ranges:
            raise invalid("a private cluster has no public endpoint to restrict: set authorized_ip_ranges or private")
        for cidr in self.authorized_ip_ranges:
            if ipaddress.ip_network(cidr).prefixlen == 0:
                raise invalid(f"{cidr} authorizes every address; list the ranges that must reach the API server")
        return self


class Logs(StrictModel):
    """Control-plane logs and metrics sent to Log Analytics (a diagnostic setting on the cluster)."""

    audit: bool = Field(True, description="kube-audit-admin and guard (rule Azure.AKS.AuditLogs)")
    platform: bool = Field(
        True,
        description="kube-apiserver, controller manager, scheduler, autoscaler, AllMetrics (Azure.AKS.PlatformLogs)",
    )
    workspace_id: WorkspaceId | None = Field(
        None, description="an existing Log Analytics workspace; default: the program creates log-<cluster>"
    )
    retention_days: int = Field(30, ge=30, le=730, description="retention of the workspace the program creates")


class Waiver(StrictModel):
    """A baseline rule this stack accepts failing, and why (``gpufleet plan`` and ``gpufleet audit`` show it)."""

    reason: str = Field(description="why the stack accepts the risk, in a sentence")

    @field_validator("reason")
    @classmethod
    def _said(cls, v: str) -> str:
        if len(v.strip()) < 10:
            raise invalid("say why the stack accepts the risk, in a sentence (at least 10 characters)")
        return v.strip()


class Security(StrictModel):
    """Secure defaults (the AKS secure baseline, :mod:`gpufleet.azure.baseline`); relaxing one is an explicit line in
    the stack, and a relaxation that fails a rule needs a waiver with a reason in ``waivers``."""

    entra_rbac: bool = True
    local_accounts: bool = False
    oidc_issuer: bool = True
    workload_identity: bool = True
    node_public_ip: bool = False
    node_os_upgrade_channel: Literal["NodeImage", "SecurityPatch", "Unmanaged", "None"] = "NodeImage"
    cluster_upgrade_channel: Literal["none", "patch", "stable", "rapid", "node-image"] = "patch"
    api_server: ApiServer = Field(default_factory=ApiServer)
    defender: bool = Field(True, description="Microsoft Defender for Containers (Azure.AKS.DefenderProfile)")
    azure_policy: bool = Field(True, description="the Azure Policy add-on (Azure.AKS.AzurePolicyAddOn)")
    logs: Logs = Field(default_factory=Logs)
    image_cleaner: bool = Field(True, description="Image Cleaner removes unused images weekly")
    secrets_store_csi: bool = Field(True, description="the Key Vault Secrets Store CSI driver, with rotation")
    encryption_at_host: bool = Field(True, description="host-based encryption on every pool's VMs")
    # the rule names are checked by gpufleet.spec.rules.check_waivers (the baseline's rules read the plan)
    waivers: dict[str, Waiver] = Field(
        default_factory=dict, description="baseline rules this stack accepts failing: rule name -> {reason}"
    )

    @model_validator(mode="after")
    def _coherent(self) -> Security:
        if self.workload_identity and not self.oidc_issuer:
            raise invalid("workload_identity needs oidc_issuer: true")
        if not self.entra_rbac and not self.local_accounts:
            raise invalid("with entra_rbac and local_accounts both off, nobody can sign in to the cluster")
        if self.node_public_ip and self.api_server.authorized_ip_ranges:
            # "This feature is not compatible with clusters that use Public IP Per Node" (AKS API reference)
            raise invalid("api_server.authorized_ip_ranges do not work with node_public_ip: AKS refuses both together")
        return self


Duration = Annotated[str, matching(r"[1-9]\d*[sm]", "a duration in seconds or minutes, e.g. '10s' or '10m'")]


class AutoscalerProfile(StrictModel):
    expander: Literal["least-waste", "most-pods", "priority", "random"] = "least-waste"
    scan_interval: Duration = "10s"
    scale_down_delay_after_add: Duration = "10m"
    scale_down_unneeded_time: Duration = "10m"
    max_graceful_termination_seconds: int = Field(600, ge=0, le=86400)


class Cluster(StrictModel):
    name: (
        Annotated[
            str,
            matching(r"[a-zA-Z0-9][-a-zA-Z0-9_]{0,61}[a-zA-Z0-9]", "1-63 letters, digits, '-' and '_' (AKS name)"),
        ]
        | None
    ) = None
    sku_tier: Literal["Free", "Standard", "Premium"] = "Standard"
    system_pool: SystemPool = Field(default_factory=SystemPool)
    network: Network
    security: Security = Field(default_factory=Security)
    autoscaler_profile: AutoscalerProfile = Field(default_factory=AutoscalerProfile)


# The charts' Helm repositories (the NVIDIA documentation's); a stack may point at a mirror instead.
GPU_OPERATOR_REPOSITORY = "https://helm.ngc.nvidia.com/nvidia"
DEVICE_PLUGIN_REPOSITORY = "https://nvidia.github.io/k8s-device-plugin"
# AMD's chart repository and namespace (../shared/reference/amd-instinct.md §4, docs/installation/kubernetes-helm.md)
AMD_GPU_OPERATOR_REPOSITORY = "https://rocm.github.io/gpu-operator"
AMD_GPU_OPERATOR_NAMESPACE = "kube-amd-gpu"

HelmRepository = Annotated[str, matching(r"(https|oci)://[^\s]+", "an https:// or oci:// Helm repository URL")]
Namespace = Annotated[
    str, matching(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "a Kubernetes namespace (DNS-1123 label, 1-63 characters)")
]


# An image reference's parts, as the GPU Operator's ClusterPolicy takes them (repository, image, version): a
# registry host[:port] and path without a scheme or tag; the image name as the CRD's pattern allows; a tag.
ImageRepository = Annotated[
    str,
    matching(
        r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:\d{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*",
        "a registry host and path without scheme or tag, e.g. 'registry.example.net/nvidia'",
    ),
]
ImageName = Annotated[str, matching(r"[a-zA-Z0-9-]+", "letters, digits and '-' (the image name, without a tag)")]
ImageTag = Annotated[str, matching(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", "an image tag, e.g. '580.95.02'")]
SecretName = Annotated[
    str,
    matching(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", "a Kubernetes Secret name (DNS-1123)"),
]


class GpuSoftware(StrictModel):
    """The cluster's GPU software. gpufleet picks the chart from the pools: the GPU Operator when a pool leaves the
    driver or the MIG layout to it, else the NVIDIA device plugin alone (AKS installs driver and toolkit); AMD pools
    get the AMD GPU Operator (docs/amd.md), each vendor's software on its own pools only."""

    namespace: Namespace | None = Field(None, description="default: gpu-operator, or nvidia-device-plugin")
    monitoring: bool = Field(
        False, description="a Prometheus operator scrapes DCGM exporter (and AMD's metrics exporter): ServiceMonitors"
    )
    gpu_operator_repository: HelmRepository = GPU_OPERATOR_REPOSITORY
    device_plugin_repository: HelmRepository = DEVICE_PLUGIN_REPOSITORY
    amd_namespace: Namespace = Field(AMD_GPU_OPERATOR_NAMESPACE, description="the AMD GPU Operator's namespace")
    amd_gpu_operator_repository: HelmRepository = AMD_GPU_OPERATOR_REPOSITORY
    amd_driver_image: ImageRepository | None = Field(
        None,
        description="the repository (no tag) the AMD GPU Operator pushes the amdgpu driver image it builds to and its"
        " nodes pull it from: required with AMD pools on AKS, where the operator installs the driver",
    )
    amd_driver_image_secret: SecretName | None = Field(
        None, description="a Secret of the AMD operator's namespace with the credentials to push and pull that image"
    )


RemediationEngine = Literal["ansible", "node-healthcheck"]


class Remediation(StrictModel):
    """What is done about a host's GPU faults (Xids): the action per Xid follows NVIDIA's resolution for it
    (gpufleet/catalog/xids.yaml, docs/remediation.md) unless ``xid_actions`` names another. Who acts is the
    ``engine``: ``ansible/remediate.yml`` (bare metal's default), or node-problem-detector and Node Healthcheck in the
    stack's Kubernetes cluster, configured by ``gpufleet render`` (gpufleet-remediation.yaml; AKS's only one)."""

    engine: RemediationEngine | None = Field(
        None,
        description="ansible (remediate.yml; bare metal's default) or node-healthcheck (in the cluster; AKS's)",
    )
    max_hosts_at_once: int = Field(
        1, ge=1, description="hosts of a host group (nodes of a pool) out of service at once, those already out count"
    )
    xid_actions: dict[int, Action] = Field(
        default_factory=dict,
        description="Xid -> none, cordon, gpu-reset, reboot or power-cycle, instead of NVIDIA's resolution for it",
    )


class Aks(StrictModel):
    cluster: Cluster
    gpu_pools: list[GpuPool] = Field(min_length=1)
    gpu_software: GpuSoftware = Field(default_factory=GpuSoftware)
    remediation: Remediation | None = Field(
        None, description="GPU faults of the pools' nodes: gpufleet render configures Node Healthcheck for them"
    )
    preview: bool = Field(
        False, description="the stack may use AKS preview API fields (AKS-managed GPU pools); plan lists them"
    )


# -- bare metal ----------------------------------------------------------------------------------------------


class Vgpu(StrictModel):
    """NVIDIA vGPU for a host group's VMs, through the GPU Operator: its vGPU manager (the vGPU host driver, from an
    image you build from NVIDIA's vGPU software and keep in a private registry: NVIDIA does not publish it) and its
    vGPU device manager, which creates the vGPU devices of a named config on each host."""

    manager_repository: ImageRepository = Field(
        description="the private registry path of your vGPU manager image (GPU Operator vgpuManager.repository)"
    )
    manager_image: ImageName = Field("vgpu-manager", description="the image's name (vgpuManager.image)")
    manager_version: ImageTag = Field(description="the image's tag (vgpuManager.version)")
    image_pull_secrets: list[SecretName] = Field(
        default_factory=list,
        description="Secrets in the GPU Operator's namespace that pull the private image"
        " (vgpuManager.imagePullSecrets)",
    )
    device_config: LabelValue | None = Field(
        None,
        description="the vGPU device manager's config for these hosts, the value of their nvidia.com/vgpu.config"
        " label (e.g. 'L40S-12Q': four L40S-12Q vGPUs per L40S); default: its config named 'default'",
    )

    @property
    def manager(self) -> tuple[str, str, str, tuple[str, ...]]:
        """The vGPU manager image and its pull secrets: one per cluster (the ClusterPolicy has one vgpuManager)."""
        return (self.manager_repository, self.manager_image, self.manager_version, tuple(self.image_pull_secrets))


class Virtualization(StrictModel):
    """GPU VMs on the group's hosts (``gpufleet virt plan``): what each VM gets, and how large it is. Each VM's vCPUs
    are pinned on its device's NUMA node and its memory is backed by that node's hugepages."""

    device: Literal["gpu", "vf"] = Field(
        "gpu",
        description="what a VM is given: gpu (a whole GPU, or with vms_per_gpu > 1 one of the GPU's SR-IOV VFs),"
        " vf (one SR-IOV virtual function of another device each, such as the lab's NVMe controller)",
    )
    vms_per_gpu: int = Field(1, ge=1, le=64, description="VMs per GPU: 1 passes the whole GPU; N takes N of its VFs")
    vcpus: int = Field(8, ge=1, le=1024, description="vCPUs per VM, each pinned to one host CPU")
    memory_gib: float = Field(32, gt=0, le=65536, description="memory per VM, backed by hugepages on its NUMA node")
    hugepage_size: Literal["1G", "2M"] | None = Field(
        None, description="default: 1G where memory_gib is a whole number of GiB, else 2M"
    )
    emulator_cpus: int = Field(
        1,
        ge=0,
        le=64,
        description="host CPUs of each VM's own for its emulator threads, apart from all vCPUs; 0 shares the"
        " system's reserved CPUs of the VM's NUMA node instead (small hosts, the lab)",
    )
    max_vms: int | None = Field(
        None, ge=1, le=1024, description="at most this many VMs per host (devices in PCI order)"
    )
    vgpu: Vgpu | None = Field(
        None,
        description="NVIDIA vGPU through the GPU Operator (device gpu only); without it, GPU VMs get whole GPUs"
        " passed through (the operator's VFIO manager binds them to vfio-pci)",
    )

    @model_validator(mode="after")
    def _pages_fit(self) -> Virtualization:
        mib = self.memory_gib * 1024
        if abs(mib - round(mib)) > 1e-6 or round(mib) % 2:
            raise invalid(f"memory_gib {self.memory_gib:g} is not a whole number of 2 MiB hugepages")
        if self.hugepage_size == "1G" and self.memory_mib % 1024:
            raise invalid(f"hugepage_size 1G needs a whole number of GiB; memory_gib is {self.memory_gib:g}")
        if self.device == "vf" and self.vms_per_gpu != 1:
            raise invalid("vms_per_gpu applies to device gpu; with device vf each VF is one VM")
        if self.device == "vf" and self.vgpu is not None:
            raise invalid("vgpu applies to device gpu: the vGPU manager splits GPUs, not other devices' VFs")
        return self

    @property
    def memory_mib(self) -> int:
        return round(self.memory_gib * 1024)

    @property
    def page_kib(self) -> int:
        """The hugepage size backing each VM's memory, in KiB."""
        whole = self.memory_mib % 1024 == 0
        return 2048 if self.hugepage_size == "2M" or (self.hugepage_size is None and not whole) else 1048576


class HostGroup(StrictModel):
    """An inventory group of identical bare-metal hosts."""

    name: Identifier
    gpu_model: str | None = Field(None, description="catalog GPU; omit for hosts without GPUs")
    gpus_per_host: int | None = Field(None, ge=1, le=64)
    tuning_profile: str = DEFAULT_TUNING_PROFILE
    mig: MigLayout | None = None
    virtualization: Virtualization | None = Field(None, description="GPU VMs on these hosts (gpufleet virt plan)")
    advertiser: Advertiser = ADVERTISER_FIELD
    amd_partitions: AmdPartitions | None = Field(
        None, description="AMD GPUs: compute x memory partitions (the amd_partition role, or the operator's DCM)"
    )

    @model_validator(mode="after")
    def _gpu_fields(self) -> HostGroup:
        if self.gpu_model is None and (
            self.gpus_per_host is not None or self.mig is not None or self.amd_partitions is not None
        ):
            raise invalid("gpus_per_host, mig and amd_partitions need gpu_model")
        if self.gpu_model is None and self.virtualization is not None and self.virtualization.device == "gpu":
            raise invalid("virtualization with device gpu needs gpu_model (or device: vf on hosts without GPUs)")
        if self.mig is not None and self.gpu_vms:
            raise invalid(
                "mig and virtualization with device gpu exclude each other: mig is the hosts' layout for containers,"
                " and these GPUs go to VMs (the GPU Operator runs no MIG manager on VM hosts)"
            )
        return self

    @property
    def gpu_vms(self) -> bool:
        """The group's GPUs go to VMs (virtualization with device gpu), not to containers."""
        return self.virtualization is not None and self.virtualization.device == "gpu"


def _serial(v: Any) -> int | str:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    if isinstance(v, str) and re.fullmatch(r"([1-9]\d?|100)%", v):
        return v
    raise invalid(f"{v!r} is not a batch size: a number of hosts >= 1 or a percentage such as '25%'")


class Rollout(StrictModel):
    """Ansible ``serial`` and ``max_fail_percentage`` for plays that change hosts."""

    serial: Annotated[int | str, PlainValidator(_serial, json_schema_input_type=int | str)] = 1
    max_fail_percentage: int = Field(0, ge=0, le=100)
    reboot_ok: bool = Field(False, description="hosts may be rebooted to apply kernel arguments")


# -- bare-metal hosts (BMC-managed servers a Pulumi stack creates) --------------------------------------------

# A Pulumi config key: 'namespace:name' (pulumi config set [--secret] KEY VALUE).
CONFIG_KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*:[A-Za-z0-9_][A-Za-z0-9_.-]*")
PLAIN_PASSWORD = (
    "BMC passwords are Pulumi secrets: run `pulumi config set --secret KEY ...` and write `password: {secret: KEY}`"
    " (e.g. KEY gpufleet:bmc_password)"
)
PLAIN_KUBECONFIG = (
    "the management cluster's kubeconfig is a Pulumi secret: run `pulumi config set --secret KEY ...` (the file's"
    " text) and write `kubeconfig: {secret: KEY}`"
)


def _config_key(v: Any) -> str:
    # the value is never shown: whoever wrote a password here instead of a key name must not see it echoed in logs
    if not isinstance(v, str) or not CONFIG_KEY_RE.fullmatch(v):
        raise invalid(
            "expected a Pulumi config key 'namespace:name', e.g. 'gpufleet:bmc_password' (the value given is not"
            " shown: it may be a secret)"
        )
    return v


ConfigKey = Annotated[str, PlainValidator(_config_key, json_schema_input_type=str)]


class SecretRef(StrictModel):
    """A secret of this stack's Pulumi config, by key: ``{secret: gpufleet:bmc_password}`` refers to the
    ``gpufleet:bmc_password: {secure: ...}`` entry ``pulumi config set --secret`` wrote. The value never enters the
    stack model; the Pulumi program reads it with ``pulumi.Config(namespace).require_secret(name)``."""

    secret: ConfigKey

    @property
    def namespace(self) -> str:
        return self.secret.partition(":")[0]

    @property
    def name(self) -> str:
        return self.secret.partition(":")[2]


def _no_plain_text(message: str) -> Any:
    """A secret given as a value (a string, a number) instead of ``{secret: KEY}``: refused with ``message``, which
    never repeats the value."""

    def check(v: Any) -> Any:
        if isinstance(v, str | int | float | bool):
            raise invalid(message)
        return v

    return BeforeValidator(check)


SecretPassword = Annotated[SecretRef, _no_plain_text(PLAIN_PASSWORD)]
SecretKubeconfig = Annotated[SecretRef, _no_plain_text(PLAIN_KUBECONFIG)]

_HOSTNAME_RE = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*"
)


def _host(v: str) -> str | None:
    """``v`` when it is an IP address or a DNS name, else None."""
    try:
        return str(ipaddress.ip_address(v))
    except ValueError:
        numeric = re.fullmatch(r"[\d.]+", v) is not None  # 10.0.0.256 is a broken address, not a name
        return v if _HOSTNAME_RE.fullmatch(v) and not numeric else None


def _bmc_address(v: Any) -> str:
    """A Redfish service's address: ``https://host[:port]`` (or ``http://``), nothing else: no path (the service
    root is /redfish/v1), and no user name or password (they are ``username`` and ``password``)."""
    from urllib.parse import urlsplit

    example = "e.g. 'https://10.0.0.11' or 'https://bmc-a01.example.net:8443'"
    if not isinstance(v, str):
        raise invalid(f"expected the BMC's Redfish address, {example}")
    parts = urlsplit(v.strip())
    if "@" in parts.netloc:
        raise invalid("credentials do not go in the BMC address (it is not secret): give username and password")
    if parts.scheme not in ("https", "http"):
        raise invalid(f"{v!r} is not an https:// or http:// address of a Redfish BMC ({example})")
    try:
        port = parts.port
    except ValueError:
        raise invalid(f"{v!r} has no valid port (1-65535)") from None
    if port == 0:
        raise invalid(f"{v!r} has no valid port (1-65535)")
    if not parts.hostname or _host(parts.hostname) is None:
        raise invalid(f"{v!r} names no host: an IP address or a DNS name ({example})")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise invalid(f"{v!r}: give the BMC's scheme, host and port only; the Redfish service root is /redfish/v1")
    return v.strip().rstrip("/")


BmcAddress = Annotated[str, PlainValidator(_bmc_address, json_schema_input_type=str)]


class Bmc(StrictModel):
    """How to reach a host's BMC through Redfish. The user name may be written as it is; the password is a Pulumi
    secret of the stack (never in the stack file, the state, the outputs or a log in plain text)."""

    address: BmcAddress = Field(description="the Redfish service's scheme, host and port, e.g. https://10.0.0.11")
    username: str = Field(min_length=1, max_length=256)
    password: SecretPassword
    verify_tls: bool = Field(True, description="check the BMC's TLS certificate (https)")

    @property
    def endpoint(self) -> tuple[str, str, int]:
        """(scheme, host, port) with the scheme's default port, lowercase: one BMC however its address is written."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.address)
        host = (parts.hostname or "").lower()
        return parts.scheme, host, parts.port or (443 if parts.scheme == "https" else 80)


def _redfish_id(what: str, example: str) -> Any:
    """A Redfish resource id or a serial number: a quoted string (YAML reads 0123 as the number 123)."""

    def check(v: Any) -> str:
        if isinstance(v, bool) or not isinstance(v, str):
            if isinstance(v, int | float):
                raise invalid(f"write the {what} as a quoted string, e.g. {example!r}: YAML reads {v!r} as a number")
            raise invalid(f"expected the {what} as a string, e.g. {example!r}")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}", v):
            raise invalid(f"{v!r} is not a {what}: letters, digits and . _ : + - (at most 128)")
        return v

    return PlainValidator(check, json_schema_input_type=str)


SystemId = Annotated[str, _redfish_id("Redfish system id", "1")]
SerialNumber = Annotated[str, _redfish_id("serial number", "SN-0001")]


def _mac(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}", v):
        raise invalid(f"{v!r} is not a MAC address like 'aa:bb:cc:dd:ee:ff' (six hex pairs, ':' between them)")
    if int(v[:2], 16) & 1:
        raise invalid(f"{v!r} is a multicast address; give the provisioning NIC's own (unicast) MAC")
    return v.lower()


MacAddress = Annotated[str, PlainValidator(_mac, json_schema_input_type=str)]

ImageUrl = Annotated[str, matching(r"https?://[^\s/@]+(/[^\s]*)?", "an http:// or https:// URL of the image")]
ImageChecksum = Annotated[
    str,
    matching(
        r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}",
        "'sha256:' and 64 lowercase hex digits (or 'sha512:' and 128), the image's digest",
    ),
]


class BootSource(StrictModel):
    """What the host boots once (the BMC's one-time boot override): its disk, the network (PXE), or an image the BMC
    inserts as virtual media."""

    mode: Literal["UEFI"] = Field("UEFI", description="the firmware's boot mode (UEFI only)")
    source: Literal["disk", "pxe", "virtual-media"] = "disk"
    image_url: ImageUrl | None = Field(
        None, description="virtual-media: the image the BMC inserts; engine metal3: the image written to the disk"
    )
    image_checksum: ImageChecksum | None = None

    @model_validator(mode="after")
    def _image(self) -> BootSource:
        if self.source == "virtual-media" and self.image_url is None:
            raise invalid("source virtual-media needs image_url: the image the BMC inserts as a virtual CD/DVD")
        if self.source == "disk" and self.image_url is not None:
            raise invalid(
                "source disk boots what the disk holds; image_url applies to virtual-media (or pxe with metal3)"
            )
        if self.image_checksum is not None and self.image_url is None:
            raise invalid("image_checksum needs image_url (the image it is the digest of)")
        return self


def _power(v: Any) -> Any:
    # YAML 1.1 tools read on/off as booleans; take them back
    return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v


class Ssh(StrictModel):
    """Where SSH (and Ansible) reach the host once it has booted."""

    address: str = Field(description="an IP address or a DNS name")
    port: int = Field(22, ge=1, le=65535)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        host = _host(v)
        if host is None:
            raise invalid(f"{v!r} is not an IP address or a DNS name")
        return host


class ExpectedHardware(StrictModel):
    """What the BMC's inventory must show before the host is claimed; a different box is refused, the difference
    spelled out. Fields left out are not checked."""

    gpu_model: str | None = Field(None, description="a catalog GPU (name, PCI id or nvidia-smi name)")
    gpu_count: int | None = Field(None, ge=1, le=64)
    numa_nodes: int | None = Field(None, ge=1, le=64)
    memory_gib: int | None = Field(None, ge=1, le=65536)

    @model_validator(mode="after")
    def _count_needs_model(self) -> ExpectedHardware:
        if self.gpu_count is not None and self.gpu_model is None:
            raise invalid("gpu_count needs gpu_model (which GPUs to count)")
        return self


HostName = Annotated[
    str,
    matching(
        r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?",
        "1-63 lowercase letters, digits and '-', starting and ending with a letter or digit (an inventory host name"
        " and a Kubernetes object name)",
    ),
]


class BaremetalHost(StrictModel):
    """One BMC-managed server: the Pulumi program claims it (system id and/or serial, expected hardware), boots it
    and waits for SSH; Ansible converges it as a member of ``host_group``."""

    name: HostName
    host_group: str = Field(description="one of baremetal.host_groups[].name")
    bmc: Bmc
    system_id: SystemId | None = Field(None, description="the Redfish ComputerSystem id")
    serial: SerialNumber | None = Field(None, description="the system's SerialNumber")
    boot: BootSource = Field(default_factory=BootSource)
    power: Annotated[Literal["on", "off"], BeforeValidator(_power)] = "on"
    ssh: Ssh
    boot_mac: MacAddress | None = Field(None, description="the provisioning NIC's MAC (metal3's bootMACAddress)")
    expected: ExpectedHardware = Field(default_factory=ExpectedHardware)
    wipe_disks_on_delete: bool = False

    @model_validator(mode="after")
    def _identified(self) -> BaremetalHost:
        if self.system_id is None and self.serial is None:
            raise invalid("give system_id (the Redfish ComputerSystem id) or serial (its SerialNumber), or both")
        return self


class Metal3Settings(StrictModel):
    """engine metal3: where the Metal3 BareMetalHost objects go (the management cluster and namespace)."""

    namespace: Namespace
    kubeconfig: SecretKubeconfig


def _diag_level(v: Any) -> int | None:
    from gpufleet.catalog.dcgm import diag_levels

    levels = diag_levels()
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and v in levels):
        return v
    known = ", ".join(f"{n} ({level.name})" for n, level in sorted(levels.items()))
    raise invalid(f"{v!r} is not one of dcgmi diag's run levels: {known}")


class VerifySettings(StrictModel):
    """What ``ansible/playbooks/verify.yml`` requires of the stack's hosts, and which hosts a promotion into the stack
    looks at first (docs/verify.md, docs/promotion.md)."""

    dcgm_diag_level: Annotated[int | None, PlainValidator(_diag_level, json_schema_input_type=int)] = Field(
        None,
        description="dcgmi diag -r LEVEL on each GPU host: 1 quick, 2 medium, 3 long, 4 xlong (default: by stage,"
        " prod 3, staging 2, others 1)",
    )
    canaries: list[HostName] = Field(
        default_factory=list,
        description="inventory hosts whose passing verify (at the stack's level) the canary_verified promotion gate"
        " requires",
    )


class Baremetal(StrictModel):
    inventory: Annotated[
        str,
        matching(r"(?!/)(?!.*\.\.)[A-Za-z0-9_./-]+", "a path relative to the repository root, without '..'"),
    ]
    rollout: Rollout = Field(default_factory=Rollout)
    remediation: Remediation = Field(default_factory=Remediation)
    verify: VerifySettings = Field(default_factory=VerifySettings)
    host_groups: list[HostGroup] = Field(min_length=1)
    engine: Literal["redfish", "metal3"] = Field(
        "redfish", description="redfish: the Pulumi program drives each BMC; metal3: Metal3/Ironic do, on a cluster"
    )
    metal3: Metal3Settings | None = Field(None, validate_default=True, description="engine metal3 only, required then")
    hosts: list[BaremetalHost] = Field(default_factory=list, description="the BMC-managed servers the stack creates")
    converge: bool = Field(
        False, description="pulumi up runs ansible/site.yml on the hosts it creates, once they answer SSH (opt-in)"
    )

    @field_validator("converge")
    @classmethod
    def _converge_needs_hosts(cls, v: bool, info: ValidationInfo) -> bool:
        if v and not info.data.get("hosts"):
            raise invalid("converge runs ansible/site.yml on the hosts pulumi up creates: list them in hosts")
        return v

    @field_validator("metal3")
    @classmethod
    def _metal3_with_its_engine(cls, v: Metal3Settings | None, info: ValidationInfo) -> Metal3Settings | None:
        engine = info.data.get("engine")
        if engine == "metal3" and v is None:
            raise invalid("engine metal3 needs metal3: {namespace: ..., kubeconfig: {secret: KEY}}")
        if engine == "redfish" and v is not None:
            raise invalid("metal3 settings apply only with engine: metal3 (engine redfish drives the BMCs itself)")
        return v

    def host_group(self, name: str) -> HostGroup | None:
        return next((g for g in self.host_groups if g.name == name), None)


# -- teams: who queues GPU work (gpufleet render's Kueue objects, docs/queues.md) -------------------------------

CohortName = Annotated[
    str, matching(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "a Kueue cohort name (DNS-1123 label, 1-63 characters)")
]
DEFAULT_COHORT = "gpufleet"


class Team(StrictModel):
    """A team that runs GPU work in its own namespace: its ClusterQueue gets a share of every GPU pool's and host
    group's quota in proportion to its weight, and a LocalQueue in its namespace points there."""

    name: Annotated[
        str, matching(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "a DNS-1123 label (its ClusterQueue's name), e.g. 'ml-a'")
    ]
    namespace: Namespace | None = Field(None, description="the team's namespace (default: its name)")
    weight: int = Field(1, ge=1, le=1000, description="its share of each flavor's quota, relative to the others'")
    cohort: CohortName = Field(
        DEFAULT_COHORT, description="teams of one cohort borrow each other's unused quota (Kueue cohortName)"
    )

    @property
    def queue_namespace(self) -> str:
        return self.namespace or self.name


# -- the stack -----------------------------------------------------------------------------------------------

Stage = Annotated[str, matching(r"[a-z][a-z0-9]{0,15}", "1-16 lowercase letters and digits, e.g. 'prod'")]
RegionName = Annotated[
    str, matching(r"[a-z][a-z0-9]{0,31}", "lowercase letters and digits, e.g. 'westeurope' or 'local'")
]


class Stack(StrictModel):
    """Everything under the ``gpufleet:`` namespace of one stack file."""

    stage: Stage
    region: RegionName
    release: Release
    aks: Aks | None = None
    baremetal: Baremetal | None = None
    tuning_profiles: dict[Identifier, TuningProfile] = Field(default_factory=dict)
    teams: list[Team] = Field(default_factory=list, description="who queues GPU work: Kueue objects (docs/queues.md)")

    @model_validator(mode="after")
    def _something_to_build(self) -> Stack:
        if self.aks is None and self.baremetal is None:
            raise invalid("a stack describes an AKS cluster (aks), bare-metal hosts (baremetal), or both")
        return self

    @property
    def name(self) -> str:
        return f"{self.stage}-{self.region}"

    def tuning_profile(self, name: str) -> TuningProfile | None:
        if name in self.tuning_profiles:
            return self.tuning_profiles[name]
        return TuningProfile() if name == DEFAULT_TUNING_PROFILE else None
