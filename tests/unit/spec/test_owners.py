"""gpufleet.spec.owners: one owner per concern (driver, toolkit, advertiser, MIG) on a pool's or host group's nodes,
judged from the keys that chose them; conflicts name both owners and both keys (the fixtures owners_*.yaml show the
file:line form)."""

from __future__ import annotations

from gpufleet.spec import owners
from gpufleet.spec.models import GpuPool, HostGroup

PATH = ("aks", "gpu_pools", 0)


def _pool(**fields) -> GpuPool:
    return GpuPool.model_validate({"name": "t4", "vm_size": "Standard_NC4as_T4_v3", "count": 1, **fields})


def _table(claims: list[owners.Claim]) -> dict[str, tuple[str, str]]:
    return {c: (claim.owner, claim.value) for c, claim in owners.owners(claims).items()}


def test_a_plain_aks_pool_has_aks_driver_and_toolkit_and_the_device_plugin():
    claims = owners.pool_claims(_pool(), PATH)
    assert list(owners.conflicts(claims)) == []
    assert _table(claims) == {
        "driver": ("AKS (gpuProfile.driver Install)", "aks"),
        "toolkit": ("AKS (gpuProfile.driver Install)", "aks"),
        "advertiser": (owners.DEVICE_PLUGIN, "device-plugin"),
    }


def test_a_managed_pool_is_aks_s_own_from_driver_to_advertiser_and_mig():
    pool = _pool(
        gpu_management="managed",
        vm_size="Standard_NC24ads_A100_v4",
        mig={"managed_by": "aks", "profile": "MIG1g", "strategy": "mixed"},
    )
    claims = owners.pool_claims(pool, PATH)
    assert list(owners.conflicts(claims)) == []  # the default advertiser on a managed pool is AKS's device plugin
    assert {c: owner for c, (owner, _) in _table(claims).items()} == {
        "driver": owners.AKS_MANAGED,
        "toolkit": owners.AKS_MANAGED,
        "advertiser": owners.AKS_DEVICE_PLUGIN,
        "mig": owners.AKS_MANAGED,
    }


def test_advertiser_none_on_a_managed_pool_is_a_conflict_not_silence():
    (finding,) = owners.conflicts(owners.pool_claims(_pool(gpu_management="managed", advertiser="none"), PATH))
    assert finding.path == (*PATH, "advertiser")
    assert finding.message.startswith(
        "advertiser: nothing (advertiser none) (aks.gpu_pools[0].advertiser: none) and AKS's own device plugin"
        " (aks.gpu_pools[0].gpu_management: managed) would both advertise its GPUs"
    )


def test_driver_and_toolkit_chosen_by_the_same_two_keys_are_one_finding():
    findings = list(owners.conflicts(owners.pool_claims(_pool(gpu_management="managed", driver="operator"), PATH)))
    assert [(f.path, f.message.split(":")[0]) for f in findings] == [((*PATH, "driver"), "driver")]


def test_a_bare_metal_group_s_roles_own_driver_and_toolkit_and_its_advertiser_is_its_own():
    group = HostGroup.model_validate({"name": "gb200", "gpu_model": "GB200", "gpus_per_host": 4, "advertiser": "dra"})
    claims = owners.host_group_claims(group, ("baremetal", "host_groups", 0))
    assert list(owners.conflicts(claims)) == []
    assert _table(claims) == {
        "driver": ("the nvidia_driver role", "GB200"),
        "toolkit": ("the nvidia_container_toolkit role", "GB200"),
        "advertiser": (owners.DRA_DRIVER, "dra"),
    }
    assert owners.host_group_claims(HostGroup.model_validate({"name": "cpu"}), ("baremetal", "host_groups", 1)) == []
