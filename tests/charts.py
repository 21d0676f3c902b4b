"""The pinned GPU charts for tests: ``$GPUFLEET_CHARTS_DIR``, else ``../shared/reference/charts`` beside the checkout,
else the ``helm pull`` cache (``~/.cache/gpufleet/charts``). Tests that need them skip, with that reason, only when
none of those exists. The values gpufleet writes may use only keys the charts' values.yaml files have."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from gpufleet import charts
from gpufleet.gpu_software import ChartRelease
from tests.conftest import REPO

REFERENCE_CHARTS = REPO.parent / "shared" / "reference" / "charts"
PINNED = {"gpu-operator": "v26.7.0", "nvidia-device-plugin": "0.20.0"}  # the example stacks' pins


def _charts_dir() -> Path | None:
    if os.environ.get(charts.CHARTS_DIR_ENV):
        return Path(os.environ[charts.CHARTS_DIR_ENV])
    if REFERENCE_CHARTS.is_dir():
        return REFERENCE_CHARTS
    cache = charts.charts_dir()
    return cache if cache.is_dir() else None


CHARTS_DIR = _charts_dir()
needs_charts = pytest.mark.skipif(
    CHARTS_DIR is None,
    reason=f"no pinned charts: set {charts.CHARTS_DIR_ENV}, or have ../shared/reference/charts or the helm pull cache",
)


@functools.cache
def chart_keys(chart: str) -> frozenset[str]:
    """The key paths of the pinned chart's values.yaml and its subcharts' (see charts.chart_values_keys)."""
    assert CHARTS_DIR is not None
    release = ChartRelease(chart, PINNED[chart], repository="", namespace=chart, values={})
    return frozenset(charts.chart_values_keys(charts.find_chart(release, CHARTS_DIR)))


def unknown_keys(values: dict[str, Any], known: frozenset[str] | set[str], prefix: str = "") -> list[str]:
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


def closed_schema(schema: Any) -> Any:
    """A CRD's openAPIV3Schema with unknown fields refused where the API server would prune them (every object
    with properties and no x-kubernetes-preserve-unknown-fields gets additionalProperties: false), so a misspelled
    field fails validation instead of vanishing."""
    if isinstance(schema, dict):
        out = {k: closed_schema(v) for k, v in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [closed_schema(v) for v in schema]
    return schema


def crd_validator(openapi_v3_schema: Any) -> Draft202012Validator:
    """The validator of a CRD version's ``openAPIV3Schema``, with unknown fields refused (:func:`closed_schema`)."""
    return Draft202012Validator(closed_schema(openapi_v3_schema))


def crd_errors(validator: Draft202012Validator, obj: Any) -> list[str]:
    """``path: message`` for each way ``obj`` breaks the schema; empty when it passes."""
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]
