"""What AMD GPUs look like to Kubernetes: the resource names the AMD device plugin advertises (docs/amd.md).

AMD's device plugin (k8s-device-plugin, run by the AMD GPU Operator's DeviceConfig; ../shared/reference/
amd-instinct.md §4) names its resources by ``resource_naming_strategy``: ``single`` advertises ``amd.com/gpu`` for
every GPU or partition and works only on homogeneous nodes; ``mixed`` advertises ``amd.com/<compute>_<nps>``
(``amd.com/cpx_nps4``); a GPU that cannot be partitioned is always ``amd.com/gpu``. The strategy is one per
DeviceConfig, so one per cluster: gpufleet picks ``single`` when no AMD pool or host group of the cluster is
partitioned (every GPU whole: ``amd.com/gpu``), else ``mixed`` (every partition named by its pair, SPX/NPS1 ones
too), so a pod asking for ``amd.com/gpu`` never lands on a CPX slice it takes for a whole GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from gpufleet.plan.model import AmdPartitionPlan

NamingStrategy = Literal["single", "mixed"]
AMD_GPU_RESOURCE = "amd.com/gpu"
AMD_RESOURCE_PREFIX = "amd.com/"


def naming_strategy(partitions: Iterable[AmdPartitionPlan | None]) -> NamingStrategy:
    """The cluster's strategy from its AMD pools' or host groups' partitions (None: whole GPUs)."""
    return "mixed" if any(p is not None for p in partitions) else "single"


# What an unpartitioned Instinct GPU runs: the driver's default after a boot or a reload (SPX; NPS1 where the
# memory mode was never changed: amd-instinct.md §2, "After reboot")
DEFAULT_PAIR = "spx_nps1"


def node_resources(
    partitions: AmdPartitionPlan | None,
    gpus_per_node: int | None,
    strategy: NamingStrategy,
    *,
    partitionable: bool = True,
) -> dict[str, int] | None:
    """The extended resources one node advertises, and how many (None: the node's GPU count is unknown).
    ``partitionable``: the model has partition modes (every Instinct GPU gpufleet knows); a GPU without them is always
    ``amd.com/gpu``. Under ``mixed`` an unpartitioned Instinct GPU is named by the mode it boots in (``spx_nps1``).
    Skipped GPUs of a partitioned node stay as they are: ``amd.com/gpu`` under ``single``; under ``mixed`` the device
    plugin names them by a mode gpufleet does not set, so they are left out here."""
    if partitions is None:
        if gpus_per_node is None:
            return None
        name = AMD_RESOURCE_PREFIX + DEFAULT_PAIR if strategy == "mixed" and partitionable else AMD_GPU_RESOURCE
        return {name: gpus_per_node}
    if partitions.logical_gpus is None:
        return None
    if strategy == "single":
        return {AMD_GPU_RESOURCE: sum(partitions.logical_gpus.values())}
    return {AMD_RESOURCE_PREFIX + pair: count for pair, count in partitions.logical_gpus.items()}


def resource_names(
    partitions: AmdPartitionPlan | None, strategy: NamingStrategy, *, partitionable: bool = True
) -> tuple[str, ...]:
    """The resource names a node advertises, also where its GPU count is unknown."""
    if strategy == "single" or not partitionable:
        return (AMD_GPU_RESOURCE,)
    if partitions is None:
        return (AMD_RESOURCE_PREFIX + DEFAULT_PAIR,)
    return tuple(AMD_RESOURCE_PREFIX + pair for pair in partitions.pairs)
