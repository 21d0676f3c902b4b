"""The GPU catalog after issue 21 (B300, GB200, GB300, RTX PRO 6000 Blackwell Server Edition, H20, H800, A800,
GH200 144G, H100-96GB, PG506-96GB): internal consistency, NVIDIA's mig-parted device ids, the RTX PRO 6000's media
engine rule, `mig profiles` / `mig check` on every new model, and name matching that stays within a vendor.

Expected values are written out here from the sources named in gpufleet/catalog/gpus.yaml, not read from it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pydantic
import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from gpufleet import mig
from gpufleet.catalog import Catalog, Gpu, UnknownGpu, load_catalog, query_vendor
from gpufleet.cli import app
from gpufleet.cli import common as cli_common
from tests.conftest import FIXTURES, gpufleet
from tests.unit.mig.test_mig import fits_independently

CATALOG = load_catalog()
MIG_PARTED = FIXTURES / "reference/mig-parted-v0.15.0/config-default.yaml"

# mig-parted v0.15.0 device-filter -> the catalog model it names (its comments and NVIDIA's driver README).
NEW_IDS = {
    "0x294110DE": "GB200-186GB",
    "0x31C210DE": "GB300-288GB",
    "0x2BB510DE": "RTX-PRO-6000-BSE-96GB",
    "0x318210DE": "B300-288GB",
    "0x234810DE": "GH200-144GB",
    "0x232910DE": "H20-96GB",
    "0x232410DE": "H800-SXM5-80GB",
    "0x232210DE": "H800-PCIE-80GB",
    "0x233A10DE": "H800-NVL-94GB",
    "0x20F310DE": "A800-SXM4-80GB",
    "0x20F510DE": "A800-PCIE-80GB",
    "0x20F610DE": "A800-PCIE-40GB",
    "0x233D10DE": "H100-96GB",
    "0x20B610DE": "PG506-96GB",
}
NEW_MODELS = sorted(set(NEW_IDS.values()))
# nvidia-smi product names (NVIDIA open-gpu-kernel-modules README, "Compatible GPUs").
SMI_NAMES = {
    "NVIDIA GB200": "GB200-186GB",
    "NVIDIA GB300": "GB300-288GB",
    "NVIDIA B300 SXM6 AC": "B300-288GB",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTX-PRO-6000-BSE-96GB",
    "NVIDIA GH200 144G HBM3e": "GH200-144GB",
    "NVIDIA H20": "H20-96GB",
    "NVIDIA H800": "H800-SXM5-80GB",
    "NVIDIA H800 PCIe": "H800-PCIE-80GB",
    "NVIDIA H800 NVL": "H800-NVL-94GB",
    "NVIDIA A800-SXM4-80GB": "A800-SXM4-80GB",
    "NVIDIA A800 80GB PCIe": "A800-PCIE-80GB",
    "NVIDIA A800 40GB Active": "A800-PCIE-40GB",
    "NVIDIA PG506-232": "PG506-96GB",
    "NVIDIA H200 NVL": "H200-NVL-141GB",
    "NVIDIA GH200 120GB": "GH200-96GB",
}


def device_filters() -> set[str]:
    config = YAML(typ="safe").load(MIG_PARTED.read_text())
    found: set[str] = set()
    for entries in config["mig-configs"].values():
        for entry in entries:
            filters = entry.get("device-filter") or []
            found.update([filters] if isinstance(filters, str) else filters)
    return found


# -- internal consistency ---------------------------------------------------------------------------------------


def test_every_pci_id_is_unique_across_the_catalog(catalog: Catalog):
    counts = Counter(pid for g in catalog.gpus for pid in g.pci_ids)
    assert [pid for pid, n in counts.items() if n > 1] == []
    assert len(counts) >= 39


def test_every_mig_parted_device_filter_names_a_mig_capable_catalog_gpu(catalog: Catalog):
    filters = device_filters()
    assert len(filters) == 27  # every id mig-parted v0.15.0's default config knows
    for device_filter in filters:
        gpu = catalog.find_gpu(device_filter)
        assert gpu is not None, f"{device_filter}: no catalog GPU"
        assert gpu.mig is not None, gpu.name
        assert device_filter.lower() in [f.lower() for f in gpu.mig_device_filters]


@pytest.mark.parametrize(("device_filter", "model"), sorted(NEW_IDS.items()))
def test_new_device_ids_name_the_model_mig_parted_says(catalog: Catalog, device_filter: str, model: str):
    assert catalog.gpu(device_filter).name == model
    pci = f"{device_filter[6:10]}:{device_filter[2:6]}".lower()
    assert catalog.gpu(pci).name == model


@pytest.mark.parametrize(("smi_name", "model"), sorted(SMI_NAMES.items()))
def test_nvidia_smi_product_names_resolve(catalog: Catalog, smi_name: str, model: str):
    assert catalog.gpu(smi_name).name == model


@pytest.mark.parametrize("gpu", [g for g in CATALOG.gpus if g.mig], ids=lambda g: g.name)
def test_profile_counts_times_slices_fit_the_geometry(gpu: Gpu):
    geo = gpu.mig
    for p in geo.profiles:
        assert p.max_count * p.compute_slices <= geo.compute_slices, p.name
        assert p.max_count * p.memory_slices <= geo.memory_slices, p.name
        assert all(s >= 0 and s + p.memory_slices <= geo.memory_slices for s in p.starts), p.name
        # max_count instances need that many non-overlapping starts
        disjoint = [s for i, s in enumerate(p.starts) if all(s >= t + p.memory_slices for t in p.starts[:i])]
        assert len(disjoint) >= p.max_count, p.name
        assert p.compute_slices == int(p.name.split("g.")[0]), p.name


@pytest.mark.parametrize("gpu", [g for g in CATALOG.gpus if g.mig], ids=lambda g: g.name)
def test_full_gpu_profile_is_the_largest_and_usable_memory_fits_the_gpu(gpu: Gpu):
    geo = gpu.mig
    full = [p for p in geo.profiles if p.memory_slices == geo.memory_slices]
    assert full and all(p.compute_slices == geo.compute_slices for p in full)
    nominal = {p.name: float(p.name.split(".")[1].split("gb")[0]) for p in geo.profiles}
    assert max(nominal.values()) == nominal[full[0].name] <= gpu.memory_gib
    known = [p.usable_gib for p in geo.profiles if p.usable_gib is not None]
    assert all(u < gpu.memory_gib for u in known)
    if full[0].usable_gib is not None:
        assert full[0].usable_gib == max(known)


def test_every_gpu_names_its_source_and_a_gpu_without_one_is_refused(catalog: Catalog):
    assert all(g.source.strip() for g in catalog.gpus)
    fields = catalog.gpu("T4").model_dump()
    del fields["source"]
    with pytest.raises(pydantic.ValidationError, match="source"):
        Gpu(**fields)


def test_bandwidth_and_nvlink_from_the_datasheets(catalog: Catalog):
    expected = {  # GB/s: (memory bandwidth, NVLink per GPU both directions)
        "H100-SXM5-80GB": (3350, 900),
        "A100-SXM4-80GB": (2039, 600),
        "H200-SXM-141GB": (4800, 900),
        "B200-180GB": (8000, 1800),
        "GB200-186GB": (8000, 1800),
        "RTX-PRO-6000-BSE-96GB": (1597, None),
        "L40S": (864, None),
        "A800-SXM4-80GB": (2039, 400),
    }
    for name, (bandwidth, nvlink) in expected.items():
        gpu = catalog.gpu(name)
        assert (gpu.memory_bandwidth_gbs, gpu.nvlink_gbs) == (bandwidth, nvlink), name
    for gpu in catalog.gpus:  # PCIe-only parts never claim NVLink
        if gpu.name in ("T4", "L4", "L40S", "A10", "RTX-PRO-6000-BSE-96GB") or gpu.vendor == "amd":
            assert gpu.nvlink_gbs is None, gpu.name


def test_min_driver_branch_for_mig_follows_the_guide(catalog: Catalog):
    assert catalog.gpu("B200-180GB").mig.min_driver_branch == 570
    assert catalog.gpu("RTX-PRO-6000-BSE-96GB").mig.min_driver_branch == 575
    assert catalog.gpu("A100-SXM4-80GB").mig.min_driver_branch == 525
    assert catalog.gpu("H100-SXM5-80GB").mig.min_driver_branch is None  # the guide's Hopper row is not usable


# -- RTX PRO 6000 Blackwell: four slices, +gfx, +me.all, -me -----------------------------------------------------

RTX = CATALOG.gpu("RTX-PRO-6000-BSE-96GB")


def test_rtx_pro_6000_places_on_nvidia_smis_twelve_unit_grid():
    by = RTX.mig.by_name
    assert (RTX.mig.compute_slices, RTX.mig.memory_slices) == (4, 12)
    assert by["1g.24gb"].placement == "{0,3,6,9}:3"
    assert by["2g.48gb+gfx"].placement == "{0,6}:6"
    assert by["4g.96gb+gfx"].placement == "{0}:12"
    result = mig.check(RTX, {"2g.48gb": 1, "1g.24gb": 2})
    assert [(p.profile, p.start, p.size) for p in result.placements] == [
        ("2g.48gb", 0, 6),
        ("1g.24gb", 6, 3),
        ("1g.24gb", 9, 3),
    ]


def test_me_all_takes_every_media_engine_so_only_me_less_instances_share_the_gpu():
    assert mig.check(RTX, {"1g.24gb+me.all": 1, "1g.24gb-me": 3}).fits
    assert mig.check(RTX, {"2g.48gb+me.all": 1, "2g.48gb-me": 1}).fits
    refused = mig.check(RTX, {"1g.24gb+me.all": 1, "1g.24gb-me": 2, "1g.24gb+gfx": 1})
    assert not refused.fits
    assert "1g.24gb+me.all takes every media engine" in refused.reason and "1g.24gb+gfx" in refused.reason
    assert not mig.check(RTX, {"2g.48gb+me.all": 1, "2g.48gb": 1}).fits
    one_ofa = mig.check(RTX, {"1g.24gb+me": 1, "1g.24gb+me.all": 1})
    assert not one_ofa.fits and "media extensions" in one_ofa.reason


def test_graphics_instances_mix_with_compute_ones_within_the_counts():
    assert mig.check(RTX, {"1g.24gb+gfx": 2, "1g.24gb": 1, "1g.24gb+me": 1}).fits
    assert mig.check(RTX, {"2g.48gb+gfx": 1, "1g.24gb+gfx": 2}).fits
    assert RTX.mig.base_profile(1).name == "1g.24gb" and RTX.mig.base_profile(2).name == "2g.48gb"
    assert mig.profile_for_memory(RTX, 40).name == "2g.48gb"


def test_rtx_pro_6000_check_agrees_with_the_independent_placement_on_every_small_multiset():
    profiles = RTX.mig.profiles

    def multisets(i: int, compute: int) -> Iterator[dict[str, int]]:
        """Every multiset of up to max_count + 1 of each profile, up to 5 compute slices (one past the GPU's 4)."""
        if i == len(profiles):
            yield {}
            return
        p = profiles[i]
        for c in range(p.max_count + 2):
            if compute + c * p.compute_slices > 5:
                break
            for rest in multisets(i + 1, compute + c * p.compute_slices):
                yield {p.name: c, **rest} if c else rest

    checked = 0
    for d in multisets(0, 0):
        if not d:
            continue
        result = mig.check(RTX, d)
        assert result.fits == fits_independently(RTX, d), (d, result.reason)
        assert "overlapping" not in (result.reason or ""), d  # counts, sums and media decide; placement never does
        checked += 1
    assert checked > 300


# -- mig profiles / mig check on every new model ----------------------------------------------------------------


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_common.out, "width", 200)


@pytest.mark.parametrize("model", NEW_MODELS)
def test_mig_profiles_prints_every_profile_with_its_placement(model: str, wide_console: None):
    result = CliRunner().invoke(app, ["mig", "profiles", model])
    assert result.exit_code == 0, result.output
    gpu = CATALOG.gpu(model)
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") > 2}
    for p in gpu.mig.profiles:
        assert p.name in rows, p.name
        assert p.placement in rows[p.name] and f" {p.max_count} " in rows[p.name], rows[p.name]
    assert "maximal layouts" in result.output


@pytest.mark.parametrize("model", NEW_MODELS)
def test_mig_check_by_pci_id_and_by_name(model: str):
    gpu = CATALOG.gpu(model)
    plain = [p for p in gpu.mig.profiles if p.plain]
    smallest = min(plain, key=lambda p: p.memory_slices)
    for ident in (gpu.pci_ids[0], model):  # aliases and mig-parted's 0x...10DE form: the tests above
        result = CliRunner().invoke(app, ["mig", "check", ident, f"{smallest.name}={smallest.max_count}", "--json"])
        assert result.exit_code == 0, (ident, result.output)
        data = json.loads(result.output)
        assert data["gpu"] == model and data["fits"] is True
        assert [p["start"] for p in data["placements"]] == list(smallest.starts[: smallest.max_count])
    over = CliRunner().invoke(app, ["mig", "check", model, f"{smallest.name}={smallest.max_count + 1}", "--json"])
    assert (
        over.exit_code == 1 and f"at most {smallest.max_count} x {smallest.name}" in json.loads(over.output)["reason"]
    )


def test_mig_profiles_and_check_as_a_user_runs_them():
    profiles = gpufleet("mig", "profiles", "GB200")
    assert profiles.returncode == 0, profiles.stderr
    assert "GB200-186GB: 7 compute slices, 8 memory slices" in profiles.stdout and "7g.186gb" in profiles.stdout
    check = gpufleet("mig", "check", "10de:2bb5", "2g.48gb+gfx", "1g.24gb-me=2")
    assert check.returncode == 0, check.stdout
    assert "fits one RTX-PRO-6000-BSE-96GB: 2g.48gb+gfx@0, 1g.24gb-me@6, 1g.24gb-me@9" in check.stdout


# -- name matching ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "vendor"),
    [
        ("B300", "nvidia"),
        ("B301", "nvidia"),
        ("GB300", "nvidia"),
        ("gh200", "nvidia"),
        ("H100", "nvidia"),
        ("RTX PRO 6000", "nvidia"),
        ("L40S", "nvidia"),
        ("Tesla V100", "nvidia"),
        ("NVIDIA Foo", "nvidia"),
        ("MI300", "amd"),
        ("mi301x", "amd"),
        ("AMD Instinct MI300X", "amd"),
        ("Radeon Instinct MI25", "amd"),
        ("1002:74a1", "amd"),
        ("10de:9999", "nvidia"),
        ("widget", None),
    ],
)
def test_the_vendor_of_a_query_comes_from_its_shape(query: str, vendor: str | None):
    assert query_vendor(query) == vendor


def test_b300_is_an_exact_alias_and_near_misses_stay_with_nvidia(catalog: Catalog):
    assert catalog.gpu("B300").name == "B300-288GB"
    assert catalog.gpu("b300").name == "B300-288GB"
    amd = [g.name for g in catalog.gpus if g.vendor == "amd"]
    for query in ("B301", "B30", "GB301", "H2O", "RTX-PRO-6000"):
        with pytest.raises(UnknownGpu) as info:
            catalog.gpu(query)
        assert not any(name in str(info.value) for name in amd), (query, str(info.value))
    with pytest.raises(UnknownGpu, match="did you mean 'B300-288GB'"):
        catalog.gpu("B301")


def test_mi_queries_never_get_nvidia_suggestions(catalog: Catalog):
    with pytest.raises(UnknownGpu) as info:
        catalog.gpu("MI301")
    message = str(info.value)
    assert "did you mean 'MI300X'" in message
    assert not any(g.name in message for g in catalog.gpus if g.vendor == "nvidia")


@pytest.mark.parametrize(
    ("family", "members"),
    [
        ("H100", {"H100-SXM5-80GB", "H100-PCIE-80GB", "H100-NVL-94GB", "H100-96GB"}),
        ("h200", {"H200-SXM-141GB", "H200-NVL-141GB"}),
        ("A800", {"A800-SXM4-80GB", "A800-PCIE-80GB", "A800-PCIE-40GB"}),
    ],
)
def test_an_ambiguous_family_name_lists_its_models_instead_of_picking_one(catalog: Catalog, family, members):
    assert catalog.find_gpu(family) is None
    with pytest.raises(UnknownGpu) as info:
        catalog.gpu(family)
    message = str(info.value)
    assert f"names {len(members)} GPUs, pick one" in message
    assert {m.strip() for m in message.split("pick one:")[1].split(",")} == members


def test_a_demand_file_naming_a_near_miss_gets_the_same_vendor_aware_hint(tmp_path):
    from gpufleet.mig.demand import load_demand

    path = tmp_path / "demand.yaml"
    path.write_text("demand:\n  - gpu: B301\n    profiles: {1g.34gb: 1}\n  - gpu: H100\n    profiles: {1g.10gb: 1}\n")
    messages = [d.message for d in load_demand(path, CATALOG).diagnostics]
    assert messages[0].startswith("unknown GPU 'B301'; did you mean 'B300-288GB'?") and "MI300X" not in messages[0]
    assert "'H100' names 4 GPUs, pick one: H100-SXM5-80GB" in messages[1]
