"""gpufleet rightsize's rules without a server: workloads judged from measured series, owners, the pool's node plan,
the refusals, the stack edit, and the Prometheus client's own checks (tests/unit/fleet/test_rightsize_prometheus.py
runs the command against a real Prometheus)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpufleet.azure.cost import stack_cost
from gpufleet.catalog import load_catalog
from gpufleet.fleet import rightsize as rs
from gpufleet.fleet.prometheus import Prometheus, PrometheusError, parse_window
from gpufleet.fleet.usage import PendingRequest, SeriesUsage, Usage, _workload
from gpufleet.mig.placement import as_layout
from gpufleet.mig.repack import FleetGpu, repack_model
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from tests.prometheus_tsdb import EXAMPLE_STACK

CATALOG = load_catalog()
H100 = CATALOG.gpu("H100-SXM5-80GB")
GIB = 1024.0  # MiB


def series(node: str = "n0", pod: str | None = "app-0", p95: float = 5000, peak: float = 5500, **kw) -> SeriesUsage:
    base = {
        "node": node,
        "pool": "infer",
        "gpu": 0,
        "uuid": "GPU-0",
        "profile": "3g.40gb",
        "instance": "1",
        "namespace": "ml" if pod else None,
        "pod": pod,
        "container": "main" if pod else None,
        "p95_mib": p95,
        "max_mib": peak,
        "samples": 240,
        "capacity_mib": 40192.0,
        "engine_active": 0.5,
        "present": True,
    }
    base.update(kw)
    return SeriesUsage(**base)


def usage(items: list[SeriesUsage], pending=()) -> Usage:
    return Usage(
        url="http://prometheus.test",
        version="2.42.0",
        window="2h",
        window_s=7200,
        end=0.0,
        scrape_s=30,
        series=tuple(items),
        owners={},
        pending=tuple(pending),
        queries={},
    )


@pytest.fixture(scope="module")
def example():
    loaded = load_stack(EXAMPLE_STACK)
    assert loaded.ok
    return loaded.stack, plan_stack(loaded.stack, CATALOG), stack_cost(loaded.stack, CATALOG)


@pytest.mark.parametrize(
    ("has", "p95_gib", "peak_gib", "pending", "verdict", "proposal"),
    [
        ("3g.40gb", 7.0, 7.5, 0, "over-provisioned", "1g.10gb"),  # 7.7 GiB needed, 9.62 usable
        ("3g.40gb", 8.9, 9.0, 0, "over-provisioned", "1g.20gb"),  # 9.8 GiB: p95 + 10 % tops 1g.10gb
        ("3g.40gb", 5.0, 9.7, 0, "over-provisioned", "1g.20gb"),  # the peak decides
        ("3g.40gb", 30.0, 32.0, 0, "right", "3g.40gb"),
        ("3g.40gb", 30.0, 37.5, 0, "starved", "7g.80gb"),  # within 5 % of 39.25: next larger memory
        ("3g.40gb", 30.0, 32.0, 2, "starved", "3g.40gb"),  # pods pending: more of the same
        ("7g.80gb", 70.0, 79.0, 0, "starved", "7g.80gb"),  # nothing larger
        ("1g.10gb", 3.0, 3.5, 0, "right", "1g.10gb"),  # already the smallest
    ],
)
def test_workloads_are_judged_by_their_measured_memory(has, p95_gib, peak_gib, pending, verdict, proposal):
    found = rs._judge(H100, has, p95_gib * GIB, peak_gib * GIB, pending, 3)
    assert (found[0], found[1]) == (verdict, proposal)
    assert found[2] == 3 + pending


@pytest.mark.parametrize(
    ("namespace", "pod", "owners", "owner"),
    [
        ("a", "chat-7d9f8b6c5d-x2k4q", {}, "Deployment/chat"),
        (
            "a",
            "chat-7d9f8b6c5d-x2k4q",
            {("a", "chat-7d9f8b6c5d-x2k4q"): ("ReplicaSet", "chat-7d9f8b6c5d")},
            "Deployment/chat",
        ),
        ("a", "db-2", {}, "StatefulSet/db"),
        ("a", "train-job-abcde", {("a", "train-job-abcde"): ("Job", "train-job")}, "Job/train-job"),
        ("a", "lonely", {}, "Pod/lonely"),
    ],
)
def test_the_owner_of_a_pod(namespace, pod, owners, owner):
    assert rs.owner_of(namespace, pod, owners) == owner


def test_the_workload_labels_of_a_servicemonitor_scrape_are_the_exported_ones():
    scraped = {"pod": "nvidia-dcgm-exporter-abcde", "namespace": "gpu-operator", "service": "nvidia-dcgm-exporter"}
    assert _workload(scraped) == (None, None, None)  # an idle instance: the pod is the exporter's
    held = {**scraped, "exported_pod": "chat-1", "exported_namespace": "ml", "exported_container": "server"}
    assert _workload(held) == ("ml", "chat-1", "server")
    assert _workload({"pod": "chat-1", "namespace": "ml"}) == ("ml", "chat-1", None)  # a node scrape (AKS managed)


def test_pending_requests_name_their_slice():
    assert rs.pending_resource(H100, "nvidia_com_mig_1g_10gb") == "1g.10gb"
    assert rs.pending_resource(H100, "nvidia_com_mig_1g_10gb_me") == "1g.10gb+me"
    assert rs.pending_resource(H100, "nvidia_com_gpu") == rs.WHOLE
    assert rs.pending_resource(H100, "cpu") is None


def test_the_node_plan_uses_the_fewest_nodes_and_the_repack():
    before = tuple(as_layout({"3g.40gb": 2}, H100.mig) for _ in range(8))
    demand = {"1g.10gb": 24, "1g.20gb": 8, "3g.40gb": 5, "7g.80gb": 2}
    nodes, repack = rs.node_plan(H100, before, demand, floor=1)
    fleet = [FleetGpu("node", i, layout) for i, layout in enumerate(before)]
    # one node fewer cannot hold its share without more GPUs
    fewer = repack_model(H100, fleet, {p: math.ceil(c / (nodes - 1)) for p, c in demand.items()})
    assert fewer.added > 0
    assert repack.added == 0 and repack.changed == 4
    # nothing demanded: the floor
    assert rs.node_plan(H100, before, {}, floor=0) == (0, None)


def test_nothing_measured_is_refused(example):
    stack, plan, cost = example
    with pytest.raises(rs.RightsizeError, match="no DCGM exporter series"):
        rs.propose(stack, plan, CATALOG, cost, usage([]))


def test_a_pod_on_a_node_the_stack_does_not_know_is_refused(example):
    stack, plan, cost = example
    stranger = series(node="aks-other1234-1-vmss000000", pool=None)
    with pytest.raises(rs.RightsizeError, match="which no pool of stack dev-eastus has"):
        rs.propose(stack, plan, CATALOG, cost, usage([series(), stranger]))
    # the same node without a workload is left out, and said
    idle = replace(stranger, pod=None, namespace=None, container=None)
    proposal = rs.propose(stack, plan, CATALOG, cost, usage([series(), idle]))
    assert any("outside the stack's pools" in note for note in proposal.notes)


def test_a_mig_pool_without_mig_labels_is_refused(example):
    stack, plan, cost = example
    with pytest.raises(rs.RightsizeError, match="no GPU_I_PROFILE"):
        rs.propose(stack, plan, CATALOG, cost, usage([series(profile=None, instance=None)]))


def test_partial_data_is_said(example):
    stack, plan, cost = example
    proposal = rs.propose(stack, plan, CATALOG, cost, usage([series(samples=60)]))
    assert any("measured for 25% of the 2h window" in note for note in proposal.notes)
    assert any("1 node(s) measured, the stack says 4" in note for note in proposal.notes)


def test_no_change_leaves_the_stack_file_byte_for_byte(example):
    stack, plan, cost = example
    # a pool that needs what it has: right-sized workloads filling two halves of every GPU of 4 nodes
    items = [
        series(node=f"n{n}", pod=f"db-{n}{g}{i}", gpu=g, instance=str(i), p95=30 * GIB, peak=32 * GIB)
        for n in range(4)
        for g in range(8)
        for i in (1, 2)
    ]
    proposal = rs.propose(stack, plan, CATALOG, cost, usage(items))
    (pool,) = proposal.pools
    assert not pool.changes and pool.gpus_freed == 0 and pool.drains == ()
    text = EXAMPLE_STACK.read_text()
    assert rs.edit_stack(text, proposal.pools) == text


def test_window_durations():
    assert parse_window("7d") == 7 * 86400
    assert parse_window("1d12h") == 36 * 3600
    for bad in ("", "7", "seven days", "30s", "1h7d"):
        with pytest.raises(ValueError):
            parse_window(bad)


def test_the_client_takes_credentials_from_the_environment_only():
    assert Prometheus("http://p:9090", env={})._headers.get("Authorization") is None
    token = Prometheus("http://p:9090", env={"GPUFLEET_PROMETHEUS_TOKEN": "t0k"})
    assert token._headers["Authorization"] == "Bearer t0k"
    basic = Prometheus("https://p", env={"GPUFLEET_PROMETHEUS_USER": "u", "GPUFLEET_PROMETHEUS_PASSWORD": "p"})
    assert basic._headers["Authorization"] == "Basic dTpw"
    with pytest.raises(PrometheusError, match="needs both"):
        Prometheus("https://p", env={"GPUFLEET_PROMETHEUS_USER": "u"})
    with pytest.raises(PrometheusError, match="not a Prometheus URL"):
        Prometheus("prometheus:9090", env={})


def test_a_profile_the_pools_gpu_has_not_is_refused(example):
    stack, plan, cost = example
    with pytest.raises(rs.RightsizeError, match=r"reports MIG instances 1g\.12gb, which H100-SXM5-80GB"):
        rs.propose(stack, plan, CATALOG, cost, usage([series(profile="1g.12gb")]))


def test_mig_drift_and_requests_waiting_without_a_pod_are_said(example):
    stack, plan, cost = example
    waiting = [PendingRequest("ml", "batch-job-xyz", "nvidia_com_mig_1g_10gb", 1)]
    proposal = rs.propose(stack, plan, CATALOG, cost, usage([series()], pending=waiting))
    (pool,) = proposal.pools
    assert pool.drifted == ("n0",)  # one instance measured where the stack's layout has sixteen
    assert any("do not have the stack's MIG layout" in note for note in proposal.notes)
    assert any("1 pending GPU request(s) of workloads with no pod" in note for note in proposal.notes)
    assert pool.demand_after == {"1g.10gb": 1}  # the waiting request is said, not sized
