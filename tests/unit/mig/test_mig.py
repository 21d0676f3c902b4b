"""The MIG planner on one GPU: exact placements, reasons, layouts.

`fits_independently` below is a second, deliberately plain implementation of NVIDIA's placement rules (try
every start of every instance, no ordering tricks), used to check the planner's answers.
"""

from __future__ import annotations

import itertools

import pytest

from gpufleet import mig
from gpufleet.catalog import Gpu, MigGeometry, MigProfile, load_catalog

CATALOG = load_catalog()
MIG_GPUS = [g for g in CATALOG.gpus if g.mig]
SEVEN_SLICE = [g for g in MIG_GPUS if g.mig.compute_slices == 7]


def fits_independently(gpu: Gpu, counts: dict[str, int]) -> bool:
    geo = gpu.mig
    instances = [geo.by_name[n] for n, c in counts.items() for _ in range(c)]
    if any(c > geo.by_name[n].max_count for n, c in counts.items()):
        return False
    if sum(p.compute_slices for p in instances) > geo.compute_slices:
        return False
    if sum(p.media_extensions for p in instances) > geo.media_extension_instances:
        return False
    # an instance holding every media engine (+me.all) leaves none for any other instance but -me ones
    if any(p.all_media_engines for p in instances) and sum(not p.no_media_engines for p in instances) > 1:
        return False

    def place(i: int, taken: frozenset[int]) -> bool:
        if i == len(instances):
            return True
        p = instances[i]
        for s in p.starts:
            span = frozenset(range(s, s + p.memory_slices))
            if max(span) < geo.memory_slices and not span & taken and place(i + 1, taken | span):
                return True
        return False

    return place(0, frozenset())


def assert_valid_placement(gpu: Gpu, result: mig.CheckResult, counts: dict[str, int]) -> None:
    geo = gpu.mig
    assert sorted(p.profile for p in result.placements) == sorted(n for n, c in counts.items() for _ in range(c))
    used: set[int] = set()
    for p in result.placements:
        prof = geo.by_name[p.profile]
        assert p.start in prof.starts and p.size == prof.memory_slices
        span = set(range(p.start, p.start + p.size))
        assert max(span) < geo.memory_slices and not span & used, result
        used |= span
    assert sum(geo.by_name[p.profile].compute_slices for p in result.placements) <= geo.compute_slices


def base(gpu: Gpu, compute: int) -> str:
    return gpu.mig.base_profile(compute).name


# -- the acceptance facts, for every model -------------------------------------------------------------------


@pytest.mark.parametrize("gpu", MIG_GPUS, ids=lambda g: g.name)
def test_every_profile_fits_at_max_count_and_not_one_more(gpu: Gpu):
    for profile in gpu.mig.profiles:
        ok = mig.check(gpu, {profile.name: profile.max_count})
        assert ok.fits, (profile.name, ok.reason)
        assert_valid_placement(gpu, ok, {profile.name: profile.max_count})
        over = mig.check(gpu, {profile.name: profile.max_count + 1})
        assert not over.fits
        assert f"at most {profile.max_count} x {profile.name}" in over.reason


@pytest.mark.parametrize("gpu", SEVEN_SLICE, ids=lambda g: g.name)
def test_balanced_layout_fits_seven_slice_models(gpu: Gpu):
    counts = {base(gpu, 1): 2, base(gpu, 2): 1, base(gpu, 3): 1}
    result = mig.check(gpu, counts)
    assert result.fits, result.reason
    assert_valid_placement(gpu, result, counts)


@pytest.mark.parametrize("gpu", SEVEN_SLICE, ids=lambda g: g.name)
def test_3g_plus_3g_plus_1g_exhausts_memory_slices(gpu: Gpu):
    result = mig.check(gpu, {base(gpu, 3): 2, base(gpu, 1): 1})
    assert not result.fits
    assert "need 9 memory slices" in result.reason and "has 8" in result.reason
    # the compute slices would allow it (3 + 3 + 1 = 7): the memory slices are what run out
    assert mig.check(gpu, {base(gpu, 3): 2}).fits


def test_double_memory_1g_must_take_start_6_where_greedy_fails():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    counts = {"1g.20gb": 3, "1g.10gb": 2}
    result = mig.check(h100, counts)
    assert result.fits, result.reason
    assert_valid_placement(h100, result, counts)
    assert ("1g.20gb", 6) in {(p.profile, p.start) for p in result.placements}

    # a greedy left-to-right placement (largest first, lowest free start) rejects it
    taken: set[int] = set()
    greedy_ok = True
    for name in ["1g.20gb"] * 3 + ["1g.10gb"] * 2:
        prof = h100.mig.by_name[name]
        start = next((s for s in prof.starts if not set(range(s, s + prof.memory_slices)) & taken), None)
        if start is None:
            greedy_ok = False
            break
        taken |= set(range(start, start + prof.memory_slices))
    assert not greedy_ok


def test_a_profile_of_another_model_is_refused_by_name():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    result = mig.check(h100, {"1g.5gb": 1}, owners={"1g.5gb": CATALOG.mig_profile_owners("1g.5gb")})
    assert not result.fits
    assert result.reason.startswith("'1g.5gb' is not a MIG profile of H100-SXM5-80GB")
    assert "A100-SXM4-40GB" in result.reason


@pytest.mark.parametrize("name", ["T4", "L40S", "V100-SXM2-32GB", "MI300X"])
def test_gpus_without_mig_are_refused(name: str):
    result = mig.check(CATALOG.gpu(name), {"1g.10gb": 1})
    assert not result.fits and "has no MIG" in result.reason


def test_4g_fits_only_with_a_3g_or_smaller_instances_on_slices_4_to_7():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    assert mig.check(h100, {"4g.40gb": 1, "3g.40gb": 1}).fits
    assert mig.check(h100, {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}).fits
    assert not mig.check(h100, {"4g.40gb": 1, "2g.20gb": 2}).fits
    seven = mig.check(h100, {"1g.10gb": 7})
    assert seven.fits and 7 not in {p.start for p in seven.placements}  # memory slice 7 stays unused


def test_one_media_extension_instance_per_gpu():
    a30 = CATALOG.gpu("A30-24GB")
    assert mig.check(a30, {"1g.6gb+me": 1, "2g.12gb": 1}).fits
    both = mig.check(a30, {"1g.6gb+me": 1, "2g.12gb+me": 1})
    assert not both.fits and "media extensions" in both.reason


# -- exhaustive agreement with the independent implementation -------------------------------------------------


@pytest.mark.parametrize("name", ["H100-SXM5-80GB", "A100-SXM4-40GB", "A30-24GB"])
def test_check_agrees_with_independent_placement_on_every_multiset(name: str):
    gpu = CATALOG.gpu(name)
    profiles = gpu.mig.profiles
    checked = 0
    for counts in itertools.product(*[range(p.max_count + 2) for p in profiles]):
        d = {p.name: c for p, c in zip(profiles, counts, strict=True) if c}
        if not d:
            continue
        result = mig.check(gpu, d)
        assert result.fits == fits_independently(gpu, d), (d, result.reason)
        if result.fits:
            assert_valid_placement(gpu, result, d)
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("name", ["H100-SXM5-80GB", "A30-24GB"])
def test_nvidia_geometries_are_decided_by_counts_and_slice_sums(name: str):
    """For the documented 7x8 and 4x4 placements, every multiset within max counts and slice sums places."""
    gpu = CATALOG.gpu(name)
    for counts in itertools.product(*[range(p.max_count + 1) for p in gpu.mig.profiles]):
        d = {p.name: c for p, c in zip(gpu.mig.profiles, counts, strict=True) if c}
        if d:
            assert "overlapping" not in (mig.check(gpu, d).reason or ""), d


def synthetic_gpu() -> Gpu:
    """A test double, not a real GPU: a 4-slice geometry where a 2-slice instance may only start at slice 1,
    so two 2-slice instances pass the slice sums yet cannot be placed."""
    profiles = (
        MigProfile(name="1g.a", kind="1g", compute_slices=1, memory_slices=2, max_count=2, starts=(0, 2)),
        MigProfile(name="1g.mid", kind="1g", compute_slices=1, memory_slices=2, max_count=1, starts=(1,)),
    )
    geometry = MigGeometry(compute_slices=4, memory_slices=4, media_extension_instances=1, profiles=profiles)
    return Gpu(
        name="SYNTHETIC-4x4",
        source="test double",
        vendor="nvidia",
        architecture="Ampere",
        memory_gib=8,
        pci_ids=("10de:ffff",),
        mig=geometry,
    )


def test_overlap_is_reported_with_the_partial_placement_when_sums_pass():
    gpu = synthetic_gpu()
    result = mig.check(gpu, {"1g.a": 1, "1g.mid": 1})
    assert not result.fits
    assert "cannot be placed without overlapping memory slices" in result.reason
    assert [p.profile for p in result.partial] and result.unplaced
    assert fits_independently(gpu, {"1g.a": 1, "1g.mid": 1}) is False
    drawing = mig.diagram(gpu, result)
    assert any("no free start in" in line for line in drawing)


def test_diagram_shows_why_3g_3g_1g_does_not_fit():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    lines = mig.diagram(h100, mig.check(h100, {"3g.40gb": 2, "1g.10gb": 1}))
    assert lines[0].split()[2:] == [str(i) for i in range(8)]
    bars = [line for line in lines if "[" in line]
    assert len(bars) == 2 and bars[0].index("[") != bars[1].index("[")
    assert lines[-2].startswith("1g.10gb") and "no free start in {0,1,2,3,4,5,6}:1" in lines[-2]
    assert lines[-1] == "compute slices: 7 of 7"


# -- layouts ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", MIG_GPUS, ids=lambda g: g.name)
def test_maximal_layouts_fit_and_admit_no_further_instance(gpu: Gpu):
    layouts = mig.maximal_layouts(gpu)
    assert layouts
    for layout in layouts:
        counts = dict(layout)
        assert fits_independently(gpu, counts), layout
        for p in gpu.mig.profiles:
            bigger = {**counts, p.name: counts.get(p.name, 0) + 1}
            assert not fits_independently(gpu, bigger), (layout, p.name)
    # every feasible layout is contained in a maximal one
    for layout in mig.feasible_layouts(gpu):
        d = dict(layout)
        assert any(all(dict(m).get(k, 0) >= v for k, v in d.items()) for m in layouts), layout


def test_layouts_read_largest_first():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    assert mig.layout_str(mig.placement.as_layout({"1g.10gb": 2, "3g.40gb": 1, "2g.20gb": 1}, h100.mig)) == (
        "3g.40gb + 2g.20gb + 1g.10gb x2"
    )
