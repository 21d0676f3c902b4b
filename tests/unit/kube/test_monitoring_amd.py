"""GPU monitoring of AMD Instinct pools (gpufleet/kube/monitoring.py, docs/monitoring.md): the ServiceMonitor of AMD's
Device Metrics Exporter selects the Service the AMD GPU Operator makes from the DeviceConfig gpufleet renders, with
node and pool on each series; the AMD alerts pass the Prometheus operator's CRD and `promtool check rules`, and a
promtool unit test per alert fires on series shaped as the exporter emits them and stays quiet on a sound GPU; the
NVIDIA alerts no longer count AMD pools as idle NVIDIA nodes; the dashboard's AMD rows read AMD's metrics only."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from gpufleet.azure.cost import stack_cost
from gpufleet.catalog.amd import load_amd_metrics
from gpufleet.kube import charts, monitoring
from gpufleet.kube.amd_operator import DEVICE_CONFIG, METRICS_PORT
from gpufleet.kube.dashboard import dashboard
from gpufleet.plan.build import plan_stack
from tests.charts import CHARTS_DIR, chart_file, crd_errors, crd_validator, needs_charts, stack_variant
from tests.conftest import FIXTURES, REPO
from tests.monitoring_rules import IDLE_HOURS, Case, run_promtool, write_rules, write_tests

AMD_AKS = REPO / "examples" / "aks" / "Pulumi.dev-eastus.yaml"  # mi300x, mi300xcpx (CPX/NPS4), h100 (device plugin)
CRDS = FIXTURES / "crds" / "prometheus-operator"
GRAFANA = json.loads((FIXTURES / "grafana" / "dashboard.jsonschema.json").read_text())

# One MI300X as the exporter labels its series (ROCm/device-metrics-exporter v1.5.1, gpuMandatoryLables, lower case;
# metricslist.md's samples), with the node and pool gpufleet's scrape adds; the workload labels the exporter sets
# empty on an idle GPU are left out (Prometheus drops empty labels).
AMD_GPU = {
    "gpu_id": "3",
    "card_model": "AMD Instinct MI300X OAM",
    "gpu_partition_id": "0",
    "gpu_compute_partition_type": "spx",
    "gpu_memory_partition_type": "nps1",
    "deployment_mode": "baremetal",
    "serial_number": "692251001124",
    "hostname": "aks-mi300x-12345678-vmss000000",
    "node": "aks-mi300x-12345678-vmss000000",
    "pool": "mi300x",
}


def _monitored(config: Any) -> None:
    config["gpufleet:aks"].setdefault("gpu_software", {})["monitoring"] = True


@pytest.fixture(scope="module")
def amd(catalog) -> tuple[Any, Any, Any]:
    stack = stack_variant(AMD_AKS, _monitored)
    return stack, plan_stack(stack, catalog), stack_cost(stack, catalog)


@pytest.fixture(scope="module")
def amd_objects(amd) -> dict[tuple[str, str], dict[str, Any]]:
    _, plan, cost = amd
    return {(o["kind"], o["metadata"]["name"]): o for o in monitoring.monitoring_objects(plan, cost)}


def _crd(name: str, version: str) -> Any:
    doc = yaml.safe_load((CRDS / f"monitoring.coreos.com_{name}.yaml").read_text())
    return crd_validator(next(v for v in doc["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"])


def _amd_rules(objects: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    return objects["PrometheusRule", "gpufleet-amd-gpu-alerts"]["spec"]["groups"]


# -- scraping -------------------------------------------------------------------------------------------------------


def _operator_service(device_config: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The exporter Service ROCm/gpu-operator v1.5.1 makes from a DeviceConfig (internal/metricsexporter/
    metricsexporter.go SetMetricsServiceAsDesired; its name in internal/controllers/device_config_reconciler.go)."""
    name = device_config["metadata"]["name"] + "-metrics-exporter"
    port = device_config["spec"]["metricsExporter"].get("port") or 5000
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/service": name}},
        "spec": {"ports": [{"name": "exporter-port", "port": port, "targetPort": port}]},
    }


@needs_charts
def test_the_service_monitor_selects_the_exporter_service_of_the_rendered_device_config(amd, amd_objects):
    _, plan, cost = amd
    result = charts.render(plan, directory=CHARTS_DIR, cost=cost)
    (device_config,) = [o for c in result.charts for o in c.objects if o["kind"] == "DeviceConfig"]
    exporter = device_config["spec"]["metricsExporter"]
    assert exporter["enable"] is True
    assert exporter["prometheus"]["serviceMonitor"]["enable"] is False  # AMD's own would scrape every GPU again
    assert exporter.get("rbacConfig", {}).get("enable") is not True  # plain http, as the ServiceMonitor scrapes
    assert plan.cluster.amd_gpu_software is not None
    service = _operator_service(device_config, plan.cluster.amd_gpu_software.namespace)
    monitor = amd_objects["ServiceMonitor", "gpufleet-amd-metrics-exporter"]
    assert crd_errors(_crd("servicemonitors", "v1"), monitor) == []
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert spec["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert [e["port"] for e in spec["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert [e["path"] for e in spec["endpoints"]] == ["/metrics"]


@needs_charts
def test_the_chart_names_its_device_config_as_the_catalog_and_the_operator_module_say():
    template = chart_file("gpu-operator-charts", "templates/default-deviceconfig.yaml")
    assert re.search(r"^kind: DeviceConfig\nmetadata:\n  name: (\S+)$", template, re.M)[1] == DEVICE_CONFIG
    exporter = load_amd_metrics().operator_exporter
    assert exporter.default_device_config == DEVICE_CONFIG and exporter.port == METRICS_PORT


def test_every_amd_series_gets_its_node_and_gpufleet_pool(amd_objects):
    monitor = amd_objects["ServiceMonitor", "gpufleet-amd-metrics-exporter"]["spec"]
    assert monitor["attachMetadata"] == {"node": True}
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in monitor["endpoints"][0]["relabelings"]}
    assert relabel == {
        "node": ["__meta_kubernetes_pod_node_name"],
        "pool": ["__meta_kubernetes_node_label_gpufleet_io_pool"],
    }


def test_amd_objects_go_to_the_amd_operators_namespace_and_only_with_amd_pools_and_monitoring(amd, catalog):
    _, plan, cost = amd
    objects = monitoring.amd_monitoring_objects(plan, cost)
    assert {o["metadata"]["namespace"] for o in objects} == {"kube-amd-gpu"}
    assert {o["kind"] for o in objects} == {"ServiceMonitor", "PrometheusRule"}
    assert monitoring.amd_monitoring_objects(plan_stack(stack_variant(AMD_AKS, lambda c: None), catalog), cost) == []
    prod = plan_stack(stack_variant(REPO / "Pulumi.prod-westeurope.yaml", lambda c: None), catalog)
    assert prod.cluster is not None and prod.cluster.gpu_metrics  # NVIDIA only: nothing of AMD's
    assert monitoring.amd_monitoring_objects(prod, None) == []


# -- alerts ---------------------------------------------------------------------------------------------------------


def test_the_amd_rule_is_valid_and_promtool_accepts_it(amd_objects, tmp_path):
    rule = amd_objects["PrometheusRule", "gpufleet-amd-gpu-alerts"]
    assert crd_errors(_crd("prometheusrules", "v1"), rule) == []
    path = write_rules(rule["spec"]["groups"], tmp_path)
    proc = run_promtool("check", "rules", path.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [(r["alert"], r["labels"].get("pool")) for g in rule["spec"]["groups"] for r in g["rules"]]
    assert sorted(names, key=str) == sorted(
        [("GpuUnhealthy", None), ("GpuUncorrectableEccErrors", None), ("GpuFatalRasEvent", None),
         ("GpuNodeIdle", "mi300x"), ("GpuNodeIdle", "mi300xcpx")], key=str,
    )  # fmt: skip


def test_nvidias_idle_alerts_are_for_nvidia_pools_and_amds_for_amd_pools(amd_objects):
    nvidia = amd_objects["PrometheusRule", "gpufleet-gpu-alerts"]["spec"]["groups"]
    idle = {r["labels"]["pool"]: r["expr"] for g in nvidia for r in g["rules"] if r["alert"] == "GpuNodeIdle"}
    assert set(idle) == {"h100"} and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in idle["h100"]
    amd_idle = {r["labels"]["pool"]: r["expr"] for g in _amd_rules(amd_objects) for r in g["rules"]
                if r["alert"] == "GpuNodeIdle"}  # fmt: skip
    assert set(amd_idle) == {"mi300x", "mi300xcpx"}
    assert all("gpu_gfx_activity" in e and "DCGM" not in e for e in amd_idle.values())


def test_every_metric_the_amd_alerts_read_is_one_the_catalog_names_with_its_source(amd_objects):
    names = {m.name for m in load_amd_metrics().metrics}
    exprs = " ".join(r["expr"] for g in _amd_rules(amd_objects) for r in g["rules"])
    used = set(re.findall(r"\bgpu_[a-z0-9_]+\b", exprs))
    assert used and used <= names
    text = (REPO / "gpufleet" / "catalog" / "amd_metrics.yaml").read_text()
    assert "858cf255c7dd27cebf1cc5db400eee3aa06ecbbc" in text and "ad44c717b8567ce18c0ceb0c6dc550dc991eb246" in text


def _amd_case(rule: dict[str, Any]) -> Case:
    """A series shaped as the exporter emits it that fires ``rule``, and one of a sound GPU."""
    out = {**AMD_GPU, **rule["labels"]}
    if rule["alert"] == "GpuUnhealthy":  # the health flag: 1 healthy, 0 unhealthy
        return Case(rule, [("gpu_health", AMD_GPU, "1 1 0 0 0")], [("gpu_health", AMD_GPU, "1x5")], "3m", out, 0.0)
    if rule["alert"] == "GpuUncorrectableEccErrors":  # a gauge of the driver's count
        bad, good = "0 0 2 2 2", "0x5"
        return Case(rule, [("gpu_ecc_uncorrect_total", AMD_GPU, bad)], [("gpu_ecc_uncorrect_total", AMD_GPU, good)],
                    "3m", out, 2.0)  # fmt: skip
    if rule["alert"] == "GpuFatalRasEvent":  # the last CPER record's AFIDs, each its own series; value the AFID
        fatal = {**AMD_GPU, "severity": "fatal", "afid_index": "0"}
        corrected = {**AMD_GPU, "severity": "non_fatal_corrected", "afid_index": "0"}
        return Case(rule, [("gpu_afid_errors", fatal, "30x5")], [("gpu_afid_errors", corrected, "30x5")], "3m",
                    {**fatal, **rule["labels"]}, 30.0)  # fmt: skip
    assert rule["alert"] == "GpuNodeIdle"  # activity in percent, on the GPU's primary partition
    minutes = (IDLE_HOURS + 1) * 60
    labels = {**AMD_GPU, "pool": rule["labels"]["pool"]}
    out = {"node": labels["node"], "pool": labels["pool"], **rule["labels"]}
    return Case(rule, [("gpu_gfx_activity", labels, f"2x{minutes}")], [("gpu_gfx_activity", labels, f"40x{minutes}")],
                f"{minutes}m", out, 2.0)  # fmt: skip


def test_every_amd_alert_fires_on_the_exporters_series_and_not_on_a_sound_gpu(amd_objects, tmp_path):
    groups = _amd_rules(amd_objects)
    cases = [_amd_case(r) for g in groups for r in g["rules"]]
    assert len(cases) == 5
    tests = write_tests(cases, write_rules(groups, tmp_path))
    proc = run_promtool("test", "rules", tests.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrong_expectation_fails_promtool_on_the_amd_rules(amd_objects, tmp_path):
    """The unit tests can fail: a non-fatal RAS event expected to fire the fatal alert is reported."""
    groups = _amd_rules(amd_objects)
    fatal = next(_amd_case(r) for g in groups for r in g["rules"] if r["alert"] == "GpuFatalRasEvent")
    swapped = Case(fatal.rule, fatal.quiet, fatal.firing, fatal.eval_time, fatal.labels, fatal.value)
    tests = write_tests([swapped], write_rules(groups, tmp_path))
    assert run_promtool("test", "rules", tests.name, cwd=tmp_path).returncode != 0


# -- the dashboard --------------------------------------------------------------------------------------------------


def test_the_dashboard_of_a_stack_with_amd_pools_passes_grafanas_schema_and_promtool(amd, tmp_path):
    _, plan, cost = amd
    board = dashboard(plan, cost)
    assert [f"{e.path}: {e.message}" for e in Draft7Validator(GRAFANA).iter_errors(board)] == []
    panels = [p for p in board["panels"] if p["type"] != "row"]
    rules = []
    for panel in panels:
        expr = panel["targets"][0]["expr"].replace("$node", "aks-node-0").replace("$pool", "mi300x")
        rules.append({"record": f"gpufleet:dashboard:panel_{panel['id']}", "expr": expr})
    path = write_rules([{"name": "dashboard", "rules": rules}], tmp_path)
    proc = run_promtool("check", "rules", path.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    node = next(v for v in board["templating"]["list"] if v["name"] == "node")
    assert "gpu_health" in node["query"] and "DCGM_FI_DEV_GPU_TEMP" in node["query"]


def test_an_amd_pools_row_reads_amds_metrics_and_an_nvidia_pools_dcgms(amd):
    _, plan, cost = amd
    board = dashboard(plan, cost)
    rows: dict[str, list[str]] = {}
    current = ""
    for panel in board["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
            rows[current] = []
        else:
            rows[current].append(panel["targets"][0]["expr"])
    by_pool = {title.split(":")[0].removeprefix("Pool "): exprs for title, exprs in rows.items()
               if title.startswith("Pool ")}  # fmt: skip
    assert set(by_pool) == {"mi300x", "mi300xcpx", "h100"}
    for pool in ("mi300x", "mi300xcpx"):
        assert not any("DCGM_" in e for e in by_pool[pool]) and all(re.search(r"\bgpu_", e) for e in by_pool[pool])
    assert all("DCGM_" in e for e in by_pool["h100"])
    assert any(p["title"] == "Logical GPUs per node (plan: 64 x cpx_nps4)" for p in board["panels"])
    assert any(t.startswith("AMD node $node") for t in rows) and any(t.startswith("Node $node") for t in rows)


def test_an_amd_only_cluster_is_monitored_through_amds_exporter_alone(catalog):
    def amd_only(config: Any) -> None:
        _monitored(config)
        pools = config["gpufleet:aks"]["gpu_pools"]
        pools[:] = [p for p in pools if p["name"] != "h100"]

    stack = stack_variant(AMD_AKS, amd_only)
    plan, cost = plan_stack(stack, catalog), stack_cost(stack, catalog)
    assert plan.cluster is not None and plan.cluster.gpu_software is None
    objects = {(o["kind"], o["metadata"]["name"]) for o in monitoring.monitoring_objects(plan, cost)}
    assert {
        ("ServiceMonitor", "gpufleet-amd-metrics-exporter"),
        ("PrometheusRule", "gpufleet-amd-gpu-alerts"),
    } <= objects
    assert ("ServiceMonitor", "gpufleet-dcgm-exporter") not in objects
    nvidia = monitoring.rule_groups(plan, cost)
    assert not any(r["alert"] == "GpuNodeIdle" for g in nvidia for r in g["rules"])  # no NVIDIA pool to be idle
    board = dashboard(plan, cost)
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert any(t.startswith("AMD node $node") for t in rows) and not any(t.startswith("Node $node") for t in rows)
