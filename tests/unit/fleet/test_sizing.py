"""gpufleet size: the memory formulas on worked examples, the model catalog, the ranked options, the CLI's contract
and its errors (docs/sizing.md holds the formulas; the doc's worked example is recomputed here)."""

from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

from gpufleet.catalog import Catalog, Price, load_catalog
from gpufleet.catalog.llm import LanguageModel, UnknownModel, load_models
from gpufleet.cli import app
from gpufleet.fleet import sizing
from tests.conftest import REPO, TODAY

MODELS = load_models()
GB = 1e9
# Test inputs (not catalog facts): bandwidths and prices put on a copy of the catalog where a test needs figures.
TEST_BANDWIDTH_GBS = 1000.0
TEST_PRICE = 10.0


def custom(params_b: float, **shape: int) -> LanguageModel:
    return LanguageModel(name=f"custom-{params_b:g}b", parameters_b=params_b, **shape)


def catalog_with(
    bandwidth: float | None = None, nvlink: float | None = None, prices: dict[str, float] | None = None
) -> Catalog:
    """A copy of the catalog with every GPU's memory and NVLink bandwidth set (None: unknown / PCIe only) and some
    sizes priced in westeurope, so that tests do not depend on which figures the catalog has today."""
    base = load_catalog()
    update = {"memory_bandwidth_gbs": bandwidth, "nvlink_gbs": nvlink, "nvlink_domain_gpus": 8 if nvlink else None}
    gpus = tuple(g.model_copy(update=update) for g in base.gpus)
    priced = tuple(
        Price(vm_size=name, region="westeurope", pay_as_you_go=usd, source="test", as_of=TODAY)
        for name, usd in (prices or {}).items()
    )
    return Catalog(
        architectures=base.architectures,
        nvswitches=base.nvswitches,
        gpus=gpus,
        vm_sizes=base.vm_sizes,
        regions=base.regions,
        system_vm_sizes=base.system_vm_sizes,
        prices=priced,
    )


# -- formulas on worked examples -------------------------------------------------------------------------------


def test_7b_model_in_fp16_needs_14_gb_of_weights():
    mem = sizing.inference_memory(
        custom(7, layers=32, hidden_size=4096, kv_heads=32, head_dim=128), sizing.Inference("fp16")
    )
    assert mem.weights == pytest.approx(14.0)


@pytest.mark.parametrize(("dtype", "gb"), [("fp32", 28), ("bf16", 14), ("fp8", 7), ("int8", 7), ("int4", 3.5)])
def test_weights_scale_with_the_dtype_bytes(dtype, gb):
    mem = sizing.inference_memory(custom(7, layers=1, hidden_size=8, kv_heads=1, head_dim=8), sizing.Inference(dtype))
    assert mem.weights == pytest.approx(gb)


def test_llama_3_1_70b_kv_cache_is_327680_bytes_per_token_in_bf16():
    model = MODELS.model("llama-3.1-70b")
    assert sizing.kv_bytes_per_token(model, "bf16", 1) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert sizing.kv_bytes_per_token(model, "fp8", 1) == 163_840


def test_kv_cache_grows_with_context_and_concurrency():
    model = MODELS.model("llama-3.1-70b")
    mem = sizing.inference_memory(model, sizing.Inference("fp8", "bf16", context=32768, concurrency=16))
    assert mem.kv_cache == pytest.approx(327_680 * 32768 * 16 / GB)  # 171.8 GB


def test_mla_model_caches_its_latent_not_the_heads():
    deepseek = MODELS.model("deepseek-v3")
    # 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes, where GQA's formula would give 61 x 2 x 128 x 128 x 2
    assert sizing.kv_bytes_per_token(deepseek, "bf16", 1000) == 61 * 576 * 2


def test_sliding_window_layers_stop_growing_at_the_window():
    gpt = MODELS.model("gpt-oss-120b")  # 36 layers, 18 of them see 128 tokens
    per_layer_token = 2 * 8 * 64 * 2
    total = sizing.kv_bytes_per_token(gpt, "bf16", 131072) * 131072
    assert total == per_layer_token * (18 * 131072 + 18 * 128)


def test_inference_activations_are_one_prefill_chunk_through_one_layer_plus_logits():
    model = MODELS.model("llama-3.1-8b")
    mem = sizing.inference_memory(model, sizing.Inference(context=2048, concurrency=2))
    assert mem.activations == pytest.approx((4096 * 4096 * 34 + 2 * 128256 * 4) / GB)
    long = sizing.inference_memory(model, sizing.Inference(context=100_000, concurrency=2))
    assert long.activations == pytest.approx((8192 * 4096 * 34 + 2 * 128256 * 4) / GB)  # the chunk caps it


def test_overhead_is_one_gb_per_gpu_plus_ten_percent():
    mem = sizing.inference_memory(custom(10, layers=1, hidden_size=1, kv_heads=1, head_dim=1), sizing.Inference())
    body = mem.weights + mem.kv_cache + mem.activations
    assert mem.overhead == pytest.approx(1.0 + 0.1 * body)
    assert mem.total == pytest.approx(body + mem.overhead)
    # on 4 GPUs each holds a quarter of weights and KV cache, the full activations, and its own 1 GB
    assert mem.per_gpu(4) == pytest.approx(1.0 + 1.1 * ((mem.weights + mem.kv_cache) / 4 + mem.activations))


def test_mixed_precision_adam_needs_16_bytes_per_parameter():
    model = custom(1, layers=1, hidden_size=8, attention_heads=1)
    mem = sizing.training_memory(model, sizing.Training(micro_batch=1, seq_len=1))
    assert mem.weights + mem.optimizer == pytest.approx(16.0)  # 2 bf16 weights + 2 gradients + 12 Adam states


@pytest.mark.parametrize(
    ("stage", "weights", "optimizer"),
    [(1, 2, 2 + 12 / 8), (2, 2, (2 + 12) / 8), (3, 2 / 8, (2 + 12) / 8)],
)
def test_zero_stages_shard_states_then_gradients_then_weights(stage, weights, optimizer):
    model = custom(1, layers=1, hidden_size=8, attention_heads=1)
    mem = sizing.training_memory(model, sizing.Training(zero_stage=stage, shard_degree=8, seq_len=1))
    assert (mem.weights, mem.optimizer) == (pytest.approx(weights), pytest.approx(optimizer))


def test_training_activations_follow_korthikanti_with_and_without_checkpointing():
    model = MODELS.model("llama-3.1-8b")  # s b h a = 4096 2 4096 32, L = 32
    s, b, h, a, layers, vocab = 4096, 2, 4096, 32, 32, 128256
    one_layer = s * b * h * (34 + 5 * a * s / h)
    logits = s * b * vocab * 4
    off = sizing.training_memory(model, sizing.Training(checkpointing=False, micro_batch=2, seq_len=s))
    on = sizing.training_memory(model, sizing.Training(checkpointing=True, micro_batch=2, seq_len=s))
    assert off.activations == pytest.approx((layers * one_layer + logits) / GB)
    assert on.activations == pytest.approx((layers * 2 * s * b * h + one_layer + logits) / GB)


# -- the model catalog -------------------------------------------------------------------------------------------


def _dense_parameter_count(m: LanguageModel) -> int:
    """Embeddings and LM head (untied) + per layer: Q, K, V, O projections, a gated MLP (3 matrices), 2 norms."""
    assert m.layers and m.hidden_size and m.attention_heads and m.kv_heads and m.head_dim
    assert m.intermediate_size and m.vocab_size
    h, q, kv = m.hidden_size, m.attention_heads * m.head_dim, m.kv_heads * m.head_dim
    layer = h * q + 2 * h * kv + q * h + 3 * h * m.intermediate_size + 2 * h
    return 2 * m.vocab_size * h + m.layers * layer + h


@pytest.mark.parametrize("name", [m.name for m in MODELS.models if not m.moe])
def test_dense_model_parameters_match_their_config_shapes(name):
    model = MODELS.model(name)
    assert _dense_parameter_count(model) / 1e9 == pytest.approx(model.parameters_b, rel=0.005)


def test_every_catalog_model_cites_a_source_and_can_size_its_kv_cache():
    for model in MODELS.models:
        assert model.source, model.name
        assert sizing.kv_bytes_per_token(model, "bf16", 1) > 0
        if model.moe:
            assert model.active_parameters_b is not None and model.active_parameters_b < model.parameters_b


def test_models_are_found_by_alias_case_insensitively():
    assert MODELS.model("META-LLAMA/Llama-3.1-70B-Instruct").name == "llama-3.1-70b"
    assert MODELS.model(" Qwen/Qwen2.5-7B ").name == "qwen2.5-7b"


def test_unknown_model_suggests_the_nearest():
    with pytest.raises(UnknownModel, match=r"did you mean 'llama-3\.1-70b'"):
        MODELS.model("llama-3.1-7b")


# -- options -----------------------------------------------------------------------------------------------------


def test_smallest_fitting_mig_profile_is_chosen():
    from gpufleet import mig

    catalog = load_catalog()
    h100 = catalog.gpu("H100-SXM5-80GB")
    model = MODELS.model("llama-3.1-8b")
    result = sizing.size(model, sizing.Inference("fp8"), catalog, today=TODAY, gpu=h100)
    best = result.options[0]
    assert (best.kind, best.mig_profile) == ("mig", "1g.20gb")  # ~10.3 GiB: more than 1g.10gb's 9.62 GiB
    assert h100.mig is not None
    usable = mig.usable_gib(h100, h100.mig.by_name["1g.20gb"])[0]
    smaller = mig.usable_gib(h100, h100.mig.by_name["1g.10gb"])[0]
    assert smaller * 2**30 / GB < result.memory.total <= usable * 2**30 / GB
    assert best.headroom_gb == pytest.approx(usable * 2**30 / GB - result.memory.total)
    kinds = [o.kind for o in result.options]
    assert kinds[:2] == ["mig", "gpu"] and set(kinds[2:]) == {"vm"}  # --gpu narrows everything to H100s
    assert all(o.gpu == h100.name for o in result.options)


def test_tensor_parallel_degree_divides_the_kv_heads_then_pipeline_stages_follow():
    model = custom(120, layers=40, hidden_size=4096, attention_heads=32, kv_heads=2, head_dim=128, vocab_size=32000)
    catalog = load_catalog()
    result = sizing.size(model, sizing.Inference(), catalog, today=TODAY, gpu=catalog.gpu("H100-SXM5-80GB"))
    gpu = next(o for o in result.options if o.kind == "gpu")
    assert (gpu.tensor_parallel, gpu.pipeline_parallel) == (2, 2)  # 240 GB of weights: 4 GPUs, TP at most 2


def test_options_rank_cheapest_priced_size_first():
    catalog = catalog_with(prices={"Standard_ND96isr_H200_v5": 50.0, "Standard_ND96isr_H100_v5": 40.0})
    model = MODELS.model("llama-3.1-70b")
    result = sizing.size(
        model, sizing.Inference("fp8", context=8192, concurrency=4), catalog, today=TODAY, region="westeurope"
    )
    vms = [o for o in result.options if o.kind == "vm"]
    assert [o.vm_size for o in vms[:2]] == ["Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"]
    assert vms[0].usd_per_hour == 40.0 and all(o.usd_per_hour is None for o in vms[2:])


def test_unpriced_sizes_rank_by_the_gpus_paid_for():
    model = MODELS.model("llama-3.1-70b")
    result = sizing.size(model, sizing.Inference("fp8", context=32768, concurrency=16), load_catalog(), today=TODAY)
    vms = [o for o in result.options if o.kind == "vm"]
    paid = [(o.nodes or 0) * (o.gpus_per_node or 0) for o in vms]
    assert len(vms) > 2 and paid == sorted(paid)
    assert all(o.gpus <= p for o, p in zip(vms, paid, strict=True))


def test_price_is_per_node_and_null_without_region_or_price():
    catalog = catalog_with(prices={"Standard_ND96isr_H100_v5": TEST_PRICE})
    model = MODELS.model("llama-3.1-405b")
    h100 = catalog.gpu("H100-SXM5-80GB")
    priced = sizing.size(
        model, sizing.Inference("bf16", context=8192), catalog, today=TODAY, gpu=h100, region="westeurope"
    )
    vm = next(o for o in priced.options if o.kind == "vm")
    assert vm.nodes == 2 and vm.usd_per_hour == 2 * TEST_PRICE  # 16 GPUs: TP 8 x PP 2 over InfiniBand
    assert vm.interconnect == "NVLink+InfiniBand"  # the size's NVLink (ND H100 v5), whatever the card's figures
    unpriced = sizing.size(model, sizing.Inference("bf16", context=8192), catalog, today=TODAY, gpu=h100)
    assert all(o.usd_per_hour is None for o in unpriced.options)
    assert "no --region" in unpriced.notes[0]


def test_tensor_parallel_link_is_nvlink_only_within_the_nvlink_domain():
    """A PCIe A100 pair shares an NVLink bridge; four of them talk over PCIe, and so do the four GPUs of an
    NC96ads_A100_v4, whose size has no NVLink; the eight SXM GPUs of an HGX board talk over NVLink."""
    catalog = load_catalog()
    pcie, sxm = catalog.gpu("A100-PCIE-80GB"), catalog.gpu("A100-SXM4-80GB")
    assert (pcie.nvlink_domain_gpus, sxm.nvlink_domain_gpus) == (2, 8)
    assert sizing._interconnect(pcie, 2, 1, None) == "NVLink"
    assert sizing._interconnect(pcie, 4, 1, None) == "PCIe"
    assert sizing._interconnect(sxm, 8, 1, None) == "NVLink"
    assert sizing._interconnect(pcie, 4, 1, catalog.vm_size("Standard_NC96ads_A100_v4")) == "PCIe"
    assert sizing._interconnect(sxm, 8, 2, catalog.vm_size("Standard_ND96amsr_A100_v4")) == "NVLink+InfiniBand"
    result = sizing.size(
        MODELS.model("llama-3.1-70b"), sizing.Inference("fp8", context=32768, concurrency=16), catalog, today=TODAY
    )
    four_pcie = next(o for o in result.options if o.kind == "gpu" and o.gpu == "A100-PCIE-80GB")
    assert (four_pcie.tensor_parallel, four_pcie.interconnect) == (4, "PCIe")
    assert any("over PCIe for" in note and "A100-PCIE-80GB" in note for note in result.notes)


def test_decode_bound_is_bandwidth_over_bytes_read_per_step():
    catalog = catalog_with(bandwidth=TEST_BANDWIDTH_GBS)
    model = MODELS.model("llama-3.1-70b")
    req = sizing.Inference("fp8", context=8192, concurrency=4)
    result = sizing.size(model, req, catalog, today=TODAY, gpu=catalog.gpu("H100-SXM5-80GB"))
    gpu = next(o for o in result.options if o.kind == "gpu")
    per_step = 70.55e9 * 1 + 327_680 * 8192 * 4
    assert gpu.decode_tokens_per_s == pytest.approx(4 * gpu.tensor_parallel * TEST_BANDWIDTH_GBS * GB / per_step)


def test_mig_instance_gets_its_memory_slice_share_of_bandwidth():
    catalog = catalog_with(bandwidth=TEST_BANDWIDTH_GBS)
    model = MODELS.model("llama-3.1-8b")
    result = sizing.size(model, sizing.Inference("fp8"), catalog, today=TODAY, gpu=catalog.gpu("H100-SXM5-80GB"))
    mig, whole = result.options[0], result.options[1]
    assert mig.mig_profile == "1g.20gb" and whole.kind == "gpu"
    assert mig.decode_tokens_per_s == pytest.approx(whole.decode_tokens_per_s * 2 / 8)  # 2 of 8 memory slices


def test_moe_decode_reads_the_active_parameters_only():
    catalog = catalog_with(bandwidth=TEST_BANDWIDTH_GBS)
    model = MODELS.model("mixtral-8x7b")
    req = sizing.Inference("bf16", context=1, concurrency=1)
    result = sizing.size(model, req, catalog, today=TODAY, gpu=catalog.gpu("H200-SXM-141GB"))
    gpu = next(o for o in result.options if o.kind == "gpu")
    per_step = 12.9e9 * 2 + sizing.kv_bytes_per_token(model, "bf16", 1)
    assert gpu.decode_tokens_per_s == pytest.approx(TEST_BANDWIDTH_GBS * GB / per_step)
    assert any("active parameters" in n for n in result.notes)


def test_retired_non_aks_and_partial_gpu_sizes_are_never_options():
    result = sizing.size(
        MODELS.model("mistral-7b"), sizing.Inference("int4", context=1024), load_catalog(), today=TODAY
    )
    names = {o.vm_size for o in result.options if o.kind == "vm"}
    catalog = load_catalog()
    assert "Standard_NC6s_v3" not in names  # NCv3 retired 2025-09-30
    assert "Standard_NV6ads_A10_v5" not in names  # a sixth of an A10
    assert "Standard_NV24ads_V710_v5" not in names  # a whole AMD Radeon PRO V710: not AMD Instinct, pools refuse it
    assert all(sizing.sized_gpu(catalog.gpu(catalog.vm_size(n).gpu)) for n in names)
    assert {"Standard_NC4as_T4_v3", "Standard_ND96isr_MI300X_v5"} <= names


def test_a_replica_spans_vms_only_over_infiniband():
    catalog = load_catalog()
    model = MODELS.model("llama-3.1-70b")  # 141 GB in bf16: more than one 94 GB H100 NVL
    result = sizing.size(model, sizing.Inference(context=1024), catalog, today=TODAY, gpu=catalog.gpu("H100-NVL-94GB"))
    vms = {o.vm_size: o for o in result.options if o.kind == "vm"}
    assert "Standard_NC40ads_H100_v5" not in vms  # 1 GPU per VM, no InfiniBand
    assert vms["Standard_NC80adis_H100_v5"].nodes == 1


def test_nothing_fits_names_the_largest_option_and_the_shortfall():
    with pytest.raises(
        sizing.SizingError, match=r"nothing fits: .*the largest option, 64 x \S+ \(TP 8 x PP 8\).*GB short"
    ):
        sizing.size(
            custom(20000, layers=200, hidden_size=8192, kv_heads=8, head_dim=128),
            sizing.Inference(),
            load_catalog(),
            today=TODAY,
        )


def test_training_that_does_not_fit_says_how_to_shard():
    with pytest.raises(sizing.SizingError, match="shard more"):
        sizing.size(MODELS.model("llama-3.1-70b"), sizing.Training(), load_catalog(), today=TODAY)
    sharded = sizing.size(
        MODELS.model("llama-3.1-70b"), sizing.Training(zero_stage=3, shard_degree=64), load_catalog(), today=TODAY
    )
    assert all(o.gpus == 64 for o in sharded.options if o.kind != "mig")


@pytest.mark.parametrize(
    ("request_factory", "message"),
    [
        (lambda: sizing.Inference(dtype="fp4"), "unknown dtype 'fp4'"),
        (lambda: sizing.Inference(context=0), "positive"),
        (lambda: sizing.Training(zero_stage=4), "ZeRO stage 4"),
        (lambda: sizing.Training(shard_degree=8), "needs ZeRO stage"),
    ],
)
def test_bad_requests_are_sizing_errors(request_factory, message):
    with pytest.raises(sizing.SizingError, match=message):
        request_factory()


def test_context_beyond_the_native_context_is_refused():
    with pytest.raises(sizing.SizingError, match="native context of 32768"):
        sizing.size(MODELS.model("mistral-7b"), sizing.Inference(context=65536), load_catalog(), today=TODAY)


# -- CLI ---------------------------------------------------------------------------------------------------------

runner = CliRunner()
ACCEPTANCE = ["size", "--model", "llama-3.1-70b", "--mode", "inference", "--dtype", "fp8", "--context", "32768"]
ACCEPTANCE += ["--concurrency", "16"]


def test_acceptance_command_prints_breakdown_and_ranked_options():
    result = runner.invoke(app, ACCEPTANCE)
    assert result.exit_code == 0, result.output
    assert "KV cache" in result.output and "171.80" in result.output and "options, best first" in result.output
    best = json.loads(runner.invoke(app, [*ACCEPTANCE, "--json"]).stdout)["options"][0]
    assert f"{best['gpus']} x {best['gpu']}" in result.output


def test_json_is_the_design_contract():
    result = runner.invoke(app, [*ACCEPTANCE, "--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert list(doc) == ["model", "mode", "memory_gb", "options"]
    assert list(doc["memory_gb"]) == ["weights", "kv_cache", "activations", "optimizer", "overhead", "total"]
    keys = ["kind", "gpu", "mig_profile", "amd_partition", "gpus", "vm_size", "nodes", "headroom_gb"]
    keys += ["decode_tokens_per_s"]
    assert all(list(o) == [*keys, "usd_per_hour"] for o in doc["options"])
    # no slice smaller than a whole GPU holds it (a 7g instance is the whole GPU: not offered as a slice)
    assert {o["kind"] for o in doc["options"]} == {"gpu", "vm"} and doc["memory_gb"]["kv_cache"] == 171.799


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--model", "llama-3.1-7b"], 1, "did you mean 'llama-3.1-70b'"),
        (["--model", "mistral-7b", "--dtype", "fp4"], 1, "unknown dtype 'fp4'"),
        (["--model", "mistral-7b", "--context", "-5"], 1, "positive"),
        (["--params", "-7", "--layers", "32"], 1, "--params must be positive"),
        (["--params", "nan", "--layers", "32"], 1, "--params must be positive"),
        (["--model", "mistral-7b", "--concurrency", "9" * 400], 1, "concurrency (1-1,000,000)"),
        (["--model", "mistral-7b", "--gpu", "B300X"], 1, "unknown GPU"),
        (["--model", "mistral-7b", "--gpu", "V710"], 1, "NVIDIA GPUs and AMD Instinct MI300X"),
        (["--model", "mistral-7b", "--region", "moon"], 1, "unknown region 'moon'"),
        (["--model", "llama-3.1-405b", "--gpu", "T4"], 1, "nothing fits"),
        (["--model", "mistral-7b", "--zero-stage", "3"], 2, "does not apply to --mode inference"),
        (["--model", "mistral-7b", "--params", "7"], 2, "one"),
        (["--model", "mistral-7b", "--layers", "7"], 2, "use it with --params"),
    ],
)
def test_bad_input_is_one_line(args, code, message):
    result = runner.invoke(app, ["size", *args])
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output


def test_custom_model_from_its_shape():
    args = ["size", "--params", "7", "--layers", "32", "--hidden", "4096", "--kv-heads", "32", "--head-dim", "128"]
    doc = json.loads(runner.invoke(app, [*args, "--dtype", "fp16", "--json"]).stdout)
    assert doc["model"] == "custom-7b" and doc["memory_gb"]["weights"] == 14.0


def test_written_pool_loads_into_an_example_stack():
    from gpufleet.cli.size import pool_yaml
    from gpufleet.spec.load import load_stack_text

    result = sizing.size(MODELS.model("llama-3.1-70b"), sizing.Inference("fp8"), load_catalog(), today=TODAY)
    snippet = pool_yaml(result)
    assert snippet is not None and snippet.startswith("gpu_pools:\n")
    text = (REPO / "Pulumi.dev-westeurope.yaml").read_text()
    pools = re.search(r"^    gpu_pools:\n", text, re.M)
    assert pools is not None
    entry = "".join("    " + line + "\n" for line in snippet.splitlines()[1:])
    loaded = load_stack_text(
        text[: pools.end()] + entry + text[pools.end() :], "Pulumi.dev-westeurope.yaml", today=TODAY
    )
    assert loaded.stack is not None, loaded.diagnostics
    added = loaded.stack.aks.gpu_pools[0]
    best = next(o for o in result.options if o.kind == "vm")
    assert (added.name, added.vm_size, added.count) == ("llama3170b", best.vm_size, best.nodes)


# -- docs/sizing.md: its worked example, recomputed --------------------------------------------------------------


def test_docs_worked_example_matches_the_planner():
    doc = (REPO / "docs" / "sizing.md").read_text()
    mem = sizing.inference_memory(MODELS.model("llama-3.1-70b"), sizing.Inference("fp8", "bf16", 32768, 16))
    figures = [f"{mem.weights:.2f}", f"{mem.kv_cache:.2f}", f"{mem.activations:.2f}", f"{mem.overhead:.2f}"]
    figures += [f"{mem.total:.2f}", f"{mem.per_gpu(4):.2f}", "327,680", f"{math.ceil(mem.total / 85.9)}"]
    missing = [f for f in figures if f not in doc]
    assert not missing, f"docs/sizing.md lacks the planner's figures {missing}"


def test_without_a_gpu_the_smallest_mig_slice_is_among_the_first_options():
    """Issue 45: `size --model llama-3.1-8b --dtype bf16 --context 8192` (about 21 GB) lists the smallest MIG slice
    that holds it, across the catalog's MIG GPUs, among its first options, not only with --gpu."""
    from gpufleet import mig

    args = ["size", "--model", "llama-3.1-8b", "--dtype", "bf16", "--context", "8192"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    options = json.loads(result.stdout)["options"]
    first = [o for o in options[:3] if o["kind"] == "mig"]
    assert len(first) == 1
    need = json.loads(result.stdout)["memory_gb"]["total"] * GB / 2**30
    smallest = min(
        mig.usable_gib(g, p)[0]
        for g in load_catalog().gpus
        if g.mig is not None
        for p in g.mig.profiles
        if p.plain and mig.usable_gib(g, p)[0] >= need
    )
    chosen = load_catalog().gpu(first[0]["gpu"])
    assert mig.usable_gib(chosen, chosen.mig.profile(first[0]["mig_profile"]))[0] == smallest
    human = runner.invoke(app, args)
    assert f"MIG {first[0]['mig_profile']} of {first[0]['gpu']}" in human.output
