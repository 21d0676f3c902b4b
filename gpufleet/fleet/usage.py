"""What a fleet's GPUs measured over a window, read from Prometheus: the DCGM exporter's series per GPU and per MIG
instance, and kube-state-metrics' pod owners and pending GPU requests where that exporter is scraped too.

Every query is an instant query at the window's end whose range function aggregates on the Prometheus side, so one
number per series comes back whatever the window (7 days at a 30 s scrape are 20,160 samples per series; none of
them travel):

==========  =========================================================================================
now         ``DCGM_FI_DEV_FB_USED`` (the instances that exist at the end, and the pods holding them)
p95         ``quantile_over_time(0.95, DCGM_FI_DEV_FB_USED[W])`` (framebuffer used, MiB)
max         ``max_over_time(DCGM_FI_DEV_FB_USED[W])``
samples     ``count_over_time(DCGM_FI_DEV_FB_USED[W])`` (how much of the window the series covers)
capacity    ``last_over_time(DCGM_FI_DEV_FB_USED[W]) + last_over_time(DCGM_FI_DEV_FB_FREE[W])`` (MiB)
activity    ``avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[W])`` (0-1; MIG instances report it,
            ``DCGM_FI_DEV_GPU_UTIL`` they do not)
owners      ``max by (namespace, pod, owner_kind, owner_name) (last_over_time(kube_pod_owner[W]))``
pending     GPU requests (``kube_pod_container_resource_requests{resource=~"nvidia_com_.+"}``) of pods in phase
            Pending at the end (``kube_pod_status_phase``)
==========  =========================================================================================

A series is one (node, GPU, MIG instance, pod, container): the exporter's labels ``gpu``, ``UUID``,
``GPU_I_PROFILE``, ``GPU_I_ID``, ``Hostname``, ``pod``, ``namespace``, ``container``, with gpufleet's scrape adding
``node`` and ``pool`` (:mod:`gpufleet.kube.monitoring`).

Whose pod: scraped through a ServiceMonitor, a series also gets the exporter's own target labels (``pod``,
``namespace``, ``container``, ``service``, ``endpoint``), and Prometheus keeps the exporter's workload labels as
``exported_pod``, ``exported_namespace``, ``exported_container`` (``honorLabels`` false, the Prometheus operator's
default and gpufleet's). So the workload is ``exported_pod`` where present; a series with a ``service`` label and no
``exported_pod`` is held by nobody (its ``pod`` is the exporter); otherwise (a node scrape: AKS's managed exporter,
no target pod) ``pod`` is the workload's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.catalog.dcgm import load_dcgm_catalog
from gpufleet.fleet.prometheus import Prometheus, Sample, duration_seconds
from gpufleet.kube.monitoring import NODE, POOL

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
HOSTNAME = "Hostname"  # the exporter's label of the node it runs on
POD, NAMESPACE, CONTAINER = "pod", "namespace", "container"
SERVICE = "service"  # a ServiceMonitor target's label: its pod, namespace and container are the exporter's


def queries(window: str) -> dict[str, str]:
    """The PromQL rightsize asks, by name (the table of the module docstring), for a window such as ``7d``."""
    w = f"[{window}]"
    return {
        "now": FB_USED,
        "p95": f"quantile_over_time(0.95, {FB_USED}{w})",
        "max": f"max_over_time({FB_USED}{w})",
        "samples": f"count_over_time({FB_USED}{w})",
        "capacity": f"last_over_time({FB_USED}{w}) + last_over_time({FB_FREE}{w})",
        "activity": f"avg_over_time({ENGINE_ACTIVE}{w})",
        "owners": f"max by (namespace, pod, owner_kind, owner_name) (last_over_time(kube_pod_owner{w}))",
        "ksm": "count(kube_pod_status_phase)",
        "pending": 'sum by (namespace, pod, resource) (kube_pod_container_resource_requests{resource=~"nvidia_com_.+"}'
        ' * on (namespace, pod) group_left () (max by (namespace, pod) (kube_pod_status_phase{phase="Pending"}) == 1))',
    }


@dataclass(frozen=True)
class SeriesUsage:
    """One DCGM series over the window: a whole GPU (``profile`` None) or a MIG instance, with the pod that held it
    (None: nobody)."""

    node: str
    pool: str | None  # gpufleet's pool label (None: the series has none)
    gpu: int
    uuid: str
    profile: str | None  # GPU_I_PROFILE
    instance: str | None  # GPU_I_ID
    namespace: str | None
    pod: str | None
    container: str | None
    p95_mib: float
    max_mib: float
    samples: int
    capacity_mib: float | None
    engine_active: float | None  # the window's mean, 0-1 (None: not reported)
    present: bool  # the series exists at the window's end


@dataclass(frozen=True)
class PendingRequest:
    """A pod Pending at the window's end with a GPU request (kube-state-metrics' resource name, e.g.
    ``nvidia_com_mig_1g_10gb``)."""

    namespace: str
    pod: str
    resource: str
    count: int


@dataclass(frozen=True)
class Usage:
    """What Prometheus answered for one window."""

    url: str
    version: str
    window: str
    window_s: int
    end: float  # Unix seconds
    scrape_s: int  # the scrape interval gpufleet's ServiceMonitor sets (samples expected per window: window / scrape)
    series: tuple[SeriesUsage, ...]
    owners: Mapping[tuple[str, str], tuple[str, str]]  # (namespace, pod) -> (owner kind, owner name)
    pending: tuple[PendingRequest, ...] | None  # None: kube-state-metrics is not scraped (not checked)
    queries: Mapping[str, str]


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def _workload(labels: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """(namespace, pod, container) of the workload holding the series' GPU or instance (the module docstring)."""
    if labels.get(f"exported_{POD}"):
        names = (f"exported_{NAMESPACE}", f"exported_{POD}", f"exported_{CONTAINER}")
    elif labels.get(SERVICE):
        return None, None, None
    else:
        names = (NAMESPACE, POD, CONTAINER)
    namespace, pod, container = (labels.get(name) or None for name in names)
    return namespace, pod, container


def _int(text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        return -1


def measure(
    prometheus: Prometheus,
    window: str,
    window_s: int,
    end: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> Usage:
    """Ask ``prometheus`` every query for the window ending at ``end`` (default: now) and join the answers per
    series. Raises :class:`gpufleet.fleet.prometheus.PrometheusError` when it cannot be asked."""
    from gpufleet.kube.monitoring import SCRAPE_INTERVAL

    version = prometheus.version()
    at = time.time() if end is None else end
    asked = queries(window)
    answers: dict[str, list[Sample]] = {}
    for name, promql in asked.items():
        if progress is not None:
            progress(name)
        answers[name] = prometheus.query(promql, at)
    aggregated = ("p95", "max", "samples", "capacity", "activity")
    value = {name: {_key(s.labels): s.value for s in answers[name]} for name in aggregated}
    present = {_key(s.labels) for s in answers["now"]}
    labels_of = {_key(s.labels): s.labels for s in answers["max"]}
    dcgm_labels = load_dcgm_catalog().labels
    series = []
    for key, labels in labels_of.items():
        node = labels.get(NODE) or labels.get(HOSTNAME) or ""
        namespace, pod, container = _workload(labels)
        series.append(
            SeriesUsage(
                node=node,
                pool=labels.get(POOL) or None,
                gpu=_int(labels.get(dcgm_labels.gpu)),
                uuid=labels.get(dcgm_labels.uuid, ""),
                profile=labels.get(dcgm_labels.mig_profile) or None,
                instance=labels.get(dcgm_labels.mig_instance) or None,
                namespace=namespace,
                pod=pod,
                container=container,
                p95_mib=value["p95"].get(key, value["max"][key]),
                max_mib=value["max"][key],
                samples=int(value["samples"].get(key, 0)),
                capacity_mib=value["capacity"].get(key),
                engine_active=value["activity"].get(key),
                present=key in present,
            )
        )
    owners = {
        (s.labels.get("namespace", ""), s.labels.get("pod", "")): (
            s.labels.get("owner_kind", ""),
            s.labels.get("owner_name", ""),
        )
        for s in answers["owners"]
    }
    pending: tuple[PendingRequest, ...] | None = None
    if answers["ksm"] and answers["ksm"][0].value > 0:
        pending = tuple(
            PendingRequest(
                s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("resource", ""), int(s.value)
            )
            for s in answers["pending"]
        )
    return Usage(
        url=prometheus.url,
        version=version,
        window=window,
        window_s=window_s,
        end=at,
        scrape_s=duration_seconds(SCRAPE_INTERVAL),
        series=tuple(sorted(series, key=lambda s: (s.node, s.gpu, s.instance or "", s.pod or ""))),
        owners=owners,
        pending=pending,
        queries=asked,
    )
