"""Controller-side filters: the roles reach gpufleet's planners through these (nothing is re-derived in YAML)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def gpufleet_gpu_catalog(_: Any = None) -> dict[str, dict[str, Any]]:
    """``vendor:device`` -> ``{model, mig}`` for every catalog GPU (the ``gpu_topology`` module's input)."""
    from gpufleet.catalog import load_catalog

    return {pid: {"model": g.name, "mig": g.mig_capable} for g in load_catalog().gpus for pid in g.pci_ids}


def gpufleet_topology_plan(facts: dict[str, Any], profile: dict[str, Any] | None = None, host: str = "host") -> dict:
    """The topology plan (gpufleet.topology.plan) of one host's ``gpu_topology`` facts and a tuning profile."""
    from pydantic import ValidationError

    from gpufleet.spec.models import TuningProfile
    from gpufleet.topology import TopologyError, plan

    try:
        tuning = TuningProfile.model_validate(profile or {})
    except ValidationError as exc:
        raise AnsibleFilterError(f"gpufleet_topology_plan: invalid tuning profile: {exc}") from exc
    try:
        return plan(facts, tuning, host).to_dict()
    except TopologyError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpufleet_gpu_catalog": gpufleet_gpu_catalog, "gpufleet_topology_plan": gpufleet_topology_plan}
