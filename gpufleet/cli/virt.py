"""``gpufleet virt plan``: the GPU VMs of one host (pinned CPUs, hugepages, devices), their libvirt domains and their
KubeVirt manifests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

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
    print_table,
    shown,
    usage_error,
)
from gpufleet.cli.topology import _check_host_root, _refuse, _tuning_profile

virt_app = group(
    "GPU VMs: VM plans, libvirt domains, KubeVirt manifests.",
    help="GPU virtual machines: VM plans, libvirt domains and KubeVirt manifests.",
)


XmlDirOpt = Annotated[
    Path | None, typer.Option("--xml-dir", help="Write each VM's libvirt domain XML here (<name>.xml).")
]
KubeVirtDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubevirt-dir",
        help="Write each VM's KubeVirt VirtualMachine here (<name>.yaml: dedicated CPUs, hugepages, its GPU or VF, on"
        " this host's node) and the KubeVirt CR settings they need (kubevirt.yaml: permitted host devices, feature"
        " gates; merge it into the cluster's).",
    ),
]


def _request(stack_ref: str | None, host_group: str | None, root: Path | None) -> tuple[Any, Any]:
    """The virtualization request and tuning profile: the stack's host group's (the one with ``virtualization:``,
    or ``--host-group``), else the defaults."""
    from gpufleet.spec.models import TuningProfile, Virtualization

    if stack_ref is None:
        if host_group is not None:
            raise usage_error("--host-group names a host group of a STACK: name the stack too")
        return Virtualization(), None
    stack = load_or_exit(stack_ref, root, consequence="nothing planned")
    groups = [g for g in (stack.baremetal.host_groups if stack.baremetal else []) if g.virtualization]
    if host_group is not None:
        groups = [g for g in groups if g.name == host_group]
    if len(groups) != 1:
        named = ", ".join(g.name for g in groups)
        raise usage_error(
            f"stack {stack.name}: {len(groups)} host groups with virtualization{': ' + named if named else ''}"
            + ("; name one with --host-group" if groups else "")
        )
    group = groups[0]
    return group.virtualization, stack.tuning_profile(group.tuning_profile) or TuningProfile()


def _with_overrides(request: Any, update: dict[str, Any]) -> Any:
    """The request with the command line's options, validated as a stack's is (exit 2 naming the option)."""
    from pydantic import ValidationError

    from gpufleet.spec.models import Virtualization

    update = {k: v for k, v in update.items() if v is not None}
    if not update:
        return request
    try:
        return Virtualization.model_validate(request.model_dump() | update)
    except ValidationError as exc:
        problem = exc.errors()[0]
        key = ".".join(str(k) for k in problem["loc"])
        option = f"--{key.replace('_', '-')}" if key else "options"
        raise usage_error(f"{option}: {problem['msg']}") from None


@command(virt_app, "plan", "A host's GPU VMs: CPUs, hugepages, devices, libvirt XML.")
def virt_plan(
    stack: Annotated[
        str | None, typer.Argument(help="Stack whose host group's virtualization: to plan (with --host-root).")
    ] = None,
    host_root: Annotated[
        Path | None,
        typer.Option("--host-root", help="Root holding the host's sys/ and proc/ ('/' on the host itself)."),
    ] = None,
    host_group: Annotated[
        str | None, typer.Option("--host-group", help="The stack's host group (when several have virtualization).")
    ] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", help="Tuning profile without a STACK (gpufleet:tuning_profiles).")
    ] = None,
    device: Annotated[
        str | None,
        typer.Option("--device", metavar="gpu|vf", help="What a VM gets: a GPU (or its VFs), or another device's VF."),
    ] = None,
    vms_per_gpu: Annotated[int | None, typer.Option("--vms-per-gpu", help="VMs per GPU (N > 1: its VFs).")] = None,
    vcpus: Annotated[int | None, typer.Option("--vcpus", help="vCPUs per VM.")] = None,
    memory_gib: Annotated[float | None, typer.Option("--memory-gib", help="Memory per VM in GiB.")] = None,
    emulator_cpus: Annotated[
        int | None, typer.Option("--emulator-cpus", help="Emulator CPUs per VM (0: the system's reserved CPUs).")
    ] = None,
    max_vms: Annotated[int | None, typer.Option("--max-vms", help="At most this many VMs.")] = None,
    xml_dir: XmlDirOpt = None,
    kubevirt_dir: KubeVirtDirOpt = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Host name for messages, and the Kubernetes node name KubeVirt VMs select (default: the root's name).",
        ),
    ] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """The GPU VMs of one host: per VM the host CPUs its vCPUs are pinned to (on its GPU's NUMA node, whole cores
    first, apart from the system's reserved CPUs and the other VMs'), its emulator CPUs, the hugepages backing its
    memory on that node, and the device passed through. The host's facts come from --host-root; the request from a
    STACK's host group (virtualization:) or the options. --xml-dir and --kubevirt-dir write the VMs as libvirt domains
    and as KubeVirt manifests. Exit 1 when the VMs do not fit (one line with the numbers), the host's facts are wrong
    or KubeVirt manifests cannot be written for the VMs (a GPU's VF, a GPU not in the catalog), 2 for a usage
    error."""
    if host_root is None:
        raise usage_error(
            "give --host-root ROOT: the host's sys/ and proc/ ('/' on the host itself, a recorded tree elsewhere);"
            " a STACK gives the request, not the host's facts"
        )
    if stack is not None and profile is not None:
        raise usage_error("--profile: a STACK's host group names its tuning profile")
    if device not in (None, "gpu", "vf"):
        raise usage_error(f"--device {device!r}: expected gpu or vf")
    request, tuning = _request(stack, host_group, root)
    if tuning is None and profile is not None:
        tuning = _tuning_profile(profile, None, root)
    request = _with_overrides(
        request,
        {
            "device": device,
            "vms_per_gpu": vms_per_gpu,
            "vcpus": vcpus,
            "memory_gib": memory_gib,
            "emulator_cpus": emulator_cpus,
            "max_vms": max_vms,
        },
    )
    name = host or os.path.basename(os.path.realpath(host_root)) or "localhost"
    result = _plan_or_exit(host_root, request, tuning, name, as_json)
    written, notes = _write_outputs(result, request, xml_dir, kubevirt_dir, as_json)
    if as_json:
        for note in notes:
            err.print(f"note: KubeVirt: {shown(note)}")
        emit_json(result.to_dict())
        return
    _render(result, request, written, notes)


def _plan_or_exit(host_root: Path, request: Any, tuning: Any, name: str, as_json: bool) -> Any:
    """The VM plan of the host under ``host_root``; exit 1 on one line when its facts are wrong or the VMs do not
    fit (``{host, ok: false, error}`` under ``--json``)."""
    from gpufleet.catalog import load_catalog
    from gpufleet.host.hostfacts import FactsError, read_host
    from gpufleet.host.topology import TopologyError
    from gpufleet.host.virt import VirtError
    from gpufleet.host.virt import plan as plan_vms

    try:
        _check_host_root(host_root)
        facts = read_host(str(host_root), load_catalog().gpus_by_pci_id)
        return plan_vms(facts, request, tuning, name)
    except FactsError as exc:
        _refuse(name, f"host {name}: {exc}", {"error": str(exc), "path": exc.path}, as_json)
    except (TopologyError, VirtError) as exc:
        _refuse(name, str(exc), {"error": exc.reason}, as_json)


def _write_outputs(
    result: Any, request: Any, xml_dir: Path | None, kubevirt_dir: Path | None, as_json: bool
) -> tuple[list[Path], tuple[str, ...]]:
    """The libvirt domains (``--xml-dir``) and KubeVirt manifests (``--kubevirt-dir``) of the plan, all made before
    any is written; the files written and where KubeVirt gives less than the plan. Exit 1 on one line when KubeVirt
    manifests cannot be made for the plan or a directory cannot be written."""
    from gpufleet.catalog import load_catalog
    from gpufleet.host.virt_xml import domain_xml
    from gpufleet.kube.kubevirt import KubeVirtError, manifests
    from gpufleet.mig.outputs import dump_yaml

    outputs: list[tuple[str, Path, dict[str, str]]] = []
    notes: tuple[str, ...] = ()
    if kubevirt_dir is not None:
        try:
            kv = manifests(result, request, load_catalog())
        except KubeVirtError as exc:
            _refuse(result.host, f"--kubevirt-dir: {exc}", {"error": exc.reason}, as_json)
        head = f"# gpufleet virt plan: host {result.host},"
        texts = {
            f"{vm['metadata']['name']}.yaml": f"{head} a VM (add its disk before you start it)\n{dump_yaml(vm)}"
            for vm in kv.virtual_machines
        }
        texts["kubevirt.yaml"] = f"{head} what its VMs need of the KubeVirt CR (merge it)\n{dump_yaml(kv.kubevirt)}"
        outputs.append(("--kubevirt-dir", kubevirt_dir, texts))
        notes = kv.notes
    if xml_dir is not None:
        outputs.insert(0, ("--xml-dir", xml_dir, {f"{vm.name}.xml": domain_xml(vm) for vm in result.vms}))
    return [path for option, directory, texts in outputs for path in _write_files(option, directory, texts)], notes


def _write_files(option: str, directory: Path, texts: dict[str, str]) -> list[Path]:
    """Each text as ``<directory>/<name>``, crash-safely; exit 1 naming the option and directory when it cannot be
    written."""
    from gpufleet.common.atomic import write_atomic

    files = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            path = directory / name
            write_atomic(path, text)
            files.append(path)
    except OSError as exc:
        err.print(f"[red]error:[/red] {option} {shown(directory)}: {shown(exc.strerror or exc)}")
        raise typer.Exit(EXIT_INVALID) from None
    return files


def _pages(size_kib: int, count: int) -> str:
    unit: Literal["1G", "2M"] = "1G" if size_kib == 1048576 else "2M"
    return f"{count} x {unit}"


def _render(p: Any, request: Any, written: list[Path], notes: tuple[str, ...]) -> None:
    from gpufleet.host.hostfacts import format_cpulist
    from gpufleet.host.virt import describe

    out.print(
        f"[bold]{shown(p.host)}[/bold]: {len(p.vms)} VM(s) of {request.vcpus} vCPUs and {request.memory_gib:g} GiB"
    )
    table = Table("VM", "device", "NUMA node", "vCPU -> CPU", "emulator", "hugepages")
    for vm in p.vms:
        table.add_row(
            shown(vm.name),
            shown(", ".join(vm.hostdevs))
            + (f" (GPU {shown(vm.gpu.pci)})" if vm.gpu and vm.gpu.pci not in vm.hostdevs else ""),
            str(vm.numa_node),
            format_cpulist(vm.cpus) if vm.threads_per_core == 1 else f"{format_cpulist(vm.cpus)} (SMT pairs)",
            format_cpulist(vm.emulator_cpus),
            _pages(vm.hugepages.size_kib, vm.hugepages.count),
        )
    print_table(table)
    for line in describe(p):
        out.print(line, markup=False)
    for path in written:
        out.print(f"wrote {shown(path)}")
    for note in notes:
        out.print(f"KubeVirt: {shown(note)}")
