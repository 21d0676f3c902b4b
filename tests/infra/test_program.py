"""The Pulumi program for every example stack, under mocks: what it registers passes the checks Azure, AKS and the
charts would make (tests/infra/checks.py), and an invalid stack registers nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.spec import load_stack, stack_files
from gpufleet.spec.load import stack_name_from_file
from gpufleet.spec.models import Stack
from infra.program import InvalidStack
from tests.conftest import REPO
from tests.infra import checks
from tests.infra.harness import KUBECONFIG, Recorder, Run, run_program


def _aks_examples() -> dict[str, Stack]:
    out = {}
    for path in stack_files(REPO):
        loaded = load_stack(REPO / path)
        assert loaded.ok, loaded.diagnostics
        if loaded.stack is not None and loaded.stack.aks is not None:
            out[stack_name_from_file(path)] = loaded.stack
    return out


EXAMPLES = _aks_examples()


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def example(request: pytest.FixtureRequest) -> tuple[Stack, Run]:
    return EXAMPLES[request.param], run_program(request.param)


def test_every_example_stack_with_aks_is_covered():
    assert {"dev-westeurope", "prod-westeurope", "prod-eastus"} <= set(EXAMPLES)


def test_enum_inputs_are_the_sdks_values(example):
    assert checks.enum_problems(example[1].recorder.resources) == []


def test_pool_names_are_valid_and_unique(example):
    assert checks.pool_name_problems(example[1].recorder.resources) == []


def test_counts_follow_the_autoscaling_rules(example):
    assert checks.count_problems(example[1].recorder.resources) == []


def test_only_the_system_pool_is_inline(example):
    assert checks.inline_pool_problems(example[1].recorder.resources, load_catalog()) == []


def test_spot_pools_take_no_surge(example):
    assert checks.spot_problems(example[1].recorder.resources) == []


def test_taints_labels_and_mig_are_as_the_stack_says(example):
    stack, run = example
    assert checks.taint_label_problems(run.recorder.resources, stack) == []


def test_driver_ownership_agrees_between_pools_and_helm_values(example):
    assert checks.driver_problems(example[1].recorder.resources) == []


def test_helm_values_use_only_the_charts_keys(example):
    assert checks.helm_key_problems(example[1].recorder.resources) == []


def test_rendered_configmaps_and_namespace_validate_against_kubernetes(example):
    resources = example[1].recorder.resources
    assert checks.rendered_configmaps(checks.the(resources, checks.RELEASE)) != []
    assert checks.kubernetes_object_problems(resources) == []


def test_release_is_pinned_and_uses_the_clusters_provider(example):
    stack, run = example
    assert checks.release_problems(run.recorder.resources, stack) == []


def test_kubeconfig_is_exported_as_a_secret(example):
    stack, run = example
    assert run.kubeconfig_secret is True
    assert run.outputs["kubeconfig"] == KUBECONFIG  # the cluster's user credential, decoded
    (token, args) = run.recorder.calls[0]
    assert token == "azure-native:containerservice:listManagedClusterUserCredentials"
    # Entra ID clusters get an exec-format kubeconfig (kubelogin), the only one that works with Azure RBAC
    assert args.get("format") == ("exec" if stack.aks and stack.aks.cluster.security.entra_rbac else None)


def test_outputs_name_the_cluster_and_its_node_resource_group(example):
    stack, run = example
    assert run.outputs["cluster_name"] == (stack.aks.cluster.name or f"gpufleet-{stack.name}")
    assert run.outputs["node_resource_group"] == f"MC_{run.outputs['cluster_name']}"


def test_operator_managed_mig_reaches_the_mig_manager():
    """prod-westeurope's h100mig pool: its layout is in migManager.config, its label names it, and the cluster runs
    the operator with the mixed strategy the layout needs."""
    run = run_program("prod-westeurope")
    release = checks.the(run.recorder.resources, checks.RELEASE)
    values = release.inputs["values"]
    assert release.inputs["chart"] == "gpu-operator"
    assert values["mig"] == {"strategy": "mixed"}
    assert "h100-inference:" in values["migManager"]["config"]["data"]["config.yaml"]
    assert values["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": "true"}]


def test_a_cluster_that_keeps_the_aks_driver_gets_the_device_plugin_chart():
    run = run_program("dev-westeurope")
    release = checks.the(run.recorder.resources, checks.RELEASE)
    assert (release.inputs["chart"], release.inputs["version"]) == ("nvidia-device-plugin", "0.20.0")
    assert release.inputs["values"]["migStrategy"] == "single"  # the AKS-managed MIG1g pool
    pools = checks.of_type(run.recorder.resources, checks.AGENT_POOL)
    assert {p.inputs["gpuProfile"]["driver"] for p in pools} == {"Install"}


def _copy_example(tmp_path: Path, stack: str, edit: tuple[str, str] | None = None) -> Path:
    text = (REPO / f"Pulumi.{stack}.yaml").read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1])
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(text)
    return tmp_path


def test_an_invalid_stack_fails_with_the_validators_message_before_any_resource(tmp_path: Path):
    root = _copy_example(tmp_path, "prod-eastus", ("vm_size: Standard_NC16as_T4_v3", "vm_size: Standard_NC6s_v3"))
    recorder = Recorder()
    with pytest.raises(InvalidStack) as err:
        run_program("prod-eastus", root, recorder)
    assert "nothing was changed" in str(err.value)
    assert "Pulumi.prod-eastus.yaml:" in str(err.value) and "aks.gpu_pools[1].vm_size" in str(err.value)
    assert "retired" in str(err.value)
    assert recorder.resources == []


def test_a_bare_metal_stack_is_refused_with_the_reason(tmp_path: Path):
    recorder = Recorder()
    with pytest.raises(InvalidStack, match=r"lab-local has no gpufleet:aks; .*Ansible"):
        run_program("lab-local", REPO, recorder)
    assert recorder.resources == []


def test_changing_an_immutable_field_makes_a_new_pool_and_a_mutable_one_does_not(tmp_path: Path):
    def agent_pools(run: Run) -> set[str]:
        return {p.inputs["agentPoolName"] for p in checks.of_type(run.recorder.resources, checks.AGENT_POOL)}

    before = agent_pools(run_program("prod-eastus"))
    scaled = agent_pools(run_program("prod-eastus", _copy_example(tmp_path, "prod-eastus", ("max: 8", "max: 9"))))
    assert scaled == before
    resized = _copy_example(tmp_path, "prod-eastus", ("Standard_NC16as_T4_v3", "Standard_NC64as_T4_v3"))
    after = agent_pools(run_program("prod-eastus", resized))
    assert len(after - before) == 1 and next(iter(after - before)).startswith("t4spot")


def test_the_program_imports_only_the_provider_services_it_uses():
    """The whole azure-native SDK is hundreds of MB; each service costs import time (make bench times it)."""
    code = "import sys; from tests.infra.harness import run_program; run_program('prod-eastus')"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    modules = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    services = {m.split(".")[1] for m in modules if m.startswith("pulumi_azure_native.") and m.count(".") >= 1}
    # _utilities, config and provider are the package itself (every service imports them)
    assert services - {"_utilities", "config", "provider"} == {"containerservice", "network", "resources"}
