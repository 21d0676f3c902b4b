"""Fleet packing of an AMD Instinct partition demand (``gpufleet amd pack``): logical GPUs per compute x memory pair
on the fewest GPUs and nodes, each node's layout as a Device Config Manager profile.

The arithmetic, and why it is optimal for the demand as resolved to pairs:

- a GPU runs one pair and gives that pair's logical GPUs (CPX: 8), so a pair demanding ``c`` logical GPUs needs
  ``ceil(c / logical)`` GPUs and no fewer: the GPU bound, which the packing meets pair by pair;
- the memory (NPS) mode applies to the whole node (the driver sets it hive-wide), so GPUs of different NPS modes never
  share a node, while compute modes may mix on a node of one NPS mode: an NPS mode's GPUs ``G`` need
  ``ceil(G / gpus_per_node)`` nodes and no fewer (with ``mix_compute: false``, each pair its own nodes): the node
  bound, which filling the nodes of each NPS mode in turn meets;
- a memory demand (``memory_gib``) takes the smallest partition that holds it (the most logical GPUs per GPU: the
  fewest GPUs), and among the NPS modes that partition runs with, the choice with the fewest nodes, then GPUs, then
  AMD's documented and DCM's pairs (every combination is tried when there are at most :data:`EXHAUSTIVE` of them).

The GPUs a node's last group leaves are free: skipped in its profile (DCM's ``skippedGPUs``), left as they are.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufleet.mig.amd_partitions import dcm_config, dcm_problems, dcm_profile, layout_problems

if TYPE_CHECKING:
    from gpufleet.catalog import AmdPartitionPair, Gpu
    from gpufleet.spec.models import AmdPartitions

# The most NPS-mode combinations of a model's memory demands tried one by one; beyond, each demand takes the best mode
# given the ones before it.
EXHAUSTIVE = 4096


@dataclass(frozen=True)
class FlexibleDemand:
    """``count`` logical GPUs with at least some memory each: the packer runs them as one of ``candidates`` (pairs of
    one compute mode, each holding the memory, the preferred first), ``label`` says what was asked."""

    count: int
    candidates: tuple[AmdPartitionPair, ...]
    label: str


@dataclass(frozen=True)
class AmdDemand:
    """One model's demand: logical GPUs per pair (``CPX+NPS4``) and by memory, on nodes of ``gpus_per_node`` GPUs;
    ``mix_compute``: whether compute modes may share a node (of one NPS mode)."""

    gpu: Gpu
    gpus_per_node: int
    partitions: Mapping[str, int] = field(default_factory=dict)
    flexible: tuple[FlexibleDemand, ...] = ()
    mix_compute: bool = True


@dataclass(frozen=True)
class PairGpus:
    """A pair's logical GPUs demanded and the GPUs that run them (``spare``: logical GPUs made beyond the demand)."""

    pair: AmdPartitionPair
    partitions: int
    gpus: int

    @property
    def spare(self) -> int:
        return self.gpus * self.pair.logical_gpus - self.partitions


@dataclass(frozen=True)
class NodeProfile:
    """One node layout of a packing and how many nodes get it: per compute mode its GPUs (``groups``, in GPU order),
    the GPUs left ``free`` (the last ones, skipped), the layout as a stack writes it (``managed_by: operator`` when
    AMD's Device Config Manager applies it, else ``host``, with ``dcm_reasons``)."""

    name: str
    memory: str
    groups: tuple[tuple[str, int], ...]
    free: int
    nodes: int
    layout: AmdPartitions
    dcm_reasons: tuple[str, ...]

    @property
    def dcm(self) -> bool:
        return not self.dcm_reasons


@dataclass(frozen=True)
class AmdModelPack:
    """A model's packing with the bounds it meets."""

    gpu: str
    gpus_per_node: int
    mix_compute: bool
    pairs: tuple[PairGpus, ...]
    profiles: tuple[NodeProfile, ...]
    gpus_lower_bound: int
    nodes_lower_bound: int
    notes: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pairs)

    @property
    def nodes(self) -> int:
        return sum(p.nodes for p in self.profiles)

    @property
    def free_gpus(self) -> int:
        return sum(p.free * p.nodes for p in self.profiles)

    @property
    def optimal(self) -> bool:
        return self.gpus == self.gpus_lower_bound and self.nodes == self.nodes_lower_bound


@dataclass(frozen=True)
class AmdFleetPack:
    models: tuple[AmdModelPack, ...]

    @property
    def gpus(self) -> int:
        return sum(m.gpus for m in self.models)

    @property
    def nodes(self) -> int:
        return sum(m.nodes for m in self.models)

    @property
    def gpus_lower_bound(self) -> int:
        return sum(m.gpus_lower_bound for m in self.models)

    @property
    def nodes_lower_bound(self) -> int:
        return sum(m.nodes_lower_bound for m in self.models)

    @property
    def free_gpus(self) -> int:
        return sum(m.free_gpus for m in self.models)

    @property
    def optimal(self) -> bool:
        return all(m.optimal for m in self.models)

    def dcm_config(self) -> dict[str, Any]:
        """DCM's ``config.json`` with every profile it applies (the others are the ``amd_partition`` role's)."""
        return dcm_config(
            {p.name: dcm_profile(p.layout, m.gpus_per_node) for m in self.models for p in m.profiles if p.dcm}
        )


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def gpus_per_pair(gpu: Gpu, partitions: Mapping[str, int]) -> dict[str, int]:
    """The fewest GPUs per pair (``CPX+NPS4``) for its logical GPUs: ``ceil(count / logical GPUs per GPU)``."""
    assert gpu.partitions is not None
    by_name = {p.name: p for p in gpu.partitions.pairs}
    return {name: _ceil(count, by_name[name].logical_gpus) for name, count in partitions.items() if count}


def nodes_needed(gpu: Gpu, gpus: Mapping[str, int], per_node: int, mix_compute: bool = True) -> int:
    """The fewest nodes of ``per_node`` GPUs for ``gpus`` per pair: GPUs of one NPS mode share nodes (each pair
    alone without ``mix_compute``), never GPUs of two."""
    return sum(_ceil(n, per_node) for n in _by_class(gpu, gpus, mix_compute).values())


def _by_class(gpu: Gpu, gpus: Mapping[str, int], mix_compute: bool) -> dict[str, int]:
    """GPUs per node class: NPS mode (``mix_compute``), else pair; in the catalog's order of pairs."""
    assert gpu.partitions is not None
    classes: Counter[str] = Counter()
    for pair in gpu.partitions.pairs:
        if gpus.get(pair.name):
            classes[pair.memory if mix_compute else pair.name] += gpus[pair.name]
    return dict(classes)


def _resolve(demand: AmdDemand) -> tuple[Counter[str], list[str]]:
    """Logical GPUs per pair once each memory demand has its NPS mode, and a note per memory demand."""
    fixed = Counter({k: v for k, v in demand.partitions.items() if v})
    flexible = demand.flexible
    if not flexible:
        return fixed, []

    def cost(choice: Sequence[int]) -> tuple[int, int, int]:
        counts = fixed.copy()
        for want, i in zip(flexible, choice, strict=True):
            counts[want.candidates[i].name] += want.count
        gpus = gpus_per_pair(demand.gpu, counts)
        nodes = nodes_needed(demand.gpu, gpus, demand.gpus_per_node, demand.mix_compute)
        return nodes, sum(gpus.values()), sum(choice)

    ranges = [range(len(want.candidates)) for want in flexible]
    combinations = 1
    for r in ranges:
        combinations *= len(r)
    if combinations <= EXHAUSTIVE:
        best = min(itertools.product(*ranges), key=cost)
    else:  # each in turn, the ones after it at their preferred mode
        chosen: list[int] = [0] * len(flexible)
        for k, r in enumerate(ranges):
            chosen[k] = min(r, key=lambda i, k=k: cost([*chosen[:k], i, *chosen[k + 1 :]]))
        best = tuple(chosen)
    notes = []
    for want, i in zip(flexible, best, strict=True):
        pair = want.candidates[i]
        fixed[pair.name] += want.count
        others = [c.name for c in want.candidates if c is not pair]
        basis = "" if pair.documented else "; the driver's rule, not in AMD's list for the model"
        alt = f"; also holds it: {', '.join(others)}" if others else ""
        notes.append(f"{want.label} -> {pair.name} ({pair.memory_gib:g} GiB each{basis}{alt})")
    return fixed, notes


def _fill(classes: Iterable[tuple[str, list[tuple[str, int]]]], per_node: int) -> list[tuple[str, tuple, int, int]]:
    """Nodes of each class filled in turn, its groups in order: (NPS mode, ((compute, GPUs), ...), free, nodes) per
    distinct node, in order of first use."""
    found: dict[tuple[str, tuple, int], int] = {}

    def emit(memory: str, node: list[tuple[str, int]], free: int, count: int) -> None:
        key = (memory, tuple(node), free)
        found[key] = found.get(key, 0) + count

    for memory, groups in classes:
        node: list[tuple[str, int]] = []
        room = per_node
        for compute, gpus in groups:
            if node:
                take = min(gpus, room)
                node.append((compute, take))
                gpus, room = gpus - take, room - take
                if room == 0:
                    emit(memory, node, 0, 1)
                    node, room = [], per_node
            if gpus >= per_node:
                emit(memory, [(compute, per_node)], 0, gpus // per_node)
            if gpus % per_node:
                node, room = [(compute, gpus % per_node)], per_node - gpus % per_node
        if node:
            emit(memory, node, room, 1)
    return [(memory, node, free, count) for (memory, node, free), count in found.items()]


def _profile(
    gpu: Gpu, memory: str, groups: tuple[tuple[str, int], ...], free: int, nodes: int, per_node: int
) -> NodeProfile:
    """A node layout as a :class:`NodeProfile`, judged by the stack's rules (:func:`layout_problems`)."""
    from gpufleet.spec.models import AmdPartitionGroup, AmdPartitions

    parts = "-".join(f"{compute.lower()}{count}" for compute, count in groups)
    name = f"{gpu.name.lower()}-{memory.lower()}-{parts}" + (f"-free{free}" if free else "")
    devices = [AmdPartitionGroup(compute=compute, gpus=count) for compute, count in groups]
    skipped = list(range(per_node - free, per_node))
    operator = AmdPartitions(managed_by="operator", profile=name, memory=memory, devices=devices, skipped_gpus=skipped)
    reasons = tuple(dict.fromkeys(p.message for p in dcm_problems(operator)))
    layout = operator if not reasons else operator.model_copy(update={"managed_by": "host"})
    problems = layout_problems(gpu, layout, per_node)
    assert not problems, f"the packer made an invalid layout: {problems}"
    return NodeProfile(name, memory, groups, free, nodes, layout, reasons)


def pack_model(demand: AmdDemand) -> AmdModelPack:
    """A model's demand on the fewest GPUs and nodes (module docstring), with its bounds."""
    gpu, per_node = demand.gpu, demand.gpus_per_node
    assert gpu.partitions is not None, "pack_model needs a model with partitions (the demand file's check)"
    counts, notes = _resolve(demand)
    gpus = gpus_per_pair(gpu, counts)
    by_name = {p.name: p for p in gpu.partitions.pairs}
    order = [p.name for p in gpu.partitions.pairs]
    pairs = tuple(PairGpus(by_name[n], counts[n], gpus[n]) for n in sorted(gpus, key=order.index))
    classes: dict[str, list[tuple[str, int]]] = {}
    for p in pairs:
        classes.setdefault(p.pair.memory if demand.mix_compute else p.pair.name, []).append((p.pair.compute, p.gpus))
    memory_of = {p.pair.memory if demand.mix_compute else p.pair.name: p.pair.memory for p in pairs}
    filled = _fill(((memory_of[k], groups) for k, groups in classes.items()), per_node)
    profiles = tuple(_profile(gpu, memory, node, free, count, per_node) for memory, node, free, count in filled)
    if any(p.dcm and len(p.groups) > 1 for p in profiles):
        notes.append(
            "a node of several compute modes is a heterogeneous DCM profile, which AMD does not recommend or support"
            " (docs/dcm/device-config-manager-configmap.md); mix_compute: false gives each pair its own nodes"
        )
    return AmdModelPack(
        gpu=gpu.name,
        gpus_per_node=per_node,
        mix_compute=demand.mix_compute,
        pairs=pairs,
        profiles=profiles,
        gpus_lower_bound=sum(_ceil(c, by_name[n].logical_gpus) for n, c in counts.items() if c),
        nodes_lower_bound=nodes_needed(gpu, gpus, per_node, demand.mix_compute),
        notes=tuple(notes),
    )


def pack(demands: Sequence[AmdDemand]) -> AmdFleetPack:
    """Each model's demand packed (:func:`pack_model`)."""
    return AmdFleetPack(tuple(pack_model(d) for d in demands))
