"""Controller-side filters: the roles reach gpufleet's planners through these (nothing is re-derived in YAML)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from gpufleet.common.plaindata import plain_data


def gpufleet_gpu_catalog(_: Any = None) -> dict[str, dict[str, Any]]:
    """``vendor:device`` -> ``{model, mig}`` for every catalog GPU (the ``gpu_topology`` module's input)."""
    from gpufleet.catalog import load_catalog

    return load_catalog().gpus_by_pci_id


def gpufleet_kernel_modules_unsupported(gpus: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The models among ``gpu_topology`` GPUs (NVIDIA ones) that NVIDIA's kernel modules do not support, per
    flavour, from the catalog: ``open`` (older than Turing) and ``proprietary`` (Grace Hopper, Blackwell); each
    list sorted, each model once."""
    from gpufleet.catalog import load_catalog

    catalog = load_catalog()
    by_name = {g.name: g for g in catalog.gpus}
    unsupported: dict[str, set[str]] = {"open": set(), "proprietary": set()}
    for gpu in plain_data(gpus) or []:
        model = by_name.get(gpu.get("model") or "")
        if model is None or model.vendor != "nvidia":
            continue
        for flavour, supported in zip(("open", "proprietary"), catalog.kernel_modules(model), strict=True):
            if not supported:
                unsupported[flavour].add(model.name)
    return {flavour: sorted(models) for flavour, models in unsupported.items()}


def gpufleet_nvidia_driver_plan(facts: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The ``nvidia_driver`` role's install plan (gpufleet.host.driver.plan_driver) from the host's facts and the role's
    options; a driver that cannot work fails here, before the host is touched."""
    from gpufleet.host.driver import DriverPlanError, Platform, plan_driver

    facts, options = plain_data(facts), plain_data(options)
    platform = Platform.from_facts(facts)
    names = ("kernel_modules", "source", "cuda_repo_base", "debian_mirror", "debian_security_mirror")
    unsupported = gpufleet_kernel_modules_unsupported(options.get("gpus") or [])
    try:
        return plan_driver(
            platform,
            branch=str(options["branch"]),
            secure_boot=bool(options.get("secure_boot", False)),
            gpus_without_open_modules=unsupported["open"],
            gpus_without_proprietary_modules=unsupported["proprietary"],
            nvswitches=len(options.get("nvswitches") or []),
            **{name: options[name] for name in names if options.get(name)},
        ).to_dict()
    except DriverPlanError as exc:
        raise AnsibleFilterError(f"nvidia_driver: {exc}") from exc


def gpufleet_driver_problems(state: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """How the host's driver (``nvidia_driver_state``'s ``state``) differs from its plan
    (gpufleet.host.driver.driver_problems; ``options``: branch, kernel_modules, hold, must_be_loaded, mask_imex); empty
    when it matches."""
    from gpufleet.host.driver import DriverState, driver_problems

    options = plain_data(options)
    return driver_problems(
        DriverState.from_dict(plain_data(state)),
        branch=str(options["branch"]),
        kernel_modules=str(options.get("kernel_modules", "open")),
        hold=bool(options.get("hold", True)),
        must_be_loaded=bool(options.get("must_be_loaded", True)),
        mask_imex=bool(options.get("mask_imex", False)),
    )


def _tuning(profile: dict[str, Any] | None, name: str) -> Any:
    from pydantic import ValidationError

    from gpufleet.spec.models import TuningProfile

    try:
        return TuningProfile.model_validate(plain_data(profile) or {})
    except ValidationError as exc:
        raise AnsibleFilterError(f"{name}: invalid tuning profile: {exc}") from exc


def gpufleet_topology_plan(
    facts: dict[str, Any], profile: dict[str, Any] | None = None, host: str = "host", vms: bool = False
) -> dict:
    """The topology plan (gpufleet.host.topology.plan) of one host's ``gpu_topology`` facts and a tuning profile;
    ``vms``: the host's group has ``virtualization:`` (IOMMU arguments without SR-IOV too)."""
    from gpufleet.host.hostfacts import FactsError
    from gpufleet.host.topology import TopologyError, plan

    tuning = _tuning(profile, "gpufleet_topology_plan")
    try:
        return plan(plain_data(facts), tuning, host, vms=bool(vms)).to_dict()
    except TopologyError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    except FactsError as exc:
        raise AnsibleFilterError(f"host {host}: {exc}") from exc


def gpufleet_virt_plan(
    facts: dict[str, Any], virtualization: dict[str, Any], profile: dict[str, Any] | None = None, host: str = "host"
) -> dict[str, Any]:
    """The VM plan (gpufleet.host.virt.plan) of one host: ``{vms, hostdevs, error}``: ``hostdevs`` the PCI addresses the
    VMs are given (what the vfio role binds), ``error`` the planner's refusal (then no VMs), which the play reports
    (a failure, or in check mode before the sriov role made the VFs, a note)."""
    from pydantic import ValidationError

    from gpufleet.host.hostfacts import FactsError
    from gpufleet.host.topology import TopologyError
    from gpufleet.host.virt import VirtError, plan
    from gpufleet.spec.models import Virtualization

    try:
        request = Virtualization.model_validate(plain_data(virtualization))
    except ValidationError as exc:
        raise AnsibleFilterError(f"gpufleet_virt_plan: invalid virtualization: {exc}") from exc
    tuning = _tuning(profile, "gpufleet_virt_plan")
    try:
        vms = plan(plain_data(facts), request, tuning, host).to_dict()["vms"]
    except (VirtError, TopologyError) as exc:
        return {"vms": [], "hostdevs": [], "error": str(exc)}
    except FactsError as exc:
        raise AnsibleFilterError(f"host {host}: {exc}") from exc
    return {"vms": vms, "hostdevs": [d for vm in vms for d in vm["hostdevs"]], "error": None}


def gpufleet_grubby_commands(info: str, add: list[str], remove: list[str]) -> list[list[str]]:
    """The grubby commands (RHEL) that make the default kernel's arguments contain ``add`` and none of ``remove``,
    from ``grubby --info=DEFAULT``; empty when nothing needs to change."""
    import re
    import shlex

    m = re.search(r'^args="(.*)"$', info, re.M)
    current = shlex.split(m.group(1)) if m else []
    commands = []
    gone = [a for a in remove if a in current]
    if gone:
        commands.append(["grubby", "--update-kernel=ALL", "--remove-args=" + " ".join(gone)])
    missing = [a for a in dict.fromkeys(add) if a not in current or a in gone]
    if missing:
        commands.append(["grubby", "--update-kernel=ALL", "--args=" + " ".join(missing)])
    return commands


def gpufleet_cpulist(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    from gpufleet.host.hostfacts import format_cpulist

    return format_cpulist(int(c) for c in cpus)


def gpufleet_cpus(text: str) -> list[int]:
    """A CPU list as the kernel or systemd prints it (``0-2,5`` or ``0 1 2 5``) -> sorted CPUs."""
    import re

    from gpufleet.host.hostfacts import parse_cpulist

    joined = ",".join(str(text).split())
    if not re.fullmatch(r"(\d+(-\d+)?(,\d+(-\d+)?)*)?", joined):
        raise AnsibleFilterError(f"gpufleet_cpus: {text!r} is not a CPU list")
    try:
        return parse_cpulist(joined)
    except ValueError as exc:  # a reversed range (7-0), a CPU number no kernel has
        raise AnsibleFilterError(f"gpufleet_cpus: {text!r} is not a CPU list: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpufleet_gpu_catalog": gpufleet_gpu_catalog,
            "gpufleet_topology_plan": gpufleet_topology_plan,
            "gpufleet_virt_plan": gpufleet_virt_plan,
            "gpufleet_kernel_modules_unsupported": gpufleet_kernel_modules_unsupported,
            "gpufleet_nvidia_driver_plan": gpufleet_nvidia_driver_plan,
            "gpufleet_driver_problems": gpufleet_driver_problems,
            "gpufleet_grubby_commands": gpufleet_grubby_commands,
            "gpufleet_cpulist": gpufleet_cpulist,
            "gpufleet_cpus": gpufleet_cpus,
        }
