"""Azure's GPU sizes of 2026, their price table, the AKS pool rules that use them, and ``gpufleet catalog``.

The expected facts are written out here from the Microsoft Learn pages the catalog cites (sizes/gpu-accelerated/
<series>, aks/upgrade-os-version, aks/gpu-multi-instance), not read back from the YAML: a wrong or dropped entry fails.
"""

from __future__ import annotations

import datetime as dt
import json
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from gpufleet.catalog import Catalog, load_catalog
from gpufleet.cli import app
from gpufleet.spec.load import load_stack_text
from tests.conftest import REPO, TODAY

DEV = (REPO / "Pulumi.dev-westeurope.yaml").read_text()
A100_POOL = (
    "        vm_size: Standard_NC24ads_A100_v4\n        count: 1\n        mig: {managed_by: aks, profile: MIG1g}\n"
)

# name -> (GPU, GPUs per VM, vCPUs, memory GiB), from each series page's "Basics" and "Accelerators" tabs.
NEW_SIZES = {
    "Standard_ND128isr_NDR_GB200_v6": ("GB200-186GB", 4, 128, 900),
    "Standard_ND128isr_GB300_v6": ("GB300-288GB", 4, 128, 864),
    "Standard_ND128isrG5_GB300_v6": ("GB300-288GB", 4, 128, 864),
    "Standard_NC128ds_xl_RTXPRO6000BSE_v6": ("RTX-PRO-6000-BSE-96GB", 1, 128, 512),
    "Standard_NC256ds_xl_RTXPRO6000BSE_v6": ("RTX-PRO-6000-BSE-96GB", 2, 256, 1024),
    "Standard_NC320ds_xl_RTXPRO6000BSE_v6": ("RTX-PRO-6000-BSE-96GB", 2, 320, 1280),
    "Standard_NC128lds_xl_RTXPRO6000BSE_v6": ("RTX-PRO-6000-BSE-96GB", 1, 128, 256),
    "Standard_NC256lds_xl_RTXPRO6000BSE_v6": ("RTX-PRO-6000-BSE-96GB", 2, 256, 512),
    "Standard_NC320lds_xl_RTXPRO6000BSE_v6": ("RTX-PRO-6000-BSE-96GB", 2, 320, 640),
    "Standard_NCC40ads_H100_v5": ("H100-NVL-94GB", 1, 40, 320),
    "Standard_NV4ads_V710_v5": ("V710", Fraction(1, 6), 4, 16),
    "Standard_NV8ads_V710_v5": ("V710", Fraction(1, 3), 8, 32),
    "Standard_NV12ads_V710_v5": ("V710", Fraction(1, 2), 12, 64),
    "Standard_NV24ads_V710_v5": ("V710", 1, 24, 128),
    "Standard_NV28adms_V710_v5": ("V710", 1, 28, 160),
}
# The whole series, as each page lists it.
COMPLETE_SERIES = {
    "NC_A100_v4": {"Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4", "Standard_NC96ads_A100_v4"},
    "NCads_H100_v5": {"Standard_NC40ads_H100_v5", "Standard_NC80adis_H100_v5"},
    "ND_H200_v5": {"Standard_ND96isr_H200_v5"},
    "ND_GB300_v6": {"Standard_ND128isr_GB300_v6", "Standard_ND128isrG5_GB300_v6"},
}


def _pool_findings(vm_size: str, *, os_sku: str | None = None, catalog: Catalog | None = None) -> list[str]:
    """Validate the dev stack with its A100 pool moved to ``vm_size``; the pool's diagnostics as 'path: message'."""
    pool = f"        vm_size: {vm_size}\n        count: 1\n" + (f"        os_sku: {os_sku}\n" if os_sku else "")
    assert A100_POOL in DEV
    loaded = load_stack_text(DEV.replace(A100_POOL, pool), "Pulumi.dev-westeurope.yaml", catalog=catalog, today=TODAY)
    return [f"{d.path}: {d.message}" for d in loaded.diagnostics if d.path.startswith("aks.gpu_pools[1]")]


def _fields(catalog: Catalog) -> dict[str, object]:
    return {name: getattr(catalog, name) for name in Catalog.model_fields}


# -- catalog data ----------------------------------------------------------------------------------------------


def test_new_2026_sizes_have_the_published_gpus_vcpus_and_memory():
    catalog = load_catalog()
    for name, (gpu, count, vcpus, memory) in NEW_SIZES.items():
        size = catalog.vm_size(name)
        assert size is not None, name
        assert (size.gpu, size.gpu_count, size.vcpus, size.memory_gib) == (gpu, count, vcpus, memory), name
        assert size.source, name


def test_nc_a100_nc_h100_nd_h200_and_gb300_series_are_complete():
    catalog = load_catalog()
    for series, names in COMPLETE_SERIES.items():
        assert {s.name for s in catalog.vm_sizes if s.series == series} == names, series


def test_nvlink_between_a_vms_gpus_only_on_hgx_and_grace_blackwell_sizes():
    catalog = load_catalog()
    nvlink = {"Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_ND96asr_v4",
              "Standard_ND96amsr_A100_v4", "Standard_ND128isr_NDR_GB200_v6", "Standard_ND128isr_GB300_v6"}  # fmt: skip
    pcie = {"Standard_NC96ads_A100_v4", "Standard_NC80adis_H100_v5", "Standard_NC64as_T4_v3",
            "Standard_NC320ds_xl_RTXPRO6000BSE_v6", "Standard_ND96isr_MI300X_v5"}  # fmt: skip
    for name in nvlink:
        assert catalog.vm_size(name).nvlink, name
    for name in pcie:
        assert not catalog.vm_size(name).nvlink, name


def test_confidential_h100_is_an_aks_size_with_the_driver_install_skipped_and_no_mig():
    """learn.microsoft.com/azure/aks/use-confidential-gpus (azure_vm_sizes.yaml [aks-cgpu]): AKS runs NCCads_H100_v5
    pools with `--gpu-driver none` and the GPU Operator's signed driver, on Ubuntu, the whole GPU per node."""
    ncc = load_catalog().vm_size("Standard_NCC40ads_H100_v5")
    assert ncc.confidential and ncc.aks_supported and ncc.aks_skip_gpu_driver
    assert not ncc.aks_mig and not ncc.aks_managed_gpu and not ncc.azure_linux
    assert ncc.os_skus == ("ubuntu-22.04", "ubuntu-24.04")
    plain = load_catalog().vm_size("Standard_NC40ads_H100_v5")
    assert not plain.confidential and not plain.aks_skip_gpu_driver
    assert [s.name for s in load_catalog().vm_sizes if s.aks_skip_gpu_driver] == ["Standard_NCC40ads_H100_v5"]


# AKS installs the NVIDIA driver on Azure Linux 3 for these series (karpenter-provider-azure supported-gpus.yaml,
# 2026-07-13), and on Ubuntu only for the Grace (GB200, GB300) and RTX PRO 6000 BSE v6 sizes.
AZURE_LINUX_SERIES = {
    "NCv3",
    "NCasT4_v3",
    "NVadsA10_v5",
    "NC_A100_v4",
    "NCads_H100_v5",
    "ND_A100_v4",
    "NDm_A100_v4",
    "ND_H100_v5",
    "ND_H200_v5",
}


def test_os_images_azure_linux_3_where_aks_installs_its_driver_ubuntu_on_every_aks_nvidia_size():
    catalog = load_catalog()
    for size in catalog.vm_sizes:
        gpu = catalog.gpu(size.gpu)
        if size.aks_supported and gpu.vendor == "nvidia":
            assert {"ubuntu-22.04", "ubuntu-24.04"} <= set(size.os_skus), size.name
        assert size.azure_linux == (size.series in AZURE_LINUX_SERIES), size.name


def test_the_managed_gpu_stack_is_on_every_aks_nvidia_size_that_takes_aks_driver_and_no_other():
    catalog = load_catalog()
    for size in catalog.vm_sizes:
        nvidia = catalog.gpu(size.gpu).vendor == "nvidia"
        assert size.aks_managed_gpu == (size.aks_supported and nvidia and not size.aks_skip_gpu_driver), size.name


def test_every_recorded_size_region_and_price_region_is_a_catalog_region():
    catalog = load_catalog()
    for size in catalog.vm_sizes:
        assert set(size.regions or ()) <= catalog.region_names, size.name
    with pytest.raises(ValueError, match="unknown regions moon"):
        _with_regions({"Standard_NC4as_T4_v3": ("eastus", "moon")})


def test_price_table_shape_spot_below_payg_reservations_below_payg_and_dated_in_the_past():
    catalog = load_catalog()
    assert catalog.currency == "USD" and len(catalog.prices) >= 6
    for p in catalog.prices:
        assert catalog.vm_size(p.vm_size) is not None and p.region in catalog.region_names
        assert p.source and p.as_of <= dt.date.today(), p
        given = [x for x in (p.pay_as_you_go, p.spot, p.reserved_1y, p.reserved_3y) if x is not None]
        assert given, p
        if p.spot is not None and p.pay_as_you_go is not None:
            assert p.spot < p.pay_as_you_go, p
        terms = [x for x in (p.reserved_3y, p.reserved_1y, p.pay_as_you_go) if x is not None]
        assert terms == sorted(terms) and len(set(terms)) == len(terms), p


def test_example_stack_prices_from_the_retail_api_and_no_price_is_none_not_zero():
    catalog = load_catalog()
    h100 = catalog.price("Standard_ND96isr_H100_v5", "eastus")
    assert (h100.pay_as_you_go, h100.spot) == (98.32, 18.169536)  # Retail Prices API, Linux, 2026-09-16
    assert catalog.price("Standard_NC24ads_A100_v4", "eastus").pay_as_you_go == 3.673
    assert catalog.price("Standard_NC24ads_A100_v4", "westeurope") is None
    assert catalog.price("Standard_NC80adis_H100_v5", "eastus").reserved_1y is None


# -- AKS pool rules --------------------------------------------------------------------------------------------


def test_amd_v710_pool_is_refused_naming_the_amd_instinct_size_gpufleet_serves():
    findings = _pool_findings("Standard_NV24ads_V710_v5")
    assert findings == [
        "aks.gpu_pools[1].vm_size: 'Standard_NV24ads_V710_v5' has V710 GPUs (AMD, not Instinct); gpufleet's AMD GPU"
        " software on AKS is the AMD GPU Operator for AMD Instinct GPUs: choose Standard_ND96isr_MI300X_v5 or an"
        " NVIDIA size"
    ]


def test_azure_linux_on_a_gb200_size_names_the_os_skus_it_supports():
    (finding,) = _pool_findings("Standard_ND128isr_NDR_GB200_v6", os_sku="AzureLinux3")
    assert finding.startswith(
        "aks.gpu_pools[1].os_sku: Standard_ND128isr_NDR_GB200_v6 (GB200-186GB) is not available on Azure Linux 3 in"
        " AKS; it supports Ubuntu 22.04, Ubuntu 24.04: use os_sku Ubuntu or "
    )
    assert "AzureLinux" not in finding.split("use os_sku")[1]
    assert _pool_findings("Standard_NC8as_T4_v3", os_sku="AzureLinux") == []
    assert _pool_findings("Standard_ND96isr_H100_v5", os_sku="AzureLinux3") == []
    assert _pool_findings("Standard_ND128isr_NDR_GB200_v6", os_sku="Ubuntu2204") == []


def _with_regions(regions: dict[str, tuple[str, ...]]) -> Catalog:
    base = load_catalog()
    sizes = tuple(s.model_copy(update={"regions": regions[s.name]}) if s.name in regions else s for s in base.vm_sizes)
    return Catalog(**{**_fields(base), "vm_sizes": sizes})


def test_a_size_not_offered_in_the_stacks_region_names_where_it_is_and_same_gpu_sizes_there():
    catalog = _with_regions(
        {
            "Standard_ND96isr_H200_v5": ("eastus", "swedencentral"),
            "Standard_NC40ads_H100_v5": ("westeurope",),
            "Standard_ND128isr_NDR_GB200_v6": ("eastus",),
        }
    )
    assert _pool_findings("Standard_ND96isr_H200_v5", catalog=catalog) == [
        "aks.gpu_pools[1].vm_size: 'Standard_ND96isr_H200_v5' is not offered in westeurope; regions offering it:"
        " eastus, swedencentral; no catalog size with H200-SXM-141GB is offered in westeurope"
    ]
    assert _pool_findings("Standard_NC80adis_H100_v5", catalog=catalog) == []  # regions not recorded: no check
    no_h100_here = _with_regions(
        {"Standard_NC80adis_H100_v5": ("eastus",), "Standard_NC40ads_H100_v5": ("westeurope",)}
    )
    assert _pool_findings("Standard_NC80adis_H100_v5", catalog=no_h100_here) == [
        "aks.gpu_pools[1].vm_size: 'Standard_NC80adis_H100_v5' is not offered in westeurope; regions offering it:"
        " eastus; sizes with H100-NVL-94GB offered in westeurope: Standard_NC40ads_H100_v5"
    ]


# -- gpufleet catalog ------------------------------------------------------------------------------------------

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["catalog", *args])
    return result.exit_code, result.output


def _json(*args: str) -> object:
    code, output = _run(*args, "--json")
    assert code == 0, output
    return json.loads(output)


def test_catalog_gpus_mig_filter_lists_only_mig_capable_models():
    names = {g["name"] for g in _json("gpus", "--mig")}
    assert {"A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB"} <= names
    assert not names & {"T4", "L40S", "V710", "MI300X"}
    assert all(g["mig"] and g["mig_profiles"] > 0 for g in _json("gpus", "--mig"))


def test_catalog_gpus_family_is_the_architecture_case_insensitive_and_unknown_is_exit_2():
    assert {g["name"] for g in _json("gpus", "--family", "rdna3")} == {"V710"}
    assert {g["architecture"] for g in _json("gpus", "--family", "HOPPER")} == {"Hopper"}
    code, output = _run("gpus", "--family", "Hoper")
    assert code == 2 and "unknown GPU architecture 'Hoper'; valid: " in output and "Hopper" in output


def test_catalog_gpu_by_pci_id_and_unknown_name_is_one_line_exit_1():
    gpu = _json("gpus", "1002:7461")
    assert (gpu["name"], gpu["vendor"], gpu["vm_sizes"][0]) == ("V710", "amd", "Standard_NV4ads_V710_v5")
    code, output = _run("gpus", "H100-SXM5")
    assert code == 1 and output.count("\n") == 1 and output.startswith("error: unknown GPU 'H100-SXM5'")


def test_catalog_sizes_mig_filter_is_where_aks_supports_mig():
    names = {s["name"] for s in _json("sizes", "--mig")}
    assert "Standard_NC24ads_A100_v4" in names and "Standard_ND96isr_H200_v5" in names
    assert not names & {"Standard_ND128isr_NDR_GB200_v6", "Standard_NCC40ads_H100_v5", "Standard_NC4as_T4_v3"}


def test_catalog_sizes_region_adds_the_price_there_or_null_and_unknown_region_is_exit_2():
    sizes = {s["name"]: s for s in _json("sizes", "--region", "eastus")}
    assert sizes["Standard_ND96isr_H100_v5"]["price"]["pay_as_you_go"] == 98.32
    assert sizes["Standard_NC4as_T4_v3"]["price"] is None and sizes["Standard_NC4as_T4_v3"]["offered_in_region"] is None
    code, output = _run("sizes", "--region", "eastus", "--family", "NC_A100_v4")
    assert code == 0 and "3.673" in output and "Standard_NC24ads_A100_v4" in output
    code, output = _run("sizes", "--region", "westeurope", "--family", "NC_A100_v4")
    assert code == 0 and "no price" in output and "3.673" not in output
    code, output = _run("sizes", "--region", "west-europe")
    assert code == 2 and "unknown Azure region 'west-europe'; did you mean 'westeurope'?" in output


def test_catalog_sizes_region_keeps_only_sizes_offered_there(monkeypatch: pytest.MonkeyPatch):
    import gpufleet.catalog as cat

    regional = _with_regions({"Standard_ND96isr_H200_v5": ("eastus",)})
    monkeypatch.setattr(cat, "load_catalog", lambda: regional)
    assert "Standard_ND96isr_H200_v5" not in {s["name"] for s in _json("sizes", "--region", "westeurope")}
    assert "Standard_ND96isr_H200_v5" in {s["name"] for s in _json("sizes", "--region", "eastus")}


def test_catalog_sizes_family_is_the_series_and_name_shows_one_size():
    assert {s["name"] for s in _json("sizes", "--family", "nd_gb300_v6")} == COMPLETE_SERIES["ND_GB300_v6"]
    code, output = _run("sizes", "--family", "NDv5")
    assert code == 2 and "unknown VM series 'NDv5'; valid: " in output and "ND_H100_v5" in output
    size = _json("sizes", "standard_nv4ads_v710_v5")
    assert (size["name"], size["gpu_count"], size["aks_mig"]) == ("Standard_NV4ads_V710_v5", 0.1667, False)
    code, output = _run("sizes", "Standard_ND96isr_H100")
    assert code == 1 and "did you mean 'Standard_ND96isr_H100_v5'?" in output


def test_catalog_help_explains_each_option():
    for command, options in (("gpus", ("--mig", "--family", "--json")), ("sizes", ("--mig", "--region", "--family"))):
        code, output = _run(command, "--help")
        assert code == 0
        for option in options:
            assert option in output, (command, option)
    assert "architecture" in _run("gpus", "--help")[1] and "VM series" in _run("sizes", "--help")[1]
