"""benchmarks/outputs.py: the byte-for-byte comparison of the commands' outputs that a layout change must keep."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.outputs import compare, example_stacks, main, snapshot
from tests.conftest import REPO


def test_every_example_stack_is_compared():
    stacks = example_stacks(REPO)
    assert "prod-westeurope" in stacks and "examples/baremetal/Pulumi.prod-onprem.yaml" in stacks
    assert len(stacks) == len(list(REPO.glob("Pulumi.*-*.yaml"))) + len(list(REPO.glob("examples/*/Pulumi.*.yaml")))


def test_two_snapshots_of_one_tree_are_identical_and_a_changed_byte_is_found(tmp_path: Path):
    before, after = tmp_path / "before", tmp_path / "after"
    assert snapshot(REPO, before, ["lab-local"], progress=lambda _: None) == 5
    snapshot(REPO, after, ["lab-local"], progress=lambda _: None)
    assert compare(before, after) == []
    plan = after / "lab-local" / "plan.txt"
    assert plan.read_text().startswith("exit 0\n--- stdout\n{")
    plan.write_text(plan.read_text().replace('"lab-local"', '"lab-other"', 1))
    (after / "lab-local" / "extra.txt").write_text("")
    (found_extra, found_plan) = compare(before, after)
    assert found_extra == "lab-local/extra.txt: only in after"
    assert found_plan.startswith("--- before/lab-local/plan.txt\n+++ after/lab-local/plan.txt")
    assert '+  "stack": "lab-other",' in found_plan


def test_a_folder_with_files_is_refused_and_left_as_it_was(tmp_path: Path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        snapshot(REPO, tmp_path, ["lab-local"], progress=lambda _: None)
    assert main(["snapshot", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path} exists and is not an empty folder: give a new one\n"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_an_unknown_revision_is_one_line_and_exit_2(capsys):
    assert main(["compare", "no-such-revision-of-gpufleet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no worktree of no-such-revision-of-gpufleet: ") and err.count("\n") == 1
