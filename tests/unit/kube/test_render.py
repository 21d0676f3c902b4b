"""The GPU charts rendered by the real helm with the values each stack installs: valid objects (kubernetes-validate,
CRD schemas), only the charts' keys, and the GPU software landing on every GPU pool / host group it must serve."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from gpufleet.kube import charts
from gpufleet.kube.gpu_software import DEVICE_PLUGIN_CHART, DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_CHART, MIG_CONFIGMAP
from gpufleet.mig.outputs import CONFIGMAP_KEY, DISABLED_CONFIG
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from tests.charts import (
    CHARTS_DIR,
    chart_keys,
    closed_schema,
    needs_charts,
    render_stack,
    render_variant,
    unknown_keys,
    unpacked_chart,
)
from tests.conftest import EXAMPLE_STACKS, FIXTURES, REPO, TODAY, cli

pytestmark = needs_charts

ONPREM = FIXTURES / "gpu-software" / "Pulumi.prod-onprem.yaml"
# the bare-metal example: container host groups, and GPU VM host groups (one passes GPUs through, one splits them
# into vGPUs)
VM_HOSTS = REPO / "examples" / "baremetal" / "Pulumi.prod-onprem.yaml"
BAREMETAL = {ONPREM: "prod-onprem", VM_HOSTS: "vm-hosts"}
# the DRA example: every GPU pool has advertiser dra, so the operator runs a GPUCluster
# (tests/unit/kube/test_render_dra.py)
DRA = REPO / "examples" / "dra" / "Pulumi.dev-eastus2.yaml"
# every example stack that installs GPU software, and the bare-metal stacks with each chart kubernetes.yml installs
CASES = [(p, GPU_OPERATOR_CHART) for p in EXAMPLE_STACKS if "lab-local" not in p.name] + [
    (ONPREM, GPU_OPERATOR_CHART),
    (ONPREM, DEVICE_PLUGIN_CHART),
    (VM_HOSTS, GPU_OPERATOR_CHART),
    (DRA, GPU_OPERATOR_CHART),
]
# rendered too, but not a case of the every-stack tests: the device plugin chart cannot serve GPU VM hosts
RENDERS = [*CASES, (VM_HOSTS, DEVICE_PLUGIN_CHART)]


def _case_id(path: Path, chart: str) -> str:  # the AKS stacks by name, the bare-metal stacks by name and chart
    return (
        f"{BAREMETAL[path]}-{chart}" if path in BAREMETAL else path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    )


CASE_IDS = [_case_id(p, chart) for p, chart in CASES]


@pytest.fixture(scope="module")
def rendered(catalog) -> dict[str, tuple[Any, charts.Render]]:
    out = {}
    for path, chart in RENDERS:
        stack = load_stack(path, today=TODAY).stack
        assert stack is not None
        out[_case_id(path, chart)] = (stack, render_stack(stack, catalog, chart))
    return out


def _objects(result: charts.Render, kind: str) -> list[dict[str, Any]]:
    return [o for c in result.charts for o in c.objects if o.get("kind") == kind]


def _coverage(result: charts.Render, name: str) -> charts.Coverage:
    return next(c for c in result.coverage if c.name == name)


def _gpu_targets(result: charts.Render) -> list[str]:
    return [t.name for t in result.targets if t.gpu]


# -- the two defects: the GPU software reached no GPU node --------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod-eastus", "prod-westeurope", "staging-westeurope"])
def test_nfd_worker_and_every_operand_run_on_every_gpu_pool_of_an_operator_stack(rendered, stack):
    _, result = rendered[stack]
    pools = _gpu_targets(result)
    nfd = _coverage(result, "gpu-operator-node-feature-discovery-worker")
    assert set(pools) <= set(nfd.runs_on), nfd.misses
    for operand in ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter"):
        assert set(_coverage(result, operand).runs_on) == set(pools), _coverage(result, operand).misses
    assert result.problems == []


def test_the_standalone_device_plugin_runs_on_every_gpu_pool(rendered):
    _, result = rendered["dev-westeurope"]
    assert [c.release.chart for c in result.charts] == [DEVICE_PLUGIN_CHART]
    plugin = _coverage(result, "nvidia-device-plugin")
    assert plugin.runs_on == ("t4shared", "a100mig", "t4spot"), plugin.misses
    assert result.problems == []


def test_without_nfd_tolerations_the_operator_deploys_nothing(catalog, monkeypatch):
    """The check sees the defect: NFD's worker with the chart's own tolerations misses every tainted GPU pool, and
    then no operand runs anywhere."""
    from gpufleet.kube import gpu_software

    original = gpu_software.operator_values

    def chart_default_nfd(software):
        values = original(software)
        del values["node-feature-discovery"]["worker"]
        return values

    monkeypatch.setattr(gpu_software, "operator_values", chart_default_nfd)
    stack = load_stack(REPO / "Pulumi.prod-westeurope.yaml", today=TODAY).stack
    result = render_stack(stack, catalog)
    assert _coverage(result, "gpu-operator-node-feature-discovery-worker").runs_on == ()
    assert _coverage(result, "nvidia-device-plugin-daemonset").runs_on == ()
    assert any("taint sku=gpu:NoSchedule not tolerated" in p for p in result.problems)


def test_without_the_gpu_present_label_the_device_plugin_matches_no_node(catalog, monkeypatch):
    from gpufleet.plan import build

    original = build.pool_labels
    monkeypatch.setattr(
        build,
        "pool_labels",
        lambda *a, **k: {key: v for key, v in original(*a, **k).items() if key != "nvidia.com/gpu.present"},
    )
    stack = load_stack(REPO / "Pulumi.dev-westeurope.yaml", today=TODAY).stack
    result = render_stack(stack, catalog)
    assert _coverage(result, "nvidia-device-plugin").runs_on == ()
    assert any("required node affinity: no term matches" in p for p in result.problems)


# -- every stack: valid objects, known keys, every GPU target served ----------------------------------------------


@pytest.mark.parametrize("case", CASE_IDS)
def test_every_gpu_daemonset_serves_every_target_it_must_and_controllers_find_a_node(rendered, case):
    _, result = rendered[case]
    assert result.problems == []
    gpu = set(_gpu_targets(result))
    for cov in result.coverage:
        if cov.kind == "Deployment":
            assert cov.runs_on, cov.name
        else:
            assert {m.target for m in cov.misses} | set(cov.runs_on) >= gpu
            assert all(m.intended for m in cov.misses), cov


# The sandbox values reach only the chart's ClusterPolicy template (a custom resource, checked against its CRD below):
# the VM hosts' built-in objects are prod-onprem's, so kubernetes-validate (the slow check) runs once for both.
@pytest.mark.parametrize("case", [c for c in CASE_IDS if c != f"vm-hosts-{GPU_OPERATOR_CHART}"])
def test_every_rendered_builtin_object_passes_kubernetes_validate_strict(rendered, case):
    stack, result = rendered[case]
    version = charts.kube_version(stack.release.kubernetes).removeprefix("v")
    crd_kinds = {o["spec"]["names"]["kind"] for o in _objects(result, "CustomResourceDefinition")}
    checked = 0
    # gpufleet's DRA objects too (claim templates, DeviceClasses; not Kueue's Configuration, a config file's content,
    # nor its queues: custom resources, checked against Kueue's CRDs below), and its monitoring ConfigMap (the
    # Prometheus operator's objects: tests/unit/kube/test_monitoring.py, by their CRDs), and its remediation ConfigMap
    # (the medik8s templates and checks: tests/unit/kube/test_node_remediation.py, by their CRDs)
    generated = [
        o for g in result.generated if g.name not in ("kueue", "queues") for o in g.objects
        if not o["apiVersion"].startswith("monitoring.coreos.com/") and ".medik8s.io/" not in o["apiVersion"]
    ]  # fmt: skip
    for obj in [*(o for c in result.charts for o in c.objects), *generated]:
        if obj["kind"] in crd_kinds:
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 5


def _crd_validators(result: charts.Render) -> dict[tuple[str, str], Draft202012Validator]:
    """The chart's CRDs, and Kueue's (vendored: tests/fixtures/crds/kueue) for gpufleet's queues."""
    out = {}
    kueue = [yaml.safe_load(p.read_text()) for p in sorted((FIXTURES / "crds" / "kueue").glob("*.yaml"))]
    for crd in [*_objects(result, "CustomResourceDefinition"), *kueue]:
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = closed_schema(version["schema"]["openAPIV3Schema"])
            out[(f"{group}/{version['name']}", kind)] = Draft202012Validator(schema)
    return out


@pytest.mark.parametrize("case", CASE_IDS)
def test_every_custom_resource_passes_its_crds_schema(rendered, case):
    _, result = rendered[case]
    validators = _crd_validators(result)
    objects = [*(o for c in result.charts for o in c.objects), *(o for g in result.generated for o in g.objects)]
    customs = [o for o in objects if (o.get("apiVersion"), o.get("kind")) in validators]
    for obj in customs:
        errors = [
            f"{'.'.join(map(str, e.path))}: {e.message}"
            for e in validators[(obj["apiVersion"], obj["kind"])].iter_errors(obj)
        ]
        assert errors == [], f"{obj['kind']} {obj['metadata']['name']}"
    release = result.charts[0].release
    if release.chart == GPU_OPERATOR_CHART:  # the one custom resource the operator reads, as the advertisers chose
        dra = release.values.get("gpuCluster", {}).get("deployCR", False)
        # gpufleet's example ComputeDomains and its Kueue queues are checked too
        kinds = [
            o["kind"] for o in customs if o["kind"] != "ComputeDomain" and not o["apiVersion"].startswith("kueue.")
        ]
        assert kinds == (["GPUCluster"] if dra else ["ClusterPolicy"])


def test_the_crd_check_catches_a_field_the_api_server_would_prune(rendered):
    _, result = rendered["prod-westeurope"]
    policy = copy.deepcopy(_objects(result, "ClusterPolicy")[0])
    policy["spec"]["migManager"]["cofnig"] = {"name": "x"}
    validator = _crd_validators(result)[(policy["apiVersion"], "ClusterPolicy")]
    assert any("cofnig" in e.message for e in validator.iter_errors(policy))


@pytest.mark.parametrize("case", CASE_IDS)
def test_the_values_set_only_keys_the_chart_has(rendered, case):
    _, result = rendered[case]
    for c in result.charts:
        assert unknown_keys(c.release.values, chart_keys(c.release.chart)) == []


# -- what users care about -------------------------------------------------------------------------------------


def _policy(result: charts.Render) -> dict[str, Any]:
    (policy,) = _objects(result, "ClusterPolicy")
    return policy["spec"]


def _configmap(result: charts.Render, name: str) -> dict[str, str]:
    return next(o for o in _objects(result, "ConfigMap") if o["metadata"]["name"] == name)["data"]


def test_the_operators_driver_runs_only_on_pools_that_leave_it_the_driver(catalog):
    def train_on_aks_driver(config):
        config["gpufleet:aks"]["gpu_pools"][1]["driver"] = "aks"

    result = render_variant(REPO / "Pulumi.prod-westeurope.yaml", catalog, train_on_aks_driver)
    assert _policy(result)["driver"]["enabled"] is True
    driver = _coverage(result, "nvidia-driver-daemonset")
    assert driver.runs_on == ("h100mig",)
    assert [(m.target, m.intended) for m in driver.misses] == [("h100train", True)]
    assert _coverage(result, "nvidia-device-plugin-daemonset").runs_on == ("h100mig", "h100train")


def test_host_roles_own_driver_and_toolkit_on_bare_metal(rendered):
    _, result = rendered[f"prod-onprem-{GPU_OPERATOR_CHART}"]
    spec = _policy(result)
    assert spec["driver"]["enabled"] is False and spec["toolkit"]["enabled"] is False
    names = {c.name for c in result.coverage}
    assert "nvidia-driver-daemonset" not in names and "nvidia-container-toolkit-daemonset" not in names


def test_the_mig_manager_gets_the_stacks_layouts_and_the_strategy(rendered, catalog):
    stack, result = rendered["prod-westeurope"]
    plan = plan_stack(stack, catalog)
    spec = _policy(result)
    assert spec["mig"]["strategy"] == plan.cluster.mig_strategy == "mixed"
    assert spec["migManager"]["config"] == {"name": MIG_CONFIGMAP, "default": DISABLED_CONFIG}
    config = YAML(typ="safe").load(_configmap(result, MIG_CONFIGMAP)[CONFIGMAP_KEY])
    assert config["mig-configs"]["h100-inference"] == plan.cluster.mig_parted_config["mig-configs"]["h100-inference"]
    assert config["mig-configs"][DISABLED_CONFIG] == [{"devices": "all", "mig-enabled": False}]
    assert result.labels["h100mig"]["nvidia.com/mig.config"] == "h100-inference"
    assert set(_coverage(result, "nvidia-mig-manager").runs_on) == {"h100mig", "h100train"}


def test_time_slicing_reaches_the_device_plugin_through_its_config_map(rendered):
    _, result = rendered["dev-westeurope"]
    data = _configmap(result, "nvidia-device-plugin-configs")
    config = YAML(typ="safe").load(data["t4shared-time-slicing"])
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert result.labels["t4shared"]["nvidia.com/device-plugin.config"] == "t4shared-time-slicing"
    plugin = next(o for o in _objects(result, "DaemonSet") if o["metadata"]["name"] == "nvidia-device-plugin")
    env = {
        e["name"]: e.get("value") for c in plugin["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])
    }
    assert env.get("CONFIG_FILE") or any("config" in str(v) for v in env.values())


def test_the_operator_gets_the_sharing_configs_by_name(rendered):
    _, result = rendered["prod-westeurope"]
    assert _policy(result)["devicePlugin"]["config"]["name"] == DEVICE_PLUGIN_CONFIGMAP


@pytest.mark.parametrize("monitoring", [False, True])
def test_dcgm_exporter_metrics_and_monitoring_follow_the_stack(catalog, monitoring):
    def monitor(config):
        config["gpufleet:aks"]["gpu_software"] = {"monitoring": monitoring}

    result = render_variant(REPO / "Pulumi.prod-eastus.yaml", catalog, monitor)
    # gpufleet's ServiceMonitor scrapes the exporter (gpufleet-monitoring.yaml), never the operator's as well
    assert _policy(result)["dcgmExporter"]["serviceMonitor"]["enabled"] is False
    assert ("gpufleet-monitoring.yaml" in {g.file for g in result.generated}) is monitoring
    assert ("config" in _policy(result)["dcgmExporter"]) is monitoring
    assert set(_coverage(result, "nvidia-dcgm-exporter").runs_on) == {"nvlmig", "t4spot"}


# -- GPU VM host groups: the GPU Operator's sandbox workloads ------------------------------------------------------

WORKLOAD = "nvidia.com/gpu.workload.config"
VM_CASE = f"vm-hosts-{GPU_OPERATOR_CHART}"
CONTAINER_GROUPS, VM_GROUPS = ("h100", "l40s"), ("h100vm", "l40svgpu")
# the operator's DaemonSets for VMs and the host groups they must run on (h100vm: passthrough, l40svgpu: vGPU)
SANDBOX_OPERANDS = {
    "nvidia-sandbox-device-plugin-daemonset": VM_GROUPS,
    "nvidia-sandbox-validator": VM_GROUPS,
    "nvidia-vfio-manager": ("h100vm",),
    "nvidia-vgpu-manager-daemonset": ("l40svgpu",),
    "nvidia-vgpu-device-manager": ("l40svgpu",),
}
# the ones without which a VM host serves no VM (the validator only reports)
NEEDED = {name: groups for name, groups in SANDBOX_OPERANDS.items() if name != "nvidia-sandbox-validator"}
CONTAINER_OPERANDS = (
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
    "nvidia-operator-validator",
)


def test_the_rendered_cluster_policy_turns_on_sandbox_workloads_and_the_stacks_vgpu_manager(rendered):
    stack, result = rendered[VM_CASE]
    vgpu = stack.baremetal.host_group("l40svgpu").virtualization.vgpu
    spec = _policy(result)  # as helm rendered it: what the operator reads
    assert spec["sandboxWorkloads"] == {"enabled": True, "defaultWorkload": "container", "mode": "kubevirt"}
    assert spec["vfioManager"]["enabled"] and spec["sandboxDevicePlugin"]["enabled"]
    assert spec["vgpuDeviceManager"]["enabled"]
    manager = spec["vgpuManager"]
    assert manager["enabled"] and manager["repository"] == vgpu.manager_repository == "registry.example.net/nvidia"
    assert (manager["image"], manager["version"], manager["imagePullSecrets"]) == (
        "vgpu-manager",
        "580.95.02",
        ["vgpu-registry"],
    )
    assert "sandboxWorkloads" not in rendered[f"prod-onprem-{GPU_OPERATOR_CHART}"][1].charts[0].release.values


def test_sandbox_operands_run_on_the_vm_host_groups_of_their_workload_and_nowhere_else(rendered):
    _, result = rendered[VM_CASE]
    assert result.problems == []
    for name, groups in SANDBOX_OPERANDS.items():
        cov = _coverage(result, name)
        assert cov.runs_on == groups, cov
        assert {m.target for m in cov.misses} == set(CONTAINER_GROUPS + VM_GROUPS) - set(groups)
        assert all(m.intended for m in cov.misses) and cov.unwanted == ()
    assert result.labels["h100vm"][WORKLOAD] == "vm-passthrough"
    assert result.labels["h100vm"]["nvidia.com/gpu.deploy.vfio-manager"] == "true"
    assert result.labels["l40svgpu"]["nvidia.com/vgpu.config"] == "L40S-12Q"
    summary = {d["name"]: d for d in result.to_dict()["daemonsets"]}  # gpufleet render --json
    assert summary["nvidia-vfio-manager"]["runs_on"] == ["h100vm"] and summary["nvidia-vfio-manager"]["unwanted"] == []


def test_container_operands_stay_off_the_vm_host_groups(rendered):
    _, result = rendered[VM_CASE]
    for name in CONTAINER_OPERANDS:
        cov = _coverage(result, name)
        assert cov.runs_on == CONTAINER_GROUPS, cov
        assert [(m.target, m.intended) for m in cov.misses] == [(g, True) for g in VM_GROUPS]
        assert "passed through to VMs (vm-passthrough)" in cov.misses[0].why
    for group in VM_GROUPS:
        assert "nvidia.com/gpu.deploy.device-plugin" not in result.labels[group]
        assert "nvidia.com/gpu.deploy.driver" not in result.labels[group]
    # the operator finds the VM hosts' GPUs through NFD, as everywhere
    assert _coverage(result, "gpu-operator-node-feature-discovery-worker").runs_on == CONTAINER_GROUPS + VM_GROUPS


def test_the_device_plugin_chart_stays_off_the_vm_hosts_and_says_it_cannot_serve_them(rendered):
    _, result = rendered[f"vm-hosts-{DEVICE_PLUGIN_CHART}"]
    plugin = _coverage(result, "nvidia-device-plugin")
    assert plugin.runs_on == CONTAINER_GROUPS and all(m.intended for m in plugin.misses)
    missing = {c.name: tuple(m.target for m in c.misses) for c in result.coverage if c.name in NEEDED}
    assert missing == NEEDED
    assert len(result.problems) == sum(map(len, NEEDED.values()))
    assert all("GPU VM host groups need the gpu-operator chart" in p for p in result.problems)


def _problems(result: charts.Render, targets=None, objects=None) -> list[str]:
    """The problems of ``result``'s render placed again (no helm) on other targets, or with other objects."""
    again = [charts.RenderedChart(c.release, c.manifest, objects or c.objects) for c in result.charts]
    _, placed = charts.place(again, targets or result.targets)
    return [p for c in placed for p in c.problems]


def test_without_the_workload_label_the_check_sees_container_operands_on_the_vm_hosts(rendered):
    _, result = rendered[VM_CASE]
    unlabelled = [
        dataclasses.replace(
            t, node=dataclasses.replace(t.node, labels={k: v for k, v in t.node.labels.items() if k != WORKLOAD})
        )
        for t in result.targets
    ]
    problems = _problems(result, targets=unlabelled)
    assert any(p.startswith("DaemonSet nvidia-vfio-manager would not run on h100vm:") for p in problems), problems
    wrong = "DaemonSet nvidia-device-plugin-daemonset would run on h100vm, which it is not for: its GPUs are passed"
    assert any(p.startswith(wrong) for p in problems), problems


def test_without_sandbox_workloads_in_the_policy_the_check_sees_the_vm_hosts_unserved(rendered):
    _, result = rendered[VM_CASE]
    objects = copy.deepcopy(result.charts[0].objects)
    next(o for o in objects if o["kind"] == "ClusterPolicy")["spec"]["sandboxWorkloads"]["enabled"] = False
    problems = _problems(result, objects=objects)
    assert (
        "DaemonSet nvidia-vfio-manager would not run on h100vm: the ClusterPolicy does not deploy it (it needs"
        " sandboxWorkloads.enabled and vfioManager.enabled)"
    ) in problems
    wrong = "DaemonSet nvidia-device-plugin-daemonset would run on l40svgpu, which it is not for"
    assert any(p.startswith(wrong) for p in problems), problems


# -- gpufleet render: the command ------------------------------------------------------------------------------


def gpufleet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``gpufleet render ARGS`` with the pinned charts (and ``env`` over this environment)."""
    return cli("render", *args, env={**os.environ, charts.CHARTS_DIR_ENV: str(CHARTS_DIR), **(env or {})})


def test_render_writes_the_manifests_nodes_and_where_each_daemonset_runs(tmp_path):
    out = tmp_path / "out"
    proc = gpufleet("prod-westeurope", "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu-operator.yaml",
        "gpufleet-kueue.yaml",
        "gpufleet-monitoring.yaml",
        "gpufleet-remediation.yaml",
        "nodes.yaml",
        "summary.json",
    ]
    assert "DaemonSet gpu-operator-node-feature-discovery-worker runs on h100mig, h100train" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stack"] == "prod-westeurope"
    assert summary["charts"][0]["name"] == "gpu-operator" and summary["charts"][0]["objects"]["ClusterPolicy"] == 1
    nfd = next(d for d in summary["daemonsets"] if d["name"].endswith("node-feature-discovery-worker"))
    assert nfd["runs_on"] == ["h100mig", "h100train"] and nfd["misses"] == []
    nodes = YAML(typ="safe").load((out / "nodes.yaml").read_text())["nodes"]
    assert {n["target"]: n["taints"] for n in nodes}["h100mig"] == ["sku=gpu:NoSchedule"]
    manifest = (out / "gpu-operator.yaml").read_text()
    assert len(charts.parse_objects(manifest)) == sum(summary["charts"][0]["objects"].values())


def test_a_render_into_a_folder_replaces_the_earlier_render_and_two_at_once_leave_one(tmp_path):
    """A render into a folder holding another stack's render leaves exactly its own files there (the earlier one's
    that it does not write are removed; a file of the user's is kept); two renders of different stacks into one
    folder at once both finish and leave one render's files, never a mix (docs/render.md)."""
    out = tmp_path / "out"
    assert gpufleet("prod-westeurope", "-o", str(out)).returncode == 0
    (out / "README.md").write_text("the team's notes\n")
    assert gpufleet(str(DRA), "-o", str(out)).returncode == 0
    summary = json.loads((out / "summary.json").read_text())
    own = {c["file"] for c in summary["charts"]} | {g["file"] for g in summary["generated"]}
    assert {p.name for p in out.iterdir()} == own | {"nodes.yaml", "summary.json", "README.md"}
    env = {**os.environ, charts.CHARTS_DIR_ENV: str(CHARTS_DIR)}
    both = tmp_path / "both"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "gpufleet", "render", stack, "-o", str(both), "--root", str(REPO)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for stack in ("prod-westeurope", str(DRA))
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0], [p.stderr.read() for p in procs if p.stderr]
    summary = json.loads((both / "summary.json").read_text())
    own = {c["file"] for c in summary["charts"]} | {g["file"] for g in summary["generated"]}
    assert {p.name for p in both.iterdir()} == own | {"nodes.yaml", "summary.json"}
    assert YAML(typ="safe").load((both / "nodes.yaml").read_text())["nodes"] == summary["nodes"]


def test_render_json_is_the_documented_shape():
    proc = gpufleet("dev-westeurope", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) >= {"stack", "charts", "daemonsets"}
    assert set(data["charts"][0]) == {"name", "version", "file", "objects"}
    assert all(set(d) >= {"chart", "name", "runs_on", "misses"} for d in data["daemonsets"])


def test_a_pinned_chart_version_the_charts_directory_lacks_is_one_line_exit_1_and_nothing_written(tmp_path):
    """The stack is valid (its pins are in the release table), but the charts directory holds another version."""
    stack = tmp_path / "Pulumi.dev-westeurope.yaml"
    stack.write_text((REPO / "Pulumi.dev-westeurope.yaml").read_text())
    other = tmp_path / "charts"
    other.mkdir()
    (other / "nvidia-device-plugin-0.19.0.tgz").write_bytes(b"")
    out = tmp_path / "out"
    proc = gpufleet(str(stack), "-o", str(out), env={charts.CHARTS_DIR_ENV: str(other)})
    assert proc.returncode == 1
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "stack dev-westeurope" in line and "nvidia-device-plugin 0.20.0" in line and "helm pull" in line
    assert "(it has nvidia-device-plugin-0.19.0.tgz)" in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == sorted([stack.name, "charts"])


def test_a_missing_charts_directory_is_one_line_exit_1(tmp_path):
    proc = gpufleet("prod-eastus", "-o", str(tmp_path / "out"), env={charts.CHARTS_DIR_ENV: str(tmp_path / "none")})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "chart gpu-operator v26.7.0 is not in" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_helm_failing_is_one_line_exit_1_and_nothing_written(tmp_path):
    broken = tmp_path / "charts"
    (unpacked_chart("gpu-operator", broken) / "templates/broken.yaml").write_text("{{ .Values.nope.deeper }}\n")
    out = tmp_path / "out"
    proc = gpufleet("prod-eastus", "-o", str(out), env={charts.CHARTS_DIR_ENV: str(broken)})
    assert proc.returncode == 1
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "stack prod-eastus: helm template gpu-operator v26.7.0 failed:" in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["charts"]


def test_a_render_into_a_missing_parent_directory_is_refused(tmp_path):
    proc = gpufleet("dev-westeurope", "-o", str(tmp_path / "no" / "out"))
    assert proc.returncode == 1 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_a_stack_without_gpus_renders_nothing_and_says_so():
    proc = gpufleet("lab-local")
    assert proc.returncode == 0 and "installs no GPU software" in proc.stdout


def test_make_setup_installed_the_pinned_helm():
    version = subprocess.run(
        [charts.helm_binary(), "version", "--template", "{{ .Version }}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert version == "v4.1.4"


def test_mps_sharing_on_the_device_plugin_chart_brings_gfd_so_the_mps_control_daemon_runs(catalog):
    """The chart's MPS control daemon needs GFD's nvidia.com/mps.capable label; GFD and its NFD are off by default."""

    def mps(config):
        config["gpufleet:aks"]["gpu_pools"][0]["sharing"] = {"mode": "mps", "replicas": 4}

    result = render_variant(REPO / "Pulumi.dev-westeurope.yaml", catalog, mps)
    (chart,) = result.charts
    assert chart.release.values["gfd"] == {"enabled": True}
    assert unknown_keys(chart.release.values, chart_keys(DEVICE_PLUGIN_CHART)) == []
    for obj in chart.objects:
        if obj["kind"] != "NodeFeatureRule":
            kubernetes_validate.validate(obj, "1.33.0", strict=True)
    assert _coverage(result, "nvidia-device-plugin-mps-control-daemon").runs_on == ("t4shared",)
    assert _coverage(result, "nvidia-device-plugin-node-feature-discovery-worker").runs_on == (
        "t4shared",
        "a100mig",
        "t4spot",
    )
    assert result.labels["t4shared"]["nvidia.com/mps.capable"] == "true"
    assert result.problems == []


def test_chart_is_for_bare_metal_stacks_and_must_be_known():
    aks = gpufleet("dev-westeurope", "--chart", "gpu-operator")
    assert aks.returncode == 2 and "--chart is for bare-metal stacks" in aks.stderr
    unknown = gpufleet("dev-westeurope", "--chart", "[red]x")
    assert unknown.returncode == 2 and "--chart '[red]x'" in unknown.stderr
    onprem = gpufleet(str(ONPREM), "--chart", "nvidia-device-plugin", "--json")
    assert onprem.returncode == 0 and json.loads(onprem.stdout)["charts"][0]["name"] == "nvidia-device-plugin"
