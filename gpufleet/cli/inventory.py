"""``gpufleet inventory STACK [-o FILE]``: the Ansible inventory of a stack's bare-metal hosts (YAML), offline."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    StackArg,
    emit_json,
    err,
    load_or_exit,
    out,
    print_diagnostics,
    printable,
    project_root,
    shown,
)

if TYPE_CHECKING:
    from gpufleet.baremetal.inventory import Inventory
    from gpufleet.spec.models import Stack

INVENTORY_FILES = ("hosts.yml", "hosts.yaml")


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {shown(message)}")
    return typer.Exit(EXIT_INVALID)


def _inventory_file(stack: Stack, project: Path) -> Path:
    """The file ``baremetal.inventory`` names: the file itself, or hosts.yml in that directory."""
    from gpufleet.lab.config import LAB_STACK
    from gpufleet.spec.files import display_path

    assert stack.baremetal is not None
    base = project / stack.baremetal.inventory
    if base.is_dir():
        for name in INVENTORY_FILES:
            if (base / name).is_file():
                return base / name
        base = base / INVENTORY_FILES[0]
    if not base.is_file():
        lab = " (gpufleet lab up writes it)" if stack.name == LAB_STACK else ""
        raise _fail(
            f"stack {stack.name} lists no baremetal.hosts and its inventory {display_path(base)} does not exist{lab};"
            " list the hosts under gpufleet:baremetal.hosts"
        )
    return base


def _from_file(stack: Stack, project: Path, as_json: bool) -> tuple[Inventory, str]:
    from gpufleet.baremetal.inventory import InventoryError, inventory_from_document
    from gpufleet.common.yamldoc import plain, read_yaml
    from gpufleet.spec.files import display_path

    assert stack.baremetal is not None
    path = display_path(_inventory_file(stack, project))
    doc, errors = read_yaml(path)
    if errors:
        if as_json:
            emit_json({"stack": stack.name, "ok": False, "errors": [d.to_dict() for d in errors]})
        else:
            err.print(f"[red]invalid inventory[/red] {shown(path)}: nothing written")
            print_diagnostics(err, errors, "  ")
        raise typer.Exit(EXIT_INVALID)
    try:
        groups = [g.name for g in stack.baremetal.host_groups]
        return inventory_from_document(plain(doc), str(path), groups), str(path)
    except InventoryError as exc:
        raise _fail(str(exc)) from None


def inventory(
    stack: StackArg,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the inventory to this file (its directory is created)."),
    ] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """The Ansible inventory of the stack's bare-metal hosts (YAML), offline: from gpufleet:baremetal.hosts (each
    host's ssh address and port, in its host group), or, for a stack that lists no hosts (lab-local), from its
    baremetal.inventory file (written by gpufleet lab up). No secret goes into it.

    Converge with: ansible-playbook ansible/site.yml -i FILE -e gpufleet_stack=STACK
    """
    from gpufleet.baremetal.inventory import InventoryError, stack_inventory
    from gpufleet.common.atomic import write_atomic
    from gpufleet.mig.outputs import dump_yaml

    loaded = load_or_exit(stack, root, as_json, "no inventory written")
    if loaded.baremetal is None:
        raise _fail(f"stack {loaded.name} has no bare-metal hosts (no gpufleet:baremetal): its nodes are AKS pools")
    if loaded.baremetal.hosts:
        try:
            inv, source = stack_inventory(loaded), "stack"
        except InventoryError as exc:
            raise _fail(str(exc)) from None
    else:
        inv, source = _from_file(loaded, project_root(root), as_json)
    origin = "gpufleet:baremetal.hosts" if source == "stack" else source
    ref = printable(shlex.quote(stack))  # the stack as named here: a name, or a path the lookup resolves too
    header = (
        f"# Written by `gpufleet inventory {ref}` from {printable(origin)}; no secrets.\n"
        f"# ansible-playbook ansible/site.yml -i <this file> -e gpufleet_stack={ref}\n"
    )
    text = header + dump_yaml(inv.to_dict())
    if output is not None:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(output, text)
        except OSError as exc:
            raise _fail(f"cannot write {output}: {exc.strerror or exc}") from None
    if as_json:
        emit_json(
            {
                "stack": loaded.name,
                "source": source,
                "file": str(output) if output is not None else None,
                "hosts": [h.to_dict() for h in inv.hosts],
                "inventory": inv.to_dict(),
            }
        )
    elif output is None:
        sys.stdout.write(text)
    else:
        groups = "; ".join(f"{g}: {', '.join(h.name for h in inv.members(g)) or 'no hosts'}" for g in inv.groups)
        out.print(f"wrote {shown(output)}: {len(inv.hosts)} host(s) from {shown(origin)} ({shown(groups)})")
