"""The Ansible inventory of a stack's bare-metal hosts (``gpufleet inventory STACK``): pure, no I/O.

Two sources, one shape. A stack that lists its BMC-managed servers (``gpufleet:baremetal.hosts``) gives each host's
group and SSH endpoint; a stack without them (the lab, whose hosts ``gpufleet lab up`` creates) has its inventory in
the file ``baremetal.inventory`` names, which is read back here. Either way the result is the YAML inventory Ansible
reads (``all: children: <host_group>: hosts: <name>: {ansible_host, ansible_port}``), with no secret in it: a BMC
password stays a Pulumi secret, and an inventory file holding a password variable is refused, not copied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.spec.models import BaremetalHost, Stack

# Ansible's connection and privilege-escalation passwords (its "magic" variables) and names that say they hold one.
SECRET_VARS = frozenset(
    {"ansible_password", "ansible_ssh_pass", "ansible_become_password", "ansible_become_pass", "ansible_sudo_pass"}
)
_SECRET_NAME = re.compile(r".*(password|passwd|_pass|secret|token)$", re.IGNORECASE)


class InventoryError(ValueError):
    """An inventory file gpufleet cannot turn into a stack's inventory; the message says where and why."""


@dataclass(frozen=True)
class InventoryHost:
    """One host of the inventory: its group (a stack host group) and where SSH reaches it."""

    name: str
    group: str
    ansible_host: str
    ansible_port: int | None = None
    vars: Mapping[str, Any] = field(default_factory=dict)  # further host variables (a lab host's key file...)

    def host_vars(self) -> dict[str, Any]:
        port = {"ansible_port": self.ansible_port} if self.ansible_port is not None else {}
        return {"ansible_host": self.ansible_host, **port, **self.vars}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "group": self.group,
            "ansible_host": self.ansible_host,
            "ansible_port": self.ansible_port,
        }


@dataclass(frozen=True)
class Inventory:
    """The stack's hosts by group; ``groups`` keeps every group in order, those without hosts included."""

    groups: tuple[str, ...]
    hosts: tuple[InventoryHost, ...]
    all_vars: Mapping[str, Any] = field(default_factory=dict)
    group_vars: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def members(self, group: str) -> list[InventoryHost]:
        return [h for h in self.hosts if h.group == group]

    def to_dict(self) -> dict[str, Any]:
        """The YAML inventory's data (``ansible-inventory -i`` reads it)."""
        children: dict[str, Any] = {}
        for group in self.groups:
            entry: dict[str, Any] = {}
            if self.group_vars.get(group):
                entry["vars"] = dict(self.group_vars[group])
            members = self.members(group)
            if members:
                entry["hosts"] = {h.name: h.host_vars() for h in members}
            children[group] = entry
        top: dict[str, Any] = {"vars": dict(self.all_vars)} if self.all_vars else {}
        return {"all": {**top, "children": children}}


def host_entry(host: BaremetalHost) -> InventoryHost:
    """A stack host as Ansible reaches it once booted (``ssh.address``, ``ssh.port``); nothing of its BMC."""
    return InventoryHost(host.name, host.host_group, host.ssh.address, host.ssh.port)


def from_hosts(groups: Sequence[str], hosts: Iterable[InventoryHost]) -> Inventory:
    """An inventory of ``hosts`` with the stack's ``groups`` (in order; a host's group that is not among them is
    added after them). The Pulumi program's outputs map to it too: one InventoryHost per created host."""
    hosts = tuple(hosts)
    extra = [h.group for h in hosts if h.group not in groups]
    return Inventory(tuple(dict.fromkeys([*groups, *extra])), hosts)


def stack_inventory(stack: Stack) -> Inventory:
    """The inventory of the hosts a stack lists (``gpufleet:baremetal.hosts``), every host group included."""
    if stack.baremetal is None:
        raise InventoryError(f"stack {stack.name} has no bare-metal hosts (no gpufleet:baremetal): its nodes are AKS's")
    groups = [g.name for g in stack.baremetal.host_groups]
    return from_hosts(groups, (host_entry(h) for h in stack.baremetal.hosts))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InventoryError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _check_no_secrets(variables: Mapping[str, Any], where: str) -> None:
    for name in variables:
        if str(name) in SECRET_VARS or _SECRET_NAME.fullmatch(str(name)):
            raise InventoryError(
                f"{where}: {name} holds a secret in plain text; gpufleet inventory copies no secrets (use an SSH key,"
                " or keep it in an ansible-vault file beside the inventory)"
            )


def _group_hosts(name: str, data: Mapping[str, Any], where: str) -> tuple[list[InventoryHost], Mapping[str, Any]]:
    unknown = set(data) - {"hosts", "vars", "children"}
    if unknown:
        raise InventoryError(f"{where}: unknown key {sorted(map(str, unknown))[0]!r} (a group has hosts, vars)")
    if data.get("children"):
        raise InventoryError(
            f"{where}.children: groups inside groups are not supported; list each host group under all"
        )
    group_vars = _mapping(data.get("vars"), f"{where}.vars")
    _check_no_secrets(group_vars, f"{where}.vars")
    hosts = []
    for host, host_vars in _mapping(data.get("hosts"), f"{where}.hosts").items():
        hwhere = f"{where}.hosts.{host}"
        host_vars = dict(_mapping(host_vars, hwhere))
        _check_no_secrets(host_vars, hwhere)
        address = host_vars.pop("ansible_host", host)
        port = host_vars.pop("ansible_port", None)
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
            raise InventoryError(f"{hwhere}.ansible_port: {port!r} is not a TCP port (1-65535)")
        hosts.append(InventoryHost(str(host), name, str(address), port, host_vars))
    return hosts, group_vars


def inventory_from_document(doc: Any, file: str, host_groups: Sequence[str] = ()) -> Inventory:
    """A YAML inventory (``all: {vars, hosts, children: {<group>: {vars, hosts}}}``, or groups at the top level),
    as written by ``gpufleet lab up``, read back. ``host_groups``: the stack's groups, listed first."""
    top = _mapping(doc, file)
    all_data = _mapping(top.get("all"), f"{file}: all")
    unknown = set(all_data) - {"hosts", "vars", "children"}
    if unknown:
        raise InventoryError(
            f"{file}: all: unknown key {sorted(map(str, unknown))[0]!r} (all has hosts, vars, children)"
        )
    all_vars = _mapping(all_data.get("vars"), f"{file}: all.vars")
    _check_no_secrets(all_vars, f"{file}: all.vars")
    if all_data.get("hosts"):
        raise InventoryError(f"{file}: all.hosts: every host belongs to a host group (all.children.<group>.hosts)")
    groups: dict[str, Any] = dict(_mapping(all_data.get("children"), f"{file}: all.children"))
    groups.update({str(k): v for k, v in top.items() if k != "all"})
    hosts: list[InventoryHost] = []
    group_vars: dict[str, Mapping[str, Any]] = {}
    for name, data in groups.items():
        members, gvars = _group_hosts(str(name), _mapping(data, f"{file}: {name}"), f"{file}: {name}")
        hosts.extend(members)
        if gvars:
            group_vars[str(name)] = gvars
    seen: dict[str, str] = {}
    for h in hosts:
        if h.name in seen and seen[h.name] != h.group:
            raise InventoryError(f"{file}: host {h.name} is in groups {seen[h.name]} and {h.group}; give it one")
        seen.setdefault(h.name, h.group)
    order = tuple(dict.fromkeys([*host_groups, *map(str, groups)]))
    return Inventory(order, tuple(hosts), dict(all_vars), group_vars)


__all__ = [
    "Inventory",
    "InventoryError",
    "InventoryHost",
    "from_hosts",
    "host_entry",
    "inventory_from_document",
    "stack_inventory",
]
