"""The stack's Grafana dashboard (gpufleet/kube/dashboard.py): valid against Grafana's dashboard JSON schema, every
query parsed by promtool, a row and a variable option for every pool of the plan, a unit on every panel."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft7Validator

from gpufleet.azure.cost import stack_cost
from gpufleet.kube import monitoring
from gpufleet.kube.dashboard import dashboard
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from tests.conftest import FIXTURES, REPO, TODAY
from tests.monitoring_rules import run_promtool, write_rules

SCHEMA = json.loads((FIXTURES / "grafana" / "dashboard.jsonschema.json").read_text())
STACKS = ["Pulumi.prod-westeurope.yaml", "Pulumi.prod-eastus.yaml"]


@pytest.fixture(scope="module", params=STACKS)
def board(request, catalog) -> tuple[Any, dict[str, Any]]:
    stack = load_stack(REPO / request.param, today=TODAY).stack
    plan = plan_stack(stack, catalog)
    return plan, dashboard(plan, stack_cost(stack, catalog))


def _panels(board_: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board_["panels"] if p["type"] != "row"]


def test_the_dashboard_passes_grafanas_schema(board):
    _, board_ = board
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in Draft7Validator(SCHEMA).iter_errors(board_)]
    assert errors == []


def test_the_schema_check_catches_a_wrong_field():
    """The check above can fail: Grafana's schema refuses a misspelled dashboard field."""
    wrong = {"schemaVersion": 39, "templating": {"list": []}, "annotations": {"list": []}, "panles": []}
    assert any("panles" in e.message for e in Draft7Validator(SCHEMA).iter_errors(wrong))


def test_every_panel_query_parses(board, tmp_path):
    """promtool cannot parse a bare expression: each query becomes a recording rule of a file it checks, with the
    dashboard's variables filled in as Grafana would."""
    plan, board_ = board
    values = {"$node": "aks-node-0", "$pool": plan.pools[0].name}
    rules = []
    for panel in _panels(board_):
        expr = panel["targets"][0]["expr"]
        for variable, value in values.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"gpufleet:dashboard:panel_{panel['id']}", "expr": expr})
    path = write_rules([{"name": "dashboard", "rules": rules}], tmp_path)
    proc = run_promtool("check", "rules", path.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_each_pool_has_its_row_and_is_a_choice_of_the_pool_variable(board):
    plan, board_ = board
    rows = [p["title"] for p in board_["panels"] if p["type"] == "row"]
    pool_var = next(v for v in board_["templating"]["list"] if v["name"] == "pool")
    for pool in plan.pools:
        assert any(r.startswith(f"Pool {pool.name}:") for r in rows)
        assert pool.name in [o["value"] for o in pool_var["options"]]
    assert rows[0].startswith("Fleet") and any(r.startswith("Node $node") for r in rows)
    assert any(r.startswith("MIG instances") for r in rows)


def test_every_panel_has_a_unit_and_a_place_on_the_grid(board):
    _, board_ = board
    for panel in _panels(board_):
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
    ids = [p["id"] for p in board_["panels"]]
    assert len(ids) == len(set(ids))


def test_a_mig_pool_shows_the_plans_layout_beside_its_instances(catalog):
    stack = load_stack(REPO / "Pulumi.prod-westeurope.yaml", today=TODAY).stack
    board_ = dashboard(plan_stack(stack, catalog), None)
    mig = next(p for p in _panels(board_) if p["title"].startswith("MIG instances per node (plan:"))
    assert mig["title"] == "MIG instances per node (plan: 8 x 1g.10gb, 4 x 2g.20gb, 12 x 3g.40gb)"
    assert 'pool="h100mig"' in mig["targets"][0]["expr"]


def test_the_dashboard_configmap_is_for_grafanas_sidecar(catalog):
    stack = load_stack(REPO / "Pulumi.prod-westeurope.yaml", today=TODAY).stack
    objects = monitoring.monitoring_objects(plan_stack(stack, catalog), stack_cost(stack, catalog))
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    ((name, text),) = config["data"].items()
    assert name == "gpufleet-prod-westeurope.json" and json.loads(text)["uid"] == "gpufleet-prod-westeurope"
