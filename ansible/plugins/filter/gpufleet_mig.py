"""Controller-side filters for MIG plays: which hosts get a MIG layout, which layout, and the mig-parted config.

They take the stack as the ``gpufleet_stack`` lookup returns it (validated, as plain data) and answer from
gpufleet's plan (``gpufleet.plan.plan_stack``), so a layout is never re-derived in YAML.
"""

from __future__ import annotations

from typing import Any

from gpufleet.plaindata import plain_data


def _mig_groups(stack: dict[str, Any]) -> list[tuple[str, str]]:
    """(group name, layout name) of each bare-metal host group with a MIG layout, in the stack's order."""
    groups = ((stack or {}).get("baremetal") or {}).get("host_groups") or []
    return [(g["name"], g["mig"]["config_name"]) for g in groups if g.get("mig")]


def gpufleet_mig_parted_config(stack: dict[str, Any]) -> dict[str, Any]:
    """The plan's ``baremetal.mig_parted_config``: one mig-parted ``v1`` config with every host group's layout
    (and ``all-disabled``); a config with only ``all-disabled`` when no group has a layout."""
    from gpufleet.mig.outputs import mig_parted_config
    from gpufleet.plan.hosts import plan_spec

    plan = plan_spec(stack)
    config = plan.baremetal.mig_parted_config if plan.baremetal is not None else None
    return config or mig_parted_config([])


def gpufleet_host_mig_layout(stack: dict[str, Any], group_names: list[str]) -> str:
    """The MIG layout (``mig.config_name``) of the host's group (``StackPlan.host_group_of``); ``""`` when that group
    has none, or the host is in none of the stack's host groups."""
    from gpufleet.plan.hosts import plan_spec

    group = plan_spec(plain_data(stack)).host_group_of(plain_data(group_names))
    return group.mig_layout if group is not None else ""


def gpufleet_mig_hosts(stack: dict[str, Any], hosts: str = "all") -> str:
    """An Ansible host pattern: the hosts of the groups with a MIG layout, within ``hosts`` (a pattern, e.g. the
    ``gpufleet_hosts`` extra var); ``!all`` (no host) when no group has a layout."""
    groups = [group for group, _ in _mig_groups(plain_data(stack))]
    if not groups:
        return "!all"
    return ":".join(groups) + ("" if hosts in ("all", "*", "") else f":&{hosts}")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpufleet_mig_parted_config": gpufleet_mig_parted_config,
            "gpufleet_host_mig_layout": gpufleet_host_mig_layout,
            "gpufleet_mig_hosts": gpufleet_mig_hosts,
        }
