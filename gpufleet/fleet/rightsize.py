"""Right-sizing from measured use: what each workload used over a window (:mod:`gpufleet.fleet.usage`), the MIG
slice that would hold it, the pool's new MIG layout and node count, the nodes to drain, and the money saved.

Pure: a valid stack, its plan, the catalog, its cost and a :class:`~gpufleet.fleet.usage.Usage` in, a typed
:class:`Proposal` out; the stack edit (:func:`edit_stack`) is text in, text out. docs/rightsize.md explains the rules;
in short:

- a **workload** is a pod's owner (a Deployment, a StatefulSet, a Job...) in a namespace, on one pool, holding one
  kind of slice (a MIG profile, or whole GPUs). Its memory need is ``max(p95 x (1 + 10 %), max)`` of the framebuffer
  its pods used over the window (the 10 % is ``gpufleet size``'s margin for allocator fragmentation and buffers;
  the max keeps a peak that happened);
- **starved**: its max came within 5 % of the slice's usable memory, or one of its pods waits (Pending) with a GPU
  request; it gets the next larger profile (memory), or more instances of the same (pending pods);
- **over-provisioned**: a smaller plain profile (the catalog's usable memory, as ``mig profiles`` lists it) holds its
  need; it gets that one. Otherwise **right**: it keeps what it has;
- **time-slicing**: a workload whose slices were busy under 25 % of the window on average is a candidate to share
  them (``sharing: time-slicing``, replicas that keep each slice under 50 % busy); said, not applied (sharing is the
  pool's setting, for every workload on it);
- a **pool** (MIG managed by the GPU Operator: one layout for all its nodes) gets the new demand (every workload's
  proposed instances) on the fewest nodes: for N nodes, each node must hold ``ceil(demand / N)`` of each profile,
  and :func:`gpufleet.mig.repack.repack_model` (``mig pack --current``) finds the node layout that changes the fewest
  of the node's GPUs from the layout it has; the smallest N where no GPU must be added wins. Nodes beyond N are
  drained and removed; kept nodes whose GPUs change are drained and reconfigured first.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from gpufleet.catalog import Catalog, Gpu, MigProfile
from gpufleet.fleet.sizing import OVERHEAD_FRACTION
from gpufleet.fleet.usage import SeriesUsage, Usage
from gpufleet.mig.outputs import node_layouts
from gpufleet.mig.placement import Layout
from gpufleet.mig.repack import FleetGpu, ModelRepack, repack_model
from gpufleet.mig.sizing import usable_gib

MIB = 2**20
GB = 1e9
HEADROOM = OVERHEAD_FRACTION  # what a measured need gets on top of its p95 (gpufleet size's margin)
NEAR_LIMIT = 0.95  # a max within 5 % of the slice's usable memory: starved
TIME_SLICING_ACTIVITY = 0.25  # mean engine activity under which a workload could share its slices
TIME_SLICING_TARGET = 0.5  # ... with replicas that keep each slice under this much busy
MAX_REPLICAS = 8
COVERAGE_WARN = 0.9  # a node whose series cover less of the window than this is said to be partly measured

Verdict = Literal["over-provisioned", "right", "starved"]
WHOLE = "whole GPU"

# Kubernetes' random name suffixes use this alphabet (k8s.io/apimachinery/pkg/util/rand): a ReplicaSet is its
# Deployment's name and a pod-template hash (up to 10 of them), its pods the ReplicaSet's name and 5 more.
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_DEPLOYMENT_POD = re.compile(rf"^(?P<name>.+)-[{_ALPHABET}]{{5,10}}-[{_ALPHABET}]{{5}}$")
_REPLICASET = re.compile(rf"^(?P<name>.+)-[{_ALPHABET}]{{5,10}}$")
_STATEFUL_POD = re.compile(r"^(?P<name>.+)-\d+$")


class RightsizeError(ValueError):
    """The measurements cannot be turned into a proposal (nothing measured, a MIG pool without MIG labels, a node the
    stack does not know); the message is one line."""


@dataclass(frozen=True)
class Workload:
    """One workload's use over the window and what rightsize proposes for it."""

    namespace: str
    owner: str  # Kind/name
    pool: str
    gpu: str  # the catalog's GPU model
    has: str  # the MIG profile it holds, or "whole GPU"
    has_gib: float  # usable memory of one of them (the catalog's)
    has_gib_measured: float | None  # the framebuffer the exporter reported for them (used + free; None: not reported)
    instances: int  # held at the window's end
    pods: int  # pods seen over the window
    p95_mib: float
    max_mib: float
    engine_active: float | None
    pending: int  # GPU requests of its pods Pending at the end
    verdict: Verdict
    proposal: str  # the profile (or "whole GPU") it should have
    proposal_gib: float
    proposed_instances: int
    time_slicing_replicas: int | None  # a time-slicing candidate: replicas suggested (None: not one)
    reason: str

    @property
    def need_gib(self) -> float:
        return max(self.p95_mib * (1 + HEADROOM), self.max_mib) / 1024

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "owner": self.owner,
            "pool": self.pool,
            "has": self.has,
            "p95_memory_gb": round(self.p95_mib * MIB / GB, 2),
            "engine_active": None if self.engine_active is None else round(self.engine_active, 3),
            "verdict": self.verdict,
            "proposal": self.proposal,
            "gpu": self.gpu,
            "has_gib": round(self.has_gib, 2),
            "has_gib_measured": None if self.has_gib_measured is None else round(self.has_gib_measured, 2),
            "max_memory_gb": round(self.max_mib * MIB / GB, 2),
            "need_gib": round(self.need_gib, 2),
            "instances": self.instances,
            "proposed_instances": self.proposed_instances,
            "pods": self.pods,
            "pending": self.pending,
            "time_slicing_replicas": self.time_slicing_replicas,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class DrainStep:
    node: str
    action: Literal["reconfigure", "remove"]
    instances_busy: int  # instances held by pods at the window's end (what the drain moves)


@dataclass(frozen=True)
class NodeRange:
    count: int
    min: int | None  # None: no autoscaling
    max: int | None

    def to_dict(self) -> dict[str, int | None]:
        return {"count": self.count, "min": self.min, "max": self.max}

    def __str__(self) -> str:
        return f"{self.count}" if self.min is None else f"{self.count} ({self.min}-{self.max})"


@dataclass(frozen=True)
class PoolProposal:
    """A MIG pool's new layout and size."""

    name: str
    gpu: str
    gpus_per_node: int
    nodes_measured: int  # nodes with series at the window's end
    config_before: str
    config_after: str
    mig_before: tuple[Layout, ...]  # per GPU index of a node
    mig_after: tuple[Layout, ...]
    demand_before: dict[str, int]  # instances held at the end
    demand_after: dict[str, int]  # instances proposed
    nodes_after: int
    range_before: NodeRange
    range_after: NodeRange
    repack: ModelRepack | None  # of one node's GPUs to the per-node demand (None: no node left)
    drains: tuple[DrainStep, ...]
    usd_month_before: Decimal | None
    usd_month_after: Decimal | None
    drifted: tuple[str, ...] = ()  # nodes whose measured instances are not the stack's layout (MIG drift)

    @property
    def gpus_changed_per_node(self) -> int:
        return 0 if self.repack is None else self.repack.changed

    @property
    def gpus_reconfigured(self) -> int:
        kept = min(self.nodes_after, self.nodes_measured)
        return kept * self.gpus_changed_per_node

    @property
    def gpus_freed(self) -> int:
        return (self.nodes_measured - self.nodes_after) * self.gpus_per_node

    @property
    def spare(self) -> dict[str, int]:
        """Instances the pool's new size offers beyond the proposed demand (GPUs the repack left as they are, and
        the rounding up to whole nodes): headroom for growth."""
        supply: Counter[str] = Counter()
        for layout in self.mig_after:
            for profile, count in layout:
                supply[profile] += count * self.nodes_after
        wanted = self.demand_after
        return {p: c - wanted.get(p, 0) for p, c in sorted(supply.items()) if c > wanted.get(p, 0)}

    @property
    def changes(self) -> bool:
        return self.mig_after != self.mig_before or self.range_after != self.range_before

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mig_before": devices(self.mig_before),
            "mig_after": devices(self.mig_after),
            "gpus_freed": self.gpus_freed,
            "drains": [d.node for d in self.drains],
            "gpu": self.gpu,
            "config_before": self.config_before,
            "config_after": self.config_after,
            "demand_before": self.demand_before,
            "demand_after": self.demand_after,
            "nodes_measured": self.nodes_measured,
            "nodes_before": self.range_before.to_dict(),
            "nodes_after": self.range_after.to_dict(),
            "gpus_reconfigured": self.gpus_reconfigured,
            "gpus_changed_per_node": self.gpus_changed_per_node,
            "spare": self.spare,
            "drain_steps": [
                {"node": d.node, "action": d.action, "instances_busy": d.instances_busy} for d in self.drains
            ],
            "usd_month_before": _money(self.usd_month_before),
            "usd_month_after": _money(self.usd_month_after),
            "drifted": list(self.drifted),
        }


@dataclass(frozen=True)
class Proposal:
    stack: str
    window: str
    workloads: tuple[Workload, ...]
    pools: tuple[PoolProposal, ...]
    usd_month_before: Decimal | None  # every node pool of the stack at its count
    usd_month_after: Decimal | None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "window": self.window,
            "workloads": [w.to_dict() for w in self.workloads],
            "pools": [p.to_dict() for p in self.pools],
            "cost": {
                "before_usd_month": _money(self.usd_month_before),
                "after_usd_month": _money(self.usd_month_after),
            },
            "notes": list(self.notes),
        }


def _money(value: Decimal | None) -> float | None:
    return None if value is None else float(value.quantize(Decimal("0.01")))


def devices(layouts: Sequence[Layout]) -> list[dict[str, Any]]:
    """A node's per-GPU layouts in the stack's ``mig.devices`` form: ``gpus: all`` when every GPU has the same one,
    else one group per layout with its GPU indices (GPUs without MIG instances are in none)."""
    groups: dict[Layout, list[int]] = {}
    for index, layout in enumerate(layouts):
        if layout:
            groups.setdefault(layout, []).append(index)
    if len(groups) == 1 and all(layouts):
        return [{"gpus": "all", "profiles": dict(next(iter(groups)))}]
    return [{"gpus": indices, "profiles": dict(layout)} for layout, indices in groups.items()]


def layout_text(layouts: Sequence[Layout]) -> str:
    """``8 x (3g.40gb x2)`` or ``6 x (1g.10gb x7) + 2 x (1g.20gb x4)``."""
    counts = Counter(layouts)
    parts = []
    for layout, n in counts.items():
        inner = " + ".join(f"{p} x{c}" if c > 1 else p for p, c in layout) or "no MIG"
        parts.append(f"{n} x ({inner})")
    return " + ".join(parts)


# -- owners ----------------------------------------------------------------------------------------------------


def owner_of(namespace: str, pod: str, owners: Mapping[tuple[str, str], tuple[str, str]]) -> str:
    """``Kind/name`` of the pod's owner: kube-state-metrics' ``kube_pod_owner`` where it answered (a ReplicaSet is
    named by its Deployment), else Kubernetes' naming of a Deployment's or a StatefulSet's pods, else the pod."""
    kind, name = owners.get((namespace, pod), ("", ""))
    if kind == "ReplicaSet" and (m := _REPLICASET.match(name)):
        return f"Deployment/{m['name']}"
    if kind and name and kind != "<none>":
        return f"{kind}/{name}"
    if m := _DEPLOYMENT_POD.match(pod):
        return f"Deployment/{m['name']}"
    if m := _STATEFUL_POD.match(pod):
        return f"StatefulSet/{m['name']}"
    return f"Pod/{pod}"


def pending_resource(gpu: Gpu, resource: str) -> str | None:
    """The slice a kube-state-metrics GPU request names on ``gpu`` (``nvidia_com_mig_1g_10gb`` -> ``1g.10gb``,
    ``nvidia_com_gpu`` -> whole GPU), None for another resource."""
    if resource == "nvidia_com_gpu":
        return WHOLE
    if resource.startswith("nvidia_com_mig_") and gpu.mig is not None:
        wanted = resource.removeprefix("nvidia_com_mig_")
        for p in gpu.mig.profiles:
            if re.sub(r"[^a-z0-9]", "_", p.name.lower()) == wanted:
                return p.name
    return None


# -- workloads -------------------------------------------------------------------------------------------------


def _plain_profiles(gpu: Gpu) -> list[MigProfile]:
    assert gpu.mig is not None
    return sorted((p for p in gpu.mig.profiles if p.plain), key=lambda p: (p.memory_slices, p.compute_slices))


def _smallest_holding(gpu: Gpu, need_gib: float) -> MigProfile | None:
    return next((p for p in _plain_profiles(gpu) if usable_gib(gpu, p)[0] >= need_gib), None)


def _capacity(gpu: Gpu, has: str) -> float:
    if has == WHOLE or gpu.mig is None:
        return gpu.memory_gib
    profile = gpu.mig.profile(has)
    return usable_gib(gpu, profile)[0] if profile is not None else gpu.memory_gib


def _judge(gpu: Gpu, has: str, p95: float, peak: float, pending: int, instances: int) -> tuple[Verdict, str, int, str]:
    """(verdict, proposed slice, proposed instances, reason)."""
    has_gib = _capacity(gpu, has)
    need = max(p95 * (1 + HEADROOM), peak) / 1024
    if peak / 1024 >= NEAR_LIMIT * has_gib:
        bigger = None
        if gpu.mig is not None and has != WHOLE and (current := gpu.mig.profile(has)) is not None:
            bigger = next((p for p in _plain_profiles(gpu) if p.memory_slices > current.memory_slices), None)
        reason = f"peak {peak / 1024:.1f} GiB of {has_gib:.1f} GiB"
        if bigger is None:
            return "starved", has, instances + pending, reason + ": no larger slice (more GPUs per replica)"
        more = f": {bigger.name} has {_capacity(gpu, bigger.name):.1f}"
        return "starved", bigger.name, instances + pending, reason + more
    if pending:
        return "starved", has, instances + pending, f"{pending} pod request(s) pending for {has}"
    if gpu.mig is not None:
        smaller = _smallest_holding(gpu, need)
        if smaller is not None and usable_gib(gpu, smaller)[0] < has_gib:
            why = f"needs {need:.1f} GiB (p95 {p95 / 1024:.1f} + 10 %, peak {peak / 1024:.1f})"
            holds = f"{smaller.name} holds {_capacity(gpu, smaller.name):.1f}"
            return "over-provisioned", smaller.name, instances, f"{why}: {holds}"
    return "right", has, instances, f"needs {need:.1f} GiB of {has_gib:.1f}"


def _time_slicing(active: float | None) -> int | None:
    if active is None or active >= TIME_SLICING_ACTIVITY:
        return None
    return max(2, min(MAX_REPLICAS, math.floor(TIME_SLICING_TARGET / max(active, 1e-3))))


@dataclass
class _Acc:
    pods: set[str] = field(default_factory=set)
    p95: float = 0.0
    peak: float = 0.0
    active_sum: float = 0.0
    active_weight: int = 0
    instances: int = 0
    pending: int = 0
    capacity_mib: float | None = None


def workloads(
    series: Sequence[SeriesUsage],
    pool_gpus: Mapping[str, Gpu],
    owners: Mapping[tuple[str, str], tuple[str, str]],
    pending: Mapping[tuple[str, str, str], int],
) -> list[Workload]:
    """Every workload of the series (held by a pod), judged. ``pending``: (namespace, owner, slice) -> requests."""
    acc: dict[tuple[str, str, str, str], _Acc] = {}
    for s in series:
        if s.pod is None or s.pool not in pool_gpus:
            continue
        key = (s.namespace or "", owner_of(s.namespace or "", s.pod, owners), s.pool, s.profile or WHOLE)
        a = acc.setdefault(key, _Acc())
        a.pods.add(s.pod)
        a.p95 = max(a.p95, s.p95_mib)
        a.peak = max(a.peak, s.max_mib)
        if s.engine_active is not None and s.samples > 0:
            a.active_sum += s.engine_active * s.samples
            a.active_weight += s.samples
        if s.present:
            a.instances += 1
        if s.capacity_mib is not None:
            a.capacity_mib = max(a.capacity_mib or 0.0, s.capacity_mib)
    for (namespace, owner, has), count in pending.items():
        for key, a in acc.items():
            if key[0] == namespace and key[1] == owner and key[3] == has:
                a.pending += count
                break
    out = []
    for (namespace, owner, pool, has), a in sorted(acc.items()):
        gpu = pool_gpus[pool]
        active = a.active_sum / a.active_weight if a.active_weight else None
        verdict, proposal, proposed, reason = _judge(gpu, has, a.p95, a.peak, a.pending, a.instances)
        out.append(
            Workload(
                namespace=namespace,
                owner=owner,
                pool=pool,
                gpu=gpu.name,
                has=has,
                has_gib=_capacity(gpu, has),
                has_gib_measured=None if a.capacity_mib is None else a.capacity_mib / 1024,
                instances=a.instances,
                pods=len(a.pods),
                p95_mib=a.p95,
                max_mib=a.peak,
                engine_active=active,
                pending=a.pending,
                verdict=verdict,
                proposal=proposal,
                proposal_gib=_capacity(gpu, proposal),
                proposed_instances=proposed,
                time_slicing_replicas=None if verdict == "starved" else _time_slicing(active),
                reason=reason,
            )
        )
    return out


# -- pools -----------------------------------------------------------------------------------------------------


def node_plan(
    gpu: Gpu, layouts: Sequence[Layout], demand: Mapping[str, int], floor: int
) -> tuple[int, ModelRepack | None]:
    """The fewest nodes (at least ``floor``) whose GPUs, each node laid out alike, hold ``demand``, and the repack of
    one node's GPUs (their current ``layouts``) to its share ``ceil(demand / nodes)`` with the fewest GPUs changed."""
    from gpufleet.mig.packing import pack_model

    wanted = {p: c for p, c in demand.items() if c > 0}
    if not wanted:
        return floor, None
    per_node_gpus = len(layouts)
    n = max(floor, 1, math.ceil(pack_model(gpu, wanted).gpus / per_node_gpus))
    fleet = [FleetGpu("node", i, layout) for i, layout in enumerate(layouts)]
    while True:
        share = {p: math.ceil(c / n) for p, c in wanted.items()}
        result = repack_model(gpu, fleet, share)
        if result.added == 0:
            return n, result
        n += 1


def _after_layouts(layouts: Sequence[Layout], repack: ModelRepack | None) -> tuple[Layout, ...]:
    after = list(layouts)
    if repack is not None:
        for change in repack.changes:
            assert change.index is not None
            after[change.index] = change.after
    return tuple(after)


def next_config_name(name: str, taken: set[str]) -> str:
    """The pool's MIG config name for a new layout (the MIG manager reconfigures a node when its label value changes):
    ``name-r2``, then ``-r3``..., never one another pool uses."""
    m = re.match(r"^(?P<base>.+)-r(?P<n>\d+)$", name)
    base, n = (m["base"], int(m["n"]) + 1) if m else (name, 2)
    while True:
        candidate = f"{base[: 63 - len(str(n)) - 2]}-r{n}"
        if candidate not in taken:
            return candidate
        n += 1


def _pool_of_node(node: str, aks_names: Mapping[str, str]) -> str | None:
    """The pool of an AKS node by AKS's naming (``aks-<pool's AKS name>-<number>-vmss<instance>``)."""
    m = re.match(r"^aks-(?P<name>[a-z0-9]+)-\d+-vmss[0-9a-z]+$", node)
    return aks_names.get(m["name"]) if m else None


def _pending_by_workload(usage: Usage, gpus: Sequence[Gpu]) -> dict[tuple[str, str, str], int]:
    out: Counter[tuple[str, str, str]] = Counter()
    for request in usage.pending or ():
        slice_ = next((s for g in gpus if (s := pending_resource(g, request.resource)) is not None), None)
        if slice_ is not None:
            out[(request.namespace, owner_of(request.namespace, request.pod, usage.owners), slice_)] += request.count
    return dict(out)


def _coverage_notes(series: Sequence[SeriesUsage], usage: Usage) -> list[str]:
    expected = usage.window_s / usage.scrape_s
    best: dict[str, int] = {}
    for s in series:
        best[s.node] = max(best.get(s.node, 0), s.samples)
    notes = []
    for node, samples in sorted(best.items()):
        share = samples / expected if expected else 1.0
        if share < COVERAGE_WARN:
            notes.append(
                f"node {node}: measured for {share:.0%} of the {usage.window} window ({samples} samples at "
                f"{usage.scrape_s} s): its figures are what was measured, not extrapolated"
            )
    return notes


def _in_pools(stack: Any, plans: Mapping[str, Any], usage: Usage) -> tuple[list[SeriesUsage], list[str]]:
    """The series of the stack's pools (each with its pool), and what was left out; a workload on a node no pool has
    is refused."""
    from dataclasses import replace

    aks_names = {p.aks_name: name for name, p in plans.items()}
    series: list[SeriesUsage] = []
    strangers: set[str] = set()
    for s in usage.series:
        pool = s.pool if s.pool in plans else _pool_of_node(s.node, aks_names)
        if pool is not None:
            series.append(replace(s, pool=pool))
        elif s.pod is not None:
            raise RightsizeError(
                f"pod {s.namespace}/{s.pod} uses a GPU of node {s.node or '(no node label)'}, which no pool of "
                f"stack {stack.name} has (pool label {s.pool or 'missing'}): is this the stack's Prometheus?"
            )
        else:
            strangers.add(s.node)
    shown = ", ".join(sorted(strangers)[:5])
    notes = [f"{len(strangers)} node(s) outside the stack's pools, without workloads, left out: {shown}"]
    return series, notes if strangers else []


def _check_mig_labels(plans: Mapping[str, Any], gpus: Mapping[str, Gpu], series: Sequence[SeriesUsage]) -> None:
    """A MIG pool's series carry their instance's profile, and it is one of the pool's GPU model."""
    for name, p in plans.items():
        own = [s for s in series if s.pool == name and s.present]
        if p.mig is not None and own and not any(s.profile for s in own):
            raise RightsizeError(
                f"pool {name} runs MIG ({p.mig.config_name or p.mig.gpu_instance_profile}) but its DCGM series (node "
                f"{own[0].node}) carry no GPU_I_PROFILE label: are its GPUs in MIG mode, the exporter per instance?"
            )
    for s in series:
        gpu = gpus.get(s.pool or "")
        if s.profile and gpu is not None and (gpu.mig is None or gpu.mig.profile(s.profile) is None):
            raise RightsizeError(
                f"node {s.node} of pool {s.pool} reports MIG instances {s.profile}, which {gpu.name} (the pool's "
                f"{plans[s.pool or ''].vm_size}) has not: are the stack and this Prometheus about the same cluster?"
            )


def _pool_notes(proposals: Sequence[PoolProposal]) -> list[str]:
    notes = [
        f"pool {pr.name}: {len(pr.drifted)} node(s) do not have the stack's MIG layout now ({pr.drifted[0]}...): the "
        "proposal starts from the stack's layout"
        for pr in proposals
        if pr.drifted
    ]
    return notes + [
        f"pool {pr.name}: {pr.nodes_measured} node(s) measured, the stack says {pr.range_before.count}"
        for pr in proposals
        if pr.nodes_measured != pr.range_before.count
    ]


def propose(stack: Any, plan: Any, catalog: Catalog, cost: Any, usage: Usage) -> Proposal:
    """The proposal for ``stack`` (valid, with its ``plan`` and ``cost``) from what ``usage`` measured. Raises
    :class:`RightsizeError` when the measurements cannot be used."""
    if not usage.series:
        raise RightsizeError(
            f"Prometheus at {usage.url} has no DCGM exporter series (DCGM_FI_DEV_FB_USED) in the {usage.window} "
            "window: is the exporter scraped by this Prometheus, and did the window see the fleet?"
        )
    spec_pools = {p.name: p for p in (stack.aks.gpu_pools if stack.aks is not None else ())}
    plans = {p.name: p for p in plan.pools}
    series, notes = _in_pools(stack, plans, usage)
    nvidia = {name: catalog.gpu(p.gpu_model) for name, p in plans.items() if p.vendor == "nvidia"}
    _check_mig_labels(plans, nvidia, series)
    pending = _pending_by_workload(usage, list(nvidia.values()))
    if usage.pending is None:
        notes.append(
            "kube-state-metrics is not scraped by this Prometheus: pending GPU requests not checked, owners from pod "
            "names"
        )
    found = workloads(series, nvidia, usage.owners, pending)
    held = {(w.namespace, w.owner, w.has) for w in found}
    if waiting := sum(count for key, count in pending.items() if key not in held):
        notes.append(
            f"{waiting} pending GPU request(s) of workloads with no pod on a GPU yet: not in any pool's demand "
            "(no measurement to size them by)"
        )
    notes += _coverage_notes(series, usage)
    proposals = []
    taken = {p.mig.config_name for p in plan.pools if p.mig is not None and p.mig.config_name}
    for name, p in plans.items():
        spec = spec_pools.get(name)
        mine = [w for w in found if w.pool == name]
        if spec is None or name not in nvidia:
            continue
        if p.mig is None or p.mig.managed_by != "operator":
            if any(w.verdict == "over-provisioned" for w in mine):
                how = "AKS-managed MIG gives every GPU one profile" if p.mig is not None else "it has no MIG"
                notes.append(f"pool {name}: {how}; its workloads' proposals are advice, its layout is not edited")
            continue
        proposals.append(_pool_proposal(spec, p, nvidia[name], series, mine, cost, taken))
    before, after, cost_notes = _stack_cost(cost, proposals)
    notes += cost_notes + _pool_notes(proposals)
    return Proposal(stack.name, usage.window, tuple(found), tuple(proposals), before, after, tuple(notes))


def _pool_proposal(
    spec: Any,
    p: Any,
    gpu: Gpu,
    series: Sequence[SeriesUsage],
    mine: Sequence[Workload],
    cost: Any,
    taken: set[str],
) -> PoolProposal:
    gpus = int(p.gpus_per_node)
    layouts = node_layouts(spec.mig, gpus, gpu)
    present = [s for s in series if s.pool == p.name and s.present]
    nodes = sorted({s.node for s in present})
    busy = Counter(s.node for s in present if s.pod is not None)
    planned = Counter(p.mig.instances_per_node or {})  # the plan's instances per node
    drifted = sorted(
        node for node in nodes if Counter(s.profile for s in present if s.node == node and s.profile) != planned
    )
    demand_before = Counter(s.profile for s in present if s.pod is not None and s.profile)
    demand_after: Counter[str] = Counter()
    for w in mine:
        if w.proposal != WHOLE:
            demand_after[w.proposal] += w.proposed_instances
    floor = 0 if spec.scale_to_zero else 1
    n, repack = node_plan(gpu, layouts, demand_after, floor)
    after = _after_layouts(layouts, repack)
    config = spec.mig.config_name
    config_after = config if after == layouts else next_config_name(config, taken)
    taken.add(config_after)
    auto = spec.autoscaling
    count = spec.count or 0
    range_before = NodeRange(count, auto.min if auto else None, auto.max if auto else None)
    range_after = (
        NodeRange(n, n, max(n, auto.max - max(0, count - n))) if auto is not None else NodeRange(n, None, None)
    )
    changed = repack is not None and repack.changed > 0
    # Kept nodes whose GPUs change are drained anyway: keep the least busy (fewest pods moved twice); when nothing
    # changes, keep the busiest (fewest pods moved at all).
    ranked = sorted(nodes, key=lambda node: (busy[node], node) if changed else (-busy[node], node))
    kept, removed = ranked[:n], ranked[n:]
    by_busy = lambda node: (busy[node], node)  # noqa: E731
    drains = [DrainStep(node, "reconfigure", busy[node]) for node in sorted(kept, key=by_busy)] if changed else []
    drains += [DrainStep(node, "remove", busy[node]) for node in sorted(removed, key=by_busy)]
    priced = cost.pool(p.name) if cost is not None else None
    return PoolProposal(
        name=p.name,
        gpu=gpu.name,
        gpus_per_node=gpus,
        nodes_measured=len(nodes),
        config_before=config,
        config_after=config_after,
        mig_before=layouts,
        mig_after=after,
        demand_before=dict(sorted(demand_before.items())),
        demand_after=dict(sorted(demand_after.items())),
        nodes_after=n,
        range_before=range_before,
        range_after=range_after,
        repack=repack,
        drains=tuple(drains),
        usd_month_before=priced.per_month(range_before.count) if priced is not None else None,
        usd_month_after=priced.per_month(range_after.count) if priced is not None else None,
        drifted=tuple(drifted),
    )


def _stack_cost(cost: Any, proposals: Sequence[PoolProposal]) -> tuple[Decimal | None, Decimal | None, list[str]]:
    """The stack's node pools at their count, before and after, as ``gpufleet cost`` totals them
    (:func:`gpufleet.azure.cost.totals`: pools without a price left out and named); None when a pool rightsize
    resizes has no price."""
    from dataclasses import replace

    from gpufleet.azure.cost import totals

    if cost is None:
        return None, None, []
    new = {pr.name: pr.range_after.count for pr in proposals}
    unpriced = [p for p in cost.pools if not p.priced]
    if resized := next((p for p in unpriced if p.name in new), None):
        return None, None, [f"pool {resized.name}: {resized.vm_size} has no price in {cost.region}: no cost figures"]
    after = totals(replace(p, nodes_now=new.get(p.name, p.nodes_now)) for p in cost.pools)
    notes = [f"no price, left out of the cost: {', '.join(f'{p.name} ({p.vm_size})' for p in unpriced)}"]
    return cost.totals.per_month_now, after.per_month_now, notes if unpriced else []


# -- the stack edit --------------------------------------------------------------------------------------------


def edit_stack(text: str, proposals: Sequence[PoolProposal]) -> str:
    """The stack file with each proposal's MIG layout, config name and node counts written in (comments and the rest
    of the file kept); the same text when nothing changes."""
    from io import StringIO

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    changing = [p for p in proposals if p.changes]
    if not changing:
        return text
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    doc = yaml.load(text)
    pools = {item["name"]: item for item in doc["config"]["gpufleet:aks"]["gpu_pools"]}
    for proposal in changing:
        item = pools[proposal.name]
        item["count"] = proposal.range_after.count
        if proposal.range_after.min is not None:
            item["autoscaling"]["min"] = proposal.range_after.min
            item["autoscaling"]["max"] = proposal.range_after.max
        if proposal.mig_after != proposal.mig_before:
            item["mig"]["config_name"] = proposal.config_after
            groups = CommentedSeq()
            for group in devices(proposal.mig_after):
                entry = CommentedMap()
                gpus = group["gpus"]
                if isinstance(gpus, list):
                    gpus = CommentedSeq(gpus)
                    gpus.fa.set_flow_style()
                entry["gpus"] = gpus
                profiles = CommentedMap(group["profiles"])
                profiles.fa.set_flow_style()
                entry["profiles"] = profiles
                groups.append(entry)
            item["mig"]["devices"] = groups
    buffer = StringIO()
    yaml.dump(doc, buffer)
    return buffer.getvalue()
