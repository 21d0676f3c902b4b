"""The plan as the roles get it (gpufleet.plan.hosts, through the gpufleet_plan lookup): a host's view holds exactly
gpufleet.kube.gpu_software's values, the stack's pinned chart versions and the host group's node labels; the roles' helm
arguments carry those versions (ansible-playbook on localhost: no cluster, no helm)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

import gpufleet.spec.load as spec_load
from gpufleet.kube.gpu_software import (
    DEFAULT_DEVICE_PLUGIN_CONFIG,
    device_plugin_configs,
    device_plugin_values,
    for_baremetal,
    operator_values,
)
from gpufleet.mig.outputs import CONFIGMAP_KEY, DISABLED_CONFIG
from gpufleet.plan import hosts
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from tests.ansible_playbook import ansible_playbook, playbook_on_hosts
from tests.charts import chart_keys, needs_charts, unknown_keys
from tests.conftest import EXAMPLE_STACKS, FIXTURES, REPO, TODAY

spec = importlib.util.spec_from_file_location(
    "gpufleet_gpu_software_filters", REPO / "ansible/plugins/filter/gpufleet_gpu_software.py"
)
filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filters)

ONPREM = FIXTURES / "gpu-software/Pulumi.prod-onprem.yaml"
VM_EXAMPLE = REPO / "examples/baremetal/Pulumi.prod-onprem.yaml"  # container and GPU VM host groups
STACKS = [*EXAMPLE_STACKS, ONPREM, VM_EXAMPLE]
MIG = "nvidia.com/mig.config"
DP = "nvidia.com/device-plugin.config"
PRESENT = "nvidia.com/gpu.present"
WORKLOAD = "nvidia.com/gpu.workload.config"
VGPU_CONFIG = "nvidia.com/vgpu.config"
OPERATOR, PLUGIN = "gpu-operator", "nvidia-device-plugin"


class _PinnedDate(dt.date):
    @classmethod
    def today(cls) -> dt.date:
        return TODAY


@pytest.fixture(autouse=True)
def pinned_date(monkeypatch: pytest.MonkeyPatch):
    """Validation depends on the date (VM size retirements): the plans see the tests' date."""

    class _dt:
        date = _PinnedDate

    monkeypatch.setattr(spec_load, "_dt", _dt)
    hosts.clear_cache()
    yield
    hosts.clear_cache()


def view(path: Path, groups: list[str], **flags: bool) -> dict[str, Any]:
    """A host's view, as the gpufleet_plan lookup hands it to a play (through JSON, as Ansible holds it)."""
    return json.loads(json.dumps(hosts.host_view(hosts.plan_file(path), groups, **flags)))


def chart(path: Path, groups: list[str], name: str = OPERATOR, **flags: bool) -> dict[str, Any]:
    return view(path, groups, **flags)["charts"][name]


def edited(tmp_path: Path, path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text
    out = tmp_path / path.name
    out.write_text(text.replace(old, new))
    return out


def direct_plan(path: Path, catalog):
    return plan_stack(load_stack(path, today=TODAY).stack, catalog)


def _bm(plan, **flags: bool):
    return for_baremetal(plan.host_groups, plan.baremetal.mig_parted_config, **flags)


def _load(text: str) -> Any:
    return YAML(typ="safe").load(text)


# -- Helm values: the view's are gpu_software's ------------------------------------------------------------------


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.stem)
def test_the_views_values_are_exactly_gpu_softwares(path: Path, catalog):
    plan = direct_plan(path, catalog)
    if plan.baremetal is None:
        with pytest.raises(ValueError, match=f"stack {plan.stack} has no bare-metal hosts"):
            view(path, [])
        return
    assert chart(path, [])["values"] == operator_values(_bm(plan))
    assert chart(path, [], PLUGIN)["values"] == device_plugin_values(_bm(plan))


@needs_charts
def test_the_gpu_stack_fixture_gives_the_mig_manager_every_layout_and_only_chart_keys(catalog):
    values = chart(ONPREM, [])["values"]
    configs = _load(values["migManager"]["config"]["data"][CONFIGMAP_KEY])["mig-configs"]
    assert set(configs) == {"h100-half-3g", "h100-7x1g", DISABLED_CONFIG}
    assert values["mig"] == {"strategy": "mixed"}
    assert unknown_keys(values, chart_keys("gpu-operator")) == []
    plugin = chart(ONPREM, [], PLUGIN)["values"]
    assert plugin["config"]["map"] == device_plugin_configs(_bm(direct_plan(ONPREM, catalog)))
    assert _load(plugin["config"]["map"][DEFAULT_DEVICE_PLUGIN_CONFIG])["flags"] == {"migStrategy": "mixed"}
    assert unknown_keys(plugin, chart_keys("nvidia-device-plugin")) == []


@pytest.mark.parametrize(("driver", "toolkit"), [(True, True), (True, False), (False, True), (False, False)])
def test_driver_and_toolkit_flags_decide_the_operators_daemonsets(driver: bool, toolkit: bool):
    values = chart(ONPREM, ["hgx_mig"], driver_preinstalled=driver, toolkit_preinstalled=toolkit)["values"]
    assert values["driver"] == {"enabled": not driver}
    assert values["toolkit"] == {"enabled": not toolkit}


def test_preinstalled_by_the_host_roles_is_the_default():
    values = chart(ONPREM, ["hgx_mig"])["values"]
    assert values["driver"] == {"enabled": False} and values["toolkit"] == {"enabled": False}


def test_an_invalid_stack_file_fails_with_the_file_the_key_and_the_reason(tmp_path: Path):
    broken = edited(tmp_path, ONPREM, "gpu_operator: v26.7.0", "gpu_operator: latest")
    with pytest.raises(
        hosts.InvalidStackFile, match=r"invalid stack:\n.*Pulumi.prod-onprem.yaml:\d+: .*release\.gpu_operator"
    ) as err:
        hosts.plan_file(broken)
    assert "v26.7.0" in str(err.value)  # the example of a valid pin


def test_a_stack_file_is_planned_once_per_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls = []
    original = hosts.plan_stack
    monkeypatch.setattr(hosts, "plan_stack", lambda *a: calls.append(1) or original(*a))
    path = edited(tmp_path, ONPREM, "gpu_operator: v26.7.0", "gpu_operator: v26.7.0")
    first = hosts.plan_file(path)
    assert hosts.plan_file(path) is first and len(calls) == 1
    path.write_text(path.read_text().replace('driver_branch: "595"', 'driver_branch: "580"'))
    assert hosts.plan_file(path).release["driver_branch"] == "580" and len(calls) == 2  # edited: planned again


# -- chart versions ----------------------------------------------------------------------------------------------


def test_chart_versions_are_the_stacks_pins_as_each_repository_writes_them(tmp_path: Path):
    onprem = view(ONPREM, [])
    assert onprem["charts"][OPERATOR]["version"] == onprem["release"]["gpu_operator"]
    assert onprem["release"]["device_plugin"] == "v0.20.0"
    assert onprem["charts"][PLUGIN]["version"] == "0.20.0"
    moved = edited(tmp_path, ONPREM, "gpu_operator: v26.7.0", "gpu_operator: 26.7.0")  # the same releases, pinned
    moved.write_text(moved.read_text().replace("device_plugin: v0.20.0", "device_plugin: 0.20.0"))  # the other way
    assert chart(moved, [])["version"] == "v26.7.0"
    assert chart(moved, [], PLUGIN)["version"] == "0.20.0"


# -- node labels -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "operator", "plugin"),
    [
        ("hgx_mig", {MIG: "h100-half-3g", DP: "default"}, {PRESENT: "true", DP: "default"}),
        ("hgx_small", {MIG: "h100-7x1g", DP: "default"}, {PRESENT: "true", DP: "default"}),
        ("hgx_whole", {MIG: DISABLED_CONFIG, DP: "default"}, {PRESENT: "true", DP: "default"}),
        ("cpu", {}, {}),
    ],
)
def test_node_labels_follow_the_hosts_group(group: str, operator: dict, plugin: dict):
    assert chart(ONPREM, [group])["node_labels"] == operator
    assert chart(ONPREM, ["all", group])["node_labels"] == operator
    assert chart(ONPREM, [group], PLUGIN)["node_labels"] == plugin


def test_mig_config_labels_name_the_mig_parted_configs_the_mig_manager_gets():
    data = chart(ONPREM, [])["values"]["migManager"]["config"]["data"][CONFIGMAP_KEY]
    named = set(_load(data)["mig-configs"])
    for group in ("hgx_mig", "hgx_small", "hgx_whole"):
        assert chart(ONPREM, [group])["node_labels"][MIG] in named


def test_a_host_in_several_host_groups_takes_the_first_in_the_stacks_order():
    host = view(ONPREM, ["hgx_whole", "all_gpus", "hgx_small"])
    assert host["host_group"] == "hgx_small"  # hgx_small comes before hgx_whole in the stack
    assert host["charts"][OPERATOR]["node_labels"][MIG] == host["mig_layout"] == "h100-7x1g"


def test_a_label_patch_removes_the_owned_labels_that_do_not_apply():
    assert chart(ONPREM, ["cpu"])["label_patch"] == {MIG: None, DP: None, WORKLOAD: None, VGPU_CONFIG: None}
    assert chart(ONPREM, ["hgx_mig"], PLUGIN)["label_patch"] == {PRESENT: "true", DP: "default"}


@pytest.mark.parametrize(
    ("group", "labels"),
    [
        ("h100vm", {WORKLOAD: "vm-passthrough"}),
        ("l40svgpu", {WORKLOAD: "vm-vgpu", VGPU_CONFIG: "L40S-12Q"}),
        ("h100", {MIG: DISABLED_CONFIG, DP: "default"}),
    ],
)
def test_vm_host_groups_carry_the_operators_workload_label_and_none_of_the_container_labels(group: str, labels: dict):
    operator = chart(VM_EXAMPLE, [group])
    assert operator["node_labels"] == labels
    assert operator["label_patch"] == {MIG: None, DP: None, WORKLOAD: None, VGPU_CONFIG: None} | labels
    # the standalone device plugin serves containers: without nvidia.com/gpu.present it stays off VM hosts
    assert chart(VM_EXAMPLE, [group], PLUGIN)["node_labels"] == (
        {} if WORKLOAD in labels else {PRESENT: "true", DP: "default"}
    )


def test_the_vm_hosts_release_turns_sandbox_workloads_on_with_the_stacks_vgpu_manager():
    values = chart(VM_EXAMPLE, ["h100"])["values"]
    assert values["sandboxWorkloads"] == {"enabled": True, "defaultWorkload": "container", "mode": "kubevirt"}
    assert values["vfioManager"] == values["sandboxDevicePlugin"] == values["vgpuDeviceManager"] == {"enabled": True}
    assert values["vgpuManager"] == {
        "enabled": True,
        "repository": "registry.example.net/nvidia",
        "image": "vgpu-manager",
        "version": "580.95.02",
        "imagePullSecrets": ["vgpu-registry"],
    }
    assert "sandboxWorkloads" not in chart(ONPREM, ["hgx_mig"])["values"]  # no VM host group: values unchanged


def test_a_host_in_none_of_the_stacks_groups_gets_no_labels_and_the_groups_to_name():
    host = chart(ONPREM, ["ungrouped", "hgx"])
    assert host["node_labels"] is None and host["label_patch"] is None
    assert host["host_groups"] == ["hgx_mig", "hgx_small", "hgx_whole", "cpu"]


def test_node_labels_need_bare_metal_hosts():
    with pytest.raises(ValueError, match="stack prod-westeurope has no bare-metal hosts"):
        view(REPO / "Pulumi.prod-westeurope.yaml", ["hgx_mig"])


def test_the_lab_stacks_hosts_have_no_gpu_and_get_no_labels():
    assert chart(REPO / "Pulumi.lab-local.yaml", ["lab"])["node_labels"] == {}


# -- the rest of a host's view -------------------------------------------------------------------------------------


def test_host_profile_is_the_profile_of_the_hosts_group(tmp_path: Path):
    stack = load_stack(REPO / "Pulumi.lab-local.yaml").stack.model_dump(mode="json")
    stack["tuning_profiles"]["train"] = {"cores_per_gpu": 6}
    stack["baremetal"]["host_groups"].insert(0, {"name": "dgx", "tuning_profile": "train"})
    path = tmp_path / "Pulumi.lab-local.yaml"
    path.write_text(json.dumps({"config": {f"gpufleet:{k}": v for k, v in stack.items() if v is not None}}))
    assert view(path, ["all", "dgx"])["tuning"]["cores_per_gpu"] == {"min": 6, "max": 6}
    assert view(path, ["lab", "dgx"])["tuning"]["cores_per_gpu"] == {"min": 6, "max": 6}  # the first in the stack
    assert view(path, ["lab"])["tuning"]["reserved_cores"] == 2
    assert view(path, ["other"])["tuning"]["cores_per_gpu"] == {"min": 4, "max": 16}  # the default profile
    stack["baremetal"]["host_groups"][0]["tuning_profile"] = "missing"
    path.write_text(json.dumps({"config": {f"gpufleet:{k}": v for k, v in stack.items() if v is not None}}))
    with pytest.raises(hosts.InvalidStackFile, match=r"(?s)invalid stack:.*unknown tuning profile 'missing'"):
        hosts.plan_file(path)


def test_the_mig_layout_and_config_of_a_host(catalog):
    assert view(ONPREM, ["hgx_mig"])["mig_layout"] == "h100-half-3g"
    assert view(ONPREM, ["all", "hgx_small"])["mig_layout"] == "h100-7x1g"
    assert view(ONPREM, ["hgx_whole"])["mig_layout"] == ""
    assert view(ONPREM, ["hgx_small", "hgx_mig"])["mig_layout"] == "h100-half-3g"  # the first in the stack's order
    stack = hosts.stack_view(hosts.plan_file(ONPREM))
    assert stack["mig_host_groups"] == ["hgx_mig", "hgx_small"]
    assert stack["mig_parted_config"] == direct_plan(ONPREM, catalog).baremetal.mig_parted_config
    assert set(stack["mig_parted_config"]["mig-configs"]) == {"all-disabled", "h100-half-3g", "h100-7x1g"}
    lab = hosts.stack_view(hosts.plan_file(REPO / "Pulumi.lab-local.yaml"))
    assert lab["mig_host_groups"] == []
    assert lab["mig_parted_config"] == {
        "version": "v1",
        "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": False}]},
    }


# -- files for people and GitOps tools ---------------------------------------------------------------------------


def test_values_yaml_reads_back_as_the_values_with_configs_as_literal_blocks():
    values = chart(ONPREM, [])["values"]
    text = filters.gpufleet_helm_values_yaml(values)
    assert _load(text) == values
    assert f"      {CONFIGMAP_KEY}: |\n        version: v1\n" in text
    assert list(_load(text)) == list(values)  # gpu_software's order, not sorted


def test_node_manifest_lists_only_the_labels_set_and_is_never_pruned():
    manifest = filters.gpufleet_node_labels_manifest({MIG: "h100-7x1g", DP: None}, "gpu-07")
    assert manifest["kind"] == "Node" and manifest["metadata"]["name"] == "gpu-07"
    assert manifest["metadata"]["labels"] == {MIG: "h100-7x1g"}
    assert manifest["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == "Prune=false,ServerSideApply=true"
    assert manifest["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/prune"] == "disabled"


# -- the roles' helm arguments (ansible-playbook on localhost) ---------------------------------------------------

HELM_ARGS_PLAY = """
- name: Build each role's helm arguments
  hosts: all
  gather_facts: false
  tasks:
    - name: Put the host in one of the stack's host groups (the roles refuse a host in none)
      ansible.builtin.group_by:
        key: hgx_whole
    - name: The host's plan, through the lookup
      ansible.builtin.set_fact:
        plan: "{{ lookup('gpufleet_plan', stack, group_names=group_names) }}"
    - name: gpu_operator
      ansible.builtin.include_role:
        name: gpu_operator
        tasks_from: helm_args
      vars:
        gpu_operator_release: "{{ plan.charts['gpu-operator'] }}"
    - name: Keep gpu_operator's arguments
      ansible.builtin.set_fact:
        operator_helm: "{{ __gpu_chart_helm }}"
    - name: device_plugin
      ansible.builtin.include_role:
        name: device_plugin
        tasks_from: helm_args
      vars:
        device_plugin_release: "{{ plan.charts['nvidia-device-plugin'] }}"
    - name: Hand the facts to the test
      ansible.builtin.copy:
        content: "{{ {'gpu_operator': operator_helm, 'device_plugin': __gpu_chart_helm} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def ansible(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return ansible_playbook(*args)


def helm_args(tmp_path: Path, stacks: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """{host: the roles' helm arguments} of one run, each host with its own stack."""
    hosts = {host: {"stack": str(stack), "out": str(tmp_path / f"{host}.json")} for host, stack in stacks.items()}
    proc = playbook_on_hosts(tmp_path, HELM_ARGS_PLAY, hosts)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return {host: json.loads((tmp_path / f"{host}.json").read_text()) for host in stacks}


def test_helm_arguments_carry_the_stacks_pinned_chart_versions(tmp_path: Path):
    # the helm arguments follow each host's stack pins, as each chart repository writes the version (a second host
    # with the same releases pinned the other way: the release table knows one GPU Operator release)
    promoted = edited(tmp_path, ONPREM, "gpu_operator: v26.7.0", "gpu_operator: 26.7.0")
    promoted.write_text(promoted.read_text().replace("device_plugin: v0.20.0", "device_plugin: 0.20.0"))
    both = helm_args(tmp_path, {"pinned": ONPREM, "promoted": promoted})
    args, moved = both["pinned"], both["promoted"]
    assert args["gpu_operator"] == {
        "name": "gpu-operator",
        "chart_ref": "gpu-operator",
        "chart_repo_url": "https://helm.ngc.nvidia.com/nvidia",
        "chart_version": "v26.7.0",
        "release_namespace": "gpu-operator",
        "values_files": ["/etc/gpufleet/helm/gpu-operator.values.yaml"],
    }
    assert args["device_plugin"] == {
        "name": "nvidia-device-plugin",
        "chart_ref": "nvidia-device-plugin",
        "chart_repo_url": "https://nvidia.github.io/k8s-device-plugin",
        "chart_version": "0.20.0",
        "release_namespace": "nvidia-device-plugin",
        "values_files": ["/etc/gpufleet/helm/nvidia-device-plugin.values.yaml"],
    }
    assert (moved["gpu_operator"]["chart_version"], moved["device_plugin"]["chart_version"]) == ("v26.7.0", "0.20.0")


def test_the_helm_task_takes_every_argument_from_the_built_fact():
    tasks = YAML(typ="safe").load((REPO / "roles/gpu_chart/tasks/helm.yml").read_text())
    (helm,) = [t["kubernetes.core.helm"] for t in tasks if "kubernetes.core.helm" in t]
    for key in ("name", "chart_ref", "chart_repo_url", "chart_version", "release_namespace"):
        assert helm[key] == f"{{{{ __gpu_chart_helm.{key} }}}}", key
    assert "__gpu_chart_helm.values_files" in helm["values_files"]
    assert helm["create_namespace"] is True and helm["wait"] is True


def test_both_roles_in_helm_mode_pass_ansibles_syntax_check(tmp_path: Path):
    play = tmp_path / "site.yml"
    play.write_text(
        "- name: GPU software\n  hosts: all\n  gather_facts: false\n  roles:\n"
        "    - role: gpu_operator\n      vars: {gpu_operator_mode: helm}\n"
        "    - role: device_plugin\n      vars: {device_plugin_mode: helm}\n"
    )
    proc = ansible(tmp_path, "--syntax-check", str(play))
    assert proc.returncode == 0, proc.stdout + proc.stderr


STRAY_PLAY = """
- name: A host in none of the stack's host groups
  hosts: localhost
  gather_facts: false
  tasks:
    - name: gpu_operator
      ansible.builtin.include_role:
        name: gpu_operator
      vars:
        gpu_operator_release: "{{ lookup('gpufleet_plan', stack, group_names=group_names).charts['gpu-operator'] }}"
        gpu_operator_mode: values
        gpu_operator_values_dir: "{{ out }}"
"""


def test_the_role_stops_on_a_host_in_none_of_the_stacks_groups_and_names_them(tmp_path: Path):
    play = tmp_path / "play.yml"
    play.write_text(STRAY_PLAY)
    proc = ansible(tmp_path, "-e", f"stack={ONPREM}", "-e", f"out={tmp_path / 'helm'}", str(play))
    assert proc.returncode == 2
    assert (
        "localhost is in none of stack prod-onprem's host groups (hgx_mig, hgx_small, hgx_whole, cpu);"
        " its inventory groups: " in proc.stdout
    ), proc.stdout[-3000:]
    assert not (tmp_path / "helm").exists()  # stopped before any file was written
