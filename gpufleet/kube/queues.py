"""Kueue queues for a stack's GPUs (docs/queues.md): pure, from the plan to Kubernetes objects as plain data, which
``gpufleet render`` writes (``gpufleet-kueue.yaml``) and the tests check against Kueue's CRD schemas.

- a **ResourceFlavor** per GPU pool (AKS) or host group (bare metal): ``nodeLabels`` select that target's nodes only
  (gpufleet's pool and GPU-model labels, the MIG layout's ``nvidia.com/mig.config``; a host group's
  ``gpufleet.io/host-group``, which gpufleet sets on no node yet, and the labels its GPU software role sets),
  ``tolerations`` tolerate the target's taints (Kueue adds them to the pods it admits), and a spot
  pool's AKS taint stays a ``nodeTaint``: only workloads that tolerate spot themselves get that flavor.
- a **ClusterQueue** per team of the stack (``gpufleet:teams``; without teams one, ``gpufleet``, open to every
  namespace), in the team's ``cohortName`` (borrowing idle quota, reclaiming its own). One resource group covers the
  GPU resources the targets' nodes advertise; each flavor's quota is the target's capacity, split between the teams in
  proportion to their weights (largest remainder: the teams' quotas add up to the capacity exactly).
- a **LocalQueue** in each team's namespace, named as the team, pointing at its ClusterQueue.

A target's capacity is its nodes times what a node advertises. Nodes: the pool's maximum (an autoscaled pool's
``max``: Kueue admits what the autoscaler can add nodes for; a fixed pool's count), a host group's BMC-managed hosts
(``baremetal.hosts``). What a node advertises depends on what makes its GPUs allocatable: the device plugin's MIG
strategy (the cluster's, :func:`gpufleet.kube.gpu_software.aks_mig_strategy`; AKS's own for a managed pool): ``single``
advertises each MIG instance as ``nvidia.com/gpu``, ``mixed`` as ``nvidia.com/mig-<profile>`` beside the whole GPUs'
``nvidia.com/gpu``; time-slicing or MPS multiply ``nvidia.com/gpu`` by their replicas; a DRA target's claims count
against the logical resources of Kueue's ``deviceClassMappings`` (:data:`gpufleet.kube.dra.KUEUE_RESOURCES`).

AMD Instinct targets advertise what AMD's device plugin names (:mod:`gpufleet.kube.amd_resources`: ``amd.com/gpu``
under the cluster's ``single`` naming strategy, ``amd.com/<compute>_<nps>`` under ``mixed``). Each vendor's flavors
and resources form their own resource group of the ClusterQueues: a flavor lists only its vendor's resources, so a
workload asking for ``amd.com/gpu`` is offered AMD flavors only and one asking for ``nvidia.com/gpu`` NVIDIA ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.kube import amd_resources
from gpufleet.kube.dra import GPU_CLASS, KUEUE_RESOURCES, MANAGED_BY, MIG_CLASS
from gpufleet.kube.gpu_software import (
    CONTAINER_WORKLOAD,
    GPU_OPERATOR_CHART,
    aks_mig_strategy,
    baremetal_mig_strategy,
    toleration,
)
from gpufleet.kube.labels import (
    AKS_SPOT_TAINT,
    DCM_PROFILE_LABEL,
    GPU_MODEL_LABEL,
    HOST_GROUP_LABEL,
    MIG_CONFIG_LABEL,
    POOL_LABEL,
)
from gpufleet.mig.outputs import advertised

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpufleet.plan.model import AmdPartitionPlan, HostGroupPlan, MigPlan, PoolPlan, StackPlan
    from gpufleet.spec.models import Team

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_QUEUE = "gpufleet"  # the ClusterQueue of a stack without teams
VENDORS = ("nvidia", "amd")  # the resource groups' order
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # the API server sets it on every namespace: its name


@dataclass(frozen=True)
class Flavor:
    """A pool's or host group's nodes as Kueue sees them: how to reach them, and what they hold."""

    target: str  # the pool or host group
    node_labels: dict[str, str]
    tolerations: tuple[str, ...]  # taints Kueue tolerates for the pods it admits (``key[=value]:Effect``)
    node_taints: tuple[str, ...]  # taints a workload must tolerate itself to get this flavor
    nodes: int
    per_node: dict[str, int]  # resource -> count a node advertises
    vendor: str = "nvidia"  # whose GPUs: its resource group

    @property
    def name(self) -> str:
        return self.target.replace("_", "-")

    @property
    def quota(self) -> dict[str, int]:
        """The target's capacity: resource -> count on all its nodes."""
        return {resource: count * self.nodes for resource, count in self.per_node.items()}

    def manifest(self, api: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"nodeLabels": dict(sorted(self.node_labels.items()))}
        if self.node_taints:
            spec["nodeTaints"] = [_taint(t) for t in self.node_taints]
        if self.tolerations:
            spec["tolerations"] = [toleration(t) for t in self.tolerations]
        return {
            "apiVersion": api,
            "kind": "ResourceFlavor",
            "metadata": {"name": self.name, "labels": dict(MANAGED_BY)},
            "spec": spec,
        }


@dataclass(frozen=True)
class Skipped:
    """A GPU target without a flavor, and why."""

    target: str
    why: str


def _taint(text: str) -> dict[str, str]:
    spec, _, effect = text.rpartition(":")
    key, eq, value = spec.partition("=")
    return {"key": key, **({"value": value} if eq else {}), "effect": effect}


def mig_resources(mig: MigPlan, strategy: str | None, replicas: int) -> dict[str, int]:
    """What a MIG node's device plugin advertises under ``strategy`` (``replicas``: GPU sharing's, on nvidia.com/gpu,
    the one name gpufleet's sharing configs list)."""
    out = advertised(mig.instances_per_node or {}, mig.whole_gpus or 0, strategy)
    return out | ({GPU_RESOURCE: out[GPU_RESOURCE] * replicas} if GPU_RESOURCE in out else {})


def dra_resources(gpus: int, mig: MigPlan | None) -> dict[str, int]:
    """What a DRA node's claims count against: Kueue's logical resource of each DeviceClass (dra.KUEUE_RESOURCES)."""
    if mig is None:
        return {KUEUE_RESOURCES[GPU_CLASS]: gpus}
    out = {KUEUE_RESOURCES[MIG_CLASS]: sum((mig.instances_per_node or {}).values())}
    return out | ({KUEUE_RESOURCES[GPU_CLASS]: mig.whole_gpus} if mig.whole_gpus else {})


def pool_resources(pool: PoolPlan, strategy: str | None) -> dict[str, int]:
    """What one node of ``pool`` advertises (``strategy``: the cluster device plugin's MIG strategy)."""
    gpus = int(pool.gpus_per_node) if pool.gpu_partition is None else 1  # a GPU fraction is one device to the plugin
    if pool.advertiser == "dra":
        return dra_resources(gpus, pool.mig)
    replicas = pool.sharing.replicas or 1
    if pool.mig is None:
        return {GPU_RESOURCE: gpus * replicas}
    if pool.gpu_management == "managed":  # AKS's own device plugin, with the pool's strategy
        strategy = pool.mig.strategy
    return mig_resources(pool.mig, strategy, replicas)


def amd_skip(target: str, advertiser: str) -> Skipped | None:
    """Why an AMD target gets no flavor (None: it gets one)."""
    if advertiser == "none":
        return Skipped(target, "advertiser none: its GPUs are not allocatable")
    if advertiser == "dra":
        return Skipped(target, "AMD's DRA driver (DeviceClass gpu.amd.com) has no Kueue deviceClassMapping in gpufleet")
    return None


def amd_pool_flavor(pool: PoolPlan, strategy: amd_resources.NamingStrategy) -> Flavor | Skipped:
    """An AMD pool's flavor: its nodes advertise what AMD's device plugin names under the cluster's strategy."""
    if (skip := amd_skip(pool.name, pool.advertiser)) is not None:
        return skip
    per_node = amd_resources.node_resources(pool.amd_partitions, int(pool.gpus_per_node), strategy)
    if not per_node:
        return Skipped(pool.name, "its nodes' AMD GPU count is not known: quota unknown")
    keys = (POOL_LABEL, GPU_MODEL_LABEL, DCM_PROFILE_LABEL)  # the profile where the plan labels the pool with it
    return Flavor(
        target=pool.name,
        node_labels={key: pool.labels[key] for key in keys if key in pool.labels},
        tolerations=tuple(t for t in pool.taints if t != AKS_SPOT_TAINT),
        node_taints=tuple(t for t in pool.taints if t == AKS_SPOT_TAINT),
        nodes=pool.nodes.max,
        per_node={k: v for k, v in per_node.items() if v},
        vendor="amd",
    )


def pool_flavor(pool: PoolPlan, strategy: str | None) -> Flavor | Skipped:
    if pool.advertiser == "none":
        return Skipped(pool.name, "advertiser none: its GPUs are not allocatable")
    labels = {key: pool.labels[key] for key in (POOL_LABEL, GPU_MODEL_LABEL, MIG_CONFIG_LABEL) if key in pool.labels}
    return Flavor(
        target=pool.name,
        node_labels=labels,
        tolerations=tuple(t for t in pool.taints if t != AKS_SPOT_TAINT),
        node_taints=tuple(t for t in pool.taints if t == AKS_SPOT_TAINT),
        nodes=pool.nodes.max,
        per_node={k: v for k, v in pool_resources(pool, strategy).items() if v},
    )


def amd_group_flavor(group: HostGroupPlan, gpus: int, hosts: int, strategy: amd_resources.NamingStrategy
                     ) -> Flavor | Skipped:  # fmt: skip
    """An AMD host group's flavor: ``hosts`` nodes of ``gpus`` GPUs, advertised as AMD's device plugin names them."""
    if (skip := amd_skip(group.name, group.advertiser)) is not None:
        return skip
    from gpufleet.catalog import load_catalog

    partitionable = group.gpu_model is not None and load_catalog().gpu(group.gpu_model).partitions is not None
    per_node = amd_resources.node_resources(group.amd_partitions, gpus, strategy, partitionable=partitionable)
    if not per_node:
        return Skipped(group.name, "its hosts' AMD partitions are not known per GPU: quota unknown")
    return Flavor(
        target=group.name,
        node_labels={HOST_GROUP_LABEL: group.name},
        tolerations=(),
        node_taints=(),
        nodes=hosts,
        per_node={k: v for k, v in per_node.items() if v},
        vendor="amd",
    )


def group_flavor(plan: StackPlan, group: HostGroupPlan, strategy: str | None, chart: str,
                 amd_strategy: amd_resources.NamingStrategy = "single") -> Flavor | Skipped:  # fmt: skip
    """A host group's flavor: its nodes are its BMC-managed hosts; a host's GPUs the group's count, else the host's
    expected count (``amd_strategy``: the AMD device plugin's naming strategy, for an AMD group)."""
    if group.advertiser == "none":
        return Skipped(group.name, "advertiser none: its GPUs are not allocatable")
    if group.gpu_workload not in (None, CONTAINER_WORKLOAD):
        return Skipped(group.name, f"its GPUs go to VMs ({group.gpu_workload}), not to containers")
    hosts = [h for h in plan.baremetal.hosts if h.host_group == group.name] if plan.baremetal else []
    counts = {group.gpus_per_host or h.expected.gpu_count for h in hosts}
    if not hosts or None in counts or len(counts) != 1:
        why = "no BMC-managed hosts (baremetal.hosts) to count" if not hosts else "its hosts' GPU count is not known"
        return Skipped(group.name, why + ": quota unknown")
    (gpus,) = counts
    assert gpus is not None
    if group.vendor == "amd":
        return amd_group_flavor(group, gpus, len(hosts), amd_strategy)
    if group.advertiser == "dra":
        per_node = dra_resources(gpus, group.mig)
    elif group.mig is not None and group.mig.instances_per_node is not None:
        per_node = mig_resources(group.mig, strategy, 1)
    else:
        per_node = {GPU_RESOURCE: gpus}
    return Flavor(
        target=group.name,
        node_labels={HOST_GROUP_LABEL: group.name, **group.node_labels[chart]},
        tolerations=(),
        node_taints=(),
        nodes=len(hosts),
        per_node={k: v for k, v in per_node.items() if v},
    )


def split(total: int, weights: list[int]) -> list[int]:
    """``total`` in proportion to ``weights``, in whole numbers that add up to it (largest remainder; a tie goes to the
    earlier share)."""
    whole = sum(weights)
    shares = [total * w // whole for w in weights]
    rest = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in rest[: total - sum(shares)]:
        shares[i] += 1
    return shares


@dataclass(frozen=True)
class Queue:
    """A team's ClusterQueue (``namespace``: where its LocalQueue lives; None: the stack's one queue, open to every
    namespace, without a LocalQueue)."""

    name: str
    namespace: str | None
    cohort: str | None
    weight: int = 1


@dataclass(frozen=True)
class KueuePlan:
    """A stack's queues: the flavors of its GPU targets, the teams' queues, and the targets left out."""

    api: str
    flavors: tuple[Flavor, ...]
    queues: tuple[Queue, ...]
    skipped: tuple[Skipped, ...] = ()

    def groups(self) -> list[tuple[list[str], list[Flavor]]]:
        """The ClusterQueues' resource groups, one per vendor with resources: (coveredResources, whole GPUs first;
        that vendor's flavors). Kueue needs each flavor to list every resource of its group, so keeping the vendors
        apart keeps NVIDIA's resources out of AMD's flavors and back."""
        out = []
        for vendor in VENDORS:
            flavors = [f for f in self.flavors if f.vendor == vendor]
            found = dict.fromkeys(r for f in flavors for r in f.per_node)
            whole = (GPU_RESOURCE, amd_resources.AMD_GPU_RESOURCE)
            if found:
                out.append((sorted(found, key=lambda r: (r not in whole, r)), flavors))
        return out

    @property
    def resources(self) -> list[str]:
        """The resources the flavors hold (each group's, whole GPUs first), the ClusterQueues' coveredResources."""
        return [r for covered, _ in self.groups() for r in covered]

    def quotas(self) -> dict[str, dict[str, dict[str, int]]]:
        """queue -> flavor -> resource -> nominal quota: each flavor's capacity split by the queues' weights."""
        out: dict[str, dict[str, dict[str, int]]] = {q.name: {} for q in self.queues}
        weights = [q.weight for q in self.queues]
        for covered, flavors in self.groups():
            for flavor in flavors:
                for q in self.queues:
                    out[q.name][flavor.name] = {}
                for resource in covered:
                    shares = split(flavor.quota.get(resource, 0), weights)
                    for q, share in zip(self.queues, shares, strict=True):
                        out[q.name][flavor.name][resource] = share
        return out

    def cluster_queue(self, queue: Queue, quotas: dict[str, dict[str, int]]) -> dict[str, Any]:
        groups = [
            {
                "coveredResources": covered,
                "flavors": [
                    {"name": f.name, "resources": [{"name": r, "nominalQuota": quotas[f.name][r]} for r in covered]}
                    for f in flavors
                ],
            }
            for covered, flavors in self.groups()
        ]
        selector: dict[str, Any] = {}
        if queue.namespace is not None:
            selector = {"matchLabels": {NAMESPACE_NAME_LABEL: queue.namespace}}
        spec: dict[str, Any] = {"namespaceSelector": selector}
        if queue.cohort is not None:
            spec["cohortName"] = queue.cohort
            # lent quota comes back: a team's pending workloads preempt what others borrowed from it
            spec["preemption"] = {"reclaimWithinCohort": "Any"}
        if groups:
            spec["resourceGroups"] = groups
        return {
            "apiVersion": self.api,
            "kind": "ClusterQueue",
            "metadata": {"name": queue.name, "labels": dict(MANAGED_BY)},
            "spec": spec,
        }

    def local_queue(self, queue: Queue) -> dict[str, Any]:
        return {
            "apiVersion": self.api,
            "kind": "LocalQueue",
            "metadata": {"name": queue.name, "namespace": queue.namespace, "labels": dict(MANAGED_BY)},
            "spec": {"clusterQueue": queue.name},
        }

    def objects(self) -> list[dict[str, Any]]:
        """ResourceFlavors, ClusterQueues, LocalQueues: in the order Kueue needs them."""
        quotas = self.quotas()
        out = [f.manifest(self.api) for f in self.flavors]
        out += [self.cluster_queue(q, quotas[q.name]) for q in self.queues]
        out += [self.local_queue(q) for q in self.queues if q.namespace is not None]
        return out


def team_queues(teams: tuple[Team, ...]) -> tuple[Queue, ...]:
    if not teams:
        return (Queue(DEFAULT_QUEUE, None, None),)
    return tuple(Queue(t.name, t.queue_namespace, t.cohort, t.weight) for t in teams)


def amd_strategy(targets: Iterable[tuple[AmdPartitionPlan | None, str]]) -> amd_resources.NamingStrategy:
    """The AMD device plugin's naming strategy from the cluster's AMD targets (partitions, advertiser): over those
    the AMD GPU Operator serves (every advertiser but none), as its DeviceConfig is written
    (gpufleet.kube.amd_operator)."""
    return amd_resources.naming_strategy(parts for parts, advertiser in targets if advertiser != "none")


def kueue_plan(plan: StackPlan, baremetal_chart: str = GPU_OPERATOR_CHART) -> KueuePlan | None:
    """The queues of a stack's cluster: its AKS GPU pools, else its bare-metal host groups with GPUs (the cluster
    ``gpufleet render`` renders, ``baremetal_chart``: the one whose role labels the hosts); None without GPUs."""
    from gpufleet.catalog.releases import load_releases

    found: list[Flavor | Skipped]
    if plan.cluster is not None:
        strategy = aks_mig_strategy(plan.pools)
        amd = amd_strategy((p.amd_partitions, p.advertiser) for p in plan.pools if p.vendor == "amd")
        found = [amd_pool_flavor(p, amd) if p.vendor == "amd" else pool_flavor(p, strategy) for p in plan.pools]
    else:
        groups = [g for g in plan.host_groups if g.gpu_model is not None]
        strategy = baremetal_mig_strategy(groups)
        amd = amd_strategy((g.amd_partitions, g.advertiser) for g in groups if g.vendor == "amd")
        found = [group_flavor(plan, g, strategy, baremetal_chart, amd) for g in groups]
    if not found:
        return None
    return KueuePlan(
        api=load_releases().kueue.api,
        flavors=tuple(f for f in found if isinstance(f, Flavor)),
        queues=team_queues(plan.teams),
        skipped=tuple(f for f in found if isinstance(f, Skipped)),
    )
