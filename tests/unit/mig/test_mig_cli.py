"""`gpufleet mig check | pack | profiles` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gpufleet.catalog import load_catalog
from gpufleet.mig.demand import load_demand
from tests import markers
from tests.conftest import FIXTURES, TODAY, cli
from tests.unit.mig.test_mig_outputs import load_strict

DEMAND_FIXTURES = sorted((FIXTURES / "invalid-demand").glob("*.yaml"))


def test_check_fits_prints_the_start_of_each_instance():
    proc = cli("mig", "check", "NVIDIA H100 80GB HBM3", "1g.20gb=3", "1g.10gb", "1g.10gb")
    assert proc.returncode == 0
    assert "fits one H100-SXM5-80GB: 1g.20gb@0, 1g.20gb@2, 1g.10gb@4, 1g.10gb@5, 1g.20gb@6" in proc.stdout


def test_check_json_contract():
    data = json.loads(cli("mig", "check", "10de:2330", "3g.40gb=2", "--json").stdout)
    assert data == {
        "gpu": "H100-SXM5-80GB",
        "fits": True,
        "placements": [{"profile": "3g.40gb", "start": 0, "size": 4}, {"profile": "3g.40gb", "start": 4, "size": 4}],
        "reason": None,
    }


def test_check_refusal_exits_1_with_reason_and_drawing():
    proc = cli("mig", "check", "H100-SXM5-80GB", "3g.40gb=2", "1g.10gb", "--show")
    assert proc.returncode == 1
    assert "does not fit: 3g.40gb x2 + 1g.10gb need 9 memory slices; one H100-SXM5-80GB has 8" in proc.stdout
    assert "1g.10gb       no free start in {0,1,2,3,4,5,6}:1" in proc.stdout
    data = json.loads(cli("mig", "check", "H100-SXM5-80GB", "3g.40gb=2", "1g.10gb", "--json").stdout)
    assert data["fits"] is False and data["placements"] == [] and "memory slices" in data["reason"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("T4", "1g.5gb"), "T4 (Turing) has no MIG"),
        (("H100-SXM5-80GB", "1g.5gb"), "is not a MIG profile of H100-SXM5-80GB"),
        (("H100-SXM-80GB", "1g.5gb"), "did you mean 'H100-SXM5-80GB'"),
    ],
)
def test_check_refuses_gpus_without_mig_unknown_profiles_and_unknown_gpus_in_json(args, reason):
    proc = cli("mig", "check", *args, "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["fits"] is False and data["placements"] == [] and reason in data["reason"]


def test_check_usage_error_for_a_bad_count():
    assert cli("mig", "check", "H100-SXM5-80GB", "1g.10gb=two").returncode == 2


def test_profiles_lists_maximal_layouts():
    proc = cli("mig", "profiles", "A30-24GB")
    assert "maximal layouts" in proc.stdout and "4g.24gb" in proc.stdout
    data = json.loads(cli("mig", "profiles", "A30-24GB", "--json").stdout)
    assert {"4g.24gb": 1} in data["maximal_layouts"]
    assert {"2g.12gb": 2} in data["maximal_layouts"]


def test_pack_example_demand(tmp_path: Path):
    out = tmp_path / "mig-parted.yaml"
    proc = cli("mig", "pack", "--demand", "examples/mig-demand.yaml", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "fleet: 74 GPUs, lower bound 74, gap 0 (0.00%)" in proc.stdout
    assert "40 x >= 9 GiB -> 1g.10gb (9.62 GiB usable)" in proc.stdout
    spec = load_strict(out.read_text())
    assert "h100-sxm5-80gb-1" in spec.mig_configs
    data = json.loads(cli("mig", "pack", "--demand", "examples/mig-demand.yaml", "--json").stdout)
    assert data["gpus"] == 74 and data["lower_bound"] == 74 and data["gap"] == 0
    h100 = next(m for m in data["models"] if m["gpu"] == "H100-SXM5-80GB")
    assert sum(lay["gpus"] for lay in h100["layouts"]) == h100["gpus"] == 53
    assert (
        YAML(typ="safe").load(cli("mig", "pack", "--demand", "examples/mig-demand.yaml", "-o", "-").stdout)["version"]
        == "v1"
    )


@pytest.mark.parametrize("path", DEMAND_FIXTURES, ids=lambda p: p.stem)
def test_invalid_demand_files_report_every_error_at_its_line(path: Path):
    loaded = load_demand(path, load_catalog())
    assert not loaded.ok
    expected, _ = markers.expectations(path, TODAY)
    markers.assert_matches(path, expected, loaded.diagnostics)


def test_pack_of_an_invalid_demand_exits_1_with_file_line():
    path = "tests/fixtures/invalid-demand/memory_too_large.yaml"
    proc = cli("mig", "pack", "--demand", path)
    assert proc.returncode == 1
    assert f"{path}:6: demand[0].memory[0].min_gib: no MIG instance" in proc.stderr
