"""A typed model of exactly the AgentPool properties gpufleet sends to AKS, and the API version each pool needs.

pulumi-azure-native's typed ``containerservice.AgentPool`` speaks API 2025-09-01 only (gpufleet/catalog/aks.yaml).
Fields that only a newer API has (OS SKU Ubuntu2404, the AKS-managed GPU stack ``gpuProfile.nvidia``) go through the
provider's generic ARM resource, ``resources.Resource``, which takes an ``api_version`` and a ``properties`` object
and checks neither. So gpufleet keeps that object typed on its side: :class:`AgentPoolProperties` below holds every
field it sends, each enum a ``Literal`` of the values it uses (the tests hold them to the REST API's published enums,
vendored in tests/fixtures/aks-api/), and :meth:`AgentPoolProperties.to_arm` writes the ARM JSON. The same object
feeds the typed SDK resource for pools the SDK's API can describe, so each value is decided once
(:func:`agent_pool_properties`). Pure: no Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from gpufleet.catalog.aks import AksCatalog, ApiLevel
from gpufleet.plan.model import PoolApi, PoolPlan

# The subsets of the API's enums gpufleet sends (names as in the REST spec's definitions).
AgentPoolMode = Literal["User"]
AgentPoolType = Literal["VirtualMachineScaleSets"]
OSType = Literal["Linux"]
OSSKU = Literal["Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux", "AzureLinux3"]
GPUDriver = Literal["Install", "None"]
GPUInstanceProfile = Literal["MIG1g", "MIG2g", "MIG3g", "MIG4g", "MIG7g"]
ManagementMode = Literal["Unmanaged", "Managed"]
MigStrategy = Literal["None", "Single", "Mixed"]
ScaleSetPriority = Literal["Regular", "Spot"]
ScaleSetEvictionPolicy = Literal["Delete", "Deallocate"]

# Python attribute -> ARM property, where the ARM name is not plain camelCase of the attribute.
_ARM_NAMES = {
    "os_type": "osType",
    "os_sku": "osSKU",
    "enable_node_public_ip": "enableNodePublicIP",
    "linux_os_config": "linuxOSConfig",
    "vnet_subnet_id": "vnetSubnetID",
}
_LEVELS: tuple[ApiLevel, ...] = ("sdk", "stable", "preview")


def _camel(name: str) -> str:
    if name in _ARM_NAMES:
        return _ARM_NAMES[name]
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _arm(value: Any) -> Any:
    """A model value as ARM JSON: dataclasses as objects (None fields left out), tuples as lists."""
    if hasattr(value, "__dataclass_fields__"):
        out = {}
        for f in fields(value):
            item = getattr(value, f.name)
            if item is not None:
                out[_camel(f.name)] = _arm(item)
        return out
    if isinstance(value, tuple | list):
        return [_arm(v) for v in value]
    if isinstance(value, dict):
        return {k: _arm(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class NvidiaGpuProfile:
    """``gpuProfile.nvidia`` (API 2026-05-02-preview): AKS's managed GPU stack and its MIG strategy."""

    management_mode: ManagementMode
    mig_strategy: MigStrategy | None = None


@dataclass(frozen=True)
class GpuProfile:
    driver: GPUDriver
    nvidia: NvidiaGpuProfile | None = None


@dataclass(frozen=True)
class KubeletConfig:
    cpu_manager_policy: Literal["none", "static"]
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"]


@dataclass(frozen=True)
class LinuxOsConfig:
    transparent_huge_page_enabled: Literal["always", "madvise", "never"]


@dataclass(frozen=True)
class UpgradeSettings:
    max_surge: str | None = None
    max_unavailable: str | None = None
    drain_timeout_in_minutes: int | None = None


@dataclass(frozen=True)
class AgentPoolProperties:
    """The ``properties`` of a ``Microsoft.ContainerService/managedClusters/agentPools`` resource, as gpufleet sends
    them (the subnet id, known only once the cluster's network exists, is given to :meth:`to_arm`)."""

    vm_size: str
    orchestrator_version: str
    count: int
    enable_auto_scaling: bool
    os_sku: OSSKU
    gpu_profile: GpuProfile
    node_taints: tuple[str, ...]
    node_labels: dict[str, str]
    upgrade_settings: UpgradeSettings
    enable_node_public_ip: bool
    enable_encryption_at_host: bool
    tags: dict[str, str]
    mode: AgentPoolMode = "User"
    type: AgentPoolType = "VirtualMachineScaleSets"
    os_type: OSType = "Linux"
    scale_set_priority: ScaleSetPriority = "Regular"
    min_count: int | None = None
    max_count: int | None = None
    availability_zones: tuple[str, ...] | None = None
    gpu_instance_profile: GPUInstanceProfile | None = None
    spot_max_price: float | None = None
    scale_set_eviction_policy: ScaleSetEvictionPolicy | None = None
    kubelet_config: KubeletConfig | None = None
    linux_os_config: LinuxOsConfig | None = None

    def to_arm(self, vnet_subnet_id: Any = None) -> dict[str, Any]:
        """The ARM ``properties`` object: camelCase names as the REST API spells them, unset fields left out."""
        out: dict[str, Any] = _arm(self)
        if vnet_subnet_id is not None:
            out[_camel("vnet_subnet_id")] = vnet_subnet_id
        return out


def agent_pool_properties(pool: PoolPlan) -> AgentPoolProperties:
    """The AgentPool properties of an AKS pool's plan: every value the program sends, decided here once."""
    tuning, upgrade, spot = pool.tuning, pool.upgrade, pool.spot_settings
    kubelet = None
    if pool.kubelet_config:
        kubelet = KubeletConfig(tuning.cpu_manager_policy, tuning.topology_manager_policy)
    linux = LinuxOsConfig(tuning.transparent_hugepages) if tuning.transparent_hugepages is not None else None
    nvidia = None
    if pool.gpu_management == "managed":
        strategy = pool.mig.strategy.title() if pool.mig is not None and pool.mig.managed_by == "aks" else None
        nvidia = NvidiaGpuProfile("Managed", strategy)  # type: ignore[arg-type]  # single/mixed -> Single/Mixed
    return AgentPoolProperties(
        vm_size=pool.vm_size,
        orchestrator_version=pool.kubernetes,
        count=pool.nodes.count,  # AKS requires it with autoscaling too
        enable_auto_scaling=pool.autoscaling,
        min_count=pool.nodes.min if pool.autoscaling else None,
        max_count=pool.nodes.max if pool.autoscaling else None,
        os_sku=pool.os_sku,  # type: ignore[arg-type]  # the spec's GpuOsSku, the same five values
        availability_zones=pool.zones or None,
        node_taints=pool.taints,
        node_labels=dict(pool.labels),
        gpu_profile=GpuProfile(pool.aks_gpu_driver, nvidia),  # type: ignore[arg-type]
        gpu_instance_profile=pool.mig.gpu_instance_profile if pool.mig else None,  # type: ignore[arg-type]
        scale_set_priority="Spot" if spot else "Regular",
        spot_max_price=spot.max_price if spot else None,
        scale_set_eviction_policy=spot.eviction_policy if spot else None,
        kubelet_config=kubelet,
        linux_os_config=linux,
        upgrade_settings=UpgradeSettings(upgrade.max_surge, upgrade.max_unavailable, upgrade.drain_timeout_minutes),
        enable_node_public_ip=pool.node_public_ip,
        enable_encryption_at_host=pool.encryption_at_host,
        tags=dict(pool.tags),
    )


def _present(arm: dict[str, Any], path: str) -> bool:
    node: Any = arm
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def pool_api(properties: AgentPoolProperties, aks: AksCatalog) -> PoolApi:
    """The API level the properties need: the newest of their OS SKU's and of each field only a newer API has
    (``aks.yaml``), with what needs it."""
    needs: list[tuple[ApiLevel, str]] = []
    sku = aks.os_sku(properties.os_sku)
    if sku.api != "sdk":
        needs.append((sku.api, f"osSKU {sku.name}"))
    arm = properties.to_arm()
    needs += [(f.api, f.path) for f in aks.fields if _present(arm, f.path)]
    level = max((lvl for lvl, _ in needs), key=_LEVELS.index, default="sdk")
    return PoolApi(level, aks.api.version(level), tuple(what for _, what in needs))
