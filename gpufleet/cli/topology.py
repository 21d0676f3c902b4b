"""``gpufleet topology plan``: the NUMA tuning plan of one host from its recorded or live sysfs."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    command,
    emit_json,
    err,
    group,
    load_or_exit,
    out,
    printable,
    project_root,
    shown,
    usage_error,
)

topology_app = group(
    "Host tuning: NUMA, CPU pinning, hugepages, SR-IOV, kubelet.",
    help="Host topology: NUMA nodes, CPU pinning, hugepages, SR-IOV, kubelet.",
)


def _tuning_profile(name: str, stack: str | None, root: Path | None) -> Any:
    """A named tuning profile: from ``stack``, or the one definition the project's stacks agree on."""
    from gpufleet.spec.files import stack_files
    from gpufleet.spec.load import load_stack
    from gpufleet.spec.models import DEFAULT_TUNING_PROFILE, TuningProfile

    found: dict[str, Any] = {}
    if stack is not None:
        chosen = load_or_exit(stack, root, consequence="nothing planned")
        if name in chosen.tuning_profiles:
            found[stack] = chosen.tuning_profiles[name]
    else:
        for f in stack_files(project_root(root)):
            loaded = load_stack(f)  # the stacks that do not validate have no say
            if loaded.stack is not None and name in loaded.stack.tuning_profiles:
                found[loaded.name] = loaded.stack.tuning_profiles[name]
    if not found:
        if name == DEFAULT_TUNING_PROFILE:
            return TuningProfile()
        where = f"stack {stack}" if stack else "any stack"
        raise usage_error(f"no tuning profile {name!r} in {where} (gpufleet:tuning_profiles)")
    if len({p.model_dump_json() for p in found.values()}) > 1:
        raise usage_error(f"tuning profile {name!r} differs between stacks {', '.join(found)}: name one with --stack")
    return next(iter(found.values()))


def _with_overrides(profile: Any, cores_per_gpu: str | None, reserve_cores: int | None) -> Any:
    """The profile with the command line's ``--cores-per-gpu`` / ``--reserve-cores``, validated as a stack's are."""
    from pydantic import ValidationError

    from gpufleet.spec.models import TuningProfile

    update: dict[str, Any] = {}
    if cores_per_gpu is not None:
        low, dash, high = cores_per_gpu.partition("-")
        if not (low.isdigit() and (high.isdigit() or not dash)):
            raise usage_error(f"--cores-per-gpu {cores_per_gpu!r}: expected a number (8) or a range (4-16)")
        update["cores_per_gpu"] = {"min": int(low), "max": int(high or low)}
    if reserve_cores is not None:
        update["reserved_cores"] = reserve_cores
    if not update:
        return profile
    try:
        return TuningProfile.model_validate(profile.model_dump() | update)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(k) for k in problem["loc"]) or "cores_per_gpu"
        option = "--reserve-cores" if where.startswith("reserved") else "--cores-per-gpu"
        raise usage_error(f"{option}: {problem['msg']}") from None


@command(topology_app, "plan", "A host's NUMA plan: CPUs, hugepages, kernel args, kubelet.")
def topology_plan(
    host_root: Annotated[
        Path, typer.Option("--host-root", help="Root holding the host's sys/ and proc/ ('/' on the host itself).")
    ],
    profile: Annotated[
        str, typer.Option("--profile", help="Tuning profile name (gpufleet:tuning_profiles).")
    ] = "default",
    stack: Annotated[str | None, typer.Option("--stack", help="Stack whose tuning profile to use.")] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Host name for messages (default: the root's name).")
    ] = None,
    cores_per_gpu: Annotated[
        str | None,
        typer.Option(
            "--cores-per-gpu",
            metavar="N|MIN-MAX",
            help="Override the profile's cores_per_gpu: exactly N physical cores per GPU, or a range.",
        ),
    ] = None,
    reserve_cores: Annotated[
        int | None,
        typer.Option(
            "--reserve-cores",
            metavar="N",
            help="Override the profile's reserved_cores: N physical cores for the system.",
        ),
    ] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """The NUMA tuning plan of one host: CPUs per GPU, reserved and isolated CPUs, hugepages per node, kernel
    arguments, kubelet CPU/topology/memory managers, SR-IOV VFs, Slurm gres.conf. Each node's line says how its
    cores were split. Exit 1 when the host's facts are wrong (one line naming the sysfs file: a garbage CPU list, a
    FIFO, a symlink loop...) or the profile cannot work on the host (too few cores for the GPUs, a GPU the catalog
    does not know...), 2 for a usage error."""

    tuning = _with_overrides(_tuning_profile(profile, stack, root), cores_per_gpu, reserve_cores)
    name = host or os.path.basename(os.path.realpath(host_root)) or "localhost"
    facts, result = _planned_host(host_root, tuning, name, as_json)
    if as_json:
        emit_json(result.to_dict())
        return
    _render_topology(result, facts)


def _check_host_root(host_root: Path) -> None:
    """Exit 2 unless ``host_root`` holds ``sys/devices/system/node``; a path there that cannot be followed (a
    symlink loop) is a :class:`~gpufleet.host.hostfacts.FactsError`."""
    from gpufleet.host.hostfacts import FactsError

    node_dir = os.path.join(host_root, "sys/devices/system/node")
    try:
        is_dir = stat.S_ISDIR(os.stat(node_dir).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        is_dir = False
    except OSError as exc:
        raise FactsError(node_dir, f"cannot be read: {exc.strerror or exc}") from None
    if not is_dir:
        raise usage_error(f"{host_root} has no sys/devices/system/node: not a host root")


def _planned_host(host_root: Path, tuning: Any, name: str, as_json: bool) -> tuple[dict[str, Any], Any]:
    """The facts of the host below ``host_root`` and its topology plan under ``tuning``; exit 1 with the reason when
    the tree is not a host's or the plan is impossible."""
    from gpufleet.catalog import load_catalog
    from gpufleet.host.hostfacts import FactsError, read_host
    from gpufleet.host.topology import TopologyError, plan

    try:
        _check_host_root(host_root)
        facts = read_host(str(host_root), load_catalog().gpus_by_pci_id)
        return facts, plan(facts, tuning, name)
    except FactsError as exc:
        _refuse(name, f"host {name}: {exc}", {"error": str(exc), "path": exc.path}, as_json)
    except TopologyError as exc:
        _refuse(name, str(exc), {"error": exc.reason}, as_json)


def _refuse(host: str, message: str, detail: dict[str, Any], as_json: bool) -> NoReturn:
    """Exit 1 with ``message`` on one line (stderr), or with ``{host, ok: false, **detail}`` under ``--json``."""
    if as_json:
        emit_json({"host": host, "ok": False, **detail})
    else:
        err.print(f"[red]error:[/red] {shown(message)}")
    raise typer.Exit(EXIT_INVALID)


def _render_topology(p: Any, facts: dict[str, Any]) -> None:
    """Per NUMA node: CPUs, memory, GPUs, NICs and what the plan assigns. Text from the host (its name, CPU vendor,
    kernel, PCI addresses, interface names) is printed as it is: escaped, no markup or emoji of its own."""
    from gpufleet.host.hostfacts import format_cpulist

    def say(text: str, markup: bool = True) -> None:
        out.print(text, markup=markup, emoji=False)

    def host_text(value: Any) -> str:
        return shown(value)

    def names(dev: dict[str, Any]) -> str:
        return host_text(",".join(dev["interfaces"]) or dev["pci"])

    cores = len(facts["cores"])
    cpus = sum(len(c["cpus"]) for c in facts["cores"])
    say(
        f"[bold]{host_text(p.host)}[/bold]: {host_text(p.cpu_vendor)}, kernel {host_text(p.kernel)},"
        f" {len(p.numa_nodes)} NUMA node(s), {cores} cores / {cpus} CPUs (SMT {'on' if p.smt else 'off'}),"
        f" {len(p.gpus)} GPU(s), {len(facts['nics'])} NIC(s), {len(facts['nvswitches'])} NVSwitch(es)"
    )
    nics = {n["pci"]: n for n in facts["nics"]}
    pages = {(h["numa_node"], h["size_kib"]): h["count"] for h in p.hugepages}
    for node in p.numa_nodes:
        say(
            f"\n[bold]NUMA node {node.id}[/bold]  CPUs {format_cpulist(node.cpus) or '-'} ({node.cores} cores),"
            f" {node.memory_mib / 1024:g} GiB"
        )
        if node.choice:
            say(f"  {node.choice}", markup=False)
        say(f"  reserved for the system  CPUs {format_cpulist(node.reserved_cpus) or '-'}")
        for g in (g for g in p.gpus if g.numa_node == node.id):
            near = ", ".join(f"{names(nics[n])} ({nics[n]['kind']})" for n in g.nics) or "none"
            say(
                f"  GPU {g.index} {host_text(g.pci)} {host_text(g.model or 'unknown model')}"
                f"  CPUs {format_cpulist(g.cpus)}  NIC {near}"
            )
        huge = [
            f"{pages[(node.id, s)]} x {'1G' if s == 1048576 else '2M'}"
            for s in (1048576, 2048)
            if (node.id, s) in pages
        ]
        say(f"  hugepages  {', '.join(huge) or 'none'}")
        for dev in (d for d in p.sriov if d["numa_node"] == node.id):
            say(f"  SR-IOV  {names(dev)}: {dev['numvfs']} of {dev['totalvfs']} VFs")
    unknown = [d for d in p.sriov if d["numa_node"] is None]
    for dev in unknown:
        say(f"  SR-IOV  {names(dev)} (NUMA node unknown): {dev['numvfs']} VFs")
    k = p.kubelet
    say(f"\nkernel arguments  {' '.join(p.kernel_args) or '(none to add)'}", markup=False)
    say(
        f"kubelet  cpuManagerPolicy {k['cpuManagerPolicy']}, reservedSystemCPUs {k['reservedSystemCPUs']},"
        f" topologyManagerPolicy {k['topologyManagerPolicy']} (scope {k['topologyManagerScope']}),"
        f" memoryManagerPolicy {k['memoryManagerPolicy']}, reservedMemory "
        + ", ".join(f"node {r['numaNode']} {r['limits']['memory']}" for r in k["reservedMemory"]),
        markup=False,
    )
    say(f"irqbalance banned CPUs  {p.irqbalance_banned_cpus or '-'}")
    say(f"system services CPUAffinity  {format_cpulist(p.system_cpu_affinity)}")
    if p.isolated_cpus:
        say(f"isolated CPUs  {format_cpulist(p.isolated_cpus)}")
    if p.gres_conf:
        say("Slurm gres.conf")
        for line in p.gres_conf:
            say(f"  {printable(line)}", markup=False)
    for note in p.notes:
        say(f"[dim]note: {host_text(note)}[/dim]")


def _host_group(stack: str | None, name: str | None, root: Path | None) -> tuple[Any, Any]:
    """The tuning profile and MIG layout of ``stack``'s host group ``name`` (the defaults without one)."""
    from gpufleet.spec.models import TuningProfile

    if name is None:
        return TuningProfile(), None
    if stack is None:
        raise usage_error("--host-group names a host group of a stack: name the stack with --stack")
    chosen = load_or_exit(stack, root, consequence="nothing planned")
    groups = chosen.baremetal.host_groups if chosen.baremetal is not None else []
    group = next((g for g in groups if g.name == name), None)
    if group is None:
        known = ", ".join(g.name for g in groups) or "none"
        raise usage_error(f"stack {stack} has no host group {name!r}; its host groups: {known}")
    return chosen.tuning_profile(group.tuning_profile), group.mig


@command(topology_app, "slurm", "A host's Slurm gres.conf and NodeName lines.")
def topology_slurm(
    host_root: Annotated[
        Path, typer.Option("--host-root", help="Root holding the host's sys/ and proc/ ('/' on the host itself).")
    ],
    stack: Annotated[str | None, typer.Option("--stack", help="Stack of the host group.")] = None,
    host_group: Annotated[
        str | None, typer.Option("--host-group", help="The host's group: its MIG layout and tuning profile.")
    ] = None,
    node_name: Annotated[
        str | None, typer.Option("--node-name", help="Slurm NodeName (default: the root's name).")
    ] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """A host's Slurm lines: gres.conf (its GPUs with their NUMA node's cores; AutoDetect=nvml for MIG instances) and
    the slurm.conf NodeName line (sockets, cores, threads, memory, GPUs by model and MIG profile). JSON:
    {name, gres_conf:[str], slurm_conf}. Exit 1 when the host's facts are wrong, 2 for a usage error."""
    from gpufleet.host.slurm import slurm_node

    profile, layout = _host_group(stack, host_group, root)
    name = node_name or os.path.basename(os.path.realpath(host_root)) or "localhost"
    facts, topology = _planned_host(host_root, profile, name, as_json)
    result = slurm_node(facts, topology, name, layout)
    if as_json:
        emit_json(result.to_dict())
        return
    out.print("# gres.conf", markup=False)
    for line in result.gres_conf:
        out.print(printable(line), markup=False)
    out.print("# slurm.conf", markup=False)
    out.print(printable(result.node_line), markup=False)
