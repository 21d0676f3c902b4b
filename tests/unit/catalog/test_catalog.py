"""The hardware catalog against the facts in NVIDIA's and Microsoft's documentation.

The expected values below are written out independently of gpufleet/catalog/*.yaml (from the MIG User Guide
table and Azure's size pages), so a wrong catalog edit fails here.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest
from ruamel.yaml import YAML

from gpufleet.catalog import Catalog, UnknownGpu, load_catalog
from tests.conftest import FIXTURES

# NVIDIA MIG User Guide, "Supported MIG Profiles": profile -> max instances per GPU, per model.
MIG_TABLE = {
    "A100-SXM4-40GB": {
        "1g.5gb": 7,
        "1g.5gb+me": 1,
        "1g.10gb": 4,
        "2g.10gb": 3,
        "3g.20gb": 2,
        "4g.20gb": 1,
        "7g.40gb": 1,
    },
    "A100-SXM4-80GB": {
        "1g.10gb": 7,
        "1g.10gb+me": 1,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
    "H100-SXM5-80GB": {
        "1g.10gb": 7,
        "1g.10gb+me": 1,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
    "H100-NVL-94GB": {
        "1g.12gb": 7,
        "1g.12gb+me": 1,
        "1g.24gb": 4,
        "2g.24gb": 3,
        "3g.47gb": 2,
        "4g.47gb": 1,
        "7g.94gb": 1,
    },
    "GH200-96GB": {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1},
    "H200-SXM-141GB": {
        "1g.18gb": 7,
        "1g.18gb+me": 1,
        "1g.35gb": 4,
        "2g.35gb": 3,
        "3g.71gb": 2,
        "4g.71gb": 1,
        "7g.141gb": 1,
    },
    "B200-180GB": {
        "1g.23gb": 7,
        "1g.23gb+me": 1,
        "1g.45gb": 4,
        "2g.45gb": 3,
        "3g.90gb": 2,
        "4g.90gb": 1,
        "7g.180gb": 1,
    },
    "A30-24GB": {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
}
# Issue 21's models: the guide's B200/H200/H100 tables carried to the sizes mig-parted v0.15.0 names for them, the
# guide's RTX PRO 6000 Blackwell table, and [migparted]'s 96GB group (H20, H100-96GB, PG506-96GB) as it lists it.
MIG_TABLE["GB200-186GB"] = {
    "1g.23gb": 7,
    "1g.23gb+me": 1,
    "1g.47gb": 4,
    "2g.47gb": 3,
    "3g.93gb": 2,
    "4g.93gb": 1,
    "7g.186gb": 1,
}
MIG_TABLE["B300-288GB"] = {
    "1g.34gb": 7,
    "1g.34gb+me": 1,
    "1g.67gb": 4,
    "2g.67gb": 3,
    "3g.135gb": 2,
    "4g.135gb": 1,
    "7g.269gb": 1,
}
MIG_TABLE["GB300-288GB"] = {
    "1g.35gb": 7,
    "1g.35gb+me": 1,
    "1g.70gb": 4,
    "2g.70gb": 3,
    "3g.139gb": 2,
    "4g.139gb": 1,
    "7g.278gb": 1,
}
MIG_TABLE["GH200-144GB"] = {
    "1g.18gb": 7,
    "1g.18gb+me": 1,
    "1g.36gb": 4,
    "2g.36gb": 3,
    "3g.72gb": 2,
    "4g.72gb": 1,
    "7g.144gb": 1,
}
MIG_TABLE["RTX-PRO-6000-BSE-96GB"] = {
    "1g.24gb": 4,
    "1g.24gb+me": 1,
    "1g.24gb+gfx": 4,
    "1g.24gb+me.all": 1,
    "1g.24gb-me": 4,
    "2g.48gb": 2,
    "2g.48gb+gfx": 2,
    "2g.48gb+me.all": 1,
    "2g.48gb-me": 2,
    "4g.96gb": 1,
    "4g.96gb+gfx": 1,
}
for _model in ("H20-96GB", "H100-96GB", "PG506-96GB"):
    MIG_TABLE[_model] = {"1g.12gb": 7, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1}
MIG_TABLE["A100-PCIE-40GB"] = MIG_TABLE["A100-SXM4-40GB"]
MIG_TABLE["A800-PCIE-40GB"] = MIG_TABLE["A100-SXM4-40GB"]
MIG_TABLE["A800-SXM4-80GB"] = MIG_TABLE["A100-SXM4-80GB"]
MIG_TABLE["A800-PCIE-80GB"] = MIG_TABLE["A100-SXM4-80GB"]
MIG_TABLE["H800-SXM5-80GB"] = MIG_TABLE["H100-SXM5-80GB"]
MIG_TABLE["H800-PCIE-80GB"] = MIG_TABLE["H100-SXM5-80GB"]
MIG_TABLE["H800-NVL-94GB"] = MIG_TABLE["H100-NVL-94GB"]
MIG_TABLE["A100-PCIE-80GB"] = MIG_TABLE["A100-SXM4-80GB"]
MIG_TABLE["H100-PCIE-80GB"] = MIG_TABLE["H100-SXM5-80GB"]
MIG_TABLE["H200-NVL-141GB"] = MIG_TABLE["H200-SXM-141GB"]

# {valid starts}:size on the memory-slice axis, by compute slices (and memory slices for the 1g variants).
PLACEMENT_7x8 = {
    (1, 1): ((0, 1, 2, 3, 4, 5, 6), 1),
    (1, 2): ((0, 2, 4, 6), 2),
    (2, 2): ((0, 2, 4), 2),
    (3, 4): ((0, 4), 4),
    (4, 4): ((0,), 4),
    (7, 8): ((0,), 8),
}
NO_MIG = ["V100-PCIE-16GB", "V100-SXM2-32GB", "T4", "A10", "L4", "L40S", "MI300X"]
REQUIRED_SIZES = [
    "Standard_NC6s_v3",
    "Standard_NC12s_v3",
    "Standard_NC24s_v3",
    "Standard_NC24rs_v3",
    "Standard_NC4as_T4_v3",
    "Standard_NC8as_T4_v3",
    "Standard_NC16as_T4_v3",
    "Standard_NC64as_T4_v3",
    "Standard_NC24ads_A100_v4",
    "Standard_NC48ads_A100_v4",
    "Standard_NC96ads_A100_v4",
    "Standard_NC40ads_H100_v5",
    "Standard_NC80adis_H100_v5",
    "Standard_ND96asr_v4",
    "Standard_ND96amsr_A100_v4",
    "Standard_ND96isr_H100_v5",
    "Standard_ND96isr_H200_v5",
    "Standard_ND96isr_MI300X_v5",
    "Standard_NV6ads_A10_v5",
    "Standard_NV12ads_A10_v5",
    "Standard_NV18ads_A10_v5",
    "Standard_NV36ads_A10_v5",
    "Standard_NV36adms_A10_v5",
    "Standard_NV72ads_A10_v5",
    "Standard_NV4as_v4",
    "Standard_NV8as_v4",
    "Standard_NV16as_v4",
    "Standard_NV32as_v4",
]


@pytest.mark.parametrize("model", sorted(MIG_TABLE))
def test_mig_profiles_and_max_counts_match_nvidia_table(catalog: Catalog, model: str):
    gpu = catalog.gpu(model)
    assert gpu.mig is not None
    assert {p.name: p.max_count for p in gpu.mig.profiles} == MIG_TABLE[model]


@pytest.mark.parametrize("model", sorted(m for m in MIG_TABLE if m not in ("A30-24GB", "RTX-PRO-6000-BSE-96GB")))
def test_seven_slice_models_have_nvidia_placements(catalog: Catalog, model: str):
    mig = catalog.gpu(model).mig
    assert (mig.compute_slices, mig.memory_slices) == (7, 8)
    for p in mig.profiles:
        assert (p.starts, p.memory_slices) == PLACEMENT_7x8[(p.compute_slices, p.memory_slices)], p.name
        assert p.compute_slices == int(p.name.split("g.")[0])
        assert p.media_extensions == p.name.endswith("+me")


def test_a30_has_four_compute_and_four_memory_slices(catalog: Catalog):
    mig = catalog.gpu("A30-24GB").mig
    assert (mig.compute_slices, mig.memory_slices) == (4, 4)
    placements = {p.name: (p.starts, p.memory_slices) for p in mig.profiles}
    assert placements["1g.6gb"] == ((0, 1, 2, 3), 1)
    assert placements["2g.12gb"] == ((0, 2), 2)
    assert placements["2g.12gb+me"] == ((0, 2), 2)
    assert placements["4g.24gb"] == ((0,), 4)


def test_profile_names_collide_across_models_so_everything_is_keyed_by_model(catalog: Catalog):
    assert catalog.gpu("H100-SXM5-80GB").mig.profile("1g.10gb").max_count == 7
    assert catalog.gpu("A100-SXM4-40GB").mig.profile("1g.10gb").max_count == 4
    assert catalog.gpu("A100-SXM4-40GB").mig.profile("1g.10gb").memory_slices == 2
    assert set(catalog.mig_profile_owners("1g.5gb")) == {"A100-SXM4-40GB", "A100-PCIE-40GB", "A800-PCIE-40GB"}


def test_usable_memory_is_below_the_profile_name(catalog: Catalog):
    a100 = catalog.gpu("A100-SXM4-80GB").mig
    assert a100.profile("1g.10gb").usable_gib == 9.50 and a100.profile("1g.10gb").sms == 14
    assert a100.profile("7g.80gb").usable_gib == 78.75 and a100.profile("7g.80gb").sms == 98
    assert a100.profile("1g.20gb").usable_gib == 19.50 and a100.profile("1g.20gb").sms == 14  # one compute slice
    for gpu in catalog.gpus:
        for p in gpu.mig.profiles if gpu.mig else ():
            nominal = float(p.name.split(".")[1].split("gb")[0])
            if p.usable_gib is not None:
                assert p.usable_gib < nominal <= gpu.memory_gib, (gpu.name, p.name)


@pytest.mark.parametrize("model", NO_MIG)
def test_gpus_without_mig(catalog: Catalog, model: str):
    gpu = catalog.gpu(model)
    assert gpu.mig is None
    assert "has no MIG" in catalog.no_mig_reason(gpu)


@pytest.mark.parametrize(
    ("identifier", "canonical"),
    [
        ("H100-SXM5-80GB", "H100-SXM5-80GB"),
        ("h100-sxm5-80gb", "H100-SXM5-80GB"),
        ("10de:2330", "H100-SXM5-80GB"),
        ("10DE:2330", "H100-SXM5-80GB"),
        ("0x233010DE", "H100-SXM5-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("10de:20f1", "A100-PCIE-40GB"),
        ("NVIDIA H100 NVL", "H100-NVL-94GB"),
        ("NVIDIA GH200 480GB", "GH200-96GB"),
        ("NVIDIA H200", "H200-SXM-141GB"),
        ("10de:233b", "H200-NVL-141GB"),
        ("NVIDIA B200", "B200-180GB"),
        ("Tesla T4", "T4"),
        ("Tesla V100-PCIE-16GB", "V100-PCIE-16GB"),
        ("1002:74a1", "MI300X"),
    ],
)
def test_gpu_identifiers(catalog: Catalog, identifier: str, canonical: str):
    assert catalog.gpu(identifier).name == canonical


def test_unknown_gpu_names_the_nearest(catalog: Catalog):
    with pytest.raises(UnknownGpu, match="did you mean 'H100-SXM5-80GB'"):
        catalog.gpu("H100-SXM-80GB")


def test_every_gpu_has_an_architecture_a_pci_id_and_memory(catalog: Catalog):
    archs = {a.name for a in catalog.architectures}
    assert {"Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell", "CDNA3"} <= archs
    for gpu in catalog.gpus:
        assert gpu.pci_ids and gpu.memory_gib > 0 and gpu.architecture in archs
    assert not catalog.architecture(catalog.gpu("V100-SXM2-32GB")).open_kernel_modules
    assert catalog.architecture(catalog.gpu("T4")).open_kernel_modules


def test_kernel_module_flavours_per_gpu_follow_nvidia(catalog: Catalog):
    """Open modules from Turing on; proprietary ones up to Hopper, except on Grace Hopper ([open-only])."""
    assert catalog.kernel_modules(catalog.gpu("V100-SXM2-32GB")) == (False, True)
    assert catalog.kernel_modules(catalog.gpu("H100-SXM5-80GB")) == (True, True)
    assert catalog.kernel_modules(catalog.gpu("GH200-96GB")) == (True, False)
    assert catalog.kernel_modules(catalog.gpu("B200-180GB")) == (True, False)
    for gpu in catalog.gpus:
        if gpu.vendor == "nvidia":
            assert any(catalog.kernel_modules(gpu)), f"{gpu.name}: no kernel modules support it"


def test_mig_parted_reference_config_uses_only_catalog_profiles(catalog: Catalog):
    """NVIDIA's own mig-parted default config: every layout filtered to a catalog GPU uses profiles that the
    catalog has for that GPU, within its max counts."""
    config = YAML(typ="safe").load((FIXTURES / "reference/mig-parted-v0.15.0/config-default.yaml").read_text())
    checked = 0
    for name, entries in config["mig-configs"].items():
        for entry in entries:
            filters = entry.get("device-filter")
            if not filters or not entry.get("mig-enabled"):
                continue
            for device_filter in [filters] if isinstance(filters, str) else filters:
                gpu = catalog.find_gpu(device_filter)
                if gpu is None:
                    continue  # a GPU this catalog does not carry (A800, H20, GB200...)
                assert device_filter.lower() in [f.lower() for f in gpu.mig_device_filters]
                for profile, count in entry["mig-devices"].items():
                    p = gpu.mig.profile(profile)
                    assert p is not None, f"{name}: {gpu.name} lacks {profile}"
                    assert count <= p.max_count, f"{name}: {count} x {profile} on {gpu.name}"
                    checked += 1
    assert checked >= 20


def test_required_vm_sizes_and_their_facts(catalog: Catalog):
    for name in REQUIRED_SIZES:
        assert catalog.vm_size(name) is not None, name
    nc6 = catalog.vm_size("Standard_NC6s_v3")
    assert nc6.retired_on == dt.date(2025, 9, 30) and nc6.retired(dt.date(2025, 10, 1))
    assert not nc6.retired(dt.date(2025, 9, 29))
    nv4 = catalog.vm_size("Standard_NV4as_v4")
    assert nv4.retired_on == dt.date(2026, 9, 30) and not nv4.aks_supported
    assert nv4.gpu_count == Fraction(1, 8)
    assert catalog.vm_size("Standard_NV6ads_A10_v5").gpu_count == Fraction(1, 6)
    assert catalog.vm_size("Standard_NC24rs_v3").infiniband and not catalog.vm_size("Standard_NC24s_v3").infiniband
    nd = catalog.vm_size("Standard_ND96isr_H100_v5")
    assert (nd.gpu, nd.gpu_count, nd.vcpus, nd.memory_gib, nd.infiniband) == ("H100-SXM5-80GB", 8, 96, 1900, True)
    assert catalog.vm_size("Standard_NC40ads_H100_v5").gpu == "H100-NVL-94GB"


def test_aks_mig_and_azure_linux_support_by_gpu_family(catalog: Catalog):
    for size in catalog.vm_sizes:
        gpu = catalog.gpu(size.gpu)
        family = gpu.name.split("-")[0]
        # AKS MIG: A100, H100 and H200 sizes AKS supports, but the confidential NCCads_H100_v5: AKS's confidential
        # GPU pools run the whole GPU (azure_vm_sizes.yaml [aks-cgpu])
        ordinary = size.aks_supported and not size.confidential
        assert size.aks_mig == (ordinary and family in ("A100", "H100", "H200")), size.name
        if family in ("A100", "H100", "H200") and ordinary:
            assert size.azure_linux, size.name  # Azure Linux 3 since 2026 (azure_vm_sizes.yaml [aks-gpus])
        if size.aks_mig:
            assert gpu.mig_capable


def test_catalog_rejects_an_identifier_naming_two_gpus():
    c = load_catalog()
    gpus = [g.model_dump() for g in c.gpus]
    gpus[1]["aliases"] = [*gpus[1]["aliases"], gpus[0]["name"]]
    with pytest.raises(ValueError, match="names both"):
        Catalog(
            architectures=c.architectures, nvswitches=c.nvswitches, gpus=gpus, vm_sizes=c.vm_sizes, regions=c.regions
        )


def test_regions(catalog: Catalog):
    assert {"westeurope", "eastus", "eastus2", "northeurope", "swedencentral"} <= catalog.region_names


def test_catalog_files_read_the_same_with_libyaml_as_with_a_yaml_1_2_parser():
    """The catalog is parsed by libyaml (YAML 1.1) for speed; ruamel (YAML 1.2, as stacks are read) must agree on
    every file, so a value 1.1 reads differently (``no``, ``on``, ``0o17``, ``1:30``) cannot change a fact."""
    from importlib import resources

    from ruamel.yaml import YAML

    from gpufleet.catalog import read_catalog_yaml

    files = sorted(f.name for f in resources.files("gpufleet.catalog").iterdir() if f.name.endswith(".yaml"))
    assert "gpus.yaml" in files and "models.yaml" in files
    for name in files:
        text = resources.files("gpufleet.catalog").joinpath(name).read_text(encoding="utf-8")
        assert read_catalog_yaml(name) == YAML(typ="safe").load(text), name
