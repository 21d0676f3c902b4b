"""Kueue for AMD Instinct pools and host groups (gpufleet/kube/queues.py, docs/queues.md): a flavor per AMD target
that selects its nodes only, quotas in the resources AMD's device plugin advertises there (amd.com/gpu under the
cluster's single naming strategy, amd.com/<compute>_<nps> under mixed), NVIDIA's and AMD's resources each in their
own resource group, and the objects valid for Kueue (its CRD schemas, and its webhook's rules on resource groups)."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from gpufleet.catalog.releases import load_releases
from gpufleet.kube import charts
from gpufleet.kube.labels import DCM_PROFILE_LABEL, HOST_GROUP_LABEL
from gpufleet.kube.queues import KueuePlan, kueue_plan
from gpufleet.kube.scheduling import NodeShape, Placement, why_not
from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import StackPlan
from tests.charts import crd_errors, crd_validator, stack_variant
from tests.conftest import FIXTURES, REPO
from tests.stacks import release_pins

PROD = REPO / "Pulumi.prod-westeurope.yaml"
AMD_AKS = REPO / "examples" / "aks" / "Pulumi.dev-eastus.yaml"  # mi300x (whole), mi300xcpx (CPX/NPS4), h100
AMD_ONPREM = REPO / "examples" / "baremetal" / "Pulumi.dev-onprem.yaml"  # host group mi300x: 2 hosts, CPX/NPS4
KUEUE_CRDS = FIXTURES / "crds" / "kueue"
MI300X = "Standard_ND96isr_MI300X_v5"  # 8 x MI300X per node
CPX_NPS4 = {"managed_by": "operator", "profile": "cpx-nps4", "memory": "NPS4", "devices": [{"compute": "CPX"}]}


@functools.cache
def _validators() -> dict[str, Any]:
    api = load_releases().kueue.api
    out = {}
    for path in sorted(KUEUE_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        (version,) = [v for v in crd["spec"]["versions"] if f"{crd['spec']['group']}/{v['name']}" == api]
        out[crd["spec"]["names"]["kind"]] = crd_validator(version["schema"]["openAPIV3Schema"])
    return out


def _with_amd(*pools: dict[str, Any]) -> Any:
    """An edit of prod-westeurope (h100mig, h100train; teams training 3 : inference 1) adding AMD pools."""

    def edit(config: Any) -> None:
        config["gpufleet:release"] = release_pins(amd_gpu_operator="v1.5.1", amdgpu="30.10.1")
        software = config["gpufleet:aks"].setdefault("gpu_software", {})
        software["amd_driver_image"] = "registry.example.net/amd/amdgpu-driver"
        config["gpufleet:aks"]["gpu_pools"].extend(pools)

    return edit


def _plan(path: Path, catalog: Any, edit: Any = None) -> StackPlan:
    return plan_stack(stack_variant(path, edit or (lambda config: None)), catalog)


def _queues(plan: StackPlan) -> KueuePlan:
    queues = kueue_plan(plan)
    assert queues is not None
    return queues


def _of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _totals(objects: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    out: Counter[tuple[str, str]] = Counter()
    for queue in _of(objects, "ClusterQueue"):
        for group in queue["spec"].get("resourceGroups", []):
            for flavor in group["flavors"]:
                for r in flavor["resources"]:
                    out[(flavor["name"], r["name"])] += r["nominalQuota"]
    return {k: v for k, v in out.items() if v}


def _kueue_webhook_errors(queue: dict[str, Any]) -> list[str]:
    """What Kueue's ClusterQueue webhook refuses in resource groups beyond the CRD's schema (kubernetes-sigs/kueue
    pkg/webhooks/clusterqueue_webhook.go, validateResourceGroups and validateFlavorQuotas): a resource covered by two
    groups, a flavor in two groups, a flavor's resources not the group's coveredResources in order."""
    errors, resources, flavors = [], set(), set()
    for i, group in enumerate(queue["spec"].get("resourceGroups", [])):
        for name in group["coveredResources"]:
            errors += [f"group {i}: resource {name} covered twice"] if name in resources else []
            resources.add(name)
        for flavor in group["flavors"]:
            errors += [f"group {i}: flavor {flavor['name']} twice"] if flavor["name"] in flavors else []
            flavors.add(flavor["name"])
            if [r["name"] for r in flavor["resources"]] != group["coveredResources"]:
                errors.append(f"group {i}: flavor {flavor['name']}'s resources are not the coveredResources")
    return errors


def _check_objects(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        assert crd_errors(_validators()[obj["kind"]], obj) == [], (obj["kind"], obj["metadata"]["name"])
    for queue in _of(objects, "ClusterQueue"):
        assert _kueue_webhook_errors(queue) == []


def test_the_webhook_check_finds_a_flavor_in_two_groups():
    """The check above can fail: Kueue refuses a flavor listed in two resource groups."""
    amd = {"name": "f", "resources": [{"name": "amd.com/gpu", "nominalQuota": 1}]}
    nvidia = {"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]}
    group = {"coveredResources": ["amd.com/gpu"], "flavors": [amd]}
    other = {"coveredResources": ["nvidia.com/gpu"], "flavors": [nvidia]}
    assert _kueue_webhook_errors({"spec": {"resourceGroups": [group, other]}}) == ["group 1: flavor f twice"]


# -- quotas in the resources AMD's device plugin advertises -----------------------------------------------------------


def test_whole_mi300x_gpus_are_amd_gpu_split_by_the_teams_weights(catalog):
    # mi300x: autoscaled to at most 3 nodes of 8 MI300X, no partitions anywhere: the single strategy, amd.com/gpu
    plan = _plan(PROD, catalog, _with_amd({"name": "mi300x", "vm_size": MI300X, "count": 1,
                                           "autoscaling": {"min": 1, "max": 3}}))  # fmt: skip
    objects = _queues(plan).objects()
    _check_objects(objects)
    assert _totals(objects)[("mi300x", "amd.com/gpu")] == 24
    quotas = {
        (q["metadata"]["name"], f["name"], r["name"]): r["nominalQuota"]
        for q in _of(objects, "ClusterQueue") for g in q["spec"]["resourceGroups"] for f in g["flavors"]
        for r in f["resources"]
    }  # fmt: skip
    assert quotas[("training", "mi300x", "amd.com/gpu")] == 18  # weight 3 of 4
    assert quotas[("inference", "mi300x", "amd.com/gpu")] == 6


def test_cpx_nps4_nodes_are_counted_as_64_logical_gpus_each(catalog):
    # CPX/NPS4: each MI300X is eight logical GPUs, 64 per node: the mixed strategy, amd.com/cpx_nps4
    plan = _plan(PROD, catalog, _with_amd({"name": "mi300cpx", "vm_size": MI300X, "count": 2,
                                           "amd_partitions": CPX_NPS4}))  # fmt: skip
    objects = _queues(plan).objects()
    _check_objects(objects)
    totals = _totals(objects)
    assert totals[("mi300cpx", "amd.com/cpx_nps4")] == 128
    assert not any(resource == "amd.com/gpu" for flavor, resource in totals if flavor == "mi300cpx")


def test_the_flavors_resource_names_follow_the_strategy_the_device_config_is_written_with(catalog):
    """The AMD GPU Operator's DeviceConfig (gpufleet/kube/amd_operator.py, in the plan's AMD release) sets the device
    plugin's naming strategy; the quotas must be in the names that strategy advertises."""
    for path, edit in [(AMD_AKS, None), (PROD, _with_amd({"name": "mi300x", "vm_size": MI300X, "count": 2}))]:
        plan = _plan(path, catalog, edit)
        assert plan.cluster is not None and plan.cluster.amd_gpu_software is not None
        spec = plan.cluster.amd_gpu_software.values["deviceConfig"]["spec"]
        strategy = spec["devicePlugin"]["devicePluginArguments"]["resource_naming_strategy"]
        amd = {r for f in _queues(plan).flavors if f.vendor == "amd" for r in f.per_node}
        if strategy == "single":
            assert amd == {"amd.com/gpu"}
        else:
            assert "amd.com/cpx_nps4" in amd


def test_a_whole_mi300x_in_a_mixed_cluster_is_advertised_by_its_partition_style(catalog):
    # dev-eastus: mi300x (whole, up to 2 nodes) beside mi300xcpx (CPX/NPS4): the cluster's strategy is mixed
    totals = _totals(_queues(_plan(AMD_AKS, catalog)).objects())
    assert totals.get(("mi300x", "amd.com/spx_nps1")) == 16


def test_the_example_aks_stack_holds_its_amd_and_nvidia_gpus_apart(catalog):
    objects = _queues(_plan(AMD_AKS, catalog)).objects()
    _check_objects(objects)
    totals = _totals(objects)
    assert totals[("mi300xcpx", "amd.com/cpx_nps4")] == 128  # 2 nodes x 64
    assert totals[("h100", "nvidia.com/gpu")] == 4  # 4 nodes x 1 H100 NVL
    for queue in _of(objects, "ClusterQueue"):
        for group in queue["spec"]["resourceGroups"]:
            vendors = {r.split("/")[0] for r in group["coveredResources"]}
            assert len(vendors) == 1, group["coveredResources"]  # one vendor's resources per group
            flavors = {f["name"] for f in group["flavors"]}
            assert flavors == ({"h100"} if vendors == {"nvidia.com"} else {"mi300x", "mi300xcpx"})


def test_an_amd_host_group_without_an_advertiser_gets_no_flavor(catalog):
    # (on AKS an AMD pool of advertiser none is refused: the operator is also its driver)
    def edit(config: Any) -> None:
        config["gpufleet:baremetal"]["host_groups"][0]["advertiser"] = "none"

    queues = _queues(_plan(AMD_ONPREM, catalog, edit))
    assert "mi300x" not in {f.target for f in queues.flavors}
    assert {s.target: s.why for s in queues.skipped}["mi300x"] == "advertiser none: its GPUs are not allocatable"
    assert all(not r.startswith("amd.com/") for r in queues.resources)


# -- where an admitted pod lands ------------------------------------------------------------------------------------


def _lands_on(flavor: dict[str, Any], targets: list[charts.Target]) -> list[str]:
    spec = flavor["spec"]
    own = [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in spec.get("nodeTaints", [])]
    placement = Placement.from_pod_spec({"nodeSelector": spec["nodeLabels"], "tolerations": spec.get("tolerations", [])
                                         + own})  # fmt: skip
    return [t.name for t in targets if not why_not(placement, t.node)]


def test_a_pod_admitted_with_an_amd_flavor_lands_on_that_pools_nodes_only(catalog):
    plan = _plan(AMD_AKS, catalog)
    assert plan.cluster is not None
    targets = charts.stack_targets(plan, plan.cluster.gpu_chart or "")
    flavors = _of(_queues(plan).objects(), "ResourceFlavor")
    assert {f["metadata"]["name"]: _lands_on(f, targets) for f in flavors} == {
        "mi300x": ["mi300x"],
        "mi300xcpx": ["mi300xcpx"],
        "h100": ["h100"],
    }
    cpx = next(f for f in flavors if f["metadata"]["name"] == "mi300xcpx")
    assert cpx["spec"]["nodeLabels"][DCM_PROFILE_LABEL] == "cpx-nps4"  # the nodes DCM partitioned with that profile


def test_an_amd_host_groups_flavor_counts_its_hosts_and_lands_on_them_once_labelled(catalog):
    plan = _plan(AMD_ONPREM, catalog)
    queues = _queues(plan)
    objects = queues.objects()
    _check_objects(objects)
    assert _totals(objects) == {("mi300x", "amd.com/cpx_nps4"): 128}  # 2 BMC-managed hosts x 8 GPUs x 8 CPX
    (flavor,) = _of(objects, "ResourceFlavor")
    host = NodeShape("mi-a01", {"kubernetes.io/os": "linux"})
    labelled = NodeShape("mi-a01", {"kubernetes.io/os": "linux", HOST_GROUP_LABEL: "mi300x"})
    targets = [charts.Target("bare", "host group", host, True), charts.Target("labelled", "host group", labelled, True)]
    assert _lands_on(flavor, targets) == ["labelled"]
