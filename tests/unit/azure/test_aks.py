"""AKS node pool names (a suffix of the fields AKS cannot change in place) and the GPU software an AKS cluster gets."""

from __future__ import annotations

import re

import pytest

from gpufleet.azure.aks import aks_pool_name, pool_suffix
from gpufleet.catalog import load_catalog
from gpufleet.kube.gpu_software import for_aks, toleration
from gpufleet.kube.labels import AKS_SPOT_TAINT
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from gpufleet.spec.models import GpuPool
from tests.conftest import REPO

BASE = {"name": "h100training", "vm_size": "Standard_ND96isr_H100_v5", "count": 2, "zones": ["1"]}


def pool(**changes) -> GpuPool:
    return GpuPool.model_validate(BASE | changes)


def test_the_aks_name_is_a_valid_linux_pool_name_of_at_most_12_characters():
    name = aks_pool_name(pool())
    assert re.fullmatch(r"[a-z][a-z0-9]{0,11}", name) and name.startswith("h100trai") and len(name) == 12
    assert aks_pool_name(pool(name="t4")) == "t4" + pool_suffix(pool(name="t4"))


@pytest.mark.parametrize(
    "change",
    [
        {"vm_size": "Standard_ND96isr_H200_v5"},
        {"zones": ["1", "2"]},
        {"spot": {"max_price": -1}},
        {"spot": {"max_price": -1, "eviction_policy": "Deallocate"}},
        {"driver": "operator"},
        {"mig": {"managed_by": "aks", "profile": "MIG3g"}},
        {"taints": ["sku=gpu:NoSchedule", "team=ml:NoSchedule"]},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_change_aks_cannot_make_in_place_gives_a_new_pool_name(change):
    assert aks_pool_name(pool(**change)) != aks_pool_name(pool())


@pytest.mark.parametrize(
    "change",
    [
        {"count": 3},
        {"autoscaling": {"min": 1, "max": 4}},
        {"labels": {"team": "ml"}},
        {"upgrade": {"max_unavailable": "1"}},
        {"tuning": {"cpu_manager_policy": "static"}},
        {"zones": ["1"]},  # same zones
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_change_aks_makes_in_place_keeps_the_pool_name(change):
    assert aks_pool_name(pool(**change)) == aks_pool_name(pool())


def _plan(stack: str):
    return plan_stack(load_stack(REPO / f"Pulumi.{stack}.yaml").stack, load_catalog())


def test_the_operator_is_chosen_when_a_pool_leaves_it_the_driver_or_mig():
    assert _plan("prod-westeurope").cluster.gpu_chart == "gpu-operator"
    assert _plan("prod-eastus").cluster.gpu_chart == "gpu-operator"
    assert _plan("dev-westeurope").cluster.gpu_chart == "nvidia-device-plugin"


def _for_aks(stack: str, monitoring: bool = False):
    plan = _plan(stack)
    return for_aks(plan.pools, plan.cluster.system_pool_taints, plan.cluster.mig_parted_config, monitoring=monitoring)


def test_aks_gpu_software_follows_the_pools():
    software = _for_aks("prod-eastus", monitoring=True)
    assert (software.driver_preinstalled, software.toolkit_preinstalled) == (False, False)
    assert software.mig_strategy == "mixed" and software.mig_with_reboot and software.monitoring
    assert [(s.name, s.mode, s.replicas) for s in software.sharing] == [("t4spot-time-slicing", "time-slicing", 2)]
    # the spot pool's nodes carry AKS's spot taint: the daemonsets must tolerate it
    assert AKS_SPOT_TAINT in software.taints
    assert toleration(AKS_SPOT_TAINT)["key"] == "kubernetes.azure.com/scalesetpriority"


def test_aks_managed_mig_sets_the_device_plugins_strategy():
    software = _for_aks("dev-westeurope")
    assert software.driver_preinstalled and software.mig_parted_config is None
    assert software.mig_strategy == "single"
