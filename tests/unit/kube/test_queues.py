"""Kueue queues (gpufleet/kube/queues.py, docs/queues.md): the objects pass Kueue's vendored v1beta2 CRD schemas
(tests/fixtures/crds/kueue, see its PROVENANCE.md), the teams' quotas add up to the plan's GPUs and MIG instances,
a flavor's node selector reaches its own pool's nodes and no other's, and every team can queue from its namespace."""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.catalog.releases import load_releases
from gpufleet.kube import amd_resources, charts
from gpufleet.kube.dra import KUEUE_RESOURCES
from gpufleet.kube.labels import HOST_GROUP_LABEL
from gpufleet.kube.queues import KueuePlan, kueue_plan, split
from gpufleet.kube.scheduling import NodeShape, Placement, why_not
from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import StackPlan
from gpufleet.spec.load import load_stack
from tests.charts import CHARTS_DIR, crd_errors, crd_validator, needs_charts, stack_variant
from tests.conftest import FIXTURES, REPO, TODAY, cli

KUEUE_CRDS = FIXTURES / "crds" / "kueue"
STACKS = sorted(REPO.glob("Pulumi.*.yaml")) + sorted((REPO / "examples").glob("*/Pulumi.*.yaml"))
PROD = REPO / "Pulumi.prod-westeurope.yaml"
DRA = REPO / "examples" / "dra" / "Pulumi.dev-eastus2.yaml"
ONPREM = REPO / "examples" / "baremetal" / "Pulumi.prod-onprem.yaml"


@functools.cache
def _validators() -> dict[str, Any]:
    """Kind -> the validator of the CRD version gpufleet writes (the catalog's Kueue API)."""
    out = {}
    for path in sorted(KUEUE_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        (version,) = [v for v in crd["spec"]["versions"] if f"{crd['spec']['group']}/{v['name']}" == _api()]
        assert version["served"] and version["storage"], f"{path.name}: {_api()} is not Kueue's stored version"
        out[crd["spec"]["names"]["kind"]] = crd_validator(version["schema"]["openAPIV3Schema"])
    return out


def _api() -> str:
    return load_releases().kueue.api


def _plan(path: Path, catalog: Any) -> StackPlan:
    loaded = load_stack(path, today=TODAY)
    assert loaded.stack is not None, [str(d) for d in loaded.diagnostics]
    return plan_stack(loaded.stack, catalog)


def _variant(path: Path, catalog: Any, edit: Any) -> StackPlan:
    """The plan of a copy of a stack file changed by ``edit`` (a function on its YAML ``config``)."""
    return plan_stack(stack_variant(path, edit), catalog)


def _queues(plan: StackPlan) -> KueuePlan:
    queues = kueue_plan(plan)
    assert queues is not None
    return queues


def _of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _totals(objects: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> the nominal quota of all ClusterQueues together."""
    out: Counter[tuple[str, str]] = Counter()
    for queue in _of(objects, "ClusterQueue"):
        for group in queue["spec"].get("resourceGroups", []):
            for flavor in group["flavors"]:
                for r in flavor["resources"]:
                    out[(flavor["name"], r["name"])] += r["nominalQuota"]
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.stem.removeprefix("Pulumi."))
def test_every_example_stacks_kueue_objects_pass_kueues_crd_schemas(path, catalog):
    queues = kueue_plan(_plan(path, catalog))
    if queues is None:
        assert not any(g.gpu_model for g in _plan(path, catalog).host_groups)  # lab-local: no GPUs to queue
        return
    objects = queues.objects()
    assert {o["kind"] for o in objects} >= {"ResourceFlavor", "ClusterQueue"}
    for obj in objects:
        assert obj["apiVersion"] == _api()
        assert crd_errors(_validators()[obj["kind"]], obj) == [], (obj["kind"], obj["metadata"]["name"])
    # the CEL rules the schema check does not run, and the references between the objects
    flavors = {o["metadata"]["name"] for o in _of(objects, "ResourceFlavor")}
    queues_by_name = {o["metadata"]["name"]: o for o in _of(objects, "ClusterQueue")}
    for queue in queues_by_name.values():
        for group in queue["spec"].get("resourceGroups", []):
            assert all(len(f["resources"]) == len(group["coveredResources"]) for f in group["flavors"])
            assert all([r["name"] for r in f["resources"]] == group["coveredResources"] for f in group["flavors"])
            assert {f["name"] for f in group["flavors"]} <= flavors
    for local in _of(objects, "LocalQueue"):
        assert local["spec"]["clusterQueue"] in queues_by_name


def test_prod_quotas_are_the_pools_gpus_and_mig_instances_split_three_to_one(catalog):
    objects = _queues(_plan(PROD, catalog)).objects()
    # h100mig: up to 6 nodes (autoscaling max) of 8 H100s, GPUs 0-3 as 2 x 1g.10gb + 2g.20gb + 3g.40gb, 4-7 as
    # 2 x 3g.40gb: per node 8 1g.10gb, 4 2g.20gb, 12 3g.40gb; h100train: 4 nodes x 8 whole GPUs
    assert _totals(objects) == {
        ("h100mig", "nvidia.com/mig-1g.10gb"): 48,
        ("h100mig", "nvidia.com/mig-2g.20gb"): 24,
        ("h100mig", "nvidia.com/mig-3g.40gb"): 72,
        ("h100train", "nvidia.com/gpu"): 32,
    }
    quotas = {
        q["metadata"]["name"]: {
            (f["name"], r["name"]): r["nominalQuota"]
            for f in q["spec"]["resourceGroups"][0]["flavors"]
            for r in f["resources"]
        }
        for q in _of(objects, "ClusterQueue")
    }
    assert quotas["training"][("h100train", "nvidia.com/gpu")] == 24
    assert quotas["inference"][("h100train", "nvidia.com/gpu")] == 8
    assert quotas["training"][("h100mig", "nvidia.com/mig-3g.40gb")] == 54
    assert quotas["inference"][("h100mig", "nvidia.com/mig-3g.40gb")] == 18
    assert {q["spec"]["cohortName"] for q in _of(objects, "ClusterQueue")} == {"gpufleet"}  # they borrow


def _chart_strategy(plan: StackPlan) -> str | None:
    """The MIG strategy in the values the cluster's GPU chart is installed with (either chart's key)."""
    assert plan.cluster is not None
    values = plan.cluster.gpu_software.values
    return values.get("migStrategy") or (values.get("mig") or {}).get("strategy")


def _expected_capacity(plan: StackPlan) -> dict[tuple[str, str], int]:
    """What the plan's pools hold at their maximum size, counted from the plan's own MIG and sharing fields."""
    out: dict[tuple[str, str], int] = {}
    amd = [p for p in plan.pools if p.vendor == "amd" and p.advertiser != "none"]
    strategy = "mixed" if any(p.amd_partitions for p in amd) else "single"
    for pool in plan.pools:
        nodes = pool.nodes.max
        replicas = pool.sharing.replicas or 1
        if pool.vendor == "amd":  # AMD's device plugin's names (tests/unit/kube/test_queues_amd.py checks them)
            resources = amd_resources.node_resources(pool.amd_partitions, int(pool.gpus_per_node), strategy) or {}
            out |= {(pool.name, r): n * nodes for r, n in resources.items()}
        elif pool.advertiser == "dra":
            instances = sum((pool.mig.instances_per_node or {}).values()) if pool.mig else 0
            whole = pool.mig.whole_gpus if pool.mig else int(pool.gpus_per_node)
            out[(pool.name, KUEUE_RESOURCES["gpu.nvidia.com"])] = (whole or 0) * nodes
            out[(pool.name, KUEUE_RESOURCES["mig.nvidia.com"])] = instances * nodes
        elif pool.mig is None:
            out[(pool.name, "nvidia.com/gpu")] = int(pool.gpus_total["max"]) * replicas
        else:  # the strategy of the device plugin: AKS's own on a managed pool, else the one the chart installs
            strategy = pool.mig.strategy if pool.gpu_management == "managed" else _chart_strategy(plan)
            if strategy == "single":
                out[(pool.name, "nvidia.com/gpu")] = sum(pool.mig.instances_per_node.values()) * nodes * replicas
            else:
                for profile, count in (pool.mig.instances_per_node or {}).items():
                    out[(pool.name, f"nvidia.com/mig-{profile}")] = count * nodes
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("path", [p for p in STACKS if "lab-local" not in p.name and "onprem" not in p.name])
def test_the_teams_quotas_add_up_to_the_plans_gpus_and_mig_instances(path, catalog):
    plan = _plan(path, catalog)
    assert _totals(_queues(plan).objects()) == _expected_capacity(plan)


def test_bare_metal_quotas_count_the_groups_hosts_and_leave_vm_groups_out(catalog):
    queues = _queues(_plan(ONPREM, catalog))
    assert _totals(queues.objects()) == {("h100", "nvidia.com/gpu"): 16, ("l40s", "nvidia.com/gpu"): 4}
    assert {s.target: s.why for s in queues.skipped} == {
        "h100vm": "its GPUs go to VMs (vm-passthrough), not to containers",
        "l40svgpu": "its GPUs go to VMs (vm-vgpu), not to containers",
    }


def test_dra_quotas_use_the_device_class_mappings_resource_names(catalog):
    queues = _queues(_plan(DRA, catalog))
    assert set(queues.resources) == set(KUEUE_RESOURCES.values())
    # h100: 4 nodes x 1 whole H100 NVL; h100mig: 4 nodes x 2 MIG devices; gb200: 18 nodes x 4 GPUs
    assert _totals(queues.objects()) == {
        ("h100", "nvidia.com/gpu"): 4,
        ("h100mig", "nvidia.com/mig"): 8,
        ("gb200", "nvidia.com/gpu"): 72,
    }


def _only_on(queues: KueuePlan, targets: list[charts.Target]) -> dict[str, list[str]]:
    """Flavor -> the targets a pod admitted with it can be scheduled on (its nodeSelector and tolerations, plus a
    toleration of the flavor's nodeTaints, which the workload brings itself)."""
    out = {}
    for flavor in queues.objects():
        if flavor["kind"] != "ResourceFlavor":
            continue
        spec = flavor["spec"]
        own = [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in spec.get("nodeTaints", [])]
        placement = Placement.from_pod_spec(
            {"nodeSelector": spec["nodeLabels"], "tolerations": spec.get("tolerations", []) + own}
        )
        out[flavor["metadata"]["name"]] = [t.name for t in targets if not why_not(placement, t.node)]
    return out


@pytest.mark.parametrize("path", [p for p in STACKS if "lab-local" not in p.name and "onprem" not in p.name])
def test_a_pod_admitted_with_a_pools_flavor_lands_on_that_pools_nodes_only(path, catalog):
    plan = _plan(path, catalog)
    assert plan.cluster is not None
    targets = charts.stack_targets(plan, plan.cluster.gpu_chart)
    assert _only_on(_queues(plan), targets) == {p.name: [p.name] for p in plan.pools if p.advertiser != "none"}


def test_a_spot_flavor_needs_the_workloads_own_toleration(catalog):
    plan = _plan(REPO / "Pulumi.prod-eastus.yaml", catalog)
    flavor = next(o for o in _queues(plan).objects() if o["metadata"]["name"] == "t4spot")
    node = next(t.node for t in charts.stack_targets(plan, plan.cluster.gpu_chart) if t.name == "t4spot")
    admitted = Placement.from_pod_spec({"nodeSelector": flavor["spec"]["nodeLabels"], **flavor["spec"]})
    assert why_not(admitted, node) == ["taint kubernetes.azure.com/scalesetpriority=spot:NoSchedule not tolerated"]
    assert flavor["spec"]["nodeTaints"] == [
        {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
    ]


def test_a_host_groups_flavor_lands_on_its_hosts_once_they_carry_the_group_label(catalog):
    plan = _plan(ONPREM, catalog)
    targets = charts.stack_targets(plan, "gpu-operator")
    assert _only_on(_queues(plan), targets) == {"h100": [], "l40s": []}  # gpufleet labels no node with the group
    labelled = [
        charts.Target(t.name, t.kind, NodeShape(t.name, {**t.node.labels, HOST_GROUP_LABEL: t.name}), t.gpu)
        for t in targets
    ]
    assert _only_on(_queues(plan), labelled) == {"h100": ["h100"], "l40s": ["l40s"]}


def test_every_team_queues_from_its_own_namespace_only(catalog):
    plan = _plan(PROD, catalog)
    objects = _queues(plan).objects()
    locals_ = {o["metadata"]["namespace"]: o["spec"]["clusterQueue"] for o in _of(objects, "LocalQueue")}
    assert locals_ == {"ml-training": "training", "ml-inference": "inference"}
    selectors = {o["metadata"]["name"]: o["spec"]["namespaceSelector"] for o in _of(objects, "ClusterQueue")}
    assert selectors == {
        "training": {"matchLabels": {"kubernetes.io/metadata.name": "ml-training"}},
        "inference": {"matchLabels": {"kubernetes.io/metadata.name": "ml-inference"}},
    }


def test_without_teams_one_queue_open_to_every_namespace_holds_everything(catalog):
    plan = _variant(PROD, catalog, lambda config: config.pop("gpufleet:teams"))
    objects = _queues(plan).objects()
    (queue,) = _of(objects, "ClusterQueue")
    assert queue["metadata"]["name"] == "gpufleet" and queue["spec"]["namespaceSelector"] == {}
    assert _of(objects, "LocalQueue") == []
    assert _totals(objects)[("h100train", "nvidia.com/gpu")] == 32


def test_teams_in_separate_cohorts_lend_nothing(catalog):
    objects = _queues(_plan(REPO / "Pulumi.dev-westeurope.yaml", catalog)).objects()
    assert {o["metadata"]["name"]: o["spec"]["cohortName"] for o in _of(objects, "ClusterQueue")} == {
        "research": "research",
        "platform": "platform",
    }


def _single_layout(config: Any) -> None:
    pool = config["gpufleet:aks"]["gpu_pools"][0]
    pool["mig"]["devices"] = [{"gpus": "all", "profiles": {"3g.40gb": 2}}]


def test_a_single_strategy_cluster_advertises_mig_instances_as_gpus(catalog):
    plan = _variant(PROD, catalog, _single_layout)
    assert plan.cluster.mig_strategy == "single"
    # 6 nodes x 8 GPUs x 2 3g.40gb, counted as nvidia.com/gpu (the h100mig flavor keeps them apart from whole GPUs)
    assert _totals(_queues(plan).objects()) == {("h100mig", "nvidia.com/gpu"): 96, ("h100train", "nvidia.com/gpu"): 32}


def test_a_single_layout_in_a_mixed_cluster_is_advertised_by_profile(catalog):
    def edit(config: Any) -> None:
        _single_layout(config)
        pools = config["gpufleet:aks"]["gpu_pools"]
        mixed = {**pools[0], "name": "h100mix", "mig": {**pools[0]["mig"], "config_name": "h100-mixed"}}
        mixed["mig"]["devices"] = [{"gpus": "all", "profiles": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}]
        pools.append(mixed)

    plan = _variant(PROD, catalog, edit)
    assert plan.cluster.mig_strategy == "mixed"
    assert _totals(_queues(plan).objects())[("h100mig", "nvidia.com/mig-3g.40gb")] == 96


@given(st.integers(0, 10_000), st.lists(st.integers(1, 1000), min_size=1, max_size=20))
def test_a_split_adds_up_and_follows_the_weights(total, weights):
    shares = split(total, weights)
    assert sum(shares) == total
    for share, weight in zip(shares, weights, strict=True):
        assert abs(share - total * weight / sum(weights)) < 1


@needs_charts
def test_render_writes_the_kueue_file_and_lists_it(tmp_path):
    out = tmp_path / "out"
    proc = cli("render", "prod-westeurope", "-o", str(out), env={**os.environ, charts.CHARTS_DIR_ENV: str(CHARTS_DIR)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert {
        "name": "queues",
        "file": "gpufleet-kueue.yaml",
        "objects": {"ClusterQueue": 2, "LocalQueue": 2, "ResourceFlavor": 2},
    } in summary["generated"]
    written = list(yaml.safe_load_all((out / "gpufleet-kueue.yaml").read_text()))
    assert [(o["kind"], o["metadata"]["name"]) for o in written] == [
        ("ResourceFlavor", "h100mig"),
        ("ResourceFlavor", "h100train"),
        ("ClusterQueue", "training"),
        ("ClusterQueue", "inference"),
        ("LocalQueue", "training"),
        ("LocalQueue", "inference"),
    ]
    assert "gpufleet-kueue.yaml (gpufleet)" in proc.stdout


def test_a_team_takes_back_what_its_cohort_borrowed_and_nothing_more(catalog):
    objects = _queues(_plan(PROD, catalog)).objects()
    for queue in _of(objects, "ClusterQueue"):
        assert queue["spec"]["preemption"] == {"reclaimWithinCohort": "Any"}
        flavors = queue["spec"]["resourceGroups"][0]["flavors"]
        assert all("borrowingLimit" not in r and "lendingLimit" not in r for f in flavors for r in f["resources"])
