"""Where gpufleet keeps what it fetches or builds outside the repository."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$GPUFLEET_CACHE`` or ``~/.cache/gpufleet``: downloads, images and the lab's files (never in the repository);
    anything else kept there is keyed by what it depends on."""
    return Path(os.environ.get("GPUFLEET_CACHE") or Path.home() / ".cache" / "gpufleet")
