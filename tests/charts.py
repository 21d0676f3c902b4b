"""The GPU charts' value keys, kept as test data (tests/fixtures/charts/*.keys, written by extract_keys.py from
each chart's values.yaml at the version the example stacks pin): the values gpufleet writes may use only those."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import REPO

CHARTS = REPO / "tests/fixtures/charts"
OPERATOR_KEYS = CHARTS / "gpu-operator-v26.7.0.keys"
DEVICE_PLUGIN_KEYS = CHARTS / "nvidia-device-plugin-v0.20.0.keys"
KEYS_BY_CHART = {"gpu-operator": OPERATOR_KEYS, "nvidia-device-plugin": DEVICE_PLUGIN_KEYS}


def chart_keys(path: Path) -> set[str]:
    return {line for line in path.read_text().splitlines() if line and not line.startswith("#")}


def unknown_keys(values: dict[str, Any], known: set[str], prefix: str = "") -> list[str]:
    """Paths in ``values`` the chart does not have (below a ``path.*`` entry any key is the user's)."""
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if f"{prefix}*" in known:
            continue
        if path not in known:
            out.append(path)
        elif isinstance(value, dict):
            out.extend(unknown_keys(value, known, path + "."))
    return out
