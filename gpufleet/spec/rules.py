"""Rules that need the hardware catalog or more than one object of a stack.

Each rule yields :class:`~gpufleet.common.diagnostics.Finding` s (a key path under ``gpufleet:`` and a message that
names what would be valid); the loader places them at ``file:line``. Rules are pure: the catalog and today's
date come in through :class:`Context`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from gpufleet import mig
from gpufleet.azure.aks import aks_pool_name
from gpufleet.azure.baseline import RULE_NAMES
from gpufleet.catalog import OS_IMAGE_NAMES, Catalog, Gpu, VmSize
from gpufleet.catalog.aks import AksCatalog, load_aks_catalog
from gpufleet.catalog.releases import (
    COMPONENT_PINS,
    GpuOperatorRelease,
    ReleaseTable,
    kube_at_least,
    load_releases,
    same_version,
)
from gpufleet.common.diagnostics import Finding, Path, did_you_mean, format_path
from gpufleet.kube.labels import (
    AMD_GPU_OPERATOR_LABEL,
    DCM_PROFILE_LABEL,
    DEPLOY_DEVICE_PLUGIN_LABEL,
    DEPLOY_DRIVER_LABEL,
    DEPLOY_OPERANDS_LABEL,
    DEVICE_PLUGIN_CONFIG_LABEL,
    DRA_OPERAND_LABELS,
    GPU_PRESENT_LABEL,
    MIG_CONFIG_LABEL,
)
from gpufleet.mig.amd_partitions import layout_problems, no_partitions_reason
from gpufleet.spec import owners
from gpufleet.spec.models import (
    Advertiser,
    AksManagedMig,
    AmdPartitions,
    Baremetal,
    BaremetalHost,
    GpuPool,
    HostGroup,
    MigLayout,
    OperatorManagedMig,
    Release,
    Remediation,
    SecretRef,
    Stack,
    SystemPool,
    Team,
    TuningProfile,
    Vgpu,
)
from gpufleet.spec.owners import conflicts as owner_conflicts
from gpufleet.spec.owners import host_group_claims, pool_claims

# AKS Linux node pool names: "only lowercase alphanumeric characters and must begin with a lowercase letter...
# for Linux node pools, the length must be between 1-12 characters" (learn.microsoft.com/azure/aks/create-node-pools).
AKS_POOL_NAME = re.compile(r"[a-z][a-z0-9]{0,11}")
AKS_POOL_NAME_RULE = "1-12 lowercase letters and digits, starting with a letter"
# AKS's limits per cluster (learn.microsoft.com/azure/aks/quotas-skus-regions, "Service quotas and limits"): 100 node
# pools, 5,000 nodes across all node pools (Virtual Machine Scale Sets pools, Standard load balancer); 1,000 nodes
# per pool is in the models (count, autoscaling).
AKS_MAX_NODE_POOLS = 100
AKS_MAX_NODES = 5000
# "System node pools require a VM SKU of at least 2 vCPUs and 4 GB memory. But burstable-VM (B series) isn't
# recommended." (learn.microsoft.com/azure/aks/use-system-pools)
SYSTEM_POOL_MIN_VCPUS = 2
SYSTEM_POOL_MIN_MEMORY_GIB = 4
SYSTEM_POOL: Path = ("aks", "cluster", "system_pool")
WAIVERS: Path = ("aks", "cluster", "security", "waivers")

# Labels gpufleet derives itself (from mig / sharing / driver); a stack may not set them by hand.
DERIVED_LABELS = {
    MIG_CONFIG_LABEL: "mig.config_name",
    DEVICE_PLUGIN_CONFIG_LABEL: "sharing",
    DEPLOY_DRIVER_LABEL: "driver",
    DEPLOY_OPERANDS_LABEL: "gpu_management",
    GPU_PRESENT_LABEL: "GPU software (the device plugin chart runs where it is true)",
    DEPLOY_DEVICE_PLUGIN_LABEL: "advertiser (none keeps the device plugin off)",
    **dict.fromkeys(DRA_OPERAND_LABELS, "advertiser (none keeps the DRA driver off)"),
    AMD_GPU_OPERATOR_LABEL: "GPU software (the AMD GPU Operator serves the AMD pools whose advertiser is not none)",
    DCM_PROFILE_LABEL: "amd_partitions.profile",
}
AKS_RESERVED_LABEL_PREFIXES = ("kubernetes.azure.com/", "kubernetes.io/", "k8s.io/")


@dataclass(frozen=True)
class Context:
    catalog: Catalog
    today: _dt.date
    region: str | None = None  # the stack's region (AKS pools: the size must be offered there)
    # the stack's Kubernetes version and aks.preview (None: not known, on a partial stack: their rules are skipped)
    kubernetes: str | None = None
    preview: bool | None = None
    aks: AksCatalog = dataclasses.field(default_factory=load_aks_catalog)
    # The stack file's config keys holding a `secure:` value, and those holding a plain one; None when the stack
    # comes without its file (a {secret: KEY} reference is then not checked against it).
    secure_keys: frozenset[str] | None = None
    plain_keys: frozenset[str] = frozenset()
    releases: ReleaseTable = dataclasses.field(default_factory=load_releases)  # which versions go together


# -- MIG layouts (shared by AKS pools and bare-metal host groups) ---------------------------------------------


def check_mig_layout(
    gpu: Gpu, layout: MigLayout, gpus_per_host: int | None, path: Path, catalog: Catalog
) -> Iterator[Finding]:
    """Each device group is a layout that fits one GPU of this model (the MIG planner's exact check); each
    profile is first checked on its own so every bad profile is named at its key."""
    for gi, group in enumerate(layout.devices):
        gpath = (*path, "devices", gi)
        if gpus_per_host is not None and group.gpus != "all":
            too_high = [i for i in group.gpus if i >= gpus_per_host]
            if too_high:
                yield Finding(
                    (*gpath, "gpus"),
                    f"GPU index {too_high[0]} does not exist: a host has {gpus_per_host} GPU(s),"
                    f" indices 0-{gpus_per_host - 1}",
                )
        owners = {name: catalog.mig_profile_owners(name) for name in group.profiles}
        alone = [mig.check(gpu, {name: count}, owners) for name, count in group.profiles.items()]
        for name, result in zip(group.profiles, alone, strict=True):
            if not result.fits:
                yield Finding((*gpath, "profiles", name), result.reason or "does not fit")
        if all(r.fits for r in alone):
            together = mig.check(gpu, group.profiles)
            if not together.fits:
                yield Finding((*gpath, "profiles"), together.reason or "does not fit")


# -- AKS pools -----------------------------------------------------------------------------------------------


def _usable_sizes(ctx: Context, want: Iterable[str] = ()) -> list[str]:
    """Sizes a pool could use today (AKS-supported, not retired), preferring ``want``."""
    ok = [s.name for s in ctx.catalog.vm_sizes if s.aks_supported and not s.retired(ctx.today)]
    preferred = [w for w in want if w in ok]
    return preferred or ok


def check_pool_size(pool: GpuPool, path: Path, ctx: Context) -> tuple[VmSize | None, list[Finding]]:
    """Resolve the pool's VM size; findings when it is unknown, retired, not for AKS, or not NVIDIA."""
    spath = (*path, "vm_size")
    size = ctx.catalog.vm_size(pool.vm_size)
    if size is None:
        names = [s.name for s in ctx.catalog.vm_sizes]
        return None, [Finding(spath, f"unknown GPU VM size {pool.vm_size!r}; {did_you_mean(pool.vm_size, names)}")]
    findings = []
    if size.name != pool.vm_size:
        findings.append(Finding(spath, f"write the VM size as Azure spells it: {size.name!r}"))
    if size.retired(ctx.today):
        choices = ", ".join(_usable_sizes(ctx, size.replacements))
        findings.append(
            Finding(spath, f"{size.name!r} was retired on {size.retired_on.isoformat()}; choose one of {choices}")
        )
    elif not size.aks_supported:
        choices = ", ".join(_usable_sizes(ctx, size.replacements))
        findings.append(
            Finding(spath, f"{size.name!r} ({size.series}) is not supported by AKS; choose one of {choices}")
        )
    if ctx.region is not None and size.offered_in(ctx.region) is False:
        findings.append(Finding(spath, _not_offered(size, ctx.region, ctx)))
    gpu = ctx.catalog.gpu(size.gpu)
    if gpu.vendor == "amd" and gpu.partitions is None:
        amd = sorted(
            s.name
            for s in ctx.catalog.vm_sizes
            if s.aks_supported and ctx.catalog.gpu(s.gpu).partitions is not None and not s.retired(ctx.today)
        )
        findings.append(
            Finding(
                spath,
                f"{size.name!r} has {gpu.name} GPUs (AMD, not Instinct); gpufleet's AMD GPU software on AKS is the AMD"
                f" GPU Operator for AMD Instinct GPUs: choose {', '.join(amd)} or an NVIDIA size",
            )
        )
    return size, findings


def _not_offered(size: VmSize, region: str, ctx: Context) -> str:
    """Why a size cannot be used in ``region``: where it is offered, and the sizes with its GPU offered there."""
    where = ", ".join(size.regions or ()) or "no catalog region"
    same_gpu = [
        s.name
        for s in ctx.catalog.vm_sizes
        if s.gpu == size.gpu and s.offered_in(region) and s.aks_supported and not s.retired(ctx.today)
    ]
    there = (
        f"sizes with {size.gpu} offered in {region}: {', '.join(same_gpu)}"
        if same_gpu
        else f"no catalog size with {size.gpu} is offered in {region}"
    )
    return f"{size.name!r} is not offered in {region}; regions offering it: {where}; {there}"


def _images(sku: str, ctx: Context) -> set[str]:
    """The node OS images ``sku`` gives on the stack's Kubernetes version (all of its images when not known)."""
    facts = ctx.aks.os_sku(sku)
    if ctx.kubernetes is None:
        return {r.image for r in facts.images}
    image = facts.image(ctx.kubernetes)
    return {image} if image is not None else set()


def check_os_sku(pool: GpuPool, size: VmSize, gpu: Gpu, path: Path, ctx: Context) -> Iterator[Finding]:
    """The pool's os_sku is supported on the stack's Kubernetes version and gives a node OS image AKS supports on the
    size (aks.yaml: which image each SKU gives; azure_vm_sizes.yaml: the size's images)."""
    facts = ctx.aks.os_sku(pool.os_sku)
    spath = (*path, "os_sku")
    if ctx.kubernetes is not None and ctx.kubernetes not in facts.kubernetes:
        valid = [s.name for s in ctx.aks.os_skus if _images(s.name, ctx) & set(size.os_skus)]
        yield Finding(
            spath,
            f"os_sku {facts.name} is supported on {facts.kubernetes}, not on Kubernetes {ctx.kubernetes};"
            f" valid here: {', '.join(valid) or 'none for this size'}",
        )
        return
    if not size.os_skus:
        return  # not an AKS size: check_pool_size said so
    images = _images(pool.os_sku, ctx)
    if images & set(size.os_skus):
        return
    valid = [s.name for s in ctx.aks.os_skus if _images(s.name, ctx) & set(size.os_skus)]
    wanted = " or ".join(OS_IMAGE_NAMES[i] for i in sorted(images))
    on = f" on Kubernetes {ctx.kubernetes}" if ctx.kubernetes else ""
    yield Finding(
        spath,
        f"{size.name} ({gpu.name}) is not available on {wanted} in AKS; it supports"
        f" {', '.join(OS_IMAGE_NAMES[i] for i in size.os_skus)}: use os_sku {' or '.join(valid)}{on}",
    )


def check_gpu_management(pool: GpuPool, size: VmSize, gpu: Gpu, path: Path, ctx: Context) -> Iterator[Finding]:
    """AKS's managed GPU stack (preview): only on NVIDIA sizes AKS installs the driver on, and without the cluster
    autoscaler (learn.microsoft.com/azure/aks/aks-managed-gpu-nodes, Limitations)."""
    if pool.gpu_management != "managed":
        return
    if not size.aks_managed_gpu:
        sizes = [s.name for s in ctx.catalog.vm_sizes if s.aks_managed_gpu and not s.retired(ctx.today)]
        yield Finding(
            (*path, "gpu_management"),
            f"AKS runs its managed GPU stack only on NVIDIA sizes it installs the driver on, not on {size.name}"
            f" ({gpu.name}); choose one of {', '.join(sizes)}, or gpu_management: unmanaged",
        )
    if pool.autoscaling is not None:
        yield Finding(
            (*path, "autoscaling"),
            "AKS-managed GPU pools take no cluster autoscaler while the feature is in preview: remove autoscaling"
            " (count sets the nodes), or use gpu_management: unmanaged",
        )


# AKS's confidential GPU pools (learn.microsoft.com/azure/aks/use-confidential-gpus; the catalog's [aks-cgpu]): AKS's
# driver install skipped, the GPU Operator installing NVIDIA's signed driver, the whole GPU on each node (no MIG), no
# node auto-provisioning.
CONFIDENTIAL_GPUS = "learn.microsoft.com/azure/aks/use-confidential-gpus"


def check_confidential_gpu(pool: GpuPool, size: VmSize, gpu: Gpu, path: Path, ctx: Context) -> Iterator[Finding]:
    """A size AKS documents only with its driver install skipped (``aks_skip_gpu_driver``) needs ``driver:
    operator``; a confidential GPU pool takes no MIG and is no NAP pool."""
    what = f"{size.name} is a confidential GPU size ({size.series})" if size.confidential else size.name
    if size.aks_skip_gpu_driver and pool.driver == "aks" and pool.gpu_management == "unmanaged":
        said = "driver: aks" if "driver" in pool.model_fields_set else "driver is aks by default, which"
        yield Finding(
            (*path, "driver"),
            f"{what}: AKS runs its pools with AKS's driver install skipped and the GPU Operator installing NVIDIA's"
            f" signed driver ({CONFIDENTIAL_GPUS}); {said} would have AKS install its own (gpuProfile.driver"
            " Install): set driver: operator (gpuProfile.driver None, the GPU Operator owns the driver)",
        )
    if not (size.confidential and size.aks_supported):
        return
    if pool.mig is not None:
        sizes = sorted(s.name for s in ctx.catalog.vm_sizes if s.aks_mig and s.gpu == gpu.name)
        other = f"; MIG on {gpu.name}: {', '.join(sizes)} (not confidential)" if sizes else ""
        yield Finding(
            (*path, "mig"),
            f"{what}: AKS gives a confidential GPU pool's nodes the whole GPU, with no MIG ({CONFIDENTIAL_GPUS}: one"
            f" nvidia.com/gpu per GPU, no MIG profile), so neither AKS nor the GPU Operator may partition it: remove"
            f" mig{other}",
        )
    if pool.kind == "nap":
        yield Finding(
            (*path, "kind"),
            f"{what}: AKS's confidential GPUs do not work with node auto-provisioning ({CONFIDENTIAL_GPUS},"
            " Limitations): use kind agentpool",
        )


def _preview_keys(pool: GpuPool) -> list[tuple[tuple[str, ...], str]]:
    """The pool's keys that make gpufleet send an AgentPool field, and the field (its path under properties)."""
    keys: list[tuple[tuple[str, ...], str]] = []
    if pool.gpu_management == "managed":
        keys.append((("gpu_management",), "gpuProfile.nvidia.managementMode"))
        if isinstance(pool.mig, AksManagedMig):
            keys.append((("mig", "strategy") if pool.mig.strategy else ("mig",), "gpuProfile.nvidia.migStrategy"))
    return keys


def check_preview(pool: GpuPool, path: Path, ctx: Context) -> Iterator[Finding]:
    """A field only a preview AKS API has needs ``aks.preview: true`` (the stack says it accepts preview terms)."""
    if ctx.preview is not False:
        return
    api = ctx.aks.api
    sku = ctx.aks.os_sku(pool.os_sku)
    fields = [(("os_sku",), f"osSKU {sku.name}")] if sku.api == "preview" else []
    fields += [(key, f) for key, f in _preview_keys(pool) if ctx.aks.field(f).api == "preview"]
    for key, what in fields:
        yield Finding(
            (*path, *key),
            f"{what} exists only in AKS preview API {api.preview} (none of {api.sdk} and {api.stable} has it); set"
            " aks.preview: true to use preview fields (gpufleet plan lists them)",
        )


# What a Karpenter NodePool + AKSNodeClass can say of a pool (gpufleet.kube.nap): the keys of an AKS node pool it has no
# counterpart for, and why.
NAP_REFUSED = {
    "count": "NAP creates nodes for pending pods, up to max_nodes; a nap pool has no count",
    "autoscaling": "NAP scales the pool itself, from none up to max_nodes",
    "scale_to_zero": "a nap pool has no nodes until pods need them",
    "upgrade": "NAP replaces nodes by its disruption rules, not by surge settings",
}
# AKSNodeClass imageFamily (karpenter.azure.com/v1beta1): Ubuntu, Ubuntu2204, Ubuntu2404, AzureLinux
NAP_IMAGE_FAMILIES = ("Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux")


def check_pool_kind(pool: GpuPool, path: Path) -> Iterator[Finding]:
    """An AKS node pool needs ``count``; a nap pool needs ``max_nodes`` and none of the keys only a node pool has."""
    if pool.kind == "agentpool":
        if pool.count is None:
            yield Finding(
                (*path, "count"), "missing required key 'count': nodes now (AKS requires it with autoscaling)"
            )
        if pool.max_nodes is not None:
            yield Finding((*path, "max_nodes"), "max_nodes applies to kind nap; an AKS node pool uses autoscaling.max")
        return
    set_keys = pool.model_fields_set
    for key, why in NAP_REFUSED.items():
        if key in set_keys:
            yield Finding((*path, key), f"{key} does not apply to kind nap: {why}")
    if pool.max_nodes is None:
        yield Finding((*path, "max_nodes"), "missing required key 'max_nodes': the most nodes NAP creates for the pool")
    if isinstance(pool.mig, AksManagedMig):
        yield Finding(
            (*path, "mig"),
            "AKS MIG (gpuInstanceProfile) is a node pool field a NAP NodePool cannot set: use mig.managed_by: operator,"
            " or kind agentpool",
        )
    if pool.os_sku not in NAP_IMAGE_FAMILIES:
        yield Finding(
            (*path, "os_sku"),
            f"an AKSNodeClass has no image family {pool.os_sku}; use one of {', '.join(NAP_IMAGE_FAMILIES)}"
            " (AzureLinux is Azure Linux 3 from Kubernetes 1.32)",
        )


def check_nap_cluster(stack: Stack) -> Iterator[Finding]:
    """Node auto-provisioning is cluster-wide: with it on, AKS creates no autoscaling node pools ("Fixed size Node
    Pools can still be created, but autoscaling Node Pools cannot be", API NodeProvisioningMode Auto), and NAP does
    not run with the Calico network policy (learn.microsoft.com/azure/aks/node-auto-provisioning-networking)."""
    assert stack.aks is not None
    nap = [p.name for p in stack.aks.gpu_pools if p.kind == "nap"]
    if not nap:
        return
    for i, pool in enumerate(stack.aks.gpu_pools):
        if pool.kind == "agentpool" and pool.autoscaling is not None:
            yield Finding(
                ("aks", "gpu_pools", i, "autoscaling"),
                f"with node auto-provisioning on (pool {nap[0]!r}, kind nap) AKS creates no autoscaling node pools:"
                " give this pool a fixed count, or make it kind nap",
            )
    if stack.aks.cluster.network.policy == "calico":
        yield Finding(
            ("aks", "cluster", "network", "policy"),
            f"node auto-provisioning (pool {nap[0]!r}) does not support the Calico network policy; use cilium or azure",
        )


def check_pool_scaling(pool: GpuPool, path: Path) -> Iterator[Finding]:
    """Autoscaling: AKS still requires ``count``, and it must sit within [min, max]; min 0 only when meant."""
    scaling = pool.autoscaling
    if pool.count is None:
        return  # a nap pool, or a pool without count: check_pool_kind said which
    if scaling is None:
        if pool.scale_to_zero:
            yield Finding((*path, "scale_to_zero"), "scale_to_zero needs autoscaling (min: 0, max: N)")
    else:
        if scaling.min > scaling.max:
            yield Finding((*path, "autoscaling", "min"), f"min {scaling.min} is above max {scaling.max}")
        elif not scaling.min <= pool.count <= scaling.max:
            yield Finding(
                (*path, "count"),
                f"count {pool.count} must be within autoscaling min {scaling.min} and max {scaling.max}",
            )
        if scaling.min == 0 and not pool.scale_to_zero:
            yield Finding(
                (*path, "autoscaling", "min"),
                "min 0 lets the pool scale to zero nodes; set min >= 1, or scale_to_zero: true to mean it",
            )


def check_pool(pool: GpuPool, path: Path, ctx: Context) -> Iterator[Finding]:
    """Every rule that concerns one GPU pool on its own."""
    if not AKS_POOL_NAME.fullmatch(pool.name):
        yield Finding((*path, "name"), f"{pool.name!r} is not an AKS Linux pool name: {AKS_POOL_NAME_RULE}")

    size, size_findings = check_pool_size(pool, path, ctx)
    yield from size_findings
    yield from check_pool_kind(pool, path)
    yield from check_preview(pool, path, ctx)

    yield from check_pool_scaling(pool, path)
    yield from owner_conflicts(pool_claims(pool, path))  # one driver, toolkit, advertiser and MIG owner per node

    # Upgrades: AKS gives spot pools no surge nodes.
    if pool.spot is not None and pool.upgrade is not None and pool.upgrade.max_surge is not None:
        yield Finding(
            (*path, "upgrade", "max_surge"),
            "spot pools get no surge nodes on upgrade; use max_unavailable instead",
        )

    # Labels gpufleet derives, and prefixes AKS reserves.
    for key in pool.labels:
        if key in DERIVED_LABELS:
            yield Finding(
                (*path, "labels", key),
                f"{key} is set by gpufleet from the pool's {DERIVED_LABELS[key]}; remove the label",
            )
        elif key.startswith(AKS_RESERVED_LABEL_PREFIXES):
            yield Finding((*path, "labels", key), f"{key!r} uses a prefix AKS reserves for its own labels")

    # Sharing and MIG.
    if pool.mig is not None and pool.sharing.mode == "mps":
        yield Finding((*path, "sharing", "mode"), "MPS cannot be combined with MIG; use time-slicing or no sharing")

    if size is None:
        return
    gpu = ctx.catalog.gpu(size.gpu)

    yield from check_os_sku(pool, size, gpu, path, ctx)
    if gpu.vendor == "amd":
        yield from check_amd_pool(pool, size, gpu, path)
    elif pool.amd_partitions is not None:
        yield Finding((*path, "amd_partitions"), no_partitions_reason(gpu))
    yield from check_gpu_management(pool, size, gpu, path, ctx)
    yield from check_confidential_gpu(pool, size, gpu, path, ctx)
    yield from check_pool_advertiser(pool, gpu, path)

    if pool.mig is not None and not (size.confidential and size.aks_supported):  # check_confidential_gpu said why
        mpath = (*path, "mig")
        strategy = isinstance(pool.mig, AksManagedMig) and pool.mig.strategy is not None
        if not size.aks_mig and strategy:
            sizes = sorted(s.name for s in ctx.catalog.vm_sizes if s.aks_mig and not s.retired(ctx.today))
            yield Finding(
                (*mpath, "strategy"),
                f"a MIG strategy needs a MIG-capable size; {size.name} ({gpu.name}) has no AKS MIG; AKS supports"
                f" MIG on {', '.join(sizes)}",
            )
        elif gpu.mig is None:
            yield Finding(mpath, ctx.catalog.no_mig_reason(gpu))
        elif not size.aks_mig:
            sizes = sorted(s.name for s in ctx.catalog.vm_sizes if s.aks_mig and not s.retired(ctx.today))
            yield Finding(mpath, f"AKS supports MIG only on these sizes: {', '.join(sizes)}")
        elif isinstance(pool.mig, AksManagedMig):
            compute = int(pool.mig.profile.removeprefix("MIG").removesuffix("g"))
            if gpu.mig.base_profile(compute) is None:
                valid = sorted({f"MIG{p.compute_slices}g" for p in gpu.mig.profiles})
                yield Finding((*mpath, "profile"), f"{gpu.name} has no {compute}g profile; valid: {', '.join(valid)}")
        else:
            yield from check_mig_layout(gpu, pool.mig, size.whole_gpus or None, mpath, ctx.catalog)

    if pool.tuning.hugepages_2m:
        # AKS custom node configuration (linuxOSConfig.sysctls) has no vm.nr_hugepages: its vm.* sysctls are
        # vm.max_map_count, vm.swappiness and vm.vfs_cache_pressure (pulumi_azure_native SysctlConfigArgs)
        yield Finding(
            (*path, "tuning", "hugepages_2m"),
            "AKS cannot reserve hugepages: its custom node configuration has no vm.nr_hugepages sysctl (its vm.*"
            " sysctls are vm.max_map_count, vm.swappiness, vm.vfs_cache_pressure); remove the key, or reserve"
            " hugepages on bare-metal hosts (tuning_profiles.<name>.hugepages_2m_per_node)",
        )


# -- the system pool and the cluster's limits -----------------------------------------------------------------


def _system_sizes(ctx: Context) -> list[str]:
    """The catalog's sizes a system pool may use."""
    return [
        s.name
        for s in ctx.catalog.system_vm_sizes
        if not s.burstable and s.vcpus >= SYSTEM_POOL_MIN_VCPUS and s.memory_gib >= SYSTEM_POOL_MIN_MEMORY_GIB
    ]


def check_system_size(name: str, path: Path, ctx: Context) -> Iterator[Finding]:
    """The system pool's VM size: a general-purpose size of the catalog that AKS accepts for a system pool."""
    size = ctx.catalog.system_vm_size(name)
    choices = _system_sizes(ctx)
    if size is None:
        gpu_size = ctx.catalog.vm_size(name)
        if gpu_size is not None:
            yield Finding(
                path,
                f"{gpu_size.name!r} is a GPU size ({gpu_size.gpu}); the system pool runs only cluster add-ons (it is"
                f" tainted CriticalAddonsOnly), so its GPUs would idle: choose a general-purpose size;"
                f" {did_you_mean('', choices)}",
            )
        else:
            yield Finding(path, f"unknown system pool VM size {name!r}; {did_you_mean(name, choices)}")
        return
    if size.name != name:
        yield Finding(path, f"write the VM size as Azure spells it: {size.name!r}")
    if size.burstable:
        yield Finding(
            path,
            f"{size.name!r} is burstable ({size.series}): AKS advises against it for system pools (add-ons run out"
            f" of CPU credits); {did_you_mean(name, choices)}",
        )
    elif size.vcpus < SYSTEM_POOL_MIN_VCPUS or size.memory_gib < SYSTEM_POOL_MIN_MEMORY_GIB:
        yield Finding(
            path,
            f"{size.name!r} ({size.vcpus} vCPU, {size.memory_gib:g} GiB) is below AKS's minimum for a system pool"
            f" ({SYSTEM_POOL_MIN_VCPUS} vCPUs, {SYSTEM_POOL_MIN_MEMORY_GIB} GiB); {did_you_mean(name, choices)}",
        )


def check_system_pool(system: SystemPool, ctx: Context) -> Iterator[Finding]:
    """The system pool's name (an AKS Linux pool name) and VM size."""
    if not AKS_POOL_NAME.fullmatch(system.name):
        yield Finding((*SYSTEM_POOL, "name"), f"{system.name!r} is not an AKS Linux pool name: {AKS_POOL_NAME_RULE}")
    yield from check_system_size(system.vm_size, (*SYSTEM_POOL, "vm_size"), ctx)


def check_cluster_limits(pools: Sequence[GpuPool | None], system: SystemPool | None) -> Iterator[Finding]:
    """At most 100 node pools and 5,000 nodes per cluster (the system pool included)."""
    node_pools = len(pools) + 1
    if node_pools > AKS_MAX_NODE_POOLS:
        yield Finding(
            ("aks", "gpu_pools"),
            f"{len(pools)} GPU pools and the system pool are {node_pools} node pools; AKS allows at most"
            f" {AKS_MAX_NODE_POOLS} per cluster",
        )
    most = sum(p.node_range[2] for p in pools if p is not None)
    most += system.count if system is not None else 0
    if most > AKS_MAX_NODES:
        yield Finding(
            ("aks", "gpu_pools"),
            f"the pools can grow to {most} nodes (the system pool's count and each GPU pool's autoscaling max, else"
            f" its count); AKS allows at most {AKS_MAX_NODES} per cluster",
        )


# -- GPU advertising: the device plugin, the NVIDIA DRA driver, or none (docs/kubernetes.md) -----------------------

# Dynamic Resource Allocation's resource.k8s.io/v1 API is GA and served by default from Kubernetes 1.34 (Kubernetes
# v1.34 release blog, "DRA graduates to stable", 2025-08-27), and the NVIDIA DRA driver needs it: "Kubernetes v1.34.2
# or later" (kubernetes-sigs/dra-driver-nvidia-gpu site/content/docs/prerequisites.md at 95932046, 2026-08-07).
DRA_MIN_KUBERNETES = (1, 34)
# One GPU Operator, one custom resource: the v26.7.0 chart fails when clusterPolicy.deployCR and gpuCluster.deployCR
# are both true (deployments/gpu-operator/templates/validations.yaml:1-3), the operator refuses a GPUCluster next to a
# ClusterPolicy and the reverse (controllers/gpucluster_controller.go:165-167, clusterpolicy_controller.go:134-140
# at tag v26.7.0), and NVIDIA's "DRA Driver for NVIDIA GPUs" page says "A cluster can have either a GPUCluster resource
# for DRA or a ClusterPolicy resource for the Device Plugin, but not both".
ONE_OPERATOR_CR = (
    "one cluster's GPU Operator runs a ClusterPolicy (device plugin) or a GPUCluster (DRA driver), never both"
    " (GPU Operator v26.7.0 refuses the second one)"
)


def check_dra_gpu(gpu: Gpu, path: Path) -> Iterator[Finding]:
    """gpufleet's claim templates select a DRA pool's GPUs by the product name the driver publishes: the catalog must
    know it."""
    if not gpu.product_names:
        yield Finding(
            path,
            f"the catalog has no product name (as nvidia-smi prints it) for {gpu.name}, so no ResourceClaimTemplate"
            " can select its GPUs; use advertiser device-plugin, or add the name to gpufleet/catalog/gpus.yaml",
        )


def check_pool_advertiser(pool: GpuPool, gpu: Gpu, path: Path) -> Iterator[Finding]:
    """What a pool's advertiser excludes: the device plugin's sharing configs (dra, none); dra needs the GPU's
    product name."""
    if pool.advertiser == "device-plugin":
        return
    if pool.sharing.mode != "none":
        how = (
            "with DRA, pods share a GPU through their claim (the DRA driver's GpuConfig sharing: TimeSlicing or MPS),"
            " not per node"
            if pool.advertiser == "dra"
            else "no pod gets these GPUs through Kubernetes"
        )
        yield Finding(
            (*path, "sharing", "mode"),
            f"sharing configures the device plugin, which advertiser {pool.advertiser} does not run: {how}; remove"
            " sharing, or use advertiser device-plugin",
        )
    if pool.advertiser == "dra" and gpu.vendor == "nvidia":  # AMD's DRA driver publishes its own attributes
        yield from check_dra_gpu(gpu, (*path, "advertiser"))


def check_advertisers_mixed(items: Sequence[tuple[Path, str, Advertiser]], what: str) -> Iterator[Finding]:
    """The GPU targets of one cluster (``items``: each one's path, name and advertiser; ``what``: "pool" or "host
    group") do not mix the device plugin and DRA: each DRA one is an error naming the first device-plugin one."""
    plugin = next(((p, n) for p, n, a in items if a == "device-plugin"), None)
    if plugin is None:
        return
    for path, name, advertiser in items:
        if advertiser == "dra":
            yield Finding(
                (*path, "advertiser"),
                f"{what} {name!r} has advertiser dra and {what} {plugin[1]!r} has device-plugin"
                f" ({format_path((*plugin[0], 'advertiser'))}, the default): {ONE_OPERATOR_CR}; give the cluster's"
                f" {what}s one advertiser (none goes with either), or move the DRA {what}s to a stack of their own"
                " (docs/kubernetes.md)",
            )


def check_gpu_cluster_mig(pools: Sequence[GpuPool | None]) -> Iterator[Finding]:
    """A cluster with a DRA pool runs a GPUCluster, which has no MIG manager: no pool's layout can be the
    operator's."""
    dra = next((p.name for p in pools if p is not None and p.advertiser == "dra"), None)
    if dra is None:
        return
    for i, pool in enumerate(pools):
        if pool is not None and isinstance(pool.mig, OperatorManagedMig):
            yield Finding(
                ("aks", "gpu_pools", i, "mig", "managed_by"),
                f"the GPU Operator's MIG manager belongs to its ClusterPolicy, and pool {dra!r} has advertiser dra, so"
                " the cluster's operator runs a GPUCluster, which has none: let AKS partition the GPUs (mig:"
                " {managed_by: aks, profile: MIG1g...}), whose instances the DRA driver advertises",
            )


def check_dra_kubernetes(stack: Stack, ctx: Context) -> Iterator[Finding]:
    """DRA needs Kubernetes 1.34 or later for NVIDIA's DRA driver, the AMD GPU Operator's floor (1.32 for v1.5.1) for
    AMD's: an error at each DRA pool or host group of an older release."""
    version = tuple(int(x) for x in stack.release.kubernetes.split(".")[:2])
    amd_op = ctx.releases.find_amd_gpu_operator(stack.release.amd_gpu_operator or "")
    floors = {
        "nvidia": (DRA_MIN_KUBERNETES, "resource.k8s.io/v1, which the NVIDIA DRA driver uses"),
        "amd": (
            tuple(int(x) for x in (amd_op.dra_min_kubernetes if amd_op else "1.32").split(".")[:2]),
            "the AMD GPU Operator's DRA driver",
        ),
    }
    for path, target in _gpu_targets(stack, ctx):
        floor, why = floors[target.vendor]
        if target.advertiser == "dra" and version < floor:
            need = ".".join(map(str, floor))
            yield Finding(
                (*path, "advertiser"),
                f"DRA needs Kubernetes {need} or later ({why}), and release.kubernetes is"
                f" {stack.release.kubernetes!r}; raise it to {need}, or use advertiser device-plugin",
            )


@dataclass(frozen=True)
class GpuTarget:
    """A pool or host group with GPUs, and its GPUs' vendor (the catalog's)."""

    name: str
    vendor: str
    advertiser: Advertiser
    amd_partitions: AmdPartitions | None


def _gpu_targets(stack: Stack, ctx: Context) -> list[tuple[Path, GpuTarget]]:
    """Every pool and host group of the stack whose GPU the catalog knows, with its path; an AMD GPU other than an
    Instinct one is left out (refused on AKS by check_pool_size; no AMD software of gpufleet's serves it)."""
    out: list[tuple[Path, GpuTarget]] = []
    gpus = (
        [(("aks", "gpu_pools", i), p, ctx.catalog.vm_size(p.vm_size)) for i, p in enumerate(stack.aks.gpu_pools)]
        if stack.aks
        else []
    )
    for path, pool, size in gpus:
        if size is not None and _served(gpu := ctx.catalog.gpu(size.gpu)):
            out.append((path, GpuTarget(pool.name, gpu.vendor, pool.advertiser, pool.amd_partitions)))
    for i, group in enumerate(stack.baremetal.host_groups if stack.baremetal else []):
        if group.gpu_model and (gpu := ctx.catalog.find_gpu(group.gpu_model)) is not None and _served(gpu):
            target = GpuTarget(group.name, gpu.vendor, group.advertiser, group.amd_partitions)
            out.append((("baremetal", "host_groups", i), target))
    return out


def _served(gpu: Gpu) -> bool:
    """gpufleet's GPU software serves the GPU: NVIDIA's, or an AMD Instinct one (the models with partitions)."""
    return gpu.vendor == "nvidia" or gpu.partitions is not None


# -- bare metal ----------------------------------------------------------------------------------------------


def check_host_group(
    group: HostGroup, path: Path, ctx: Context, profiles: dict[str, TuningProfile] | None
) -> Iterator[Finding]:
    if profiles is not None and group.tuning_profile not in profiles:
        yield Finding(
            (*path, "tuning_profile"),
            f"unknown tuning profile {group.tuning_profile!r}; {did_you_mean(group.tuning_profile, profiles)}"
            " (define it under gpufleet:tuning_profiles)",
        )
    yield from owner_conflicts(host_group_claims(group, path))
    if group.gpu_model is None:
        if group.advertiser != "device-plugin":
            yield Finding(
                (*path, "advertiser"),
                f"advertiser {group.advertiser} needs gpu_model: hosts without GPUs have nothing to advertise",
            )
        return
    gpu = ctx.catalog.find_gpu(group.gpu_model)
    if gpu is None:
        yield Finding((*path, "gpu_model"), f"unknown GPU {group.gpu_model!r}; {ctx.catalog.gpu_hint(group.gpu_model)}")
        return
    if group.mig is not None:
        if gpu.mig is None:
            yield Finding((*path, "mig"), ctx.catalog.no_mig_reason(gpu))
        else:
            yield from check_mig_layout(gpu, group.mig, group.gpus_per_host, (*path, "mig"), ctx.catalog)
    if group.amd_partitions is not None:
        yield from check_amd_partitions(gpu, group.amd_partitions, group.gpus_per_host, (*path, "amd_partitions"))
    if group.gpu_vms and group.advertiser != "device-plugin":
        yield Finding(
            (*path, "advertiser"),
            f"advertiser {group.advertiser} cannot serve GPU VMs: the GPU Operator's sandbox device plugin advertises"
            " these GPUs to KubeVirt, from its ClusterPolicy; leave advertiser device-plugin (the default) here",
        )
    elif group.advertiser == "dra" and gpu.vendor == "nvidia":  # AMD's DRA driver publishes its own attributes
        yield from check_dra_gpu(gpu, (*path, "advertiser"))


def check_secret_ref(ref: SecretRef, path: Path, ctx: Context) -> Iterator[Finding]:
    """A ``{secret: KEY}`` names a ``secure:`` value of this stack file's config (never its value: not shown)."""
    if ctx.secure_keys is None or ref.secret in ctx.secure_keys:
        return
    key = ref.secret
    if key in ctx.plain_keys:
        yield Finding(
            (*path, "secret"),
            f"{key} is in this stack file's config as plain text, not as a secret: run `pulumi config set --secret"
            f" {key} ...` (it replaces the plain value with a secure: one)",
        )
    else:
        yield Finding(
            (*path, "secret"),
            f"no secret {key} in this stack file's config: run `pulumi config set --secret {key} ...` (it writes"
            f" {key}: {{secure: ...}} under config:)",
        )


def _gpu_name(ctx: Context, identifier: str | None) -> str | None:
    gpu = ctx.catalog.find_gpu(identifier) if identifier else None
    return gpu.name if gpu else None


def check_host_hardware(host: BaremetalHost, group: HostGroup | None, path: Path, ctx: Context) -> Iterator[Finding]:
    """``expected``: a GPU the catalog knows, the same model and count as the host's group."""
    exp = host.expected
    epath = (*path, "expected")
    if exp.gpu_model is not None:
        gpu = ctx.catalog.find_gpu(exp.gpu_model)
        if gpu is None:
            yield Finding(
                (*epath, "gpu_model"), f"unknown GPU {exp.gpu_model!r}; {ctx.catalog.gpu_hint(exp.gpu_model)}"
            )
        elif group is not None:
            if group.gpu_model is None:
                yield Finding(
                    (*epath, "gpu_model"),
                    f"host group {group.name!r} has no gpu_model (hosts without GPUs): give the group gpu_model"
                    f" {gpu.name!r} or remove expected.gpu_model",
                )
            elif (group_gpu := _gpu_name(ctx, group.gpu_model)) is not None and group_gpu != gpu.name:
                yield Finding(
                    (*epath, "gpu_model"),
                    f"{gpu.name} differs from host group {group.name!r}'s gpu_model {group_gpu}: a host group's hosts"
                    " are alike (its MIG layout and tuning are planned for one model)",
                )
    if group is not None and exp.gpu_count is not None and group.gpus_per_host not in (None, exp.gpu_count):
        yield Finding(
            (*epath, "gpu_count"),
            f"{exp.gpu_count} differs from host group {group.name!r}'s gpus_per_host {group.gpus_per_host}",
        )


def check_host_engine(host: BaremetalHost, engine: str, path: Path) -> Iterator[Finding]:
    """What each engine needs of a host. redfish: an image URL only for virtual media (the image the BMC inserts).
    metal3: the BMC address names the system (``redfish://host/redfish/v1/Systems/<id>``, baremetal-operator
    docs/api.md), an image and its checksum to write to the disk (book.metal3.io/bmo/provisioning), and for network
    boot the provisioning NIC's MAC (its DHCP/iPXE answers go to that MAC)."""
    boot = host.boot
    bpath = (*path, "boot")
    if engine == "redfish":
        if boot.source == "pxe" and boot.image_url is not None:
            yield Finding(
                (*bpath, "image_url"),
                "with engine redfish and source pxe the network boot server provides the image: remove image_url, or"
                " use source virtual-media to have the BMC insert it",
            )
        return
    if host.system_id is None:
        yield Finding(
            (*path, "system_id"),
            "engine metal3 needs system_id: Metal3's BMC address names the system"
            " (redfish://host/redfish/v1/Systems/<system_id>); a serial alone cannot be addressed",
        )
    if boot.source == "disk":
        yield Finding(
            bpath,  # source disk is also the default, when boot: is not written
            "engine metal3 provisions the host with an image: use source pxe (redfish://) or virtual-media"
            " (redfish-virtualmedia://) with image_url and image_checksum",
        )
        return
    if boot.image_url is None:
        yield Finding((*bpath, "image_url"), "engine metal3 writes an image to the host's disk: give image_url")
    if boot.image_checksum is None:
        yield Finding(
            (*bpath, "image_checksum"),
            "engine metal3 checks the image it writes: give image_checksum ('sha256:<64 hex digits>')",
        )
    if boot.source == "pxe" and host.boot_mac is None:
        yield Finding(
            (*path, "boot_mac"),
            "engine metal3 with source pxe needs boot_mac: the provisioning NIC that network-boots (Metal3's"
            " bootMACAddress)",
        )


def check_baremetal_hosts(
    hosts: Sequence[BaremetalHost | None],
    groups: Sequence[HostGroup | None],
    engine: str | None,
    ctx: Context,
) -> Iterator[Finding]:
    """Every host that parsed (None: one with structural errors, already reported): its group exists, its expected
    hardware matches the catalog and its group, its secrets are the stack's, what its engine needs; and names,
    serials, BMC systems, MACs and SSH endpoints are not used twice (the second use names the first)."""
    known = {g.name: g for g in groups if g is not None}
    all_groups_parsed = all(g is not None for g in groups)
    names: set[str] = set()
    firsts: dict[tuple[str, object], str] = {}

    def once(kind: str, value: object, host: BaremetalHost, path: Path, why: str) -> Iterator[Finding]:
        other = firsts.setdefault((kind, value), host.name)
        if other != host.name:
            yield Finding(path, f"host {other!r} has the same {why}")

    for i, host in enumerate(hosts):
        if host is None:
            continue
        path: Path = ("baremetal", "hosts", i)
        if host.name in names:
            yield Finding((*path, "name"), f"host {host.name!r} is listed twice; host names are unique per stack")
        names.add(host.name)
        group = known.get(host.host_group)
        if group is None and all_groups_parsed:
            yield Finding(
                (*path, "host_group"),
                f"no host group {host.host_group!r} in baremetal.host_groups; {did_you_mean(host.host_group, known)}",
            )
        yield from check_host_hardware(host, group, path, ctx)
        yield from check_secret_ref(host.bmc.password, (*path, "bmc", "password"), ctx)
        if engine is not None:
            yield from check_host_engine(host, engine, path)
        if host.serial is not None:
            why = f"serial {host.serial!r}: a serial number names one server"
            yield from once("serial", host.serial, host, (*path, "serial"), why)
        if host.system_id is not None:
            _, bmc_host, port = host.bmc.endpoint
            why = f"system {host.system_id!r} of the BMC at {host.bmc.address}: each host is a system of its own"
            yield from once("system", (bmc_host, port, host.system_id), host, (*path, "system_id"), why)
        if host.boot_mac is not None:
            why = f"boot_mac {host.boot_mac}: a MAC address names one NIC"
            yield from once("mac", host.boot_mac, host, (*path, "boot_mac"), why)
        endpoint = f"{host.ssh.address}:{host.ssh.port}"
        why = f"SSH endpoint {endpoint}: Ansible would converge one machine twice"
        yield from once("ssh", (host.ssh.address.lower(), host.ssh.port), host, (*path, "ssh"), why)


def check_baremetal(bm: Baremetal, ctx: Context) -> Iterator[Finding]:
    """The bare-metal hosts of a structurally valid stack, and the engine's secrets."""
    yield from check_baremetal_hosts(bm.hosts, bm.host_groups, bm.engine, ctx)
    yield from check_remediation(bm.remediation)
    yield from check_canaries(bm)
    if bm.metal3 is not None:
        yield from check_secret_ref(bm.metal3.kubeconfig, ("baremetal", "metal3", "kubeconfig"), ctx)


def check_canaries(bm: Baremetal) -> Iterator[Finding]:
    """A canary host is one of the stack's BMC-managed hosts, when it lists them (else any inventory host)."""
    names = [h.name for h in bm.hosts]
    for i, name in enumerate(bm.verify.canaries):
        if names and name not in names:
            yield Finding(
                ("baremetal", "verify", "canaries", i),
                f"canary {name!r} is not one of baremetal.hosts; name one of: {', '.join(names)}",
            )


def check_aks_remediation(remediation: Remediation) -> Iterator[Finding]:
    """AKS nodes are remediated in their cluster only (remediate.yml reaches hosts through SSH and their BMCs), by
    Xids the catalog knows."""
    path: Path = ("aks", "remediation")
    if remediation.engine == "ansible":
        yield Finding(
            (*path, "engine"),
            "AKS nodes are remediated in their cluster: engine node-healthcheck (ansible/remediate.yml drives"
            " bare-metal hosts through SSH and their BMCs)",
        )
    yield from check_remediation(remediation, path)


def check_remediation(remediation: Remediation, path: Path = ("baremetal", "remediation")) -> Iterator[Finding]:
    """Each Xid the policy names is one gpufleet's Xid catalog knows (NVIDIA's code, with its resolution)."""
    from gpufleet.fleet.remediation import xid_catalog

    known = xid_catalog()
    for code in remediation.xid_actions:
        if code not in known:
            yield Finding(
                (*path, "xid_actions", code),
                f"Xid {code} is not in gpufleet's Xid catalog (gpufleet/catalog/xids.yaml); known: "
                + ", ".join(str(c) for c in sorted(known)),
            )


def check_unique(items: Sequence[tuple[Path, str]], what: str, scope: str) -> Iterator[Finding]:
    """Names that must be unique within ``scope``; the second use is the error."""
    seen: set[str] = set()
    for path, name in items:
        if name in seen:
            yield Finding(path, f"{what} {name!r} is used twice; names are unique per {scope}")
        seen.add(name)


def check_teams(teams: Sequence[Team]) -> Iterator[Finding]:
    """A team's name names its ClusterQueue, its namespace holds its one LocalQueue: both unique per stack."""
    yield from check_unique([(("teams", i, "name"), t.name) for i, t in enumerate(teams)], "team", "stack")
    seen: dict[str, str] = {}
    for i, team in enumerate(teams):
        namespace = team.queue_namespace
        if namespace in seen:
            key = "namespace" if team.namespace is not None else "name"
            yield Finding(
                ("teams", i, key),
                f"namespace {namespace!r} is team {seen[namespace]!r}'s already; each team queues from its own"
                " namespace (set namespace: to another)",
            )
        seen.setdefault(namespace, team.name)


# -- the whole stack -----------------------------------------------------------------------------------------


def check_region(stack_region: str, has_aks: bool, ctx: Context) -> Iterator[Finding]:
    if has_aks and stack_region not in ctx.catalog.region_names:
        yield Finding(
            ("region",),
            f"{stack_region!r} is not an Azure region; {did_you_mean(stack_region, ctx.catalog.region_names, 8)}",
        )


# -- AMD Instinct (docs/amd.md) ---------------------------------------------------------------------------------

# learn.microsoft.com/azure/aks/use-amd-gpus (../shared/reference/amd-instinct.md §5)
AKS_AMD_GPUS = "learn.microsoft.com/azure/aks/use-amd-gpus"


def check_amd_partitions(gpu: Gpu, layout: AmdPartitions, gpus: int | None, path: Path) -> Iterator[Finding]:
    """An AMD partition layout on ``gpus`` GPUs of ``gpu`` per node: each pair valid for the model, every GPU assigned
    or skipped, and what AMD's Device Config Manager applies when it is the operator's."""
    for problem in layout_problems(gpu, layout, gpus):
        yield Finding((*path, *problem.path), problem.message)


def check_amd_pool(pool: GpuPool, size: VmSize, gpu: Gpu, path: Path) -> Iterator[Finding]:
    """An AMD Instinct pool on AKS: AKS installs no AMD driver (``--gpu-driver none``) and no device plugin, the AMD
    GPU Operator does both; no NVIDIA feature (AKS MIG, the NVIDIA device plugin's sharing, AKS's managed GPU stack),
    no node auto-provisioning (AKS documents none for AMD); partitions through the operator's Device Config Manager."""
    if pool.driver == "aks" and "driver" in pool.model_fields_set:
        yield Finding(
            (*path, "driver"),
            f"{size.name} ({gpu.name}): AKS installs no AMD driver; its pools are created with the GPU driver install"
            f" skipped and the AMD GPU Operator installs the driver ({AKS_AMD_GPUS}): remove driver, or set driver:"
            " operator",
        )
    if pool.sharing.mode != "none":
        yield Finding(
            (*path, "sharing", "mode"),
            f"{pool.sharing.mode} is the NVIDIA device plugin's GPU sharing; {gpu.name} GPUs are shared by partitioning"
            " them (amd_partitions: compute partitions SPX/DPX/QPX/CPX): remove sharing",
        )
    if pool.kind == "nap":
        yield Finding(
            (*path, "kind"),
            f"AKS documents {gpu.name} GPUs on agent pools created with the GPU driver install skipped, not through"
            f" node auto-provisioning ({AKS_AMD_GPUS}): use kind agentpool",
        )
    if pool.amd_partitions is not None:
        ppath = (*path, "amd_partitions")
        if pool.amd_partitions.managed_by != "operator":
            yield Finding(
                (*ppath, "managed_by"),
                "an AKS pool's GPUs are partitioned by the AMD GPU Operator's Device Config Manager (no host role runs"
                " on AKS nodes): set managed_by: operator",
            )
        yield from check_amd_partitions(gpu, pool.amd_partitions, size.whole_gpus or None, ppath)


def _nvidia_pool(pool: GpuPool | None, ctx: Context) -> bool:
    size = ctx.catalog.vm_size(pool.vm_size) if pool is not None else None
    return size is not None and ctx.catalog.gpu(size.gpu).vendor == "nvidia"


def _gpu_vendor(model: str, ctx: Context) -> str | None:
    gpu = ctx.catalog.find_gpu(model)
    return gpu.vendor if gpu is not None else None


def check_amd_clusters(stack: Stack, ctx: Context) -> Iterator[Finding]:
    """Each cluster's AMD targets (its AKS pools; its host groups): one DeviceConfig runs the AMD device plugin or
    AMD's DRA driver, not both; a DCM profile name stands for one layout; on AKS, where the operator builds and
    installs the driver, the driver release and the image repository it pushes to."""
    targets = [(path, t) for path, t in _gpu_targets(stack, ctx) if t.vendor == "amd"]
    for cluster in ("aks", "baremetal"):
        mine = [(path, t) for path, t in targets if path[0] == cluster]
        claims = [owners.amd_advertiser_claim(t.advertiser, (*path, "advertiser")) for path, t in mine]
        yield from owners.deviceconfig_conflicts(claims)
        yield from _dcm_profile_names(mine)
    aks = [(path, t) for path, t in targets if path[0] == "aks"]
    if not aks or stack.aks is None:
        return
    first = aks[0][0]
    if stack.aks.gpu_software.amd_driver_image is None:
        yield Finding(
            (*first, "vm_size"),
            "an AMD size, whose driver the AMD GPU Operator builds as an image and installs on AKS: name the image"
            " repository it pushes that image to and the nodes pull it from (aks.gpu_software.amd_driver_image, e.g."
            " registry.example.net/amd/amdgpu-driver; with amd_driver_image_secret for its credentials)",
        )
    if stack.release.amdgpu is None:
        yield Finding(
            ("release", "amdgpu"),
            f"{format_path(first)} has AMD GPUs, whose driver the AMD GPU Operator installs: pin its release"
            " (release.amdgpu, e.g. '30.10.1'), or the chart's own default would be installed",
        )
    for path, target in aks:
        if target.advertiser == "none":
            yield Finding(
                (*path, "advertiser"),
                "advertiser none leaves an AMD pool out of the AMD GPU Operator, which also installs its driver on"
                " AKS: its nodes would have no AMD driver at all; use device-plugin or dra",
            )


def _dcm_profile_names(targets: Sequence[tuple[Path, GpuTarget]]) -> Iterator[Finding]:
    """One DCM profile name (a node label value) stands for one layout in a cluster."""
    seen: dict[str, tuple[Path, GpuTarget]] = {}
    for path, target in targets:
        parts = target.amd_partitions
        if parts is None or parts.managed_by != "operator":
            continue
        if parts.profile in seen:
            other_path, other = seen[parts.profile]
            mine = parts.model_dump(exclude={"managed_by"})
            if other.amd_partitions is not None and other.amd_partitions.model_dump(exclude={"managed_by"}) != mine:
                yield Finding(
                    (*path, "amd_partitions", "profile"),
                    f"profile {parts.profile!r} is also {other.name}'s ({format_path(other_path)}) with another layout;"
                    " the node label dcm.amd.com/gpu-config-profile selects one layout per name: rename one",
                )
        else:
            seen[parts.profile] = (path, target)


def check_amd_release(stack: Stack, ctx: Context) -> Iterator[Finding]:
    """A stack with AMD GPUs pins AMD's software: the AMD GPU Operator chart where Kubernetes runs them (AKS pools,
    or bare-metal host groups of a stack that pins it), amdgpu and ROCm where the host roles install them."""
    amd = [path for path, t in _gpu_targets(stack, ctx) if t.vendor == "amd"]
    amd_pools = [path[2] for path in amd if path[0] == "aks"]
    amd_groups = [path[2] for path in amd if path[0] == "baremetal"]
    release = stack.release
    if amd_pools and release.amd_gpu_operator is None:
        yield Finding(
            ("release", "amd_gpu_operator"),
            f"aks.gpu_pools[{amd_pools[0]}] has AMD GPUs, which get the AMD GPU Operator: pin its chart version"
            " (release.amd_gpu_operator, e.g. v1.5.1)",
        )
    for key, example in (("amdgpu", "30.10.1"), ("rocm", "7.0.1")):
        if amd_groups and getattr(release, key) is None:
            yield Finding(
                ("release", key),
                f"baremetal.host_groups[{amd_groups[0]}] has AMD GPUs, whose hosts get AMD's driver and ROCm from the"
                f" amd_driver role: pin release.{key} (e.g. {example!r})",
            )
    if release.amd_gpu_operator is None:
        return
    op = ctx.releases.find_amd_gpu_operator(release.amd_gpu_operator)
    if op is None:
        known = ", ".join(o.version for o in ctx.releases.amd_gpu_operator)
        yield Finding(
            ("release", "amd_gpu_operator"),
            f"the release table (gpufleet/catalog/releases.yaml) knows the AMD GPU Operator chart {known}, not"
            f" {release.amd_gpu_operator}",
        )
    elif not op.supports_kubernetes(release.kubernetes):
        yield Finding(
            ("release", "amd_gpu_operator"),
            f"AMD GPU Operator {op.version} supports Kubernetes {op.kubernetes}, not release.kubernetes"
            f" {release.kubernetes!r}",
        )


def check_stack(stack: Stack, ctx: Context) -> Iterator[Finding]:
    """All cross-cutting rules of a structurally valid stack."""
    yield from check_region(stack.region, stack.aks is not None, ctx)
    yield from check_release(stack.release, ctx, aks=stack.aks is not None, baremetal=stack.baremetal is not None)
    yield from check_amd_release(stack, ctx)
    yield from check_dra_kubernetes(stack, ctx)
    yield from check_amd_clusters(stack, ctx)
    if stack.aks is not None:
        yield from check_waivers(stack.aks.cluster.security.waivers)
        in_region = dataclasses.replace(
            ctx,
            region=stack.region if stack.region in ctx.catalog.region_names else None,
            kubernetes=stack.release.kubernetes,
            preview=stack.aks.preview,
        )
        yield from check_aks_pools(stack.aks.gpu_pools, stack.aks.cluster.system_pool, in_region)
        yield from check_nap_cluster(stack)
        if stack.aks.remediation is not None:
            yield from check_aks_remediation(stack.aks.remediation)
    yield from check_teams(stack.teams)
    if stack.baremetal is not None:
        profiles = dict(stack.tuning_profiles)
        profiles.setdefault("default", TuningProfile())
        yield from check_host_groups(stack.baremetal.host_groups, ctx, profiles)
        yield from check_baremetal(stack.baremetal, ctx)


def check_waivers(names: Iterable[object]) -> Iterator[Finding]:
    """Each waiver names a rule of the AKS baseline (:data:`gpufleet.azure.baseline.RULE_NAMES`)."""
    for name in names:
        if not isinstance(name, str) or name not in RULE_NAMES:
            yield Finding(
                (*WAIVERS, str(name)),
                f"unknown baseline rule {name!r}; {did_you_mean(str(name), RULE_NAMES, limit=len(RULE_NAMES))}",
            )


def check_mig_config_names(layouts: Sequence[tuple[Path, str | None, MigLayout]]) -> Iterator[Finding]:
    """One ``nvidia.com/mig.config`` name means one layout per GPU model: mig-parted applies every entry of a
    config whose device filter matches, so two layouts for the same model under one name would collide."""
    seen: dict[tuple[str, str | None], tuple[Path, MigLayout]] = {}
    for path, gpu, layout in layouts:
        key = (layout.config_name, gpu)
        if key in seen and seen[key][1].devices != layout.devices:
            yield Finding(
                (*path, "config_name"),
                f"config_name {layout.config_name!r} already names a different layout for {gpu} at"
                f" {format_path(seen[key][0])}; give this layout its own name",
            )
        seen.setdefault(key, (path, layout))


def check_aks_pools(pools: Sequence[GpuPool | None], system: SystemPool | None, ctx: Context) -> Iterator[Finding]:
    """Pool rules for the system pool and every GPU pool that parsed (None = a pool with structural errors, already
    reported), and the cluster's limits."""
    names: list[tuple[Path, str]] = []
    layouts: list[tuple[Path, str | None, MigLayout]] = []
    if system is not None:
        yield from check_system_pool(system, ctx)
        names.append(((*SYSTEM_POOL, "name"), system.name))
    for i, pool in enumerate(pools):
        if pool is None:
            continue
        path: Path = ("aks", "gpu_pools", i)
        names.append(((*path, "name"), pool.name))
        yield from check_pool(pool, path, ctx)
        if isinstance(pool.mig, MigLayout):
            size = ctx.catalog.vm_size(pool.vm_size)
            layouts.append(((*path, "mig"), size.gpu if size else None, pool.mig))
    yield from check_unique(names, "pool name", "cluster (the system pool included)")
    yield from check_advertisers_mixed(  # NVIDIA's GPU Operator; AMD's DeviceConfig: check_amd_clusters
        [(("aks", "gpu_pools", i), p.name, p.advertiser) for i, p in enumerate(pools) if _nvidia_pool(p, ctx)], "pool"
    )
    yield from check_gpu_cluster_mig(pools)
    yield from check_cluster_limits(pools, system)
    yield from check_aks_names(pools)
    yield from check_mig_config_names(layouts)


def check_aks_names(pools: Sequence[GpuPool | None]) -> Iterator[Finding]:
    """Pools whose names share their first 8 characters and whose immutable fields are equal get the same AKS name
    (gpufleet.azure.aks.aks_pool_name)."""
    seen: dict[str, str] = {}
    for i, pool in enumerate(pools):
        if pool is None:
            continue
        aks_name = aks_pool_name(pool)
        if aks_name in seen and seen[aks_name] != pool.name:
            yield Finding(
                ("aks", "gpu_pools", i, "name"),
                f"{pool.name!r} and {seen[aks_name]!r} would both be AKS node pool {aks_name!r} (the first 8"
                " characters of the name and a suffix of the pool's fixed settings); make the first 8 differ",
            )
        seen.setdefault(aks_name, pool.name)


def check_host_groups(
    groups: Sequence[HostGroup | None], ctx: Context, profiles: dict[str, TuningProfile] | None
) -> Iterator[Finding]:
    named: list[tuple[Path, str]] = []
    layouts: list[tuple[Path, str | None, MigLayout]] = []
    for i, group in enumerate(groups):
        if group is None:
            continue
        path: Path = ("baremetal", "host_groups", i)
        named.append(((*path, "name"), group.name))
        yield from check_host_group(group, path, ctx, profiles)
        if group.mig is not None:
            gpu = ctx.catalog.find_gpu(group.gpu_model or "")
            layouts.append(((*path, "mig"), gpu.name if gpu else None, group.mig))
    yield from check_unique(named, "host group", "stack")
    yield from check_advertisers_mixed(
        [
            (("baremetal", "host_groups", i), g.name, g.advertiser)
            for i, g in enumerate(groups)
            # hosts without GPUs advertise nothing; AMD's DeviceConfig: check_amd_clusters
            if g is not None and g.gpu_model is not None and _gpu_vendor(g.gpu_model, ctx) != "amd"
        ],
        "host group",
    )
    yield from check_mig_config_names(layouts)
    yield from check_vgpu_managers(groups)


def check_vgpu_managers(groups: Sequence[HostGroup | None]) -> Iterator[Finding]:
    """The GPU Operator's ClusterPolicy has one vgpuManager: every vGPU host group names the same image (its
    device_config may differ)."""
    first: tuple[str, Vgpu] | None = None
    for i, group in enumerate(groups):
        vgpu = group.virtualization.vgpu if group is not None and group.virtualization is not None else None
        if group is None or vgpu is None:
            continue
        if first is None:
            first = (group.name, vgpu)
        elif vgpu.manager != first[1].manager:
            yield Finding(
                ("baremetal", "host_groups", i, "virtualization", "vgpu"),
                f"the GPU Operator runs one vGPU manager image per cluster, and host group {first[0]!r} names"
                f" {_image(first[1])}; give every vgpu the same manager_* and image_pull_secrets (only device_config"
                " may differ)",
            )


def _image(vgpu: Vgpu) -> str:
    secrets = f" with pull secrets {', '.join(vgpu.image_pull_secrets)}" if vgpu.image_pull_secrets else ""
    return f"{vgpu.manager_repository}/{vgpu.manager_image}:{vgpu.manager_version}{secrets}"


# -- the release block against the release table ----------------------------------------------------------------

RELEASE: Path = ("release",)
RELEASES_FILE = "gpufleet/catalog/releases.yaml"


def check_release(release: Release, ctx: Context, *, aks: bool, baremetal: bool) -> Iterator[Finding]:
    """The release is a combination of the release table (``releases.yaml``): a GPU Operator release it
    knows, the component versions that release ships, a driver branch of its matrix that NVIDIA still supports, and a
    Kubernetes version that gpufleet, the operator and its components support and that is not past its end of life:
    upstream's for a stack with ``baremetal`` (a cluster of its own), AKS's offer for a stack with ``aks``."""
    table = ctx.releases
    op = table.find_gpu_operator(release.gpu_operator)
    if op is None:
        known = ", ".join(o.version for o in table.gpu_operator)
        why = f"GPU Operator {release.gpu_operator!r} is not in gpufleet's release table ({RELEASES_FILE})"
        yield Finding((*RELEASE, "gpu_operator"), f"{why}; known: {known}")
    else:
        yield from _check_components(release, op)
        yield from _check_driver_branch(release.driver_branch, op, ctx)
    problem = _kubernetes_problem(release.kubernetes, op, ctx, aks=aks, baremetal=baremetal)
    if problem is not None:
        fits = kubernetes_choices(op, ctx, aks=aks, baremetal=baremetal)
        with_release = f"GPU Operator {op.version}" if op is not None else "this stack"
        choice = f"supported with {with_release}: {', '.join(fits) or 'none today'}"
        yield Finding((*RELEASE, "kubernetes"), f"{problem}; {choice}")


def kubernetes_choices(op: GpuOperatorRelease | None, ctx: Context, *, aks: bool, baremetal: bool) -> list[str]:
    """The Kubernetes minors a stack (with ``aks``, ``baremetal`` or both) may pin with ``op`` on ``ctx.today``."""
    return [
        m.version
        for m in ctx.releases.kubernetes
        if _kubernetes_problem(m.version, op, ctx, aks=aks, baremetal=baremetal) is None
    ]


def _check_components(release: Release, op: GpuOperatorRelease) -> Iterator[Finding]:
    for key, label in COMPONENT_PINS.items():
        pin, ships = getattr(release, key), getattr(op.components, key)
        if not same_version(pin, ships):
            why = f"GPU Operator {op.version} ships {label} {ships}"
            yield Finding((*RELEASE, key), f"{why}; {pin!r} does not go with it")


def _check_driver_branch(branch: str, op: GpuOperatorRelease, ctx: Context) -> Iterator[Finding]:
    supported = ctx.releases.supported_branches(op, ctx.today)
    if branch in supported:
        return
    supports = f"GPU Operator {op.version} supports driver branches {', '.join(supported) or 'none today'}"
    entry = ctx.releases.driver_branch(branch)
    dra = ctx.releases.find_dra_driver(op.components.dra_driver)
    if branch not in op.driver_branches or entry is None:
        message = f"{supports}; {branch!r} is not one of them"
    elif entry.end_of_life < ctx.today:
        why = f"driver branch {branch} reached its end of life on {entry.end_of_life} ({entry.designation} branch)"
        message = f"{why}; {supports}"
    else:
        needs = dra.min_driver_branch if dra is not None else "?"
        message = f"the DRA driver {op.components.dra_driver} needs driver branch {needs} or later; {supports}"
    yield Finding((*RELEASE, "driver_branch"), message)


def _kubernetes_problem(
    version: str, op: GpuOperatorRelease | None, ctx: Context, *, aks: bool, baremetal: bool
) -> str | None:
    """Why ``version`` cannot be the stack's Kubernetes, or None. The first of: unknown to the table; where the
    cluster runs, past upstream's end of life (bare metal) or not offered by AKS; below gpufleet's floor; outside the
    operator's range; below a component's minimum."""
    table = ctx.releases
    minor, floor = table.minor(version), table.minimum_kubernetes
    if minor is None:
        return f"Kubernetes {version} is not in gpufleet's release table ({RELEASES_FILE})"
    if baremetal and minor.end_of_life < ctx.today:
        return f"Kubernetes {minor.version} reached its end of life on {minor.end_of_life} ({minor.source})"
    if aks and (problem := _aks_problem(minor.version, table, ctx.today)) is not None:
        return problem
    if not kube_at_least(version, floor.version):
        return f"gpufleet needs Kubernetes {floor.version} or later ({floor.reason}); {version!r} is older"
    if op is not None:
        if not op.supports_kubernetes(version):
            return f"GPU Operator {op.version} supports Kubernetes {op.kubernetes}; {version!r} is outside it"
        for label, needs in _component_minimums(op, table):
            if not kube_at_least(version, needs):
                return f"{label} needs Kubernetes {needs} or later; {version!r} is older"
    return None


def _component_minimums(op: GpuOperatorRelease, table: ReleaseTable) -> Iterator[tuple[str, str]]:
    plugin = table.find_device_plugin(op.components.device_plugin)
    if plugin is not None:
        yield f"the device plugin {plugin.version}", plugin.min_kubernetes
    dra = table.find_dra_driver(op.components.dra_driver)
    if dra is not None:
        yield f"the DRA driver {dra.version}", dra.min_kubernetes


def _aks_problem(minor: str, table: ReleaseTable, today: _dt.date) -> str | None:
    entry = table.aks_version(minor)
    if entry is None:
        return f"AKS's calendar has no Kubernetes {minor}"
    if today < entry.ga:
        return f"AKS offers Kubernetes {minor} from {entry.ga:%B %Y} (GA), not yet"
    if entry.end_of_life < today:
        return f"AKS supported Kubernetes {minor} until {entry.end_of_life}"
    return None
