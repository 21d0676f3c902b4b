"""AMD Instinct partitions of one GPU and one node, held to AMD's documented rules (../shared/reference/amd-instinct.md
§1, §4): which compute x memory pairs each model runs, the memory of each logical GPU, why a pair does not run, and
a layout as the Device Config Manager's profile (Σ numGPUsAssigned + skipped GPUs = the node's GPUs)."""

from __future__ import annotations

import itertools

import pytest

from gpufleet.catalog import Catalog
from gpufleet.mig.amd_partitions import (
    DCM_CONFIGMAP_KEY,
    PairSyntaxError,
    check,
    dcm_applies,
    dcm_config,
    dcm_configmap,
    dcm_profile,
    group_sizes,
    layout_problems,
    pair_problem,
    pairs_for_memory,
    parse_pair,
)
from gpufleet.plan.model import AmdPartitionGroupPlan, AmdPartitionPlan
from gpufleet.spec.models import AmdPartitions

COMPUTE = ("SPX", "DPX", "QPX", "CPX")
MEMORY = ("NPS1", "NPS2", "NPS4")
# amdsmi partition.md's compatibility matrix for MI300X; MI325X is the same GC 9.4.3 with 8 XCDs
GC_943 = {"SPX+NPS1", "DPX+NPS1", "DPX+NPS2", "QPX+NPS1", "QPX+NPS4", "CPX+NPS1", "CPX+NPS4"}
# the driver's rule for GC 9.5.0 (MI350X, MI355X): NPS2 added to QPX and CPX; NPS4 not offered
GC_950 = {"SPX+NPS1", "DPX+NPS1", "DPX+NPS2", "QPX+NPS1", "QPX+NPS2", "CPX+NPS1", "CPX+NPS2"}
VALID = {"MI300X": GC_943, "MI325X": GC_943, "MI350X": GC_950, "MI355X": GC_950}
# AMD's lists per model: all of MI300X's matrix; MI325X's and MI35x's test recipes and the AGFHC profile
DOCUMENTED = {
    "MI300X": GC_943,
    "MI325X": {"SPX+NPS1", "DPX+NPS2"},
    "MI350X": {"SPX+NPS1", "DPX+NPS2", "CPX+NPS2"},
    "MI355X": {"SPX+NPS1", "DPX+NPS2", "CPX+NPS2"},
}
LOGICAL = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}
# memory per logical GPU: MI300X CPX 24 GB (AMD's doc), MI325X 256/8, MI35x 288/8
CPX_GIB = {"MI300X": 24, "MI325X": 32, "MI350X": 36, "MI355X": 36}
ALL_PAIRS = [f"{c}+{m}" for c, m in itertools.product(COMPUTE, MEMORY)]


@pytest.mark.parametrize("model", sorted(VALID))
@pytest.mark.parametrize("pair", ALL_PAIRS)
def test_each_pair_runs_exactly_where_amds_rule_says(catalog: Catalog, model: str, pair: str):
    compute, memory = pair.split("+")
    result = check(catalog.gpu(model), compute, memory)
    assert result.fits is (pair in VALID[model]), result.reason
    if result.fits:
        assert result.reason is None
        assert result.logical_gpus == LOGICAL[compute]
        assert result.documented is (pair in DOCUMENTED[model])
    else:
        assert result.reason and result.logical_gpus is None and result.memory_gib is None


@pytest.mark.parametrize("model", sorted(VALID))
def test_the_catalog_lists_the_documented_pairs_and_no_others(catalog: Catalog, model: str):
    parts = catalog.gpu(model).partitions
    assert {p.name for p in parts.pairs} == VALID[model]
    assert {p.name for p in parts.pairs if p.documented} == DOCUMENTED[model]


@pytest.mark.parametrize("model", sorted(VALID))
def test_memory_per_logical_gpu_is_the_gpus_memory_split_evenly(catalog: Catalog, model: str):
    gpu = catalog.gpu(model)
    for pair in gpu.partitions.pairs:
        assert pair.memory_gib == CPX_GIB[model] * 8 / pair.logical_gpus, pair.name
    # NPS4 splits memory into quadrants, and each CPX partition still gets 24 GB on MI300X (amdgpu-docs overview)
    assert check(gpu, "CPX", "NPS1").memory_gib == CPX_GIB[model]


def test_cpx_nps4_on_mi300x_keeps_24_gib_each(catalog: Catalog):
    assert check(catalog.gpu("MI300X"), "CPX", "NPS4").memory_gib == 24


@pytest.mark.parametrize(
    ("model", "compute", "memory", "reason"),
    [
        (
            "MI300X",
            "CPX",
            "NPS2",
            "CPX with NPS2 is not a partition mode of MI300X: CPX runs with NPS1 or NPS4; NPS2 runs with DPX"
            " (the amdgpu driver's rule for GC 9.4.3)",
        ),
        (
            "MI300X",
            "SPX",
            "NPS4",
            "SPX with NPS4 is not a partition mode of MI300X: SPX runs with NPS1; NPS4 runs with",
        ),
        ("MI325X", "DPX", "NPS4", "DPX with NPS4 is not a partition mode of MI325X: DPX runs with NPS1 or NPS2;"),
        ("MI300X", "QPX", "NPS2", "QPX runs with NPS1 or NPS4; NPS2 runs with DPX"),
        (
            "MI350X",
            "SPX",
            "NPS2",
            "SPX runs with NPS1; NPS2 runs with DPX, QPX, CPX (the amdgpu driver's rule for GC 9.5.0",
        ),
        ("MI350X", "CPX", "NPS4", "NPS4 is not a memory partition mode of MI350X; its modes are NPS1, NPS2"),
        ("MI300X", "TPX", "NPS1", "TPX is not a compute partition mode of MI300X; its modes are SPX, DPX, QPX, CPX"),
        ("MI300X", "CPX", "NPS8", "NPS8 is not a memory partition mode of MI300X; its modes are NPS1, NPS2, NPS4"),
        ("H100-SXM5-80GB", "CPX", "NPS1", "H100-SXM5-80GB is an NVIDIA GPU: partition it with mig"),
        ("MI25", "SPX", "NPS1", "MI25 has no compute or memory partitions"),
    ],
)
def test_a_pair_that_does_not_run_says_which_modes_would(catalog: Catalog, model, compute, memory, reason):
    found = pair_problem(catalog.gpu(model), compute, memory)
    assert found is not None and reason in found
    assert check(catalog.gpu(model), compute, memory).reason == found


def test_nps2_on_mi35x_runs_with_qpx_and_cpx_but_not_with_spx(catalog: Catalog):
    for model in ("MI350X", "MI355X"):
        gpu = catalog.gpu(model)
        assert check(gpu, "QPX", "NPS2").fits and check(gpu, "CPX", "NPS2").fits
        assert not check(gpu, "SPX", "NPS2").fits


@pytest.mark.parametrize("text", ["CPX+NPS4", "cpx+nps4", "cpx_nps4", " CPX + NPS4 ", "Cpx+Nps4"])
def test_a_pair_is_read_in_amds_and_the_resource_names_spelling(text: str):
    assert parse_pair(text) == ("CPX", "NPS4")


@pytest.mark.parametrize("text", ["CPX", "CPX-NPS4", "CPX+", "+NPS4", "CPX+NPS4+SPX", "", "x" * 200])
def test_text_that_is_no_pair_is_refused_saying_how_to_write_one(text: str):
    with pytest.raises(PairSyntaxError, match=r"write COMPUTE\+MEMORY, e.g. CPX\+NPS4"):
        parse_pair(text)


def test_dcm_applies_every_mode_but_nps4_with_anything_other_than_cpx():
    # the v1.5.1 chart's own profiles: SPX+NPS1, CPX+NPS1, CPX+NPS4, DPX+NPS2, QPX+NPS1 (values.yaml
    # defaultDCMConfigMap); NPS4 goes with CPX only (DCM's doc; no source shows another mode with it)
    applied = {p for p in ALL_PAIRS if dcm_applies(*p.split("+"))}
    assert {"SPX+NPS1", "CPX+NPS1", "CPX+NPS4", "DPX+NPS2", "QPX+NPS1"} <= applied
    assert not {p for p in applied if p.endswith("NPS4") and not p.startswith("CPX")}
    assert {p for p in ALL_PAIRS if p.endswith("NPS4") and not p.startswith("CPX")} == set(ALL_PAIRS) - applied


def _layout(**fields) -> AmdPartitions:
    return AmdPartitions.model_validate({"profile": "p", **fields})


def test_a_layout_is_written_as_dcms_profile_entry():
    layout = _layout(
        managed_by="operator",
        memory="NPS1",
        devices=[{"compute": "CPX", "gpus": 4}, {"compute": "SPX", "gpus": 3}],
        skipped_gpus=[7],
    )
    assert dcm_profile(layout, 8) == {
        "profiles": [
            {"computePartition": "CPX", "memoryPartition": "NPS1", "numGPUsAssigned": 4},
            {"computePartition": "SPX", "memoryPartition": "NPS1", "numGPUsAssigned": 3},
        ],
        "skippedGPUs": {"ids": [7]},
    }


def test_a_group_of_all_gpus_assigns_every_gpu_not_skipped():
    layout = _layout(managed_by="operator", memory="NPS4", devices=[{"compute": "CPX"}], skipped_gpus=[6, 2])
    profile = dcm_profile(layout, 8)
    assert profile["profiles"] == [{"computePartition": "CPX", "memoryPartition": "NPS4", "numGPUsAssigned": 6}]
    assert profile["skippedGPUs"] == {"ids": [2, 6]}
    # DCM's rule: the sum of numGPUsAssigned and the skipped GPUs is the node's GPUs
    assert sum(p["numGPUsAssigned"] for p in profile["profiles"]) + len(profile["skippedGPUs"]["ids"]) == 8


def test_a_group_of_all_gpus_on_nodes_of_unknown_gpus_leaves_the_count_to_dcm():
    layout = _layout(managed_by="operator", memory="NPS1", devices=[{"compute": "CPX"}])
    assert dcm_profile(layout, None) == {
        "profiles": [{"computePartition": "CPX", "memoryPartition": "NPS1"}],  # as AMD's own cpx_nps1_all profile
        "skippedGPUs": {"ids": []},
    }


def test_the_plans_layout_gives_the_same_profile_as_the_stacks():
    layout = _layout(
        managed_by="operator", memory="NPS1", devices=[{"compute": "SPX", "gpus": 2}, {"compute": "CPX", "gpus": 6}]
    )
    plan = AmdPartitionPlan(
        managed_by="operator",
        profile="p",
        memory="NPS1",
        groups=(AmdPartitionGroupPlan("SPX", 2), AmdPartitionGroupPlan("CPX", 6)),
        skipped_gpus=(),
        logical_gpus=None,
        memory_gib={},
    )
    assert dcm_profile(plan, 8) == dcm_profile(layout, 8)
    assert group_sizes(plan, 8) == [2, 6]


def test_a_layout_dcm_does_not_apply_is_no_dcm_profile():
    with pytest.raises(ValueError, match="applies NPS4 with CPX only, not with QPX"):
        dcm_profile(_layout(memory="NPS4", devices=[{"compute": "QPX"}]), 8)
    assert dcm_profile(_layout(memory="NPS2", devices=[{"compute": "DPX"}]), 8)["profiles"] == [
        {"computePartition": "DPX", "memoryPartition": "NPS2", "numGPUsAssigned": 8}
    ]


def test_dcms_configmap_holds_the_profiles_as_json_text():
    import json

    config = dcm_config({"cpx": dcm_profile(_layout(memory="NPS4", devices=[{"compute": "CPX"}]), 8)})
    configmap = dcm_configmap(config, "kube-amd-gpu")
    assert configmap["metadata"] == {"name": "gpufleet-dcm-config", "namespace": "kube-amd-gpu"}
    assert json.loads(configmap["data"][DCM_CONFIGMAP_KEY]) == config
    assert list(config["gpu-config-profiles"]) == ["cpx"]
    # what DCM stops while it repartitions a node: AMD's default services
    assert config["gpuClientSystemdServices"] == {"names": ["amd-metrics-exporter", "gpuagent"]}


@pytest.mark.parametrize(
    ("fields", "gpus", "expected"),
    [
        # 4 + 3 assigned, none skipped, on 8 GPUs: one GPU is neither
        (
            {"devices": [{"compute": "CPX", "gpus": 4}, {"compute": "SPX", "gpus": 3}]},
            8,
            [(("devices",), "the groups assign 7 GPUs and skip 0: 7, but a node has 8")],
        ),
        ({"devices": [{"compute": "CPX", "gpus": 4}, {"compute": "SPX", "gpus": 3}], "skipped_gpus": [7]}, 8, []),
        (
            {"devices": [{"compute": "CPX"}], "skipped_gpus": [8]},
            8,
            [(("skipped_gpus", 0), "GPU 8 is not on a node of 8")],
        ),
        (
            {"devices": [{"compute": "CPX"}], "skipped_gpus": [0, 1]},
            2,
            [(("skipped_gpus",), "every one of the node's 2 GPUs is skipped")],
        ),
        ({"devices": [{"compute": "CPX", "gpus": 9}]}, None, []),  # GPUs per node unknown: counts unchecked
    ],
)
def test_every_gpu_of_a_node_is_assigned_or_skipped(catalog: Catalog, fields, gpus, expected):
    problems = layout_problems(catalog.gpu("MI300X"), _layout(memory="NPS1", **fields), gpus)
    assert len(problems) == len(expected), problems
    for problem, (path, fragment) in zip(problems, expected, strict=True):
        assert problem.path == path and fragment in problem.message


def test_a_memory_mode_the_model_lacks_is_named_once_at_memory(catalog: Catalog):
    layout = _layout(memory="NPS4", devices=[{"compute": "CPX", "gpus": 4}, {"compute": "QPX", "gpus": 4}])
    problems = layout_problems(catalog.gpu("MI355X"), layout, 8)
    assert [(p.path, p.message.split(";")[0]) for p in problems] == [
        (("memory",), "NPS4 is not a memory partition mode of MI355X")
    ]


def test_dcm_refuses_the_modes_it_does_not_apply_at_their_keys(catalog: Catalog):
    layout = _layout(managed_by="operator", memory="NPS4", devices=[{"compute": "QPX"}])  # MI300X runs it; DCM not
    problems = layout_problems(catalog.gpu("MI300X"), layout, 8)
    assert [p.path for p in problems] == [("devices", 0, "compute")]
    # the host role sets what DCM does not
    assert layout_problems(catalog.gpu("MI300X"), layout.model_copy(update={"managed_by": "host"}), 8) == []
    assert layout_problems(catalog.gpu("MI355X"), _layout(memory="NPS2", devices=[{"compute": "QPX"}]), 8) == []


def test_pairs_for_memory_start_with_the_smallest_partition_that_holds_it(catalog: Catalog):
    mi300x = catalog.gpu("MI300X")
    assert [p.name for p in pairs_for_memory(mi300x, 20)][:2] == ["CPX+NPS1", "CPX+NPS4"]
    assert [p.name for p in pairs_for_memory(mi300x, 24)][:1] == ["CPX+NPS1"]  # 24 GiB fits 24 GiB
    assert [p.name for p in pairs_for_memory(mi300x, 100)] == ["SPX+NPS1"]
    assert pairs_for_memory(mi300x, 193) == []
    # on MI35x the documented CPX+NPS2 comes before the driver-rule CPX+NPS1
    assert [p.name for p in pairs_for_memory(catalog.gpu("MI350X"), 30)][:2] == ["CPX+NPS2", "CPX+NPS1"]
    assert pairs_for_memory(catalog.gpu("H100-SXM5-80GB"), 10) == ()
