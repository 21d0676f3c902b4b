"""The ``gpufleet`` command line: thin over the library (typer + rich), ``--json`` on every command.

One module per command group: ``stack`` (validate, plan, render), ``audit``, ``mig``, ``topology``, ``virt``,
``lab``, ``promote``, ``inventory``; ``common`` holds what they share (exit codes, output, options, stack loading). Exit
codes: 0 success, 1 the input is wrong (an invalid stack, an unknown GPU), 2 usage errors (bad options, a stack name
that names no file), 3 an internal error: any exception the commands do not turn into one of those is a bug,
reported on one line (the traceback with ``--debug``), never as a bare traceback.
"""

from __future__ import annotations

import sys
import traceback
from typing import Annotated

import typer

from gpufleet import __version__
from gpufleet.cli import audit, size, stack
from gpufleet.cli.amd import amd_app
from gpufleet.cli.azure import azure_app
from gpufleet.cli.catalog import catalog_app
from gpufleet.cli.ci import ci_app
from gpufleet.cli.common import EXIT_CODES_HELP, EXIT_INTERNAL, command, err, out
from gpufleet.cli.cost import cost
from gpufleet.cli.diff import diff
from gpufleet.cli.inventory import inventory
from gpufleet.cli.lab import lab_app
from gpufleet.cli.mig import mig_app
from gpufleet.cli.preflight import preflight
from gpufleet.cli.promote import promote_app
from gpufleet.cli.rightsize import rightsize
from gpufleet.cli.topology import topology_app
from gpufleet.cli.virt import virt_app

app = typer.Typer(
    name="gpufleet",
    help="GPU fleets as code: validated stacks, hardware-aware planners, Pulumi for AKS, Ansible for bare metal. "
    + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Each command and group with its one line in `gpufleet --help` (the docstring is the command's own --help).
COMMANDS = (
    (stack.validate, "Check stack files: each error at file:line, nothing applied."),
    (stack.plan, "A stack resolved: pools, host groups, MIG, labels, cost."),
    (stack.render, "Render the GPU charts with helm; where each DaemonSet runs."),
    (audit.audit, "Check a stack's AKS cluster against the AKS secure baseline."),
    (size.size, "A model's GPU memory and the smallest hardware that holds it."),
    (cost, "What each node pool of a stack costs, per hour and per month."),
    (diff, "What an edit of stack files does: replaced pools first, cost."),
    (rightsize, "Measured GPU use -> smaller MIG slices, fewer nodes, $ saved."),
    (preflight, "Ask Azure: pool sizes offered, zones, quota at max nodes."),
    (inventory, "The Ansible inventory of a stack's bare-metal hosts."),
)
GROUPS = {
    "mig": mig_app,
    "amd": amd_app,
    "lab": lab_app,
    "topology": topology_app,
    "virt": virt_app,
    "promote": promote_app,
    "catalog": catalog_app,
    "azure": azure_app,
    "ci": ci_app,
}
for func, summary in COMMANDS:
    command(app, func.__name__, summary)(func)
for name, group_app in GROUPS.items():
    app.add_typer(group_app, name=name)


def _version(value: bool) -> None:
    if value:
        out.print(f"gpufleet {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="On an internal error (exit 3), print its traceback (before the command).")
    ] = False,
) -> None:
    """GPU fleets as code."""


def main(argv: list[str] | None = None) -> None:
    """Run the command line; an exception no command handled is an internal error: one line and exit 3."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        app(args=argv, prog_name="gpufleet")
    except Exception as exc:  # every bug ends here, as one line (the traceback with --debug)
        if "--debug" in argv:
            traceback.print_exc()
        detail = " ".join(str(exc).split())[:300]
        err.print(
            f"internal error: {type(exc).__name__}{': ' + detail if detail else ''}; please report it with the output "
            "of the same command run as gpufleet --debug ...",
            markup=False,
            emoji=False,
        )
        sys.exit(EXIT_INTERNAL)
