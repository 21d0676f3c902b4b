"""The MIG planner: exact placements on one GPU, every maximal layout of a model, and fleet-wide packing.

Pure functions over the catalog (:mod:`gpufleet.catalog`), no I/O.

Placement rules (NVIDIA MIG User Guide, "Supported MIG Profiles"): an instance occupies ``memory_slices``
consecutive memory slices starting at one of its profile's allowed starts; instances never overlap on the
memory-slice axis; their compute slices add up to at most the GPU's; at most ``media_extension_instances``
instances carry media extensions (+me). ``check`` searches every placement exhaustively (a few hundred nodes at
most), so it never wrongly rejects a layout a greedy left-to-right placement would miss (3 x 1g.20gb + 2 x 1g.10gb
on an H100 needs a 1g.20gb at start 6). For NVIDIA's 7x8 and 4x4 geometries every multiset within the max counts
and the slice sums has a placement (the tests check this exhaustively); the search finds it, and keeps the
planner right for a geometry where sums are not enough.

Packing covers a demand (instances per profile, per GPU model) with as few GPUs as possible: the linear
relaxation over maximal layouts gives a proven lower bound (its optimum, rounded up); its solution rounded down,
plus an exact branch-and-bound for the remainder, gives the packing. Small demands are solved exactly by the
same branch-and-bound.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from gpufleet.catalog import Gpu, MigGeometry, MigProfile
from gpufleet.diagnostics import did_you_mean

Layout = tuple[tuple[str, int], ...]  # ((profile, count), ...), largest instances first


class MigError(ValueError):
    """A request the planner cannot serve (a GPU without MIG, a profile of another model...)."""


@dataclass(frozen=True)
class Placement:
    profile: str
    start: int  # first memory slice
    size: int  # memory slices
    compute_slices: int

    def to_dict(self) -> dict[str, object]:
        return {"profile": self.profile, "start": self.start, "size": self.size}


@dataclass(frozen=True)
class CheckResult:
    """Whether a multiset of instances fits one GPU; the placement when it does, the reason when it does not."""

    gpu: str
    fits: bool
    placements: tuple[Placement, ...] = ()
    reason: str | None = None
    # when it does not fit for lack of room: the largest subset that was placed, and what was left over
    partial: tuple[Placement, ...] = ()
    unplaced: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "fits": self.fits,
            "placements": [p.to_dict() for p in self.placements],
            "reason": self.reason,
        }


def _layout(counts: Mapping[str, int], geometry: MigGeometry) -> Layout:
    """A canonical layout: largest instances first (``3g.40gb x2 + 1g.10gb``)."""

    def key(item: tuple[str, int]) -> tuple[int, int, bool, str]:
        p = geometry.by_name[item[0]]
        return (-p.compute_slices, -p.memory_slices, p.media_extensions, p.name)

    return tuple(sorted(((n, c) for n, c in counts.items() if c), key=key))


def layout_str(layout: Layout) -> str:
    return " + ".join(f"{name} x{count}" if count > 1 else name for name, count in layout)


# -- one GPU: exact placement --------------------------------------------------------------------------------


def _unknown_profile(gpu: Gpu, name: str, owners: Sequence[str]) -> str:
    assert gpu.mig is not None
    where = f" (it is a profile of {', '.join(owners)})" if owners else ""
    return f"{name!r} is not a MIG profile of {gpu.name}{where}; " + did_you_mean(name, gpu.mig.by_name, limit=20)


def _search(instances: Sequence[MigProfile], geometry: MigGeometry) -> tuple[list[int] | None, list[int]]:
    """Depth-first search of start positions; returns (starts, best partial starts). Identical consecutive
    instances take increasing starts, so permutations of equal instances are not searched twice."""
    n = len(instances)
    starts: list[int] = [-1] * n
    best: list[int] = []

    def place(i: int, used: int) -> bool:
        nonlocal best
        if i == n:
            return True
        prof = instances[i]
        lower = starts[i - 1] if i and instances[i - 1].name == prof.name else -1
        for s in prof.starts:
            if s <= lower:
                continue
            mask = ((1 << prof.memory_slices) - 1) << s
            if s + prof.memory_slices <= geometry.memory_slices and not used & mask:
                starts[i] = s
                if i + 1 > len(best):
                    best = starts[: i + 1]
                if place(i + 1, used | mask):
                    return True
        starts[i] = -1
        return False

    return (list(starts) if place(0, 0) else None), best


def check(
    gpu: Gpu, profiles: Mapping[str, int] | Iterable[str], owners: Mapping[str, Sequence[str]] | None = None
) -> CheckResult:
    """Does this multiset of instances fit one ``gpu``? ``profiles`` maps profile -> count (or lists names).

    ``owners`` optionally names, per unknown profile, the models that have it (for the message)."""
    counts = Counter(profiles) if not isinstance(profiles, Mapping) else Counter(dict(profiles))
    if gpu.mig is None:
        return CheckResult(gpu.name, False, reason=f"{gpu.name} ({gpu.architecture}) has no MIG")
    geometry = gpu.mig
    for name, count in counts.items():
        if count < 0:
            return CheckResult(gpu.name, False, reason=f"{name}: a count is at least 0, not {count}")
        prof = geometry.profile(name)
        if prof is None:
            return CheckResult(gpu.name, False, reason=_unknown_profile(gpu, name, (owners or {}).get(name, ())))
        if count > prof.max_count:
            return CheckResult(
                gpu.name, False, reason=f"at most {prof.max_count} x {name} fit one {gpu.name}, not {count}"
            )
    chosen = [(geometry.by_name[n], c) for n, c in counts.items() if c]
    desc = layout_str(_layout(counts, geometry))
    # Largest first (fewest starts first among equals): the search fails fast on impossible layouts.
    instances = sorted(
        (p for p, c in chosen for _ in range(c)), key=lambda p: (-p.memory_slices, len(p.starts), p.name)
    )
    starts, best = _search(instances, geometry)
    placed = starts if starts is not None else best
    partial = tuple(
        Placement(p.name, s, p.memory_slices, p.compute_slices) for p, s in zip(instances, placed, strict=False)
    )
    unplaced = tuple(p.name for p in instances[len(placed) :])

    def refuse(reason: str) -> CheckResult:
        return CheckResult(gpu.name, False, reason=reason, partial=partial, unplaced=unplaced)

    compute = sum(p.compute_slices * c for p, c in chosen)
    if compute > geometry.compute_slices:
        return refuse(f"{desc} need {compute} compute slices; one {gpu.name} has {geometry.compute_slices}")
    memory = sum(p.memory_slices * c for p, c in chosen)
    if memory > geometry.memory_slices:
        return refuse(f"{desc} need {memory} memory slices; one {gpu.name} has {geometry.memory_slices}")
    media = sum(c for p, c in chosen if p.media_extensions)
    if media > geometry.media_extension_instances:
        return refuse(
            f"{desc} ask for {media} instances with media extensions; one {gpu.name} has media engines"
            f" for {geometry.media_extension_instances}"
        )
    if starts is None:
        done = ", ".join(f"{p.profile}@{p.start}" for p in partial) or "nothing"
        return refuse(
            f"{desc} cannot be placed without overlapping memory slices: after {done}, no allowed start is free"
            f" for {unplaced[0]} (starts {geometry.by_name[unplaced[0]].placement})"
        )
    return CheckResult(gpu.name, True, tuple(sorted(partial, key=lambda p: p.start)))


def diagram(gpu: Gpu, result: CheckResult) -> list[str]:
    """The memory slices of one GPU with each instance's span, e.g. for ``3g.40gb x2 + 1g.10gb``::

    memory slice   0   1   2   3   4   5   6   7
    3g.40gb       [==============]
    3g.40gb                       [==============]
    1g.10gb       no free start in {0,1,2,3,4,5,6}:1
    """
    assert gpu.mig is not None
    geometry = gpu.mig
    width = max([len("memory slice"), *(len(p.profile) for p in (*result.partial, *result.placements))]) + 2
    width = max(width, *(len(n) + 2 for n in result.unplaced)) if result.unplaced else width
    lines = [" " * width + "".join(f"{i:<4}" for i in range(geometry.memory_slices)).rstrip()]
    lines[0] = "memory slice".ljust(width) + lines[0][width:]
    for p in result.placements or result.partial:
        bar = "[" + "=" * (4 * p.size - 3) + "]"
        lines.append(p.profile.ljust(width) + " " * (4 * p.start) + bar)
    for name in result.unplaced:
        lines.append(name.ljust(width) + f"no free start in {geometry.by_name[name].placement}")
    used = sum(p.compute_slices for p in (result.placements or result.partial))
    used += sum(geometry.by_name[n].compute_slices for n in result.unplaced)
    lines.append(f"compute slices: {used} of {geometry.compute_slices}")
    return lines


# -- one model: every layout ---------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def feasible_layouts(gpu: Gpu) -> tuple[Layout, ...]:
    """Every non-empty multiset of instances that fits one ``gpu`` (a few hundred at most)."""
    if gpu.mig is None:
        raise MigError(f"{gpu.name} has no MIG")
    geometry = gpu.mig
    profiles = geometry.profiles
    found: list[Layout] = []

    def walk(i: int, counts: dict[str, int], compute: int, memory: int) -> None:
        if i == len(profiles):
            if counts and check(gpu, counts).fits:
                found.append(_layout(counts, geometry))
            return
        prof = profiles[i]
        for c in range(prof.max_count + 1):
            cc, mm = compute + c * prof.compute_slices, memory + c * prof.memory_slices
            if cc > geometry.compute_slices or mm > geometry.memory_slices:
                break
            if c:
                counts[prof.name] = c
            walk(i + 1, counts, cc, mm)
            counts.pop(prof.name, None)

    walk(0, {}, 0, 0)
    return tuple(found)


def _dominates(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    return a != b and all(a.get(k, 0) >= v for k, v in b.items())


def maximal_layouts(gpu: Gpu, only: Iterable[str] | None = None) -> tuple[Layout, ...]:
    """Layouts to which no further instance can be added (restricted to the profiles in ``only``)."""
    return _maximal(gpu, frozenset(only) if only is not None else None)


@lru_cache(maxsize=512)
def _maximal(gpu: Gpu, only: frozenset[str] | None) -> tuple[Layout, ...]:
    layouts = [lay for lay in feasible_layouts(gpu) if only is None or all(name in only for name, _ in lay)]
    as_dicts = [dict(lay) for lay in layouts]
    return tuple(
        lay for lay, d in zip(layouts, as_dicts, strict=True) if not any(_dominates(other, d) for other in as_dicts)
    )


# -- fleet packing -------------------------------------------------------------------------------------------


def _lp_min_cover(patterns: Sequence[Sequence[int]], demand: Sequence[int]) -> tuple[float, list[float], list[float]]:
    """min sum(x) s.t. sum_j patterns[j][i] * x_j >= demand[i], x >= 0, solved as its dual
    (max d.y s.t. patterns[j].y <= 1, y >= 0) by the simplex method with Bland's rule. Returns the optimum,
    the primal x (read from the dual's reduced costs) and the dual y."""
    m, n = len(demand), len(patterns)
    eps = 1e-9
    # rows: one per pattern; columns: y_0..y_{m-1}, slack_0..slack_{n-1}, rhs
    rows = [
        [float(patterns[j][i]) for i in range(m)] + [1.0 if k == j else 0.0 for k in range(n)] + [1.0] for j in range(n)
    ]
    obj = [-float(d) for d in demand] + [0.0] * n + [0.0]
    basis = [m + j for j in range(n)]
    while True:
        col = next((c for c in range(m + n) if obj[c] < -eps), None)
        if col is None:
            break
        best_row, best_ratio = None, math.inf
        for r in range(n):
            a = rows[r][col]
            if a > eps:
                ratio = rows[r][-1] / a
                tie = best_row is not None and abs(ratio - best_ratio) <= eps and basis[r] < basis[best_row]
                if ratio < best_ratio - eps or tie:
                    best_row, best_ratio = r, ratio
        if best_row is None:  # unbounded dual: some demanded profile is in no pattern
            raise MigError("a demanded profile fits no layout")
        pivot = rows[best_row]
        pv = pivot[col]
        pivot[:] = [v / pv for v in pivot]
        for r in range(n):
            if r != best_row and rows[r][col] != 0.0:
                f = rows[r][col]
                rows[r] = [a - f * b for a, b in zip(rows[r], pivot, strict=True)]
        f = obj[col]
        obj[:] = [a - f * b for a, b in zip(obj, pivot, strict=True)]
        basis[best_row] = col
    x = [max(obj[m + j], 0.0) for j in range(n)]
    y = [0.0] * m
    for r, col in enumerate(basis):
        if col < m:
            y[col] = rows[r][-1]
    return obj[-1], x, y


class _Bounds:
    """Lower bounds on the GPUs covering a (sub-)demand.

    Every dual solution y of the covering LP satisfies patterns[j].y <= 1 whatever the demand, so d.y bounds the
    LP optimum of *any* demand d (weak duality). Keeping the duals of the LPs solved so far makes most bounds an
    O(profiles) product; the LP itself runs only when none of them settles the question."""

    def __init__(self, patterns: Sequence[Sequence[int]]) -> None:
        self.patterns = patterns
        self.most = [max(p[i] for p in patterns) for i in range(len(patterns[0]))]
        self.duals: list[list[float]] = []

    def lp(self, demand: Sequence[int]) -> tuple[float, list[float]]:
        value, x, y = _lp_min_cover(self.patterns, demand)
        self.duals = [y, *self.duals[:15]]
        return value, x

    def lower(self, demand: Sequence[int], at_most: int | None = None) -> int:
        """GPUs any cover of ``demand`` needs (the LP optimum rounded up). With ``at_most``, cheaper valid bounds
        are returned as soon as one exceeds it (the caller only asks "more than at_most?")."""
        if not any(demand):
            return 0
        if at_most is not None:
            cheap = max(math.ceil(d / self.most[i]) for i, d in enumerate(demand) if d)
            for y in self.duals:
                cheap = max(cheap, math.ceil(sum(d * v for d, v in zip(demand, y, strict=True)) - 1e-7))
            if cheap > at_most:
                return cheap
        value, _ = self.lp(demand)
        return math.ceil(value - 1e-7)


def _rounded_cover(
    patterns: Sequence[Sequence[int]], demand: Sequence[int], x: Sequence[float]
) -> tuple[list[int], tuple[int, ...]]:
    """The LP solution rounded down, and the demand it leaves uncovered."""
    base = [math.floor(v + 1e-9) for v in x]
    chosen = [j for j, k in enumerate(base) for _ in range(k)]
    covered = [sum(patterns[j][i] * base[j] for j in range(len(patterns))) for i in range(len(demand))]
    return chosen, tuple(max(d - c, 0) for d, c in zip(demand, covered, strict=True))


def _greedy_cover(patterns: Sequence[Sequence[int]], demand: Sequence[int]) -> list[int]:
    """Repeatedly the pattern covering the most remaining instances."""
    rest, chosen = list(demand), []
    while any(rest):
        j = max(range(len(patterns)), key=lambda j: sum(min(a, r) for a, r in zip(patterns[j], rest, strict=True)))
        chosen.append(j)
        rest = [max(r - a, 0) for r, a in zip(rest, patterns[j], strict=True)]
    return chosen


def _min_gpus(bounds: _Bounds, demand: tuple[int, ...], order: Sequence[int], incumbent: list[int]) -> list[int]:
    """Fewest patterns covering ``demand`` (exact), by branch and bound from a known cover: branch on the
    patterns covering the demanded profile listed first in ``order``, bound by the LP relaxation. Stops as soon
    as the cover meets the LP bound."""
    patterns = bounds.patterns
    best = list(incumbent)
    bound = bounds.lower(demand)
    seen: dict[tuple[int, ...], int] = {}

    def dfs(d: tuple[int, ...], chosen: list[int]) -> bool:
        nonlocal best
        if not any(d):
            best = list(chosen)
            return len(best) <= bound  # proven optimal: stop
        room = len(best) - 1 - len(chosen)
        if seen.get(d, math.inf) <= len(chosen) or bounds.lower(d, at_most=room) > room:
            return False
        seen[d] = len(chosen)
        i = next(i for i in order if d[i] > 0)
        candidates = [j for j in range(len(patterns)) if patterns[j][i] > 0]
        candidates.sort(key=lambda j: -sum(min(a, r) for a, r in zip(patterns[j], d, strict=True)))
        for j in candidates:
            chosen.append(j)
            done = dfs(tuple(max(r - a, 0) for r, a in zip(d, patterns[j], strict=True)), chosen)
            chosen.pop()
            if done:
                return True
        return False

    if len(best) > bound:
        dfs(demand, [])
    return best


def _fewer_layouts(
    bounds: _Bounds, demand: tuple[int, ...], order: Sequence[int], incumbent: list[int], budget: int
) -> tuple[list[int], bool]:
    """A cover with as many patterns as ``incumbent`` but fewer distinct ones, searched within ``budget``
    nodes. Returns the best cover and whether the search finished (then the distinct count is proven)."""
    patterns = bounds.patterns
    gpus = len(incumbent)
    best, best_distinct = list(incumbent), len(set(incumbent))
    nodes = 0

    def dfs(d: tuple[int, ...], chosen: list[int], used: frozenset[int]) -> None:
        nonlocal best, best_distinct, nodes
        nodes += 1
        if nodes > budget or best_distinct == 1:
            return
        if not any(d):
            if len(used) < best_distinct:
                best, best_distinct = list(chosen), len(used)
            return
        room = gpus - len(chosen)
        if len(used) + 1 > best_distinct or bounds.lower(d, at_most=room) > room:
            return
        i = next(i for i in order if d[i] > 0)
        # a new pattern is taken as a whole block of copies: with it, try the most copies first
        for j in sorted(
            (j for j in range(len(patterns)) if patterns[j][i] > 0 and j not in used),
            key=lambda j: -sum(min(a, r) for a, r in zip(patterns[j], d, strict=True)),
        ):
            most = gpus - len(chosen)
            for k in range(most, 0, -1):
                rest = tuple(max(r - a * k, 0) for r, a in zip(d, patterns[j], strict=True))
                dfs(rest, chosen + [j] * k, used | {j})
                if nodes > budget:
                    return

    dfs(demand, [], frozenset())
    return best, nodes <= budget


@dataclass
class ModelPack:
    """The packing of one GPU model's demand."""

    gpu: str
    demand: dict[str, int]
    layouts: list[tuple[Layout, int]]  # (layout, GPUs using it), most used first
    gpus: int
    lower_bound: int
    spare: dict[str, int]  # instances created beyond the demand (the layouts are maximal)
    layouts_proven: bool = True  # whether no packing on as many GPUs uses fewer distinct layouts

    @property
    def gap(self) -> int:
        return self.gpus - self.lower_bound


@dataclass
class FleetPack:
    models: list[ModelPack] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return sum(m.gpus for m in self.models)

    @property
    def lower_bound(self) -> int:
        return sum(m.lower_bound for m in self.models)

    @property
    def gap(self) -> int:
        return self.gpus - self.lower_bound


def pack_model(
    gpu: Gpu, demand: Mapping[str, int], exact_below: int = 64, layout_search_nodes: int = 2000
) -> ModelPack:
    """Cover ``demand`` (profile -> instances) with the fewest GPUs of one model, then the fewest layouts.

    GPUs: demands whose lower bound is below ``exact_below`` GPUs are solved exactly; larger ones are the LP
    solution rounded down plus an exact cover of the remainder, within a few GPUs of the bound. Layouts: with
    the GPU count fixed, a search of at most ``layout_search_nodes`` nodes looks for fewer distinct layouts;
    ``ModelPack.layouts_proven`` says whether it finished."""
    if gpu.mig is None:
        raise MigError(f"{gpu.name} ({gpu.architecture}) has no MIG")
    for name, count in demand.items():
        if gpu.mig.profile(name) is None:
            raise MigError(_unknown_profile(gpu, name, ()))
        if count < 0:
            raise MigError(f"{name}: a demand is at least 0, not {count}")
    wanted = [p.name for p in gpu.mig.profiles if demand.get(p.name, 0) > 0]
    if not wanted:
        return ModelPack(gpu.name, {}, [], 0, 0, {})
    layouts = list(maximal_layouts(gpu, wanted))
    patterns = [[dict(lay).get(name, 0) for name in wanted] for lay in layouts]
    d = tuple(demand[name] for name in wanted)
    # branch on the biggest instances first: they have the fewest ways to be placed
    order = sorted(range(len(wanted)), key=lambda i: -gpu.mig.by_name[wanted[i]].memory_slices)

    bounds = _Bounds(patterns)
    value, x = bounds.lp(d)
    lower = math.ceil(value - 1e-7)
    rounded, residual = _rounded_cover(patterns, d, x)
    if any(residual):
        rounded += _min_gpus(bounds, residual, order, _greedy_cover(patterns, residual))
    chosen = _min_gpus(bounds, d, order, rounded) if lower < exact_below else rounded
    chosen, layouts_proven = _fewer_layouts(bounds, d, order, chosen, budget=layout_search_nodes)
    uses = Counter(chosen)
    made = Counter()
    for j, k in uses.items():
        for i, name in enumerate(wanted):
            made[name] += patterns[j][i] * k
    spare = {name: made[name] - demand[name] for name in wanted if made[name] > demand[name]}
    return ModelPack(
        gpu=gpu.name,
        demand={name: demand[name] for name in wanted},
        layouts=[(layouts[j], k) for j, k in uses.most_common()],
        gpus=len(chosen),
        lower_bound=lower,
        spare=spare,
        layouts_proven=layouts_proven,
    )


def pack(demands: Sequence[tuple[Gpu, Mapping[str, int]]]) -> FleetPack:
    """Pack each model's demand (models never share a GPU)."""
    merged: dict[str, tuple[Gpu, Counter[str]]] = {}
    for gpu, demand in demands:
        merged.setdefault(gpu.name, (gpu, Counter()))[1].update(demand)
    return FleetPack([pack_model(gpu, counts) for gpu, counts in merged.values()])


# -- sizing by memory ----------------------------------------------------------------------------------------

GIB_PER_GB = 1e9 / 2**30


def usable_gib(gpu: Gpu, profile: MigProfile) -> tuple[float, bool]:
    """Usable memory of an instance, and whether it is published (True) or estimated (False).

    Estimate, where NVIDIA publishes no figure: the model's lowest published GiB per memory slice times the
    profile's slices, or, with no published figure at all, the GB in the profile's name converted to GiB."""
    if profile.usable_gib is not None:
        return profile.usable_gib, True
    assert gpu.mig is not None
    known = [p.usable_gib / p.memory_slices for p in gpu.mig.profiles if p.usable_gib is not None]
    if known:
        return round(min(known) * profile.memory_slices, 2), False
    nominal = float(profile.name.split(".")[1].split("gb")[0])
    return round(nominal * GIB_PER_GB, 2), False


def profile_for_memory(gpu: Gpu, min_gib: float) -> MigProfile:
    """The cheapest profile (fewest memory slices, then compute slices; no media extensions) whose usable
    memory is at least ``min_gib``."""
    if gpu.mig is None:
        raise MigError(f"{gpu.name} ({gpu.architecture}) has no MIG")
    fitting = [p for p in gpu.mig.profiles if not p.media_extensions and usable_gib(gpu, p)[0] >= min_gib]
    if not fitting:
        largest = max(usable_gib(gpu, p)[0] for p in gpu.mig.profiles)
        raise MigError(f"no MIG instance of {gpu.name} has {min_gib:g} GiB usable; the largest has {largest:g} GiB")
    return min(fitting, key=lambda p: (p.memory_slices, p.compute_slices))
