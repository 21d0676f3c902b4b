"""`gpufleet plan`: what each example stack describes, resolved against the catalog."""

from __future__ import annotations

from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import MigPlan, NodeCounts, SharingPlan
from gpufleet.spec.load import load_stack
from tests.conftest import REPO


def _plan(name: str, catalog):
    return plan_stack(load_stack(REPO / f"Pulumi.{name}.yaml").stack, catalog)


def test_operator_mig_instances_per_node_follow_device_groups(catalog):
    plan = _plan("prod-westeurope", catalog)
    pool = next(p for p in plan.pools if p.name == "h100mig")
    # GPUs 0-3: 2 x 1g.10gb + 2g.20gb + 3g.40gb each; GPUs 4-7: 2 x 3g.40gb each
    assert pool.mig.instances_per_node == {"1g.10gb": 8, "2g.20gb": 4, "3g.40gb": 12}
    assert pool.mig.strategy == "mixed"
    assert pool.mig.resources == {
        "nvidia.com/mig-1g.10gb": 8,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 12,
    }
    assert plan.cluster.mig_strategy == "mixed"
    assert pool.labels["nvidia.com/mig.config"] == "h100-inference"
    assert (pool.gpus_per_node, pool.vcpus, pool.memory_gib, pool.gpu_model) == (8, 96, 1900, "H100-SXM5-80GB")
    assert pool.gpus_total == {"count": 16, "min": 16, "max": 48}


def test_aks_mig_profile_fills_every_gpu_with_the_plain_profile(catalog):
    plan = _plan("dev-westeurope", catalog)
    pool = next(p for p in plan.pools if p.name == "a100mig")
    assert pool.mig == MigPlan(
        managed_by="aks",
        gpu_instance_profile="MIG1g",
        instances_per_node={"1g.10gb": 7},
        strategy="single",
        resources={"nvidia.com/gpu": 7},
        profiles=("1g.10gb",),
    )
    assert "nvidia.com/mig.config" not in pool.labels


def test_sharing_and_spot_pools(catalog):
    dev = {p.name: p for p in _plan("dev-westeurope", catalog).pools}
    assert dev["t4shared"].labels["nvidia.com/device-plugin.config"] == "t4shared-time-slicing"
    assert dev["t4shared"].sharing == SharingPlan("time-slicing", 4, "t4shared-time-slicing")
    assert dev["t4spot"].spot and dev["t4spot"].nodes == NodeCounts(count=0, min=0, max=3)
    assert dev["t4spot"].upgrade.model_dump(exclude_none=True) == {"max_unavailable": "1"}


def test_aks_driver_pools_are_excluded_from_the_operator_driver_only_in_mixed_clusters(catalog):
    eastus = _plan("prod-eastus", catalog)
    assert all(p.aks_gpu_driver == "None" for p in eastus.pools)
    assert all("nvidia.com/gpu.deploy.driver" not in p.labels for p in eastus.pools)
    dev = _plan("dev-westeurope", catalog)
    assert all("nvidia.com/gpu.deploy.driver" not in p.labels for p in dev.pools)


def test_bare_metal_plan_resolves_the_tuning_profile(catalog):
    plan = _plan("lab-local", catalog)
    assert plan.cluster is None and plan.pools == ()
    (group,) = plan.host_groups
    assert group.gpu_model is None and group.tuning_profile == "lab"
    assert group.tuning.hugepages_1g_per_node == 1
    bm = plan.to_dict()["baremetal"]
    assert (bm["inventory"], bm["rollout"], bm["mig_parted_config"]) == (
        "inventories/lab-local",
        {"serial": 2, "max_fail_percentage": 50, "reboot_ok": True},
        None,
    )


def test_fractional_gpu_sizes(catalog):
    from gpufleet.spec.load import load_stack_text

    text = (REPO / "tests/fixtures/invalid/pool_name_invalid.yaml").read_text()
    text = text.replace("gpu-pool-h100", "a10").replace("Standard_NC4as_T4_v3", "Standard_NV6ads_A10_v5")
    stack = load_stack_text(text, "x.yaml").stack
    (pool,) = plan_stack(stack, catalog).pools
    assert pool.gpu_partition == "1/6" and pool.gpus_per_node == 0.1667
