"""The AKS secure baseline every gpufleet cluster is held to, and the audit of a stack's plan against it.

Each rule has the name PSRule for Azure gives it (``Azure.AKS.*``), or, where PSRule has no rule for the setting, a
name in the same style under ``gpufleet.AKS.``; a severity; the stack key that decides it; and a check of the plan:
the same :class:`~gpufleet.plan.model.ClusterPlan` and pools the Pulumi program maps to resources, so ``gpufleet audit``
and ``gpufleet plan`` judge what would be deployed, offline, from the stack file alone.

Every setting is secure by default. A stack relaxes one with the setting itself and accepts the failing rule with a
waiver (``aks.cluster.security.waivers``: the rule's name and a ``reason``); the audit shows such a rule as waived,
not as passing. Unwaived high or medium failures block: ``gpufleet audit`` exits 1 and the Pulumi program registers
nothing.

Sources: PSRule for Azure's rule reference (azure.psrule.io/en/rules/, module PSRule.Rules.Azure) for the
``Azure.AKS.*`` names and what each checks (AuditLogs: kube-audit or kube-audit-admin, and guard; PlatformLogs:
cluster-autoscaler, kube-apiserver, kube-controller-manager, kube-scheduler and AllMetrics); the AKS baseline
architecture (learn.microsoft.com/azure/architecture/reference-architectures/containers/aks/baseline-aks) for
egress control, Image Cleaner and encryption at host, which have no PSRule rule (``gpufleet.AKS.*``). The
severities are gpufleet's (PSRule ranks its rules Critical / Important / Awareness). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the plan's types, for hints only (spec.rules reads RULE_NAMES without loading the plan)
    from gpufleet.plan.model import ClusterPlan, PoolPlan, StackPlan

Severity = Literal["high", "medium", "low"]
SEVERITIES: tuple[Severity, ...] = ("high", "medium", "low")
BLOCKING: tuple[Severity, ...] = ("high", "medium")
Status = Literal["pass", "fail", "waived"]

# Control-plane log categories of an AKS cluster sent to Log Analytics (a diagnostic setting on the cluster).
AUDIT_LOG_CATEGORIES = ("kube-audit-admin", "guard")
PLATFORM_LOG_CATEGORIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "cluster-autoscaler")
METRIC_CATEGORIES = ("AllMetrics",)
# AKS add-on profile names (ManagedCluster addonProfiles keys) and the secrets-store driver's rotation settings.
AZURE_POLICY_ADDON = "azurepolicy"
SECRETS_STORE_ADDON = "azureKeyvaultSecretsProvider"
SECRETS_STORE_CONFIG = {"enableSecretRotation": "true", "rotationPollInterval": "2m"}
IMAGE_CLEANER_INTERVAL_HOURS = 168  # AKS's default: a weekly scan
# Outbound types that send egress through something the stack controls (a NAT gateway, or a firewall's routes).
CONTROLLED_EGRESS = ("userAssignedNATGateway", "managedNATGateway", "userDefinedRouting")

Check = Callable[["ClusterPlan", "Sequence[PoolPlan]"], "tuple[bool, str]"]  # passes?, and what the plan has

_SECURITY = ("aks", "cluster", "security")
_NETWORK = ("aks", "cluster", "network")


@dataclass(frozen=True)
class Rule:
    """One baseline rule: ``check`` says whether the plan passes, and what it has (or lacks)."""

    name: str
    severity: Severity
    title: str
    setting: tuple[str, ...]  # the stack key that decides it
    fix: str
    check: Check

    @property
    def source(self) -> str:
        return "PSRule for Azure" if self.name.startswith("Azure.") else "gpufleet"


def _authorized_ips(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    api = c.security.api_server
    if api.private:
        return True, "private cluster: no public endpoint"
    if api.authorized_ip_ranges:
        nat = " and the NAT gateway's address" if c.egress.authorize_nat_ip else ""
        return True, f"public endpoint open to {', '.join(api.authorized_ip_ranges)}{nat} only"
    return False, "the API server's public endpoint accepts connections from every address"


def _network_policy(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    if c.network.policy == "none":
        return False, "no network policy engine: NetworkPolicies are not enforced"
    return True, f"network policy engine {c.network.policy}"


def _local_accounts(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    if c.security.local_accounts:
        return False, "local accounts are enabled: a cluster-admin certificate bypasses Entra ID"
    return True, "local accounts disabled"


def _managed_aad(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    return (True, "AKS-managed Entra ID") if c.security.entra_rbac else (False, "no AKS-managed Entra ID integration")


def _azure_rbac(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    if c.security.entra_rbac:
        return True, "Azure RBAC authorizes Kubernetes access"
    return False, "Kubernetes authorization is not Azure RBAC"


def _defender(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    if c.monitoring is not None and c.monitoring.defender:
        return True, "Defender security monitoring reports to the Log Analytics workspace"
    return False, "Microsoft Defender for Containers is off"


def _logs(categories: Sequence[str], metrics: Sequence[str] = ()) -> Check:
    def check(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
        sent = c.monitoring.log_categories if c.monitoring is not None else ()
        sent_metrics = c.monitoring.metric_categories if c.monitoring is not None else ()
        missing = [x for x in categories if x not in sent] + [m for m in metrics if m not in sent_metrics]
        if missing:
            return False, f"not sent to Log Analytics: {', '.join(missing)}"
        return True, f"{', '.join((*categories, *metrics))} sent to Log Analytics"

    return check


def _addon(name: str, what: str) -> Check:
    def check(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
        on = c.addon(name) is not None
        return on, f"{what} {'on' if on else 'is off'} (add-on {name})"

    return check


def _secret_rotation(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    addon = c.addon(SECRETS_STORE_ADDON)
    if addon is None:
        return False, "no Secrets Store CSI driver, so no secret rotation"
    if addon.config.get("enableSecretRotation") != "true":
        return False, "secret rotation is off"
    return True, f"secrets rotated every {addon.config.get('rotationPollInterval', '2m')}"


def _egress(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    egress = c.egress
    if egress.outbound_type not in CONTROLLED_EGRESS:
        return False, f"outbound type {egress.outbound_type}: nodes reach the internet through the load balancer"
    through = "the program's NAT gateway" if egress.create_nat_gateway else "the stack's NAT gateway or routes"
    return True, f"outbound type {egress.outbound_type}: through {through}"


def _image_cleaner(c: ClusterPlan, _: Sequence[PoolPlan]) -> tuple[bool, str]:
    if c.image_cleaner_hours is None:
        return False, "Image Cleaner is off: unused, vulnerable images stay on nodes"
    return True, f"Image Cleaner every {c.image_cleaner_hours} hours"


def _encryption_at_host(c: ClusterPlan, pools: Sequence[PoolPlan]) -> tuple[bool, str]:
    without = ([c.system_pool.name] if not c.system_pool_encryption_at_host else []) + [
        p.name for p in pools if not p.encryption_at_host
    ]
    if without:
        return False, f"pools without encryption at host: {', '.join(without)}"
    return True, "every pool encrypted at host"


RULES: tuple[Rule, ...] = (
    Rule(
        "Azure.AKS.AuthorizedIPs",
        "high",
        "Restrict access to the API server endpoint",
        (*_SECURITY, "api_server"),
        "set api_server.authorized_ip_ranges to the platform team's and the deploying runner's egress ranges, or"
        " api_server.private: true",
        _authorized_ips,
    ),
    Rule(
        "Azure.AKS.NetworkPolicy",
        "high",
        "Enforce Kubernetes network policies",
        (*_NETWORK, "policy"),
        "set network.policy to cilium (the default), calico or azure",
        _network_policy,
    ),
    Rule(
        "Azure.AKS.LocalAccounts",
        "high",
        "Disable local accounts (named Entra ID accounts only)",
        (*_SECURITY, "local_accounts"),
        "set security.local_accounts: false (the default)",
        _local_accounts,
    ),
    Rule(
        "Azure.AKS.ManagedAAD",
        "high",
        "Use AKS-managed Entra ID integration",
        (*_SECURITY, "entra_rbac"),
        "set security.entra_rbac: true (the default)",
        _managed_aad,
    ),
    Rule(
        "Azure.AKS.AzureRBAC",
        "medium",
        "Authorize Kubernetes access with Azure RBAC",
        (*_SECURITY, "entra_rbac"),
        "set security.entra_rbac: true (the default)",
        _azure_rbac,
    ),
    Rule(
        "Azure.AKS.DefenderProfile",
        "medium",
        "Enable Microsoft Defender for Containers",
        (*_SECURITY, "defender"),
        "set security.defender: true (the default)",
        _defender,
    ),
    Rule(
        "Azure.AKS.AzurePolicyAddOn",
        "medium",
        "Enable the Azure Policy add-on",
        (*_SECURITY, "azure_policy"),
        "set security.azure_policy: true (the default)",
        _addon(AZURE_POLICY_ADDON, "the Azure Policy add-on"),
    ),
    Rule(
        "Azure.AKS.AuditLogs",
        "medium",
        "Send the audit logs (kube-audit-admin, guard) to Log Analytics",
        (*_SECURITY, "logs", "audit"),
        "set security.logs.audit: true (the default)",
        _logs(AUDIT_LOG_CATEGORIES),
    ),
    Rule(
        "Azure.AKS.PlatformLogs",
        "medium",
        "Send the control plane's logs and metrics to Log Analytics",
        (*_SECURITY, "logs", "platform"),
        "set security.logs.platform: true (the default)",
        _logs(PLATFORM_LOG_CATEGORIES, METRIC_CATEGORIES),
    ),
    Rule(
        "gpufleet.AKS.EgressControl",
        "medium",
        "Send node egress through a NAT gateway or a firewall",
        (*_NETWORK, "egress", "outbound_type"),
        "set network.egress.outbound_type to userAssignedNATGateway (the default) or userDefinedRouting with"
        " route_table_id",
        _egress,
    ),
    Rule(
        "gpufleet.AKS.ImageCleaner",
        "low",
        "Remove unused images from nodes (Image Cleaner)",
        (*_SECURITY, "image_cleaner"),
        "set security.image_cleaner: true (the default)",
        _image_cleaner,
    ),
    Rule(
        "Azure.AKS.SecretStore",
        "low",
        "Use the Secrets Store CSI driver (Key Vault)",
        (*_SECURITY, "secrets_store_csi"),
        "set security.secrets_store_csi: true (the default)",
        _addon(SECRETS_STORE_ADDON, "the Secrets Store CSI driver"),
    ),
    Rule(
        "Azure.AKS.SecretStoreRotation",
        "low",
        "Rotate Secrets Store CSI driver secrets",
        (*_SECURITY, "secrets_store_csi"),
        "set security.secrets_store_csi: true (the default; rotation comes with it)",
        _secret_rotation,
    ),
    Rule(
        "gpufleet.AKS.EncryptionAtHost",
        "low",
        "Encrypt node disks and caches at the host",
        (*_SECURITY, "encryption_at_host"),
        "set security.encryption_at_host: true (the default; the subscription needs the EncryptionAtHost feature)",
        _encryption_at_host,
    ),
)
RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)


@dataclass(frozen=True)
class RuleResult:
    """One rule's outcome for a stack: ``waived`` is a failure the stack accepts, with its reason."""

    rule: Rule
    status: Status
    detail: str
    reason: str | None = None
    unused_waiver: bool = False  # waived, but the rule passes: the waiver can go

    @property
    def blocking(self) -> bool:
        return self.status == "fail" and self.rule.severity in BLOCKING

    @property
    def message(self) -> str:
        """A failure as users act on it: what fails and the two ways out."""
        r = self.rule
        return (
            f"{r.name} ({r.severity}) fails: {self.detail}; {r.fix}, or accept it with"
            f" aks.cluster.security.waivers: {{{r.name}: {{reason: ...}}}}"
        )

    def to_dict(self) -> dict[str, Any]:
        r = self.rule
        return {
            "rule": r.name,
            "source": r.source,
            "severity": r.severity,
            "title": r.title,
            "status": self.status,
            "detail": self.detail,
            "reason": self.reason,
            "unused_waiver": self.unused_waiver,
            "setting": ".".join(r.setting),
            "fix": r.fix,
        }


@dataclass(frozen=True)
class Audit:
    """A stack's results, in the order of :data:`RULES` (none for a stack without an AKS cluster)."""

    stack: str
    results: tuple[RuleResult, ...]

    @property
    def blocking(self) -> tuple[RuleResult, ...]:
        """Unwaived high and medium failures."""
        return tuple(r for r in self.results if r.blocking)

    @property
    def ok(self) -> bool:
        return not self.blocking

    def count(self, status: Status, severity: Severity) -> int:
        return sum(1 for r in self.results if r.status == status and r.rule.severity == severity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "ok": self.ok,
            "counts": {s: {st: self.count(st, s) for st in ("pass", "fail", "waived")} for s in SEVERITIES},
            "rules": [r.to_dict() for r in self.results],
        }


def audit_cluster(cluster: ClusterPlan, pools: Sequence[PoolPlan]) -> tuple[RuleResult, ...]:
    """Every rule on one cluster's plan; a failing rule the stack waives is ``waived`` with its reason."""
    waivers = {name: w.reason for name, w in cluster.security.waivers.items()}
    results = []
    for rule in RULES:
        passes, detail = rule.check(cluster, pools)
        reason = waivers.get(rule.name)
        if passes:
            results.append(RuleResult(rule, "pass", detail, reason, unused_waiver=reason is not None))
        elif reason is not None:
            results.append(RuleResult(rule, "waived", detail, reason))
        else:
            results.append(RuleResult(rule, "fail", detail))
    return tuple(results)


def audit(plan: StackPlan) -> Audit:
    """The stack's plan against the baseline."""
    if plan.cluster is None:
        return Audit(plan.stack, ())
    return Audit(plan.stack, audit_cluster(plan.cluster, plan.pools))
