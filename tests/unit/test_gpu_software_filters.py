"""The gpu_operator / device_plugin roles' filters give exactly gpufleet.gpu_software's output for a stack, and the
roles' helm arguments carry the stack's pinned chart versions (ansible-playbook on localhost: no cluster, no helm)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

import gpufleet.plan.hosts as plan_module
import gpufleet.spec.load as spec_load
from gpufleet.gpu_software import (
    DEFAULT_DEVICE_PLUGIN_CONFIG,
    device_plugin_configs,
    device_plugin_values,
    for_baremetal,
    operator_values,
)
from gpufleet.mig.outputs import CONFIGMAP_KEY, DISABLED_CONFIG
from gpufleet.plan import plan_stack
from gpufleet.spec import load_stack
from tests.ansible_playbook import ansible_playbook
from tests.charts import chart_keys, needs_charts, unknown_keys
from tests.conftest import EXAMPLE_STACKS, FIXTURES, REPO, TODAY

spec = importlib.util.spec_from_file_location(
    "gpufleet_gpu_software_filters", REPO / "ansible/plugins/filter/gpufleet_gpu_software.py"
)
filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filters)

ONPREM = FIXTURES / "gpu-software/Pulumi.prod-onprem.yaml"
STACKS = [*EXAMPLE_STACKS, ONPREM]
MIG = "nvidia.com/mig.config"
DP = "nvidia.com/device-plugin.config"
PRESENT = "nvidia.com/gpu.present"


class _PinnedDate(dt.date):
    @classmethod
    def today(cls) -> dt.date:
        return TODAY


@pytest.fixture(autouse=True)
def pinned_date(monkeypatch: pytest.MonkeyPatch):
    """Validation depends on the date (VM size retirements): the filters see the tests' date."""

    class _dt:
        date = _PinnedDate

    monkeypatch.setattr(spec_load, "_dt", _dt)
    plan_module._plan_spec_json.cache_clear()
    yield
    plan_module._plan_spec_json.cache_clear()


def spec_of(path: Path) -> dict[str, Any]:
    """The stack as the gpufleet_stack lookup hands it to a play."""
    loaded = load_stack(path, today=TODAY)
    assert loaded.ok, loaded.diagnostics
    return json.loads(json.dumps(loaded.stack.model_dump(mode="json")))


def direct_plan(path: Path, catalog):
    return plan_stack(load_stack(path, today=TODAY).stack, catalog)


def _load(text: str) -> Any:
    return YAML(typ="safe").load(text)


# -- Helm values: the filters are gpu_software -------------------------------------------------------------------


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.stem)
def test_values_filters_return_exactly_gpu_softwares_values(path: Path, catalog):
    plan = direct_plan(path, catalog)
    if plan.baremetal is None:
        for values_filter in (filters.gpufleet_gpu_operator_values, filters.gpufleet_device_plugin_values):
            with pytest.raises(Exception, match=f"stack {plan.stack} has no bare-metal hosts"):
                values_filter(spec_of(path))
        return
    assert filters.gpufleet_gpu_operator_values(spec_of(path)) == operator_values(
        for_baremetal(plan.host_groups, plan.baremetal.mig_parted_config)
    )
    assert filters.gpufleet_device_plugin_values(spec_of(path)) == device_plugin_values(
        for_baremetal(plan.host_groups, plan.baremetal.mig_parted_config)
    )


@needs_charts
def test_the_gpu_stack_fixture_gives_the_mig_manager_every_layout_and_only_chart_keys(catalog):
    values = filters.gpufleet_gpu_operator_values(spec_of(ONPREM))
    configs = _load(values["migManager"]["config"]["data"][CONFIGMAP_KEY])["mig-configs"]
    assert set(configs) == {"h100-half-3g", "h100-7x1g", DISABLED_CONFIG}
    assert values["mig"] == {"strategy": "mixed"}
    assert unknown_keys(values, chart_keys("gpu-operator")) == []
    plugin = filters.gpufleet_device_plugin_values(spec_of(ONPREM))
    assert plugin["config"]["map"] == device_plugin_configs(_bm(direct_plan(ONPREM, catalog)))
    assert _load(plugin["config"]["map"][DEFAULT_DEVICE_PLUGIN_CONFIG])["flags"] == {"migStrategy": "mixed"}
    assert unknown_keys(plugin, chart_keys("nvidia-device-plugin")) == []


@pytest.mark.parametrize(("driver", "toolkit"), [(True, True), (True, False), (False, True), (False, False)])
def test_driver_and_toolkit_flags_decide_the_operators_daemonsets(driver: bool, toolkit: bool):
    values = filters.gpufleet_gpu_operator_values(spec_of(ONPREM), driver, toolkit)
    assert values["driver"] == {"enabled": not driver}
    assert values["toolkit"] == {"enabled": not toolkit}


def test_preinstalled_by_the_host_roles_is_the_default():
    values = filters.gpufleet_gpu_operator_values(spec_of(ONPREM))
    assert values["driver"] == {"enabled": False} and values["toolkit"] == {"enabled": False}


def test_a_flag_that_is_not_a_boolean_is_refused():
    with pytest.raises(Exception, match="driver_preinstalled must be true or false, not 'no'"):
        filters.gpufleet_gpu_operator_values(spec_of(ONPREM), "no")


def test_an_invalid_stack_spec_fails_with_the_key_and_the_reason():
    broken = spec_of(ONPREM)
    broken["release"]["gpu_operator"] = "latest"
    with pytest.raises(Exception, match=r"invalid stack:\n.*release\.gpu_operator") as err:
        filters.gpufleet_gpu_operator_values(broken)
    assert "v26.7.0" in str(err.value)  # the example of a valid pin


# -- chart versions ----------------------------------------------------------------------------------------------


def test_chart_versions_are_the_stacks_pins_as_each_repository_writes_them():
    onprem = spec_of(ONPREM)
    assert filters.gpufleet_helm_chart_version(onprem, "gpu-operator") == onprem["release"]["gpu_operator"]
    assert onprem["release"]["device_plugin"] == "v0.20.0"
    assert filters.gpufleet_helm_chart_version(onprem, "nvidia-device-plugin") == "0.20.0"
    onprem["release"] |= {"gpu_operator": "26.3.1", "device_plugin": "0.17.4"}
    assert filters.gpufleet_helm_chart_version(onprem, "gpu-operator") == "v26.3.1"
    assert filters.gpufleet_helm_chart_version(onprem, "nvidia-device-plugin") == "0.17.4"
    with pytest.raises(Exception, match="unknown chart 'gpu_operator'; one of gpu-operator, nvidia-device-plugin"):
        filters.gpufleet_helm_chart_version(onprem, "gpu_operator")


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
    onprem = spec_of(ONPREM)
    assert filters.gpufleet_gpu_node_labels(onprem, [group]) == operator
    assert filters.gpufleet_gpu_node_labels(onprem, group, "gpu-operator") == operator
    assert filters.gpufleet_gpu_node_labels(onprem, [group], "nvidia-device-plugin") == plugin


def test_mig_config_labels_name_the_mig_parted_configs_the_mig_manager_gets():
    onprem = spec_of(ONPREM)
    data = filters.gpufleet_gpu_operator_values(onprem)["migManager"]["config"]["data"][CONFIGMAP_KEY]
    named = set(_load(data)["mig-configs"])
    for group in ("hgx_mig", "hgx_small", "hgx_whole"):
        assert filters.gpufleet_gpu_node_labels(onprem, [group])[MIG] in named


def test_a_host_in_several_host_groups_takes_the_first_in_the_stacks_order():
    onprem = spec_of(ONPREM)
    labels = filters.gpufleet_gpu_node_labels(onprem, ["hgx_whole", "all_gpus", "hgx_small"])
    assert labels[MIG] == "h100-7x1g"  # hgx_small comes before hgx_whole in the stack


def test_a_label_patch_removes_the_owned_labels_that_do_not_apply():
    onprem = spec_of(ONPREM)
    assert filters.gpufleet_gpu_node_labels(onprem, ["cpu"], patch=True) == {MIG: None, DP: None}
    assert filters.gpufleet_gpu_node_labels(onprem, ["hgx_mig"], "nvidia-device-plugin", True) == {
        PRESENT: "true",
        DP: "default",
    }


def test_a_group_name_that_does_not_exist_is_named_with_the_stacks_groups():
    onprem = spec_of(ONPREM)
    with pytest.raises(Exception, match="host group 'hgx_big' is not in stack prod-onprem; its host groups are: "):
        filters.gpufleet_gpu_node_labels(onprem, "hgx_big")
    with pytest.raises(Exception) as err:
        filters.gpufleet_gpu_node_labels(onprem, ["ungrouped", "hgx"])
    assert str(err.value).startswith(
        "the host is in none of stack prod-onprem's host groups (hgx_mig, hgx_small, hgx_whole, cpu); "
        "its inventory groups: ungrouped, hgx"
    )


def test_node_labels_need_bare_metal_hosts():
    with pytest.raises(Exception, match="stack prod-westeurope has no bare-metal hosts"):
        filters.gpufleet_gpu_node_labels(spec_of(REPO / "Pulumi.prod-westeurope.yaml"), ["hgx_mig"])


def test_the_lab_stacks_hosts_have_no_gpu_and_get_no_labels():
    lab = spec_of(REPO / "Pulumi.lab-local.yaml")
    assert filters.gpufleet_gpu_node_labels(lab, ["lab"]) == {}


# -- files for people and GitOps tools ---------------------------------------------------------------------------


def test_values_yaml_reads_back_as_the_values_with_configs_as_literal_blocks():
    values = filters.gpufleet_gpu_operator_values(spec_of(ONPREM))
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
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Put localhost in one of the stack's host groups (the roles refuse a host in none)
      ansible.builtin.group_by:
        key: hgx_whole
    - name: gpu_operator
      ansible.builtin.include_role:
        name: gpu_operator
        tasks_from: helm_args
      vars:
        gpu_operator_stack: "{{ stack }}"
    - name: Keep gpu_operator's arguments
      ansible.builtin.set_fact:
        operator_helm: "{{ __gpu_chart_helm }}"
    - name: device_plugin
      ansible.builtin.include_role:
        name: device_plugin
        tasks_from: helm_args
      vars:
        device_plugin_stack: "{{ stack }}"
    - name: Hand the facts to the test
      ansible.builtin.copy:
        content: "{{ {'gpu_operator': operator_helm, 'device_plugin': __gpu_chart_helm} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def ansible(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return ansible_playbook(*args)


def helm_args(tmp_path: Path, stack: dict[str, Any]) -> dict[str, Any]:
    play, out, extra = tmp_path / "play.yml", tmp_path / "helm.json", tmp_path / "vars.json"
    play.write_text(HELM_ARGS_PLAY)
    extra.write_text(json.dumps({"stack": stack, "out": str(out)}))
    proc = ansible(tmp_path, "-e", f"@{extra}", str(play))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_helm_arguments_carry_the_stacks_pinned_chart_versions(tmp_path: Path):
    onprem = spec_of(ONPREM)
    args = helm_args(tmp_path, onprem)
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
    # promotion changes the pins: the helm arguments follow
    onprem["release"] |= {"gpu_operator": "v26.3.1", "device_plugin": "v0.18.2"}
    moved = helm_args(tmp_path, onprem)
    assert (moved["gpu_operator"]["chart_version"], moved["device_plugin"]["chart_version"]) == ("v26.3.1", "0.18.2")


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


def _bm(plan):
    return for_baremetal(plan.host_groups, plan.baremetal.mig_parted_config)
