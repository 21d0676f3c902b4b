"""Fleet repack: fewest changed GPUs, then fewest used, checked against an independent brute force over every
layout choice of every GPU on random small fleets (fixed seed); a valid lower bound everywhere."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.catalog import Gpu, load_catalog
from gpufleet.cli import app
from gpufleet.mig import pack_model
from gpufleet.mig.current import expand_hosts, load_current
from gpufleet.mig.placement import MigError
from gpufleet.mig.repack import FleetGpu, ModelRepack, repack, repack_model
from tests import markers
from tests.conftest import FIXTURES, REPO, TODAY
from tests.unit.mig.test_mig import fits_independently
from tests.unit.mig.test_mig_outputs import load_strict

CATALOG = load_catalog()
H100 = CATALOG.gpu("H100-SXM5-80GB")
A30 = CATALOG.gpu("A30-24GB")
SMALL_CASE_GPUS = [H100, A30, CATALOG.gpu("A100-SXM4-40GB")]
CURRENT_FIXTURES = sorted((FIXTURES / "invalid-current").glob("*.yaml"))


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


def assert_meets_demand(
    result: ModelRepack,
    current: list[dict[str, int]],
    demand: dict[str, int],
    hosts: list[tuple[str, int]] | None = None,
) -> None:
    """The changed and added GPUs' new layouts fit, and with the unchanged GPUs that serve they cover the demand;
    idle GPUs are unchanged ones."""
    hosts = hosts or [("h", i) for i in range(len(current))]
    changed = {(c.host, c.index) for c in result.changes}
    idle = {(g.host, g.index) for g in result.idle}
    assert not changed & idle
    made: Counter[str] = Counter()
    for change in (*result.changes, *result.additions):
        assert change.after != change.before
        assert fits_independently(CATALOG.gpu(result.gpu), dict(change.after))
        made.update(dict(change.after))
    serving = [layout for where, layout in zip(hosts, current, strict=True) if where not in changed | idle]
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
    assert worse <= 2  # the LP rounding meets the optimum on (nearly) all of them: 0 of 300 cases missed it


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


def test_a_5_percent_demand_change_on_a_621_gpu_fleet_stays_within_1_percent_of_the_bound():
    """The large-fleet path on a fleet packed for one demand, then each profile's demand moved by 5%."""
    rng = random.Random(11)
    old = {p.name: rng.randint(20, 400) for p in H100.mig.profiles}
    packed = pack_model(H100, old)
    fleet = [
        FleetGpu(f"n{i // 8:03d}", i % 8, lay)
        for i, lay in enumerate(lay for lay, n in packed.layouts for _ in range(n))
    ]
    new = {name: round(count * rng.choice((0.95, 1.05))) for name, count in old.items()}
    result = repack_model(H100, fleet, new)
    assert len(fleet) > 400 and result.added == max(0, pack_model(H100, new).gpus - len(fleet))
    assert 0 < result.lower_bound <= result.changed <= result.lower_bound * 1.01
    assert_meets_demand(result, [dict(g.layout) for g in fleet], new, hosts=[(g.host, g.index) for g in fleet])


def test_host_ranges_keep_the_width_of_their_first_number():
    assert expand_hosts("gpu-a[08-11].dc1") == ["gpu-a08.dc1", "gpu-a09.dc1", "gpu-a10.dc1", "gpu-a11.dc1"]
    assert expand_hosts("n[9-10]") == ["n9", "n10"]
    assert expand_hosts("node7") == ["node7"]
    with pytest.raises(ValueError, match="one numbered range"):
        expand_hosts("n[1-2][3-4]")


@pytest.mark.parametrize("path", CURRENT_FIXTURES, ids=lambda p: p.stem)
def test_invalid_fleet_files_report_every_error_at_its_line(path: Path):
    loaded = load_current(path, CATALOG)
    assert not loaded.ok and not loaded.models
    expected, _ = markers.expectations(path, TODAY)
    markers.assert_matches(path, expected, loaded.diagnostics)


def test_the_example_fleet_file_expands_ranges_and_index_lists():
    loaded = load_current(REPO / "examples/mig-current.yaml", CATALOG)
    assert loaded.ok
    h100, a30 = loaded.models
    assert (h100.gpu.name, len(h100.gpus), a30.gpu.name, len(a30.gpus)) == ("H100-SXM5-80GB", 32, "A30-24GB", 4)
    assert h100.gpus[16] == FleetGpu("gpu-a03", 0, (("1g.10gb", 7),))
    assert h100.gpus[-1] == FleetGpu("gpu-a04", 7, (("2g.20gb", 3), ("1g.10gb", 1)))


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})
    return result.exit_code, result.output


def test_cli_repack_prints_changed_gpus_why_and_counts_and_writes_the_config(tmp_path: Path):
    out = tmp_path / "repack.yaml"
    code, text = run_cli("mig", "pack", "--current", str(REPO / "examples/mig-current.yaml"), "--demand",
                         str(REPO / "examples/mig-demand-next.yaml"), "-o", str(out))  # fmt: skip
    assert code == 0, text
    assert "change gpu-a01/0: 3g.40gb x2 -> 7g.80gb  (adds 1 x 7g.80gb the fleet lacks)" in text
    assert "change gpu-b01/0: 1g.6gb x4 -> 2g.12gb x2  (adds 2 x 2g.12gb the fleet lacks)" in text
    assert "fleet: 3 changed, 33 unchanged, 0 added, lower bound 3 changed (optimal)" in text
    spec = load_strict(out.read_text())
    # the changed host's config: its two changed GPUs with the new layout, the other six as they are
    entries = {tuple(e.devices): dict(e.mig_devices) for e in spec.mig_configs["h100-sxm5-80gb-repack-1"]}
    assert entries == {(0, 1): {"7g.80gb": 1}, (2, 3, 4, 5, 6, 7): {"3g.40gb": 2}}


def test_cli_repack_json_lists_every_change_with_its_config_label():
    code, text = run_cli("mig", "pack", "--current", str(REPO / "examples/mig-current.yaml"), "--demand",
                         str(REPO / "examples/mig-demand-next.yaml"), "--json")  # fmt: skip
    data = json.loads(text)
    assert code == 0 and data["ok"] and (data["changed"], data["added"], data["lower_bound"]) == (3, 0, 3)
    a30 = data["models"][1]
    assert a30["changes"] == [
        {
            "host": "gpu-b01",
            "index": 0,
            "from": {"1g.6gb": 4},
            "to": {"2g.12gb": 2},
            "serves": {"2g.12gb": 2},
            "why": "adds 2 x 2g.12gb the fleet lacks",
            "config": "a30-24gb-repack-1",
        }
    ]
    assert a30["idle_gpus"] == [{"host": "gpu-b01", "index": 3}] and data["hosts"]["gpu-b01"] == "a30-24gb-repack-1"


def test_cli_repack_of_invalid_files_exits_1_with_every_error_at_its_line():
    path = str(FIXTURES / "invalid-current/layouts.yaml")
    code, text = run_cli("mig", "pack", "--current", path, "--demand", str(REPO / "examples/mig-demand-next.yaml"))
    assert code == 1
    assert f"{path}:6: fleet[0].profiles: does not fit one H100-SXM5-80GB" in text
    assert "Traceback" not in text
    code, text = run_cli("mig", "pack", "--current", path, "--demand", str(REPO / "examples/mig-demand-next.yaml"),
                         "--json")  # fmt: skip
    assert code == 1 and [e["line"] for e in json.loads(text)["errors"]] == [6, 10, 11]
