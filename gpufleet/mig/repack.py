"""Fleet repack: meet a new MIG demand by changing the layouts of as few GPUs as possible.

A fleet's GPUs each have a MIG layout now. Changing a GPU's layout means draining it (its instances go away
while it is reconfigured), so a repack is judged, per GPU model, lexicographically by

1. the GPUs **added** (only when the fleet is too small: the fewest a packing of the whole demand needs beyond
   the fleet, ``max(0, M - N)`` with M from :func:`gpufleet.mig.pack_model`);
2. the existing GPUs **changed** (given a new layout);
3. the GPUs **used** in total (changed, added, and unchanged GPUs whose instances serve the demand).

An unchanged GPU keeps its layout and contributes its current instances. GPUs the new demand does not need are
**left as they are** (never emptied: emptying one would be a change, that is a drain, for nothing); they are
reported as idle, with their instances as spare capacity. A changed GPU always serves the demand.

Lower bound on the changed GPUs, the larger of two arguments:

- *The LP relaxation* (:func:`_capacity_lp`). Let ``s`` be the demanded instances the whole fleet has now, ``d``
  the demand, ``n_L`` the GPUs with current layout L, and A the GPUs added. Any repack releases ``v_L`` GPUs of
  each layout and gives ``x_P`` GPUs the new layout P (maximal layouts suffice: a smaller one is covered by one),
  so that ``sum_P x_P P - sum_L v_L L >= d - s`` (the new layouts make up for what was missing and for what the
  changed GPUs took away) and ``sum(x) <= sum(v) + A`` (each new layout needs a changed or an added GPU). The
  changed GPUs are ``sum(v) >= sum(x) - A``, so the LP optimum of ``min sum(x)`` over reals, minus A, rounded
  up, is a lower bound.
- *Slack* (:func:`changed_lower_bound`). Take prices ``y >= 0`` on the demanded profiles under which no layout
  is worth more than one GPU (``y.P <= 1``: slice shares, one profile at its max count, the covering LP's
  duals). The new layouts must cover what the unchanged GPUs leave uncovered, so for the set R of changed GPUs
  ``|R| + A >= y.(d - s + sum over R of L_g)``, i.e. ``sum over R of (1 - y.L_g) >= y.(d - s) - A``: each changed
  GPU brings at most its slack ``1 - y.L_g``. At least as many GPUs change as it takes, largest slacks first, to
  reach ``y.(d - s) - A``.

The search: small problems (few choices of how many GPUs of each current layout to change, a demand that fits
on fewer than 64 GPUs) are solved exactly: every number of GPUs to change per current layout, in increasing
total, each tested with an exact cover of what is left; then every choice of the unchanged GPUs to use, fewest
first. Larger ones release what the LP relaxation releases, rounded up, then one GPU at a time (best value under
the LP prices first) until what is left uncovered fits on the released and added GPUs, then give back the
released GPUs the new layouts do not need; ``proven`` says whether the result meets the bound (then no repack
changes fewer GPUs). There the GPUs used (the third criterion) are a greedy's: unchanged GPUs are left idle,
least useful first, while the demand stays covered.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.catalog import Gpu
from gpufleet.mig.layouts import maximal_layouts
from gpufleet.mig.packing import CoverBounds, check_demand, greedy_cover, min_cover, pack_model, rounded_cover
from gpufleet.mig.placement import Layout, MigError, as_layout, check

# Fleets whose current layouts allow at most this many "how many to change per layout" vectors are solved exactly.
EXACT_CHOICES = 1024
EXACT_BELOW_GPUS = 64  # ... and whose demand fits on fewer GPUs than this (covers stay small)
EPS = 1e-7


@dataclass(frozen=True)
class FleetGpu:
    """One GPU of the fleet and the MIG layout it has now (``()``: no instances)."""

    host: str
    index: int
    layout: Layout


@dataclass(frozen=True)
class GpuChange:
    """A GPU given a new layout: an existing one (drained and reconfigured) or an added one (``host`` None)."""

    host: str | None
    index: int | None
    before: Layout
    after: Layout
    serves: dict[str, int]  # the demanded instances its new layout provides


@dataclass
class ModelRepack:
    """The repack of one GPU model."""

    gpu: str
    demand: dict[str, int]
    fleet: int  # existing GPUs
    changes: list[GpuChange]  # existing GPUs given a new layout
    additions: list[GpuChange]  # GPUs to add (the fleet is too small)
    unchanged_used: int  # unchanged GPUs whose instances serve the demand
    idle: list[FleetGpu]  # unchanged GPUs the demand does not need (left as they are)
    lower_bound: int  # changed GPUs any repack needs (see the module docstring)
    proven: bool  # whether no repack changes fewer GPUs (exact search, or the bound is met)
    shortfall: dict[str, int]  # demanded instances the fleet lacks as it is
    surplus: dict[str, int]  # instances the fleet has as it is beyond the demand
    spare: dict[str, int] = field(default_factory=dict)  # instances beyond the demand after the repack

    @property
    def changed(self) -> int:
        return len(self.changes)

    @property
    def added(self) -> int:
        return len(self.additions)

    @property
    def unchanged(self) -> int:
        return self.fleet - self.changed

    @property
    def used(self) -> int:
        return self.changed + self.added + self.unchanged_used


@dataclass
class FleetRepack:
    models: list[ModelRepack] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(m.changed for m in self.models)

    @property
    def added(self) -> int:
        return sum(m.added for m in self.models)

    @property
    def unchanged(self) -> int:
        return sum(m.unchanged for m in self.models)

    @property
    def lower_bound(self) -> int:
        return sum(m.lower_bound for m in self.models)

    @property
    def proven(self) -> bool:
        return all(m.proven for m in self.models)


Vec = tuple[int, ...]


def _vec(layout: Layout, wanted: Sequence[str]) -> Vec:
    counts = dict(layout)
    return tuple(counts.get(name, 0) for name in wanted)


def _slack_bound(prices: Sequence[float], classes: Sequence[tuple[Vec, int]], gap: float) -> int | None:
    """Fewest GPUs whose slacks ``1 - y.L`` (largest first) add up to ``gap``; None when all of them do not."""
    if gap <= EPS:
        return 0
    slacks = sorted(
        ((1.0 - sum(p * c for p, c in zip(prices, vec, strict=True)), n) for vec, n in classes), reverse=True
    )
    total, count = 0.0, 0
    for slack, n in slacks:
        if slack <= EPS:
            break
        need = math.ceil((gap - total) / slack - EPS)
        if need <= n:
            return count + max(need, 1)
        total += slack * n
        count += n
    return None


def changed_lower_bound(
    prices: Sequence[Sequence[float]], classes: Sequence[tuple[Vec, int]], demand: Vec, added: int
) -> int:
    """The most GPUs that must change under any of ``prices`` (each dual feasible: ``y.P <= 1`` for every layout
    P); see the module docstring for the argument. ``classes`` are (demanded instances of a current layout, GPUs
    with it)."""
    supply = [sum(vec[i] * n for vec, n in classes) for i in range(len(demand))]
    best = 0
    for y in prices:
        gap = sum(p * (d - s) for p, d, s in zip(y, demand, supply, strict=True)) - added
        bound = _slack_bound(y, classes, gap)
        if bound is not None:
            best = max(best, bound)
    return best


class _Model:
    """One model's repack problem: the current layouts (classes), the demand, the covering machinery."""

    def __init__(self, gpu: Gpu, classes: list[tuple[Layout, int]], demand: dict[str, int], added: int) -> None:
        assert gpu.mig is not None
        self.gpu = gpu
        self.wanted = [p.name for p in gpu.mig.profiles if demand.get(p.name, 0) > 0]
        self.demand: Vec = tuple(demand[name] for name in self.wanted)
        self.layouts = [lay for lay, _ in classes]
        self.vecs = [_vec(lay, self.wanted) for lay, _ in classes]
        self.counts = [n for _, n in classes]
        self.added = added
        self.patterns_layouts = list(maximal_layouts(gpu, self.wanted))
        patterns = [list(_vec(lay, self.wanted)) for lay in self.patterns_layouts]
        self.bounds = CoverBounds(patterns)
        self.order = sorted(range(len(self.wanted)), key=lambda i: -gpu.mig.by_name[self.wanted[i]].memory_slices)
        self.prices: list[list[float]] = []
        self._seen_prices: set[tuple[float, ...]] = set()
        self.lp_bound = 0  # changed GPUs the capacity LP proves (set by the greedy)
        self._covers: dict[tuple[Vec, bool], list[int]] = {}

    def residual(self, released: Sequence[int], kept_only: Sequence[int] | None = None) -> Vec:
        """The demand the unchanged GPUs leave uncovered when ``released[k]`` GPUs of each class change (or, with
        ``kept_only``, when only those unchanged GPUs serve)."""
        kept = kept_only if kept_only is not None else [n - v for n, v in zip(self.counts, released, strict=True)]
        return tuple(
            max(d - sum(vec[i] * k for vec, k in zip(self.vecs, kept, strict=True)), 0)
            for i, d in enumerate(self.demand)
        )

    def lp(self, r: Vec) -> tuple[float, list[float]]:
        """The covering LP's value for ``r`` and its dual prices (kept for the lower bound)."""
        if not any(r):
            return 0.0, [0.0] * len(r)
        value, _ = self.bounds.lp(r)
        y = self.bounds.duals[0]
        self._keep_prices(y)
        return value, y

    def _keep_prices(self, y: Sequence[float]) -> None:
        """Keep a dual solution for the slack bound (each distinct one once)."""
        key = tuple(round(v, 9) for v in y)
        if key not in self._seen_prices:
            self._seen_prices.add(key)
            self.prices.append(list(y))

    def cover(self, r: Vec, exact: bool) -> list[int]:
        """Patterns covering ``r``: the fewest (exact), or the LP solution rounded down plus an exact cover of the
        rest (within a few GPUs of the LP bound) above 64 GPUs."""
        if not any(r):
            return []
        if (r, exact) in self._covers:
            return self._covers[r, exact]
        patterns = self.bounds.patterns
        value, x = self.bounds.lp(r)
        self._keep_prices(self.bounds.duals[0])
        rounded, rest = rounded_cover(patterns, r, x)
        if any(rest):
            rounded += min_cover(self.bounds, rest, self.order, greedy_cover(patterns, rest))
        if exact or math.ceil(value - EPS) < 64:
            rounded = min_cover(self.bounds, r, self.order, rounded)
        self._covers[r, exact] = rounded
        return rounded

    def fixed_prices(self) -> list[list[float]]:
        """Prices no layout exceeds, from the geometry: slice shares, and one profile at its max count."""
        geometry = self.gpu.mig
        assert geometry is not None
        by = [geometry.by_name[name] for name in self.wanted]
        out = [
            [p.memory_slices / geometry.memory_slices for p in by],
            [p.compute_slices / geometry.compute_slices for p in by],
        ]
        for i, p in enumerate(by):
            out.append([1.0 / p.max_count if j == i else 0.0 for j in range(len(by))])
        return out


def _compositions(total: int, caps: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every vector v with 0 <= v[k] <= caps[k] and sum(v) == total."""
    if not caps:
        if total == 0:
            yield ()
        return
    rest = sum(caps[1:])
    for first in range(max(0, total - rest), min(caps[0], total) + 1):
        for tail in _compositions(total - first, caps[1:]):
            yield (first, *tail)


def _exact(model: _Model, upper: int) -> tuple[list[int], list[int], list[int]] | None:
    """Fewest changed GPUs, then fewest used: (released per class, kept-and-used per class, cover), searched from
    the lower bound up to ``upper`` (a feasible count); None if nothing up to ``upper`` fits."""
    pairs = list(zip(model.vecs, model.counts, strict=True))
    lower = max(
        changed_lower_bound([*model.fixed_prices(), *model.prices], pairs, model.demand, model.added), model.lp_bound
    )
    for c in range(min(lower, upper), upper + 1):
        feasible = [
            v
            for v in _compositions(c, model.counts)
            if len(model.cover(model.residual(v), exact=True)) <= c + model.added
        ]
        if not feasible:
            continue
        best: tuple[int, list[int], list[int], list[int]] | None = None
        for v in feasible:
            caps = [n - k for n, k in zip(model.counts, v, strict=True)]
            for used in range(sum(caps) + 1):
                if best is not None and used >= best[0]:
                    break
                hit = next(
                    (
                        u
                        for u in _compositions(used, caps)
                        if len(model.cover(model.residual(v, kept_only=u), exact=True)) <= c + model.added
                    ),
                    None,
                )
                if hit is not None:
                    best = (used, list(v), list(hit), model.cover(model.residual(v, kept_only=hit), exact=True))
                    break
        assert best is not None  # a feasible v keeps all its unchanged GPUs in use at worst
        return best[1], best[2], best[3]
    return None


def _simplex_max(
    rows: Sequence[Sequence[float]], rhs: Sequence[float], gain: Sequence[float]
) -> tuple[float, list[float]]:
    """max gain.u s.t. rows.u <= rhs, u >= 0, with rhs >= 0 (the origin is feasible), by the simplex method with
    Bland's rule from the slack basis. Returns the optimum and, per row, its dual value (the reduced cost of the
    row's slack): the solution of the minimisation this LP is the dual of."""
    m, n = len(rows), len(gain)
    tab = [
        [*map(float, row), *(1.0 if c == r else 0.0 for c in range(m)), float(b)]
        for r, (row, b) in enumerate(zip(rows, rhs, strict=True))
    ]
    obj = [-float(g) for g in gain] + [0.0] * m + [0.0]
    basis = [n + r for r in range(m)]
    while True:
        col = next((c for c in range(n + m) if obj[c] < -1e-9), None)
        if col is None:
            break
        best_row, best_ratio = None, math.inf
        for r in range(m):
            a = tab[r][col]
            if a > 1e-9:
                ratio = tab[r][-1] / a
                tie = best_row is not None and abs(ratio - best_ratio) <= 1e-9 and basis[r] < basis[best_row]
                if ratio < best_ratio - 1e-9 or tie:
                    best_row, best_ratio = r, ratio
        if best_row is None:
            raise MigError("internal: the repack LP is unbounded (its primal has no solution)")
        pivot = tab[best_row]
        pv = pivot[col]
        pivot[:] = [v / pv for v in pivot]
        nz = [c for c, v in enumerate(pivot) if v != 0.0]
        for r in range(m):
            f = tab[r][col]
            if r != best_row and f != 0.0:
                row = tab[r]
                for c in nz:
                    row[c] -= f * pivot[c]
        f = obj[col]
        for c in nz:
            obj[c] -= f * pivot[c]
        basis[best_row] = col
    return obj[-1], [max(obj[n + r], 0.0) for r in range(m)]


def _capacity_lp(model: _Model) -> tuple[float, list[float]]:
    """The LP relaxation of the repack: min sum(x) over new layouts x_P >= 0 and released GPUs 0 <= v_L <= n_L
    with sum_P x_P P - sum_L v_L L >= d - s (the new layouts cover what the changed GPUs took away and what was
    missing) and sum(x) <= sum(v) + A (a new layout needs a changed or an added GPU). Its optimum minus A bounds
    the changed GPUs from below. Solved as its dual, a packing LP: max y.(d - s) - A z - n.w subject to
    y.P - z <= 1 and z - y.L - w_L <= 0. Returns the optimum and the fractional v."""
    patterns = model.bounds.patterns
    m, k = len(model.demand), len(model.counts)
    supply = [sum(vec[i] * n for vec, n in zip(model.vecs, model.counts, strict=True)) for i in range(m)]
    rows: list[list[float]] = []
    rhs: list[float] = []
    for pattern in patterns:
        rows.append([*pattern, -1.0, *([0.0] * k)])
        rhs.append(1.0)
    for j, vec in enumerate(model.vecs):
        rows.append([*(-a for a in vec), 1.0, *(-1.0 if c == j else 0.0 for c in range(k))])
        rhs.append(0.0)
    gain = (
        [d - s for d, s in zip(model.demand, supply, strict=True)]
        + [-float(model.added)]
        + [-float(n) for n in model.counts]
    )
    value, duals = _simplex_max(rows, rhs, gain)
    return value, duals[len(patterns) :]


def _next_release(model: _Model, released: Sequence[int], y: Sequence[float]) -> int | None:
    """The current layout whose next released GPU brings the most: ``1 - y.(what the demand loses with it)``, the
    largest slack ``1 - y.L`` among equals. None when every GPU is released."""
    kept = [
        sum(vec[i] * (n - v) for vec, n, v in zip(model.vecs, model.counts, released, strict=True))
        for i in range(len(model.demand))
    ]
    best: tuple[float, float, int] | None = None
    for j, vec in enumerate(model.vecs):
        if released[j] >= model.counts[j]:
            continue
        # instances beyond the demand are lost for free; the others cost their price
        loss = sum(
            y[i] * (a - max(kept[i] - d, 0))
            for i, (a, d) in enumerate(zip(vec, model.demand, strict=True))
            if a > kept[i] - d
        )
        slack = 1.0 - sum(p * a for p, a in zip(y, vec, strict=True))
        key = (1.0 - loss, slack, -j)
        if best is None or key > best:
            best = key
    return None if best is None else -best[2]


def _give_back(model: _Model, released: list[int], cover: list[int]) -> list[int]:
    """Un-release the released GPUs the cover does not need, the most useful under the LP prices first (in
    batches, halved when a batch leaves too little room); returns the cover of what is left uncovered."""
    extra = sum(released) + model.added - len(cover)
    if extra <= 0:
        return cover
    _, y = model.lp(model.demand)
    by_use = sorted(
        (j for j in range(len(released)) if released[j]),
        key=lambda j: sum(p * a for p, a in zip(y, model.vecs[j], strict=True)),
        reverse=True,
    )
    for j in by_use:
        step = min(extra, released[j])
        while step > 0:
            released[j] -= step
            trial = model.cover(model.residual(released), exact=False)
            if len(trial) <= sum(released) + model.added:
                cover, extra = trial, extra - step
                step = min(extra, released[j])
            else:
                released[j] += step
                step //= 2
    return cover


def _leave_idle(model: _Model, released: Sequence[int], cover: Sequence[int]) -> list[int]:
    """Unchanged GPUs that serve, per current layout: the others, least useful under the LP prices first, are
    left idle as long as the demand stays covered."""
    demand = model.demand
    made = [sum(model.bounds.patterns[p][i] for p in cover) for i in range(len(demand))]
    kept_used = [n - v for n, v in zip(model.counts, released, strict=True)]
    kept = [sum(vec[i] * u for vec, u in zip(model.vecs, kept_used, strict=True)) for i in range(len(demand))]
    _, y = model.lp(demand)
    for j in sorted(range(len(kept_used)), key=lambda j: sum(p * a for p, a in zip(y, model.vecs[j], strict=True))):
        vec = model.vecs[j]
        room = kept_used[j]
        for i, a in enumerate(vec):
            if a:
                room = min(room, (kept[i] + made[i] - demand[i]) // a)
        room = max(room, 0)
        kept_used[j] -= room
        for i, a in enumerate(vec):
            kept[i] -= a * room
    return kept_used


def _greedy(model: _Model) -> tuple[list[int], list[int], list[int]]:
    """Release what the LP relaxation releases, rounded up; then one GPU at a time while what is left uncovered
    does not fit on the released (and added) GPUs; give back the released GPUs the cover does not need, and
    leave idle the unchanged GPUs whose instances are not needed. Returns (released, kept and used, cover)."""
    lp_value, fractional = _capacity_lp(model)
    model.lp_bound = max(0, math.ceil(lp_value - EPS) - model.added)
    released = [min(n, math.ceil(v - EPS)) for n, v in zip(model.counts, fractional, strict=True)]
    while len(cover := model.cover(model.residual(released), exact=False)) > sum(released) + model.added:
        _, y = model.lp(model.residual(released))
        j = _next_release(model, released, y)
        if j is None:  # every GPU released: the fresh packing fits (it set the GPUs added), so never here
            raise MigError(f"internal: no repack of {model.gpu.name} found; report this with the input files")
        released[j] += 1
    cover = _give_back(model, released, cover)
    return released, _leave_idle(model, released, cover), cover


def _serves(after: Layout, demand: Mapping[str, int]) -> dict[str, int]:
    return {name: count for name, count in after if name in demand}


def _assign(
    by_layout: Sequence[tuple[Layout, Sequence[FleetGpu]]],
    released: Sequence[int],
    kept_used: Sequence[int],
    new_layouts: Sequence[Layout],
    demand: Mapping[str, int],
) -> tuple[list[GpuChange], list[GpuChange], int, list[FleetGpu], Counter[str]]:
    """Which GPUs: of each current layout, the first in fleet order change (consecutive hosts, so few drains per
    host), the next serve unchanged, the rest stay idle. Each changed GPU gets the new layout keeping most of its
    instances (its own layout back means no change after all); added GPUs get the rest. Returns (changes,
    additions, unchanged GPUs serving, idle GPUs, instances made)."""
    remaining = Counter(new_layouts)
    changes: list[GpuChange] = []
    idle: list[FleetGpu] = []
    serving = 0
    made: Counter[str] = Counter()
    for (layout, gpus), v, u in zip(by_layout, released, kept_used, strict=True):
        own = dict(layout)
        for g in gpus[:v]:
            after = max(remaining, key=lambda lay: (sum(min(c, own.get(n, 0)) for n, c in lay), lay))
            remaining[after] -= 1
            if not remaining[after]:
                del remaining[after]
            if after == layout:
                serving += 1
            else:
                changes.append(GpuChange(g.host, g.index, g.layout, after, _serves(after, demand)))
            made.update(dict(after))
        serving += u
        made.update({name: count * u for name, count in layout})
        idle.extend(gpus[v + u :])
    additions = [
        GpuChange(None, None, (), lay, _serves(lay, demand))
        for lay in sorted(remaining.elements(), key=lambda lay: (-sum(c for _, c in lay), lay))
    ]
    for change in additions:
        made.update(dict(change.after))
    return changes, additions, serving, idle, made


def repack_model(
    gpu: Gpu, fleet: Sequence[FleetGpu], demand: Mapping[str, int], exact_choices: int = EXACT_CHOICES
) -> ModelRepack:
    """Meet ``demand`` (profile -> instances) on ``fleet`` (the GPUs of one model with their layouts now),
    changing the fewest GPUs, then using the fewest; see the module docstring for the objective and the bound.

    Fleets whose current layouts allow at most ``exact_choices`` choices of how many GPUs of each to change, with
    a demand that fits on fewer than ``EXACT_BELOW_GPUS`` GPUs, are solved exactly; others greedily (``proven``
    says whether the result meets the lower bound)."""
    geometry = check_demand(gpu, demand)
    by_layout: dict[Layout, list[FleetGpu]] = {}
    for g in fleet:
        layout = as_layout(dict(g.layout), geometry)
        by_layout.setdefault(layout, []).append(g)
    for layout in by_layout:
        if layout and not (result := check(gpu, dict(layout))).fits:
            raise MigError(f"a current layout does not fit one {gpu.name}: {result.reason}")
    wanted_demand = {name: count for name, count in demand.items() if count > 0}
    fresh = pack_model(gpu, wanted_demand)
    added = max(0, fresh.gpus - len(fleet))
    classes = [(layout, len(gpus)) for layout, gpus in by_layout.items()]
    supply: Counter[str] = Counter()
    for layout, n in classes:
        for name, count in layout:
            supply[name] += count * n
    shortfall = {name: d - supply[name] for name, d in wanted_demand.items() if d > supply[name]}
    surplus = {name: s - wanted_demand.get(name, 0) for name, s in supply.items() if s > wanted_demand.get(name, 0)}

    patterns: list[Layout] = []
    if not wanted_demand:  # nothing demanded: every GPU stays as it is, idle
        released, kept_used, cover, bound, proven = [0] * len(classes), [0] * len(classes), [], 0, True
    else:
        model = _Model(gpu, classes, wanted_demand, added)
        patterns = model.patterns_layouts
        released, kept_used, cover = _greedy(model)
        # exact when the choices are few and every cover is small enough for an exact branch and bound (as in pack)
        proven = math.prod(n + 1 for n in model.counts) <= exact_choices and fresh.gpus < EXACT_BELOW_GPUS
        if proven:
            found = _exact(model, sum(released))
            assert found is not None  # the greedy result is feasible
            released, kept_used, cover = found
        pairs = list(zip(model.vecs, model.counts, strict=True))
        bound = max(
            changed_lower_bound([*model.fixed_prices(), *model.prices], pairs, model.demand, added), model.lp_bound
        )
    changes, additions, unchanged_used, idle, made = _assign(
        list(by_layout.items()), released, kept_used, [patterns[p] for p in cover], wanted_demand
    )
    lower = bound
    spare = {name: made[name] - wanted_demand.get(name, 0) for name in made if made[name] > wanted_demand.get(name, 0)}
    return ModelRepack(
        gpu=gpu.name,
        demand=wanted_demand,
        fleet=len(fleet),
        changes=changes,
        additions=additions,
        unchanged_used=unchanged_used,
        idle=idle,
        lower_bound=lower,
        proven=proven or len(changes) == lower,
        shortfall=shortfall,
        surplus=surplus,
        spare=spare,
    )


def repack(
    fleet: Sequence[tuple[Gpu, Sequence[FleetGpu]]], demand: Sequence[tuple[Gpu, Mapping[str, int]]]
) -> FleetRepack:
    """Repack every GPU model of the fleet or the demand (models never share a GPU): a model the demand omits
    keeps its layouts, idle; a model the fleet lacks is all additions."""
    gpus: dict[str, Gpu] = {}
    current: dict[str, list[FleetGpu]] = {}
    wanted: dict[str, Counter[str]] = {}
    for gpu, members in fleet:
        gpus[gpu.name] = gpu
        current.setdefault(gpu.name, []).extend(members)
    for gpu, counts in demand:
        gpus[gpu.name] = gpu
        wanted.setdefault(gpu.name, Counter()).update(counts)
    return FleetRepack([repack_model(gpus[name], current.get(name, []), wanted.get(name, Counter())) for name in gpus])


@dataclass(frozen=True)
class RepackConfig:
    """A mig-parted config for a repack: one named config per distinct new host layout."""

    config: dict[str, Any]
    hosts: dict[str, str]  # changed host -> the name of its config (the nvidia.com/mig.config label value)
    additions: dict[str, int]  # config for added GPUs -> how many GPUs take it


def repack_config(
    result: FleetRepack, fleet: Mapping[str, Sequence[FleetGpu]], gpus: Mapping[str, Gpu]
) -> RepackConfig:
    """The mig-parted ``v1`` config of a repack. Each host with a changed GPU gets a config listing every GPU of
    the host: the changed ones with their new layouts, the others with the layout they have (``mig-devices: {}``
    for none); hosts with the same layouts share it (``<model>-repack-<n>``). Added GPUs get one config per layout
    for all their GPUs (``<model>-add-<n>``). ``all-disabled`` is always present."""
    from gpufleet.mig.outputs import disabled_entries

    configs: dict[str, Any] = {"all-disabled": disabled_entries()}
    hosts: dict[str, str] = {}
    additions: dict[str, int] = {}
    for model in result.models:
        gpu = gpus[model.gpu]
        new = {(c.host, c.index): c.after for c in model.changes}
        changed_hosts = {c.host for c in model.changes}
        per_host: dict[str, dict[int, Layout]] = {}
        for g in fleet.get(model.gpu, ()):
            if g.host in changed_hosts:
                per_host.setdefault(g.host, {})[g.index] = new.get((g.host, g.index), g.layout)
        names: dict[tuple[tuple[int, Layout], ...], str] = {}
        for host, layouts in per_host.items():
            key = tuple(sorted(layouts.items()))
            if key not in names:
                names[key] = f"{model.gpu.lower()}-repack-{len(names) + 1}"
                groups: dict[Layout, list[int]] = {}
                for index, layout in key:
                    groups.setdefault(layout, []).append(index)
                configs[names[key]] = [
                    {
                        "device-filter": list(gpu.mig_device_filters),
                        "devices": indices,
                        "mig-enabled": True,
                        "mig-devices": dict(layout),
                    }
                    for layout, indices in groups.items()
                ]
            hosts[host] = names[key]
        for i, (layout, count) in enumerate(Counter(c.after for c in model.additions).most_common(), start=1):
            name = f"{model.gpu.lower()}-add-{i}"
            configs[name] = [
                {
                    "device-filter": list(gpu.mig_device_filters),
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": dict(layout),
                }
            ]
            additions[name] = count
    return RepackConfig({"version": "v1", "mig-configs": configs}, hosts, additions)
