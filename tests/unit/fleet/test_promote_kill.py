"""A promotion killed (SIGKILL) at each of its file-system steps in turn is never lost: the stack file holds the old
text or the new one, never part of one; the ledger is sound or ``promote repair`` names its torn line; ``promote
status`` exits 0 or 1 without a traceback; and a stack file holding the new release has its promotion in the ledger
or is reported, until ``promote repair`` completes or rolls it back (docs/reliability.md).

The kill points are found by tracing one promotion (``$GPUFLEET_TEST_STEPS``: every write, fsync and rename of the
ledger and the stack file, gpufleet.common.atomic.step) and each is then hit in a fresh copy of the repository
(``$GPUFLEET_TEST_KILL_AT``)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.common.atomic import KILL_AT, STEPS_LOG
from gpufleet.fleet.promote_ledger import LEDGER_FILE
from tests.conftest import REPO
from tests.unit.fleet.test_promote import (
    NEW_PIN,
    OLD_PIN,
    SERVER,
    commit,
    env,
    ledger_lines,
    new_release_in_dev,
    promotions,
    repo,  # noqa: F401  (the fixture)
    run,
)

STAGING = "staging-westeurope"
LATER = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(hours=25)  # past dev's 24 h soak


def promote(root: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """``gpufleet promote staging-westeurope`` 25 hours after dev's verification, with ``extra`` in its environment."""
    return SERVER.run(["promote", STAGING, "--root", str(root)], cwd=root, env={**env(root), **extra}, now=LATER)


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_promotion_killed_at_each_file_system_step_is_never_lost(
    repo: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
):
    release = new_release_in_dev(repo)
    old = (repo / f"Pulumi.{STAGING}.yaml").read_text()
    traced = tmp_path_factory.mktemp("traced") / "repo"
    shutil.copytree(repo, traced)
    steps_log = traced.parent / "steps"
    assert promote(traced, **{STEPS_LOG: str(steps_log)}).returncode == 0
    new = (traced / f"Pulumi.{STAGING}.yaml").read_text()
    steps = steps_log.read_text().splitlines()
    assert old != new and len(steps) >= 8, steps  # intent, file (write, fsync, rename, dir), outcome
    outcomes = {}
    for n, step in enumerate(steps, 1):
        root = tmp_path_factory.mktemp(f"kill{n}") / "repo"
        shutil.copytree(repo, root)
        killed = promote(root, **{KILL_AT: str(n)})
        assert killed.returncode == -signal.SIGKILL, (step, killed.stdout, killed.stderr)
        text = (root / f"Pulumi.{STAGING}.yaml").read_text()
        assert text in (old, new), f"killed at {step}: the stack file holds part of a text"
        status = run(root, "promote", "status")
        no_traceback(status)
        assert status.returncode in (0, 1), step
        if "the last line is incomplete" in status.stderr:  # killed inside the ledger's write
            fixed = run(root, "promote", "repair")
            no_traceback(fixed)
            assert f"{LEDGER_FILE}:" in fixed.stdout and "incomplete last line" in fixed.stdout, step
            status = run(root, "promote", "status")
        recorded = [e for e in promotions(root) if e["stack"] == STAGING and e["release"] == release]
        if text == new and not recorded:
            assert status.returncode == 1 and "was interrupted" in status.stdout, (step, status.stdout)
        if status.returncode == 1:  # interrupted: repair completes it on odd steps, rolls it back on even ones
            action = "--complete" if n % 2 else "--roll-back"
            repaired = run(root, "promote", "repair", action, STAGING)
            no_traceback(repaired)
            assert repaired.returncode == 0, (step, repaired.stdout, repaired.stderr)
            text = (root / f"Pulumi.{STAGING}.yaml").read_text()
            assert text == (new if action == "--complete" else old), step
        final = run(root, "promote", "status")
        assert final.returncode == 0, (step, final.stdout, final.stderr)
        has = [e for e in promotions(root) if e["stack"] == STAGING and e["release"] == release]
        assert bool(has) == (text == new), step  # the ledger and the file agree
        outcomes[step] = "new" if text == new else "old"
    with capsys.disabled():
        kept = sum(v == "old" for v in outcomes.values())
        print(f"\nkill test: {len(steps)} kill points, {kept} left the old release, {len(steps) - kept} the new one")


def test_a_promotion_killed_after_its_stack_file_and_before_its_ledger_line_is_reported(
    repo: Path,  # noqa: F811
):
    """The regression: SIGKILL right after the stack file is renamed into place (os.replace patched, so the test
    needs no hook of gpufleet's), before the ledger's promotion line. Before the ledger's intent this left the new
    release in the file, no promotion in the ledger, and status saying "up to date"."""
    release = new_release_in_dev(repo)
    target = f"Pulumi.{STAGING}.yaml"
    code = (
        "import os, signal, sys\n"
        "real = os.replace\n"
        "def replace(src, dst, *a, **k):\n"
        "    real(src, dst, *a, **k)\n"
        f"    if str(dst).endswith({target!r}):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.replace = replace\n"
        "from gpufleet.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    argv = ["promote", STAGING, "--force", "--reason", "regression test", "--root", str(repo)]
    killed = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=repo,
        env={**env(repo), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert OLD_PIN not in (repo / target).read_text()  # the new release is in the file
    status = run(repo, "promote", "status")
    no_traceback(status)
    assert status.returncode == 1, status.stdout
    assert f"{target}: the promotion of release {release} from dev-westeurope into {STAGING} was interrupted" in (
        " ".join(status.stdout.split())
    )
    refused = run(repo, "promote", "prod-eastus", "--force", "--reason", "past it")
    assert refused.returncode == 1 and "refused (ledger)" in refused.stdout  # never forceable
    assert run(repo, "promote", "repair", "--complete", STAGING).returncode == 0
    assert run(repo, "promote", "status").returncode == 0
    (entry,) = [e for e in promotions(repo) if e["stack"] == STAGING]
    assert entry["release"] == release and entry["note"] == "completed by gpufleet promote repair"


def test_a_release_changed_by_hand_after_a_promotion_is_refused_until_recorded_or_rolled_back(
    repo: Path,  # noqa: F811
):
    new_release_in_dev(repo)
    assert promote(repo).returncode == 0
    commit(repo, "promoted to staging")
    staging = repo / f"Pulumi.{STAGING}.yaml"
    promoted = staging.read_text()
    staging.write_text(promoted.replace(NEW_PIN, OLD_PIN))
    commit(repo, "staging: a hand-made driver branch")
    status = run(repo, "promote", "status")
    assert status.returncode == 1 and "a change made outside gpufleet promote" in " ".join(status.stdout.split())
    assert "blocked (ledger)" in status.stdout
    assert json.loads(run(repo, "promote", "status", "--json").stdout)[1]["problem"].startswith(staging.name)
    refused = run(repo, "promote", STAGING, "--force", "--reason", "try")  # dev -> staging, a change to move
    assert refused.returncode == 1 and "refused (ledger)" in refused.stdout
    no_reason = run(repo, "promote", "repair", "--complete", STAGING)
    assert no_reason.returncode == 1 and "needs --reason" in no_reason.stderr
    rolled = run(repo, "promote", "repair", "--roll-back", STAGING)
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert staging.read_text() == promoted and run(repo, "promote", "status").returncode == 0
    commit(repo, "staging: back to the promoted release")
    staging.write_text(promoted.replace(NEW_PIN, OLD_PIN))
    commit(repo, "staging: the hand-made branch again")
    kept = run(repo, "promote", "repair", "--complete", STAGING, "--reason", "vendor hotfix, approved in CHG-42")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert run(repo, "promote", "status").returncode == 0
    last = ledger_lines(repo)[-1]
    assert (last["result"], last["forced"], last["reason"]) == ("ok", ["ledger"], "vendor hotfix, approved in CHG-42")


def test_a_release_edited_by_hand_in_the_first_stage_is_how_a_release_starts(repo: Path):  # noqa: F811
    new_release_in_dev(repo)
    assert run(repo, "promote", "status").returncode == 0
