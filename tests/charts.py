"""The pinned GPU charts for tests (gpufleet/catalog/charts.yaml): from ``$GPUFLEET_CHARTS_DIR`` when it is set, else
from ``../shared/reference/charts`` beside the checkout or the ``helm pull`` cache (``~/.cache/gpufleet/charts``,
where ``make setup`` puts them when their repositories answer), whichever holds every one of them. Tests that need them
are marked ``needs_charts`` and skip, with that reason, only when none does; where one does, they run (a chart there
that is broken or of another version fails them). The values gpufleet writes may use only keys the charts'
values.yaml files have."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from gpufleet.kube import charts
from gpufleet.kube.gpu_software import GPU_OPERATOR_CHART
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack_text
from gpufleet.spec.models import Stack
from tests.conftest import REPO, TODAY

REFERENCE_CHARTS = REPO.parent / "shared" / "reference" / "charts"
PINS = {pin.chart: pin for pin in charts.pinned_charts()}  # the example stacks' pins (gpufleet/catalog/charts.yaml)
PINNED = {chart: pin.version for chart, pin in PINS.items()}


def _charts_dir() -> Path | None:
    """The first place that holds every pinned chart: ``$GPUFLEET_CHARTS_DIR`` alone when it is set (charts.charts_dir
    returns it), else ``../shared/reference/charts``, then the helm pull cache."""
    places = [charts.charts_dir()] if os.environ.get(charts.CHARTS_DIR_ENV) else [REFERENCE_CHARTS, charts.charts_dir()]
    return next((d for d in places if all(charts.has_chart(pin.release, d) for pin in PINS.values())), None)


CHARTS_DIR = _charts_dir()
needs_charts = pytest.mark.skipif(
    CHARTS_DIR is None,
    reason=f"no pinned charts ({', '.join(f'{c} {v}' for c, v in PINNED.items())}): `make setup` pulls them where their"
    f" repositories answer; else set {charts.CHARTS_DIR_ENV} or have ../shared/reference/charts",
)


# Keys a chart's templates read that its values.yaml shows only in a comment: the GPU Operator's DCGM exporter
# metrics ConfigMap (values.yaml "# config: name, create, data"; templates/dcgm_exporter_config.yaml creates it,
# templates/clusterpolicy.yaml names it). tests/unit/kube/test_monitoring.py checks the render has both.
COMMENTED_KEYS = {
    "gpu-operator": {
        "dcgmExporter.config",
        "dcgmExporter.config.name",
        "dcgmExporter.config.create",
        "dcgmExporter.config.data",
    },
}


# Maps in a chart's values.yaml whose keys are the user's although the chart ships entries in them: the AMD GPU
# Operator's DeviceConfig selector is a node label map (its CRD: additionalProperties string), which gpufleet extends
# with its own label (gpufleet.kube.amd_operator.selector).
USER_MAPS = {"gpu-operator-charts": {"deviceConfig.spec.selector.*"}}


def pinned_chart(chart: str) -> Path:
    """The pinned chart in CHARTS_DIR: an unpacked folder, or the .tgz helm pull writes."""
    assert CHARTS_DIR is not None
    return charts.find_chart(PINS[chart].release, CHARTS_DIR)


def chart_file(chart: str, name: str) -> str:
    """A file of the pinned chart (``name``: its path in the chart, such as ``crds/<file>``), as text."""
    return charts.chart_files(pinned_chart(chart))[name].decode()


def unpacked_chart(chart: str, directory: Path) -> Path:
    """A copy of the pinned chart unpacked into ``directory/<chart>-<version>/``, for a test to change."""
    target = directory / f"{chart}-{PINNED[chart]}"
    for name, data in charts.chart_files(pinned_chart(chart)).items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes(data)
    return target


@functools.cache
def chart_keys(chart: str) -> frozenset[str]:
    """The key paths of the pinned chart's values.yaml and its subcharts' (see charts.chart_values_keys), the ones
    its templates read that values.yaml only documents in a comment (COMMENTED_KEYS), and the maps whose keys are the
    user's (USER_MAPS)."""
    keys = charts.chart_values_keys(pinned_chart(chart))
    return frozenset(keys | COMMENTED_KEYS.get(chart, set()) | USER_MAPS.get(chart, set()))


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


def render_stack(stack: Any, catalog: Any, chart: str = GPU_OPERATOR_CHART) -> charts.Render:
    """``gpufleet render`` of a loaded stack with the pinned charts (``chart``: a bare-metal stack's)."""
    return charts.render(plan_stack(stack, catalog), directory=CHARTS_DIR, baremetal_chart=chart)


def stack_variant(path: Path, edit: Callable[[Any], None]) -> Stack:
    """A copy of a stack file changed by ``edit`` (a function on its YAML ``config``), validated."""
    yaml = YAML()
    data = yaml.load(path.read_text())
    edit(data["config"])
    text = StringIO()
    yaml.dump(data, text)
    loaded = load_stack_text(text.getvalue(), path.name, today=TODAY)
    assert loaded.stack is not None, [str(d) for d in loaded.diagnostics]
    return loaded.stack


def render_variant(path: Path, catalog: Any, edit: Callable[[Any], None]) -> charts.Render:
    """Render a copy of a stack file changed by ``edit`` (a function on its YAML ``config``)."""
    return render_stack(stack_variant(path, edit), catalog)
