"""``gpufleet size`` as a user runs it, on AMD Instinct GPUs: the issue's acceptance command lists MI300X options, the
JSON carries a partition's pair, a size without a price is null, and a written MI300X pool is a valid AMD pool."""

from __future__ import annotations

import json
import re

from gpufleet.catalog import load_catalog
from gpufleet.catalog.llm import load_models
from gpufleet.cli.size import pool_yaml
from gpufleet.fleet import sizing
from gpufleet.spec.load import load_stack_text
from tests.conftest import REPO, TODAY, gpufleet

ACCEPTANCE = ("size", "--model", "llama-3.1-70b", "--dtype", "fp8", "--context", "32768", "--concurrency", "16")
MI300X_VM = "Standard_ND96isr_MI300X_v5"
AMD_EXAMPLE = REPO / "examples" / "aks" / "Pulumi.dev-eastus.yaml"


def test_acceptance_command_lists_an_mi300x_option_over_infinity_fabric():
    proc = gpufleet(*ACCEPTANCE)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "x MI300X" in line)
    assert re.search(r"2 x MI300X\s+2 \(2x1\)\s+Infinity Fabric", row), row
    assert "note: tensor-parallel traffic over AMD Infinity Fabric (xGMI) for MI300X" in proc.stdout
    doc = json.loads(gpufleet(*ACCEPTANCE, "--json").stdout)
    mi300x = [o for o in doc["options"] if o["gpu"] == "MI300X"]
    assert {(o["kind"], o["vm_size"], o["gpus"]) for o in mi300x} == {("gpu", None, 2), ("vm", MI300X_VM, 2)}
    assert all(o["amd_partition"] is None and o["mig_profile"] is None for o in doc["options"])


def test_a_region_without_an_mi300x_price_shows_null_not_zero():
    doc = json.loads(gpufleet(*ACCEPTANCE, "--region", "eastus", "--json").stdout)
    vm = next(o for o in doc["options"] if o["vm_size"] == MI300X_VM)
    assert vm["usd_per_hour"] is None
    assert any(o["usd_per_hour"] for o in doc["options"] if o["kind"] == "vm")  # eastus prices other sizes


def test_gpu_mi300x_adds_its_partition_option_first():
    args = ("size", "--model", "llama-3.1-8b", "--dtype", "fp8", "--gpu", "MI300X")
    proc = gpufleet(*args)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(gpufleet(*args, "--json").stdout)
    first = doc["options"][0]
    assert first["kind"] == "partition" and first["amd_partition"].startswith("CPX+") and first["gpus"] == 1
    assert f"{first['amd_partition']} partition of MI300X (24 GiB)" in proc.stdout
    assert [o["kind"] for o in doc["options"]] == ["partition", "gpu", "vm"]


def test_an_amd_gpu_that_is_not_instinct_is_one_line_and_exit_1():
    proc = gpufleet("size", "--model", "mistral-7b", "--gpu", "V710")
    assert proc.returncode == 1
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and "AMD Instinct MI300X" in lines[0] and "not V710 (AMD)" in lines[0]


def test_a_written_mi300x_pool_says_to_pin_the_amd_operator_and_loads_into_the_amd_example():
    catalog = load_catalog()
    model = load_models().model("llama-3.1-70b")
    result = sizing.size(model, sizing.Inference("fp8"), catalog, today=TODAY, gpu=catalog.gpu("MI300X"))
    snippet = pool_yaml(result)
    assert snippet is not None and f"vm_size: {MI300X_VM}" in snippet
    assert "# AMD Instinct: pin release.amd_gpu_operator" in snippet
    entry = "".join("    " + line + "\n" for line in snippet.splitlines()[1:])

    def with_pool(text: str) -> list[str]:
        pools = re.search(r"^    gpu_pools:\n", text, re.M)
        assert pools is not None
        loaded = load_stack_text(text[: pools.end()] + entry + text[pools.end() :], AMD_EXAMPLE.name, today=TODAY)
        return [d.path for d in loaded.diagnostics]

    text = AMD_EXAMPLE.read_text()
    assert with_pool(text) == []
    # without the AMD GPU Operator's pin the same pool is refused: the comment is not decoration
    unpinned, removed = re.subn(r"^    amd_gpu_operator: .*\n", "", text, flags=re.M)
    assert removed == 1 and with_pool(unpinned) == ["release.amd_gpu_operator"]
