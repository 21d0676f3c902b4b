"""`gpufleet amd profiles | check | pack` as a user runs them: exit codes 0/1/2, the JSON contracts, the ConfigMap
written with -o."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import cli


def test_profiles_lists_each_pair_with_its_logical_gpus_memory_basis_and_dcm():
    proc = cli("amd", "profiles", "MI300X", env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
        for line in proc.stdout.splitlines()
        if line.startswith("│")
    }
    assert rows["CPX+NPS4"] == ["8", "24", "documented", "yes"]
    assert rows["QPX+NPS1"] == ["4", "48", "documented", "yes"]
    assert rows["QPX+NPS4"] == ["4", "48", "documented", "no: host"]  # DCM: NPS4 with CPX only
    assert "CPX+NPS2" not in rows
    assert "MI300X: 8 XCDs, 192 GiB; compute SPX, DPX, QPX, CPX; memory NPS1, NPS2, NPS4" in proc.stdout


def test_profiles_json_contract():
    data = json.loads(cli("amd", "profiles", "AMD Instinct MI355X", "--json").stdout)
    assert (data["gpu"], data["partitions"], data["geometry"], data["xcds"]) == ("MI355X", True, "gc-9.5.0", 8)
    assert data["memory_modes"] == ["NPS1", "NPS2"]
    cpx = next(p for p in data["pairs"] if p["pair"] == "CPX+NPS2")
    assert cpx == {
        "pair": "CPX+NPS2",
        "compute": "CPX",
        "memory": "NPS2",
        "logical_gpus": 8,
        "memory_gib": 36.0,
        "documented": True,
        "dcm": True,
    }
    assert len(data["pairs"]) == 7


@pytest.mark.parametrize(
    ("gpu", "reason"),
    [
        (
            "H100-SXM5-80GB",
            "H100-SXM5-80GB is an NVIDIA GPU: it has MIG, not AMD partitions; use gpufleet mig profiles",
        ),
        ("MI300", "unknown GPU 'MI300'; did you mean 'MI300X'?"),
        ("MI25", "MI25 has no compute or memory partitions"),
    ],
)
def test_profiles_refuses_nvidia_unknown_and_unpartitioned_gpus_with_exit_1(gpu: str, reason: str):
    proc = cli("amd", "profiles", gpu)
    assert proc.returncode == 1 and reason in proc.stderr
    proc = cli("amd", "profiles", gpu, "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["partitions"] is False and data["pairs"] == [] and reason in data["reason"]


def test_check_json_contract_for_a_pair_that_runs():
    proc = cli("amd", "check", "1002:74a1", "cpx_nps4", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {
        "gpu": "MI300X",
        "pair": "CPX+NPS4",
        "fits": True,
        "logical_gpus": 8,
        "memory_gib": 24.0,
        "reason": None,
    }


@pytest.mark.parametrize(
    ("gpu", "pair", "line"),
    [
        ("MI300X", "CPX+NPS4", "fits one MI300X: CPX+NPS4 makes 8 logical GPUs of 24 GiB each (documented by AMD;"),
        ("MI325X", "CPX+NPS1", "fits one MI325X: CPX+NPS1 makes 8 logical GPUs of 32 GiB each (the driver's rule;"),
        ("MI355X", "QPX+NPS2", "QPX+NPS2 makes 4 logical GPUs of 72 GiB each (the driver's rule; AMD does not list"),
    ],
)
def test_check_prints_the_figures_and_exits_0(gpu: str, pair: str, line: str):
    proc = cli("amd", "check", gpu, pair)
    assert proc.returncode == 0 and line in proc.stdout


@pytest.mark.parametrize(
    ("gpu", "pair", "reason"),
    [
        ("MI300X", "CPX+NPS2", "CPX with NPS2 is not a partition mode of MI300X: CPX runs with NPS1 or NPS4"),
        ("MI300X", "SPX+NPS4", "SPX with NPS4 is not a partition mode of MI300X: SPX runs with NPS1"),
        ("MI325X", "DPX+NPS4", "DPX with NPS4 is not a partition mode of MI325X"),
        ("MI350X", "CPX+NPS4", "NPS4 is not a memory partition mode of MI350X; its modes are NPS1, NPS2"),
    ],
)
def test_check_refuses_with_the_reason_and_exits_1(gpu: str, pair: str, reason: str):
    proc = cli("amd", "check", gpu, pair)
    assert proc.returncode == 1 and f"does not fit: {reason}" in proc.stdout
    proc = cli("amd", "check", gpu, pair, "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert (data["fits"], data["logical_gpus"], data["memory_gib"]) == (False, None, None) and reason in data["reason"]


def test_check_of_an_nvidia_gpu_points_at_mig_check_in_the_same_json_shape():
    proc = cli("amd", "check", "H100-SXM5-80GB", "CPX+NPS4", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert set(data) == {"gpu", "pair", "fits", "logical_gpus", "memory_gib", "reason"}
    assert data["fits"] is False and "use gpufleet mig check H100-SXM5-80GB" in data["reason"]


@pytest.mark.parametrize("pair", ["CPX", "CPX-NPS4", "NPS4+"])
def test_check_of_text_that_is_no_pair_is_a_usage_error(pair: str):
    proc = cli("amd", "check", "MI300X", pair)
    assert proc.returncode == 2 and "write COMPUTE+MEMORY, e.g. CPX+NPS4" in proc.stderr


def test_pack_example_demand_prints_the_bounds_and_writes_the_configmap(tmp_path: Path):
    out = tmp_path / "dcm.yaml"
    proc = cli("amd", "pack", "--demand", "examples/amd-demand.yaml", "-o", str(out), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "MI300X: 2 nodes (lower bound 2), 13 GPUs (lower bound 13), 3 GPUs free: optimal" in proc.stdout
    assert "fleet: 4 nodes, lower bound 4; 23 GPUs, lower bound 23; 9 GPUs free; optimal" in proc.stdout
    assert "40 x >= 20 GiB -> CPX+NPS1 (24 GiB each; also holds it: CPX+NPS4)" in proc.stdout
    assert "amd_partition role" not in proc.stdout  # every profile of the example is one DCM applies
    assert f"Device Config Manager ConfigMap gpufleet-dcm-config (4 profiles) written to {out}" in proc.stdout
    configmap = YAML(typ="safe").load(out.read_text())
    assert (configmap["kind"], configmap["metadata"]) == (
        "ConfigMap",
        {"name": "gpufleet-dcm-config", "namespace": "kube-amd-gpu"},
    )
    data = json.loads(cli("amd", "pack", "--demand", "examples/amd-demand.yaml", "--json").stdout)
    assert json.loads(configmap["data"]["config.json"]) == data["dcm_config"]
    assert sorted(data["dcm_config"]["gpu-config-profiles"]) == [
        "mi300x-nps1-spx3-cpx5",
        "mi300x-nps4-cpx5-free3",
        "mi355x-nps1-qpx4-free4",
        "mi355x-nps2-dpx6-free2",
    ]


def test_pack_json_contract():
    data = json.loads(cli("amd", "pack", "--demand", "examples/amd-demand.yaml", "--json").stdout)
    assert {k: data[k] for k in ("ok", "nodes", "nodes_lower_bound", "gpus", "gpus_lower_bound", "free_gpus")} == {
        "ok": True,
        "nodes": 4,
        "nodes_lower_bound": 4,
        "gpus": 23,
        "gpus_lower_bound": 23,
        "free_gpus": 9,
    }
    mi355x = data["models"][1]
    assert mi355x["gpu"] == "MI355X" and mi355x["optimal"] is True
    dpx = next(p for p in mi355x["pairs"] if p["pair"] == "DPX+NPS2")
    assert (dpx["partitions"], dpx["gpus"], dpx["spare_partitions"], dpx["memory_gib"]) == (12, 6, 0, 144.0)
    profile = next(p for p in mi355x["profiles"] if p["name"] == "mi355x-nps2-dpx6-free2")
    assert profile["dcm"] is True and profile["groups"] == [{"compute": "DPX", "gpus": 6}]
    assert profile["amd_partitions"] == {
        "managed_by": "operator",
        "profile": "mi355x-nps2-dpx6-free2",
        "memory": "NPS2",
        "devices": [{"compute": "DPX", "gpus": 6}],
        "skipped_gpus": [6, 7],
    }


def test_pack_to_stdout_writes_the_configmap_alone(tmp_path: Path):
    proc = cli("amd", "pack", "--demand", "examples/amd-demand.yaml", "-o", "-", "--namespace", "gpu-amd")
    assert proc.returncode == 0
    configmap = YAML(typ="safe").load(proc.stdout)
    assert configmap["metadata"]["namespace"] == "gpu-amd"
    assert "gpu-config-profiles" in json.loads(configmap["data"]["config.json"])


def test_pack_of_an_invalid_demand_exits_1_with_file_line(tmp_path: Path):
    demand = tmp_path / "demand.yaml"
    demand.write_text("gpus:\n  - model: MI300X\n    gpus_per_node: 8\n    partitions: {CPX+NPS2: 8}\n")
    proc = cli("amd", "pack", "--demand", str(demand))
    assert proc.returncode == 1
    assert f'{demand}:4: gpus[0].partitions["CPX+NPS2"]: CPX with NPS2 is not a partition mode of MI300X' in proc.stderr
    data = json.loads(cli("amd", "pack", "--demand", str(demand), "--json").stdout)
    assert data["ok"] is False and data["errors"][0]["line"] == 4
    demand.write_text("gpus:\n  - model: H100-SXM5-80GB\n    gpus_per_node: 8\n    partitions: {CPX+NPS4: 8}\n")
    proc = cli("amd", "pack", "--demand", str(demand))
    assert proc.returncode == 1 and "pack its MIG demand with gpufleet mig pack" in proc.stderr


def test_pack_output_in_a_missing_directory_or_a_directory_is_a_usage_error(tmp_path: Path):
    for output in (tmp_path, tmp_path / "missing" / "dcm.yaml"):
        proc = cli("amd", "pack", "--demand", "examples/amd-demand.yaml", "-o", str(output))
        assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("namespace", ["Kube_AMD", "-x", "a" * 64, "a/b"])
def test_pack_refuses_a_namespace_kubernetes_would_with_exit_2(namespace: str):
    proc = cli("amd", "pack", "--demand", "examples/amd-demand.yaml", "-o", "-", "--namespace", namespace)
    assert proc.returncode == 2 and "a Kubernetes namespace" in proc.stderr and proc.stdout == ""


def test_pack_of_a_missing_demand_file_exits_1(tmp_path: Path):
    proc = cli("amd", "pack", "--demand", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 1 and "nope.yaml" in proc.stderr
