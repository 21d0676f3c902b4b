"""``gpufleet lab``: the local bare-metal lab (up, status, converge, verify, run, down)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Any

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
    print_diagnostics,
    printable,
    project_root,
    shown,
    usage_error,
)
from gpufleet.lab.config import LAB_STACK

lab_app = group(
    "Local lab VMs: two NUMA nodes, SR-IOV, a Redfish BMC each.",
    help="The local bare-metal lab: Debian VMs with two NUMA nodes, an SR-IOV device and a Redfish BMC each.",
)


def _stamp(to_stderr: bool = False) -> Any:
    """A progress printer with seconds since start; on stderr when stdout carries --json output."""
    start = time.monotonic()
    console = err if to_stderr else out

    def say(message: str) -> None:
        console.print(f"[dim]{time.monotonic() - start:6.0f}s[/dim]  {shown(message)}", markup=True, highlight=False)

    return say


def _lab(hosts: int, prefix: str = "lab", as_json: bool = False, kind: str | None = None) -> Any:
    from gpufleet.lab import Lab

    return Lab(prefix, hosts, progress=_stamp(to_stderr=as_json), kind=kind)


def _lab_inventory(project: Path) -> Path:
    """Where the lab-local stack keeps its inventory."""
    stack = load_or_exit(LAB_STACK, project, consequence="the lab has no inventory")
    if stack.baremetal is None:
        err.print(f"[red]error:[/red] stack {LAB_STACK} has no gpufleet:baremetal section")
        raise typer.Exit(EXIT_INVALID)
    return project / stack.baremetal.inventory / "hosts.yml"


HostsOpt = Annotated[int, typer.Option("--hosts", min=1, max=4, help="Number of lab hosts.")]


def _prefix(value: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9]{0,15}", value):
        raise typer.BadParameter(f"{value!r}: 1-16 lowercase letters and digits, starting with a letter")
    return value


PrefixOpt = Annotated[
    str,
    typer.Option(
        "--prefix", callback=_prefix, help="Host name prefix: labs side by side (Molecule scenarios use their own)."
    ),
]


InventoryOpt = Annotated[
    Path | None, typer.Option("--inventory", help="Where to write the inventory (default: the lab-local stack's).")
]


@command(lab_app, "up", "Start the lab's hosts and BMCs and write its inventory.")
def lab_up(
    hosts: HostsOpt = 2,
    fresh: Annotated[bool, typer.Option("--fresh", help="Recreate the hosts from the image.")] = False,
    prefix: PrefixOpt = "lab",
    inventory: InventoryOpt = None,
    container: Annotated[
        bool,
        typer.Option(
            "--container",
            help="System containers (systemd-nspawn) of the image's Debian tree instead of VMs: for file, unit and"
            " package effects, at native speed; no kernel of their own, no BMC.",
        ),
    ] = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Build the image (cached), start libvirt and the Redfish emulator, power the hosts on through Redfish, wait
    for SSH and write inventories/lab-local/hosts.yml. New VMs start from the booted snapshot (one VM booted once
    and saved, kept with the image; see docs/lab.md) in seconds. Idempotent: running hosts are kept."""
    from gpufleet.lab import LabError

    inventory = inventory or _lab_inventory(project_root(root))
    try:
        result = _lab(hosts, prefix, as_json, "container" if container else "vm").up(inventory=inventory, fresh=fresh)
    except LabError as exc:
        err.print(f"[red]lab up failed:[/red] {shown(exc)}")
        raise typer.Exit(EXIT_INVALID) from None
    if as_json:
        emit_json(
            {
                "accel": result.accel.name,
                "accel_reason": result.accel.reason,
                "backend": result.backend,
                "redfish": result.redfish,
                "hosts": [{"name": h.name, "ssh_port": h.ssh_port, "uuid": h.uuid} for h in result.hosts],
                "image_built": result.image_built,
                "image_seconds": round(result.image_seconds, 1),
                "boot_seconds": {k: round(v, 1) for k, v in result.boot_seconds.items()},
                "restored": result.restored,
                "snapshot_seconds": round(result.snapshot_seconds, 1),
                "seconds": round(result.total_seconds, 1),
            }
        )
        return
    out.print(f"lab up in {result.total_seconds:.0f} s: {len(result.hosts)} host(s), inventory {inventory}")


@command(lab_app, "status", "The lab's hosts: power state, SSH, console logs.")
def lab_status(hosts: HostsOpt = 2, prefix: PrefixOpt = "lab", as_json: JsonOpt = False) -> None:
    """Hosts, their power state (through Redfish), whether SSH answers, and each host's serial console log."""
    rows = _lab(hosts, prefix, as_json).status()
    if as_json:
        emit_json([r.__dict__ for r in rows])
        return
    if not rows:
        out.print("no lab hosts (gpufleet lab up)")
        return
    table = Table(title="lab hosts")
    for col in ("host", "SSH", "power (BMC)", "reachable", "BMC system id", "console log"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.name, f"127.0.0.1:{r.ssh_port}", r.power, "yes" if r.ssh else "no", r.uuid, r.console)
    out.print(table)


@command(lab_app, "down", "Power the lab's hosts off and remove them.")
def lab_down(hosts: HostsOpt = 2, prefix: PrefixOpt = "lab") -> None:
    """Power the hosts off through Redfish (or stop the system containers), remove them, and stop the daemons the
    lab started once no VM lab is left."""
    _lab(hosts, prefix).down()
    out.print("lab down")


def _playbook_exit(rc: int) -> typer.Exit:
    """A failed playbook's exit: 1 (a task failed) and 2 (a host unreachable or failed) as ansible-playbook gives
    them, 1 for anything else."""
    return typer.Exit(rc if rc in (1, 2) else 1)


@command(lab_app, "converge", "Run ansible/site.yml on the lab.")
def lab_converge(
    check: Annotated[bool, typer.Option("--check", help="Ansible check mode: report, change nothing.")] = False,
    limit: Annotated[str | None, typer.Option("--limit", help="Ansible host pattern.")] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Run ansible/site.yml on the lab (facts -> plan -> roles), as on real hosts."""
    from gpufleet.lab.ansible_run import run_playbook

    project = project_root(root)
    inventory = _lab_inventory(project)
    if not inventory.exists():
        raise usage_error(f"{inventory} does not exist: run gpufleet lab up first")
    result = run_playbook(
        project / "ansible/site.yml", inventory, {"gpufleet_stack": LAB_STACK}, check=check, limit=limit,
        progress=_stamp(),
    )  # fmt: skip
    if as_json:
        emit_json({"rc": result.rc, "seconds": round(result.seconds, 1), "recap": result.recap, "log": str(result.log)})
    else:
        for host, counts in sorted(result.recap.items()):
            out.print(f"{host}: " + " ".join(f"{k}={v}" for k, v in counts.items()), markup=False)
        if result.stopped:
            out.print(result.stopped, markup=False, highlight=False)
        out.print(f"site.yml {'(check mode) ' if check else ''}finished in {result.seconds:.0f} s, rc={result.rc}")
    if result.rc:
        raise _playbook_exit(result.rc)


@command(lab_app, "run", "The main job on the lab (make lab), timed by phase.")
def lab_run(
    hosts: HostsOpt = 2,
    fresh: Annotated[bool, typer.Option("--fresh", help="Recreate the hosts from the image first.")] = False,
    since: Annotated[
        float | None,
        typer.Option("--since", help="When `make lab` started (epoch seconds): the time before is shown as setup."),
    ] = None,
    prefix: PrefixOpt = "lab",
    inventory: InventoryOpt = None,
    root: RootOpt = None,
) -> None:
    """The main job on the lab, as `make lab` runs it: up, converge (ansible/site.yml), verify, then the time of
    each phase (image, boot to SSH, converge, reboot, verify) and the total. Exit 1 when a host differs from its
    plan, the converge's exit code when it fails. The figures are kept in build/timings/make-lab.json
    (lab-run-<prefix>.json for another --prefix)."""
    from gpufleet.lab import LabError
    from gpufleet.lab.job import record, run_main_job

    project = project_root(root)
    inventory = inventory or _lab_inventory(project)
    setup = max(0.0, time.time() - since) if since else None
    say = _stamp()
    try:
        result = run_main_job(project, inventory, _lab(hosts, prefix), say, setup_seconds=setup, fresh=fresh)
    except LabError as exc:
        err.print(f"[red]lab up failed:[/red] {shown(exc)}")
        raise typer.Exit(EXIT_INVALID) from None
    for r in result.reports:
        out.print(r.render(), markup=False)
    record("make-lab" if prefix == "lab" else f"lab-run-{prefix}", result.to_dict(), project)
    out.print("lab phases:", markup=False)
    out.print(result.table(), markup=False, highlight=False)
    if result.converge_rc:
        if result.stopped:
            out.print(result.stopped, markup=False, highlight=False)
        out.print(f"site.yml failed (rc={result.converge_rc}); its log is in ~/.cache/gpufleet/lab/logs/")
        raise _playbook_exit(result.converge_rc)
    if not result.ok:
        raise typer.Exit(EXIT_INVALID)


@command(lab_app, "verify", "Each lab host's real state against its plan.")
def lab_verify(as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Each lab host's real state against its plan: NUMA nodes, /proc/cmdline, hugepages, VFs, kubelet pinning,
    and on hosts with NVIDIA GPUs the driver (judged as the nvidia_driver role's verify tasks judge it). Exit 1 when
    a host differs from its plan."""
    from gpufleet.lab.report import lab_report

    project = project_root(root)
    reports = lab_report(_lab_inventory(project), LAB_STACK, project)
    if as_json:
        emit_json([r.to_dict() for r in reports])
    else:
        for r in reports:
            out.print(r.render(), markup=False)
    if not all(r.ok for r in reports):
        raise typer.Exit(EXIT_INVALID)


@command(lab_app, "budget", "The last lab test run's steps against their time budget.")
def lab_budget(
    record: Annotated[
        Path | None,
        typer.Option("--record", help="A lab run's record (default: build/timings/make-test-lab.json, the last one)."),
    ] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """The last lab test run's steps against the lab's budget (tests/lab/budget.yaml): each step's seconds, its
    budget and its status (ok, OVER by N s, no budget line, not run), then the lab session's wall time against the
    total, and the steps over budget named. `make test` ends with it. Exit 0 also with steps over budget (timings
    vary with the machine's load; `make bench` counts them as missed targets); 1 when the table or the record is
    malformed."""
    from gpufleet.common.diagnostics import ValidationFailed
    from gpufleet.lab.budget import last_report

    try:
        last = last_report(project_root(root), record)
    except ValidationFailed as exc:
        if as_json:
            emit_json({"ok": False, "errors": [d.to_dict() for d in exc.diagnostics]})
        else:
            err.print("[red]the lab's budget cannot be read:[/red]")
            print_diagnostics(err, exc.diagnostics, "  ")
        raise typer.Exit(EXIT_INVALID) from None
    report = last.report
    if as_json:
        emit_json({"ok": True, "record": str(last.record) if last.record else None, **report.to_dict()})
        return
    out.print(printable(last.heading), markup=False, highlight=False)
    out.print(printable(report.table()), markup=False, highlight=False)
    style = "bold red" if report.over else ""
    out.print(printable(report.summary()), style=style or None, markup=False, highlight=False)
