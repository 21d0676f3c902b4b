"""MIG layouts in the ecosystem's formats: mig-parted (strict schema), GPU Operator, AKS."""

from __future__ import annotations

from typing import Annotated, Literal

import kubernetes_validate
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML

from gpufleet import mig
from gpufleet.catalog import load_catalog
from gpufleet.mig.outputs import (
    NamedLayout,
    NodeMig,
    aks_instances,
    cluster_strategy,
    dump_yaml,
    mig_parted_config,
    node_mig,
    operator_configmap,
    packed_layouts,
    stack_layouts,
)
from gpufleet.spec.load import load_stack
from gpufleet.spec.models import MigDeviceGroup, MigLayout
from tests.conftest import FIXTURES, REPO

CATALOG = load_catalog()


# mig-parted's config format, v1 (NVIDIA/mig-parted api/spec/v1: Spec, MigConfigSpec), with no unknown field.
class MigConfigSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    device_filter: str | list[Annotated[str, Field(pattern=r"^0x[0-9A-Fa-f]{8}$")]] | None = Field(
        None, alias="device-filter"
    )
    devices: Literal["all"] | list[Annotated[int, Field(ge=0)]]
    mig_enabled: bool = Field(alias="mig-enabled")
    mig_devices: dict[str, Annotated[int, Field(ge=0)]] | None = Field(None, alias="mig-devices")


class MigPartedSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    version: Literal["v1"]
    mig_configs: dict[str, list[MigConfigSpec]] = Field(alias="mig-configs")


def load_strict(text: str) -> MigPartedSpec:
    return MigPartedSpec.model_validate(YAML(typ="safe").load(text))


def test_the_schema_accepts_nvidias_own_default_config():
    load_strict((FIXTURES / "reference/mig-parted-v0.15.0/config-default.yaml").read_text())


def test_the_schema_refuses_an_unknown_field():
    with pytest.raises(ValidationError):
        load_strict("version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      gpus: 1\n")


def test_packed_config_is_strict_mig_parted_and_round_trips():
    h100, a30 = CATALOG.gpu("H100-SXM5-80GB"), CATALOG.gpu("A30-24GB")
    result = mig.pack([(h100, {"1g.10gb": 30, "3g.40gb": 9}), (a30, {"2g.12gb": 5})])
    config = mig_parted_config(packed_layouts(result, {g.name: g for g in (h100, a30)}))
    text = dump_yaml(config)
    spec = load_strict(text)
    assert YAML(typ="safe").load(text) == config
    assert spec.mig_configs["all-disabled"][0].mig_enabled is False
    entry = spec.mig_configs["h100-sxm5-80gb-1"][0]
    assert entry.device_filter == ["0x233010DE"] and entry.devices == "all" and entry.mig_enabled
    # every packed layout is a named config, and the configs hold exactly the packed layouts
    named = {n: dict(e[0].mig_devices) for n, e in spec.mig_configs.items() if n != "all-disabled"}
    packed = [dict(lay) for m in result.models for lay, _ in m.layouts]
    assert sorted(map(sorted, map(dict.items, named.values()))) == sorted(map(sorted, map(dict.items, packed)))


def test_stack_layouts_become_one_cluster_config_with_device_groups():
    stack = load_stack(REPO / "Pulumi.prod-westeurope.yaml").stack
    pools, hosts = stack_layouts(stack, CATALOG)
    assert [n.name for n in pools] == ["h100-inference"] and hosts == []
    spec = load_strict(dump_yaml(mig_parted_config(pools)))
    entries = spec.mig_configs["h100-inference"]
    assert [e.devices for e in entries] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert entries[1].mig_devices == {"3g.40gb": 2}


def test_a_layout_shared_by_two_pools_appears_once():
    h100 = CATALOG.gpu("H100-SXM5-80GB")
    layout = MigLayout(config_name="same", devices=[MigDeviceGroup(profiles={"7g.80gb": 1})])
    config = mig_parted_config([NamedLayout("same", h100, layout), NamedLayout("same", h100, layout)])
    assert len(config["mig-configs"]["same"]) == 1


def test_operator_configmap_validates_against_kubernetes_and_carries_the_config():
    stack = load_stack(REPO / "Pulumi.prod-eastus.yaml").stack
    pools, _ = stack_layouts(stack, CATALOG)
    config = mig_parted_config(pools)
    cm = operator_configmap(config, "gpufleet-mig-parted-config", "gpu-operator")
    kubernetes_validate.validate(cm, "1.33", strict=True)
    assert YAML(typ="safe").load(cm["data"]["config.yaml"]) == config


def test_strategy_single_only_when_every_gpu_has_the_same_one_profile():
    one = MigLayout(config_name="x", devices=[MigDeviceGroup(profiles={"3g.40gb": 2})])
    assert node_mig(one, 8) == NodeMig("single", {"nvidia.com/gpu": 16}, {"3g.40gb": 16})
    two = MigLayout(config_name="x", devices=[MigDeviceGroup(profiles={"3g.40gb": 1, "1g.10gb": 4})])
    assert node_mig(two, 2).strategy == "mixed"
    assert node_mig(two, 2).resources == {"nvidia.com/mig-1g.10gb": 8, "nvidia.com/mig-3g.40gb": 2}
    half = MigLayout(config_name="x", devices=[MigDeviceGroup(gpus=[0, 1], profiles={"7g.80gb": 1})])
    # two GPUs partitioned, six left whole: mixed, and the whole GPUs are still nvidia.com/gpu
    assert node_mig(half, 8).resources == {"nvidia.com/mig-7g.80gb": 2, "nvidia.com/gpu": 6}
    assert cluster_strategy(["single", "single"]) == "single"
    assert cluster_strategy(["single", "mixed"]) == "mixed"
    assert cluster_strategy([]) is None


@pytest.mark.parametrize(
    ("gpu", "profile", "expected"),
    [
        ("A100-SXM4-40GB", "MIG1g", {"1g.5gb": 7}),
        ("A100-SXM4-40GB", "MIG2g", {"2g.10gb": 3}),
        ("A100-SXM4-40GB", "MIG3g", {"3g.20gb": 2}),
        ("A100-SXM4-40GB", "MIG4g", {"4g.20gb": 1}),
        ("A100-SXM4-40GB", "MIG7g", {"7g.40gb": 1}),
        ("A100-PCIE-80GB", "MIG1g", {"1g.10gb": 7}),
        ("H100-NVL-94GB", "MIG3g", {"3g.47gb": 2}),
        ("H200-SXM-141GB", "MIG1g", {"1g.18gb": 7}),
    ],
)
def test_aks_gpu_instance_profile_fills_each_gpu_with_the_plain_profile(gpu, profile, expected):
    assert aks_instances(CATALOG.gpu(gpu), profile, 1) == expected
    assert aks_instances(CATALOG.gpu(gpu), profile, 8) == {k: 8 * v for k, v in expected.items()}
