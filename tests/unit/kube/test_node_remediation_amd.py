"""Health remediation of AMD Instinct nodes in a cluster (gpufleet/kube/node_remediation.py, docs/remediation.md):
node-problem-detector's custom plugin monitor that runs AMD's amdgpuhealth helper is one NPD v1.36.0 accepts, its
rules call the helper with flags the helper has, and its conditions are the actions of gpufleet's AMD fault policy
(gpufleet/catalog/amd_faults.yaml); each AMD pool's or host group's NodeHealthCheck watches the AMD conditions of
node-level actions and no NVIDIA Xid's, and an NVIDIA pool beside it keeps its Xid conditions."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpufleet.catalog.amd import load_amd_faults
from gpufleet.fleet.remediation import Policy
from gpufleet.kube import charts
from gpufleet.kube.node_remediation import (
    AMD_CONDITIONS,
    AMD_MONITOR_CONFIGMAP,
    AMD_MONITOR_FILE,
    AMDGPUHEALTH,
    CONDITIONS,
    MONITOR_CONFIGMAP,
    NodeRemediationPlan,
    amd_monitor_config,
    amd_rule_reason,
    node_remediation_plan,
)
from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import StackPlan
from tests.charts import CHARTS_DIR, crd_errors, crd_validator, needs_charts, stack_variant
from tests.conftest import FIXTURES, REPO

AMD_AKS = REPO / "examples" / "aks" / "Pulumi.dev-eastus.yaml"  # mi300x, mi300xcpx (both 0-2 nodes), h100 (0-4)
AMD_ONPREM = REPO / "examples" / "baremetal" / "Pulumi.dev-onprem.yaml"  # host group mi300x: 2 BMC-managed hosts
CRDS = FIXTURES / "crds" / "medik8s"

# amdgpuhealth's flags at ROCm/device-metrics-exporter v1.5.1 (tools/amd-gpu-health/cli/cmd/querymetric.go, init:
# cobra flags of each `query` subcommand; --severity's allowed values from its usage text). The Kubernetes-only
# TLS/token flags are left out: gpufleet passes none.
HELPER_FLAGS: dict[str, dict[str, Any]] = {
    "counter-metric": {"--metric": str, "--threshold": int, "--address": str},
    "gauge-metric": {"--metric": str, "--threshold": float, "--address": str, "--duration": str},
    "inband-ras-errors": {
        "--severity": (
            "CPER_SEVERITY_FATAL",
            "CPER_SEVERITY_NON_FATAL_UNCORRECTED",
            "CPER_SEVERITY_NON_FATAL_CORRECTED",
        ),
        "--threshold": int,
        "--afid": int,
        "--address": str,
    },
}
# NPD v1.36.0's custom plugin monitor config (pkg/custompluginmonitor/types/config.go and types.go: the JSON names
# of CustomPluginConfig, pluginGlobalConfig, CustomRule; pkg/types Condition)
NPD_CONFIG_FIELDS = {"plugin", "pluginConfig", "source", "conditions", "rules", "metricsReporting"}
NPD_PLUGIN_FIELDS = {"invoke_interval", "timeout", "max_output_length", "concurrency",
                     "enable_message_change_based_condition_update", "skip_initial_status"}  # fmt: skip
NPD_RULE_FIELDS = {"type", "condition", "reason", "path", "args", "timeout", "invoke_interval"}
GO_DURATION = re.compile(r"([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+")


@functools.cache
def _validators() -> dict[tuple[str, str], Any]:
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        (version,) = crd["spec"]["versions"]
        out[f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"]] = crd_validator(
            version["schema"]["openAPIV3Schema"]
        )
    return out


def _plan(path: Path, catalog: Any, edit: Any) -> StackPlan:
    return plan_stack(stack_variant(path, edit), catalog)


def _remediated(config: Any, **policy: Any) -> None:
    """AKS: remediation on, with every pool allowed two nodes at least (a pool of one node is never remediated)."""
    config["gpufleet:aks"]["remediation"] = {"max_hosts_at_once": 1, **policy}
    for pool in config["gpufleet:aks"]["gpu_pools"]:
        pool.pop("scale_to_zero", None)
        pool["autoscaling"] = {"min": 2, "max": 4}
        pool["count"] = 2


def _remediation(plan: StackPlan) -> NodeRemediationPlan:
    found = node_remediation_plan(plan)
    assert found is not None
    return found


def _of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _helper_errors(args: list[str]) -> list[str]:
    """What amdgpuhealth v1.5.1 would refuse in ``args`` (``query <subcommand> --flag=value ...``)."""
    if args[:1] != ["query"] or len(args) < 2 or args[1] not in HELPER_FLAGS:
        return [f"not a query subcommand: {args[:2]}"]
    flags = HELPER_FLAGS[args[1]]
    errors = []
    for arg in args[2:]:
        name, eq, value = arg.partition("=")
        kind = flags.get(name)
        if kind is None or not eq:
            errors.append(f"{arg}: not a --flag=value of {args[1]}")
        elif isinstance(kind, tuple):
            errors += [] if value in kind else [f"{arg}: not one of {kind}"]
        else:
            try:
                kind(value)
            except ValueError:
                errors.append(f"{arg}: not a {kind.__name__}")
    return errors


def npd_custom(config: dict[str, Any], exits: dict[str, int]) -> dict[str, str]:
    """What NPD's custom plugin monitor makes of one run of its rules, each exiting with ``exits[reason]`` (0 when
    absent): condition -> reason of the permanent rule that set it True (exit 1: NonOK); 0 (OK) leaves the default
    False, 2 (Unknown) is no problem either (pkg/custompluginmonitor/types/types.go Status; plugin/plugin.go)."""
    return {
        r["condition"]: r["reason"] for r in config["rules"] if r["type"] == "permanent" and exits.get(r["reason"]) == 1
    }


# -- the custom plugin monitor, as NPD and amdgpuhealth read it -------------------------------------------------------


def test_the_amd_monitor_is_a_custom_plugin_config_npd_accepts():
    """NPD v1.36.0's ApplyConfiguration and Validate (pkg/custompluginmonitor/types/config.go): plugin "custom",
    durations Go parses, no rule timeout above the global one, a default condition for every permanent rule's."""
    config = amd_monitor_config(Policy())
    assert set(config) <= NPD_CONFIG_FIELDS and config["plugin"] == "custom"
    assert set(config["pluginConfig"]) <= NPD_PLUGIN_FIELDS
    assert GO_DURATION.fullmatch(config["pluginConfig"]["timeout"]) and GO_DURATION.fullmatch(
        config["pluginConfig"]["invoke_interval"]
    )
    seconds = {"10s": 10, "15s": 15, "30s": 30}
    for rule in config["rules"]:
        assert set(rule) <= NPD_RULE_FIELDS
        assert rule["type"] in ("permanent", "temporary")
        assert GO_DURATION.fullmatch(rule["timeout"])
        assert seconds[rule["timeout"]] <= seconds[config["pluginConfig"]["timeout"]]
        assert rule["path"] == AMDGPUHEALTH
    for condition in config["conditions"]:
        assert set(condition) == {"type", "reason", "message"}
    assert {r["condition"] for r in config["rules"] if r["type"] == "permanent"} == {
        c["type"] for c in config["conditions"]
    }


def test_every_rule_calls_amdgpuhealth_with_flags_it_has():
    config = amd_monitor_config(Policy())
    assert config["rules"]
    for rule in config["rules"]:
        assert _helper_errors(rule["args"]) == [], rule["args"]


def test_the_flag_check_refuses_the_docs_short_afid_flag():
    """The check above can fail: AMD's docs show `-a <AFID>`, which v1.5.1's helper does not have."""
    assert _helper_errors(["query", "inband-ras-errors", "-a=30", "--severity=CPER_SEVERITY_FATAL"]) != []


def test_a_fatal_ras_event_asks_for_a_reboot_and_uncorrectable_ecc_for_a_person():
    config = amd_monitor_config(Policy())
    assert npd_custom(config, {"AMDAfidFatal": 1}) == {"AMDGPUNeedsReboot": "AMDAfidFatal"}
    assert npd_custom(config, {"AMDRasUe": 1}) == {"AMDGPUNeedsService": "AMDRasUe"}  # Xid 48's action: cordon
    assert npd_custom(config, {"AMDAfidFatal": 2, "AMDRasUe": 0}) == {}  # the helper could not tell: no problem
    fatal = next(r for r in config["rules"] if r["reason"] == "AMDAfidFatal")
    assert fatal["args"] == ["query", "inband-ras-errors", "--severity=CPER_SEVERITY_FATAL", "--threshold=0"]


def test_the_stacks_xid_48_override_moves_uncorrectable_ecc_along():
    config = amd_monitor_config(Policy(overrides={48: "reboot"}))
    assert npd_custom(config, {"AMDRasUe": 1}) == {"AMDGPUNeedsReboot": "AMDRasUe"}
    assert [c["type"] for c in config["conditions"]] == ["AMDGPUNeedsReboot"]


def test_signals_that_need_nothing_or_that_the_cluster_cannot_see_get_no_rule():
    reasons = {r["reason"] for r in amd_monitor_config(Policy())["rules"]}
    signals = {s.signal: s for s in load_amd_faults().signals}
    assert reasons == {amd_rule_reason(name) for name, s in signals.items() if s.probe and Policy().amd_action(name)
                       != "none"}  # fmt: skip
    assert amd_rule_reason("afid_non_fatal_corrected") not in reasons  # action none
    assert amd_rule_reason("bad_page_failed") not in reasons  # read on the host only (no exporter metric)


# -- the cluster's objects ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def aks(catalog) -> NodeRemediationPlan:
    return _remediation(_plan(AMD_AKS, catalog, _remediated))


def test_a_mixed_cluster_gets_both_monitors_and_valid_objects(aks):
    objects = aks.objects()
    configmaps = {o["metadata"]["name"]: o for o in _of(objects, "ConfigMap")}
    assert set(configmaps) == {MONITOR_CONFIGMAP, AMD_MONITOR_CONFIGMAP}
    config = yaml.safe_load(configmaps[AMD_MONITOR_CONFIGMAP]["data"][AMD_MONITOR_FILE])
    assert config == amd_monitor_config(aks.policy)
    for obj in objects:
        if obj["apiVersion"] == "v1":
            kubernetes_validate.validate(obj, "1.36.0", strict=True)
        else:
            assert crd_errors(_validators()[obj["apiVersion"], obj["kind"]], obj) == [], obj["metadata"]["name"]


def test_each_check_watches_its_vendors_conditions_of_node_level_actions(aks):
    checks = {c["metadata"]["name"]: c["spec"] for c in _of(aks.objects(), "NodeHealthCheck")}
    watched = {name: {u["type"] for u in spec["unhealthyConditions"]} for name, spec in checks.items()}
    assert watched["gpufleet-mi300x"] == watched["gpufleet-mi300xcpx"] == {AMD_CONDITIONS["reboot"]}
    assert watched["gpufleet-h100"] <= set(CONDITIONS.values()) and watched["gpufleet-h100"]
    assert not watched["gpufleet-h100"] & set(AMD_CONDITIONS.values())
    assert AMD_CONDITIONS["cordon"] not in watched["gpufleet-mi300x"]  # a person's, not NHC's
    assert checks["gpufleet-mi300x"]["selector"] == {"matchLabels": {"gpufleet.io/pool": "mi300x"}}
    assert checks["gpufleet-mi300x"]["remediationTemplate"]["kind"] == "SelfNodeRemediationTemplate"  # no BMC on AKS


def test_an_amd_only_bare_metal_cluster_gets_the_amd_monitor_alone_and_reboots(catalog):
    def node_healthcheck(config: Any) -> None:
        config["gpufleet:baremetal"]["remediation"] = {"engine": "node-healthcheck"}

    remediation = _remediation(_plan(AMD_ONPREM, catalog, node_healthcheck))
    objects = remediation.objects()
    assert [o["metadata"]["name"] for o in _of(objects, "ConfigMap")] == [AMD_MONITOR_CONFIGMAP]
    (check,) = _of(objects, "NodeHealthCheck")
    assert check["spec"]["selector"]["matchExpressions"][0]["values"] == ["mi-a01", "mi-a02"]
    assert [u["type"] for u in check["spec"]["unhealthyConditions"]] == [AMD_CONDITIONS["reboot"]]
    # the strongest action AMD's signals call for is a reboot: Self Node Remediation, no power cycle through the BMC
    assert check["spec"]["remediationTemplate"]["kind"] == "SelfNodeRemediationTemplate"
    assert check["spec"]["maxUnhealthy"] == 1


@needs_charts
def test_the_amd_operators_own_remediation_stays_off_beside_node_healthcheck(catalog):
    """One engine acts on a node: the DeviceConfig gpufleet renders leaves the operator's remediation workflow off."""
    plan = _plan(AMD_AKS, catalog, _remediated)
    (device_config,) = [
        o for c in charts.render(plan, directory=CHARTS_DIR).charts for o in c.objects if o["kind"] == "DeviceConfig"
    ]
    assert device_config["spec"].get("remediationWorkflow", {}).get("enable") is not True
    assert _of(_remediation(plan).objects(), "NodeHealthCheck")
