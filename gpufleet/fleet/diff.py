"""What an edit of stack files does, for a reviewer: ``gpufleet diff``.

Pure over two validated stacks (:func:`diff_stacks`: the stack at a git revision and in the working tree); the git
reads are :func:`base_texts` and :func:`changed_stacks`. Per stack:

- **pools** added, removed, changed field by field. A change AKS cannot apply in place **replaces** the pool: the
  same test the Pulumi program relies on, the pool's AKS name (:func:`gpufleet.azure.aks.aks_pool_name`, a suffix of
  :func:`gpufleet.azure.aks.immutable_fields`) changes, so a new pool is created and the old one, every node
  drained, deleted. Each changed key says whether it alone would replace the pool;
- **host groups** likewise, with what the change does to the hosts: a MIG layout change drains them (the ``mig``
  role reconfigures their GPUs), a change of what feeds the kernel command line (1 GiB hugepages, SR-IOV VFs, CPU
  isolation, GPU VMs' IOMMU) reboots them;
- the **release** pins moved;
- the **GPUs whose MIG layout changes**: on a pool or host group, every GPU whose index has another layout after
  the edit, on every node (the MIG manager applies the layout to each node); with the fewest a repack would change
  for the same instances (``gpufleet mig pack --current``'s :func:`gpufleet.mig.repack.repack_model`) beside it;
- the **cost** per month at each pool's count, before and after (``gpufleet cost``).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from gpufleet.catalog import Catalog
from gpufleet.spec.models import GpuPool, HostGroup, Stack

Change = Literal["added", "removed", "in place", "replace"]
# The tuning profile's keys that feed the kernel command line (gpufleet.host.topology's kernel argument groups:
# 1 GiB hugepages, iommu for SR-IOV VFs, isolcpus/nohz_full/rcu_nocbs on the GPU cores): changing one reboots.
KERNEL_ARG_KEYS = frozenset(
    {"hugepages_1g_per_gpu", "hugepages_1g_per_node", "vfs_per_nic", "sriov_device_classes", "isolation"}
)
KERNEL_ARG_KEYS_WITH_ISOLATION = frozenset({"cores_per_gpu", "reserved_cores"})


class DiffError(ValueError):
    """The diff cannot be made (an unknown revision, a stack absent at the base, an invalid stack); one line."""


class UnknownRevision(DiffError):
    """``--base`` names no commit (a usage error)."""


@dataclass(frozen=True)
class FieldChange:
    key: str  # dotted path in the pool or host group (mig.devices, autoscaling.max)
    before: Any
    after: Any
    replaces: bool = False  # this change alone makes AKS replace the pool

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "before": self.before, "after": self.after, "replaces": self.replaces}


@dataclass(frozen=True)
class MigChange:
    """GPUs whose MIG layout an edit changes: ``gpus`` as the new layout applies it (every node), ``repack`` the
    fewest a repack of the same instances would change (None: not comparable, e.g. the node count changes too)."""

    gpus: int
    repack: int | None


@dataclass(frozen=True)
class PoolChange:
    name: str
    change: Change
    fields: tuple[FieldChange, ...] = ()
    aks_name_before: str | None = None
    aks_name_after: str | None = None
    mig: MigChange | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "change": self.change,
            "fields": [f.to_dict() for f in self.fields],
            "aks_name_before": self.aks_name_before,
            "aks_name_after": self.aks_name_after,
            "mig_gpus_changed": None if self.mig is None else self.mig.gpus,
        }


@dataclass(frozen=True)
class HostGroupChange:
    name: str
    change: Literal["added", "removed", "in place"]
    fields: tuple[FieldChange, ...] = ()
    effects: tuple[str, ...] = ()  # "drains" (MIG layout), "reboots" (kernel command line)
    mig: MigChange | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "change": self.change,
            "fields": [f.to_dict() for f in self.fields],
            "effects": list(self.effects),
            "mig_gpus_changed": None if self.mig is None else self.mig.gpus,
        }


@dataclass(frozen=True)
class StackDiff:
    stack: str
    file: str
    status: Literal["changed", "added", "unchanged"]
    pools: tuple[PoolChange, ...] = ()
    host_groups: tuple[HostGroupChange, ...] = ()
    release_before: dict[str, Any] = field(default_factory=dict)  # the pins that moved, before
    release_after: dict[str, Any] = field(default_factory=dict)
    other: tuple[FieldChange, ...] = ()  # everything else the edit changes (cluster settings, teams...)
    usd_month_before: Decimal | None = None
    usd_month_after: Decimal | None = None
    unpriced: tuple[str, ...] = ()  # pools left out of the cost (no price), before or after

    @property
    def replaced(self) -> list[PoolChange]:
        return [p for p in self.pools if p.change == "replace"]

    @property
    def gpus_changed(self) -> int:
        return sum(c.mig.gpus for c in (*self.pools, *self.host_groups) if c.mig is not None)

    @property
    def delta(self) -> Decimal | None:
        if self.usd_month_before is None or self.usd_month_after is None:
            return None
        return self.usd_month_after - self.usd_month_before

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "pools": [p.to_dict() for p in self.pools],
            "host_groups": [g.to_dict() for g in self.host_groups],
            "release": {"before": self.release_before, "after": self.release_after},
            "mig": {"gpus_changed": self.gpus_changed},
            "cost": {
                "before_usd_month": _money(self.usd_month_before),
                "after_usd_month": _money(self.usd_month_after),
                "delta": _money(self.delta),
                "unpriced": list(self.unpriced),
            },
            "file": self.file,
            "status": self.status,
            "other": [f.to_dict() for f in self.other],
        }


def _money(value: Decimal | None) -> float | None:
    return None if value is None else float(value.quantize(Decimal("0.01")))


# -- field by field --------------------------------------------------------------------------------------------


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys; lists and scalars are leaves."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def field_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[FieldChange]:
    """Every dotted key whose value differs, in the order of the keys (before's first)."""
    a, b = _flat(before), _flat(after)
    keys = list(dict.fromkeys([*a, *b]))
    return [FieldChange(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json")


# -- pools -----------------------------------------------------------------------------------------------------


def pool_change(before: GpuPool, after: GpuPool, nodes: tuple[int, int], catalog: Catalog) -> PoolChange | None:
    """The change of one pool (None: none). ``nodes``: its node count before and after (for the MIG GPUs)."""
    from gpufleet.azure.aks import aks_pool_name

    changes = field_changes(_dump(before), _dump(after))
    if not changes:
        return None
    name_before, name_after = aks_pool_name(before), aks_pool_name(after)
    top = dict.fromkeys(c.key.split(".", 1)[0] for c in changes)
    alone = {
        key: aks_pool_name(before.model_copy(update={key: getattr(after, key)})) != name_before
        for key in top
        if key in type(before).model_fields
    }
    fields = tuple(FieldChange(c.key, c.before, c.after, alone.get(c.key.split(".", 1)[0], False)) for c in changes)
    fields = tuple(sorted(fields, key=lambda f: not f.replaces))  # what replaces the pool first
    mig = _pool_mig(before, after, nodes, catalog)
    change: Change = "replace" if name_after != name_before else "in place"
    return PoolChange(before.name, change, fields, name_before, name_after, mig)


def _node_layouts(mig: Any, gpus: int, gpu: Any) -> tuple[Any, ...]:
    """Each GPU's layout on a node of ``gpus`` GPUs: a mig-parted layout's (:func:`gpufleet.mig.outputs.
    node_layouts`), AKS-managed MIG's one profile filling every GPU (:func:`gpufleet.mig.outputs.aks_instances`), or
    none (``()``: MIG off)."""
    from gpufleet.mig.outputs import aks_instances, node_layouts
    from gpufleet.mig.placement import as_layout
    from gpufleet.spec.models import AksManagedMig

    if isinstance(mig, AksManagedMig):
        return tuple(as_layout(aks_instances(gpu, mig.profile, 1), gpu.mig) for _ in range(gpus))
    if mig is not None:
        return node_layouts(mig, gpus, gpu)
    return tuple(() for _ in range(gpus))


def _pool_mig(before: GpuPool, after: GpuPool, nodes: tuple[int, int], catalog: Catalog) -> MigChange | None:
    if before.mig == after.mig or before.vm_size != after.vm_size:
        return None  # no layout change, or a new pool (a replacement: every GPU is new anyway)
    size = catalog.vm_size(before.vm_size)
    if size is None or size.gpu_count < 1:
        return None
    gpu, gpus = catalog.gpu(size.gpu), int(size.gpu_count)
    return mig_change(gpu, _node_layouts(before.mig, gpus, gpu), _node_layouts(after.mig, gpus, gpu), nodes)


def mig_change(gpu: Any, before: Sequence[Any], after: Sequence[Any], nodes: tuple[int, int]) -> MigChange:
    """GPUs whose index gets another layout, on every node that stays; and the repack's fewest for the same
    instances on the same nodes (when the node count stays)."""
    from gpufleet.mig.repack import FleetGpu, repack_model

    kept = min(nodes)
    per_node = sum(1 for b, a in zip(before, after, strict=True) if b != a)
    repack = None
    if nodes[0] == nodes[1] and gpu.mig is not None and kept:
        fleet = [FleetGpu(f"node-{n}", i, layout) for n in range(kept) for i, layout in enumerate(before)]
        demand: Counter[str] = Counter()
        for layout in after:
            for profile, count in layout:
                demand[profile] += count * kept
        try:
            repack = repack_model(gpu, fleet, demand).changed
        except ValueError:  # a layout the repack cannot start from (MIG off on some GPUs of a mixed node)
            repack = None
    return MigChange(per_node * kept, repack)


# -- host groups -----------------------------------------------------------------------------------------------


def _tuning(stack: Stack, group: HostGroup) -> dict[str, Any]:
    profile = stack.tuning_profile(group.tuning_profile)
    return _dump(profile) if profile is not None else {}


def host_group_change(
    before: HostGroup, after: HostGroup, stacks: tuple[Stack, Stack], hosts: int, catalog: Catalog
) -> HostGroupChange | None:
    """The change of one host group (None: none): its fields, the resolved tuning profile's, and their effect."""
    changes = field_changes(_dump(before), _dump(after))
    tuning = field_changes(_tuning(stacks[0], before), _tuning(stacks[1], after))
    changes += [FieldChange(f"tuning.{c.key}", c.before, c.after) for c in tuning]
    if not changes:
        return None
    effects = []
    mig = None
    if before.mig != after.mig:
        effects.append("drains")
        n = before.gpus_per_host
        gpu = catalog.gpu(before.gpu_model) if before.gpu_model else None
        same_gpus = (after.gpu_model, after.gpus_per_host) == (before.gpu_model, n)
        if gpu is not None and gpu.mig is not None and n and same_gpus:
            mig = mig_change(gpu, _node_layouts(before.mig, n, gpu), _node_layouts(after.mig, n, gpu), (hosts, hosts))
    isolation = bool(_tuning(stacks[1], after).get("isolation") or _tuning(stacks[0], before).get("isolation"))
    keys = KERNEL_ARG_KEYS | (KERNEL_ARG_KEYS_WITH_ISOLATION if isolation else frozenset())
    if any(c.key.removeprefix("tuning.").split(".")[0] in keys for c in tuning) or before.gpu_vms != after.gpu_vms:
        effects.append("reboots")
    return HostGroupChange(before.name, "in place", tuple(changes), tuple(effects), mig)


# -- a stack ---------------------------------------------------------------------------------------------------


def _by_name(items: Iterable[Any]) -> dict[str, Any]:
    return {item.name: item for item in items}


def _cost(stack: Stack, catalog: Catalog) -> tuple[Decimal | None, tuple[str, ...]]:
    """The stack's node pools at their count per month, as ``gpufleet cost`` totals them (:func:`gpufleet.azure.cost.
    totals`): pools without a price are left out and named with their size (None: no AKS pool has a price)."""
    from gpufleet.azure.cost import stack_cost

    if stack.aks is None:
        return None, ()
    cost = stack_cost(stack, catalog)
    return cost.totals.per_month_now, tuple(f"{p.name} ({p.vm_size})" for p in cost.pools if not p.priced)


def diff_stacks(
    before: Stack | None, after: Stack, file: str, catalog: Catalog, hosts: Mapping[str, int] | None = None
) -> StackDiff:
    """What changes from ``before`` (None: the stack is new) to ``after``. ``hosts``: hosts per host group (for
    the MIG GPU counts of host groups)."""
    hosts = hosts or {}
    if before is None:
        pools = tuple(PoolChange(p.name, "added") for p in (after.aks.gpu_pools if after.aks else ()))
        groups = tuple(
            HostGroupChange(g.name, "added") for g in (after.baremetal.host_groups if after.baremetal else ())
        )
        cost, unpriced = _cost(after, catalog)
        return StackDiff(after.name, file, "added", pools, groups, {}, _dump(after.release), (), None, cost, unpriced)
    b_pools = _by_name(before.aks.gpu_pools if before.aks else ())
    a_pools = _by_name(after.aks.gpu_pools if after.aks else ())
    pools = _paired(b_pools, a_pools, PoolChange, lambda b, a: pool_change(b, a, _counts(b, a), catalog))
    order = {"replace": 0, "removed": 1, "added": 2, "in place": 3}
    pools.sort(key=lambda c: order[c.change])
    groups = _paired(
        _by_name(before.baremetal.host_groups if before.baremetal else ()),
        _by_name(after.baremetal.host_groups if after.baremetal else ()),
        HostGroupChange,
        lambda b, a: host_group_change(b, a, (before, after), hosts.get(b.name, 0), catalog),
    )
    release = field_changes(_dump(before.release), _dump(after.release))
    other = [
        c
        for c in field_changes(_dump(before), _dump(after))
        if not c.key.startswith(("aks.gpu_pools", "baremetal.host_groups", "release", "tuning_profiles"))
    ]
    status: Literal["changed", "unchanged"] = "changed" if pools or groups or release or other else "unchanged"
    (cost_before, unpriced_before), (cost_after, unpriced_after) = _cost(before, catalog), _cost(after, catalog)
    return StackDiff(
        after.name,
        file,
        status,
        tuple(pools),
        tuple(groups),
        {c.key: c.before for c in release},
        {c.key: c.after for c in release},
        tuple(other),
        cost_before,
        cost_after,
        tuple(dict.fromkeys([*unpriced_before, *unpriced_after])),
    )


def _paired(
    before: Mapping[str, Any], after: Mapping[str, Any], kind: Any, compare: Callable[[Any, Any], Any]
) -> list[Any]:
    """Items matched by name: ``kind(name, "removed")``, ``kind(name, "added")``, or what ``compare`` says of a
    pair (None: no change)."""
    out = []
    for name in dict.fromkeys([*before, *after]):
        if name not in after:
            out.append(kind(name, "removed"))
        elif name not in before:
            out.append(kind(name, "added"))
        elif (change := compare(before[name], after[name])) is not None:
            out.append(change)
    return out


def _counts(before: GpuPool, after: GpuPool) -> tuple[int, int]:
    return (before.count or 0, after.count or 0)


# -- git -------------------------------------------------------------------------------------------------------

DIFF_NEEDS_GIT = "gpufleet diff compares the stack files with a git revision: run it in the project's git repository"


def default_base(root: Path) -> str:
    """The merge base of HEAD with the default branch (origin's HEAD, else main, else master); HEAD when the current
    branch is the default branch itself."""
    from gpufleet.fleet.promote import GitError, git

    candidates = []
    with contextlib.suppress(GitError):
        candidates.append(
            git(root, "symbolic-ref", "--short", "refs/remotes/origin/HEAD", needs=DIFF_NEEDS_GIT).strip()
        )
    candidates += ["origin/main", "main", "origin/master", "master"]
    for ref in candidates:
        try:
            return git(root, "merge-base", "HEAD", ref, needs=DIFF_NEEDS_GIT).strip()
        except GitError:
            continue
    raise DiffError("no default branch (origin/HEAD, main or master) to compare with: give --base REV")


def resolve_base(root: Path, rev: str) -> str:
    """The commit ``rev`` names; DiffError when it names none."""
    from gpufleet.fleet.promote import GitError, git

    try:
        return git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", needs=DIFF_NEEDS_GIT).strip()
    except GitError:
        raise UnknownRevision(f"unknown revision {rev!r}: a branch, tag or commit of this repository") from None


def base_texts(root: Path, commit: str, paths: Iterable[Path]) -> dict[Path, str | None]:
    """Each file (a path as the working tree has it) as it was at ``commit``; None for one that did not exist
    there."""
    from gpufleet.fleet.promote import GitError, git

    top = Path(git(root, "rev-parse", "--show-toplevel", needs=DIFF_NEEDS_GIT).strip()).resolve()
    out: dict[Path, str | None] = {}
    for path in paths:
        try:
            out[path] = git(
                root, "show", f"{commit}:{path.resolve().relative_to(top).as_posix()}", needs=DIFF_NEEDS_GIT
            )
        except GitError:
            out[path] = None
    return out


def changed_stacks(root: Path, commit: str) -> dict[Path, str | None]:
    """The project's stack files that differ from ``commit`` (edited, added, untracked), each with its text there."""
    from gpufleet.spec.files import stack_files

    texts = base_texts(root, commit, stack_files(root))
    return {path: text for path, text in texts.items() if text != path.read_text(encoding="utf-8")}
