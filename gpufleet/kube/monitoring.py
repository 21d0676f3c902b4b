"""GPU monitoring generated from the plan: how Prometheus scrapes the DCGM exporters, the alerts on the stack's GPUs,
and a Grafana dashboard of its pools (``gpufleet-monitoring.yaml`` of ``gpufleet render``; docs/monitoring.md).

Written for an AKS stack whose ``gpu_software.monitoring`` says a Prometheus operator runs in the cluster:

- a ServiceMonitor for the GPU Operator's DCGM exporter (its Service ``nvidia-dcgm-exporter``), which adds to every
  series the ``node`` it came from and the node's gpufleet ``pool`` (``attachMetadata.node``: Prometheus reads the
  node's labels), so the alerts and the dashboard can name pools; the operator's own ServiceMonitor is then off
  (:mod:`gpufleet.kube.gpu_software`), so nothing is scraped twice;
- a ScrapeConfig for the exporter AKS runs itself on managed GPU pools (no Service: it serves on the node);
- a PrometheusRule: GPU health (XID 79, double-bit ECC, row-remap failure, thermal and power throttling, NVLink
  errors), a node idle for hours with its pool's $/hour (``gpufleet cost``), a MIG layout unlike the plan's;
- a ConfigMap with the stack's Grafana dashboard, labelled for Grafana's dashboard sidecar;
- for AMD Instinct pools (:func:`amd_monitoring_objects`), in the AMD GPU Operator's namespace: a ServiceMonitor for
  AMD's Device Metrics Exporter (the Service the operator makes from its DeviceConfig's ``metricsExporter``), with
  ``node`` and ``pool`` on each series as for DCGM, and a PrometheusRule: the exporter's health flag, uncorrectable
  ECC errors, a fatal RAS event (AFID), an AMD node idle for hours with its pool's $/hour.

Pure: the plan, the stack's cost and the DCGM catalog in, Kubernetes objects out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from gpufleet.azure.cost import StackCost
from gpufleet.catalog.amd import AmdMetricsCatalog, load_amd_metrics
from gpufleet.catalog.dcgm import DcgmCatalog, load_dcgm_catalog
from gpufleet.kube.amd_operator import DEVICE_CONFIG
from gpufleet.kube.dashboard import MANAGED_BY, dashboard_configmap
from gpufleet.kube.gpu_software import GPU_OPERATOR_CHART
from gpufleet.kube.labels import POOL_LABEL
from gpufleet.plan.model import PoolPlan, StackPlan
from gpufleet.spec.models import AMD_GPU_OPERATOR_NAMESPACE

MONITORING_API = "monitoring.coreos.com/v1"
SCRAPE_CONFIG_API = "monitoring.coreos.com/v1alpha1"
SCRAPE_INTERVAL = "30s"

# The labels gpufleet's scrape adds to every DCGM series.
NODE = "node"
POOL = "pool"

# Idle cost: a node whose GPUs have shown no activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE, a 0-1 ratio, reported for
# whole GPUs and MIG instances alike) above IDLE_ACTIVITY for IDLE_HOURS. Fixed, documented defaults rather than a
# stack setting: a training pool between jobs and an inference pool at night are both worth hearing about after a
# few hours, and the alert's annotation names the $/hour so the reader decides (docs/monitoring.md).
IDLE_ACTIVITY = 0.05
IDLE_HOURS = 4
# Throttling: the share of time the GPU's clocks were held down for heat or power, over THROTTLE_WINDOW.
THROTTLE_SHARE = 0.10
THROTTLE_WINDOW = "5m"
# A MIG layout may differ while the MIG manager applies it (a reboot on Azure VMs): only a lasting one alerts.
MIG_DRIFT_FOR = "30m"

ACTIVITY = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PRESENT = "DCGM_FI_DEV_GPU_TEMP"  # every whole GPU reports it: the nodes the exporter sees
# AMD's exporter (gpufleet/catalog/amd_metrics.yaml): graphics activity in percent (0-100), on the primary partition
# of a partitioned GPU; the health flag (1 healthy, 0 unhealthy) on every GPU and partition
AMD_ACTIVITY = "gpu_gfx_activity"
AMD_HEALTH = "gpu_health"


def enabled(plan: StackPlan) -> bool:
    """The stack's GPU software is scraped by a Prometheus operator (``aks.gpu_software.monitoring``)."""
    return plan.cluster is not None and plan.cluster.gpu_metrics


# -- scraping ---------------------------------------------------------------------------------------------------


def _pool_relabelings(node_name: str, pool_label: str) -> list[dict[str, Any]]:
    return [
        {"sourceLabels": [node_name], "targetLabel": NODE, "action": "replace"},
        {"sourceLabels": [pool_label], "targetLabel": POOL, "action": "replace"},
    ]


def _meta_label(label: str) -> str:
    """Prometheus's service-discovery name of a node label (``gpufleet.io/pool`` -> ``..._gpufleet_io_pool``)."""
    return "__meta_kubernetes_node_label_" + "".join(c if c.isalnum() else "_" for c in label)


def service_monitor(namespace: str, dcgm: DcgmCatalog) -> dict[str, Any]:
    """The ServiceMonitor of the GPU Operator's DCGM exporter Service, with ``node`` and ``pool`` on each series."""
    exporter = dcgm.operator_exporter
    return _service_monitor("gpufleet-dcgm-exporter", namespace, dict(exporter.labels), exporter.port_name, "/metrics")


def _service_monitor(name: str, namespace: str, selector: dict[str, str], port: str, path: str) -> dict[str, Any]:
    """A ServiceMonitor of the exporter Service in ``namespace`` that ``selector`` matches, scraped at ``port`` and
    ``path``, each series with its ``node`` and ``pool`` (the node's metadata attached)."""
    endpoint = {
        "port": port,
        "path": path,
        "interval": SCRAPE_INTERVAL,
        "relabelings": _pool_relabelings("__meta_kubernetes_pod_node_name", _meta_label(POOL_LABEL)),
    }
    return {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "attachMetadata": {"node": True},
            "namespaceSelector": {"matchNames": [namespace]},
            "selector": {"matchLabels": selector},
            "endpoints": [endpoint],
        },
    }


def managed_scrape_config(namespace: str, dcgm: DcgmCatalog) -> dict[str, Any]:
    """The ScrapeConfig of the DCGM exporter AKS runs on managed GPU nodes: every node labelled for it, on its port."""
    managed = dcgm.aks_managed_exporter
    keep = {
        "sourceLabels": [_meta_label(managed.node_label)],
        "regex": managed.node_label_value,
        "action": "keep",
    }
    address = {
        "sourceLabels": ["__meta_kubernetes_node_address_InternalIP"],
        "targetLabel": "__address__",
        "replacement": f"${{1}}:{managed.port}",
        "action": "replace",
    }
    return {
        "apiVersion": SCRAPE_CONFIG_API,
        "kind": "ScrapeConfig",
        "metadata": {"name": "gpufleet-aks-managed-dcgm-exporter", "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "kubernetesSDConfigs": [{"role": "Node"}],
            "metricsPath": "/metrics",
            "scrapeInterval": SCRAPE_INTERVAL,
            "relabelings": [keep, address, *_pool_relabelings("__meta_kubernetes_node_name", _meta_label(POOL_LABEL))],
        },
    }


# -- alerts -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alert:
    """One alerting rule, as the PrometheusRule holds it."""

    name: str
    expr: str
    severity: str
    summary: str
    description: str
    for_: str = "0m"
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity, **dict(self.labels)},
            "annotations": {"summary": self.summary, "description": self.description, **dict(self.annotations)},
        }


WHERE = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) of node {{ $labels.node }} (pool {{ $labels.pool }})"


def health_alerts() -> list[Alert]:
    """Alerts on any GPU the exporters see: the faults that take a GPU out and the conditions that slow it."""
    nvlink = " or ".join(
        f"(increase(DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_TOTAL[10m]) > 0)"
        for kind in ("CRC_FLIT", "CRC_DATA", "RECOVERY")
    )
    throttle = f"rate(DCGM_FI_DEV_{{}}_VIOLATION[{THROTTLE_WINDOW}]) / 1e9 > {THROTTLE_SHARE}"
    share = f"{{{{ $value | humanizePercentage }}}} of the last {THROTTLE_WINDOW}"
    return [
        Alert(
            "GpuFallenOffBus", "DCGM_FI_DEV_XID_ERRORS == 79", "critical", "A GPU has fallen off the bus (XID 79)",
            f"{WHERE} reported XID 79: the driver lost the GPU. Drain the node and reset or replace the GPU.",
        ),
        Alert(
            "GpuDoubleBitEccErrors", "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0", "critical",
            "A GPU had uncorrectable (double-bit) ECC errors",
            f"{WHERE} had {{{{ $value }}}} double-bit ECC errors in 10 minutes: its jobs may have computed on bad "
            "data.",
        ),
        Alert(
            "GpuRowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", "critical", "A GPU failed to remap memory rows",
            f"{WHERE} could not remap a failing memory row: the GPU needs replacing.",
        ),
        Alert(
            "GpuThermalThrottling", throttle.format("THERMAL"), "warning", "A GPU is throttled for heat",
            f"{WHERE} was held down for heat {share}.", for_="10m",
        ),
        Alert(
            "GpuPowerThrottling", throttle.format("POWER"), "warning", "A GPU is throttled for power",
            f"{WHERE} was held down by its power limit {share}.", for_="10m",
        ),
        Alert(
            "GpuNvlinkErrors", nvlink, "warning", "A GPU's NVLink reports errors",
            f"{WHERE} counted NVLink CRC or recovery errors in 10 minutes: check its NVLink and NVSwitch health.",
        ),
    ]  # fmt: skip


def _money(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01'))}"


def idle_alert(pool: PoolPlan, cost: StackCost | None) -> Alert:
    """A node of ``pool`` whose GPUs have been idle for :data:`IDLE_HOURS` hours, with what the node costs."""
    priced = cost.pool(pool.name) if cost is not None else None
    rate = priced.usd_per_node_hour if priced is not None else None
    if rate is None:
        price = f"no price for {pool.vm_size} in the catalog (gpufleet cost)"
        extra: tuple[tuple[str, str], ...] = ()
    else:
        at = "spot" if priced is not None and priced.spot else "pay-as-you-go"
        price = f"${_money(rate)} per hour ({pool.vm_size}, {at}, gpufleet cost)"
        extra = (("usd_per_hour", _money(rate)),)
    expr = f'max by ({NODE}, {POOL}) (max_over_time({ACTIVITY}{{{POOL}="{pool.name}"}}[15m])) < {IDLE_ACTIVITY}'
    return Alert(
        "GpuNodeIdle",
        expr,
        "info",
        f"A GPU node of pool {pool.name} has been idle for {IDLE_HOURS} hours",
        f"No GPU of node {{{{ $labels.node }}}} (pool {pool.name}) has been more than {IDLE_ACTIVITY:.0%} active for "
        f"{IDLE_HOURS} hours. The node costs {price}: scale the pool down or give it work.",
        for_=f"{IDLE_HOURS}h",
        labels=((POOL, pool.name),),
        annotations=extra,
    )


def mig_alerts(pool: PoolPlan) -> list[Alert]:
    """One alert per MIG profile of ``pool``'s layout: a node with another number of its instances than the plan's
    (none counted as 0 on a node whose GPUs report)."""
    if pool.mig is None or not pool.mig.instances_per_node:
        return []
    out = []
    for profile, expected in sorted(pool.mig.instances_per_node.items()):
        counted = f'count by ({NODE}, {POOL}) ({ACTIVITY}{{{POOL}="{pool.name}", GPU_I_PROFILE="{profile}"}})'
        present = f'0 * group by ({NODE}, {POOL}) ({PRESENT}{{{POOL}="{pool.name}"}})'
        out.append(
            Alert(
                "GpuMigLayoutDrift",
                f"({counted} or {present}) != {expected}",
                "warning",
                f"A node of pool {pool.name} has a MIG layout unlike the plan's",
                f"Node {{{{ $labels.node }}}} (pool {pool.name}) has {{{{ $value }}}} MIG instances of profile "
                f"{profile}; the plan's layout has {expected} per node. The MIG manager may have failed to apply "
                "it, or the layout was changed by hand.",
                for_=MIG_DRIFT_FOR,
                labels=((POOL, pool.name), ("profile", profile), ("expected", str(expected))),
            )
        )
    return out


def rule_groups(plan: StackPlan, cost: StackCost | None) -> list[dict[str, Any]]:
    """The PrometheusRule's groups (what ``promtool check rules`` reads): NVIDIA's pools (AMD's: amd_rule_groups)."""
    groups = [{"name": "gpufleet-gpu-health", "rules": [a.rule() for a in health_alerts()]}]
    idle = [idle_alert(p, cost).rule() for p in plan.pools if p.vendor != "amd"]
    if idle:
        groups.append({"name": "gpufleet-gpu-idle-cost", "rules": idle})
    mig = [a.rule() for p in plan.pools for a in mig_alerts(p)]
    if mig:
        groups.append({"name": "gpufleet-mig-layout", "rules": mig})
    return groups


def prometheus_rule(plan: StackPlan, namespace: str, cost: StackCost | None) -> dict[str, Any]:
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": {"name": "gpufleet-gpu-alerts", "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"groups": rule_groups(plan, cost)},
    }


# -- AMD Instinct: the AMD GPU Operator's Device Metrics Exporter ------------------------------------------------


def amd_pools(plan: StackPlan) -> list[PoolPlan]:
    return [p for p in plan.pools if p.vendor == "amd"]


def amd_namespace(plan: StackPlan) -> str:
    """The AMD GPU Operator's namespace: its release's (the plan's ``amd_gpu_software``), else the stack's default."""
    release = plan.cluster.amd_gpu_software if plan.cluster is not None else None
    return release.namespace if release is not None else AMD_GPU_OPERATOR_NAMESPACE


def amd_service_monitor(namespace: str, amd: AmdMetricsCatalog, device_config: str = DEVICE_CONFIG) -> dict[str, Any]:
    """The ServiceMonitor of the exporter Service the AMD GPU Operator makes for ``device_config`` (its name in
    ``app.kubernetes.io/service``), with ``node`` and ``pool`` on each series. The operator's own ServiceMonitor
    (``metricsExporter.prometheus.serviceMonitor``) stays off: it cannot add the pool, and both would scrape twice."""
    exporter = amd.operator_exporter
    selector = {exporter.service_label: exporter.service(device_config)}
    return _service_monitor("gpufleet-amd-metrics-exporter", namespace, selector, exporter.port_name, exporter.path)


AMD_WHERE = (
    "AMD GPU {{ $labels.gpu_id }} (partition {{ $labels.gpu_partition_id }}, serial {{ $labels.serial_number }}) of"
    " node {{ $labels.node }} (pool {{ $labels.pool }})"
)


def amd_health_alerts() -> list[Alert]:
    """Alerts on any AMD GPU the exporter sees: its own health verdict, and the faults behind it."""
    return [
        Alert(
            "GpuUnhealthy", f"{AMD_HEALTH} == 0", "critical", "An AMD GPU is unhealthy",
            f"{AMD_WHERE} is unhealthy by the exporter's health check (uncorrectable ECC errors above its threshold, or"
            " a fatal RAS event): the device plugin no longer offers it. Its node's other alerts say why.",
        ),
        Alert(
            "GpuUncorrectableEccErrors", "gpu_ecc_uncorrect_total > 0", "critical",
            "An AMD GPU had uncorrectable ECC errors",
            f"{AMD_WHERE} has counted {{{{ $value }}}} uncorrectable ECC errors: its jobs may have computed on bad"
            " data. gpufleet's remediation treats it as NVIDIA's Xid 48 (docs/remediation.md).",
        ),
        Alert(
            "GpuFatalRasEvent", 'gpu_afid_errors{severity="fatal"} > 0', "critical",
            "An AMD GPU's last RAS event is fatal",
            f"{AMD_WHERE} logged a fatal RAS event, AFID {{{{ $value }}}} (AMD's AFID Event List names it): the GPU"
            " needs its node rebooted (docs/remediation.md).",
        ),
    ]  # fmt: skip


def amd_idle_alert(pool: PoolPlan, cost: StackCost | None) -> Alert:
    """NVIDIA's idle alert (:func:`idle_alert`: the same words and price) on AMD's activity, a percentage."""
    expr = (
        f'max by ({NODE}, {POOL}) (max_over_time({AMD_ACTIVITY}{{{POOL}="{pool.name}"}}[15m]))'
        f" < {IDLE_ACTIVITY * 100:g}"
    )
    return replace(idle_alert(pool, cost), expr=expr)


def amd_rule_groups(plan: StackPlan, cost: StackCost | None) -> list[dict[str, Any]]:
    """The AMD PrometheusRule's groups."""
    return [
        {"name": "gpufleet-amd-gpu-health", "rules": [a.rule() for a in amd_health_alerts()]},
        {"name": "gpufleet-amd-gpu-idle-cost", "rules": [amd_idle_alert(p, cost).rule() for p in amd_pools(plan)]},
    ]


def amd_monitoring_objects(plan: StackPlan, cost: StackCost | None) -> list[dict[str, Any]]:
    """The AMD pools' scrape and alerts, in the AMD GPU Operator's namespace; none without AMD pools or monitoring."""
    if not enabled(plan) or not amd_pools(plan):
        return []
    namespace = amd_namespace(plan)
    rule = {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": {"name": "gpufleet-amd-gpu-alerts", "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"groups": amd_rule_groups(plan, cost)},
    }
    return [amd_service_monitor(namespace, load_amd_metrics()), rule]


# -- the objects --------------------------------------------------------------------------------------------------


def monitoring_objects(plan: StackPlan, cost: StackCost | None) -> list[dict[str, Any]]:
    """Everything ``gpufleet-monitoring.yaml`` holds; empty when the stack runs no Prometheus operator."""
    if not enabled(plan) or plan.cluster is None:
        return []
    dcgm = load_dcgm_catalog()
    release = plan.cluster.gpu_software or plan.cluster.amd_gpu_software  # None: NVIDIA's; no NVIDIA pool
    if release is None:
        return []
    namespace = release.namespace
    objects = []
    if plan.cluster.gpu_chart == GPU_OPERATOR_CHART:
        objects.append(service_monitor(namespace, dcgm))
    if any(p.gpu_management == "managed" for p in plan.pools):
        objects.append(managed_scrape_config(namespace, dcgm))
    objects.append(prometheus_rule(plan, namespace, cost))
    objects.append(dashboard_configmap(plan, namespace, cost))
    objects += amd_monitoring_objects(plan, cost)
    return objects
