"""Stack text for tests that write a stack inline: the release block as the repository's stacks pin it.

The pins come from Pulumi.dev-westeurope.yaml, which `gpufleet validate` holds to the release table
(gpufleet/catalog/releases.yaml), so moving the fleet to new versions changes the stacks and the table, not every
test that needs a valid release block."""

from __future__ import annotations

import functools

import yaml

from tests.conftest import REPO


@functools.cache
def _pins() -> tuple[tuple[str, str], ...]:
    config = yaml.safe_load((REPO / "Pulumi.dev-westeurope.yaml").read_text())["config"]
    return tuple((key, str(value)) for key, value in config["gpufleet:release"].items())


def release_pins(**overrides: str) -> dict[str, str]:
    """The repository stacks' release pins (``kubernetes``, ``gpu_operator``, ...), ``overrides`` replacing some."""
    return {**dict(_pins()), **overrides}


def release_block(**overrides: str) -> str:
    """``  gpufleet:release:`` and its keys, indented for a stack's ``config:``, ending in a newline; ``overrides``
    replace pins (``kubernetes="1.31"`` for a test of a version outside the table)."""
    pins = release_pins(**overrides)
    return "  gpufleet:release:\n" + "".join(f'    {key}: "{value}"\n' for key, value in pins.items())
