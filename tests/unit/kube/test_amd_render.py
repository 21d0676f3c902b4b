"""The AMD GPU Operator's chart rendered by the real helm with the values gpufleet installs (tests/unit/kube/
amd_stacks.py: MI300X pools beside an H100 pool on AKS, with either NVIDIA chart; MI300X pools alone; a bare-metal
MI300X host group, alone and beside an H100 group): every object valid (kubernetes-validate, the DeviceConfig against
the chart's CRD, NFD's NodeFeatureRules against NFD's), only the chart's keys, and the placement check (``gpufleet
render``'s ``daemonsets``) showing every AMD pool and host group served by the DaemonSets the operator makes from the
DeviceConfig, no NVIDIA DaemonSet on an AMD node and no AMD one on an NVIDIA node, and failing where that breaks."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpufleet.kube import amd_operator, charts
from gpufleet.kube.amd_operator import AMD_GPU_OPERATOR_CHART as AMD
from gpufleet.kube.labels import AMD_GPU_FEATURE_LABEL, AMD_GPU_OPERATOR_LABEL, GPU_PRESENT_LABEL
from gpufleet.kube.scheduling import NodeShape, why_not
from gpufleet.plan.model import StackPlan
from gpufleet.spec.models import GpuSoftware
from tests.charts import CHARTS_DIR, REFERENCE_CHARTS, chart_keys, crd_errors, crd_validator, needs_charts, unknown_keys
from tests.conftest import cli
from tests.unit.kube.amd_stacks import (
    AKS_FILE,
    AMD_ONLY,
    BAREMETAL,
    BAREMETAL_FILE,
    BAREMETAL_MIXED,
    MIXED,
    MIXED_PLUGIN,
    plan,
    write,
)

pytestmark = needs_charts

CASES = {
    "mixed": (MIXED, AKS_FILE),
    "mixed-device-plugin": (MIXED_PLUGIN, AKS_FILE),
    "amd-only": (AMD_ONLY, AKS_FILE),
    "baremetal": (BAREMETAL, BAREMETAL_FILE),
    "baremetal-mixed": (BAREMETAL_MIXED, BAREMETAL_FILE),
}
AMD_TARGETS = {"mixed": {"mi300x", "mi300xcpx"}, "baremetal": {"mi300x"}}
# the DaemonSets the operator makes from the DeviceConfig: on AKS it installs the driver (KMM's worker pods) and the
# CPX pool is partitioned by the DCM; on bare metal the amd_driver role installs the driver and partitions the hosts
AKS_OPERANDS = {
    "kmm-worker (Module default)",
    "default-device-plugin",
    "default-node-labeller",
    "default-metrics-exporter",
    "default-device-config-manager",
}
BAREMETAL_OPERANDS = {"default-device-plugin", "default-node-labeller", "default-metrics-exporter"}
# cert-manager's kinds, which KMM's webhook uses (the chart does not install cert-manager, and no CRD of it is
# vendored here: they are checked for their apiVersion only)
CERT_MANAGER_KINDS = {"Certificate", "Issuer"}
DEVICE_CONFIG_CRD = REFERENCE_CHARTS / "amd-gpu-operator-v1.5.1" / "crds" / "deviceconfig-crd.yaml"


def _render(stack_plan: StackPlan, chart: str = charts.GPU_OPERATOR_CHART) -> charts.Render:
    return charts.render(stack_plan, directory=CHARTS_DIR, baremetal_chart=chart)


@pytest.fixture(scope="module")
def rendered() -> dict[str, charts.Render]:
    return {case: _render(plan(text, name)) for case, (text, name) in CASES.items()}


def _objects(result: charts.Render, kind: str) -> list[dict[str, Any]]:
    return [o for c in result.charts for o in c.objects if o.get("kind") == kind]


def _coverage(result: charts.Render, name: str) -> charts.Coverage:
    return next(c for c in result.coverage if c.name == name)


def _amd_targets(case: str) -> set[str]:
    return AMD_TARGETS["baremetal" if case.startswith("baremetal") else "mixed"]


def _nvidia_targets(result: charts.Render) -> set[str]:
    return {t.name for t in result.targets if t.gpu and t.vendor == "nvidia"}


def _device_config(result: charts.Render) -> dict[str, Any]:
    (device_config,) = _objects(result, "DeviceConfig")
    return device_config


# -- placement: every AMD target served, no vendor on the other's nodes -------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_every_amd_target_is_served_by_every_operand_and_no_daemonset_crosses_vendors(rendered, case):
    result = rendered[case]
    assert result.problems == []
    amd, nvidia = _amd_targets(case), _nvidia_targets(result)
    operands = {c.name: c for c in result.coverage if c.chart == AMD and c.kind == "DaemonSet"}
    expected = BAREMETAL_OPERANDS if case.startswith("baremetal") else AKS_OPERANDS
    assert set(operands) - {n for n in operands if n.endswith("node-feature-discovery-worker")} == expected
    for name in expected:
        assert set(operands[name].runs_on) == amd, operands[name].misses
        assert {m.target for m in operands[name].misses} == nvidia
    for cov in result.coverage:
        if cov.kind != "DaemonSet" or cov.name.endswith("node-feature-discovery-worker"):
            continue
        other = nvidia if cov.chart == AMD else amd
        assert not set(cov.runs_on) & other, cov
        for miss in (m for m in cov.misses if m.target in other):
            assert miss.intended and "it serves" in miss.why, miss


@pytest.mark.parametrize("case", list(CASES))
def test_one_nfd_worker_labels_every_gpu_node(rendered, case):
    result = rendered[case]
    workers = [c for c in result.coverage if c.name.endswith("node-feature-discovery-worker")]
    assert len(workers) == 1, [w.name for w in workers]  # one NFD per cluster
    assert set(workers[0].runs_on) >= _amd_targets(case) | _nvidia_targets(result)
    for target in _amd_targets(case):
        assert result.labels[target][AMD_GPU_FEATURE_LABEL] == "true"
        assert "feature.node.kubernetes.io/pci-10de.present" not in result.labels[target]


def test_the_gpu_operators_nfd_labels_the_amd_nodes_in_a_mixed_cluster(rendered):
    worker = _coverage(rendered["mixed"], "gpu-operator-node-feature-discovery-worker")
    assert set(worker.runs_on) == {"mi300x", "mi300xcpx", "h100"}
    alone = _coverage(rendered["mixed-device-plugin"], "gpu-operator-charts-node-feature-discovery-worker")
    assert set(alone.runs_on) == {"mi300x", "mi300xcpx", "h100"}


def test_nvidias_operands_tolerate_the_amd_nodes_and_stay_off_them_by_their_node_selection(rendered):
    """The NVIDIA pool and an MI300X pool share the taint sku=gpu:NoSchedule: what keeps NVIDIA's operands off the
    MI300X nodes is only what they select (the operator's deploy labels, which follow NFD's pci-10de and
    nvidia.com/gpu.present; the standalone plugin's affinity on the same), which AMD nodes never carry."""
    result = rendered["mixed"]
    node = NodeShape(
        "mi300x", result.labels["mi300x"], next(t for t in result.targets if t.name == "mi300x").node.taints
    )
    nvidia = [w for w in charts.workloads("gpu-operator", result.charts[0].objects) if w.vendor == "nvidia"]
    assert {w.name for w in nvidia} >= {"nvidia-device-plugin-daemonset", "nvidia-driver-daemonset"}
    for workload in nvidia:
        reasons = why_not(workload.placement, node)
        assert reasons and not [r for r in reasons if r.startswith("taint sku=gpu")], (workload.name, reasons)
        assert any("nvidia.com/gpu.deploy." in r for r in reasons), (workload.name, reasons)
    assert GPU_PRESENT_LABEL not in result.labels["mi300x"]
    plugin = charts.workloads("nvidia-device-plugin", rendered["mixed-device-plugin"].charts[0].objects)
    daemonset = next(w for w in plugin if w.name == "nvidia-device-plugin")
    labels = rendered["mixed-device-plugin"].labels["mi300x"]
    (reason,) = why_not(daemonset.placement, NodeShape("mi300x", labels))
    assert reason.startswith("required node affinity: no term matches"), reason


def _render_with(monkeypatch, text: str, module: Any, name: str, wrap) -> charts.Render:
    original = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: wrap(original(*a, **k)))
    return _render(plan(text))


def test_the_check_catches_nvidias_operands_on_an_amd_node(monkeypatch):
    from gpufleet.plan import build

    def present(labels: dict[str, str]) -> dict[str, str]:
        return {**labels, GPU_PRESENT_LABEL: "true"} if labels.get("gpufleet.io/gpu-model") == "MI300X" else labels

    result = _render_with(monkeypatch, MIXED, build, "pool_labels", present)
    wrong = "DaemonSet nvidia-device-plugin-daemonset would run on mi300x, which it is not for: its GPUs are AMD's"
    assert any(p.startswith(wrong) for p in result.problems), result.problems


def test_the_check_catches_amd_operands_on_an_nvidia_node_which_nfds_label_alone_keeps_off(monkeypatch):
    from gpufleet.plan import build

    def amd_labelled(extra: dict[str, str]):
        def wrap(labels: dict[str, str]) -> dict[str, str]:
            return {**labels, **extra} if labels.get("gpufleet.io/pool") == "h100" else labels

        return wrap

    # gpufleet's label on the H100 pool by mistake: NFD never labels it amd-gpu, so the operands still stay off
    result = _render_with(monkeypatch, MIXED, build, "pool_labels", amd_labelled({AMD_GPU_OPERATOR_LABEL: "true"}))
    assert result.problems == []
    both = {AMD_GPU_OPERATOR_LABEL: "true", AMD_GPU_FEATURE_LABEL: "true"}
    result = _render_with(monkeypatch, MIXED, build, "pool_labels", amd_labelled(both))
    wrong = "DaemonSet default-device-plugin would run on h100, which it is not for: its GPUs are NVIDIA's"
    assert any(p.startswith(wrong) for p in result.problems), result.problems


def test_without_nfd_the_amd_operands_reach_no_amd_node(monkeypatch):
    def no_nfd(values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "node-feature-discovery": {"enabled": False}}

    result = _render_with(monkeypatch, AMD_ONLY, amd_operator, "amd_operator_values", no_nfd)
    plugin = _coverage(result, "default-device-plugin")
    assert plugin.runs_on == ()
    assert any(f"nodeSelector {AMD_GPU_FEATURE_LABEL}=true: node has no such label" in m.why for m in plugin.misses)
    assert result.problems


def test_without_the_amd_pools_taint_tolerated_the_operands_miss_that_pool(monkeypatch):
    def untainted(tolerations: list[dict[str, str]]) -> list[dict[str, str]]:
        return [t for t in tolerations if t["key"] != "amd.com/gpu"]

    result = _render_with(monkeypatch, AMD_ONLY, amd_operator, "operand_tolerations", untainted)
    wrong = "DaemonSet default-metrics-exporter would not run on mi300xcpx: taint amd.com/gpu=present:NoSchedule"
    assert any(p.startswith(wrong) for p in result.problems), result.problems
    assert "mi300x" in _coverage(result, "default-metrics-exporter").runs_on


def test_without_the_driver_loaded_by_kmm_the_operands_wait(rendered):
    """On AKS the operands select KMM's module-ready label, which KMM's worker sets where it loads the driver: a
    DeviceConfig whose driver tolerates nothing leaves every operand but the node labeller off the tainted nodes."""
    result = rendered["amd-only"]
    objects = copy.deepcopy(result.charts[0].objects)
    spec = next(o for o in objects if o["kind"] == "DeviceConfig")["spec"]
    spec["driver"]["tolerations"] = []
    again = [charts.RenderedChart(result.charts[0].release, result.charts[0].manifest, objects)]
    _, placed = charts.place(again, result.targets)
    runs = {c.name: c.runs_on for c in placed}
    assert runs["kmm-worker (Module default)"] == () and runs["default-device-plugin"] == ()
    assert set(runs["default-node-labeller"]) == {"mi300x", "mi300xcpx"}  # it does not wait for the driver


def test_bare_metal_with_the_device_plugin_chart_has_no_nfd_and_the_render_says_so():
    """The bare-metal AMD release brings no NFD where an NVIDIA host group is (the GPU Operator's NFD labels them
    all); installing the device plugin chart instead leaves none, and the check shows the AMD host unserved."""
    result = _render(plan(BAREMETAL_MIXED, BAREMETAL_FILE), charts.DEVICE_PLUGIN_CHART)
    assert [c.release.chart for c in result.charts] == [charts.DEVICE_PLUGIN_CHART, AMD]
    assert any(p.startswith("DaemonSet default-device-plugin would not run on mi300x:") for p in result.problems)


# -- the DRA driver ----------------------------------------------------------------------------------------------


def _with_advertiser(stack_plan: StackPlan, advertiser: str, release_advertiser: str) -> StackPlan:
    """``stack_plan`` with its AMD pools of ``advertiser`` and an AMD release built for ``release_advertiser``: the
    plan is changed, not the stack, since the spec's rules refuse the mismatch this builds on purpose."""
    assert stack_plan.cluster is not None
    pools = tuple(dataclasses.replace(p, advertiser=advertiser) if p.vendor == "amd" else p for p in stack_plan.pools)
    software = amd_operator.for_aks(
        [dataclasses.replace(p, advertiser=release_advertiser) for p in pools if p.vendor == "amd"],
        stack_plan.cluster.system_pool_taints,
        driver_version="30.10.1",
        nfd=True,
        nfd_taints=[t for p in pools for t in p.taints],
        driver_image="registry.example.net/amd/amdgpu-driver",
    )
    release = amd_operator.amd_chart_release(stack_plan.release, GpuSoftware(), software)
    return dataclasses.replace(
        stack_plan, pools=pools, cluster=dataclasses.replace(stack_plan.cluster, amd_gpu_software=release)
    )


def test_a_dra_deviceconfig_runs_the_dra_driver_on_the_amd_pools_and_no_device_plugin():
    result = _render(_with_advertiser(plan(AMD_ONLY), "dra", "dra"))
    assert result.problems == []
    names = {c.name for c in result.coverage}
    assert "default-device-plugin" not in names
    assert set(_coverage(result, "default-dra-driver").runs_on) == {"mi300x", "mi300xcpx"}
    (device_class,) = _objects(result, "DeviceClass")
    assert device_class["metadata"]["name"] == "gpu.amd.com"
    assert crd_errors(_device_config_validator(), _device_config(result)) == []


def test_pools_of_the_device_plugin_under_a_dra_deviceconfig_are_reported_unadvertised():
    result = _render(_with_advertiser(plan(AMD_ONLY), "device-plugin", "dra"))
    assert any(
        p.startswith("DaemonSet default-device-plugin would not run on mi300x: the rendered DeviceConfig does not")
        for p in result.problems
    ), result.problems


# -- valid objects, the chart's keys ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_every_rendered_builtin_object_passes_kubernetes_validate_strict(rendered, case):
    result = rendered[case]
    version = charts.kube_version(plan(*CASES[case]).release["kubernetes"]).removeprefix("v")
    crd_kinds = {o["spec"]["names"]["kind"] for o in _objects(result, "CustomResourceDefinition")}
    checked = 0
    amd_chart = next(c for c in result.charts if c.release.chart == AMD)
    generated = [o for g in result.generated if g.name == "amd-dcm" for o in g.objects]
    for obj in [*amd_chart.objects, *generated]:
        if obj["kind"] in CERT_MANAGER_KINDS:
            assert obj["apiVersion"] == "cert-manager.io/v1"
            continue
        if obj["kind"] in crd_kinds:
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 50


def _device_config_validator():
    crd = yaml.safe_load(DEVICE_CONFIG_CRD.read_text())
    (version,) = crd["spec"]["versions"]
    return crd_validator(version["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("case", list(CASES))
def test_every_custom_resource_passes_its_crds_schema(rendered, case):
    result = rendered[case]
    validators = {}
    for crd in _objects(result, "CustomResourceDefinition"):
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            validators[key] = crd_validator(version["schema"]["openAPIV3Schema"])
    checked = []
    for obj in (o for c in result.charts for o in c.objects):
        validator = validators.get((obj.get("apiVersion"), obj.get("kind")))
        if validator is not None:
            assert crd_errors(validator, obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
            checked.append(obj["kind"])
    # the DeviceConfig against the chart's CRD, the AMD NodeFeatureRules against NFD's (whichever chart brings it)
    assert checked.count("DeviceConfig") == 1 and checked.count("NodeFeatureRule") == 2, checked
    assert crd_errors(_device_config_validator(), _device_config(result)) == []


def test_the_crd_check_catches_a_field_the_api_server_would_prune(rendered):
    device_config = copy.deepcopy(_device_config(rendered["mixed"]))
    device_config["spec"]["metricsExporter"]["prot"] = 5000
    assert any("prot" in e for e in crd_errors(_device_config_validator(), device_config))


@pytest.mark.parametrize("case", list(CASES))
def test_the_values_set_only_keys_the_chart_has(rendered, case):
    for c in rendered[case].charts:
        assert unknown_keys(c.release.values, chart_keys(c.release.chart)) == [], c.release.chart


def test_the_key_check_catches_a_key_the_amd_chart_lacks(rendered):
    values = copy.deepcopy(next(c for c in rendered["mixed"].charts if c.release.chart == AMD).release.values)
    values["deviceConfig"]["spec"]["devicePlugin"]["enable"] = True  # the chart's key is enableDevicePlugin
    assert unknown_keys(values, chart_keys(AMD)) == ["deviceConfig.spec.devicePlugin.enable"]


# -- what the DeviceConfig says -----------------------------------------------------------------------------------


def test_the_rendered_deviceconfig_is_gpufleets(rendered):
    result = rendered["mixed"]
    device_config = _device_config(result)
    assert device_config["apiVersion"] == "amd.com/v1alpha1" and device_config["metadata"]["name"] == "default"
    spec = device_config["spec"]
    assert spec["selector"] == {AMD_GPU_OPERATOR_LABEL: "true", AMD_GPU_FEATURE_LABEL: "true"}
    assert spec["driver"]["enable"] is True and spec["driver"]["version"] == "30.10.1"
    assert spec["driver"]["image"] == "registry.example.net/amd/amdgpu-driver"  # the stack's, not the placeholder
    assert spec["driver"]["imageRegistrySecret"] == {"name": "amd-driver-push"}
    assert spec["metricsExporter"]["image"] == "rocm/device-metrics-exporter:v1.5.1"
    assert spec["devicePlugin"]["enableDevicePlugin"] is True
    assert spec["devicePlugin"]["devicePluginArguments"] == {"resource_naming_strategy": "mixed"}
    assert spec["draDriver"]["enable"] is False
    assert (spec["metricsExporter"]["enable"], spec["metricsExporter"]["port"]) == (True, 5000)
    assert spec["configManager"]["enable"] is True
    (dcm,) = next(g for g in result.generated if g.name == "amd-dcm").objects
    assert spec["configManager"]["config"]["name"] == dcm["metadata"]["name"]
    assert dcm["metadata"]["namespace"] == "kube-amd-gpu"
    profiles = json.loads(dcm["data"]["config.json"])["gpu-config-profiles"]
    assert list(profiles) == [result.labels["mi300xcpx"]["dcm.amd.com/gpu-config-profile"]]


def test_bare_metal_keeps_the_hosts_driver_and_runs_no_kmm(rendered):
    result = rendered["baremetal"]
    assert _device_config(result)["spec"]["driver"]["enable"] is False
    assert not _objects(result, "Certificate")  # no KMM, so nothing of cert-manager's
    assert not [c for c in result.coverage if c.name.startswith("kmm")]
    assert [c.release.chart for c in result.charts] == [AMD]  # no NVIDIA host group: no NVIDIA chart


def test_the_amd_chart_alone_needs_no_nvidia_chart_and_kmm_comes_with_cert_manager_objects(rendered):
    result = rendered["amd-only"]
    assert [c.release.chart for c in result.charts] == [AMD]
    assert {o["kind"] for o in _objects(result, "Certificate") + _objects(result, "Issuer")} == CERT_MANAGER_KINDS


# -- gpufleet render ---------------------------------------------------------------------------------------------


def _gpufleet(*args: str):
    return cli("render", *args, env={**os.environ, charts.CHARTS_DIR_ENV: str(CHARTS_DIR)})


def test_render_writes_both_charts_and_the_dcm_configmap(tmp_path: Path):
    name = write(tmp_path, MIXED)
    out = tmp_path / "out"
    proc = _gpufleet(str(tmp_path / f"Pulumi.{name}.yaml"), "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = {p.name for p in out.iterdir()}
    assert {"gpu-operator.yaml", "gpu-operator-charts.yaml", "gpufleet-amd-dcm.yaml", "summary.json"} <= files
    summary = json.loads((out / "summary.json").read_text())
    assert [c["name"] for c in summary["charts"]] == ["gpu-operator", "gpu-operator-charts"]
    plugin = next(d for d in summary["daemonsets"] if d["name"] == "default-device-plugin")
    assert plugin["runs_on"] == ["mi300x", "mi300xcpx"] and plugin["unwanted"] == []
    assert [m["target"] for m in plugin["misses"]] == ["h100"]
    assert "DaemonSet default-device-plugin runs on mi300x, mi300xcpx" in proc.stdout


def test_chart_option_is_refused_for_an_amd_only_aks_cluster(tmp_path: Path):
    name = write(tmp_path, AMD_ONLY)
    proc = _gpufleet(str(tmp_path / f"Pulumi.{name}.yaml"), "--chart", "gpu-operator")
    assert proc.returncode == 2
    assert "no NVIDIA chart: it has no NVIDIA pool" in proc.stderr
