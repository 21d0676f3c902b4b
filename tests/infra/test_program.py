"""The Pulumi program for every example stack, under mocks: what it registers passes the checks Azure, AKS and the
charts would make (tests/infra/checks.py), and an invalid stack registers nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.azure.baseline import RULE_NAMES, audit
from gpufleet.catalog import load_catalog
from gpufleet.plan.build import plan_stack
from gpufleet.spec.files import stack_files
from gpufleet.spec.load import load_stack, stack_name_from_file
from gpufleet.spec.models import Stack
from infra.program import InvalidStack
from tests.charts import needs_charts
from tests.conftest import REPO
from tests.infra import checks
from tests.infra.harness import KUBECONFIG, NAT_IP, Recorder, Run, run_program

# The project's stacks, and examples/aks/ (AKS-managed GPU, Ubuntu 24.04 and Azure Linux 3 pools, node
# auto-provisioning: the newer AKS API's cases).
EXAMPLE_ROOTS = (REPO, REPO / "examples" / "aks")


def _aks_examples() -> dict[str, tuple[Path, Stack]]:
    out = {}
    for root in EXAMPLE_ROOTS:
        for path in stack_files(root):
            loaded = load_stack(root / path.name)
            assert loaded.ok, loaded.diagnostics
            if loaded.stack is not None and loaded.stack.aks is not None:
                out[stack_name_from_file(path)] = (root, loaded.stack)
    return out


EXAMPLES = _aks_examples()


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def example(request: pytest.FixtureRequest) -> tuple[Stack, Run]:
    root, stack = EXAMPLES[request.param]
    return stack, run_program(request.param, root)


def test_every_example_stack_with_aks_is_covered():
    assert {"dev-westeurope", "prod-westeurope", "prod-eastus", "preview-westeurope"} <= set(EXAMPLES)


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


@needs_charts
def test_helm_values_use_only_the_charts_keys(example):
    assert checks.helm_key_problems(example[1].recorder.resources) == []


def test_rendered_configmaps_and_namespace_validate_against_kubernetes(example):
    resources = example[1].recorder.resources
    nvidia = checks.nvidia_release(resources)
    assert nvidia is None or checks.rendered_configmaps(nvidia) != []
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


def test_the_resources_carry_the_baseline_the_audit_reports(example):
    """Read from the registered resources as PSRule reads a cluster, each rule passes exactly where gpufleet's audit
    of the plan says it passes (a waived rule fails on the resources too), and its settings are wired together."""
    stack, run = example
    report = audit(plan_stack(stack, load_catalog()))
    expected = {r.rule.name: r.status == "pass" for r in report.results}
    cluster_id = run.outputs["cluster_id"]
    assert checks.baseline_results(run.recorder.resources, cluster_id) == expected
    assert checks.baseline_wiring_problems(run.recorder.resources, cluster_id) == []


@pytest.mark.parametrize("stack", ["prod-westeurope", "prod-eastus"])
def test_prod_clusters_pass_every_baseline_rule_on_their_resources(stack: str):
    run = run_program(stack)
    results = checks.baseline_results(run.recorder.resources, run.outputs["cluster_id"])
    assert set(results) == set(RULE_NAMES)
    assert [rule for rule, ok in results.items() if not ok] == []
    cluster = checks.the(run.recorder.resources, checks.CLUSTER).inputs
    assert cluster["networkProfile"]["outboundType"] == "userAssignedNATGateway"
    assert cluster["networkProfile"]["networkDataplane"] == "cilium"
    assert f"{NAT_IP}/32" in cluster["apiServerAccessProfile"]["authorizedIPRanges"]
    assert len(checks.of_type(run.recorder.resources, checks.WORKSPACE)) == 1


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


def test_a_stack_without_aks_or_bmc_managed_hosts_is_refused_with_the_reason(tmp_path: Path):
    recorder = Recorder()
    refusal = r"lab-local has no gpufleet:aks and no gpufleet:baremetal\.hosts: .*Ansible"
    with pytest.raises(InvalidStack, match=refusal):
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
    assert services - {"_utilities", "config", "provider"} == {
        "containerservice",
        "monitor",
        "network",
        "operationalinsights",
        "resources",
    }


def _with_cluster_settings(tmp_path: Path, stack: str, network: str, security: str) -> Path:
    """A copy of an example stack whose network (after the CIDRs) and security blocks are replaced."""
    text = (REPO / f"Pulumi.{stack}.yaml").read_text()
    head, rest = text.split("      security:\n", 1)
    _, tail = rest.split("    gpu_pools:\n", 1)
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(head + network + security + "    gpu_pools:\n" + tail)
    return tmp_path


def test_a_cluster_failing_the_baseline_registers_nothing_and_says_where(tmp_path: Path):
    root = _with_cluster_settings(tmp_path, "prod-eastus", "", "      security: {defender: false}\n")
    recorder = Recorder()
    with pytest.raises(InvalidStack) as err:
        run_program("prod-eastus", root, recorder)
    message = str(err.value)
    assert "fails the AKS secure baseline (gpufleet audit prod-eastus); nothing was changed" in message
    lines = (root / "Pulumi.prod-eastus.yaml").read_text().splitlines()
    at = lines.index("      security: {defender: false}") + 1
    assert (
        f"Pulumi.prod-eastus.yaml:{at}: aks.cluster.security.api_server: Azure.AKS.AuthorizedIPs (high) fails"
        in message
    )
    assert f"Pulumi.prod-eastus.yaml:{at}: aks.cluster.security.defender: Azure.AKS.DefenderProfile (medium)" in message
    assert "gpufleet.AKS" not in message  # the other rules pass
    assert recorder.resources == []


ALL_WAIVED = "".join(f"          {rule}: {{reason: a test of every setting turned off}}\n" for rule in RULE_NAMES)


@pytest.mark.parametrize(
    ("case", "network", "security"),
    [
        (
            "userDefinedRouting through the stack's route table, a private API server",
            "        egress:\n          outbound_type: userDefinedRouting\n          route_table_id: /subscriptions/s/"
            "resourceGroups/hub/providers/Microsoft.Network/routeTables/to-firewall\n",
            "      security: {api_server: {private: true}}\n",
        ),
        (
            "every baseline setting off, each rule waived",
            "        policy: none\n        egress: {outbound_type: loadBalancer}\n",
            "      security:\n        entra_rbac: false\n        local_accounts: true\n        defender: false\n"
            "        azure_policy: false\n        logs: {audit: false, platform: false}\n        image_cleaner: false\n"
            "        secrets_store_csi: false\n        encryption_at_host: false\n        waivers:\n" + ALL_WAIVED,
        ),
    ],
    ids=["udr-private", "all-off-waived"],
)
def test_other_baseline_settings_reach_the_resources_as_the_audit_reports(
    tmp_path: Path, case: str, network: str, security: str
):
    root = _with_cluster_settings(tmp_path, "prod-eastus", network, security)
    loaded = load_stack(root / "Pulumi.prod-eastus.yaml")
    assert loaded.ok, loaded.diagnostics
    report = audit(plan_stack(loaded.stack, load_catalog()))
    run = run_program("prod-eastus", root)
    resources, cluster_id = run.recorder.resources, run.outputs["cluster_id"]
    assert checks.baseline_results(resources, cluster_id) == {r.rule.name: r.status == "pass" for r in report.results}
    assert checks.baseline_wiring_problems(resources, cluster_id) == []
    assert checks.enum_problems(resources) == []
    assert checks.of_type(resources, checks.NAT_GATEWAY) == [], case
    if "private" in case:
        assert report.ok and all(r.status == "pass" for r in report.results)
        cluster = checks.the(resources, checks.CLUSTER).inputs
        assert cluster["apiServerAccessProfile"] == {"enablePrivateCluster": True}
        (subnet,) = checks.of_type(resources, checks.SUBNET)
        assert subnet.inputs["routeTable"]["id"].endswith("/routeTables/to-firewall")
    else:
        assert report.ok and {r.status for r in report.results} == {"waived"}
        assert checks.of_type(resources, checks.WORKSPACE) == checks.of_type(resources, checks.DIAGNOSTIC_SETTING) == []
