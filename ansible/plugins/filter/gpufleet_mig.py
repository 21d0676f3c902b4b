"""Controller-side filters for MIG plays: which hosts take part, and the layouts a config names. The layouts
themselves come from the stack's plan (the ``gpufleet_plan`` lookup: ``mig_host_groups``, ``mig_parted_config``, a
host's ``mig_layout``)."""

from __future__ import annotations

from typing import Any

from gpufleet.common.plaindata import plain_data


def gpufleet_mig_hosts(groups: list[str], hosts: str = "all") -> str:
    """An Ansible host pattern: the hosts of ``groups`` (the plan's ``mig_host_groups``), within ``hosts`` (a
    pattern, e.g. the ``gpufleet_hosts`` extra var); ``!all`` (no host) when there is no group."""
    names = [str(g) for g in plain_data(groups) or []]
    if not names:
        return "!all"
    return ":".join(names) + ("" if hosts in ("all", "*", "") else f":&{hosts}")


def gpufleet_mig_configs(config: dict[str, Any]) -> dict[str, Any]:
    """The named layouts of a mig-parted config, with ``all-disabled`` (gpufleet.mig.outputs.with_disabled): the
    layout every host can fall back to."""
    from gpufleet.mig.outputs import with_disabled

    return with_disabled(plain_data(config) or {})["mig-configs"]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpufleet_mig_hosts": gpufleet_mig_hosts, "gpufleet_mig_configs": gpufleet_mig_configs}
