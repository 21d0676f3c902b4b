"""gpufleet diff: fixture edits of a stack against a git revision — a VM size change replaces the pool, a node count
changes it in place, a MIG layout change names its GPUs — in text, markdown and JSON; bad input is one line."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.fleet.diff import diff_stacks
from gpufleet.spec.load import load_stack_text
from tests.conftest import REPO, TODAY, cli

STACK = "Pulumi.prod-eastus.yaml"
ORIGINAL = (REPO / STACK).read_text()
# the edits: the T4 spot pool gets a bigger size (AKS cannot resize a pool: a new one), the MIG pool one more node and
# a new layout
EDITED = (
    ORIGINAL.replace("vm_size: Standard_NC16as_T4_v3", "vm_size: Standard_NC64as_T4_v3")
    .replace("        count: 2\n", "        count: 3\n")
    .replace("{1g.12gb: 2, 2g.24gb: 1, 3g.47gb: 1}", "{1g.12gb: 7}")
)


def stack(text: str):
    loaded = load_stack_text(text, "stack.yaml", today=TODAY)
    assert loaded.stack is not None, loaded.diagnostics
    return loaded.stack


def test_a_size_change_replaces_a_count_change_is_in_place_and_a_layout_change_names_its_gpus():
    result = diff_stacks(stack(ORIGINAL), stack(EDITED), STACK, load_catalog())
    first, second = result.pools
    assert (first.name, first.change) == ("t4spot", "replace")  # replacements first
    assert [(f.key, f.replaces) for f in first.fields] == [("vm_size", True)]
    assert first.aks_name_before != first.aks_name_after
    assert (second.name, second.change) == ("nvlmig", "in place")
    assert {f.key: f.replaces for f in second.fields} == {"count": False, "mig.devices": False}
    # both GPUs of each of the two nodes that stay get the new layout (the third node is new)
    assert second.mig is not None and second.mig.gpus == 4 and result.gpus_changed == 4
    assert result.release_after == {} and result.status == "changed"
    # the cost: the MIG pool's third node at its price (the T4 sizes have no eastus price: named, left out)
    assert result.delta is not None and result.delta > 0
    assert any("t4spot" in u for u in result.unpriced)


def test_a_layout_change_alone_is_compared_with_the_repack():
    edited = ORIGINAL.replace("{1g.12gb: 2, 2g.24gb: 1, 3g.47gb: 1}", "{1g.12gb: 4, 3g.47gb: 1}")
    (pool,) = diff_stacks(stack(ORIGINAL), stack(edited), STACK, load_catalog()).pools
    assert pool.change == "in place" and pool.mig is not None
    assert pool.mig.gpus == 4  # every GPU of both nodes
    assert pool.mig.repack is not None and pool.mig.repack <= pool.mig.gpus


def test_a_release_pin_moved_and_an_unchanged_stack():
    same = diff_stacks(stack(ORIGINAL), stack(ORIGINAL), STACK, load_catalog())
    assert same.status == "unchanged" and same.pools == ()
    moved = ORIGINAL.replace('driver_branch: "595"', 'driver_branch: "580"')
    result = diff_stacks(stack(ORIGINAL), stack(moved), STACK, load_catalog())
    assert result.release_before == {"driver_branch": "595"} and result.release_after == {"driver_branch": "580"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository holding the project's stack files, committed; the edit left in the working tree."""
    for name in ("Pulumi.yaml", "promotion.yaml", STACK, "Pulumi.dev-westeurope.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "base"],
    ):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    (tmp_path / STACK).write_text(EDITED)
    return tmp_path


def test_the_command_in_three_formats(project: Path):
    as_json = cli("diff", "--base", "HEAD", "--format", "json", cwd=project)
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["base"] == "HEAD" and [s["stack"] for s in doc["stacks"]] == ["prod-eastus"]  # only the edited stack
    (entry,) = doc["stacks"]
    assert list(entry)[:6] == ["stack", "pools", "host_groups", "release", "mig", "cost"]
    assert [(p["name"], p["change"]) for p in entry["pools"]] == [("t4spot", "replace"), ("nvlmig", "in place")]
    assert entry["pools"][0]["fields"] == [
        {"key": "vm_size", "before": "Standard_NC16as_T4_v3", "after": "Standard_NC64as_T4_v3", "replaces": True}
    ]
    assert entry["mig"] == {"gpus_changed": 4}
    assert set(entry["cost"]) >= {"before_usd_month", "after_usd_month", "delta"}

    markdown = cli("diff", "--base", "HEAD", "--format", "markdown", cwd=project)
    assert markdown.returncode == 0
    lines = markdown.stdout.splitlines()
    assert lines[0].startswith("### gpufleet diff") and "| `prod-eastus` | **1 pool(s) REPLACED**" in markdown.stdout
    assert "> **Pool `t4spot` of `prod-eastus` is replaced**" in markdown.stdout
    assert markdown.stdout.index("| stack |") < markdown.stdout.index("<details>")  # summary first, details folded

    text = cli("diff", "--base", "HEAD", cwd=project)
    assert "pool t4spot: REPLACE" in text.stdout
    assert "vm_size: Standard_NC16as_T4_v3 -> Standard_NC64as_T4_v3" in text.stdout


def test_the_default_base_is_the_merge_base_with_main(project: Path):
    subprocess.run(["git", "checkout", "-q", "-b", "feature"], cwd=project, check=True, stdin=subprocess.DEVNULL)
    result = cli("diff", "--format", "json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert [s["stack"] for s in json.loads(result.stdout)["stacks"]] == ["prod-eastus"]


def test_bad_input_is_one_line(project: Path):
    unknown = cli("diff", "--base", "no-such-branch", cwd=project)
    assert unknown.returncode == 2 and unknown.stderr.strip().count("\n") == 0 and "unknown revision" in unknown.stderr
    (project / "Pulumi.staging-westeurope.yaml").write_text((REPO / "Pulumi.staging-westeurope.yaml").read_text())
    absent = cli("diff", "--base", "HEAD", "staging-westeurope", cwd=project)
    assert absent.returncode == 1 and absent.stderr.strip().count("\n") == 0
    assert "does not exist at HEAD" in absent.stderr
    bad_format = cli("diff", "--format", "html", cwd=project)
    assert bad_format.returncode == 2


BAREMETAL = (REPO / "examples" / "baremetal" / "Pulumi.prod-onprem.yaml").read_text()


def test_host_groups_say_what_an_edit_does_to_their_hosts():
    mig = BAREMETAL.replace(
        "        tuning_profile: training\n",
        "        tuning_profile: training\n        mig:\n          config_name: h100-sevenths\n"
        "          devices: [{gpus: all, profiles: {1g.10gb: 7}}]\n",
    )
    hugepages = BAREMETAL.replace("hugepages_1g_per_gpu: 16", "hugepages_1g_per_gpu: 8")
    catalog = load_catalog()
    hosts = {"h100": 2}
    (drains,) = diff_stacks(stack(BAREMETAL), stack(mig), "x", catalog, hosts).host_groups
    assert (drains.name, drains.effects) == ("h100", ("drains",))
    assert drains.mig is not None and drains.mig.gpus == 16  # 8 GPUs on each of its two hosts
    (reboots,) = diff_stacks(stack(BAREMETAL), stack(hugepages), "x", catalog, hosts).host_groups
    assert reboots.effects == ("reboots",)
    assert [(f.key, f.before, f.after) for f in reboots.fields] == [("tuning.hugepages_1g_per_gpu", 16, 8)]


def test_from_another_directory_with_root(project: Path):
    """Stack files are found under --root and read where they are, whatever the working directory."""
    result = cli("diff", "--root", str(project), "--base", "HEAD", "--format", "json", cwd=project.parent)
    assert result.returncode == 0, result.stderr
    assert [s["stack"] for s in json.loads(result.stdout)["stacks"]] == ["prod-eastus"]
