"""Crash-safe writes (gpufleet.common.atomic): the new text or the old one, the mode kept or given, nothing left
behind on a failure, and the steps the kill tests stop at (tests/unit/fleet/test_promote_kill.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.common.atomic import KILL_AT, STEPS_LOG, replace_dir, write_atomic
from tests.conftest import REPO


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_file_is_replaced_with_its_mode_kept_and_nothing_left_beside_it(tmp_path: Path):
    path = tmp_path / "Pulumi.prod-westeurope.yaml"
    path.write_text("old\n")
    path.chmod(0o640)
    write_atomic(path, "new\n")
    assert (path.read_text(), mode(path)) == ("new\n", 0o640)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_new_file_gets_the_mode_asked_for_from_the_moment_it_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(os, "chmod", lambda *_a, **_k: pytest.fail("chmod after the fact"))
    write_atomic(tmp_path / "redfish.json", "{}", mode=0o600)
    assert mode(tmp_path / "redfish.json") == 0o600


def test_a_symlinked_file_has_its_target_replaced_unless_told_otherwise(tmp_path: Path):
    target = tmp_path / "real.yaml"
    target.write_text("old")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    write_atomic(link, "own", follow_symlinks=False)
    assert not link.is_symlink() and link.read_text() == "own" and target.read_text() == "new"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "hosts.yml"
    path.write_text("old")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, "new")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["hosts.yml"]


def test_something_that_is_no_regular_file_is_written_to_as_it_is(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    write_atomic(fifo, "through\n")
    assert reader.communicate(timeout=10)[0] == b"through\n" and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_directory_moves_in_whole_or_file_by_file_over_an_existing_one(tmp_path: Path):
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "a.yaml").write_text("a")
    replace_dir(staging, tmp_path / "out")
    assert (tmp_path / "out" / "a.yaml").read_text() == "a" and not staging.exists()
    staging.mkdir()
    (staging / "a.yaml").write_text("a2")
    (tmp_path / "out" / "kept.yaml").write_text("k")
    replace_dir(staging, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.yaml", "kept.yaml"]
    assert (tmp_path / "out" / "a.yaml").read_text() == "a2"


def test_each_step_is_logged_and_the_kill_hook_stops_the_process_at_the_step_named(tmp_path: Path):
    code = (
        "import sys; from pathlib import Path; from gpufleet.common.atomic import write_atomic\n"
        "write_atomic(Path(sys.argv[1]), 'new')\n"
    )
    path = tmp_path / "f"
    path.write_text("old")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), STEPS_LOG: str(tmp_path / "steps")}

    def run(extra: dict[str, str]) -> int:
        return subprocess.run(
            [sys.executable, "-c", code, str(path)], env={**env, **extra}, stdin=subprocess.DEVNULL, check=False
        ).returncode

    assert run({}) == 0
    steps = [line.split(" ", 2)[1] for line in (tmp_path / "steps").read_text().splitlines()]
    assert steps == ["write", "fsync", "rename", "fsync"]  # the last: the directory
    path.write_text("old")
    assert run({KILL_AT: "3"}) == -9 and path.read_text() == "old"  # killed before the rename
    assert run({KILL_AT: "4"}) == -9 and path.read_text() == "new"  # after it


def test_two_moves_into_one_directory_at_once_leave_one_moves_files(tmp_path: Path):
    """Each of two processes moves 400 files marked with its name into an existing ``out`` (file by file) at the same
    moment, five times over; ``out`` always ends with one process's files, and the files an earlier move named are
    gone. (Without the lock the two interleave: tried.)"""
    code = (
        "import sys, time; from pathlib import Path; from gpufleet.common.atomic import replace_dir\n"
        "who, out, start = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])\n"
        "staging = out.parent / f'staging-{who}-{out.name}'; staging.mkdir()\n"
        "for i in range(400): (staging / f'{i:03}.yaml').write_text(who)\n"
        "(staging / f'only-{who}.yaml').write_text(who)\n"
        "time.sleep(max(0.0, start - time.time()))\n"
        "replace_dir(staging, out, earlier=lambda d: [p.name for p in d.iterdir() if p.name.startswith('only-')])\n"
    )
    for round_ in range(5):
        out = tmp_path / f"out{round_}"
        out.mkdir()
        start = time.time() + 1.0
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, who, str(out), str(start)],
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
                stdin=subprocess.DEVNULL,
            )
            for who in ("a", "b")
        ]
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
        marks = {f.read_text() for f in out.iterdir()}
        assert len(marks) == 1, f"round {round_}: a mix of {marks}"
        assert sorted(f.name for f in out.iterdir() if f.name.startswith("only-")) == [f"only-{marks.pop()}.yaml"]


def test_a_new_file_without_a_mode_gets_what_open_would_give_it(tmp_path: Path):
    old = os.umask(0o002)
    try:
        write_atomic(tmp_path / "hosts.yml", "x")
        (tmp_path / "plain").write_text("x")
    finally:
        os.umask(old)
    assert mode(tmp_path / "hosts.yml") == mode(tmp_path / "plain") == 0o664
