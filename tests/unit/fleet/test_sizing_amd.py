"""gpufleet size on AMD Instinct GPUs (docs/amd.md, "Sizing"): whole MI300X GPUs and the ND MI300X v5 size beside the
NVIDIA options, tensor parallelism over AMD Infinity Fabric, compute x memory partitions as the MIG counterpart, and
AMD GPUs that are not Instinct refused."""

from __future__ import annotations

import pytest

from gpufleet.catalog import Catalog, Price, load_catalog
from gpufleet.catalog.llm import LanguageModel, load_models
from gpufleet.fleet import sizing
from gpufleet.mig.amd_partitions import dcm_applies, pairs_for_memory
from tests.conftest import TODAY

MODELS = load_models()
CATALOG = load_catalog()
MI300X = CATALOG.gpu("MI300X")
MI300X_VM = "Standard_ND96isr_MI300X_v5"
GB, GIB = 1e9, 2**30
TEST_PRICE = 10.0  # a test input, not a price: the shipped table has none for the MI300X size
ACCEPTANCE = sizing.Inference("fp8", "bf16", context=32768, concurrency=16)
# a dense 1.2T model: 2.4 TB of bf16 weights, more than one VM's eight 192 GiB GPUs hold
HUGE = LanguageModel(name="custom-1200b", parameters_b=1200, layers=120, hidden_size=16384, kv_heads=8, head_dim=128)


def priced(usd: float) -> Catalog:
    """The catalog with the MI300X size priced in westeurope (a test figure): a new Catalog, whose cached price index
    is built from this price (a model_copy would keep the packaged catalog's index once it is built)."""
    price = Price(vm_size=MI300X_VM, region="westeurope", pay_as_you_go=usd, source="test", as_of=TODAY)
    return Catalog(**{**{name: getattr(CATALOG, name) for name in Catalog.model_fields}, "prices": (price,)})


def test_acceptance_lists_whole_mi300x_gpus_and_the_mi300x_size_beside_nvidia():
    model = MODELS.model("llama-3.1-70b")
    result = sizing.size(model, ACCEPTANCE, CATALOG, today=TODAY)
    whole = next(o for o in result.options if o.kind == "gpu" and o.gpu == "MI300X")
    vm = next(o for o in result.options if o.vm_size == MI300X_VM)
    # 270 GB on one GPU; two MI300X (192 GiB = 206.2 GB each) hold it with TP 2 (8 KV heads divide by 2)
    cap = MI300X.memory_gib * GIB / GB
    assert result.memory.per_gpu(1) > cap >= result.memory.per_gpu(2)
    assert (whole.gpus, whole.tensor_parallel, whole.pipeline_parallel) == (2, 2, 1)
    assert whole.headroom_gb == pytest.approx(2 * (cap - result.memory.per_gpu(2)))
    per_step = model.active_parameters * 1 + result.memory.kv_cache * GB
    assert MI300X.memory_bandwidth_gbs is not None
    assert whole.decode_tokens_per_s == pytest.approx(16 * 2 * MI300X.memory_bandwidth_gbs * GB / per_step)
    assert (vm.kind, vm.nodes, vm.gpus, vm.gpus_per_node) == ("vm", 1, 2, 8)
    assert {o.gpu for o in result.options if o.kind == "gpu"} > {"MI300X", "H200-SXM-141GB"}


def test_tensor_parallel_on_mi300x_is_infinity_fabric_not_pcie():
    """The size's nvlink: false means no NVLink, not PCIe: MI300X GPUs of a node are all-to-all Infinity Fabric."""
    vm = CATALOG.vm_size(MI300X_VM)
    assert vm is not None and vm.nvlink is False
    assert sizing._interconnect(MI300X, 8, 1, None) == "Infinity Fabric"
    assert sizing._interconnect(MI300X, 8, 1, vm) == "Infinity Fabric"
    assert sizing._interconnect(MI300X, 8, 2, vm) == "Infinity Fabric+InfiniBand"  # two VMs: 16 GPUs
    assert sizing._interconnect(MI300X, 1, 1, vm) is None
    result = sizing.size(MODELS.model("llama-3.1-70b"), ACCEPTANCE, CATALOG, today=TODAY)
    assert all(o.interconnect == "Infinity Fabric" for o in result.options if o.gpu == "MI300X")
    pcie = next(n for n in result.notes if "over PCIe for" in n)
    assert "MI300X" not in pcie
    assert any("Infinity Fabric (xGMI) for MI300X" in n and "128 GB/s" in n for n in result.notes)


def test_a_model_larger_than_one_vm_spans_mi300x_vms_over_infiniband():
    result = sizing.size(HUGE, sizing.Inference("bf16", context=1024), CATALOG, today=TODAY)
    vm = next(o for o in result.options if o.vm_size == MI300X_VM)
    assert vm.gpus == vm.tensor_parallel * vm.pipeline_parallel > 8  # ND MI300X v5 has InfiniBand between its VMs
    assert vm.nodes == 2 and vm.tensor_parallel == 8
    assert vm.interconnect == "Infinity Fabric+InfiniBand"


def test_smallest_partition_is_the_pair_with_the_most_logical_gpus_that_holds_the_model():
    model = MODELS.model("llama-3.1-8b")
    result = sizing.size(model, sizing.Inference("fp8"), CATALOG, today=TODAY, gpu=MI300X)
    part, whole = result.options[0], next(o for o in result.options if o.kind == "gpu")
    need_gib = result.memory.total * GB / GIB
    pair = pairs_for_memory(MI300X, need_gib)[0]
    assert (part.kind, part.amd_partition, part.gpus) == ("partition", pair.name, 1)
    assert part.amd_partition.startswith("CPX+")  # ~12 GiB: one eighth of an MI300X (24 GiB) holds it
    assert part.partition_gib == pair.memory_gib == MI300X.memory_gib / 8
    assert part.headroom_gb == pytest.approx(pair.memory_gib * GIB / GB - result.memory.total)
    # one logical GPU of eight: an eighth of the GPU's memory bandwidth, as a MIG instance gets its slices' share
    assert whole.decode_tokens_per_s is not None
    assert part.decode_tokens_per_s == pytest.approx(whole.decode_tokens_per_s / 8)
    assert part.mig_profile is None and part.vm_size is None and part.usd_per_hour is None
    assert any(f"{pair.name} partition of MI300X: 24 GiB per logical GPU, derived" in n for n in result.notes)


def test_a_model_of_more_than_a_quarter_gpu_gets_a_dpx_partition():
    model = MODELS.model("llama-3.1-70b")  # fp8, 4096 tokens: about 80 GB = 74 GiB, more than QPX's 48 GiB
    result = sizing.size(model, sizing.Inference("fp8"), CATALOG, today=TODAY, gpu=MI300X)
    part = next(o for o in result.options if o.kind == "partition")
    assert 48 < result.memory.total * GB / GIB <= 96
    assert part.amd_partition is not None and part.amd_partition.startswith("DPX+")
    compute, memory = part.amd_partition.split("+")
    dcm_note = any("Device Config Manager (AKS pools) does not apply" in n for n in result.notes)
    assert dcm_note is not dcm_applies(compute, memory)


def test_a_pair_the_operators_dcm_does_not_apply_says_so():
    """An MI300X without QPX+NPS1 (a test copy): a model of 24-48 GiB gets QPX+NPS4, which the AMD GPU Operator's
    Device Config Manager does not apply (NPS4 only with CPX): a bare-metal host group can."""
    assert MI300X.partitions is not None
    pairs = tuple(p for p in MI300X.partitions.pairs if p.name != "QPX+NPS1")
    gpu = MI300X.model_copy(update={"partitions": MI300X.partitions.model_copy(update={"pairs": pairs})})
    req = sizing.Inference("bf16", context=4096, concurrency=16)
    result = sizing.size(MODELS.model("llama-3.1-8b"), req, CATALOG, today=TODAY, gpu=gpu)
    assert 24 < result.memory.total * GB / GIB <= 48
    part = result.options[0]
    assert part.amd_partition == "QPX+NPS4" and not dcm_applies("QPX", "NPS4")
    assert any(
        "Device Config Manager (AKS pools) does not apply QPX+NPS4: a bare-metal host group does" in n
        for n in result.notes
    )


def test_no_partition_when_only_the_whole_gpu_holds_it():
    result = sizing.size(
        MODELS.model("llama-3.1-70b"), sizing.Inference("bf16", context=8192), CATALOG, today=TODAY, gpu=MI300X
    )
    assert result.memory.total * GB / GIB > MI300X.memory_gib / 2
    assert not any(o.kind == "partition" for o in result.options)  # SPX+NPS1 is the whole GPU: the gpu option
    assert result.options[0].kind == "gpu"


def test_a_pair_amd_does_not_list_for_the_model_says_so():
    mi325x = CATALOG.gpu("MI325X")
    result = sizing.size(MODELS.model("llama-3.1-8b"), sizing.Inference("fp8"), CATALOG, today=TODAY, gpu=mi325x)
    part = next(o for o in result.options if o.kind == "partition")
    assert part.amd_partition is not None and not part.documented  # MI325X: AMD lists SPX+NPS1 and DPX+NPS2
    assert any(f"AMD does not list {part.amd_partition} for MI325X: the driver allows it" in n for n in result.notes)
    assert not any(o.kind == "vm" for o in result.options)  # no Azure size has MI325X GPUs


def test_sharded_training_takes_no_partition():
    req = sizing.Training(zero_stage=3, shard_degree=8, seq_len=512)
    result = sizing.size(MODELS.model("llama-3.1-8b"), req, CATALOG, today=TODAY, gpu=MI300X)
    assert not any(o.kind == "partition" for o in result.options)


@pytest.mark.parametrize("name", ["V710", "MI25"])
def test_amd_gpus_that_are_not_instinct_are_refused(name: str):
    with pytest.raises(sizing.SizingError, match=rf"AMD Instinct MI300X, .*not {name} \(AMD\)"):
        sizing.size(MODELS.model("mistral-7b"), sizing.Inference(), CATALOG, today=TODAY, gpu=CATALOG.gpu(name))


def test_the_mi300x_size_is_priced_per_node_from_a_table_and_null_without_one():
    model, req = HUGE, sizing.Inference("bf16", context=1024)
    vm = next(
        o
        for o in sizing.size(model, req, priced(TEST_PRICE), today=TODAY, gpu=MI300X, region="westeurope").options
        if o.kind == "vm"
    )
    assert vm.nodes == 2 and vm.usd_per_hour == 2 * TEST_PRICE and vm.price is not None
    shipped = sizing.size(model, req, CATALOG, today=TODAY, gpu=MI300X, region="eastus")
    unpriced = next(o for o in shipped.options if o.kind == "vm")
    assert CATALOG.price(MI300X_VM, "eastus") is None  # no published figure was found: none is invented
    assert unpriced.usd_per_hour is None and unpriced.to_dict()["usd_per_hour"] is None
    assert any("no price in the price tables for some sizes in eastus" in n for n in shipped.notes)


def test_json_has_the_pair_on_partitions_and_null_elsewhere():
    result = sizing.size(MODELS.model("llama-3.1-8b"), sizing.Inference("fp8"), CATALOG, today=TODAY, gpu=MI300X)
    rows = [o.to_dict() for o in result.options]
    assert [r["kind"] for r in rows] == ["partition", "gpu", "vm"]
    assert rows[0]["amd_partition"] == result.options[0].amd_partition and rows[0]["mig_profile"] is None
    assert all(r["amd_partition"] is None for r in rows[1:])
    h100 = sizing.size(MODELS.model("llama-3.1-8b"), sizing.Inference("fp8"), CATALOG, today=TODAY,
                       gpu=CATALOG.gpu("H100-SXM5-80GB"))  # fmt: skip
    assert all(o.to_dict()["amd_partition"] is None for o in h100.options)
