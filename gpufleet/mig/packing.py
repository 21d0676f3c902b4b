"""Fleet packing: a demand of MIG instances per GPU model on the fewest GPUs, then the fewest distinct layouts, with
the lower bound its linear relaxation proves."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.catalog import Gpu, MigGeometry
from gpufleet.mig.layouts import maximal_layouts
from gpufleet.mig.placement import Layout, MigError, unknown_profile


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


class CoverBounds:
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


def rounded_cover(
    patterns: Sequence[Sequence[int]], demand: Sequence[int], x: Sequence[float]
) -> tuple[list[int], tuple[int, ...]]:
    """The LP solution rounded down, and the demand it leaves uncovered."""
    base = [math.floor(v + 1e-9) for v in x]
    chosen = [j for j, k in enumerate(base) for _ in range(k)]
    covered = [sum(patterns[j][i] * base[j] for j in range(len(patterns))) for i in range(len(demand))]
    return chosen, tuple(max(d - c, 0) for d, c in zip(demand, covered, strict=True))


def greedy_cover(patterns: Sequence[Sequence[int]], demand: Sequence[int]) -> list[int]:
    """Repeatedly the pattern covering the most remaining instances."""
    rest, chosen = list(demand), []
    while any(rest):
        j = max(range(len(patterns)), key=lambda j: sum(min(a, r) for a, r in zip(patterns[j], rest, strict=True)))
        chosen.append(j)
        rest = [max(r - a, 0) for r, a in zip(rest, patterns[j], strict=True)]
    return chosen


def min_cover(bounds: CoverBounds, demand: tuple[int, ...], order: Sequence[int], incumbent: list[int]) -> list[int]:
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
    bounds: CoverBounds, demand: tuple[int, ...], order: Sequence[int], incumbent: list[int], budget: int
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


def check_demand(gpu: Gpu, demand: Mapping[str, int]) -> MigGeometry:
    """The GPU's MIG geometry; :class:`MigError` unless it has MIG and ``demand`` names only its profiles, with
    counts >= 0."""
    if gpu.mig is None:
        raise MigError(f"{gpu.name} ({gpu.architecture}) has no MIG")
    for name, count in demand.items():
        if gpu.mig.profile(name) is None:
            raise MigError(unknown_profile(gpu, name, ()))
        if count < 0:
            raise MigError(f"{name}: a demand is at least 0, not {count}")
    return gpu.mig


def pack_model(
    gpu: Gpu, demand: Mapping[str, int], exact_below: int = 64, layout_search_nodes: int = 2000
) -> ModelPack:
    """Cover ``demand`` (profile -> instances) with the fewest GPUs of one model, then the fewest layouts.

    GPUs: demands whose lower bound is below ``exact_below`` GPUs are solved exactly; larger ones are the LP
    solution rounded down plus an exact cover of the remainder, within a few GPUs of the bound. Layouts: with
    the GPU count fixed, a search of at most ``layout_search_nodes`` nodes looks for fewer distinct layouts;
    ``ModelPack.layouts_proven`` says whether it finished."""
    geometry = check_demand(gpu, demand)
    wanted = [p.name for p in geometry.profiles if demand.get(p.name, 0) > 0]
    if not wanted:
        return ModelPack(gpu.name, {}, [], 0, 0, {})
    layouts = list(maximal_layouts(gpu, wanted))
    patterns = [[dict(lay).get(name, 0) for name in wanted] for lay in layouts]
    d = tuple(demand[name] for name in wanted)
    # branch on the biggest instances first: they have the fewest ways to be placed
    order = sorted(range(len(wanted)), key=lambda i: -geometry.by_name[wanted[i]].memory_slices)

    bounds = CoverBounds(patterns)
    value, x = bounds.lp(d)
    lower = math.ceil(value - 1e-7)
    rounded, residual = rounded_cover(patterns, d, x)
    if any(residual):
        rounded += min_cover(bounds, residual, order, greedy_cover(patterns, residual))
    chosen = min_cover(bounds, d, order, rounded) if lower < exact_below else rounded
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
