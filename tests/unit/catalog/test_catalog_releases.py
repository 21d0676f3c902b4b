"""The release table (gpufleet/catalog/releases.yaml) as data: it holds together, the operator's and the device plugin's
rows are what the pinned charts ship, and NVIDIA's driver lifecycle decides which branches remain."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.catalog import load_catalog
from gpufleet.catalog.releases import ReleaseTable, kube_at_least, load_releases
from gpufleet.cli import app
from gpufleet.spec.rules import Context, kubernetes_choices
from tests.charts import chart_file, needs_charts
from tests.conftest import TODAY

TABLE = load_releases()
OPERATOR = TABLE.find_gpu_operator("v26.7.0")


@pytest.mark.parametrize(
    ("day", "branches"),
    [
        (dt.date(2026, 6, 30), ["580", "595", "610"]),  # R535's last day, but the DRA driver v0.5.0 needs R565 or later
        (dt.date(2026, 8, 31), ["580", "595", "610"]),  # R610, a new feature branch, ends with August 2026
        (dt.date(2026, 9, 1), ["580", "595"]),
        (TODAY, ["580", "595"]),
        (dt.date(2027, 4, 1), ["580"]),  # R595, a production branch, ended in March 2027
        (dt.date(2028, 7, 1), []),
    ],
)
def test_the_supported_driver_branches_follow_nvidias_lifecycle(day: dt.date, branches: list[str]):
    assert TABLE.supported_branches(OPERATOR, day) == branches


def test_a_version_without_a_patch_stands_for_its_latest_patch():
    assert kube_at_least("1.34", "1.34.2") and kube_at_least("1.34.2", "1.34.2") and kube_at_least("1.35.0", "1.34.2")
    assert not kube_at_least("1.34.1", "1.34.2") and not kube_at_least("1.33", "1.34")
    assert kube_at_least("v1.36.4", "1.36")


def _raw_table() -> dict:
    from gpufleet.catalog import read_catalog_yaml

    return read_catalog_yaml("releases.yaml")


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (lambda raw: raw["gpu_operator"][0]["driver_branches"].append("620"), "driver branches 620 have no lifecycle"),
        (lambda raw: raw["kubernetes"].reverse(), "minors must be unique and in order"),
        (lambda raw: raw["aks"]["versions"].append({**raw["aks"]["versions"][0], "kubernetes": "1.29"}), "1.29"),
        (lambda raw: raw["dra_driver"].clear(), "its dra_driver is not in the dra_driver list"),
        (lambda raw: raw["device_plugin"][0].update(nfd="v0.18.0"), "NFD v0.19.0, its device plugin v0.18.0"),
    ],
)
def test_the_table_refuses_data_that_does_not_hold_together(edit, complaint: str):
    raw = _raw_table()
    edit(raw)
    with pytest.raises(ValueError, match=complaint.replace(".", r"\.")):
        ReleaseTable.model_validate(raw)


@needs_charts
def test_the_operators_row_is_what_its_pinned_chart_ships():
    values = yaml.safe_load(chart_file("gpu-operator", "values.yaml"))
    lock = yaml.safe_load(chart_file("gpu-operator", "Chart.lock"))
    shipped = OPERATOR.components
    assert values["devicePlugin"]["version"] == shipped.device_plugin
    assert values["toolkit"]["version"] == shipped.container_toolkit
    assert values["migManager"]["version"] == shipped.mig_parted
    assert values["draDriver"]["version"] == shipped.dra_driver
    assert values["driver"]["manager"]["version"] == shipped.driver_manager
    assert values["gfd"]["version"] == shipped.gpu_feature_discovery
    assert values["dcgm"]["version"].startswith(shipped.dcgm + "-")
    assert values["dcgmExporter"]["version"].startswith(shipped.dcgm_exporter + "-")
    assert values["driver"]["version"] == OPERATOR.default_driver
    assert OPERATOR.default_driver.split(".")[0] in OPERATOR.driver_branches
    (nfd,) = [d for d in lock["dependencies"] if d["name"] == "node-feature-discovery"]
    assert "v" + nfd["version"] == shipped.nfd


@needs_charts
def test_the_device_plugin_row_is_its_pinned_chart():
    chart = yaml.safe_load(chart_file("nvidia-device-plugin", "Chart.yaml"))
    (plugin,) = TABLE.device_plugin
    assert "v" + chart["version"] == plugin.version
    assert chart["kubeVersion"] == f">= {plugin.min_kubernetes}.0-0"
    (nfd,) = [d for d in chart["dependencies"] if d["name"] == "node-feature-discovery"]
    assert "v" + nfd["version"] == plugin.nfd


def test_catalog_releases_json_lists_each_combination_and_what_it_allows_today():
    result = CliRunner().invoke(app, ["catalog", "releases", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    today = dt.date.fromisoformat(data["as_of"])
    (op,) = data["gpu_operator"]
    assert op["version"] == "v26.7.0" and op["kubernetes"] == {"min": "1.33", "max": "1.36"}
    assert op["components"]["dra_driver"] == "v0.5.0" and op["components"]["nfd"] == "v0.19.0"
    assert op["supported_today"]["driver_branches"] == TABLE.supported_branches(OPERATOR, today)
    ctx = Context(catalog=load_catalog(), today=today)
    assert op["supported_today"]["kubernetes_aks"] == kubernetes_choices(OPERATOR, ctx, aks=True, baremetal=False)
    minors = {m["version"]: m for m in data["kubernetes"]}
    assert minors["1.36"]["end_of_life"] == "2027-06-28" and minors["1.36"]["aks"]["end_of_life"] == "2027-06-30"
    assert {b["branch"]: b["end_of_life"] for b in data["driver_branches"]}["580"] == "2028-06-30"
    assert data["minimum_kubernetes"]["version"] == "1.34"
    assert "no per-region" in data["aks"]["regions"]


def test_catalog_releases_prints_the_tables():
    result = CliRunner().invoke(app, ["catalog", "releases"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("Kubernetes minors (gpufleet needs 1.34 or later)", "NVIDIA driver branches", "GPU Operator v26.7.0"):
        assert text in result.stdout
    assert "2027-06-28" in result.stdout and "long-term support" in result.stdout
