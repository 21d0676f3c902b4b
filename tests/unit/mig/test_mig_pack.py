"""Fleet packing: the true optimum on small demands (independent brute force), a valid bound everywhere."""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet import mig
from gpufleet.catalog import Gpu, load_catalog
from tests.unit.mig.test_mig import fits_independently

CATALOG = load_catalog()
MIG_GPUS = [g for g in CATALOG.gpus if g.mig]


def brute_force_min_gpus(gpu: Gpu, demand: dict[str, int]) -> int:
    """Fewest GPUs covering ``demand``: try every layout (checked by the independent implementation) on the
    first GPU, recurse on what is left. Exponential, fine for small demands."""
    names = sorted(demand)
    limits = [min(gpu.mig.by_name[n].max_count, demand[n]) for n in names]
    layouts = [
        counts
        for counts in itertools.product(*[range(k + 1) for k in limits])
        if any(counts) and fits_independently(gpu, dict(zip(names, counts, strict=True)))
    ]

    @cache
    def best(rest: tuple[int, ...]) -> int:
        if not any(rest):
            return 0
        return 1 + min(
            best(tuple(max(r - c, 0) for r, c in zip(rest, lay, strict=True)))
            for lay in layouts
            if any(c and r for c, r in zip(lay, rest, strict=True))
        )

    return best(tuple(demand[n] for n in names))


def assert_cover(gpu: Gpu, result: mig.ModelPack, demand: dict[str, int]) -> None:
    made: dict[str, int] = {}
    for layout, count in result.layouts:
        assert fits_independently(gpu, dict(layout)), layout
        for name, k in layout:
            made[name] = made.get(name, 0) + k * count
    assert sum(count for _, count in result.layouts) == result.gpus
    for name, want in demand.items():
        assert made.get(name, 0) >= want, (name, made, demand)
    assert result.spare == {n: made[n] - demand.get(n, 0) for n in made if made[n] > demand.get(n, 0)}


@st.composite
def small_demands(draw: st.DrawFn) -> tuple[Gpu, dict[str, int]]:
    gpu = draw(st.sampled_from(MIG_GPUS))
    names = draw(st.lists(st.sampled_from([p.name for p in gpu.mig.profiles]), min_size=1, max_size=3, unique=True))
    demand = {n: draw(st.integers(1, 6)) for n in names}
    return gpu, demand


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=small_demands())
def test_packing_equals_brute_force_on_small_demands(case):
    gpu, demand = case
    result = mig.pack_model(gpu, demand)
    optimum = brute_force_min_gpus(gpu, demand)
    assert optimum <= sum(demand.values())  # each instance fits a GPU of its own (an A30 4g.24gb takes a whole one)
    assert result.gpus == optimum, (gpu.name, demand, result)
    assert result.lower_bound <= optimum
    assert_cover(gpu, result, demand)


def test_media_extensions_need_one_gpu_each():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    result = mig.pack_model(h100, {"1g.10gb+me": 9, "1g.10gb": 9})
    assert result.gpus == 9 == result.lower_bound
    assert_cover(h100, result, {"1g.10gb+me": 9, "1g.10gb": 9})


@pytest.mark.parametrize("gpu", MIG_GPUS, ids=lambda g: g.name)
def test_large_demands_stay_within_a_percent_of_the_bound(gpu: Gpu):
    demand = {p.name: 100 * (i + 3) + i for i, p in enumerate(gpu.mig.profiles)}
    result = mig.pack_model(gpu, demand)
    assert result.lower_bound <= result.gpus <= result.lower_bound * 1.01
    assert_cover(gpu, result, demand)


def test_fewest_layouts_among_equal_gpu_counts():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    # 14 x 3g.40gb fill 7 GPUs with one layout; anything else would use more layouts
    result = mig.pack_model(h100, {"3g.40gb": 14})
    assert result.layouts == [((("3g.40gb", 2),), 7)]
    assert result.layouts_proven


def test_fleet_pack_sums_models():
    fleet = mig.pack(
        [
            (CATALOG.gpu("A30-24GB"), {"4g.24gb": 3}),
            (CATALOG.gpu("10de:20b7"), {"4g.24gb": 2}),
            (CATALOG.gpu("A100-SXM4-40GB"), {"7g.40gb": 4}),
        ]
    )
    assert [(m.gpu, m.gpus) for m in fleet.models] == [("A30-24GB", 5), ("A100-SXM4-40GB", 4)]
    assert fleet.gpus == 9 and fleet.gap == 0


def test_pack_refuses_unknown_profiles_and_gpus_without_mig():
    with pytest.raises(mig.MigError, match="not a MIG profile of H100-SXM5-80GB"):
        mig.pack_model(CATALOG.gpu("H100-SXM5-80GB"), {"1g.5gb": 1})
    with pytest.raises(mig.MigError, match="has no MIG"):
        mig.pack_model(CATALOG.gpu("T4"), {"1g.5gb": 1})


def test_memory_demands_pick_the_cheapest_profile_with_enough_usable_memory():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    assert mig.profile_for_memory(h100, 9).name == "1g.10gb"  # 9.62 GiB usable
    assert mig.profile_for_memory(h100, 9.7).name == "1g.20gb"  # 1g.10gb has only 9.62
    assert mig.profile_for_memory(h100, 40).name == "7g.80gb"  # 4g.40gb has 39.50
    with pytest.raises(mig.MigError, match=r"largest has 79\.25 GiB"):
        mig.profile_for_memory(h100, 80)
    b200 = CATALOG.gpu("B200-180GB")
    gib, published = mig.usable_gib(b200, b200.mig.by_name["3g.90gb"])
    assert not published and gib == pytest.approx(4 * 20.5)  # lowest published GiB per slice x 4 slices
    nvl = CATALOG.gpu("H200-NVL-141GB")
    gib, published = mig.usable_gib(nvl, nvl.mig.by_name["1g.18gb"])
    assert not published and gib == pytest.approx(18e9 / 2**30, abs=0.01)
