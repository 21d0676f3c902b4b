"""A real Prometheus for tests: series shaped like the DCGM exporter's (and kube-state-metrics'), written as
OpenMetrics, turned into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics``, and served by Debian's
``prometheus`` (both from ``make setup``: scripts/install_promtool.sh) on 127.0.0.1; stopped on exit.

The series are a test double of a fleet, named as such: names, types and labels as the DCGM exporter publishes them
(gpufleet/catalog/dcgm_metrics.yaml cites its default CSV and its label code), scraped through a ServiceMonitor with
``honorLabels`` false, as gpufleet's is: the workload's labels are ``exported_pod``, ``exported_namespace`` and
``exported_container``; ``pod``, ``namespace``, ``container``, ``service``, ``endpoint`` are the exporter's own
target's; gpufleet's relabelling adds ``node`` and ``pool``. kube-state-metrics' ``kube_pod_owner``,
``kube_pod_status_phase`` and ``kube_pod_container_resource_requests`` are as its documentation lists them.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEP_S = 30  # gpufleet's ServiceMonitor scrape interval


def tool(name: str) -> str | None:
    """``promtool`` or ``prometheus`` from the virtualenv (make setup), else from PATH; None when neither."""
    local = REPO / ".venv" / "bin" / name
    return str(local) if local.exists() else shutil.which(name)


@dataclass
class Instance:
    """One MIG instance (or whole GPU: ``profile`` None) of a node, and who holds it."""

    node: str
    pool: str
    gpu: int
    uuid: str
    profile: str | None
    gi: int | None
    namespace: str | None = None  # the workload's
    pod: str | None = None
    container: str | None = None
    memory_mib: Callable[[float], float] = lambda t: 13.0  # an idle instance: its CUDA-less footprint
    capacity_mib: float = 40_192.0
    activity: Callable[[float], float] = lambda t: 0.0
    start: float | None = None  # first sample (None: the window's start)


@dataclass
class Pod:
    """kube-state-metrics' view of a pod: its owner, and whether it is Pending with a GPU request."""

    namespace: str
    pod: str
    owner_kind: str
    owner_name: str
    pending_resource: str | None = None  # e.g. nvidia_com_mig_3g_40gb


@dataclass
class Fleet:
    instances: list[Instance] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)


def _labels(pairs: dict[str, str | None]) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in pairs.items() if v is not None)
    return "{" + body + "}"


def _dcgm_labels(i: Instance, exporter_pod: str) -> str:
    labels: dict[str, str | None] = {
        "gpu": str(i.gpu),
        "UUID": i.uuid,
        "pci_bus_id": f"00000001:{i.gpu:02X}:00.0",
        "device": f"nvidia{i.gpu}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": i.node,
        "GPU_I_PROFILE": i.profile,
        "GPU_I_ID": None if i.gi is None else str(i.gi),
        "DCGM_FI_DRIVER_VERSION": "595.45.04",
        "exported_namespace": i.namespace,
        "exported_pod": i.pod,
        "exported_container": i.container,
        # the ServiceMonitor target's labels and gpufleet's relabelling
        "container": "nvidia-dcgm-exporter",
        "endpoint": "gpu-metrics",
        "instance": f"{i.node}:9400",
        "job": "nvidia-dcgm-exporter",
        "namespace": "gpu-operator",
        "pod": exporter_pod,
        "service": "nvidia-dcgm-exporter",
        "node": i.node,
        "pool": i.pool,
    }
    return _labels(labels)


def openmetrics(fleet: Fleet, start: float, end: float, step: int = STEP_S) -> Iterator[str]:
    """The fleet's samples from ``start`` to ``end`` (Unix seconds, both included) every ``step`` s, as OpenMetrics
    lines (metric families contiguous, each series' samples in time order, ``# EOF`` last)."""
    times = [start + k * step for k in range(int((end - start) // step) + 1)]
    exporters = {i.node: f"nvidia-dcgm-exporter-{zlib.crc32(i.node.encode()) % 10**5:05d}" for i in fleet.instances}
    families = (
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda i, t: i.memory_mib(t)),
        ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda i, t: i.capacity_mib - i.memory_mib(t)),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", lambda i, t: i.activity(t)),
    )
    for name, help_text, value in families:
        yield f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"
        for i in fleet.instances:
            labels = _dcgm_labels(i, exporters[i.node])
            first = start if i.start is None else i.start
            yield "".join(f"{name}{labels} {value(i, t):.6g} {t:.0f}\n" for t in times if t >= first)
    ksm = '{job="kube-state-metrics",namespace="%s",pod="%s"'
    yield "# HELP kube_pod_owner Information about the Pod's owner.\n# TYPE kube_pod_owner gauge\n"
    for p in fleet.pods:
        labels = (ksm % (p.namespace, p.pod)) + f',owner_kind="{p.owner_kind}",owner_name="{p.owner_name}"}}'
        yield "".join(f"kube_pod_owner{labels} 1 {t:.0f}\n" for t in times)
    yield "# HELP kube_pod_status_phase The pods current phase.\n# TYPE kube_pod_status_phase gauge\n"
    for p in fleet.pods:
        for phase in ("Pending", "Running"):
            on = (phase == "Pending") == (p.pending_resource is not None)
            labels = (ksm % (p.namespace, p.pod)) + f',phase="{phase}"}}'
            yield "".join(f"kube_pod_status_phase{labels} {int(on)} {t:.0f}\n" for t in times)
    yield (
        "# HELP kube_pod_container_resource_requests The number of requested request resource by a container.\n"
        "# TYPE kube_pod_container_resource_requests gauge\n"
    )
    for p in fleet.pods:
        if p.pending_resource is not None:
            labels = (
                ksm % (p.namespace, p.pod)
            ) + f',container="main",resource="{p.pending_resource}",unit="integer"}}'
            yield "".join(f"kube_pod_container_resource_requests{labels} 1 {t:.0f}\n" for t in times)
    yield "# EOF\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus_serving(lines: Iterator[str], workdir: Path) -> Iterator[str]:
    """Build a TSDB from ``lines`` (OpenMetrics) in ``workdir`` and serve it; yields the base URL. The server is
    stopped (by its PID) on exit, also when the test fails."""
    promtool, server = tool("promtool"), tool("prometheus")
    assert promtool and server, (
        "promtool and prometheus are not installed: run make setup (scripts/install_promtool.sh)"
    )
    source, data = workdir / "series.om", workdir / "data"
    with source.open("w", encoding="utf-8") as f:
        f.writelines(lines)
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 30s\n", encoding="utf-8")
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            server,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=36500d",  # the recorded series are dated: never expired
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


# -- the worked example of docs/rightsize.md --------------------------------------------------------------------

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' random name suffixes
EXAMPLE_STACK = REPO / "examples" / "rightsize" / "Pulumi.dev-eastus.yaml"
EXAMPLE_END = 1_796_040_000  # 2026-11-30T12:00:00Z
EXAMPLE_WINDOW = "2h"
EXAMPLE_NODES = [f"aks-infer1c2a-31415926-vmss00000{n}" for n in range(4)]
H100_3G_MIB = 40_192.0  # a 3g.40gb instance's framebuffer (39.25 GiB usable)


def _wave(low: float, high: float, period_s: float, phase: float = 0.0) -> Callable[[float], float]:
    """A value between ``low`` and ``high``, rising and falling with ``period_s``: a day of traffic, compressed."""
    return lambda t: low + (high - low) * (0.5 + 0.5 * math.sin(2 * math.pi * t / period_s + phase))


def example_fleet() -> Fleet:
    """The pool ``infer`` of the example stack: 4 nodes x 8 H100 x 2 x 3g.40gb = 64 instances, 38 held by:

    - ml-inference Deployment chat: 24 pods using 6.6-7.6 GiB (8.2 GB at most), 8 % busy;
    - ml-inference Deployment embed: 8 pods using 12.2-14.2 GiB, 45 % busy;
    - ml-inference StatefulSet rerank: 4 pods using 29.3-32.2 GiB, 60 % busy, and a fifth pod Pending for a 3g.40gb;
    - ml-batch Job summarize: 2 pods peaking at 38.1 GiB of 39.25, 90 % busy;

    placed round-robin over the nodes (as the scheduler spreads them), the other 26 instances idle."""
    slots = [(node, gpu, gi) for gi in (1, 2) for gpu in range(8) for node in EXAMPLE_NODES]
    slots.sort(key=lambda s: (s[1], s[2], s[0]))  # node by node for each GPU and instance: round-robin
    fleet = Fleet()
    holders: list[tuple[str, str, str, str, Callable[[float], float], Callable[[float], float]]] = []
    rs = "chat-7d9f8b6c5d"
    for n in range(24):
        pod = f"{rs}-{''.join(ALPHABET[(7 * n + 5 * j) % len(ALPHABET)] for j in range(5))}"
        fleet.pods.append(Pod("ml-inference", pod, "ReplicaSet", rs))
        holders.append(("ml-inference", pod, "server", "chat", _wave(6800, 7800, 3600, n), _wave(0.05, 0.11, 1800, n)))
    rs = "embed-5c6b7d8f9"
    for n in range(8):
        pod = f"{rs}-{'bcdfghjk'[n]}wxyz"
        fleet.pods.append(Pod("ml-inference", pod, "ReplicaSet", rs))
        holders.append(("ml-inference", pod, "server", "embed", _wave(12_500, 14_500, 2400, n), _wave(0.4, 0.5, 900)))
    for n in range(4):
        pod = f"rerank-{n}"
        fleet.pods.append(Pod("ml-inference", pod, "StatefulSet", "rerank"))
        holders.append(
            ("ml-inference", pod, "server", "rerank", _wave(30_000, 33_000, 3000, n), _wave(0.55, 0.65, 600))
        )
    fleet.pods.append(Pod("ml-inference", "rerank-4", "StatefulSet", "rerank", "nvidia_com_mig_3g_40gb"))
    for n in range(2):
        pod = f"summarize-{'bcd'[n]}q7rt"
        fleet.pods.append(Pod("ml-batch", pod, "Job", "summarize"))
        holders.append(("ml-batch", pod, "worker", "summarize", _wave(30_000, 39_000, 1200, n), _wave(0.85, 0.95, 300)))
    for k, (node, gpu, gi) in enumerate(slots):
        instance = Instance(node, "infer", gpu, f"GPU-{EXAMPLE_NODES.index(node):02d}{gpu:02d}-h100", "3g.40gb", gi)
        instance.capacity_mib = H100_3G_MIB
        if k < len(holders):
            namespace, pod, container, _owner, memory, activity = holders[k]
            instance.namespace, instance.pod, instance.container = namespace, pod, container
            instance.memory_mib, instance.activity = memory, activity
        fleet.instances.append(instance)
    return fleet
