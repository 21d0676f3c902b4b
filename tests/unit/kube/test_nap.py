"""A ``kind: nap`` pool's AKSNodeClass and Karpenter NodePool (gpufleet/kube/nap.py), checked against the AKS Karpenter
provider's CRD schemas (tests/fixtures/crds/karpenter)."""

from __future__ import annotations

import copy

from gpufleet.catalog import load_catalog
from gpufleet.kube import nap
from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import ClusterPlan, PoolPlan
from gpufleet.spec.load import load_stack_text
from tests.aks_api_spec import karpenter_validator
from tests.charts import crd_errors
from tests.conftest import TODAY
from tests.stacks import release_block

STACK = (
    """config:
  gpufleet:stage: dev
  gpufleet:region: westeurope
"""
    + release_block()
    + """  gpufleet:aks:
    preview: true
    cluster:
      network: {vnet_cidr: 10.0.0.0/16, subnet_cidr: 10.0.0.0/20}
    gpu_pools:
      - name: napt4
        kind: nap
        vm_size: Standard_NC4as_T4_v3
        max_nodes: 5
        zones: ["1", "3"]
        taints: ["sku=gpu:NoSchedule", "dedicated:NoExecute"]
        tuning: {cpu_manager_policy: static, topology_manager_policy: single-numa-node, transparent_hugepages: never}
      - name: napop
        kind: nap
        vm_size: Standard_NC24ads_A100_v4
        max_nodes: 2
        driver: operator
        os_sku: AzureLinux
        mig: {managed_by: operator, config_name: a100-3g, devices: [{gpus: all, profiles: {3g.40gb: 2}}]}
      - name: napmgd
        kind: nap
        vm_size: Standard_NC4as_T4_v3
        max_nodes: 1
        gpu_management: managed
"""
)


def _plan() -> tuple[ClusterPlan, dict[str, PoolPlan]]:
    loaded = load_stack_text(STACK, "Pulumi.dev-westeurope.yaml", today=TODAY)
    assert loaded.stack is not None, loaded.diagnostics
    plan = plan_stack(loaded.stack, load_catalog())
    assert plan.cluster is not None and plan.cluster.node_provisioning == "Auto"
    return plan.cluster, {p.name: p for p in plan.pools}


def test_every_nap_object_validates_against_its_crd():
    cluster, pools = _plan()
    for pool in pools.values():
        for obj in nap.nap_objects(pool, cluster):
            assert crd_errors(karpenter_validator(obj), obj) == [], (pool.name, obj["kind"])


def test_the_nodepool_holds_the_pools_size_zones_taints_and_limit():
    cluster, pools = _plan()
    node_pool = nap.node_pool(pools["napt4"], cluster)
    requirements = {r["key"]: r["values"] for r in node_pool["spec"]["template"]["spec"]["requirements"]}
    assert requirements == {
        "karpenter.azure.com/sku-name": ["Standard_NC4as_T4_v3"],
        "karpenter.sh/capacity-type": ["on-demand"],
        "kubernetes.io/os": ["linux"],
        "topology.kubernetes.io/zone": ["westeurope-1", "westeurope-3"],
    }
    assert node_pool["spec"]["template"]["spec"]["taints"] == [
        {"key": "sku", "value": "gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "effect": "NoExecute"},
    ]
    assert node_pool["spec"]["limits"] == {"cpu": "20"}  # 5 nodes x 4 vCPUs
    assert node_pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m"}
    labels = node_pool["spec"]["template"]["metadata"]["labels"]
    # the cluster runs the GPU Operator (napop leaves the driver to it): it must skip the driver where AKS installs it
    assert labels["gpufleet.io/pool"] == "napt4" and labels["nvidia.com/gpu.deploy.driver"] == "false"


def test_the_node_class_says_who_installs_the_driver_and_carries_the_pools_tuning():
    _, pools = _plan()
    t4 = nap.node_class(pools["napt4"])["spec"]
    assert t4["gpu"] == {"mode": "Driver"} and t4["imageFamily"] == "Ubuntu"
    assert t4["kubelet"] == {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"}
    assert t4["linuxOSConfig"] == {"transparentHugePageEnabled": "never"}
    operator = nap.node_class(pools["napop"])["spec"]
    assert (operator["gpu"], operator["imageFamily"]) == ({"mode": "None"}, "AzureLinux")
    managed = nap.node_class(pools["napmgd"])["spec"]
    assert managed["tags"][nap.MANAGED_GPU_TAG] == "true"
    assert nap.MANAGED_GPU_TAG not in t4["tags"]


def test_the_crds_refuse_what_validate_refuses_for_nap_pools():
    """An AKSNodeClass has no AzureLinux3 image family and a NodePool needs its limits as quantities: the schemas
    catch them, so these tests would see a wrong object."""
    cluster, pools = _plan()
    node_class = copy.deepcopy(nap.node_class(pools["napt4"]))
    node_class["spec"]["imageFamily"] = "AzureLinux3"
    assert any("imageFamily" in e for e in crd_errors(karpenter_validator(node_class), node_class))
    node_pool = copy.deepcopy(nap.node_pool(pools["napt4"], cluster))
    node_pool["spec"]["limits"]["cpu"] = "twenty"
    assert crd_errors(karpenter_validator(node_pool), node_pool) != []
