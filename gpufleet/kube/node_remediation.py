"""Health remediation of Kubernetes nodes (docs/remediation.md, "In a Kubernetes cluster"): the stack's Xid policy
(:mod:`gpufleet.fleet.remediation`) as configuration of an existing engine, which ``gpufleet render`` writes
(``gpufleet-remediation.yaml``) and the tests check against the engine's CRD schemas and its own tools.

The engine is **node-problem-detector** (NPD) with medik8s' **Node Healthcheck** (NHC) and its remediators:

- NPD reads each node's kernel log. gpufleet's kernel log monitor (a ConfigMap beside NPD's own) has one rule per
  Xid of gpufleet's catalog: an Xid whose action is ``none`` is an event only; any other sets the node condition of
  its action (:data:`CONDITIONS`) to True, e.g. ``GPUXidNeedsPowerCycle`` with reason ``Xid79``.
- A **NodeHealthCheck** per GPU pool or host group (NHC forbids overlapping node sets) treats a node as unhealthy
  while a condition of a node-level action (GPU reset, reboot, power cycle) is True, and remediates it with one
  remediator: **Fence Agents Remediation** power-cycles a bare-metal host through its BMC (``fence_redfish``, off and
  on); **Self Node Remediation** reboots the node (AKS nodes; hosts whose BMCs fence_redfish cannot reach).
  ``maxUnhealthy`` holds the group limits: at most ``max_hosts_at_once`` nodes, and never the last healthy one.

AMD Instinct nodes log no Xids. Their faults (gpufleet/catalog/amd_faults.yaml) reach NPD through AMD's own helper:
a second monitor, a *custom plugin* monitor, runs ``amdgpuhealth`` (which AMD's metrics exporter puts on each of its
nodes, /var/lib/amd-metrics-exporter) per fault signal the cluster can observe (a fatal CPER record, uncorrectable ECC
errors) and sets the condition of the signal's action (:data:`AMD_CONDITIONS`); an AMD pool's or host group's
NodeHealthCheck watches those. The device plugin already withdraws a GPU the exporter finds unhealthy from the node's
allocatable GPUs (AMD's own health check); the monitor adds the node-level actions the policy asks for.

NHC remediates a node, not a GPU, so one remediator serves every node-level action of a group: the strongest its
policy uses (a GPU reset becomes a reboot or power cycle). A ``cordon`` Xid sets ``GPUXidNeedsService`` and nothing
acts on it: a person does. Why this engine and not NVIDIA's NVSentinel: its chart cannot be obtained here to render or
check (and it needs a datastore); NHC's objects are checked against its published CRDs, its limits are native, and
fence_redfish is Debian's own, run by the tests against a Redfish BMC.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpufleet.fleet.remediation import (
    ACTIONS,
    PCI_ADDRESS,
    RECOVERING,
    XID_PREFIX,
    Action,
    Policy,
    policy_from,
    xid_catalog,
)
from gpufleet.kube.dra import MANAGED_BY
from gpufleet.kube.gpu_software import CONTAINER_WORKLOAD
from gpufleet.kube.labels import POOL_LABEL

AMD = "amd"

if TYPE_CHECKING:
    from gpufleet.catalog.releases import NodeRemediationRelease
    from gpufleet.plan.model import PoolPlan, StackPlan
    from gpufleet.spec.models import BaremetalHost, Remediation

# The node condition NPD sets for each action of the policy (``none``: an event, no condition).
CONDITIONS: dict[Action, str] = {
    "cordon": "GPUXidNeedsService",
    "gpu-reset": "GPUXidNeedsReset",
    "reboot": "GPUXidNeedsReboot",
    "power-cycle": "GPUXidNeedsPowerCycle",
}
_MEANS = {
    "cordon": "a person",
    "gpu-reset": "a GPU reset",
    "reboot": "a reboot",
    "power-cycle": "a power cycle",
}
NPD_NAMESPACE = "kube-system"  # node-problem-detector's own deployment (deployment/node-problem-detector.yaml)
MONITOR_CONFIGMAP = "gpufleet-gpu-xid-monitor"
MONITOR_FILE = "gpu-xid-monitor.json"
MONITOR_SOURCE = "gpufleet-gpu-xid"
HOSTNAME_LABEL = "kubernetes.io/hostname"  # the kubelet sets it on every node
REBOOT_TEMPLATE = "gpufleet-reboot"
FENCE_AGENT = "fence_redfish"
BMC_SECRET_PREFIX = "gpufleet-bmc-"  # + host: the Secret with the host's BMC password (key --password)
Remediator = Literal["reboot", "power-cycle"]

# AMD Instinct nodes: NPD's custom plugin monitor running AMD's amdgpuhealth (amd_faults.yaml, [helper]): the
# condition of each action, the monitor's ConfigMap, and where the exporter puts the helper on the node.
AMD_CONDITIONS: dict[Action, str] = {
    "cordon": "AMDGPUNeedsService",
    "gpu-reset": "AMDGPUNeedsReset",
    "reboot": "AMDGPUNeedsReboot",
    "power-cycle": "AMDGPUNeedsPowerCycle",
}
AMD_MONITOR_CONFIGMAP = "gpufleet-amd-gpu-monitor"
AMD_MONITOR_FILE = "amd-gpu-monitor.json"
AMD_MONITOR_SOURCE = "gpufleet-amd-gpu"
AMDGPUHEALTH = "/var/lib/amd-metrics-exporter/amdgpuhealth"  # the exporter's hostPath volume "health"
# amdgpuhealth reads the exporter each time (the exporter polls its GPUs every 30 s): NPD's defaults, the helper's
# own time within the monitor's (NPD v1.36.0 refuses a rule timeout above the global one)
AMD_INVOKE_INTERVAL = "30s"
AMD_GLOBAL_TIMEOUT = "15s"
AMD_RULE_TIMEOUT = "10s"


def xid_rule_pattern(code: int) -> str:
    """NPD's pattern for the driver's line of Xid ``code`` (NPD anchors it at the end of the line)."""
    return XID_PREFIX + PCI_ADDRESS + rf"\): {code}(?:,.*)?"


def kubernetes_policy(plan: StackPlan) -> Remediation | None:
    """The policy the cluster's engine runs: AKS's ``aks.remediation``, or a bare-metal stack's when its engine is
    node-healthcheck; None when the cluster remediates nothing."""
    if plan.cluster is not None:
        return plan.cluster.remediation
    if plan.baremetal is not None and plan.baremetal.remediation.engine == "node-healthcheck":
        return plan.baremetal.remediation
    return None


def _actions(policy: Policy) -> dict[int, Action]:
    codes = sorted(set(xid_catalog()) | set(policy.overrides))
    return {code: policy.action(code) for code in codes}


def monitor_config(policy: Policy) -> dict[str, Any]:
    """NPD's system log monitor for the policy: a permanent rule (its action's condition) per Xid that calls for
    an action, a temporary one (an event) per Xid that does not."""
    actions = _actions(policy)
    used = [a for a in ACTIONS if a in actions.values() and a != "none"]
    rules = []
    for code, action in actions.items():
        known = xid_catalog().get(code)
        suffix = f" (NVIDIA: {known.resolution}; gpufleet: {action})" if known else f" (gpufleet: {action})"
        rule: dict[str, Any] = {"type": "temporary" if action == "none" else "permanent"}
        if action != "none":
            rule["condition"] = CONDITIONS[action]
        rule |= {"reason": f"Xid{code}", "pattern": xid_rule_pattern(code), "patternGeneratedMessageSuffix": suffix}
        rules.append(rule)
    return {
        "plugin": "kmsg",
        "logPath": "/dev/kmsg",
        "lookback": "5m",
        "bufferSize": 10,
        "source": MONITOR_SOURCE,
        "conditions": [
            {"type": CONDITIONS[a], "reason": f"No{CONDITIONS[a]}", "message": f"no Xid that calls for {_MEANS[a]}"}
            for a in used
        ],
        "rules": rules,
    }


@dataclass(frozen=True)
class FenceNode:
    """fence_redfish's parameters for one host: its BMC, as the stack describes it."""

    host: str
    ip: str
    port: int
    username: str
    systems_uri: str
    insecure: bool  # the BMC's certificate is not checked (bmc.verify_tls false)


@dataclass(frozen=True)
class NodeGroup:
    """A pool's or host group's nodes as Node Healthcheck sees them."""

    target: str
    selector: dict[str, Any]
    nodes: int  # the fewest nodes it has (a pool's autoscaler minimum)
    max_unhealthy: int
    remediator: Remediator
    conditions: tuple[str, ...]
    fence: tuple[FenceNode, ...] = ()  # power-cycle: every host's BMC
    note: str = ""  # why its remediator is weaker than its policy asks

    @property
    def name(self) -> str:
        return "gpufleet-" + self.target.replace("_", "-")


@dataclass(frozen=True)
class Skipped:
    target: str
    why: str


def max_unhealthy(policy: Policy, nodes: int) -> int:
    """The most nodes of a group that may be unhealthy for NHC to remediate one: ``max_hosts_at_once``, leaving at
    least one healthy node."""
    return max(0, min(policy.max_hosts_at_once, nodes - 1))


def node_actions(policy: Policy) -> list[Action]:
    """The node-level actions the policy uses, mildest first."""
    used = set(_actions(policy).values())
    return [a for a in ACTIONS if a in RECOVERING and a in used]


def amd_actions(policy: Policy) -> dict[str, Action]:
    """The action of each AMD fault signal the cluster observes (those amdgpuhealth can probe), by signal."""
    from gpufleet.catalog.amd import load_amd_faults

    return {s.signal: policy.amd_action(s.signal) for s in load_amd_faults().signals if s.probe}


def amd_node_actions(policy: Policy) -> list[Action]:
    """The node-level actions the AMD signals the cluster observes call for, mildest first."""
    used = set(amd_actions(policy).values())
    return [a for a in ACTIONS if a in RECOVERING and a in used]


def amd_rule_reason(signal: str) -> str:
    """The reason of a signal's rule: ``afid_fatal`` -> ``AMDAfidFatal``."""
    return "AMD" + "".join(part.capitalize() for part in signal.split("_"))


def amd_monitor_config(policy: Policy) -> dict[str, Any]:
    """NPD's custom plugin monitor for AMD nodes: a permanent rule per observed signal that calls for an action,
    running amdgpuhealth with the signal's probe (exit 1 sets the action's condition True, 0 keeps it False, 2 is
    unknown); signals whose action is ``none`` get no rule (the helper would repeat its event every 30 s)."""
    from gpufleet.catalog.amd import load_amd_faults

    actions = amd_actions(policy)
    rules = [
        {
            "type": "permanent",
            "condition": AMD_CONDITIONS[actions[s.signal]],
            "reason": amd_rule_reason(s.signal),
            "path": AMDGPUHEALTH,
            "args": list(s.probe),
            "timeout": AMD_RULE_TIMEOUT,
        }
        for s in load_amd_faults().signals
        if actions.get(s.signal, "none") != "none"
    ]
    used = [a for a in ACTIONS if a in actions.values() and a != "none"]
    plugin = {
        "invoke_interval": AMD_INVOKE_INTERVAL,
        "timeout": AMD_GLOBAL_TIMEOUT,
        "max_output_length": 80,
        "concurrency": 3,
        "enable_message_change_based_condition_update": False,
    }
    return {
        "plugin": "custom",
        "pluginConfig": plugin,
        "source": AMD_MONITOR_SOURCE,
        "metricsReporting": True,
        "conditions": [
            {
                "type": AMD_CONDITIONS[a],
                "reason": f"No{AMD_CONDITIONS[a]}",
                "message": f"no AMD GPU fault calls for {_MEANS[a]}",
            }
            for a in used
        ],
        "rules": rules,
    }


def fence_node(host: BaremetalHost) -> FenceNode | str:
    """fence_redfish's parameters for a host, or why fence_redfish cannot reach its BMC."""
    scheme, address, port = host.bmc.endpoint
    if scheme != "https":
        return f"{host.name}'s BMC is {host.bmc.address}: fence_redfish speaks https only"
    if host.system_id is None:
        return f"{host.name} has no system_id: fence_redfish needs the system's Redfish URI"
    systems_uri = f"/redfish/v1/Systems/{host.system_id}"
    return FenceNode(host.name, address, port, host.bmc.username, systems_uri, not host.bmc.verify_tls)


def _group(target: str, selector: dict[str, Any], nodes: int, policy: Policy, fence: list[FenceNode | str] | None,
           vendor: str | None = None) -> NodeGroup | Skipped:  # fmt: skip
    """``vendor`` amd: the AMD monitor's conditions, of the AMD signals' actions; else the Xids'."""
    actions = amd_node_actions(policy) if vendor == AMD else node_actions(policy)
    if not actions:
        what = "AMD GPU fault the cluster observes" if vendor == AMD else "Xid of its policy"
        return Skipped(target, f"no {what} calls for a GPU reset, reboot or power cycle")
    limit = max_unhealthy(policy, nodes)
    if limit == 0:
        return Skipped(target, f"{nodes} node{'s' if nodes != 1 else ''} at its fewest: never its last healthy node")
    conditions = tuple((AMD_CONDITIONS if vendor == AMD else CONDITIONS)[a] for a in actions)
    if actions[-1] != "power-cycle":
        return NodeGroup(target, selector, nodes, limit, "reboot", conditions)
    if fence is None:
        return NodeGroup(target, selector, nodes, limit, "reboot", conditions, note="AKS nodes have no BMC: reboot")
    unreachable = [f for f in fence if isinstance(f, str)]
    if unreachable:
        return NodeGroup(target, selector, nodes, limit, "reboot", conditions, note="; ".join(unreachable) + ": reboot")
    hosts = tuple(f for f in fence if isinstance(f, FenceNode))
    return NodeGroup(target, selector, nodes, limit, "power-cycle", conditions, hosts)


def pool_group(pool: PoolPlan, policy: Policy) -> NodeGroup | Skipped:
    """An AKS pool's group: its nodes carry gpufleet's pool label; the autoscaler's minimum counts."""
    selector = {"matchLabels": {POOL_LABEL: pool.labels[POOL_LABEL]}}
    return _group(pool.name, selector, pool.nodes.min, policy, None, vendor=pool.vendor)


def host_group(plan: StackPlan, group: str, policy: Policy, vendor: str | None = None) -> NodeGroup | Skipped:
    """A host group's group: its BMC-managed hosts (baremetal.hosts), by node name (the host's name); ``vendor``:
    its GPUs'."""
    hosts = sorted((h for h in plan.baremetal.hosts if h.host_group == group), key=lambda h: h.name) \
        if plan.baremetal else []  # fmt: skip
    if not hosts:
        return Skipped(group, "no BMC-managed hosts (baremetal.hosts) to name its nodes")
    selector = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [h.name for h in hosts]}]}
    return _group(group, selector, len(hosts), policy, [fence_node(h) for h in hosts], vendor=vendor)


@dataclass(frozen=True)
class NodeRemediationPlan:
    """What ``gpufleet render`` writes for the cluster's engine."""

    release: NodeRemediationRelease
    policy: Policy
    groups: tuple[NodeGroup, ...]
    skipped: tuple[Skipped, ...]
    nvidia: bool = True  # the cluster has NVIDIA GPU nodes: the Xid monitor
    amd: bool = False  # and AMD ones: the AMD monitor

    def objects(self) -> list[dict[str, Any]]:
        objects = [self.monitor()] if self.nvidia else []
        objects += [self.amd_monitor()] if self.amd else []
        if any(g.remediator == "reboot" for g in self.groups):
            objects.append(self.reboot_template())
        objects += [self.fence_template(g) for g in self.groups if g.remediator == "power-cycle"]
        objects += [self.health_check(g) for g in self.groups]
        return objects

    def monitor(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": MONITOR_CONFIGMAP, "namespace": NPD_NAMESPACE, "labels": dict(MANAGED_BY)},
            "data": {MONITOR_FILE: json.dumps(monitor_config(self.policy), indent=2) + "\n"},
        }

    def amd_monitor(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": AMD_MONITOR_CONFIGMAP, "namespace": NPD_NAMESPACE, "labels": dict(MANAGED_BY)},
            "data": {AMD_MONITOR_FILE: json.dumps(amd_monitor_config(self.policy), indent=2) + "\n"},
        }

    def _meta(self, name: str) -> dict[str, Any]:
        return {"name": name, "namespace": self.release.namespace, "labels": dict(MANAGED_BY)}

    def reboot_template(self) -> dict[str, Any]:
        return {
            "apiVersion": self.release.self_node_remediation.api,
            "kind": "SelfNodeRemediationTemplate",
            "metadata": self._meta(REBOOT_TEMPLATE),
            "spec": {"template": {"spec": {"remediationStrategy": "Automatic"}}},
        }

    def fence_template(self, group: NodeGroup) -> dict[str, Any]:
        nodes = group.fence
        parameters: dict[str, dict[str, str]] = {
            "--ip": {n.host: n.ip for n in nodes},
            "--ipport": {n.host: str(n.port) for n in nodes},
            "--username": {n.host: n.username for n in nodes},
            "--systems-uri": {n.host: n.systems_uri for n in nodes},
        }
        if any(n.insecure for n in nodes):
            parameters["--ssl-insecure"] = {n.host: "" for n in nodes if n.insecure}
        spec = {
            "agent": FENCE_AGENT,
            "sharedparameters": {"--action": "reboot"},  # fence agents' reboot: power off, then on
            "nodeparameters": parameters,
            "nodeSecretNames": {n.host: BMC_SECRET_PREFIX + n.host for n in nodes},
            "remediationStrategy": "OutOfServiceTaint",
        }
        return {
            "apiVersion": self.release.fence_agents_remediation.api,
            "kind": "FenceAgentsRemediationTemplate",
            "metadata": self._meta(f"{group.name}-power-cycle"),
            "spec": {"template": {"spec": spec}},
        }

    def template_of(self, group: NodeGroup) -> dict[str, str]:
        """The reference NHC takes to the group's remediation template."""
        template = self.reboot_template() if group.remediator == "reboot" else self.fence_template(group)
        meta = template["metadata"]
        return {"apiVersion": template["apiVersion"], "kind": template["kind"], "namespace": meta["namespace"],
                "name": meta["name"]}  # fmt: skip

    def health_check(self, group: NodeGroup) -> dict[str, Any]:
        return {
            "apiVersion": self.release.node_healthcheck.api,
            "kind": "NodeHealthCheck",
            "metadata": {"name": group.name, "labels": dict(MANAGED_BY)},
            "spec": {
                "selector": group.selector,
                "unhealthyConditions": [{"type": c, "status": "True", "duration": "0s"} for c in group.conditions],
                "maxUnhealthy": group.max_unhealthy,
                "remediationTemplate": self.template_of(group),
            },
        }

    def summary(self) -> list[str]:
        """One line per pool or host group: who remediates it, within which limit, or why nothing does."""
        lines = []
        for g in self.groups:
            how = "power cycle through its BMC (Fence Agents Remediation)" if g.remediator == "power-cycle" else \
                "reboot (Self Node Remediation)"  # fmt: skip
            note = f"; {g.note}" if g.note else ""
            lines.append(f"{g.target}: {how}, at most {g.max_unhealthy} of {g.nodes} nodes at once{note}.")
        lines += [f"{s.target}: not remediated: {s.why}." for s in self.skipped]
        return lines


def node_remediation_plan(plan: StackPlan) -> NodeRemediationPlan | None:
    """The engine's configuration for the stack's cluster: its AKS GPU pools, else its bare-metal host groups with
    GPUs; None when the cluster remediates nothing (:func:`kubernetes_policy`) or has no GPUs."""
    from gpufleet.catalog.releases import load_releases

    spec = kubernetes_policy(plan)
    if spec is None:
        return None
    policy = policy_from(spec)
    found: list[NodeGroup | Skipped]
    if plan.cluster is not None:
        found = [pool_group(p, policy) for p in plan.pools]
        vendors = {p.vendor for p in plan.pools}
    else:
        containers = [g for g in plan.host_groups if g.gpu_model is not None]
        found = [
            host_group(plan, g.name, policy, vendor=g.vendor)
            if g.gpu_workload in (None, CONTAINER_WORKLOAD)
            else Skipped(g.name, f"its GPUs go to VMs ({g.gpu_workload}): the host's kernel logs no Xid of theirs")
            for g in containers
        ]
        vendors = {g.vendor for g in containers if g.gpu_workload in (None, CONTAINER_WORKLOAD)}
    if not found:
        return None
    return NodeRemediationPlan(
        release=load_releases().node_remediation,
        policy=policy,
        groups=tuple(f for f in found if isinstance(f, NodeGroup)),
        skipped=tuple(f for f in found if isinstance(f, Skipped)),
        nvidia=vendors != {AMD},  # also without GPU nodes for containers: the file as it always was
        amd=AMD in vendors,
    )
