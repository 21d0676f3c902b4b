"""The stack's Grafana dashboard, generated from the plan: a fleet view (every pool side by side), a row per pool
(its nodes, its cost now, its MIG instances against the plan's layout), and node, GPU and MIG views of the node
picked at the top. Grafana's dashboard JSON model (schema v1), in a ConfigMap its dashboard sidecar loads.

The queries read the DCGM exporter's series with the ``node`` and ``pool`` labels gpufleet's scrape adds
(:mod:`gpufleet.kube.monitoring`); ``$datasource``, ``$pool`` and ``$node`` are the dashboard's variables. An AMD
Instinct pool's row, and the AMD node view, read AMD's Device Metrics Exporter instead (gpufleet/catalog/
amd_metrics.yaml), scraped with the same two labels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gpufleet.azure.cost import StackCost
from gpufleet.plan.model import PoolPlan, StackPlan

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}
GRAFANA_SIDECAR_LABEL = {"grafana_dashboard": "1"}  # the label Grafana's dashboard sidecar looks for (its default)
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24  # Grafana's grid is 24 columns wide
HEIGHT = 8

ACTIVITY = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PRESENT = "DCGM_FI_DEV_GPU_TEMP"
ON_NODE = '{node="$node"}'
GPU_LEGEND = "GPU {{gpu}}"
MIG_LEGEND = "GPU {{gpu}} {{GPU_I_PROFILE}} #{{GPU_I_ID}}"
# AMD's exporter: activity and power are the physical GPU's, reported on its primary partition (gpu_partition_id 0,
# which an unpartitioned GPU has too); the health flag is on every GPU and partition
AMD_PRIMARY = 'gpu_partition_id="0"'
AMD_PRESENT = "gpu_health"
AMD_GPU_LEGEND = "GPU {{gpu_id}}"
AMD_PARTITION_LEGEND = "GPU {{gpu_id}} #{{gpu_partition_id}}"


@dataclass
class Layout:
    """Panels placed left to right, two to a line, rows across the whole width; ids in order."""

    panels: list[dict[str, Any]] = field(default_factory=list)
    x: int = 0
    y: int = 0

    def _next_id(self) -> int:
        return len(self.panels) + 1

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y = 0, self.y + HEIGHT
        grid = {"h": 1, "w": WIDTH, "x": 0, "y": self.y}
        self.panels.append(
            {"type": "row", "id": self._next_id(), "title": title, "collapsed": False, "gridPos": grid, "panels": []}
        )
        self.y += 1

    def panel(self, title: str, expr: str, unit: str, legend: str = "", kind: str = "timeseries") -> None:
        width = WIDTH // 2
        grid = {"h": HEIGHT, "w": width, "x": self.x, "y": self.y}
        target = {"refId": "A", "expr": expr, "legendFormat": legend or "__auto", "datasource": dict(DATASOURCE)}
        self.panels.append(
            {
                "type": kind,
                "id": self._next_id(),
                "title": title,
                "datasource": dict(DATASOURCE),
                "gridPos": grid,
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [target],
            }
        )
        self.x += width
        if self.x >= WIDTH:
            self.x, self.y = 0, self.y + HEIGHT


def _fleet(layout: Layout) -> None:
    layout.row("Fleet: every pool")
    layout.panel("GPU activity by pool", f"avg by (pool) ({ACTIVITY})", "percentunit", "{{pool}}")
    layout.panel("GPUs reporting by pool", f"count by (pool) ({PRESENT})", "none", "{{pool}}", kind="stat")
    layout.panel("Power by pool", "sum by (pool) (DCGM_FI_DEV_POWER_USAGE)", "watt", "{{pool}}")
    layout.panel(
        "Firing GPU alerts",
        'count by (alertname, pool) (ALERTS{alertstate="firing", alertname=~"Gpu.*"})',
        "none",
        "{{alertname}} {{pool}}",
    )


def _pool(layout: Layout, pool: PoolPlan, cost: StackCost | None) -> None:
    on = f'{{pool="{pool.name}"}}'
    layout.row(f"Pool {pool.name}: {pool.vm_size}, {pool.gpus_per_node} x {pool.gpu_model} per node")
    layout.panel("GPU activity by node", f"avg by (node) ({ACTIVITY}{on})", "percentunit", "{{node}}")
    layout.panel("Framebuffer used by node", f"sum by (node) (DCGM_FI_DEV_FB_USED{on})", "mbytes", "{{node}}")
    layout.panel("Hottest GPU by node", f"max by (node) ({PRESENT}{on})", "celsius", "{{node}}")
    layout.panel("Power by node", f"sum by (node) (DCGM_FI_DEV_POWER_USAGE{on})", "watt", "{{node}}")
    priced = cost.pool(pool.name) if cost is not None else None
    if priced is not None and priced.usd_per_node_hour is not None:
        nodes = f"count(group by (node) ({PRESENT}{on}))"
        layout.panel("Cost now ($ per hour)", f"{nodes} * {priced.usd_per_node_hour}", "currencyUSD", kind="stat")
    if pool.mig is not None and pool.mig.instances_per_node:
        plan = ", ".join(f"{n} x {p}" for p, n in sorted(pool.mig.instances_per_node.items()))
        mig_on = f'{{pool="{pool.name}", GPU_I_PROFILE!=""}}'
        layout.panel(
            f"MIG instances per node (plan: {plan})",
            f"count by (node, GPU_I_PROFILE) ({ACTIVITY}{mig_on})",
            "none",
            "{{node}} {{GPU_I_PROFILE}}",
        )


def _amd_pool(layout: Layout, pool: PoolPlan, cost: StackCost | None) -> None:
    on = f'{{pool="{pool.name}"}}'
    primary = f'{{pool="{pool.name}", {AMD_PRIMARY}}}'
    layout.row(f"Pool {pool.name}: {pool.vm_size}, {pool.gpus_per_node} x {pool.gpu_model} per node")
    layout.panel("GPU activity by node", f"avg by (node) (gpu_gfx_activity{primary}) / 100", "percentunit", "{{node}}")
    layout.panel("VRAM used by node", f"sum by (node) (gpu_used_vram{on})", "mbytes", "{{node}}")
    layout.panel("Hottest GPU by node", f"max by (node) (gpu_junction_temperature{on})", "celsius", "{{node}}")
    layout.panel("Power by node", f"sum by (node) (gpu_package_power{primary})", "watt", "{{node}}")
    layout.panel("Unhealthy GPUs by node", f"count by (node) ({AMD_PRESENT}{on} == 0)", "none", "{{node}}", kind="stat")
    priced = cost.pool(pool.name) if cost is not None else None
    if priced is not None and priced.usd_per_node_hour is not None:
        nodes = f"count(group by (node) ({AMD_PRESENT}{on}))"
        layout.panel("Cost now ($ per hour)", f"{nodes} * {priced.usd_per_node_hour}", "currencyUSD", kind="stat")
    if pool.amd_partitions is not None and pool.amd_partitions.logical_gpus:
        plan = ", ".join(f"{n} x {pair}" for pair, n in sorted(pool.amd_partitions.logical_gpus.items()))
        layout.panel(
            f"Logical GPUs per node (plan: {plan})",
            f"count by (node, gpu_compute_partition_type) ({AMD_PRESENT}{on})",
            "none",
            "{{node}} {{gpu_compute_partition_type}}",
        )


def _amd_node(layout: Layout) -> None:
    layout.row("AMD node $node: its GPUs")
    primary = f'{{node="$node", {AMD_PRIMARY}}}'
    layout.panel("GPU activity", f"gpu_gfx_activity{primary}", "percent", AMD_GPU_LEGEND)
    layout.panel("Memory activity", f"gpu_umc_activity{primary}", "percent", AMD_GPU_LEGEND)
    layout.panel("VRAM used", f"gpu_used_vram{ON_NODE}", "mbytes", AMD_PARTITION_LEGEND)
    layout.panel("Junction temperature", f"gpu_junction_temperature{ON_NODE}", "celsius", AMD_GPU_LEGEND)
    layout.panel("Power", f"gpu_package_power{primary}", "watt", AMD_GPU_LEGEND)
    layout.panel("Health (1 healthy, 0 unhealthy)", f"{AMD_PRESENT}{ON_NODE}", "none", AMD_PARTITION_LEGEND)
    layout.panel(
        "Uncorrectable ECC errors", f"gpu_ecc_uncorrect_total{ON_NODE}", "none", AMD_PARTITION_LEGEND, kind="stat"
    )


def _node(layout: Layout) -> None:
    layout.row("Node $node: its GPUs")
    layout.panel("GPU utilisation", f"DCGM_FI_DEV_GPU_UTIL{ON_NODE}", "percent", GPU_LEGEND)
    layout.panel("SM active", f"DCGM_FI_PROF_SM_ACTIVE{ON_NODE}", "percentunit", GPU_LEGEND)
    layout.panel("Tensor pipe active", f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{ON_NODE}", "percentunit", GPU_LEGEND)
    layout.panel("Framebuffer used", f"DCGM_FI_DEV_FB_USED{ON_NODE}", "mbytes", GPU_LEGEND)
    layout.panel("GPU temperature", f"{PRESENT}{ON_NODE}", "celsius", GPU_LEGEND)
    layout.panel("Power", f"DCGM_FI_DEV_POWER_USAGE{ON_NODE}", "watt", GPU_LEGEND)
    layout.panel(
        "Time throttled for heat or power",
        f"(rate(DCGM_FI_DEV_THERMAL_VIOLATION{ON_NODE}[5m]) + rate(DCGM_FI_DEV_POWER_VIOLATION{ON_NODE}[5m])) / 1e9",
        "percentunit",
        GPU_LEGEND,
    )
    layout.panel("Last XID error", f"DCGM_FI_DEV_XID_ERRORS{ON_NODE}", "none", GPU_LEGEND, kind="stat")
    layout.row("MIG instances of node $node")
    mig_on = '{node="$node", GPU_I_PROFILE!=""}'
    layout.panel("MIG instance activity", f"{ACTIVITY}{mig_on}", "percentunit", MIG_LEGEND)
    layout.panel("MIG instance framebuffer used", f"DCGM_FI_DEV_FB_USED{mig_on}", "mbytes", MIG_LEGEND)


def _variables(plan: StackPlan) -> list[dict[str, Any]]:
    pools = [p.name for p in plan.pools]
    amd = any(p.vendor == "amd" for p in plan.pools)
    # the nodes the exporters see: DCGM's, and AMD's where the stack has AMD pools
    present = f'{{__name__=~"{PRESENT}|{AMD_PRESENT}", pool="$pool"}}' if amd else f'{PRESENT}{{pool="$pool"}}'
    first = {"text": pools[0], "value": pools[0]} if pools else {"text": "", "value": ""}
    return [
        {"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus"},
        {
            "type": "custom",
            "name": "pool",
            "label": "Pool",
            "query": ",".join(pools),
            "current": first,
            "options": [{"text": p, "value": p, "selected": p == pools[0]} for p in pools],
        },
        {
            "type": "query",
            "name": "node",
            "label": "Node",
            "datasource": dict(DATASOURCE),
            "query": f"label_values({present}, node)",
            "refresh": 2,
            "sort": 1,
        },
    ]


def dashboard(plan: StackPlan, cost: StackCost | None) -> dict[str, Any]:
    """The stack's dashboard (Grafana's JSON model)."""
    layout = Layout()
    _fleet(layout)
    for pool in plan.pools:
        (_amd_pool if pool.vendor == "amd" else _pool)(layout, pool, cost)
    if any(p.vendor != "amd" for p in plan.pools):
        _node(layout)
    if any(p.vendor == "amd" for p in plan.pools):
        _amd_node(layout)
    return {
        "uid": f"gpufleet-{plan.stack}"[:40],
        "title": f"gpufleet GPUs: {plan.stack}",
        "description": "Generated by gpufleet render from the stack's plan (docs/monitoring.md): do not edit here.",
        "tags": ["gpufleet", "gpu", "dcgm"],
        "timezone": "utc",
        "editable": False,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "templating": {"list": _variables(plan)},
        "annotations": {"list": []},
        "panels": layout.panels,
    }


def dashboard_configmap(plan: StackPlan, namespace: str, cost: StackCost | None) -> dict[str, Any]:
    """The dashboard in a ConfigMap labelled ``grafana_dashboard: "1"`` (Grafana's sidecar loads it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"gpufleet-{plan.stack}-gpu-dashboard",
            "namespace": namespace,
            "labels": {**GRAFANA_SIDECAR_LABEL, **MANAGED_BY},
        },
        "data": {f"gpufleet-{plan.stack}.json": json.dumps(dashboard(plan, cost), indent=2) + "\n"},
    }
