"""GPU monitoring generated from the plan (gpufleet/kube/monitoring.py): what `gpufleet render` writes for a stack with
a Prometheus operator, checked by the real tools: the Prometheus operator's CRD schemas, `promtool check rules` and a
promtool unit test per alert (it fires on a faulty GPU, an idle node, a drifted MIG layout, and not on a sound one)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
import yaml

from gpufleet.azure.cost import stack_cost
from gpufleet.catalog.dcgm import load_dcgm_catalog
from gpufleet.kube import charts, monitoring
from gpufleet.kube.gpu_software import DCGM_METRICS_CONFIGMAP
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from tests.charts import CHARTS_DIR, crd_errors, crd_validator, needs_charts, render_variant
from tests.conftest import FIXTURES, REPO, TODAY
from tests.monitoring_rules import cases, run_promtool, write_rules, write_tests

PROD = REPO / "Pulumi.prod-westeurope.yaml"
CRDS = FIXTURES / "crds" / "prometheus-operator"


@pytest.fixture(scope="module")
def prod(catalog) -> tuple[Any, Any, Any]:
    stack = load_stack(PROD, today=TODAY).stack
    return stack, plan_stack(stack, catalog), stack_cost(stack, catalog)


@pytest.fixture(scope="module")
def objects(prod) -> dict[str, dict[str, Any]]:
    _, plan, cost = prod
    return {o["kind"]: o for o in monitoring.monitoring_objects(plan, cost)}


def _crd(name: str, version: str) -> Any:
    doc = yaml.safe_load((CRDS / f"monitoring.coreos.com_{name}.yaml").read_text())
    return crd_validator(next(v for v in doc["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"])


# -- gpufleet render ------------------------------------------------------------------------------------------------


@needs_charts
def test_render_of_prod_westeurope_writes_the_monitoring_file(prod, tmp_path):
    _, plan, cost = prod
    result = charts.render(plan, directory=CHARTS_DIR, cost=cost)
    charts.write(result, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    generated = {g["file"]: g["objects"] for g in summary["generated"]}
    assert generated["gpufleet-monitoring.yaml"] == {"ConfigMap": 1, "PrometheusRule": 1, "ServiceMonitor": 1}
    written = [o for o in yaml.safe_load_all((tmp_path / "out" / "gpufleet-monitoring.yaml").read_text()) if o]
    dashboard = next(o for o in written if o["kind"] == "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_a_stack_without_a_prometheus_operator_gets_no_monitoring_file(catalog):
    stack = load_stack(REPO / "Pulumi.dev-westeurope.yaml", today=TODAY).stack
    assert stack.aks is not None and not stack.aks.gpu_software.monitoring
    assert monitoring.monitoring_objects(plan_stack(stack, catalog), stack_cost(stack, catalog)) == []


@needs_charts
def test_the_chart_creates_gpufleets_metrics_list_and_the_exporter_reads_it(prod, catalog):
    _, plan, _ = prod
    result = charts.render(plan, directory=CHARTS_DIR)
    objects = result.charts[0].objects
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == DCGM_METRICS_CONFIGMAP)
    rows = [r for r in csv.reader(io.StringIO(config["data"]["dcgm-metrics.csv"])) if r and not r[0].startswith("#")]
    assert [r[0].strip() for r in rows] == [m.field for m in load_dcgm_catalog().metrics]
    policy = next(o for o in objects if o["kind"] == "ClusterPolicy")["spec"]["dcgmExporter"]
    assert policy["config"] == {"name": DCGM_METRICS_CONFIGMAP}
    # gpufleet's ServiceMonitor scrapes the exporter; the operator's own would scrape every GPU a second time
    assert policy["serviceMonitor"]["enabled"] is False


# -- scraping -------------------------------------------------------------------------------------------------------


def test_the_service_monitor_is_valid_and_selects_the_operators_exporter_service(objects):
    monitor = objects["ServiceMonitor"]
    assert crd_errors(_crd("servicemonitors", "v1"), monitor) == []
    exporter = load_dcgm_catalog().operator_exporter
    service_labels = exporter.labels  # the operator's Service (assets/state-dcgm-exporter/0400_service.yaml)
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service_labels.items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [exporter.port_name]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["gpu-operator"]


def test_every_series_gets_its_node_and_gpufleet_pool(objects):
    monitor = objects["ServiceMonitor"]["spec"]
    assert monitor["attachMetadata"] == {"node": True}  # the node's labels reach relabeling
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in monitor["endpoints"][0]["relabelings"]}
    assert relabel == {
        "node": ["__meta_kubernetes_pod_node_name"],
        "pool": ["__meta_kubernetes_node_label_gpufleet_io_pool"],  # gpufleet.io/pool, set on every pool's nodes
    }


def _monitored(config: Any) -> None:
    config["gpufleet:aks"]["gpu_software"] = {"monitoring": True}


@needs_charts
def test_aks_managed_pools_are_scraped_on_their_nodes(catalog):
    # a stack with a pool whose GPU stack AKS manages (and others the device plugin chart serves)
    result = render_variant(REPO / "examples" / "aks" / "Pulumi.preview-westeurope.yaml", catalog, _monitored)
    files = {g.file: g for g in result.generated}
    scrape = next(o for o in files["gpufleet-monitoring.yaml"].objects if o["kind"] == "ScrapeConfig")
    assert crd_errors(_crd("scrapeconfigs", "v1alpha1"), scrape) == []
    relabel = scrape["spec"]["relabelings"]
    keep = next(r for r in relabel if r["action"] == "keep")
    assert keep == {
        "sourceLabels": ["__meta_kubernetes_node_label_kubernetes_azure_com_dcgm_exporter"],
        "regex": "enabled",
        "action": "keep",
    }
    address = next(r for r in relabel if r.get("targetLabel") == "__address__")
    assert address["replacement"].endswith(":19400")


# -- alerts ---------------------------------------------------------------------------------------------------------


def test_the_prometheus_rule_is_valid_and_promtool_accepts_its_rules(objects, tmp_path):
    rule = objects["PrometheusRule"]
    assert crd_errors(_crd("prometheusrules", "v1"), rule) == []
    path = write_rules(rule["spec"]["groups"], tmp_path)
    proc = run_promtool("check", "rules", path.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert names == {
        "GpuFallenOffBus", "GpuDoubleBitEccErrors", "GpuRowRemapFailure", "GpuThermalThrottling",
        "GpuPowerThrottling", "GpuNvlinkErrors", "GpuNodeIdle", "GpuMigLayoutDrift",
    }  # fmt: skip


def test_promtool_fails_a_broken_rule(tmp_path):
    """The check above can fail: promtool refuses an expression that does not parse."""
    path = write_rules([{"name": "g", "rules": [{"alert": "A", "expr": "rate(DCGM_FI_DEV_GPU_UTIL[5m]"}]}], tmp_path)
    assert run_promtool("check", "rules", path.name, cwd=tmp_path).returncode != 0


def _mig_layouts(plan: Any) -> dict[str, dict[str, int]]:
    return {p.name: dict(p.mig.instances_per_node) for p in plan.pools if p.mig and p.mig.instances_per_node}


def test_every_alert_fires_on_its_condition_and_not_on_a_sound_gpu(prod, objects, tmp_path):
    _, plan, _ = prod
    groups = objects["PrometheusRule"]["spec"]["groups"]
    each = cases(groups, _mig_layouts(plan), pool="h100train")
    assert len(each) == sum(len(g["rules"]) for g in groups)  # a test for every rule
    rules = write_rules(groups, tmp_path)
    tests = write_tests(each, rules)
    proc = run_promtool("test", "rules", tests.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrong_expectation_fails_promtool_test(prod, objects, tmp_path):
    """The unit tests can fail: expecting the idle alert where the node is busy is reported."""
    _, plan, _ = prod
    groups = objects["PrometheusRule"]["spec"]["groups"]
    idle = next(c for c in cases(groups, _mig_layouts(plan), pool="h100train") if c.rule["alert"] == "GpuNodeIdle")
    swapped = type(idle)(idle.rule, idle.quiet, idle.firing, idle.eval_time, idle.labels, idle.value)
    tests = write_tests([swapped], write_rules(groups, tmp_path))
    assert run_promtool("test", "rules", tests.name, cwd=tmp_path).returncode != 0


def test_the_idle_alert_names_each_pools_price_or_that_it_has_none(prod, objects, catalog):
    _, plan, cost = prod
    idle = {
        r["labels"]["pool"]: r for g in objects["PrometheusRule"]["spec"]["groups"] for r in g["rules"]
        if r["alert"] == "GpuNodeIdle"
    }  # fmt: skip
    assert set(idle) == {p.name for p in plan.pools}
    for name, rule in idle.items():  # the catalog has no westeurope price for Standard_ND96isr_H100_v5
        assert cost.pool(name).usd_per_node_hour is None
        assert "no price for Standard_ND96isr_H100_v5" in rule["annotations"]["description"]
        assert "usd_per_hour" not in rule["annotations"]
        assert rule["for"] == f"{monitoring.IDLE_HOURS}h"
    east = load_stack(REPO / "Pulumi.prod-eastus.yaml", today=TODAY).stack
    east_cost = stack_cost(east, catalog)
    priced = [(p, east_cost.pool(p.name)) for p in plan_stack(east, catalog).pools]
    assert any(c.usd_per_node_hour is not None for _, c in priced)
    for pool, figures in priced:
        annotations = monitoring.idle_alert(pool, east_cost).rule()["annotations"]
        if figures.usd_per_node_hour is not None:
            rate = f"{figures.usd_per_node_hour:.2f}"
            assert annotations["usd_per_hour"] == rate
            assert (
                f"${rate} per hour ({pool.vm_size}, {'spot' if figures.spot else 'pay-as-you-go'}"
                in (annotations["description"])
            )


def test_the_mig_drift_alert_expects_the_plans_instances_per_node(objects):
    drift = [
        r for g in objects["PrometheusRule"]["spec"]["groups"] for r in g["rules"] if r["alert"] == "GpuMigLayoutDrift"
    ]
    expected = {(r["labels"]["pool"], r["labels"]["profile"]): int(r["labels"]["expected"]) for r in drift}
    # h100mig: GPUs 0-3 2 x 1g.10gb + 2g.20gb + 3g.40gb, GPUs 4-7 2 x 3g.40gb (Pulumi.prod-westeurope.yaml)
    assert expected == {("h100mig", "1g.10gb"): 8, ("h100mig", "2g.20gb"): 4, ("h100mig", "3g.40gb"): 12}
    assert all(r["expr"].endswith(f"!= {expected[r['labels']['pool'], r['labels']['profile']]}") for r in drift)


def test_every_metric_the_alerts_read_is_one_gpufleet_turns_on(objects):
    fields = {m.field for m in load_dcgm_catalog().metrics}
    text = json.dumps(objects["PrometheusRule"]["spec"]["groups"])
    used = set(__import__("re").findall(r"DCGM_FI_[A-Z0-9_]+", text))
    assert used and used <= fields


def test_catalog_metrics_name_real_dcgm_fields_with_a_source():
    dcgm = load_dcgm_catalog()
    assert len({m.field for m in dcgm.metrics}) == len(dcgm.metrics)
    text = (REPO / "gpufleet" / "catalog" / "dcgm_metrics.yaml").read_text()
    assert "default-counters.csv" in text and "d5e5f510a1b6b393f39a43293ccd9dc985defc79" in text
