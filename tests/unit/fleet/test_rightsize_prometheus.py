"""gpufleet rightsize against a real Prometheus: Debian's ``prometheus`` (make setup) serving a TSDB that promtool
built from DCGM-exporter-shaped series (tests/prometheus_tsdb.py), queried over HTTP by the command. The worked
example of docs/rightsize.md is run here and its figures asserted."""

from __future__ import annotations

import json
import re
import shutil
import socket
import time
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.fleet.rightsize import _after_layouts, devices, node_plan
from gpufleet.mig.placement import as_layout
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from tests.conftest import REPO, cli
from tests.prometheus_tsdb import (
    EXAMPLE_END,
    EXAMPLE_STACK,
    EXAMPLE_WINDOW,
    example_fleet,
    free_port,
    openmetrics,
    prometheus_serving,
    tool,
)

pytestmark = pytest.mark.skipif(
    not (tool("promtool") and tool("prometheus")),
    reason="promtool and prometheus are not installed (make setup installs them: scripts/install_promtool.sh)",
)
AT = "2026-11-30T12:00:00Z"
STACK = str(EXAMPLE_STACK.relative_to(REPO))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("prometheus")
    with prometheus_serving(openmetrics(example_fleet(), EXAMPLE_END - 7200, EXAMPLE_END), workdir) as url:
        yield url


def rightsize(url: str, *extra: str, stack: str = STACK, cwd: Path = REPO):
    return cli("rightsize", stack, "--prometheus", url, "--window", EXAMPLE_WINDOW, "--at", AT, *extra, cwd=cwd)


def test_the_worked_example_classifies_repacks_and_prices(prometheus: str):
    result = rightsize(prometheus, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    verdicts = {w["owner"]: (w["verdict"], w["has"], w["proposal"], w["proposed_instances"]) for w in doc["workloads"]}
    assert verdicts == {
        "Deployment/chat": ("over-provisioned", "3g.40gb", "1g.10gb", 24),  # at most 8.2 GB of a 40 GB half
        "Deployment/embed": ("over-provisioned", "3g.40gb", "1g.20gb", 8),  # 15.2 GB needs more than 1g.10gb's 9.6 GiB
        "StatefulSet/rerank": ("starved", "3g.40gb", "3g.40gb", 5),  # right-sized, but a fifth pod is Pending
        "Job/summarize": ("starved", "3g.40gb", "7g.80gb", 2),  # peaks within 5 % of 39.25 GiB
    }
    chat = next(w for w in doc["workloads"] if w["owner"] == "Deployment/chat")
    assert chat["p95_memory_gb"] < 9 and chat["time_slicing_replicas"] == 6  # 8 % busy: six could share a slice
    # the slice's framebuffer as the exporter reported it (used + free), beside the catalog's usable memory
    assert chat["has_gib_measured"] == 39.25 == chat["has_gib"]
    assert {w["namespace"] for w in doc["workloads"]} == {"ml-inference", "ml-batch"}

    # the pool's figures are the repack's: recomputed here from the catalog and the stack's layout
    (pool,) = doc["pools"]
    catalog = load_catalog()
    gpu = catalog.gpu("H100-SXM5-80GB")
    demand = {"1g.10gb": 24, "1g.20gb": 8, "3g.40gb": 5, "7g.80gb": 2}
    assert pool["demand_before"] == {"3g.40gb": 38} and pool["demand_after"] == demand
    before = tuple(as_layout({"3g.40gb": 2}, gpu.mig) for _ in range(8))
    nodes, repack = node_plan(gpu, before, demand, floor=1)
    assert nodes == 2 and repack is not None and repack.added == 0
    assert pool["mig_before"] == [{"gpus": "all", "profiles": {"3g.40gb": 2}}]
    assert pool["mig_after"] == json.loads(json.dumps(devices(_after_layouts(before, repack))))
    assert pool["gpus_freed"] == (4 - nodes) * 8 == 16
    assert pool["gpus_reconfigured"] == nodes * repack.changed == 8
    assert pool["nodes_before"] == {"count": 4, "min": 4, "max": 8}
    assert pool["nodes_after"] == {"count": 2, "min": 2, "max": 6}
    # every GPU of the new layout exists, and each node holds its share of the demand
    supply = Counter()
    for group in pool["mig_after"]:
        gpus = 8 if group["gpus"] == "all" else len(group["gpus"])
        for profile, count in group["profiles"].items():
            supply[profile] += gpus * count * nodes
    assert all(supply[p] >= c for p, c in demand.items())
    # drains: the two kept nodes reconfigured first, then the two others removed
    assert [s["action"] for s in pool["drain_steps"]] == ["reconfigure", "reconfigure", "remove", "remove"]
    assert len(set(pool["drains"])) == 4
    # the cost delta is the catalog's price of the two nodes removed
    price = catalog.price("Standard_ND96isr_H100_v5", "eastus")
    assert price is not None
    saved = 2 * price.pay_as_you_go * 730
    assert doc["cost"]["before_usd_month"] - doc["cost"]["after_usd_month"] == pytest.approx(saved)
    assert pool["usd_month_before"] == pytest.approx(4 * price.pay_as_you_go * 730)


def test_the_docs_transcript_is_what_the_command_prints(prometheus: str):
    doc = (REPO / "docs" / "rightsize.md").read_text()
    block = re.search(r"```sh\n\$ gpufleet rightsize (.*?)\n(.*?)```", doc, re.S)
    assert block is not None
    result = rightsize(prometheus)
    assert result.returncode == 0, result.stderr
    printed = [" ".join(line.split()) for line in result.stdout.splitlines()]
    for expected in block.group(2).splitlines():
        assert " ".join(expected.split()) in printed, (
            f"docs/rightsize.md shows {expected!r}, the command did not print it"
        )


def test_the_edit_is_written_only_when_asked_and_is_a_valid_stack(prometheus: str, tmp_path: Path):
    original = EXAMPLE_STACK.read_text()
    shown = rightsize(prometheus)
    assert "not written" in shown.stdout and EXAMPLE_STACK.read_text() == original
    target = tmp_path / "Pulumi.dev-eastus.yaml"
    written = rightsize(prometheus, "-o", str(target))
    assert written.returncode == 0, written.stderr
    assert EXAMPLE_STACK.read_text() == original
    loaded = load_stack(target)
    assert loaded.ok, loaded.diagnostics
    pool = loaded.stack.aks.gpu_pools[0]
    assert (pool.count, pool.autoscaling.min, pool.autoscaling.max) == (2, 2, 6)
    assert pool.mig.config_name == "h100-halves-r2"
    assert "# The worked example of docs/rightsize.md" in target.read_text()  # comments kept
    # the plan of the edited stack gives each node what the proposal said: every demanded instance, on two nodes
    (planned,) = plan_stack(loaded.stack, load_catalog()).pools
    assert planned.mig.config_name == "h100-halves-r2" and planned.nodes.count == 2
    per_node = planned.mig.instances_per_node
    demand = {"1g.10gb": 24, "1g.20gb": 8, "3g.40gb": 5, "7g.80gb": 2}
    assert all(2 * per_node[p] >= c for p, c in demand.items()), per_node

    copy = tmp_path / "inplace" / "Pulumi.dev-eastus.yaml"
    copy.parent.mkdir()
    shutil.copy(EXAMPLE_STACK, copy)
    in_place = rightsize(prometheus, "--write", stack=str(copy))
    assert in_place.returncode == 0, in_place.stderr
    assert copy.read_text() == target.read_text()


def test_an_empty_window_is_one_line(prometheus: str):
    result = cli("rightsize", STACK, "--prometheus", prometheus, "--window", "2h", "--at", "2020-01-01T00:00:00Z")
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "no DCGM exporter series" in result.stderr


def test_an_unreachable_prometheus_is_one_line_within_ten_seconds():
    # refused (nothing listens), and silent (a socket that takes the connection and never answers: a hung server)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        for url in (f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{silent.getsockname()[1]}"):
            start = time.monotonic()
            result = cli("rightsize", STACK, "--prometheus", url)
            assert time.monotonic() - start < 10
            assert result.returncode == 1, result.stderr
            assert result.stderr.strip().count("\n") == 0 and "cannot reach Prometheus" in result.stderr
