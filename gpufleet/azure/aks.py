"""AKS facts gpufleet derives from a GPU pool: its node pool name in AKS, and the labels and taints AKS itself puts on
nodes. Pure: no I/O, no Pulumi.

AKS cannot change a node pool's VM size, availability zones, spot settings, GPU driver owner, MIG instance profile
or taints in place. gpufleet changes them the way Azure documents for a resize: a new pool next to the old one, then
the old one goes. For that each pool's AKS name carries a short suffix derived from those fields: changing one gives
a new name, so Pulumi creates the new pool before it deletes the old one (like the ``name_suffix`` of Azure's own
AKS Terraform module).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the stack's types, for hints only
    from gpufleet.spec.models import GpuPool

# AKS's recommendation for a dedicated system pool: only critical add-ons schedule there (pods that tolerate it).
SYSTEM_POOL_TAINT = "CriticalAddonsOnly=true:NoSchedule"
AKS_POOL_NAME_MAX = 12  # AKS Linux node pools: 1-12 lowercase letters and digits, starting with a letter
SUFFIX_LENGTH = 4


def immutable_fields(pool: GpuPool) -> dict[str, Any]:
    """The pool's settings AKS cannot update in place. Keys added since the first release appear only when set
    (AKS's managed GPU stack and its MIG strategy, fixed at creation; a pool that needs the generic ARM resource
    instead of the SDK's typed one), so the names of pools that use none of them do not change."""
    fields = {
        "vm_size": pool.vm_size,
        "zones": sorted(pool.zones),
        "spot": pool.spot.model_dump() if pool.spot else None,
        "gpu_driver": pool.aks_gpu_driver,
        "gpu_instance_profile": pool.mig.profile if pool.mig is not None and pool.mig.managed_by == "aks" else None,
        "taints": sorted(pool.taints),
    }
    if pool.gpu_management == "managed":
        fields["gpu_management"] = pool.gpu_management
        fields["mig_strategy"] = pool.mig_strategy
    if _needs_newer_api(pool):
        # Pulumi cannot move a pool between the typed AgentPool and the generic ARM resource in place (a new
        # resource, then a delete of the old one: the same AKS pool): the new name makes it a new pool instead
        fields["arm_resource"] = True
    return fields


def _needs_newer_api(pool: GpuPool) -> bool:
    """The pool needs a newer AKS API than the SDK's: its OS SKU's, or AKS's managed GPU stack (aks.yaml)."""
    from gpufleet.catalog.aks import load_aks_catalog

    return pool.gpu_management == "managed" or load_aks_catalog().os_sku(pool.os_sku).api != "sdk"


def pool_suffix(pool: GpuPool) -> str:
    """Four hex digits that change whenever one of :func:`immutable_fields` does."""
    canonical = json.dumps(immutable_fields(pool), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:SUFFIX_LENGTH]


def aks_pool_name(pool: GpuPool) -> str:
    """The pool's name in AKS: the stack's name (cut to 8 characters) and :func:`pool_suffix`, e.g. ``h100trai3f0c``."""
    return pool.name[: AKS_POOL_NAME_MAX - SUFFIX_LENGTH] + pool_suffix(pool)


# Labels AKS itself puts on every node of a pool ("Use labels in an AKS cluster", reserved system labels,
# learn.microsoft.com/azure/aks/use-labels); GPU nodes also get kubernetes.azure.com/accelerator=nvidia.
AKS_AGENTPOOL_LABEL = "kubernetes.azure.com/agentpool"
AKS_MODE_LABEL = "kubernetes.azure.com/mode"
AKS_ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"


def aks_node_labels(aks_name: str, vm_size: str, *, mode: str, gpu: bool) -> dict[str, str]:
    """The labels AKS sets on a node of pool ``aks_name`` (``mode``: ``system`` or ``user``), beside the pool's own."""
    labels = {
        AKS_AGENTPOOL_LABEL: aks_name,
        AKS_MODE_LABEL: mode,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": vm_size,
    }
    if gpu:
        labels[AKS_ACCELERATOR_LABEL] = "nvidia"
    return labels
