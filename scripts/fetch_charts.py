"""Pull the pinned GPU charts into the helm-pull cache (``make setup`` runs this with the virtualenv's Python).

The pinned charts (gpufleet/catalog/charts.yaml) are what ``gpufleet render`` and the chart tests render. Each one
that ``gpufleet.kube.charts.charts_dir()`` ($GPUFLEET_CHARTS_DIR, else ~/.cache/gpufleet/charts) lacks is pulled with
the helm ``make setup`` installed (``helm pull CHART --repo REPO --version VERSION``, the repository gpufleet installs
it from) into a temporary folder there, checked against the digests recorded for it
(``gpufleet.kube.charts.pulled_chart_problem``), and only then moved in. One that does not match is deleted with one
line saying why, never used: setup goes on, and the chart tests skip as without it.

A repository that does not answer is not an error, only a line: the charts' repositories are outside the package
registries some machines are limited to. Each is first asked for its index.yaml (a HEAD request, all at once, at most
PROBE_SECONDS in all: helm pull has no timeout of its own for fetching an index), and the charts of one that is silent
are not pulled; the chart tests then skip unless $GPUFLEET_CHARTS_DIR or ../shared/reference/charts beside the
checkout holds them (tests/charts.py). Run this again to retry.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpufleet.kube import charts

PROBE_SECONDS = 3.0
PULL_SECONDS = 120
CATALOG = "gpufleet/catalog/charts.yaml"


def answers(repository: str) -> bool:
    """Whether ``repository`` answers a HEAD of its index.yaml (with any HTTP status) within PROBE_SECONDS; an oci://
    repository has no index.yaml, and is left to helm."""
    if not repository.startswith(("https://", "http://")):
        return True
    request = urllib.request.Request(repository.rstrip("/") + "/index.yaml", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=PROBE_SECONDS):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, if only with an error status: helm says more
    except (OSError, ValueError):  # no such host, refused, timed out
        return False


def answering(repositories: Iterable[str]) -> set[str]:
    """The repositories that answer, asked at once; the wait is bounded as a whole (a name lookup is not bounded by the
    socket timeout), and daemon threads still waiting do not keep the process alive."""
    found: dict[str, bool] = {}
    asked = sorted(set(repositories))
    threads = [threading.Thread(target=lambda r=r: found.update({r: answers(r)}), daemon=True) for r in asked]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + PROBE_SECONDS + 0.5
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return {r for r in asked if found.get(r) is True}


def install(download: Path, pin: charts.PinnedChart, directory: Path) -> str | None:
    """Move ``download`` (a helm pull of ``pin``) into ``directory`` as ``<chart>-<version>.tgz`` if it is the pinned
    chart, and return None; else delete it and return why it is not."""
    problem = charts.pulled_chart_problem(download, pin)
    if problem is not None:
        download.unlink(missing_ok=True)
        return problem
    os.replace(download, directory / f"{pin.chart}-{pin.version}.tgz")
    return None


def pull(pin: charts.PinnedChart, directory: Path, helm: str) -> tuple[str | None, str | None]:
    """helm pull ``pin`` into ``directory``: (why it was not fetched, why it was refused); both None when it is in."""
    with tempfile.TemporaryDirectory(prefix=".pull-", dir=directory) as tmp:
        command = [helm, "pull", pin.chart, "--repo", pin.repository, "--version", pin.version, "-d", tmp]
        try:
            proc = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PULL_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            return f"helm pull took over {PULL_SECONDS} s", None
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            return f"helm pull failed: {lines[-1] if lines else f'exit {proc.returncode}'}", None
        downloads = list(Path(tmp).glob("*.tgz"))
        if len(downloads) != 1:
            return None, f"helm pull wrote {len(downloads)} .tgz files, not one"
        return None, install(downloads[0], pin, directory)


def main(pins: Sequence[charts.PinnedChart] | None = None, directory: Path | None = None) -> int:
    pins = charts.pinned_charts() if pins is None else pins
    directory = charts.charts_dir() if directory is None else directory
    missing = [pin for pin in pins if not charts.has_chart(pin.release, directory)]
    if not missing:
        return 0
    reached = answering(pin.repository for pin in missing)
    silent = [pin for pin in missing if pin.repository not in reached]
    left_out = [f"{pin.chart} {pin.version} ({pin.repository} does not answer)" for pin in silent]
    for pin in (pin for pin in missing if pin not in silent):
        directory.mkdir(parents=True, exist_ok=True)
        not_fetched, refused = pull(pin, directory, charts.helm_binary())
        if refused is not None:  # never used; said loudly, and the chart tests skip as without the chart
            print(f"fetch_charts: {pin.chart} {pin.version} from {pin.repository} deleted: {refused}", file=sys.stderr)
            left_out.append(f"{pin.chart} {pin.version} (refused: it is not the pinned chart)")
            continue
        if not_fetched is not None:
            left_out.append(f"{pin.chart} {pin.version} ({not_fetched})")
            continue
        kept = directory / f"{pin.chart}-{pin.version}.tgz"
        if pin.sha256 is None:
            digest = hashlib.sha256(kept.read_bytes()).hexdigest()
            note = f"its sha256 {digest} is not recorded yet: add it to {CATALOG}"
        else:
            note = "sha256 as recorded"
        print(f"==> pulled {pin.chart} {pin.version} into {directory} (Chart.yaml and files as pinned; {note})")
    if left_out:
        print(
            f"==> pinned charts not fetched: {'; '.join(left_out)}. The chart tests skip unless"
            f" ${charts.CHARTS_DIR_ENV} or ../shared/reference/charts provides them"
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except charts.ChartError as exc:  # no helm
        print(f"fetch_charts: {exc}", file=sys.stderr)
        sys.exit(1)
