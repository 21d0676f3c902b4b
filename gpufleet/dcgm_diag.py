"""The DCGM diagnostic a stack's verify run requires of its GPU hosts: ``dcgmi diag -r LEVEL``.

The run levels are catalog data (``gpufleet/catalog/dcgm_diag.yaml``, NVIDIA's DCGM documentation). A stack sets
``gpufleet:baremetal.verify.dcgm_diag_level``; without it the level follows the stack's stage
(:data:`STAGE_LEVELS`): a quick check where hosts come and go (dev, lab), a medium one in staging, the long hardware
diagnostic before a host is admitted to prod. docs/verify.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

# The level a stage's verify runs when its stack does not say (a policy, not a DCGM fact); other stages: DEFAULT_LEVEL
STAGE_LEVELS = {"dev": 1, "lab": 1, "staging": 2, "prod": 3}
DEFAULT_LEVEL = 1


@dataclass(frozen=True)
class DiagLevel:
    """One of ``dcgmi diag -r``'s run levels: its number, its alias and how long NVIDIA says it normally lasts."""

    level: int
    name: str
    lasts: str

    def __str__(self) -> str:
        return f"level {self.level} ({self.name}, {self.lasts})"


@lru_cache(maxsize=1)
def diag_levels() -> dict[int, DiagLevel]:
    """DCGM's run levels (gpufleet/catalog/dcgm_diag.yaml), by number."""
    from gpufleet.catalog import read_catalog_yaml

    return {int(x["level"]): DiagLevel(int(x["level"]), str(x["name"]), str(x["lasts"]))
            for x in read_catalog_yaml("dcgm_diag.yaml")["levels"]}  # fmt: skip


def diag_level(stage: str, level: int | None) -> int:
    """The level a stack's verify runs: ``level`` when the stack sets it, else its stage's (:data:`STAGE_LEVELS`)."""
    return level if level is not None else STAGE_LEVELS.get(stage, DEFAULT_LEVEL)
