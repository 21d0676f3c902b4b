"""Who owns each part of a GPU node's stack: one owner per concern and node (docs/kubernetes.md, "One owner per node").

The failures users report most are two components owning one thing: two drivers, two advertisers (the device plugin
and the DRA kubelet plugin), two MIG managers. A stack's keys *claim* owners: an AKS pool's ``gpu_management``,
``driver``, ``advertiser`` and ``mig.managed_by``; a bare-metal host group's roles and ``advertiser``. Each concern
of a node has one owner; two different owners claimed for one concern are a conflict, reported at the key that
chose the second, naming both owners and both keys. :func:`owners` is the table of a target (AKS pool or host
group). The live side is :mod:`gpufleet.host.owners`: ``verify``'s owners column reads what each owner left on a host.

AMD Instinct pools and host groups (docs/amd.md) have AMD's owners: the AMD GPU Operator's driver (AKS installs none)
or the ``amd_driver`` role's, and the AMD GPU Operator's device plugin or DRA driver (one DeviceConfig runs one of
them); no container toolkit (AMD's device plugin hands pods the device nodes itself). A pool's or group's vendor is
its GPU's in the catalog, unless the caller names it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from gpufleet.common.diagnostics import Finding, Path, format_path
from gpufleet.spec.models import AksManagedMig, GpuPool, HostGroup, OperatorManagedMig

Vendor = Literal["nvidia", "amd"]

Concern = Literal["driver", "toolkit", "advertiser", "mig"]
CONCERNS: tuple[Concern, ...] = ("driver", "toolkit", "advertiser", "mig")

AKS_MANAGED = "AKS's managed GPU stack"
AKS_DEVICE_PLUGIN = "AKS's own device plugin"
DRA_DRIVER = "the NVIDIA DRA driver (the GPU Operator's GPUCluster)"
DEVICE_PLUGIN = "the NVIDIA device plugin"
NO_ADVERTISER = "nothing (advertiser none)"
AMD_OPERATOR_DRIVER = "the AMD GPU Operator (its DeviceConfig's driver, through KMM)"
AMD_HOST_DRIVER = "the amd_driver role"
AMD_DEVICE_PLUGIN = "the AMD device plugin (the AMD GPU Operator's DeviceConfig)"
AMD_DRA_DRIVER = "the AMD DRA driver (the AMD GPU Operator's DeviceConfig)"

# what to do about a conflict, per concern, when one side is AKS's managed GPU stack
_MANAGED_FIX = {
    "driver": "use driver: aks (AKS ignores gpuProfile.driver None on a managed pool), or gpu_management: unmanaged",
    "advertiser": "remove advertiser (AKS's device plugin advertises a managed pool's GPUs, and its MIG instances"
    " with mig.strategy), or use gpu_management: unmanaged",
    "mig": "use mig: {managed_by: aks, profile: ..., strategy: single|mixed}, or gpu_management: unmanaged",
}


@dataclass(frozen=True)
class Claim:
    """``owner`` owns ``concern`` on a target's nodes because of the key at ``key`` (its value: ``value``)."""

    concern: Concern
    owner: str
    key: Path
    value: str
    gpu: str = "NVIDIA"  # whose GPUs' concern it is, as a conflict names it (the NVIDIA driver, the AMD driver)

    def named(self) -> str:
        return f"{self.owner} ({format_path(self.key)}: {self.value})"


def _pool_vendor(pool: GpuPool) -> Vendor:
    from gpufleet.catalog import load_catalog

    catalog = load_catalog()
    size = catalog.vm_size(pool.vm_size)
    gpu = catalog.find_gpu(size.gpu) if size is not None and size.gpu else None
    return "amd" if gpu is not None and gpu.vendor == "amd" else "nvidia"


def _group_vendor(group: HostGroup) -> Vendor:
    from gpufleet.catalog import load_catalog

    gpu = load_catalog().find_gpu(group.gpu_model) if group.gpu_model else None
    return "amd" if gpu is not None and gpu.vendor == "amd" else "nvidia"


def amd_advertiser_claim(advertiser: str, key: Path) -> Claim:
    """Who advertises an AMD target's GPUs: AMD's device plugin, AMD's DRA driver, or none."""
    owner = {"dra": AMD_DRA_DRIVER, "none": NO_ADVERTISER}.get(advertiser, AMD_DEVICE_PLUGIN)
    return Claim("advertiser", owner, key, advertiser, "AMD")


def amd_pool_claims(pool: GpuPool, path: Path) -> list[Claim]:
    """An AMD pool: AKS installs no AMD driver, whatever ``driver`` says (the rules refuse ``driver: aks`` there), so
    the AMD GPU Operator owns it because of the pool's size; its DeviceConfig advertises the GPUs."""
    return [
        Claim("driver", AMD_OPERATOR_DRIVER, (*path, "vm_size"), pool.vm_size, "AMD"),
        amd_advertiser_claim(pool.advertiser, (*path, "advertiser")),
    ]


def pool_claims(pool: GpuPool, path: Path, vendor: Vendor | None = None) -> list[Claim]:
    """What an AKS pool's keys make each concern's owner on its nodes (``vendor``: its GPUs', default the
    catalog's)."""
    if (vendor or _pool_vendor(pool)) == "amd":
        return amd_pool_claims(pool, path)
    claims: list[Claim] = []
    if pool.gpu_management == "managed":
        managed = (*path, "gpu_management")
        claims += [Claim(c, AKS_MANAGED, managed, "managed") for c in ("driver", "toolkit")]
        claims.append(Claim("advertiser", AKS_DEVICE_PLUGIN, managed, "managed"))
        if pool.mig is not None:
            claims.append(Claim("mig", AKS_MANAGED, managed, "managed"))
    if pool.driver == "operator":
        claims += [Claim(c, "the GPU Operator", (*path, "driver"), "operator") for c in ("driver", "toolkit")]
    elif pool.gpu_management != "managed":
        claims += [Claim(c, "AKS (gpuProfile.driver Install)", (*path, "driver"), "aks") for c in ("driver", "toolkit")]
    advertiser = (*path, "advertiser")
    if pool.advertiser == "dra":
        claims.append(Claim("advertiser", DRA_DRIVER, advertiser, "dra"))
    elif pool.advertiser == "none":
        claims.append(Claim("advertiser", NO_ADVERTISER, advertiser, "none"))
    elif pool.gpu_management != "managed":  # the default; on a managed pool it is AKS's device plugin
        claims.append(Claim("advertiser", DEVICE_PLUGIN, advertiser, "device-plugin"))
    if isinstance(pool.mig, OperatorManagedMig):
        claims.append(Claim("mig", "the GPU Operator's MIG manager", (*path, "mig", "managed_by"), "operator"))
    elif isinstance(pool.mig, AksManagedMig) and pool.gpu_management != "managed":
        claims.append(Claim("mig", f"AKS (gpuInstanceProfile {pool.mig.profile})", (*path, "mig", "managed_by"), "aks"))
    return claims


def host_group_claims(group: HostGroup, path: Path, vendor: Vendor | None = None) -> list[Claim]:
    """What a bare-metal host group's keys make each concern's owner: the host roles own the driver and the toolkit
    (site.yml; the GPU Operator gets driver.enabled/toolkit.enabled false), the mig role its layout. An AMD group
    (``vendor``, default the catalog's): the amd_driver role owns the driver (the AMD GPU Operator's driver.enable is
    false), the AMD GPU Operator's DeviceConfig advertises."""
    if group.gpu_model is None:
        return []
    model = (*path, "gpu_model")
    if (vendor or _group_vendor(group)) == "amd":
        return [
            Claim("driver", AMD_HOST_DRIVER, model, group.gpu_model, "AMD"),
            amd_advertiser_claim(group.advertiser, (*path, "advertiser")),
        ]
    claims = [
        Claim("driver", "the nvidia_driver role", model, group.gpu_model),
        Claim("toolkit", "the nvidia_container_toolkit role", model, group.gpu_model),
    ]
    if not group.gpu_vms:
        owner = {"dra": DRA_DRIVER, "none": NO_ADVERTISER}.get(group.advertiser, DEVICE_PLUGIN)
        claims.append(Claim("advertiser", owner, (*path, "advertiser"), group.advertiser))
    if group.mig is not None:
        claims.append(Claim("mig", "the mig role (mig-parted)", (*path, "mig"), "a layout"))
    return claims


def conflicts(claims: Sequence[Claim]) -> Iterator[Finding]:
    """One finding per concern claimed by a second, different owner: at the later key, both owners named. Two keys
    that clash on several concerns (driver and toolkit come together) are reported once, for the first."""
    reported: set[tuple[Path, Path]] = set()
    for concern in CONCERNS:
        mine = [c for c in claims if c.concern == concern]
        first = mine[0] if mine else None
        for other in mine[1:]:
            if first is None or other.owner == first.owner or (first.key, other.key) in reported:
                continue
            reported.add((first.key, other.key))
            verb = "advertise" if concern == "advertiser" else "own"
            what = {"advertiser": "its GPUs", "mig": "its MIG layout"}.get(concern, f"the {other.gpu} {concern}")
            aks_side = {first.owner, other.owner} & {AKS_MANAGED, AKS_DEVICE_PLUGIN}
            fix = _MANAGED_FIX.get(concern, "") if aks_side else ""
            yield Finding(
                other.key,
                f"{concern}: {other.named()} and {first.named()} would both {verb} {what} on these nodes; one node"
                f" has one {concern} owner" + (f": {fix}" if fix else ""),
            )


def owners(claims: Sequence[Claim]) -> dict[Concern, Claim]:
    """Each concern's owner (the first claim; :func:`conflicts` says when another one disagrees)."""
    table: dict[Concern, Claim] = {}
    for claim in claims:
        table.setdefault(claim.concern, claim)
    return table


def deviceconfig_conflicts(claims: Sequence[Claim]) -> Iterator[Finding]:
    """One cluster's AMD advertisers (``claims``: the advertiser claims of its AMD pools or host groups, in the stack's
    order): its one DeviceConfig runs the AMD device plugin or the AMD DRA driver, never both (the operator refuses
    a DeviceConfig with both), so every AMD target that is advertised has the first one's advertiser; each other one
    is a finding at its key, naming both. Advertiser none is not advertised (the operator serves none of it)."""
    advertised = [c for c in claims if c.concern == "advertiser" and c.owner in (AMD_DEVICE_PLUGIN, AMD_DRA_DRIVER)]
    first = advertised[0] if advertised else None
    for other in advertised[1:]:
        if first is not None and other.owner != first.owner:
            yield Finding(
                other.key,
                f"advertiser: {other.named()} and {first.named()} would both advertise this cluster's AMD GPUs; the"
                " AMD GPU Operator's one DeviceConfig runs one of them: give every AMD pool or host group the same"
                " advertiser",
            )
