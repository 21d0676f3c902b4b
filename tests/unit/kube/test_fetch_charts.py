"""scripts/fetch_charts.py, which ``make setup`` runs: a pulled chart is kept only when it is the pinned one (the
recorded sha256 of its .tgz, its Chart.yaml, the digest of its files), anything else is deleted; a repository that
does not answer costs one line, not the setup. No network: the charts here are made up, helm is a stand-in, and the
silent repository is a closed port on this machine."""

from __future__ import annotations

import hashlib
import importlib.util
import socket
import subprocess
import tarfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpufleet.kube import charts
from tests.charts import CHARTS_DIR, needs_charts
from tests.conftest import REPO


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_charts", REPO / "scripts" / "fetch_charts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FETCH = _script()


def _chart(root: Path, version: str = "v26.7.0", values: str = "driver:\n  enabled: true\n") -> Path:
    """An unpacked made-up gpu-operator chart."""
    chart = root / "gpu-operator"
    (chart / "templates").mkdir(parents=True)
    (chart / "crds").mkdir()
    (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: gpu-operator\nversion: {version}\n")
    (chart / "values.yaml").write_text(values)
    (chart / "templates" / "configmap.yaml").write_text("kind: ConfigMap\n")
    (chart / "crds" / "policy.yaml").write_text("kind: CustomResourceDefinition\n")
    return chart


def _tgz(chart: Path, out: Path) -> Path:
    """``chart`` packed as helm pull writes it: every file below a folder named after the chart."""
    with tarfile.open(out, "w:gz") as tar:
        tar.add(chart, arcname=chart.name)
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pin(tgz: Path, **changes: Any) -> charts.PinnedChart:
    """The pin ``tgz`` matches, with ``changes``."""
    fields = {
        "chart": "gpu-operator",
        "version": "v26.7.0",
        "repository": "https://charts.example.invalid/nvidia",
        "sha256": _sha256(tgz),
        "files_sha256": charts.chart_files_digest(tgz),
    }
    return charts.PinnedChart(**(fields | changes))


@pytest.fixture
def pulled(tmp_path: Path) -> Path:
    """A download of the made-up chart, as helm pull leaves it in the temporary folder."""
    (tmp_path / "pull").mkdir()
    return _tgz(_chart(tmp_path / "src"), tmp_path / "pull" / "gpu-operator-v26.7.0.tgz")


def test_a_pulled_chart_with_the_recorded_digests_is_kept(tmp_path: Path, pulled: Path):
    cache = tmp_path / "cache"
    cache.mkdir()
    pin = _pin(pulled)
    assert FETCH.install(pulled, pin, cache) is None
    assert not pulled.exists()
    assert [p.name for p in cache.iterdir()] == ["gpu-operator-v26.7.0.tgz"]
    assert charts.find_chart(pin.release, cache) == cache / "gpu-operator-v26.7.0.tgz"


def test_a_pulled_chart_with_another_sha256_is_refused_and_deleted(tmp_path: Path, pulled: Path):
    cache = tmp_path / "cache"
    cache.mkdir()
    digest = _sha256(pulled)
    problem = FETCH.install(pulled, _pin(pulled, sha256="0" * 64), cache)
    assert problem == f"its sha256 is {digest}, not the recorded {'0' * 64}"
    assert not pulled.exists()
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        ({"values": "driver:\n  enabled: false\n"}, "its values.yaml, templates and crds have digest"),
        ({"version": "v26.3.0"}, "its Chart.yaml says gpu-operator v26.3.0, not gpu-operator v26.7.0"),
    ],
    ids=["other-values", "other-version"],
)
def test_without_a_recorded_sha256_chart_yaml_and_the_files_digest_decide(tmp_path: Path, edit, complaint: str):
    """Where no .tgz digest is recorded (none is yet, see gpufleet/catalog/charts.yaml), a chart with other files or
    another version is still refused."""
    pinned = _tgz(_chart(tmp_path / "pinned"), tmp_path / "pinned.tgz")
    (tmp_path / "pull").mkdir()
    other = _tgz(_chart(tmp_path / "other", **edit), tmp_path / "pull" / "gpu-operator-v26.7.0.tgz")
    cache = tmp_path / "cache"
    cache.mkdir()
    pin = _pin(pinned, sha256=None)
    problem = FETCH.install(other, pin, cache)
    assert problem is not None and problem.startswith(complaint), problem
    assert not other.exists() and list(cache.iterdir()) == []
    assert FETCH.install(_tgz(_chart(tmp_path / "same"), tmp_path / "pull" / "same.tgz"), pin, cache) is None


def test_something_that_is_not_a_chart_archive_is_refused_and_deleted(tmp_path: Path, pulled: Path):
    pin = _pin(pulled, sha256=None)
    pulled.write_bytes(b"<html>a proxy's error page</html>")
    problem = FETCH.install(pulled, pin, tmp_path)
    assert problem is not None and problem.startswith("it is not a chart archive of gpu-operator"), problem
    assert not pulled.exists()


def test_the_files_digest_is_the_same_packed_and_unpacked_and_the_one_the_catalog_describes(tmp_path: Path):
    """gpufleet/catalog/charts.yaml records digests computed from unpacked charts; a pull is a .tgz."""
    chart = _chart(tmp_path)
    shell = "find values.yaml templates crds -type f | LC_ALL=C sort | xargs sha256sum | sha256sum"
    proc = subprocess.run(
        ["bash", "-c", shell],
        cwd=chart,
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    described = proc.stdout.split()[0]
    packed = charts.chart_files_digest(_tgz(chart, tmp_path / "chart.tgz"))
    assert charts.chart_files_digest(chart) == packed == described


def test_a_pulled_chart_has_the_value_keys_of_its_folder_subcharts_included(tmp_path: Path):
    """The chart tests read value keys from whichever form the charts directory has: a .tgz holds its subcharts as
    folders (the GPU Operator vendors NFD) or as .tgz files (the device plugin packs it)."""
    chart = _chart(tmp_path / "src")
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: gpu-operator\nversion: v26.7.0\n"
        "dependencies: [{name: node-feature-discovery}, {name: packed, alias: nfd}]\n"
    )
    vendored = chart / "charts" / "node-feature-discovery"
    vendored.mkdir(parents=True)
    (vendored / "Chart.yaml").write_text("apiVersion: v2\nname: node-feature-discovery\nversion: 0.19.0\n")
    (vendored / "values.yaml").write_text("master:\n  tolerations: []\n")
    packed = _chart(tmp_path / "sub", values="gc:\n  enabled: true\n")
    (packed / "Chart.yaml").write_text("apiVersion: v2\nname: packed\nversion: 1.0.0\n")
    _tgz(packed, chart / "charts" / "packed-1.0.0.tgz")
    keys = charts.chart_values_keys(chart)
    assert {"driver.enabled", "node-feature-discovery.master.tolerations", "nfd.gc.enabled"} <= keys
    assert charts.chart_values_keys(_tgz(chart, tmp_path / "gpu-operator-v26.7.0.tgz")) == keys


def test_main_pulls_with_helm_and_keeps_only_the_pinned_chart(tmp_path: Path, pulled: Path, monkeypatch, capsys):
    """helm is a stand-in that writes the made-up chart where ``-d`` says: the pull lands in the cache under the
    pinned name, and the temporary folder is gone."""
    helm = tmp_path / "helm"
    helm.write_text(f'#!/bin/sh\nfor a in "$@"; do d=$a; done\ncp {pulled} "$d/"\n')
    helm.chmod(0o755)
    monkeypatch.setattr(charts, "helm_binary", lambda: str(helm))
    monkeypatch.setattr(FETCH, "answering", set)  # every repository answers
    cache = tmp_path / "cache"
    assert FETCH.main([_pin(pulled, sha256=None)], cache) == 0
    assert [p.name for p in cache.iterdir()] == ["gpu-operator-v26.7.0.tgz"]
    assert f"its sha256 {_sha256(pulled)} is not recorded yet" in capsys.readouterr().out
    assert FETCH.main([_pin(pulled, sha256=None)], cache) == 0  # already there: nothing to do
    assert capsys.readouterr().out == ""
    (cache / "gpu-operator-v26.7.0.tgz").unlink()
    # a chart that is not the pinned one is deleted and said, and setup goes on: the chart tests skip without it
    assert FETCH.main([_pin(pulled, sha256="0" * 64)], cache) == 0
    said = capsys.readouterr()
    assert "fetch_charts: gpu-operator v26.7.0 from https://charts.example.invalid/nvidia deleted: its sha256 is" in (
        said.err
    )
    assert "pinned charts not fetched: gpu-operator v26.7.0 (refused: it is not the pinned chart)" in said.out
    assert list(cache.iterdir()) == []


def test_a_repository_that_does_not_answer_costs_a_line_and_seconds_not_the_setup(
    tmp_path: Path, pulled: Path, monkeypatch, capsys
):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("NO_PROXY", "*")
    cache = tmp_path / "cache"
    started = time.monotonic()
    assert FETCH.main([_pin(pulled, repository=f"https://127.0.0.1:{port}/nvidia")], cache) == 0
    assert time.monotonic() - started < FETCH.PROBE_SECONDS + 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("==> pinned charts not fetched: gpu-operator v26.7.0 ("), out
    assert "GPUFLEET_CHARTS_DIR or ../shared/reference/charts" in out[0]
    assert not cache.exists()


@needs_charts
def test_the_pinned_charts_here_have_their_recorded_files_digest():
    assert CHARTS_DIR is not None
    for pin in charts.pinned_charts():
        assert charts.chart_files_digest(charts.find_chart(pin.release, CHARTS_DIR)) == pin.files_sha256, pin.chart
