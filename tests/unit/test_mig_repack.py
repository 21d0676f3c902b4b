"""Fleet repack: fewest changed GPUs, then fewest used, checked against an independent brute force over every
layout choice of every GPU on random small fleets (fixed seed); a valid lower bound everywhere."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from functools import cache

import pytest

from gpufleet.catalog import Gpu, load_catalog
from gpufleet.mig.placement import MigError
from gpufleet.mig.repack import FleetGpu, ModelRepack, repack, repack_model
from tests.unit.test_mig import fits_independently

CATALOG = load_catalog()
H100 = CATALOG.gpu("H100-SXM5-80GB")
A30 = CATALOG.gpu("A30-24GB")
SMALL_CASE_GPUS = [H100, A30, CATALOG.gpu("A100-SXM4-40GB")]


def layouts_over(gpu: Gpu, names: list[str]) -> list[tuple[int, ...]]:
    """Every non-empty multiset of ``names`` that fits one GPU, by the independent placement check."""
    limits = [gpu.mig.by_name[n].max_count for n in names]
    return [
        counts
        for counts in itertools.product(*[range(k + 1) for k in limits])
        if any(counts) and fits_independently(gpu, dict(zip(names, counts, strict=True)))
    ]


def brute_force(gpu: Gpu, current: list[dict[str, int]], demand: dict[str, int]) -> tuple[int, int, int]:
    """(added, changed, used), lexicographically smallest: every GPU keeps its layout (serving or idle) or takes
    any layout of the demanded profiles; GPUs are added, with any layouts, for what the fleet leaves uncovered."""
    names = sorted(demand)
    layouts = layouts_over(gpu, names)

    def minus(rest: tuple[int, ...], lay: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(max(r - c, 0) for r, c in zip(rest, lay, strict=True))

    @cache
    def fewest(rest: tuple[int, ...]) -> int:
        if not any(rest):
            return 0
        return 1 + min(
            fewest(minus(rest, lay)) for lay in layouts if any(c and r for c, r in zip(lay, rest, strict=True))
        )

    # states: remaining demand -> set of (changed, used) after the GPUs seen so far
    states: dict[tuple[int, ...], set[tuple[int, int]]] = {tuple(demand[n] for n in names): {(0, 0)}}
    for now in current:
        own = tuple(now.get(n, 0) for n in names)
        nxt: dict[tuple[int, ...], set[tuple[int, int]]] = {}
        for rest, seen in states.items():
            for changed, used in seen:
                nxt.setdefault(rest, set()).add((changed, used))  # unchanged, idle
                nxt.setdefault(minus(rest, own), set()).add((changed, used + 1))  # unchanged, serving
                for lay in layouts:
                    nxt.setdefault(minus(rest, lay), set()).add((changed + 1, used + 1))
        states = nxt
    return min((fewest(rest), changed, used + fewest(rest)) for rest, seen in states.items() for changed, used in seen)


def random_case(rng: random.Random) -> tuple[Gpu, list[dict[str, int]], dict[str, int]]:
    gpu = rng.choice(SMALL_CASE_GPUS)
    profiles = [p.name for p in gpu.mig.profiles]
    wanted = rng.sample(profiles, rng.randint(1, 3))
    # current layouts: random fitting layouts of a few profiles (some not demanded), or no instances
    pool = sorted(set(wanted) | set(rng.sample(profiles, 2)))
    options = [dict(zip(pool, lay, strict=True)) for lay in layouts_over(gpu, pool)]
    current = [rng.choice(options) if rng.random() > 0.15 else {} for _ in range(rng.randint(1, 5))]
    demand = {n: rng.randint(0, 7) for n in wanted}
    if not any(demand.values()):
        demand[wanted[0]] = 1
    return gpu, current, demand


def fleet_of(gpu: Gpu, current: list[dict[str, int]]) -> list[FleetGpu]:
    return [FleetGpu("h", i, tuple((n, c) for n, c in layout.items() if c)) for i, layout in enumerate(current)]


def assert_meets_demand(result: ModelRepack, current: list[dict[str, int]], demand: dict[str, int]) -> None:
    """The changed and added GPUs' new layouts fit, and with the unchanged GPUs that serve they cover the demand;
    idle GPUs are unchanged ones."""
    changed = {(c.host, c.index) for c in result.changes}
    idle = {(g.host, g.index) for g in result.idle}
    assert not changed & idle
    made: Counter[str] = Counter()
    for change in (*result.changes, *result.additions):
        assert change.after != change.before
        assert fits_independently(CATALOG.gpu(result.gpu), dict(change.after))
        made.update(dict(change.after))
    serving = [layout for i, layout in enumerate(current) if ("h", i) not in changed | idle]
    assert len(serving) == result.unchanged_used
    for layout in serving:
        made.update(layout)
    for name, want in demand.items():
        assert made[name] >= want, (name, made, demand)


def test_repack_equals_brute_force_on_random_small_fleets():
    rng = random.Random(20261125)
    cases = [random_case(rng) for _ in range(60)]
    for gpu, current, demand in cases:
        result = repack_model(gpu, fleet_of(gpu, current), demand)
        best = brute_force(gpu, current, demand)
        assert (result.added, result.changed, result.used) == best, (gpu.name, current, demand, result)
        assert result.proven and result.lower_bound <= result.changed
        assert_meets_demand(result, current, demand)


def test_greedy_repack_is_valid_and_its_bound_never_exceeds_the_optimum():
    """The large-fleet path (forced here on small fleets): a valid repack, at most a few changes from the
    optimum, and a lower bound no repack beats."""
    rng = random.Random(7)
    worse = 0
    for _ in range(60):
        gpu, current, demand = random_case(rng)
        result = repack_model(gpu, fleet_of(gpu, current), demand, exact_choices=0)
        added, changed, _ = brute_force(gpu, current, demand)
        assert result.added == added
        assert result.lower_bound <= changed <= result.changed
        assert result.proven == (result.changed == result.lower_bound)
        assert_meets_demand(result, current, demand)
        worse += result.changed - changed
    assert worse <= 6  # the greedy is the optimum on nearly all of them


def test_a_shift_from_small_to_large_instances_changes_only_the_gpus_it_needs():
    fleet = [FleetGpu("a", i, (("1g.10gb", 7),)) for i in range(8)] + [
        FleetGpu("b", i, (("3g.40gb", 2),)) for i in range(8)
    ]
    result = repack_model(H100, fleet, {"1g.10gb": 42, "3g.40gb": 20})
    # 4 more 3g.40gb: two 1g.10gb GPUs (14 instances are surplus) become 3g.40gb x2
    assert result.changed == 2 == result.lower_bound and result.proven
    assert [(c.host, c.index, c.after) for c in result.changes] == [
        ("a", 0, (("3g.40gb", 2),)),
        ("a", 1, (("3g.40gb", 2),)),
    ]
    assert result.changes[0].serves == {"3g.40gb": 2}
    assert result.shortfall == {"3g.40gb": 4} and result.surplus == {"1g.10gb": 14}
    assert result.added == 0 and not result.idle and result.unchanged_used == 14


def test_gpus_no_longer_needed_are_left_as_they_are():
    fleet = [FleetGpu("a", i, (("1g.10gb", 7),)) for i in range(4)]
    result = repack_model(H100, fleet, {"1g.10gb": 10})
    assert result.changed == 0 and result.unchanged_used == 2
    assert [(g.index, g.layout) for g in result.idle] == [(2, (("1g.10gb", 7),)), (3, (("1g.10gb", 7),))]
    assert result.spare == {"1g.10gb": 4}


def test_a_fleet_too_small_gets_the_fewest_additions_then_the_fewest_changes():
    fleet = [FleetGpu("a", 0, (("1g.10gb", 7),)), FleetGpu("a", 1, (("3g.40gb", 2),))]
    result = repack_model(H100, fleet, {"1g.10gb": 7, "3g.40gb": 2, "7g.80gb": 2})
    assert result.added == 2 and result.changed == 0
    assert [c.after for c in result.additions] == [(("7g.80gb", 1),), (("7g.80gb", 1),)]
    assert all(c.host is None for c in result.additions)


def test_models_the_demand_omits_stay_idle_and_models_the_fleet_lacks_are_added():
    fleet = [(A30, [FleetGpu("x", 0, (("4g.24gb", 1),))])]
    result = repack(fleet, [(H100, {"7g.80gb": 1})])
    a30, h100 = result.models
    assert (a30.gpu, a30.changed, len(a30.idle)) == ("A30-24GB", 0, 1)
    assert (h100.gpu, h100.added, h100.changed) == ("H100-SXM5-80GB", 1, 0)
    assert result.changed == 0 and result.added == 1


def test_repack_refuses_layouts_that_do_not_fit_and_unknown_profiles():
    with pytest.raises(MigError, match="does not fit one H100-SXM5-80GB"):
        repack_model(H100, [FleetGpu("a", 0, (("3g.40gb", 3),))], {"3g.40gb": 1})
    with pytest.raises(MigError, match="not a MIG profile of H100-SXM5-80GB"):
        repack_model(H100, [], {"1g.5gb": 1})
