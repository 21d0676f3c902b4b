"""gpufleet render of DRA stacks (advertiser dra, docs/kubernetes.md): the GPU Operator's GPUCluster instead of its
ClusterPolicy, its operands placed as the v26.7.0 operator labels nodes, advertiser none kept off, and gpufleet's own
DRA objects written beside the chart. The every-stack checks (kubernetes-validate, CRD schemas, chart keys, every
GPU DaemonSet on every target it must serve) run on the DRA example in test_render.py."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

import pytest
import yaml as pyyaml

from gpufleet.kube import charts
from gpufleet.kube.gpu_software import DEVICE_PLUGIN_CHART, GPU_OPERATOR_CHART
from gpufleet.kube.labels import DEPLOY_DEVICE_PLUGIN_LABEL, DRA_OPERAND_LABELS
from gpufleet.spec.load import load_stack, load_stack_text
from tests.charts import CHARTS_DIR, crd_errors, crd_validator, needs_charts, render_stack, render_variant
from tests.conftest import REPO, TODAY, cli
from tests.stacks import release_block

pytestmark = needs_charts

DRA = REPO / "examples" / "dra" / "Pulumi.dev-eastus2.yaml"
DRA_POOLS = ("h100", "h100mig", "gb200")
DRA_OPERANDS = ("nvidia-dra-driver-kubelet-plugin", "nvidia-dra-validator", "nvidia-dcgm-exporter-dra")


def _coverage(result: charts.Render, name: str) -> charts.Coverage:
    return next(c for c in result.coverage if c.name == name)


def _objects(result: charts.Render, kind: str) -> list[dict[str, Any]]:
    return [o for c in result.charts for o in c.objects if o.get("kind") == kind]


def _problems(result: charts.Render, targets: list[charts.Target], objects: list[Any] | None = None) -> list[str]:
    """The problems of ``result``'s render placed again (no helm) on other targets, or with other objects."""
    again = [charts.RenderedChart(c.release, c.manifest, objects or c.objects) for c in result.charts]
    _, placed = charts.place(again, targets)
    return [p for c in placed for p in c.problems]


def _without_labels(result: charts.Render, target: str, keys: tuple[str, ...]) -> list[charts.Target]:
    """``result``'s targets with ``keys`` taken off ``target``'s labels (as if gpufleet had not set them)."""
    out = []
    for t in result.targets:
        if t.name == target:
            labels = {k: v for k, v in t.node.labels.items() if k not in keys}
            t = dataclasses.replace(t, node=dataclasses.replace(t.node, labels=labels))
        out.append(t)
    return out


@pytest.fixture(scope="module")
def dra(catalog) -> charts.Render:
    stack = load_stack(DRA, today=TODAY).stack
    assert stack is not None
    return render_stack(stack, catalog)


def test_a_dra_cluster_renders_a_gpu_cluster_and_no_cluster_policy(dra):
    (release,) = [c.release for c in dra.charts]
    assert release.values["clusterPolicy"] == {"deployCR": False}
    assert release.values["gpuCluster"] == {"deployCR": True}
    assert _objects(dra, "ClusterPolicy") == []
    (cluster,) = _objects(dra, "GPUCluster")
    assert cluster["spec"]["draDriver"]["version"] == "v0.5.0"  # no dra_driver pin yet: the chart's default
    assert cluster["spec"]["draDriver"]["computeDomains"] == {"enabled": True}  # the GB200 pool's NVLink spans nodes
    # no ConfigMap of the device plugin or the MIG manager: a GPUCluster has neither
    assert all("node-feature-discovery" in o["metadata"]["name"] for o in _objects(dra, "ConfigMap"))


def test_the_gpu_cluster_passes_its_crd_schema_and_the_check_sees_a_field_it_lacks(dra):
    crd = next(o for o in _objects(dra, "CustomResourceDefinition") if o["spec"]["names"]["kind"] == "GPUCluster")
    validator = crd_validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    (cluster,) = _objects(dra, "GPUCluster")
    assert crd_errors(validator, cluster) == []
    wrong = pyyaml.safe_load(pyyaml.safe_dump(cluster))
    wrong["spec"]["devicePlugin"] = {"enabled": False}  # a ClusterPolicy field: the API server would prune it
    assert any("devicePlugin" in e for e in crd_errors(validator, wrong))


def test_the_dra_driver_and_its_operands_run_on_every_dra_pool_and_no_device_plugin_anywhere(dra):
    assert dra.problems == []
    for name in DRA_OPERANDS:
        cov = _coverage(dra, name)
        assert cov.runs_on == DRA_POOLS and cov.misses == () and cov.unwanted == (), cov
    assert not [c for c in dra.coverage if "device-plugin" in c.name]
    for pool in DRA_POOLS:  # what the operator labels every GPU node of a GPUCluster with
        assert {label: dra.labels[pool].get(label) for label in DRA_OPERAND_LABELS} == dict.fromkeys(
            DRA_OPERAND_LABELS, "true"
        )
    assert _coverage(dra, "nvidia-dra-driver-controller").runs_on[0] == "system"


def test_without_the_gpu_cluster_the_check_sees_every_dra_pool_unserved(dra):
    objects = [o for c in dra.charts for o in c.objects if o["kind"] != "GPUCluster"]
    problems = _problems(dra, dra.targets, objects)
    why = "the chart renders no GPUCluster (gpuCluster.deployCR), whose operator deploys the DRA driver"
    assert problems == [f"DaemonSet nvidia-dra-driver-kubelet-plugin would not run on {p}: {why}" for p in DRA_POOLS]


def test_without_nvlink_across_nodes_the_compute_domain_half_stays_off(catalog):
    def no_gb200(config):
        config["gpufleet:aks"]["gpu_pools"].pop(2)

    result = render_variant(DRA, catalog, no_gb200)
    (cluster,) = _objects(result, "GPUCluster")
    assert cluster["spec"]["draDriver"]["computeDomains"] == {"enabled": False}
    assert "nvidia-dra-driver-controller" not in {c.name for c in result.coverage}
    (classes,) = [g for g in result.generated if g.name == "device-classes"]
    assert {o["metadata"]["name"] for o in classes.objects} == {
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "vfio.gpu.nvidia.com",
    }
    assert result.problems == []


def test_a_none_pool_in_a_dra_cluster_gets_no_dra_operand_and_the_check_sees_one_that_would_land(catalog):
    def idle_pool(config):
        pool = {"name": "h100idle", "vm_size": "Standard_NC40ads_H100_v5", "count": 1, "advertiser": "none"}
        config["gpufleet:aks"]["gpu_pools"].append(pool)

    result = render_variant(DRA, catalog, idle_pool)
    assert result.problems == []
    idle = next(t for t in result.targets if t.name == "h100idle")
    assert {k: idle.node.labels[k] for k in DRA_OPERAND_LABELS} == dict.fromkeys(DRA_OPERAND_LABELS, "false")
    for name in DRA_OPERANDS:
        cov = _coverage(result, name)
        assert "h100idle" not in cov.runs_on
        (miss,) = [m for m in cov.misses if m.target == "h100idle"]
        assert miss.intended and "its advertiser is none; it serves dra nodes" in miss.why
    problems = _problems(result, _without_labels(result, "h100idle", DRA_OPERAND_LABELS))
    wrong = (
        "DaemonSet nvidia-dra-driver-kubelet-plugin would run on h100idle, which it is not for: its advertiser is none"
    )
    assert any(p.startswith(wrong) for p in problems), problems


def test_a_none_pool_under_a_cluster_policy_gets_no_device_plugin(catalog):
    def train_unadvertised(config):
        config["gpufleet:aks"]["gpu_pools"][1]["advertiser"] = "none"

    result = render_variant(REPO / "Pulumi.prod-westeurope.yaml", catalog, train_unadvertised)
    assert result.problems == []
    assert _objects(result, "ClusterPolicy") and not _objects(result, "GPUCluster")
    plugin = _coverage(result, "nvidia-device-plugin-daemonset")
    assert plugin.runs_on == ("h100mig",)
    assert [(m.target, m.intended) for m in plugin.misses] == [("h100train", True)]
    assert result.labels["h100train"][DEPLOY_DEVICE_PLUGIN_LABEL] == "false"
    assert "nvidia-dcgm-exporter" in {c.name for c in result.coverage if "h100train" in c.runs_on}  # still monitored
    problems = _problems(result, _without_labels(result, "h100train", (DEPLOY_DEVICE_PLUGIN_LABEL,)))
    assert any(p.startswith("DaemonSet nvidia-device-plugin-daemonset would run on h100train, which") for p in problems)


@pytest.mark.parametrize("sharing", [None, {"mode": "mps", "replicas": 4}])
def test_the_standalone_device_plugin_stays_off_a_none_pool(catalog, sharing):
    """Its chart's affinity honours the GPU Operator's off switch, NFD's GPU label (MPS brings NFD) included."""

    def spot_unadvertised(config):
        pools = config["gpufleet:aks"]["gpu_pools"]
        pools[2]["advertiser"] = "none"
        if sharing is not None:
            pools[0]["sharing"] = sharing

    result = render_variant(REPO / "Pulumi.dev-westeurope.yaml", catalog, spot_unadvertised)
    assert [c.release.chart for c in result.charts] == [DEVICE_PLUGIN_CHART]
    plugin = _coverage(result, "nvidia-device-plugin")
    assert plugin.runs_on == ("t4shared", "a100mig")
    assert [(m.target, m.intended) for m in plugin.misses] == [("t4spot", True)]
    assert "nvidia.com/gpu.present" not in result.labels["t4spot"]
    if sharing is not None:  # GPU Feature Discovery comes with MPS, with the same affinity
        (gfd,) = _coverage(result, "nvidia-device-plugin-gpu-feature-discovery").misses
        assert (gfd.target, gfd.intended) == ("t4spot", True)
    assert result.problems == []


def test_the_operators_driver_on_a_dra_pool_comes_from_an_nvidia_driver_cr(catalog):
    def operator_driver(config):
        config["gpufleet:aks"]["gpu_pools"][0]["driver"] = "operator"

    result = render_variant(DRA, catalog, operator_driver)
    (release,) = [c.release for c in result.charts]
    assert release.values["driver"] == {"enabled": True, "nvidiaDriverCRD": {"enabled": True}}
    (driver,) = _objects(result, "NVIDIADriver")
    crd = next(o for o in _objects(result, "CustomResourceDefinition") if o["spec"]["names"]["kind"] == "NVIDIADriver")
    assert crd_errors(crd_validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]), driver) == []
    daemonset = _coverage(result, "nvidia-gpu-driver-default")
    assert daemonset.runs_on == ("h100",)
    assert {(m.target, m.intended) for m in daemonset.misses} == {("h100mig", True), ("gb200", True)}
    assert result.problems == []


ONPREM_DRA = (
    """config:
  gpufleet:stage: prod
  gpufleet:region: onprem
"""
    + release_block()
    + """  gpufleet:baremetal:
    inventory: inventories/lab-local
    host_groups:
      - name: gb200
        gpu_model: GB200-186GB
        gpus_per_host: 4
        advertiser: dra
      - name: cpu
"""
)


@pytest.mark.parametrize("chart", [GPU_OPERATOR_CHART, DEVICE_PLUGIN_CHART])
def test_dra_host_groups_are_served_by_the_operators_gpu_cluster_only(catalog, chart):
    stack = load_stack_text(ONPREM_DRA, "Pulumi.prod-onprem.yaml", today=TODAY).stack
    result = render_stack(stack, catalog, chart)
    if chart == GPU_OPERATOR_CHART:
        assert result.problems == []
        assert _coverage(result, "nvidia-dra-driver-kubelet-plugin").runs_on == ("gb200",)
        (cluster,) = _objects(result, "GPUCluster")
        assert cluster["spec"]["draDriver"]["computeDomains"]["enabled"] is True  # NVL72: 72 GPUs, 4 per host
    else:
        assert result.problems == [
            "DaemonSet nvidia-dra-driver-kubelet-plugin would not run on gb200: the nvidia-device-plugin chart has no"
            " DRA driver: DRA pools and host groups need the gpu-operator chart"
        ]
    assert [o["metadata"]["name"] for o in result.generated[0].objects] == ["gpu-gb200-186gb", "gb200-nvlink"]


def gpufleet(*args: str) -> Any:
    return cli("render", *args, env={**os.environ, charts.CHARTS_DIR_ENV: str(CHARTS_DIR)})


def test_render_writes_the_dra_objects_beside_the_chart_and_reports_them_in_json(tmp_path):
    out = tmp_path / "out"
    proc = gpufleet(str(DRA), "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "dra-deviceclasses.yaml",
        "gpu-operator.yaml",
        "gpufleet-dra.yaml",
        "gpufleet-kueue.yaml",
        "kueue-device-class-mappings.yaml",
        "nodes.yaml",
        "summary.json",
    ]
    assert "gpufleet-dra.yaml (gpufleet): 1 ComputeDomain, 3 ResourceClaimTemplate" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generated"] == [
        {"name": "dra", "file": "gpufleet-dra.yaml", "objects": {"ComputeDomain": 1, "ResourceClaimTemplate": 3}},
        {"name": "device-classes", "file": "dra-deviceclasses.yaml", "objects": {"DeviceClass": 5}},
        {"name": "kueue", "file": "kueue-device-class-mappings.yaml", "objects": {"Configuration": 1}},
        {
            "name": "queues",
            "file": "gpufleet-kueue.yaml",
            "objects": {"ClusterQueue": 1, "ResourceFlavor": 3},
        },
    ]
    assert summary["charts"][0]["objects"]["GPUCluster"] == 1 and "ClusterPolicy" not in summary["charts"][0]["objects"]
    templates = list(pyyaml.safe_load_all((out / "gpufleet-dra.yaml").read_text()))
    assert [t["metadata"]["name"] for t in templates] == [
        "gpu-h100-nvl-94gb",
        "gpu-h100-nvl-94gb-3g47gb",
        "gpu-gb200-186gb",
        "gb200-nvlink",
    ]
    assert all("namespace" not in t["metadata"] for t in templates)  # applied into each team's namespace
    kueue = pyyaml.safe_load((out / "kueue-device-class-mappings.yaml").read_text())
    assert [m["name"] for m in kueue["resources"]["deviceClassMappings"]] == ["nvidia.com/gpu", "nvidia.com/mig"]


def test_a_stack_without_dra_generates_its_queues_only():
    proc = gpufleet("prod-eastus", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [g["name"] for g in json.loads(proc.stdout)["generated"]] == ["queues"]


def _apply_diff(text: str, diff: str) -> str:
    """Apply the hunks of a docs ```diff block (context ' ', removed '-', added '+'; hunks split by '@@'), each of
    whose old lines must appear exactly once in ``text``."""
    for hunk in diff.split("@@\n"):
        lines = hunk.splitlines()
        old = "".join(line[1:] + "\n" for line in lines if line[:1] in (" ", "-"))
        new = "".join(line[1:] + "\n" for line in lines if line[:1] in (" ", "+"))
        assert text.count(old) == 1, f"the diff's lines are not in the stack once:\n{old}"
        text = text.replace(old, new)
    return text


def test_the_docs_migration_diff_turns_the_device_plugin_cluster_into_a_valid_dra_cluster(catalog):
    doc = (REPO / "docs" / "kubernetes.md").read_text()
    (diff,) = re.findall(r"```diff\n(.*?)```", doc, re.S)
    text = _apply_diff((REPO / "Pulumi.dev-westeurope.yaml").read_text(), diff)
    loaded = load_stack_text(text, "Pulumi.dev-westeurope.yaml", today=TODAY)
    assert loaded.stack is not None, [str(d) for d in loaded.diagnostics]
    result = render_stack(loaded.stack, catalog)
    assert [c.release.chart for c in result.charts] == [GPU_OPERATOR_CHART] and _objects(result, "GPUCluster")
    assert _coverage(result, "nvidia-dra-driver-kubelet-plugin").runs_on == ("t4shared", "a100mig", "t4spot")
    assert result.problems == []
    templates = [(o["metadata"]["name"], o["metadata"]["annotations"]) for o in result.generated[0].objects]
    assert templates == [  # one T4 template for both T4 pools; AKS's MIG1g leaves the A100 no whole GPU
        ("gpu-t4", {"gpufleet.io/targets": "t4shared,t4spot"}),
        ("gpu-a100-pcie-80gb-1g10gb", {"gpufleet.io/targets": "a100mig"}),
    ]
