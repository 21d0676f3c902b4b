"""The Pulumi program for AKS clusters with AMD Instinct pools, under mocks (stacks: tests/unit/kube/amd_stacks.py):
beside an NVIDIA pool it installs both releases through the cluster's one Kubernetes provider, the AMD GPU Operator's
the way NVIDIA's goes (its privileged namespace, the Helm release at the stack's pin) plus the DCM ConfigMap its chart
does not create; NVIDIA's keep their resource names; an AMD pool's AgentPool skips AKS's GPU driver install
(gpuProfile.driver None); a cluster of AMD pools alone installs no NVIDIA release."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pulumi
import pytest

from tests.charts import chart_keys, needs_charts, unknown_keys
from tests.infra import checks
from tests.infra.harness import Recorder, Registered, Run, run_program
from tests.unit.kube.amd_stacks import AMD_ONLY, MIXED_PLUGIN, write

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("amd-mixed")
    return run_program(write(root, MIXED_PLUGIN), root)


def _releases(resources: list[Registered]) -> dict[str, Registered]:
    return {r.inputs["chart"]: r for r in checks.of_type(resources, checks.RELEASE)}


def _pools(resources: list[Registered]) -> dict[str, Registered]:
    return {p.inputs["tags"]["gpufleet-pool"]: p for p in checks.agent_pools(resources)}


def test_a_mixed_cluster_installs_nvidias_release_and_the_amd_gpu_operators(mixed):
    releases = _releases(mixed.recorder.resources)
    assert set(releases) == {"nvidia-device-plugin", "gpu-operator-charts"}
    amd = releases["gpu-operator-charts"].inputs
    assert (amd["name"], amd["version"], amd["namespace"]) == ("gpu-operator-charts", "v1.5.1", "kube-amd-gpu")
    assert amd["repositoryOpts"] == {"repo": "https://rocm.github.io/gpu-operator"}
    assert amd["atomic"] is True
    spec = amd["values"]["deviceConfig"]["spec"]
    assert spec["driver"]["enable"] is True and spec["driver"]["version"] == "30.10.1"
    assert spec["driver"]["image"] == "registry.example.net/amd/amdgpu-driver"


def test_the_amd_namespace_is_privileged_and_holds_the_dcm_configmap(mixed):
    namespaces = {n.inputs["metadata"]["name"]: n for n in checks.of_type(mixed.recorder.resources, checks.NAMESPACE)}
    assert namespaces["kube-amd-gpu"].inputs["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "privileged"
    }
    (config_map,) = checks.of_type(mixed.recorder.resources, CONFIG_MAP)
    assert config_map.inputs["metadata"] == {"name": "gpufleet-dcm-config", "namespace": "kube-amd-gpu"}
    profiles = json.loads(config_map.inputs["data"]["config.json"])["gpu-config-profiles"]
    assert list(profiles) == ["cpx-nps4"]
    obj = {"apiVersion": "v1", "kind": "ConfigMap", **config_map.inputs}
    kubernetes_validate.validate(obj, checks.KUBERNETES_VERSION, strict=True)
    release = _releases(mixed.recorder.resources)["gpu-operator-charts"].inputs
    assert release["values"]["deviceConfig"]["spec"]["configManager"]["config"]["name"] == "gpufleet-dcm-config"


def test_both_releases_go_through_the_clusters_one_provider_and_nvidias_keep_their_names(mixed):
    resources = mixed.recorder.resources
    (provider,) = checks.of_type(resources, checks.K8S_PROVIDER)
    assert provider.name == "gpu-software-k8s" and provider.inputs.get("clusterIdentifier")
    for release in checks.of_type(resources, checks.RELEASE):
        assert (release.provider or "").rsplit("::", 1)[0].endswith("::gpu-software-k8s"), release.name
    names = {r.name for r in resources if r.type in (checks.RELEASE, checks.NAMESPACE)}
    # NVIDIA's as before AMD's came (a new name would replace the release), AMD's beside them
    assert names == {
        "gpu-software-ns",
        "gpu-software-nvidia-device-plugin",
        "gpu-software-amd-ns",
        "gpu-software-gpu-operator-charts",
    }


def test_an_amd_pool_skips_akss_gpu_driver_install(mixed):
    pools = _pools(mixed.recorder.resources)
    assert pools["mi300x"].inputs["gpuProfile"] == {"driver": "None"}
    assert pools["mi300xcpx"].inputs["gpuProfile"] == {"driver": "None"}
    assert pools["h100"].inputs["gpuProfile"] == {"driver": "Install"}  # AKS installs NVIDIA's
    labels = pools["mi300xcpx"].inputs["nodeLabels"]
    assert labels["gpufleet.io/amd-gpu-operator"] == "true" and labels["dcm.amd.com/gpu-config-profile"] == "cpx-nps4"
    assert checks.enum_problems(mixed.recorder.resources) == []
    assert checks.spot_problems(mixed.recorder.resources) == []  # the MI300X spot pool has AKS's spot label


@needs_charts
def test_the_amd_releases_values_use_only_the_charts_keys(mixed):
    for chart, release in _releases(mixed.recorder.resources).items():
        assert unknown_keys(release.inputs["values"], chart_keys(chart)) == [], chart


def _run_amd_only(root: Path) -> tuple[Recorder, Any]:
    """The program under mocks for a cluster without an NVIDIA pool (the shared harness waits for NVIDIA's release)."""
    from infra.program import main

    recorder = Recorder()
    stack = write(root, AMD_ONLY)
    pulumi.runtime.set_mocks(recorder, project="gpufleet", stack=stack, preview=False)
    built: dict[str, Any] = {}

    @pulumi.runtime.test
    def evaluate() -> pulumi.Output[Any]:
        program = main(stack, root)
        built["program"] = program
        assert program.software is not None and program.software.amd_release is not None
        return pulumi.Output.all(program.software.amd_release.id, program.cluster.cluster.id)

    evaluate()
    return recorder, built["program"]


def test_a_cluster_of_amd_pools_alone_installs_the_amd_release_only(tmp_path: Path):
    recorder, program = _run_amd_only(tmp_path)
    releases = _releases(recorder.resources)
    assert set(releases) == {"gpu-operator-charts"}
    assert program.software.release is None
    assert {n.inputs["metadata"]["name"] for n in checks.of_type(recorder.resources, checks.NAMESPACE)} == {
        "kube-amd-gpu"
    }
    assert len(checks.of_type(recorder.resources, checks.K8S_PROVIDER)) == 1
    assert {p.inputs["gpuProfile"]["driver"] for p in _pools(recorder.resources).values()} == {"None"}
