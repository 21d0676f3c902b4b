"""Health remediation in a Kubernetes cluster (gpufleet/kube/node_remediation.py, docs/remediation.md): what
``gpufleet render`` writes for node-problem-detector (NPD) and Node Healthcheck (NHC) passes their schemas, and
does what the stack's policy says once those tools act on it:

- NPD's rules, matched the way NPD matches them (a rule is a regular expression that must match the end of the
  buffered kernel log lines, joined by newlines: pkg/systemlogmonitor/log_buffer.go at v1.36.0), turn the NVIDIA
  driver's Xid lines into the condition of each Xid's action, and nothing else;
- each NodeHealthCheck selects its own pool's or host group's nodes and no other's, watches exactly the conditions
  of node-level actions, and its ``maxUnhealthy`` (NHC: "Remediation is allowed if no more than MaxUnhealthy nodes
  selected ... are not healthy") lets at most ``max_hosts_at_once`` nodes go and never the last healthy one;
- the Fence Agents Remediation template's parameters, passed as Fence Agents Remediation passes them
  (``--name=value``, ``--name`` for an empty value, ``--action=reboot`` by default: v0.7.0's
  fenceagentsremediation_params.go), make Debian's real fence_redfish power-cycle the host's system through a
  Redfish BMC (sushy-emulator over HTTPS).
"""

from __future__ import annotations

import functools
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import requests
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.fleet.remediation import RECOVERING, Policy, xid_catalog
from gpufleet.kube import charts
from gpufleet.kube.node_remediation import (
    CONDITIONS,
    MONITOR_FILE,
    NodeRemediationPlan,
    kubernetes_policy,
    monitor_config,
    node_remediation_plan,
)
from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import StackPlan
from gpufleet.spec.load import load_stack
from tests.charts import CHARTS_DIR, crd_errors, crd_validator, needs_charts, stack_variant
from tests.conftest import FIXTURES, REPO, TODAY
from tests.sushy import USER, free_port, htpasswd, running
from tests.tls import self_signed

CRDS = FIXTURES / "crds" / "medik8s"
STACKS = sorted(REPO.glob("Pulumi.*.yaml")) + sorted((REPO / "examples").glob("*/Pulumi.*.yaml"))
PROD = REPO / "Pulumi.prod-westeurope.yaml"
ONPREM = REPO / "examples" / "baremetal" / "Pulumi.prod-onprem.yaml"
FENCE_REDFISH = Path(sys.executable).parent / "fence_redfish"  # scripts/install_fence_agents.sh

# The driver's lines as the kernel logs them (NVIDIA's Xid documentation's form); NPD's kmsg reader hands a rule the
# message after the record's prefix.
LINES = {
    79: "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    48: "NVRM: Xid (PCI:0000:86:00): 48, pid=2107, name=python3, An uncorrectable double bit error (DBE) has been"
    " detected on GPU in the framebuffer at partition 5, subpartition 0.",
    13: "NVRM: Xid (PCI:0000:3b:00): 13, pid=881, name=train, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0):"
    " Out Of Range Address",
    94: "NVRM: Xid (PCI:0000:ca:00.0): 94, pid=12345, name=python, Ch 00000008",
}
# NPD's own kernel log lines, around which the Xids arrive
OTHER_LINES = ["EXT4-fs (sda1): mounted filesystem", "nvidia-nvlink: Nvlink Core is being initialized"]


@functools.cache
def _validators() -> dict[str, Any]:
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        (version,) = crd["spec"]["versions"]
        out[f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"]] = crd_validator(
            version["schema"]["openAPIV3Schema"]
        )
    return out


def _plan(path: Path, catalog: Any) -> StackPlan:
    loaded = load_stack(path, today=TODAY)
    assert loaded.stack is not None, [str(d) for d in loaded.diagnostics]
    return plan_stack(loaded.stack, catalog)


def _remediation(plan: StackPlan) -> NodeRemediationPlan:
    found = node_remediation_plan(plan)
    assert found is not None
    return found


def _of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


# -- NPD, as NPD matches -----------------------------------------------------------------------------------------


def npd(config: dict[str, Any], lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """What NPD's log monitor does with ``config`` for ``lines`` in turn: (condition -> reason of the rule that set
    it True, for those set; the reasons of the temporary rules that fired, as events)."""
    conditions: dict[str, str] = {}
    events: list[str] = []
    buffer: list[str] = []
    for line in lines:
        buffer = [*buffer, line][-config["bufferSize"] :]
        joined = "\n".join(buffer)
        for rule in config["rules"]:
            if re.search(rule["pattern"] + r"\Z", joined) is None:  # Go's `\z` is Python's `\Z`
                continue
            if rule["type"] == "permanent":
                conditions[rule["condition"]] = rule["reason"]
            else:
                events.append(rule["reason"])
    return conditions, events


def test_a_fallen_off_the_bus_line_sets_the_power_cycle_condition_and_nothing_else():
    config = monitor_config(Policy())
    assert npd(config, [*OTHER_LINES, LINES[79], *OTHER_LINES]) == ({"GPUXidNeedsPowerCycle": "Xid79"}, [])


def test_an_application_xid_is_an_event_only_and_a_double_bit_error_waits_for_a_person():
    config = monitor_config(Policy())
    assert npd(config, [LINES[13], LINES[94]]) == ({}, ["Xid13", "Xid94"])
    assert npd(config, [LINES[48]]) == ({"GPUXidNeedsService": "Xid48"}, [])


def test_the_stacks_override_moves_an_xid_to_another_condition():
    config = monitor_config(Policy(overrides={79: "reboot", 13: "gpu-reset"}))
    assert npd(config, [LINES[79], LINES[13]]) == ({"GPUXidNeedsReboot": "Xid79", "GPUXidNeedsReset": "Xid13"}, [])


@given(
    code=st.sampled_from(sorted(xid_catalog())),
    bus=st.integers(0, 255),
    function=st.one_of(st.none(), st.integers(0, 7)),
    tail=st.sampled_from(["", ", pid=1, name=x, Ch 00000001", ", GPU has fallen off the bus."]),
)
def test_each_catalog_xid_fires_its_own_rule_only(code, bus, function, tail):
    pci = f"0000:{bus:02x}:00" + (f".{function}" if function is not None else "")
    config = monitor_config(Policy())
    conditions, events = npd(config, [f"NVRM: Xid (PCI:{pci}): {code}{tail}"])
    action = Policy().action(code)
    if action == "none":
        assert (conditions, events) == ({}, [f"Xid{code}"])
    else:
        assert (conditions, events) == ({CONDITIONS[action]: f"Xid{code}"}, [])


def test_the_rules_are_re2_syntax_and_name_only_npd_fields():
    """NPD reads its config into Go structs (v1.36.0: systemlogmonitor/config.go MonitorConfig with the log watcher's
    fields, types.Condition, systemlogmonitor/types Rule) and compiles patterns with Go's regexp: no look-around or
    back-references, which RE2 lacks."""
    config = monitor_config(Policy())
    assert set(config) <= {"plugin", "pluginConfig", "skipList", "logPath", "lookback", "delay", "bufferSize",
                           "source", "conditions", "rules", "metricsReporting"}  # fmt: skip
    for condition in config["conditions"]:
        assert set(condition) == {"type", "reason", "message"}
    for rule in config["rules"]:
        assert set(rule) <= {"type", "condition", "reason", "pattern", "patternGeneratedMessageSuffix"}
        assert rule["type"] in ("temporary", "permanent")
        assert not re.search(r"\(\?[=!<]|\\[1-9]", rule["pattern"]), rule["pattern"]
    permanent = {r["condition"] for r in config["rules"] if r["type"] == "permanent"}
    assert permanent == {c["type"] for c in config["conditions"]}  # every condition has its default


# -- the objects, against the schemas -----------------------------------------------------------------------------


@needs_charts
@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.stem.removeprefix("Pulumi."))
def test_every_example_stacks_remediation_file_passes_the_crds_and_kubernetes_validate(path, catalog):
    plan = _plan(path, catalog)
    generated = {g.name: g for g in charts.render(plan, directory=CHARTS_DIR).generated}
    if kubernetes_policy(plan) is None:
        assert "remediation" not in generated
        return
    objects = generated["remediation"].objects
    templates = set()
    for obj in objects:
        if obj["apiVersion"] == "v1":
            kubernetes_validate.validate(obj, plan.release["kubernetes"] + ".0", strict=True)
            continue
        assert crd_errors(_validators()[obj["apiVersion"], obj["kind"]], obj) == [], obj["metadata"]["name"]
        if obj["kind"].endswith("Template"):
            meta = obj["metadata"]
            templates.add((obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]))
    for check in _of(objects, "NodeHealthCheck"):
        ref = check["spec"]["remediationTemplate"]
        assert (ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"]) in templates


# -- what NHC does with them ---------------------------------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels and In/NotIn/Exists/DoesNotExist expressions, all must hold)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        has, value = e["key"] in labels, labels.get(e["key"])
        ok = {"In": has and value in e.get("values", []), "NotIn": value not in e.get("values", []),
              "Exists": has, "DoesNotExist": not has}[e["operator"]]  # fmt: skip
        if not ok:
            return False
    return True


def _remediates(check: dict[str, Any], unhealthy: int, selected: int) -> bool:
    """Whether NHC remediates when ``unhealthy`` of its ``selected`` nodes match its conditions (v0.12.0
    nodehealthcheck_controller.go: getMinHealthy turns maxUnhealthy into minHealthy = selected - maxUnhealthy, and a
    remediation is skipped while fewer nodes than that are healthy)."""
    assert check["spec"]["maxUnhealthy"] <= selected  # else NHC refuses the check ("greater than the number of ...")
    return selected - unhealthy >= selected - check["spec"]["maxUnhealthy"]


@needs_charts
def test_each_pools_check_selects_that_pools_nodes_only_and_reboots(catalog):
    plan = _plan(PROD, catalog)
    rendered = charts.render(plan, directory=CHARTS_DIR)
    checks = _of(_remediation(plan).objects(), "NodeHealthCheck")
    selected = {c["metadata"]["name"]: [n["target"] for n in rendered.nodes() if _selects(c["spec"]["selector"],
                n["labels"])] for c in checks}  # fmt: skip
    assert selected == {"gpufleet-h100mig": ["h100mig"], "gpufleet-h100train": ["h100train"]}
    assert {c["spec"]["remediationTemplate"]["kind"] for c in checks} == {"SelfNodeRemediationTemplate"}


@needs_charts
def test_the_checks_watch_the_node_level_conditions_npd_sets_and_not_the_one_for_a_person(catalog):
    plan = _plan(PROD, catalog)
    remediation = _remediation(plan)
    config = yaml.safe_load(_of(remediation.objects(), "ConfigMap")[0]["data"][MONITOR_FILE])
    permanent = [r for r in config["rules"] if r["type"] == "permanent"]
    node_level = {r["condition"] for r in permanent if remediation.policy.action(int(r["reason"][3:])) in RECOVERING}
    for check in _of(remediation.objects(), "NodeHealthCheck"):
        watched = {c["type"] for c in check["spec"]["unhealthyConditions"]}
        assert watched == node_level == {"GPUXidNeedsReset", "GPUXidNeedsPowerCycle"}
        assert all(c["status"] == "True" for c in check["spec"]["unhealthyConditions"])
        assert CONDITIONS["cordon"] not in watched


def test_a_pool_lets_one_node_go_at_a_time_and_never_its_last_healthy_one(catalog):
    checks = {c["metadata"]["name"]: c for c in _of(_remediation(_plan(PROD, catalog)).objects(), "NodeHealthCheck")}
    h100mig = checks["gpufleet-h100mig"]  # autoscaled 2 to 6 nodes
    assert [_remediates(h100mig, n, 2) for n in (1, 2)] == [True, False]  # at its fewest: never the last healthy
    assert [_remediates(h100mig, n, 6) for n in (1, 2)] == [True, False]  # at its most: one at a time


def _onprem(catalog: Any, edit: Any = None) -> StackPlan:
    return plan_stack(stack_variant(ONPREM, edit or (lambda config: None)), catalog)


def test_a_bare_metal_group_is_power_cycled_through_its_bmcs_and_a_group_of_one_never(catalog):
    remediation = _remediation(_onprem(catalog))
    checks = _of(remediation.objects(), "NodeHealthCheck")
    assert [c["metadata"]["name"] for c in checks] == ["gpufleet-h100"]
    nodes = [{"kubernetes.io/hostname": h} for h in ("gpu-a01", "gpu-a02", "gpu-b01")]
    assert [n["kubernetes.io/hostname"] for n in nodes if _selects(checks[0]["spec"]["selector"], n)] == [
        "gpu-a01",
        "gpu-a02",
    ]
    assert [_remediates(checks[0], n, 2) for n in (1, 2)] == [True, False]
    (fence,) = _of(remediation.objects(), "FenceAgentsRemediationTemplate")
    spec = fence["spec"]["template"]["spec"]
    assert spec["nodeparameters"]["--ip"] == {"gpu-a01": "10.0.0.11", "gpu-a02": "10.0.0.12"}
    assert spec["nodeSecretNames"] == {"gpu-a01": "gpufleet-bmc-gpu-a01", "gpu-a02": "gpufleet-bmc-gpu-a02"}
    assert {s.target: s.why for s in remediation.skipped} == {
        "l40s": "1 node at its fewest: never its last healthy node",
        "h100vm": "its GPUs go to VMs (vm-passthrough): the host's kernel logs no Xid of theirs",
        "l40svgpu": "its GPUs go to VMs (vm-vgpu): the host's kernel logs no Xid of theirs",
    }


def test_a_bmc_fence_redfish_cannot_reach_falls_back_to_reboot_saying_why(catalog):
    def http_bmc(config: Any) -> None:
        config["gpufleet:baremetal"]["hosts"][1]["bmc"]["address"] = "http://10.0.0.12:8000"

    (group,) = _remediation(_onprem(catalog, http_bmc)).groups
    assert (group.remediator, group.note) == (
        "reboot",
        "gpu-a02's BMC is http://10.0.0.12:8000: fence_redfish speaks https only: reboot",
    )


def test_hosts_remediated_by_ansible_get_no_cluster_remediation(catalog):
    def ansible(config: Any) -> None:
        config["gpufleet:baremetal"]["remediation"] = {"engine": "ansible"}

    assert node_remediation_plan(_onprem(catalog, ansible)) is None


# -- Fence Agents Remediation's command, run for real --------------------------------------------------------------


def far_command(template: dict[str, Any], node: str, secret: dict[str, str]) -> list[str]:
    """The fence agent's command line Fence Agents Remediation builds for ``node`` from a template's spec and the
    node's Secret (v0.7.0 BuildFenceAgentParams: shared, then the node's parameters, then the Secret's;
    ``--action=reboot`` when none is given; ``--name`` alone for an empty value)."""
    spec = template["spec"]["template"]["spec"]
    params = dict(spec.get("sharedparameters", {}))
    params |= {name: values[node] for name, values in spec.get("nodeparameters", {}).items() if node in values}
    params |= secret
    params.setdefault("--action", "reboot")
    return [spec["agent"], *(f"{k}={v}" if v else k for k, v in params.items())]


@pytest.fixture(scope="module")
def https_bmc(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("far-bmc")
    port, password = free_port(), secrets.token_urlsafe(16)
    cert, key = self_signed(tmp)
    system = "f0000000-0000-4000-8000-000000000001"
    config = tmp / "sushy.conf"
    config.write_text(
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_SSL_CERT = {str(cert)!r}\nSUSHY_EMULATOR_SSL_KEY = {str(key)!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd(tmp / 'htpasswd', password))!r}\n"
        f"SUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_STATE_DIR = {str(tmp / 'state')!r}\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {[{'uuid': system, 'name': 'gpu-a01', 'power_state': 'On'}]!r}\n"
    )
    url = f"https://127.0.0.1:{port}"
    with running(config, url, tmp / "emulator.log"):
        yield url, port, password, system, tmp / "emulator.log"


def _power(url: str, password: str, system: str) -> str:
    answer = requests.get(f"{url}/redfish/v1/Systems/{system}", auth=(USER, password), timeout=10, verify=False)
    answer.raise_for_status()
    return answer.json()["PowerState"]


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # the emulator's own certificate
def test_the_rendered_template_makes_fence_redfish_power_cycle_the_hosts_system(catalog, https_bmc):
    url, port, password, system, log = https_bmc

    def at_the_emulator(config: Any) -> None:
        host = config["gpufleet:baremetal"]["hosts"][0]
        host["bmc"].update({"address": f"https://127.0.0.1:{port}", "username": USER, "verify_tls": False})
        host["system_id"] = system

    (fence,) = _of(_remediation(_onprem(catalog, at_the_emulator)).objects(), "FenceAgentsRemediationTemplate")
    command = far_command(fence, "gpu-a01", {"--password": password})
    assert _power(url, password, system) == "On"
    before = log.read_text().count("Actions/ComputerSystem.Reset")
    ran = subprocess.run([str(FENCE_REDFISH), *command[1:]], stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Success: Rebooted" in ran.stdout
    assert log.read_text().count("Actions/ComputerSystem.Reset") - before == 2  # ForceOff, then On
    assert _power(url, password, system) == "On"
    wrong = far_command(fence, "gpu-a01", {"--password": "not-the-password"})
    refused = subprocess.run([str(FENCE_REDFISH), *wrong[1:]], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
    assert refused.returncode != 0


def test_remediate_yml_refuses_hosts_their_cluster_remediates():
    """remediate.yml fails with the decide filter's errors before it changes anything (its "Refuse" task)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gpufleet_remediation_filters", REPO / "ansible/plugins/filter/gpufleet_remediation.py"
    )
    assert spec is not None and spec.loader is not None
    filters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(filters)
    read = {"gpufleet_remediation_read": {"host_group": "hgx", "kernel_log": LINES[79], "state": "", "boot_id": "b"}}
    hostvars = {"a": read, "b": {"gpufleet_remediation_read": {"host_group": "hgx", "kernel_log": ""}}}
    args = (hostvars, ["a", "b"], {"hgx": ["a", "b"]}, ["hgx"])
    assert filters.gpufleet_remediation_decide(*args, {})["decisions"][0]["verdict"] == "act"
    refused = filters.gpufleet_remediation_decide(*args, {"engine": "node-healthcheck"})
    assert (refused["decisions"], refused["errors"]) == ([], [filters.ELSEWHERE])


def test_max_hosts_at_once_two_lets_two_of_four_go_but_one_of_a_pool_of_two(catalog):
    def two(config: Any) -> None:
        config["gpufleet:aks"]["remediation"]["max_hosts_at_once"] = 2

    plan = plan_stack(stack_variant(PROD, two), catalog)
    checks = {c["metadata"]["name"]: c for c in _of(_remediation(plan).objects(), "NodeHealthCheck")}
    assert [_remediates(checks["gpufleet-h100train"], n, 4) for n in (1, 2, 3)] == [True, True, False]
    assert checks["gpufleet-h100mig"]["spec"]["maxUnhealthy"] == 1  # two nodes at its fewest
