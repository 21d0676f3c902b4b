"""The DCGM diagnostic a stack's verify run requires of its GPU hosts: ``dcgmi diag -r LEVEL``.

The run levels are catalog data (``gpufleet/catalog/dcgm_diag.yaml``, NVIDIA's DCGM documentation;
:func:`gpufleet.catalog.dcgm.diag_levels`). A stack sets
``gpufleet:baremetal.verify.dcgm_diag_level``; without it the level follows the stack's stage
(:data:`STAGE_LEVELS`): a quick check where hosts come and go (dev, lab), a medium one in staging, the long hardware
diagnostic before a host is admitted to prod. docs/verify.md.
"""

from __future__ import annotations

# The level a stage's verify runs when its stack does not say (a policy, not a DCGM fact); other stages: DEFAULT_LEVEL
STAGE_LEVELS = {"dev": 1, "lab": 1, "staging": 2, "prod": 3}
DEFAULT_LEVEL = 1


def diag_level(stage: str, level: int | None) -> int:
    """The level a stack's verify runs: ``level`` when the stack sets it, else its stage's (:data:`STAGE_LEVELS`)."""
    return level if level is not None else STAGE_LEVELS.get(stage, DEFAULT_LEVEL)
