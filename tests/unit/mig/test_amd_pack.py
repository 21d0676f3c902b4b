"""Packing an AMD partition demand (``gpufleet amd pack``): GPUs per pair, nodes of one NPS mode each, the GPUs left
free, the Device Config Manager's profiles; the bounds the packing meets, checked against a brute force; the demand
file's errors at file:line."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.catalog import Catalog
from gpufleet.mig.amd_demand import load_amd_demand
from gpufleet.mig.amd_pack import AmdDemand, AmdModelPack, FlexibleDemand, pack, pack_model
from gpufleet.mig.amd_partitions import layout_problems, pairs_for_memory
from gpufleet.mig.demand import MAX_FLEET_GPUS
from tests import markers
from tests.conftest import REPO, TODAY


def _covers(gpu, demand: dict[str, int], result: AmdModelPack) -> None:
    """The profiles as nodes: each of ``gpus_per_node`` GPUs, one NPS mode, valid layouts; per pair, the GPUs the
    nodes give equal the pair's GPUs, whose logical GPUs cover the demand."""
    n = result.gpus_per_node
    given: Counter[str] = Counter()
    for p in result.profiles:
        assert sum(count for _, count in p.groups) + p.free == n
        assert p.layout.memory == p.memory and layout_problems(gpu, p.layout, n) == []
        for compute, count in p.groups:
            given[f"{compute}+{p.memory}"] += count * p.nodes
    assert dict(given) == {p.pair.name: p.gpus for p in result.pairs}
    for p in result.pairs:
        assert p.gpus * p.pair.logical_gpus >= demand[p.pair.name] > (p.gpus - 1) * p.pair.logical_gpus
    assert result.nodes * n == result.gpus + result.free_gpus


def _fewest_nodes(gpu, gpus: dict[str, int], per_node: int, mix: bool) -> int:
    """Brute force: the fewest nodes for these GPUs per pair, trying every way to give k nodes a class (an NPS mode,
    or a pair without mixing) until the classes' GPUs fit."""
    need = Counter()
    for name, count in gpus.items():
        need[name.split("+")[1] if mix else name] += count
    classes = sorted(need)
    for k in itertools.count():
        for labels in itertools.combinations_with_replacement(classes, k):
            room = Counter(labels)
            if all(room[c] * per_node >= need[c] for c in classes):
                return k
    raise AssertionError


def test_the_example_demand_packs_at_its_bounds(catalog: Catalog):
    loaded = load_amd_demand(REPO / "examples/amd-demand.yaml", catalog)
    assert loaded.ok, loaded.diagnostics
    result = pack(loaded.demands)
    mi300x, mi355x = result.models
    # CPX+NPS4: 40 -> 5 GPUs; SPX+NPS1: 3 -> 3 GPUs; 40 x >= 20 GiB -> CPX (24 GiB), 5 GPUs, on NPS1 beside the SPX
    assert {p.pair.name: p.gpus for p in mi300x.pairs} == {"SPX+NPS1": 3, "CPX+NPS1": 5, "CPX+NPS4": 5}
    assert (mi300x.gpus, mi300x.nodes, mi300x.free_gpus) == (13, 2, 3)
    assert [(p.name, p.nodes, p.free) for p in mi300x.profiles] == [
        ("mi300x-nps1-spx3-cpx5", 1, 0),
        ("mi300x-nps4-cpx5-free3", 1, 3),
    ]
    assert (mi355x.gpus, mi355x.nodes) == (10, 2)
    assert all(p.dcm for p in mi355x.profiles)  # DPX+NPS2 and QPX+NPS1: profiles the v1.5.1 chart ships
    assert (result.nodes, result.nodes_lower_bound, result.gpus, result.gpus_lower_bound) == (4, 4, 23, 23)
    assert result.optimal
    assert result.dcm_config() == {
        "gpu-config-profiles": {
            "mi300x-nps1-spx3-cpx5": {
                "profiles": [
                    {"computePartition": "SPX", "memoryPartition": "NPS1", "numGPUsAssigned": 3},
                    {"computePartition": "CPX", "memoryPartition": "NPS1", "numGPUsAssigned": 5},
                ],
                "skippedGPUs": {"ids": []},
            },
            "mi300x-nps4-cpx5-free3": {
                "profiles": [{"computePartition": "CPX", "memoryPartition": "NPS4", "numGPUsAssigned": 5}],
                "skippedGPUs": {"ids": [5, 6, 7]},
            },
            "mi355x-nps2-dpx6-free2": {
                "profiles": [{"computePartition": "DPX", "memoryPartition": "NPS2", "numGPUsAssigned": 6}],
                "skippedGPUs": {"ids": [6, 7]},
            },
            "mi355x-nps1-qpx4-free4": {
                "profiles": [{"computePartition": "QPX", "memoryPartition": "NPS1", "numGPUsAssigned": 4}],
                "skippedGPUs": {"ids": [4, 5, 6, 7]},
            },
        },
        "gpuClientSystemdServices": {"names": ["amd-metrics-exporter", "gpuagent"]},
    }


def test_gpus_per_pair_are_the_logical_gpus_over_a_gpus_rounded_up(catalog: Catalog):
    gpu = catalog.gpu("MI300X")
    result = pack_model(AmdDemand(gpu, 8, {"CPX+NPS4": 41, "QPX+NPS4": 4, "DPX+NPS2": 3}))
    assert {p.pair.name: (p.gpus, p.spare) for p in result.pairs} == {
        "DPX+NPS2": (2, 1),
        "QPX+NPS4": (1, 0),
        "CPX+NPS4": (6, 7),
    }
    # NPS2 and NPS4 never share a node: 2 GPUs on one node, 7 on another, though 9 GPUs would need only 2 either way
    assert (result.nodes, result.nodes_lower_bound) == (2, 2)
    _covers(gpu, {"CPX+NPS4": 41, "QPX+NPS4": 4, "DPX+NPS2": 3}, result)


def test_different_nps_modes_never_share_a_node(catalog: Catalog):
    gpu = catalog.gpu("MI300X")
    # 4 GPUs of NPS1 and 4 of NPS4 would fill one 8-GPU node; the NPS modes need two
    result = pack_model(AmdDemand(gpu, 8, {"SPX+NPS1": 4, "CPX+NPS4": 32}))
    assert (result.nodes, result.free_gpus) == (2, 8)
    assert {p.memory for p in result.profiles} == {"NPS1", "NPS4"}
    assert all(len({p.memory}) == 1 for p in result.profiles)


def test_compute_modes_share_a_node_of_one_nps_mode_unless_mix_compute_is_off(catalog: Catalog):
    gpu = catalog.gpu("MI300X")
    mixed = pack_model(AmdDemand(gpu, 8, {"SPX+NPS1": 12, "CPX+NPS1": 160}))  # 12 + 20 GPUs
    assert mixed.nodes == 4 and mixed.free_gpus == 0
    assert any(len(p.groups) > 1 for p in mixed.profiles)
    assert any("heterogeneous DCM profile" in note for note in mixed.notes)
    apart = pack_model(AmdDemand(gpu, 8, {"SPX+NPS1": 12, "CPX+NPS1": 160}, mix_compute=False))
    assert all(len(p.groups) == 1 for p in apart.profiles)
    assert (apart.nodes, apart.nodes_lower_bound, apart.free_gpus) == (5, 5, 8)  # ceil(12/8) + ceil(20/8)
    assert not any("heterogeneous" in note for note in apart.notes)


@pytest.mark.parametrize("seed", range(40))
def test_random_demands_pack_at_the_brute_force_minimum(catalog: Catalog, seed: int):
    rng = random.Random(seed)
    model = rng.choice(["MI300X", "MI325X", "MI350X", "MI355X"])
    gpu = catalog.gpu(model)
    pairs = rng.sample([p.name for p in gpu.partitions.pairs], rng.randint(1, 4))
    demand = {name: rng.randint(1, 40) for name in pairs}
    per_node, mix = rng.choice([4, 8, 8, 16]), rng.random() < 0.7
    result = pack_model(AmdDemand(gpu, per_node, demand, mix_compute=mix))
    _covers(gpu, demand, result)
    logical = {p.name: p.logical_gpus for p in gpu.partitions.pairs}
    assert result.gpus == result.gpus_lower_bound == sum(math.ceil(c / logical[n]) for n, c in demand.items())
    fewest = _fewest_nodes(gpu, {p.pair.name: p.gpus for p in result.pairs}, per_node, mix)
    assert result.nodes == result.nodes_lower_bound == fewest
    assert result.optimal


def _flexible(gpu, gib: float, count: int) -> FlexibleDemand:
    fits = pairs_for_memory(gpu, gib)
    return FlexibleDemand(count, tuple(p for p in fits if p.logical_gpus == fits[0].logical_gpus), f"{count} x {gib}")


def test_a_memory_demand_takes_the_nps_mode_that_saves_a_node(catalog: Catalog):
    gpu = catalog.gpu("MI300X")
    # 7 GPUs of CPX+NPS4 leave one GPU on their node: 8 more CPX partitions fit there in NPS4, not in NPS1
    result = pack_model(AmdDemand(gpu, 8, {"CPX+NPS4": 56}, (_flexible(gpu, 20, 8),)))
    assert {p.pair.name: p.gpus for p in result.pairs} == {"CPX+NPS4": 8}
    assert result.nodes == 1 and result.free_gpus == 0
    assert result.notes[0].startswith("8 x 20 -> CPX+NPS4 (24 GiB each; also holds it: CPX+NPS1)")
    # with nothing to share, the preferred mode: NPS1 (documented, DCM's, first)
    alone = pack_model(AmdDemand(gpu, 8, {}, (_flexible(gpu, 20, 8),)))
    assert [p.pair.name for p in alone.pairs] == ["CPX+NPS1"]


@pytest.mark.parametrize("seed", range(15))
def test_the_nps_choice_of_memory_demands_is_the_best_of_every_combination(catalog: Catalog, seed: int):
    rng = random.Random(seed)
    gpu = catalog.gpu(rng.choice(["MI300X", "MI350X"]))
    fixed = {name: rng.randint(1, 30) for name in rng.sample([p.name for p in gpu.partitions.pairs], 2)}
    flexible = tuple(_flexible(gpu, rng.choice([10, 30, 40, 60, 100]), rng.randint(1, 30)) for _ in range(3))
    result = pack_model(AmdDemand(gpu, 8, fixed, flexible))
    best = None
    for choice in itertools.product(*(f.candidates for f in flexible)):
        counts = Counter(fixed)
        for want, pair in zip(flexible, choice, strict=True):
            counts[pair.name] += want.count
        trial = pack_model(AmdDemand(gpu, 8, dict(counts)))
        best = min(best or (trial.nodes, trial.gpus), (trial.nodes, trial.gpus))
    assert (result.nodes, result.gpus) == best


def test_dcm_gets_the_profiles_it_applies_and_the_host_role_the_others(catalog: Catalog):
    gpu = catalog.gpu("MI300X")
    result = pack([AmdDemand(gpu, 8, {"CPX+NPS4": 64, "QPX+NPS4": 32, "DPX+NPS2": 16})])
    by_name = {p.name: p for p in result.models[0].profiles}
    assert sorted(by_name) == ["mi300x-nps2-dpx8", "mi300x-nps4-cpx8", "mi300x-nps4-qpx8"]
    assert by_name["mi300x-nps4-cpx8"].layout.managed_by == "operator" and by_name["mi300x-nps4-cpx8"].dcm
    assert by_name["mi300x-nps2-dpx8"].layout.managed_by == "operator"
    assert by_name["mi300x-nps4-qpx8"].layout.managed_by == "host"  # MI300X runs QPX+NPS4; DCM: NPS4 with CPX only
    assert by_name["mi300x-nps4-qpx8"].dcm_reasons == (
        "the AMD GPU Operator's Device Config Manager applies NPS4 with CPX only, not with QPX; use managed_by: host"
        " (the amd_partition role) for it",
    )
    assert sorted(result.dcm_config()["gpu-config-profiles"]) == ["mi300x-nps2-dpx8", "mi300x-nps4-cpx8"]


def test_a_fleet_of_100000_gpus_packs_at_its_bounds(catalog: Catalog):
    gpu = catalog.gpu("MI300X")
    demand = {"SPX+NPS1": 30_001, "DPX+NPS2": 60_003, "CPX+NPS4": 8 * 40_005, "QPX+NPS1": 4 * 9_999}
    result = pack_model(AmdDemand(gpu, 8, demand, (_flexible(gpu, 20, 1001),) * 6))
    assert result.optimal
    # per NPS mode: a node shared with the pair before, the pair's full nodes, its last node
    assert len(result.profiles) <= 2 * len(result.pairs) + len({p.pair.memory for p in result.pairs})
    resolved = {p.pair.name: p.partitions for p in result.pairs}
    assert resolved == {**demand, "CPX+NPS1": 6006}  # the memory demands' CPX partitions on NPS1 nodes
    _covers(gpu, resolved, result)


# -- the demand file -----------------------------------------------------------------------------------------------


def _load(tmp_path: Path, catalog: Catalog, text: str):
    path = tmp_path / "demand.yaml"
    path.write_text(text)
    return path, load_amd_demand(path, catalog)


def test_a_demand_file_reads_pairs_memory_and_merges_a_models_entries(tmp_path: Path, catalog: Catalog):
    _, loaded = _load(
        tmp_path,
        catalog,
        """\
gpus:
  - model: AMD Instinct MI300X
    gpus_per_node: 8
    partitions: {CPX+NPS4: 40, cpx_nps4: 8}
  - model: 1002:74a1
    gpus_per_node: 8
    partitions: {SPX+NPS1: 3}
    memory: [{memory_gib: 90, count: 4, nps: NPS2}]
  - model: MI355X
    gpus_per_node: 8
    partitions: {QPX+NPS2: 8}
""",
    )
    assert loaded.ok, loaded.diagnostics
    mi300x, mi355x = loaded.demands
    assert mi300x.gpu.name == "MI300X" and dict(mi300x.partitions) == {"CPX+NPS4": 48, "SPX+NPS1": 3}
    (flex,) = mi300x.flexible
    assert [p.name for p in flex.candidates] == ["DPX+NPS2"] and flex.count == 4
    assert dict(mi355x.partitions) == {"QPX+NPS2": 8}  # NPS2 with QPX is valid on MI35x


BAD_DEMAND = """\
# every error of the file at its line
gpus:
  - model: MI300  #! gpus[0].model: unknown GPU 'MI300'; did you mean 'MI300X'?
    gpus_per_node: 8
    partitions: {CPX+NPS4: 8}
  - model: H100-SXM5-80GB  #! gpus[1].model: H100-SXM5-80GB is an NVIDIA GPU: pack its MIG demand with gpufleet mig pack
    gpus_per_node: 8
    partitions: {CPX+NPS4: 8}
  - model: MI25  #! gpus[2].model: MI25 has no compute or memory partitions
    gpus_per_node: 8
    partitions: {SPX+NPS1: 1}
  - model: MI300X
    gpus_per_node: 8
    partitions:
      CPX+NPS2: 8  #! gpus[3].partitions["CPX+NPS2"]: CPX with NPS2 is not a partition mode of MI300X: CPX runs
      SPX+NPS4: 1  #! gpus[3].partitions["SPX+NPS4"]: SPX with NPS4 is not a partition mode of MI300X
      DPX+NPS4: 2  #! gpus[3].partitions["DPX+NPS4"]: DPX with NPS4 is not a partition mode of MI300X
      CPX-NPS4: 8  #! gpus[3].partitions.CPX-NPS4: 'CPX-NPS4' is not a partition pair: write COMPUTE+MEMORY
    memory:
      - {memory_gib: 200, count: 4}  #! gpus[3].memory[0].memory_gib: holds 200 GiB: the largest, SPX+NPS1, has 192
      - {memory_gib: 60, count: 4, nps: NPS4}  #! gpus[3].memory[1].memory_gib: in NPS4 holds 60 GiB: the largest, QPX
  - model: MI350X
    gpus_per_node: 8
    partitions:
      CPX+NPS4: 8  #! gpus[4].partitions["CPX+NPS4"]: NPS4 is not a memory partition mode of MI350X; its modes are
      QPX+NPS2: 4
    memory:
      - {memory_gib: 30, count: 8, nps: NPS4}  #! gpus[4].memory[0].nps: NPS4 is not a memory partition mode of MI350X
  - model: MI300X
    gpus_per_node: 4  #! gpus[5].gpus_per_node: MI300X is demanded at gpus[3] with nodes of 8 GPUs: a model's nodes
    partitions: {SPX+NPS1: 1}
"""


def test_every_error_of_a_demand_file_is_reported_at_its_line(tmp_path: Path, catalog: Catalog):
    path, loaded = _load(tmp_path, catalog, BAD_DEMAND)
    assert not loaded.ok and loaded.demands == []
    expected, _ = markers.expectations(path, TODAY)
    markers.assert_matches(path, expected, loaded.diagnostics)
    assert all(str(d).startswith(f"{path}:{d.line}: gpus[") for d in loaded.diagnostics)


BAD_STRUCTURE = """\
gpus:
  - model: MI300X
    gpus_per_node: 8
    partitions:
      CPX+NPS4: 0  #! gpus[0].partitions["CPX+NPS4"]: 0 logical GPUs: ask for 1 or more
      SPX+NPS1: -3  #! gpus[0].partitions["SPX+NPS1"]: -3 logical GPUs: ask for 1 or more
    memory:
      - {memory_gib: 20, count: 0}  #! gpus[0].memory[0].count: 0 logical GPUs: ask for 1 or more
      - {memory_gib: 0, count: 2}  #! gpus[0].memory[1].memory_gib: must be more than 0
      - {memory_gib: 20, count: 2, nps: NPS3}  #! gpus[0].memory[2].nps: 'NPS3' is not valid; did you mean
  - model: MI300X  #! gpus[1]: give partitions (logical GPUs per pair, e.g. CPX+NPS4: 40) or memory
    gpus_per_node: 8
  - model: MI300X  #! gpus[2].gpus_per_node: missing required key 'gpus_per_node'
    partition: {CPX+NPS4: 1}  #! gpus[2].partition: unknown key 'partition'; did you mean 'partitions'
  - model: MI300X
    gpus_per_node: 0  #! gpus[3].gpus_per_node: must be at least 1, got 0
    partitions: {CPX+NPS4: 1}
"""


def test_counts_below_one_and_unknown_keys_are_refused_at_their_lines(tmp_path: Path, catalog: Catalog):
    path, loaded = _load(tmp_path, catalog, BAD_STRUCTURE)
    expected, _ = markers.expectations(path, TODAY)
    markers.assert_matches(path, expected, loaded.diagnostics)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("- MI300X\n", 1, "an AMD partition demand file is a mapping with a 'gpus:' list"),
        ("gpus: []\n", 1, "gpus: needs at least 1 item(s)"),
        ("gpus:\n  - model: [MI300X\n", 3, "YAML:"),
    ],
)
def test_a_file_that_is_no_demand_says_so(tmp_path: Path, catalog: Catalog, text: str, line: int, fragment: str):
    _, loaded = _load(tmp_path, catalog, text)
    assert not loaded.ok
    assert fragment in str(loaded.diagnostics[0]) and loaded.diagnostics[0].line == line, loaded.diagnostics


def test_a_demand_beyond_the_largest_fleets_is_a_typo(tmp_path: Path, catalog: Catalog):
    count = (MAX_FLEET_GPUS + 1) * 8
    _, loaded = _load(
        tmp_path, catalog, f"gpus:\n  - model: MI300X\n    gpus_per_node: 8\n    partitions: {{CPX+NPS4: {count}}}\n"
    )
    assert [(d.line, d.path) for d in loaded.diagnostics] == [(2, "gpus[0]")]
    assert f"needs at least {MAX_FLEET_GPUS + 1:,} GPUs" in loaded.diagnostics[0].message
