"""``gpufleet cost``, plan's cost lines and promote's cost delta: the figures of a worked example written out by hand,
a missing price as null (never 0), the always-on warning, the JSON contract of docs/../DESIGN.md, ``--all``, and what
a promotion does to the target's cost (nothing, unless the stack file aliases the release block's anchors).

Prices here are test figures, not Azure's: the catalog's table is refreshed separately, and these tests must not
change when it is. Everything runs in-process (CliRunner); the one promote test uses git in a temporary repository.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gpufleet.catalog
from gpufleet.azure.cost import HOURS_PER_MONTH, cost_delta, money, signed, stack_cost
from gpufleet.catalog import Catalog, Price, load_catalog
from gpufleet.cli import app
from gpufleet.spec.load import load_stack
from gpufleet.spec.models import Stack
from tests.conftest import REPO

AS_OF = dt.date(2026, 11, 1)
H100 = "Standard_ND96isr_H100_v5"


def test_catalog(*prices: Price) -> Catalog:
    """The packaged catalog with these prices (a new Catalog: its cached indexes are built from them)."""
    packaged = load_catalog()
    fields = {name: getattr(packaged, name) for name in Catalog.model_fields}
    return Catalog(**{**fields, "prices": prices})


test_catalog.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def price(size: str, payg: float | None, spot: float | None = None, **more: float) -> Price:
    return Price(
        vm_size=size, region="westeurope", pay_as_you_go=payg, spot=spot, source="test figures", as_of=AS_OF, **more
    )


# Test figures for West Europe (not Azure's prices).
PRICES = (
    price(H100, 98.32, 39.33, reserved_1y=62.40, reserved_3y=43.10),
    price("Standard_NC4as_T4_v3", 0.60, 0.12),
    price("Standard_NC8as_T4_v3", 0.80, 0.25),
    # Standard_NC24ads_A100_v4: no price at all; the system pool's sizes are not priced either
)


@pytest.fixture(scope="module")
def priced() -> Catalog:
    return test_catalog(*PRICES)


def stack(name: str) -> Stack:
    loaded = load_stack(REPO / f"Pulumi.{name}.yaml")
    assert loaded.stack is not None, loaded.diagnostics
    return loaded.stack


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, priced: Catalog):
    """``gpufleet ARGS`` in-process with the test prices: (exit code, stdout, stderr)."""
    monkeypatch.setattr(gpufleet.catalog, "load_catalog", lambda: priced)
    monkeypatch.setenv("COLUMNS", "200")

    def invoke(*args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(app, [*args, "--root", str(REPO)])
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    return invoke


def test_worked_example_prod_westeurope_by_hand(priced: Catalog):
    """h100mig: 2-6 nodes (2 now) at $98.32; h100train: 4 nodes, no autoscaling; a month is 730 hours."""
    figures = stack_cost(stack("prod-westeurope"), priced).to_dict()
    pools = {p["name"]: p for p in figures["pools"]}
    mig, train = pools["h100mig"], pools["h100train"]
    assert HOURS_PER_MONTH == 730
    assert (mig["nodes_min"], mig["nodes_now"], mig["nodes_max"]) == (2, 2, 6)
    assert (mig["usd_per_hour_min"], mig["usd_per_hour_now"], mig["usd_per_hour_max"]) == (196.64, 196.64, 589.92)
    assert (mig["usd_per_month_min"], mig["usd_per_month_max"]) == (143_547.2, 430_641.6)  # 196.64 x 730, 589.92 x 730
    assert mig["idle_usd_per_hour"] == 196.64  # the two nodes autoscaling keeps
    # pay-as-you-go minus spot, 58.99 a node-hour: what spot would save at 2 and at 6 nodes
    assert (mig["spot_savings_usd_per_hour_min"], mig["spot_savings_usd_per_hour_max"]) == (117.98, 353.94)
    # the two always-on nodes reserved: 2 x 62.40 x 730 and 2 x 43.10 x 730
    assert (mig["reserved_1y_usd_per_month_min"], mig["reserved_3y_usd_per_month_min"]) == (91_104.0, 62_926.0)
    assert (train["nodes_min"], train["nodes_max"], train["autoscaling"]) == (4, 4, False)
    assert (train["usd_per_hour_min"], train["usd_per_month_max"], train["idle_usd_per_hour"]) == (
        393.28,
        287_094.4,
        393.28,
    )
    totals = figures["totals"]
    assert (totals["usd_per_hour_min"], totals["usd_per_hour_max"]) == (589.92, 983.2)
    assert (totals["usd_per_month_min"], totals["usd_per_month_max"]) == (430_641.6, 717_736.0)
    assert (totals["complete"], totals["unpriced_pools"]) == (False, ["system"])
    assert all(not p["warnings"] for p in figures["pools"])  # production: GPU pools may stay on


def test_a_size_without_a_price_is_null_never_zero(priced: Catalog, cli):
    figures = stack_cost(stack("dev-westeurope"), priced).to_dict()
    a100 = next(p for p in figures["pools"] if p["name"] == "a100mig")
    money_keys = [k for k in a100 if "usd" in k]
    assert len(money_keys) >= 7 and all(a100[k] is None for k in money_keys), a100
    assert a100["price"] is None
    assert figures["totals"]["unpriced_pools"] == ["system", "a100mig"]
    assert any("no price for Standard_NC24ads_A100_v4 (a100mig)" in n for n in figures["notes"])
    # the packaged table (empty until it is filled, or without this region) never turns into zeros either
    code, out, _ = cli("cost", "dev-westeurope")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("a100mig"))
    assert "no price" in row and "0.00" not in row
    assert money(None) == "no price" and signed(None) == "unknown (no price)"


def test_a_spot_pool_is_priced_at_the_spot_price_and_without_one_has_no_figures(priced: Catalog):
    t4spot = stack_cost(stack("dev-westeurope"), priced).pool("t4spot")
    assert t4spot is not None and t4spot.spot and t4spot.priced_at == "spot"
    assert t4spot.per_hour(t4spot.nodes_max) == Decimal("0.75")  # 3 nodes x 0.25
    assert t4spot.spot_savings_per_hour(3) == Decimal("1.65")  # (0.80 - 0.25) x 3
    assert t4spot.reserved_per_month("1y") is None  # reservations do not apply to spot VMs
    no_spot = test_catalog(price("Standard_NC8as_T4_v3", 0.80))
    unpriced = stack_cost(stack("dev-westeurope"), no_spot).pool("t4spot")
    assert unpriced is not None and unpriced.missing == "no spot price" and unpriced.per_hour(3) is None


def test_always_on_gpu_pools_outside_production_are_warned_with_the_way_to_scale_to_zero(priced: Catalog):
    dev = stack_cost(stack("dev-westeurope"), priced)
    warned = {p.name for p in dev.pools if p.warnings}
    assert warned == {"t4shared", "a100mig"}  # t4spot scales to zero; the system pool is always on by design
    (t4shared,) = dev.pool("t4shared").warnings  # type: ignore[union-attr]
    assert "autoscaling min is 1 ($0.60/h idle)" in t4shared
    assert "{min: 0, max: N} with scale_to_zero: true" in t4shared
    assert "scale_down_unneeded_time 10m" in t4shared
    staging = stack_cost(stack("staging-westeurope"), priced)
    (h100,) = staging.pool("h100mig").warnings  # type: ignore[union-attr]
    assert "no autoscaling, 1 node(s) ($98.32/h idle)" in h100
    assert not stack_cost(stack("prod-eastus"), priced).warnings


def test_cost_json_is_the_design_contract(cli):
    code, out, _ = cli("cost", "prod-westeurope", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data)[:3] == ["stack", "currency", "pools"]
    assert (data["stack"], data["currency"]) == ("prod-westeurope", "USD")
    contract = [
        "name",
        "vm_size",
        "nodes_min",
        "nodes_max",
        "usd_per_hour_min",
        "usd_per_hour_max",
        "usd_per_month_min",
        "usd_per_month_max",
        "spot",
        "idle_usd_per_hour",
    ]
    assert [p["name"] for p in data["pools"]] == ["system", "h100mig", "h100train"]
    for pool in data["pools"]:
        assert list(pool)[: len(contract)] == contract
    mig = data["pools"][1]
    assert (mig["vm_size"], mig["usd_per_hour_max"], mig["spot"]) == (H100, 589.92, False)


def test_all_costs_every_stack_and_a_bare_metal_stack_has_no_cloud_cost(cli):
    code, out, _ = cli("cost", "--all", "--json")
    assert code == 0
    data = json.loads(out)
    assert [d["stack"] for d in data] == [
        "dev-westeurope",
        "lab-local",
        "prod-eastus",
        "prod-westeurope",
        "staging-westeurope",
    ]
    lab = data[1]
    assert lab["pools"] == [] and "no cloud cost" in lab["notes"][0]
    code, out, _ = cli("cost", "--all")
    assert code == 0 and "a bare-metal stack: its hosts have no cloud cost in the catalog" in out
    assert "total*" in out and "* without system: no price" in out


def test_an_invalid_stack_exits_1_with_its_errors_and_bad_usage_exits_2(cli):
    code, out, _ = cli("cost", "tests/fixtures/invalid/azure_linux_with_gb200.yaml", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False and data["errors"][0]["path"] == "aks.gpu_pools[0].os_sku"
    code, _, err = cli("cost", "prod-westeurope", "tests/fixtures/invalid/azure_linux_with_gb200.yaml")
    assert code == 1 and "invalid stack azure_linux_with_gb200: no cost computed" in err
    assert cli("cost")[0] == 2
    assert cli("cost", "prod-westeurope", "--all")[0] == 2
    assert cli("cost", "no-such-stack")[0] == 2


def test_plan_shows_a_cost_line_per_pool_and_its_json_the_cost(cli):
    code, out, _ = cli("plan", "dev-westeurope")
    assert code == 0
    lines = [line.strip() for line in out.splitlines()]
    assert "system pool cost: no price for Standard_D4ds_v5 in westeurope (catalog/azure_prices.yaml)" in lines
    assert "cost $0.60-$2.40/h, $438-$1,752/month (730 h), 1-4 node(s) at pay-as-you-go $0.60/h; idle $0.60/h" in lines
    assert "cost: no price for Standard_NC24ads_A100_v4 in westeurope (catalog/azure_prices.yaml)" in lines
    assert "cost $0.00-$0.75/h, $0-$548/month (730 h), 0-3 node(s) at spot $0.25/h; idle $0.00/h" in lines
    assert any(line.startswith("warning: GPU pool a100mig in stage dev is always on") for line in lines)
    code, out, _ = cli("plan", "dev-westeurope", "--json")
    planned = json.loads(out)
    assert {"stack", "pools", "cluster", "release"} <= set(planned)  # the plan's keys stay
    assert planned["cost"]["pools"][1]["usd_per_hour_max"] == 2.4


# -- promotion --------------------------------------------------------------------------------------------------


def _decision(texts: dict[str, str]):
    from gpufleet.fleet.promote import StackFiles, decide, load_policy

    policy = load_policy(REPO).policy
    assert policy is not None
    files = StackFiles(REPO / "nowhere", texts, set())
    return decide(files, policy, [], "dev-westeurope", "staging-westeurope", dt.datetime(2026, 11, 25, tzinfo=dt.UTC))


def _texts() -> dict[str, str]:
    names = ["dev-westeurope", "staging-westeurope", "prod-eastus", "prod-westeurope"]
    return {name: (REPO / f"Pulumi.{name}.yaml").read_text() for name in names}


def test_a_promotion_that_moves_pins_only_leaves_the_cost_unchanged(priced: Catalog):
    texts = _texts()
    texts["dev-westeurope"] = texts["dev-westeurope"].replace('driver_branch: "595"', 'driver_branch: "580"')
    delta = _decision(texts).cost_delta(priced)
    assert delta is not None and not delta.changed
    assert [p.name for p in delta.pools] == ["system", "h100mig"]
    assert delta.total("usd_per_month_max") == 0  # the unpriced system pool too: unchanged is a known 0


def test_a_promotion_that_changes_pools_through_aliases_shows_the_delta(priced: Catalog):
    """The release block moves alone, but the target aliases an anchor of it: its pool's max follows the pin."""
    texts = _texts()
    texts["dev-westeurope"] = texts["dev-westeurope"].replace('driver_branch: "595"', "driver_branch: &nodes 595")
    staging = texts["staging-westeurope"].replace('driver_branch: "595"', "driver_branch: &nodes 580")
    texts["staging-westeurope"] = staging.replace(
        "        count: 1\n", "        count: 1\n        autoscaling: {min: 1, max: *nodes}\n"
    )
    decision = _decision(texts)
    delta = decision.cost_delta(priced)
    assert delta is not None and delta.changed
    (h100,) = [p for p in delta.pools if p.changed]
    assert (h100.before.nodes_max, h100.after.nodes_max) == (580, 595)  # type: ignore[union-attr]
    assert h100.delta("usd_per_hour_max") == Decimal("1474.80")  # 15 more nodes x 98.32
    assert h100.delta("usd_per_month_max") == Decimal("1076604.00")  # x 730
    assert h100.delta("usd_per_hour_min") == 0
    assert delta.to_dict()["total_delta"]["usd_per_hour_max"] == 1474.8
    unpriced = test_catalog()  # a changed pool without a price: the delta is unknown, not 0
    unknown = decision.cost_delta(unpriced)
    assert unknown is not None and unknown.total("usd_per_hour_max") is None


def test_cost_delta_counts_a_new_pool_from_zero(priced: Catalog):
    before = stack_cost(stack("staging-westeurope"), priced)
    after = stack_cost(stack("prod-westeurope"), priced)
    delta = cost_delta(before, after)
    new = next(p for p in delta.pools if p.name == "h100train")
    assert new.before is None and new.delta("usd_per_hour_min") == Decimal("393.28")


@pytest.mark.usefixtures("cli")  # the test prices
def test_promote_preview_and_json_carry_the_cost_line(tmp_path: Path):
    for name in ["Pulumi.yaml", "promotion.yaml", *(f"Pulumi.{s}.yaml" for s in _texts()), "Pulumi.lab-local.yaml"]:
        shutil.copy(REPO / name, tmp_path / name)
    dev = tmp_path / "Pulumi.dev-westeurope.yaml"
    dev.write_text(dev.read_text().replace('driver_branch: "595"', 'driver_branch: "580"'))
    identity = ["-c", "user.name=gpufleet tests", "-c", "user.email=ci@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "stacks"]):
        subprocess.run(
            ["git", *args], cwd=tmp_path, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=60
        )
    result = CliRunner().invoke(app, ["promote", "staging-westeurope", "--dry-run", "--json", "--root", str(tmp_path)])
    cost = json.loads(result.stdout)["cost"]
    assert cost["changed"] is False and cost["total_delta"]["usd_per_hour_max"] == 0.0
    assert cost["note"].startswith("cost: unchanged, the promotion moves only the release block (pinned versions)")
    result = CliRunner().invoke(app, ["promote", "staging-westeurope", "--dry-run", "--root", str(tmp_path)])
    assert "cost: unchanged, the promotion moves only the release block" in result.stdout


def test_pools_that_cannot_autoscale_are_not_told_to_and_a_nap_pool_costs_up_to_max_nodes():
    """AKS-managed GPU pools take no cluster autoscaler (preview), and no node pool autoscales next to NAP: the warning
    points to a NAP pool or a count of 0 instead, and only where a NAP pool could hold the pool (not AKS MIG)."""
    loaded = load_stack(REPO / "examples/aks/Pulumi.preview-westeurope.yaml")
    assert loaded.stack is not None
    costs = stack_cost(loaded.stack, load_catalog())
    managed, aks_mig, nap = costs.pool("t4managed"), costs.pool("a100al3"), costs.pool("t4nap")
    assert managed is not None and aks_mig is not None and nap is not None
    assert "set autoscaling" not in managed.warnings[0] and "make it kind: nap" in managed.warnings[0]
    assert "kind: nap" not in aks_mig.warnings[0] and aks_mig.warnings[0].endswith("set count 0 while it idles")
    assert (nap.nodes_min, nap.nodes_max, nap.autoscaling, nap.warnings) == (0, 4, True, ())
