"""AMD Instinct pools on AKS (docs/amd.md, docs/azure.md): the AgentPool gpufleet sends for a Standard_ND96isr_MI300X_v5
pool skips AKS's driver install (gpuProfile.driver None, a value of every AKS API gpufleet speaks), and ``gpufleet
cost``, ``audit`` and ``preflight``'s needs treat AMD pools as they treat NVIDIA ones: priced from a table when one
prices the size, null (never 0) when none does, judged by every baseline rule."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pulumi_azure_native import containerservice as cs

from gpufleet.azure import aks_api
from gpufleet.azure.baseline import audit
from gpufleet.azure.cost import stack_cost
from gpufleet.azure.preflight import pool_needs
from gpufleet.catalog import Catalog, Price, load_catalog
from gpufleet.catalog.aks import load_aks_catalog
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack, load_stack_text
from tests.aks_api_spec import enum
from tests.conftest import REPO, TODAY, cli

EXAMPLE = REPO / "examples" / "aks" / "Pulumi.dev-eastus.yaml"
MI300X_VM = "Standard_ND96isr_MI300X_v5"
AMD_POOLS = ("mi300x", "mi300xcpx")
AKS = load_aks_catalog()


def _example():
    loaded = load_stack(EXAMPLE, today=TODAY)
    assert loaded.ok, loaded.diagnostics
    return loaded


def test_the_example_puts_mi300x_pools_beside_an_nvidia_pool():
    stack = _example().stack
    assert stack is not None and stack.aks is not None
    sizes = {p.name: p.vm_size for p in stack.aks.gpu_pools}
    assert [sizes[n] for n in AMD_POOLS] == [MI300X_VM, MI300X_VM]
    assert load_catalog().gpu(load_catalog().vm_size(sizes["h100"]).gpu).vendor == "nvidia"
    cpx = next(p for p in stack.aks.gpu_pools if p.name == "mi300xcpx").amd_partitions
    assert cpx is not None and (cpx.managed_by, cpx.profile, cpx.memory) == ("operator", "cpx-nps4", "NPS4")
    assert stack.release.amd_gpu_operator == "v1.5.1"
    minor = tuple(int(x) for x in stack.release.kubernetes.split("."))
    assert (1, 29) <= minor <= (1, 36)  # the AMD GPU Operator v1.5.1's range


def test_amd_pools_send_gpu_driver_none_and_nvidia_pools_keep_aks_driver():
    plan = plan_stack(_example().stack, load_catalog())
    arm = {p.name: aks_api.agent_pool_properties(p).to_arm() for p in plan.pools}
    for name in AMD_POOLS:
        assert arm[name]["gpuProfile"] == {"driver": "None"}, name  # `az aks nodepool add --gpu-driver none`
        assert arm[name]["vmSize"] == MI300X_VM and arm[name]["osSKU"] == "Ubuntu"
        assert "gpuInstanceProfile" not in arm[name]  # no AKS MIG on AMD GPUs
    assert arm["h100"]["gpuProfile"] == {"driver": "Install"}
    # the SDK's typed AgentPool carries it: no newer API, no preview
    assert {p.name: p.api.version for p in plan.pools if p.api} == dict.fromkeys((*AMD_POOLS, "h100"), AKS.api.sdk)


@pytest.mark.parametrize("version", ["2026-05-01", "2026-05-02-preview"])
def test_gpu_driver_none_is_a_value_every_aks_api_gpufleet_speaks_publishes(version: str):
    assert "None" in enum(version, "GPUDriver")
    assert "None" in {e.value for e in cs.GPUDriver}  # pulumi-azure-native's (the SDK's API)


def test_every_example_pool_sends_the_driver_its_plan_decides():
    for path in (*sorted(REPO.glob("Pulumi.*-*.yaml")), *sorted(REPO.glob("examples/*/Pulumi.*.yaml"))):
        loaded = load_stack(path, today=TODAY)
        if loaded.stack is None or loaded.stack.aks is None:
            continue
        for pool in plan_stack(loaded.stack, load_catalog()).pools:
            if pool.kind == "agentpool":
                sent = aks_api.agent_pool_properties(pool).gpu_profile.driver
                assert sent == ("None" if pool.vendor == "amd" else pool.aks_gpu_driver), (path.name, pool.name)


def _catalog_with(*prices: Price) -> Catalog:
    packaged = load_catalog()
    return Catalog(**{**{n: getattr(packaged, n) for n in Catalog.model_fields}, "prices": prices})


def test_amd_pools_have_no_price_in_the_shipped_table_and_are_left_out_of_the_totals():
    costs = stack_cost(_example().stack, load_catalog())
    for name in AMD_POOLS:
        pool = costs.pool(name)
        assert pool is not None and pool.price is None and pool.missing == "no price"
        assert pool.to_dict()["usd_per_hour_max"] is None  # null, never 0
    assert set(AMD_POOLS) <= set(costs.totals.unpriced) and not costs.totals.complete
    assert costs.pool("h100") is not None and costs.pool("h100").priced  # eastus prices the NVIDIA size
    assert any(f"no price for {MI300X_VM} (mi300x)" in n for n in costs.notes)


def test_amd_pools_are_priced_from_a_table_that_prices_the_size():
    test_price = 10.0  # a test figure, not Azure's
    table = Price(
        vm_size=MI300X_VM, region="eastus", pay_as_you_go=test_price, source="test", as_of=dt.date(2026, 1, 1)
    )
    costs = stack_cost(_example().stack, _catalog_with(table))
    pool = costs.pool("mi300x")
    assert pool is not None and (pool.nodes_min, pool.nodes_max) == (0, 2)
    assert pool.to_dict()["usd_per_hour_max"] == 2 * test_price and pool.to_dict()["idle_usd_per_hour"] == 0.0
    assert pool.warnings == ()  # scales to zero: no always-on warning in dev


def test_an_always_on_amd_pool_in_dev_is_warned_like_an_nvidia_one():
    scaled = "        count: 0\n        autoscaling: {min: 0, max: 2}\n        scale_to_zero: true\n"
    head, tail = EXAMPLE.read_text().split("      - name: mi300x\n", 1)
    assert scaled in tail
    text = head + "      - name: mi300x\n" + tail.replace(scaled, "        count: 1\n", 1)
    loaded = load_stack_text(text, EXAMPLE.name, today=TODAY)
    assert loaded.ok, loaded.diagnostics
    pool = stack_cost(loaded.stack, load_catalog()).pool("mi300x")
    assert pool is not None and pool.nodes_min == 1
    (warning,) = pool.warnings
    assert warning.startswith("GPU pool mi300x in stage dev is always on: no autoscaling, 1 node(s) (no price)")


def test_the_baseline_judges_amd_pools_like_nvidia_ones():
    loaded = _example()
    assert all(r.status == "pass" for r in audit(plan_stack(loaded.stack, load_catalog())).results)
    text = EXAMPLE.read_text().replace(
        "      security:\n", "      security:\n        encryption_at_host: false\n        waivers: {}\n", 1
    )
    relaxed = load_stack_text(text, EXAMPLE.name, today=TODAY)
    assert relaxed.ok, relaxed.diagnostics
    results = {r.rule.name: r for r in audit(plan_stack(relaxed.stack, load_catalog())).results}
    failing = results["gpufleet.AKS.EncryptionAtHost"]
    assert failing.status == "fail"
    assert all(name in failing.detail for name in (*AMD_POOLS, "h100"))


def test_preflight_counts_an_mi300x_pool_at_its_max_nodes_plus_surge():
    needs = {n.pool: n for n in pool_needs(_example(), load_catalog())}
    need = needs["mi300x"]
    assert (need.vm_size, need.nodes_max, need.surge, need.catalog_vcpus) == (MI300X_VM, 2, 1, 96)
    assert need.vcpus(None) == 96 * 3


def test_cost_and_audit_commands_run_on_the_amd_example():
    cost = cli("cost", str(EXAMPLE), "--json")
    assert cost.returncode == 0, cost.stderr
    pools = {p["name"]: p for p in json.loads(cost.stdout)["pools"]}
    assert all(pools[name]["usd_per_hour_max"] is None and pools[name]["price"] is None for name in AMD_POOLS)
    assert pools["h100"]["usd_per_hour_max"] is not None
    done = cli("audit", str(EXAMPLE))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failing: 0 high, 0 medium, 0 low" in done.stdout
