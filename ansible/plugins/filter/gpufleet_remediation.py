"""Filters of ansible/remediate.yml and verify.yml's health check: the hosts' Xids and remediation state, judged by
gpufleet.fleet.remediation against the stack's policy (docs/remediation.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.common.plaindata import plain_data


def _spec(remediation: Any) -> Any:
    """The stack's ``baremetal.remediation`` from the plan's plain view of it (gpufleet_plan's ``remediation``)."""
    from gpufleet.spec.models import Remediation

    return Remediation.model_validate(plain_data(remediation or {}))


def _policy(remediation: Any) -> Any:
    from gpufleet.fleet.remediation import policy_from

    return policy_from(_spec(remediation))


def _health(host: str, facts: Mapping[str, Any]) -> Any:
    from gpufleet.fleet.remediation import HostHealth, host_health, load_state

    if facts.get("unreachable"):
        return HostHealth(host, str(facts.get("host_group")), (), f"unreachable ({facts['unreachable']})")
    state = load_state(facts.get("state"))
    return host_health(host, str(facts.get("host_group")), str(facts.get("kernel_log") or ""), state,
                       str(facts.get("boot_id") or ""))  # fmt: skip


ELSEWHERE = (
    "this stack's hosts are remediated in their Kubernetes cluster (baremetal.remediation.engine node-healthcheck:"
    " Node Healthcheck acts on them); remediate.yml acting too would take hosts out twice (docs/remediation.md)"
)


def gpufleet_remediation_decide(
    hostvars: Mapping[str, Any],
    play_hosts: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    host_groups: Sequence[str],
    remediation: Any,
) -> dict[str, Any]:
    """``{decisions: [...], lines: [...], errors: [...]}`` for the play's hosts, each of which set the fact
    ``gpufleet_remediation_read`` ``{host_group, kernel_log, state, boot_id}`` or ``{host_group, unreachable}``;
    ``groups``: the inventory's groups (Ansible's ``groups``), of which the stack's ``host_groups`` count."""
    from gpufleet.fleet.remediation import decide, incomplete_groups, render

    hosts = [str(h) for h in plain_data(list(play_hosts))]
    inventory = plain_data(dict(groups))
    groups = {str(g): [str(h) for h in inventory.get(g, [])] for g in plain_data(list(host_groups))}
    errors = [ELSEWHERE] if _spec(remediation).engine == "node-healthcheck" else incomplete_groups(hosts, groups)
    healths = []
    for host in hosts:
        facts = plain_data(dict(hostvars[host].get("gpufleet_remediation_read") or {}))
        healths.append(_health(host, facts))
    decisions = [] if errors else decide(_policy(remediation), healths)
    return {
        "decisions": [d.to_dict() for d in decisions],
        "lines": render(decisions) if not errors else ["gpufleet remediate: nothing decided", *errors],
        "errors": errors,
    }


XIDS_SPLIT = "--- xids"  # read_xids.yml's output: the boot's id, the state file, this line, the Xid lines


def gpufleet_xids_read(lines: Sequence[str]) -> dict[str, str]:
    """``{boot_id, state, kernel_log}`` from the lines playbooks/tasks/read_xids.yml's command printed."""
    lines = [str(line) for line in plain_data(list(lines))]
    split = lines.index(XIDS_SPLIT) if XIDS_SPLIT in lines else len(lines)
    return {
        "boot_id": lines[0] if lines else "",
        "state": "\n".join(lines[1:split]),
        "kernel_log": "\n".join(lines[split + 1 :]),
    }


def gpufleet_health_check(read: Mapping[str, Any], remediation: Any) -> dict[str, Any]:
    """verify.yml's health check: ``{problems: [...], note: str}`` for one host, from what read_xids.yml read on it
    (its ``gpufleet_xids_read``)."""
    from gpufleet.fleet.remediation import health_problems, host_health, load_state

    read = plain_data(dict(read))
    data = load_state(read.get("state"))
    health = host_health("", "", str(read.get("kernel_log") or ""), data, str(read.get("boot_id") or ""))
    return dict(zip(("problems", "note"), health_problems(health, _policy(remediation), data), strict=True))


def gpufleet_remediation_out(read: Mapping[str, Any], decision: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The host's remediation state once it is taken out of service (``read``: its gpufleet_remediation_read)."""
    from gpufleet.fleet.remediation import load_state, taken_out

    read = plain_data(dict(read))
    return taken_out(load_state(read.get("state")), plain_data(dict(decision)), str(read.get("boot_id")), str(now))


def gpufleet_remediation_after(
    read: Mapping[str, Any], decision: Mapping[str, Any], kernel_log: str, boot_id: str, now: str
) -> dict[str, Any]:
    """The host's remediation state after its action (gpufleet.fleet.remediation.after_action)."""
    from gpufleet.fleet.remediation import after_action, load_state

    read = plain_data(dict(read))
    return after_action(load_state(read.get("state")), plain_data(dict(decision)), str(read.get("boot_id")),
                        str(kernel_log or ""), str(boot_id), str(now))  # fmt: skip


def gpufleet_remediation_returned(read: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The host's remediation state when a person brings it back into service."""
    from gpufleet.fleet.remediation import load_state, returned

    read = plain_data(dict(read))
    return returned(load_state(read.get("state")), str(read.get("kernel_log") or ""), str(read.get("boot_id")),
                    str(now))  # fmt: skip


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpufleet_remediation_decide": gpufleet_remediation_decide,
            "gpufleet_health_check": gpufleet_health_check,
            "gpufleet_xids_read": gpufleet_xids_read,
            "gpufleet_remediation_out": gpufleet_remediation_out,
            "gpufleet_remediation_after": gpufleet_remediation_after,
            "gpufleet_remediation_returned": gpufleet_remediation_returned,
        }
