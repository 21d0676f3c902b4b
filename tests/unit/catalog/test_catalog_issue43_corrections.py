"""Two catalog corrections (issue 43): the confidential H100 size is an AKS size on AKS's documented terms, and the
MIG figures NVIDIA published for GB200 and GH200 144G are in the catalog, with what uses them."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from gpufleet import mig
from gpufleet.catalog import VmSize, load_catalog
from tests.conftest import cli

CATALOG = load_catalog()
NCC = "Standard_NCC40ads_H100_v5"


# -- the confidential H100 (azure_vm_sizes.yaml [aks-cgpu]) ------------------------------------------------------


def test_catalog_sizes_shows_the_confidential_size_on_aks_with_the_operators_driver():
    detail = json.loads(cli("catalog", "sizes", NCC, "--json").stdout)
    assert (detail["aks_supported"], detail["aks_skip_gpu_driver"], detail["confidential"]) == (True, True, True)
    assert (detail["aks_mig"], detail["os_skus"]) == (False, ["ubuntu-22.04", "ubuntu-24.04"])
    assert "[aks-cgpu]" in detail["source"]
    plain = json.loads(cli("catalog", "sizes", "Standard_NC40ads_H100_v5", "--json").stdout)
    assert plain["aks_skip_gpu_driver"] is False
    table = cli("catalog", "sizes", "--family", "NCCads_H100_v5").stdout
    assert NCC in table and "yes, driver: operator" in table


def test_size_offers_no_confidential_vm_for_an_ordinary_workload():
    """Before, the catalog's only confidential size was no AKS size; as one, `gpufleet size` would have offered it for
    any model that fits an H100 NVL, saying nothing of what it is (and --write-pool would print a pool AKS's own
    driver install makes invalid). A confidential VM is a security choice: sizing leaves it out."""
    proc = cli("size", "--model", "llama-3.1-8b", "--mode", "inference", "--json")
    assert proc.returncode == 0, proc.stderr
    sizes = {o["vm_size"] for o in json.loads(proc.stdout)["options"] if o["kind"] == "vm"}
    assert "Standard_NC40ads_H100_v5" in sizes and NCC not in sizes


def test_the_catalog_refuses_a_skipped_driver_off_aks_or_with_the_managed_stack():
    fields = CATALOG.vm_size(NCC).model_dump()
    with pytest.raises(pydantic.ValidationError, match="aks_skip_gpu_driver needs aks_supported"):
        VmSize(**{**fields, "aks_supported": False})
    with pytest.raises(pydantic.ValidationError, match="managed GPU stack installs the driver"):
        VmSize(**{**fields, "aks_managed_gpu": True})


# -- MIG usable GiB / SMs from published `nvidia-smi mig -lgip` (gpus.yaml [gb200-lgip], [gh200-144-lgip]) --------

PUBLISHED = {
    "GB200-186GB": {
        "1g.23gb": (20.00, 18),  # mig-parted #227: 22.00; gpu-operator #1303: 20.00, the lower is kept
        "1g.23gb+me": (20.00, 18),
        "1g.47gb": (45.50, 32),
        "2g.47gb": (45.50, 38),
    },
    "GH200-144GB": {
        "1g.18gb": (17.50, 16),
        "1g.18gb+me": (17.50, 16),
        "1g.36gb": (35.25, 26),
        "2g.36gb": (35.25, 32),
    },
}
NOT_READ = {"GB200-186GB": ("3g.93gb", "4g.93gb", "7g.186gb"), "GH200-144GB": ("3g.72gb", "4g.72gb", "7g.144gb")}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_the_published_profiles_have_their_figures_and_the_unread_ones_stay_null(model: str):
    geometry = CATALOG.gpu(model).mig
    for name, (gib, sms) in PUBLISHED[model].items():
        profile = geometry.profile(name)
        assert (profile.usable_gib, profile.sms) == (gib, sms), name
        assert mig.usable_gib(CATALOG.gpu(model), profile) == (gib, True), name
    for name in NOT_READ[model]:
        assert (geometry.profile(name).usable_gib, geometry.profile(name).sms) == (None, None), name


def test_a_gb200_1g_instance_is_no_longer_sized_by_its_name():
    """The name 1g.23gb made the estimate 21.42 GiB (23 GB), so a 21 GiB demand landed on an instance that has 20.00;
    now it takes the double-memory 1g."""
    gb200 = CATALOG.gpu("GB200-186GB")
    assert mig.profile_for_memory(gb200, 21).name == "1g.47gb"
    assert mig.profile_for_memory(gb200, 20).name == "1g.23gb"
    # a profile still unread is estimated from the published GiB per memory slice, not from its name
    assert mig.usable_gib(gb200, gb200.mig.profile("3g.93gb")) == (pytest.approx(4 * 20.00), False)


def test_a_gh200_144g_demand_fits_the_1g_instance_the_name_undersold(tmp_path: Path):
    """1g.18gb's name gave 16.76 GiB; GH200 144G publishes 17.50, so 17 GiB fits it, and `mig pack` says the figure
    is published (no 'estimated' note)."""
    gh200 = CATALOG.gpu("GH200-144GB")
    assert mig.profile_for_memory(gh200, 17).name == "1g.18gb"
    demand = tmp_path / "demand.yaml"
    demand.write_text("demand:\n  - gpu: GH200-144GB\n    memory:\n      - {count: 7, min_gib: 17}\n")
    proc = cli("mig", "pack", "--demand", str(demand))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "7 x >= 17 GiB -> 1g.18gb (17.5 GiB usable)" in proc.stdout
    assert "estimated" not in proc.stdout
