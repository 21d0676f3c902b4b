"""The AMD Instinct models in the catalog as `gpufleet catalog gpus` shows them (an AMD partitions column, the pairs
in JSON), and name matching that keeps to a vendor: an MI name never gets an NVIDIA part suggested, nor the reverse."""

from __future__ import annotations

import json

import pytest

from gpufleet.catalog import Catalog, UnknownGpu, query_vendor
from tests.conftest import cli

INSTINCT = ("MI300X", "MI325X", "MI350X", "MI355X")


def test_catalog_gpus_lists_the_four_instinct_models_with_their_pairs():
    data = json.loads(cli("catalog", "gpus", "--json").stdout)
    by_name = {g["name"]: g for g in data}
    for name in INSTINCT:
        gpu = by_name[name]
        assert gpu["vendor"] == "amd" and gpu["mig"] is False
        assert len(gpu["amd_partitions"]) == 7, name
    cpx = next(p for p in by_name["MI325X"]["amd_partitions"] if p["pair"] == "CPX+NPS4")
    assert cpx == {
        "pair": "CPX+NPS4",
        "compute": "CPX",
        "memory": "NPS4",
        "logical_gpus": 8,
        "memory_gib": 32.0,
        "documented": False,
    }
    assert by_name["H100-SXM5-80GB"]["amd_partitions"] == []
    assert by_name["MI25"]["amd_partitions"] == []  # an AMD GPU without partitions


def test_catalog_gpus_table_has_an_amd_partitions_column():
    proc = cli("catalog", "gpus", "--family", "CDNA4", env={"COLUMNS": "200"})
    assert proc.returncode == 0
    header = next(line for line in proc.stdout.splitlines() if "name" in line and "vendor" in line)
    assert "AMD partitions" in header
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert {row.split("│")[1].strip() for row in rows} == {"MI350X", "MI355X"}
    assert all(row.split("│")[-2].strip() == "yes (7 pairs)" for row in rows)


def test_catalog_gpus_detail_of_an_instinct_model_names_its_pairs():
    proc = cli("catalog", "gpus", "AMD Instinct MI350X", env={"COLUMNS": "250"})
    assert proc.returncode == 0
    assert "CPX+NPS2: 8 x 36 GiB" in proc.stdout and "CPX+NPS1: 8 x 36 GiB (driver rule)" in proc.stdout
    data = json.loads(cli("catalog", "gpus", "1002:75a0", "--json").stdout)
    assert data["name"] == "MI350X" and {p["pair"] for p in data["amd_partitions"]} >= {"QPX+NPS2", "CPX+NPS2"}


@pytest.mark.parametrize(
    ("identifier", "name"),
    [
        ("MI300X", "MI300X"),
        ("mi300x", "MI300X"),
        ("AMD Instinct MI300X", "MI300X"),
        ("1002:74a1", "MI300X"),
        ("1002:74a9", "MI300X"),  # MI300X HF
        ("AMD Instinct MI325X", "MI325X"),
        ("1002:74a5", "MI325X"),
        ("1002:75a0", "MI350X"),
        ("1002:75a3", "MI355X"),
    ],
)
def test_instinct_names_aliases_and_pci_ids_resolve(catalog: Catalog, identifier: str, name: str):
    assert catalog.gpu(identifier).name == name


AMD_QUERIES = ["MI300", "mi325", "MI350", "MI355", "AMD MI300X", "Instinct MI325", "MI250X", "MI210", "MI3"]
# query_vendor's AMD shape wants a digit right after "MI": with a separator the name reads as no vendor's, and the
# hint's "valid:" list is every vendor's (NVIDIA's first). A fix for gpufleet/catalog/__init__.py (_AMD_NAME_RE).
AMD_QUERIES += ["MI-300X", "MI 300X", "mi_325x"]  # written with a separator: still AMD-shaped
NVIDIA_QUERIES = ["H110", "H100-SXM-80GB", "B200X", "A100-80", "GB300X", "L40", "RTX 6000 Pro"]


@pytest.mark.parametrize("query", AMD_QUERIES)
def test_an_mi_name_is_never_offered_an_nvidia_part(catalog: Catalog, query: str):
    assert query_vendor(query) == "amd"
    with pytest.raises(UnknownGpu) as info:
        catalog.gpu(query)
    hint = str(info.value)
    nvidia = [g.name for g in catalog.gpus if g.vendor == "nvidia"]
    assert not [n for n in nvidia if f"'{n}'" in hint or f" {n}," in hint or hint.endswith(f" {n}")], hint
    assert "did you mean 'MI" in hint or "valid: MI" in hint


@pytest.mark.parametrize("query", NVIDIA_QUERIES)
def test_an_nvidia_name_is_never_offered_an_amd_part(catalog: Catalog, query: str):
    with pytest.raises(UnknownGpu) as info:
        catalog.gpu(query)
    hint = str(info.value)
    assert not [name for name in INSTINCT if name in hint], hint


def test_an_unknown_mi_name_in_catalog_gpus_gets_an_amd_suggestion_and_exit_1():
    proc = cli("catalog", "gpus", "MI355", "--json")
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert "did you mean 'MI355X'" in error and "H100" not in error
