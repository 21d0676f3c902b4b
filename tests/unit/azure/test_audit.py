"""The AKS secure baseline (gpufleet.azure.baseline) and ``gpufleet audit``: secure by default, each relaxation fails
its rule(s) unless the stack waives them with a reason, and the command's exit code follows the high/medium failures.
The Pulumi side (the resources carry what the audit reports) is tests/infra/test_program.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpufleet.azure.baseline import RULE_NAMES, RULES, audit
from gpufleet.catalog import load_catalog
from gpufleet.plan.build import plan_stack, workspace_name
from gpufleet.spec.load import load_stack_text
from tests.conftest import REPO, TODAY, cli

PROD = (REPO / "Pulumi.prod-westeurope.yaml").read_text()


def _project(tmp_path: Path, text: str, stack: str = "prod-westeurope") -> Path:
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(text)
    return tmp_path


def _statuses(text: str) -> dict[str, str]:
    loaded = load_stack_text(text, "Pulumi.prod-westeurope.yaml", today=TODAY)
    assert loaded.ok, loaded.diagnostics
    return {r.rule.name: r.status for r in audit(plan_stack(loaded.stack, load_catalog())).results}


def _with_security(*lines: str, api_server: bool = True) -> str:
    """prod-westeurope with these keys under aks.cluster.security, after its api_server block (or instead)."""
    head, rest = PROD.split("      security:\n", 1)
    api, tail = rest.split("    gpu_pools:\n", 1)
    body = (api if api_server else "") + "".join(f"        {line}\n" for line in lines)
    return head + ("      security:\n" + body if body else "") + "    gpu_pools:\n" + tail


def test_rule_names_are_psrule_names_or_gpufleets_own():
    assert len(set(RULE_NAMES)) == len(RULE_NAMES)
    for rule in RULES:
        assert rule.name.startswith(("Azure.AKS.", "gpufleet.AKS.")), rule.name
        assert rule.source == ("PSRule for Azure" if rule.name.startswith("Azure.") else "gpufleet")
    ours = {r.name for r in RULES if r.source == "gpufleet"}
    assert ours == {"gpufleet.AKS.EgressControl", "gpufleet.AKS.ImageCleaner", "gpufleet.AKS.EncryptionAtHost"}


@pytest.mark.parametrize("stack", ["prod-westeurope", "prod-eastus"])
def test_audit_of_the_prod_stacks_has_no_high_or_medium_finding(stack: str):
    proc = cli("audit", stack, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    for severity in ("high", "medium"):
        assert report["counts"][severity]["fail"] == report["counts"][severity]["waived"] == 0
    assert [r["rule"] for r in report["rules"]] == list(RULE_NAMES)
    assert {r["status"] for r in report["rules"]} == {"pass"}


@pytest.mark.parametrize("stack", ["dev-westeurope", "staging-westeurope"])
def test_the_other_example_stacks_pass_or_waive_every_rule(stack: str):
    proc = cli("audit", stack)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failing: 0 high, 0 medium, 0 low" in proc.stdout


def test_the_defaults_are_the_baseline_the_api_server_needs_the_stack_to_say_who_reaches_it():
    statuses = _statuses(_with_security(api_server=False))
    assert {rule for rule, status in statuses.items() if status != "pass"} == {"Azure.AKS.AuthorizedIPs"}


@pytest.mark.parametrize(
    ("setting", "fails"),
    [
        ("local_accounts: true", {"Azure.AKS.LocalAccounts"}),
        ("defender: false", {"Azure.AKS.DefenderProfile"}),
        ("azure_policy: false", {"Azure.AKS.AzurePolicyAddOn"}),
        ("logs: {audit: false}", {"Azure.AKS.AuditLogs"}),
        ("logs: {platform: false}", {"Azure.AKS.PlatformLogs"}),
        ("image_cleaner: false", {"gpufleet.AKS.ImageCleaner"}),
        ("secrets_store_csi: false", {"Azure.AKS.SecretStore", "Azure.AKS.SecretStoreRotation"}),
        ("encryption_at_host: false", {"gpufleet.AKS.EncryptionAtHost"}),
    ],
)
def test_each_relaxed_setting_fails_its_rule_and_nothing_else(setting: str, fails: set[str]):
    statuses = _statuses(_with_security(setting))
    assert {rule for rule, status in statuses.items() if status == "fail"} == fails


def test_network_relaxations_fail_their_rules():
    text = PROD.replace(
        "        subnet_cidr: 10.20.0.0/18\n",
        "        subnet_cidr: 10.20.0.0/18\n        policy: none\n        egress: {outbound_type: loadBalancer}\n",
    )
    statuses = _statuses(text)
    assert {r for r, s in statuses.items() if s == "fail"} == {"Azure.AKS.NetworkPolicy", "gpufleet.AKS.EgressControl"}


def test_a_waived_rule_is_waived_with_its_reason_not_passing(tmp_path: Path):
    reason = "a [bold]test[/] stack; markup in a reason is printed as written"
    text = _with_security("defender: false", "waivers:", f"  Azure.AKS.DefenderProfile: {{reason: '{reason}'}}")
    assert _statuses(text)["Azure.AKS.DefenderProfile"] == "waived"
    root = _project(tmp_path, text)

    proc = cli("audit", "prod-westeurope", "--root", str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"waived  medium  Azure.AKS.DefenderProfile      waived: {reason}" in proc.stdout
    report = json.loads(cli("audit", "prod-westeurope", "--json", "--root", str(root)).stdout)
    (defender,) = [r for r in report["rules"] if r["rule"] == "Azure.AKS.DefenderProfile"]
    assert (defender["status"], defender["reason"], report["counts"]["medium"]["waived"]) == ("waived", reason, 1)

    plan = cli("plan", "prod-westeurope", "--root", str(root))
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "security baseline: 13 pass, 1 waived, 0 failing" in plan.stdout
    assert f"waived Azure.AKS.DefenderProfile (medium): {reason}" in plan.stdout
    planned = json.loads(cli("plan", "prod-westeurope", "--json", "--root", str(root)).stdout)
    assert planned["cluster"]["security"]["waivers"] == {"Azure.AKS.DefenderProfile": {"reason": reason}}


def test_an_unneeded_waiver_is_pointed_out():
    loaded = load_stack_text(
        _with_security("waivers:", "  Azure.AKS.DefenderProfile: {reason: we might turn it off later}"),
        "Pulumi.prod-westeurope.yaml",
        today=TODAY,
    )
    (result,) = [r for r in audit(plan_stack(loaded.stack, load_catalog())).results if r.unused_waiver]
    assert (result.rule.name, result.status) == ("Azure.AKS.DefenderProfile", "pass")


def test_audit_exits_1_on_a_high_or_medium_failure_and_says_where(tmp_path: Path):
    root = _project(tmp_path, _with_security("defender: false", "image_cleaner: false", api_server=False))
    file_lines = (root / "Pulumi.prod-westeurope.yaml").read_text().splitlines()
    defender_line = file_lines.index("        defender: false") + 1

    proc = cli("audit", "prod-westeurope", "--root", str(root))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failing: 1 high, 1 medium, 1 low; waived: 0" in proc.stdout
    assert (
        f"Pulumi.prod-westeurope.yaml:{defender_line}: aks.cluster.security.defender: Azure.AKS.DefenderProfile"
        " (medium) fails: Microsoft Defender for Containers is off; set security.defender: true (the default), or"
        " accept it with aks.cluster.security.waivers: {Azure.AKS.DefenderProfile: {reason: ...}}"
    ) in proc.stdout
    report = json.loads(cli("audit", "prod-westeurope", "--json", "--root", str(root)).stdout)
    assert report["ok"] is False
    failing = {r["rule"]: r["line"] for r in report["rules"] if r["status"] == "fail"}
    assert set(failing) == {"Azure.AKS.AuthorizedIPs", "Azure.AKS.DefenderProfile", "gpufleet.AKS.ImageCleaner"}
    assert failing["Azure.AKS.DefenderProfile"] == defender_line


def test_audit_of_a_bare_metal_stack_has_nothing_to_check():
    proc = cli("audit", "lab-local", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["rules"] == []


def test_audit_of_an_invalid_stack_exits_1_with_the_errors():
    proc = cli("audit", "tests/fixtures/invalid/waiver_unknown_rule.yaml")
    assert proc.returncode == 1
    assert "nothing audited" in proc.stderr and "unknown baseline rule 'Azure.AKS.Defender'" in proc.stderr


def test_audit_help_says_when_it_exits_1():
    proc = cli("audit", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "Exit 0 when no high or medium rule fails" in text and "1 when one does" in text


def test_the_created_workspace_gets_a_name_log_analytics_accepts():
    """Log Analytics workspace names: 4-63 letters, digits and '-', starting and ending with a letter or digit; AKS
    names may hold '_' and run to 63 characters."""
    assert workspace_name("gpufleet-prod-westeurope") == "log-gpufleet-prod-westeurope"
    for cluster in ("a_" * 31 + "b", "x" * 63, "ab"):
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{2,61}[A-Za-z0-9]", workspace_name(cluster)), cluster
