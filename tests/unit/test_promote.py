"""Stack promotion as a team runs it, in a temporary git repository holding the example stacks: dev -> staging ->
prod wave 1 -> prod wave 2 with verifications recorded in between, every refusal and its message, a forced
promotion and its recorded reason, the release block moved byte-exactly, and a ledger two writers share."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.promote import (
    LEDGER_FILE,
    Ledger,
    _block_span,
    default_source,
    load_policy,
    release_hash,
    replace_release_block,
)
from tests.conftest import REPO

STACKS = ["dev-westeurope", "staging-westeurope", "prod-eastus", "prod-westeurope", "lab-local"]
NEW_PINS = ("    gpu_operator: v26.7.0\n", "    gpu_operator: v26.7.1\n")


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args, "--root", str(root)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "HOME": str(root), "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
    )


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL
    ).stdout


def commit(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def ago(hours: float) -> str:
    t = dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def outside_release(text: str) -> str:
    lines = text.splitlines(keepends=True)
    start, end, _ = _block_span(lines)
    return "".join(lines[:start] + lines[end:])


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name in ["Pulumi.yaml", "promotion.yaml", *(f"Pulumi.{s}.yaml" for s in STACKS)]:
        shutil.copy(REPO / name, tmp_path / name)
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "config", "user.email", "ci@example.invalid")
    git(tmp_path, "config", "user.name", "gpufleet tests")
    commit(tmp_path, "example stacks")
    return tmp_path


def new_release_in_dev(root: Path) -> str:
    dev = root / "Pulumi.dev-westeurope.yaml"
    dev.write_text(dev.read_text().replace(*NEW_PINS))
    commit(root, "dev: GPU Operator v26.7.1")
    return json.loads(run(root, "promote", "record", "dev-westeurope", "--result", "ok", "--json").stdout)["release"]


def test_a_release_moves_dev_staging_prod_wave_1_then_wave_2(repo: Path):
    originals = {s: (repo / f"Pulumi.{s}.yaml").read_text() for s in STACKS}
    release = new_release_in_dev(repo)  # recorded as verified just now

    # staging: verified in dev, but not soaked 24h yet
    proc = run(repo, "promote", "staging-westeurope")
    assert proc.returncode == 1
    assert f"refused (soaked): release {release} has soaked 0m in dev-westeurope since its verification; stage dev" in (
        proc.stdout
    )
    assert "needs 24h: wait until" in proc.stdout
    assert (repo / "Pulumi.staging-westeurope.yaml").read_text() == originals["staging-westeurope"]

    # a verification CI recorded late: the release has run verified in dev for 25 hours
    run(repo, "promote", "record", "dev-westeurope", "--result", "ok", "--at", ago(25))
    dry = run(repo, "promote", "staging-westeurope", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "dry run: every gate passes" in dry.stdout and "v26.7.0" in dry.stdout and "v26.7.1" in dry.stdout
    assert (repo / "Pulumi.staging-westeurope.yaml").read_text() == originals["staging-westeurope"]

    proc = run(repo, "promote", "staging-westeurope")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"promoted: Pulumi.staging-westeurope.yaml now pins release {release}" in proc.stdout
    staged = (repo / "Pulumi.staging-westeurope.yaml").read_text()
    assert "gpu_operator: v26.7.1" in staged
    assert outside_release(staged) == outside_release(originals["staging-westeurope"])  # byte for byte
    commit(repo, "promote to staging")

    # prod wave 2 (westeurope) before wave 1 (eastus): refused, and told what to do
    proc = run(repo, "promote", "prod-westeurope")
    assert proc.returncode == 1
    assert (
        f"refused (earlier_waves): prod wave 1 (prod-eastus) does not run release {release} yet: promote it first"
        " (gpufleet promote prod-eastus)" in proc.stdout
    )
    assert (
        f"refused (verified): staging-westeurope has no verification of release {release}: deploy it there (pulumi"
        " up), run the verify playbook, then record the outcome: gpufleet promote record staging-westeurope"
        " --result ok" in proc.stdout
    )

    # prod wave 1 comes from staging (the previous stage's last wave): verified and soaked 48h there
    run(repo, "promote", "record", "staging-westeurope", "--kind", "deploy", "--result", "ok", "--at", ago(50))
    run(repo, "promote", "record", "staging-westeurope", "--result", "ok", "--at", ago(49))
    proc = run(repo, "promote", "prod-eastus")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "staging-westeurope -> prod-eastus" in proc.stdout
    commit(repo, "promote to prod wave 1")

    proc = run(repo, "promote", "prod-westeurope")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    commit(repo, "promote to prod wave 2")
    for stack in ("staging-westeurope", "prod-eastus", "prod-westeurope"):
        text = (repo / f"Pulumi.{stack}.yaml").read_text()
        assert outside_release(text) == outside_release(originals[stack]), stack
        assert "gpu_operator: v26.7.1" in text

    entries = Ledger(repo / LEDGER_FILE).entries()
    promotions = [(e["from"], e["stack"], e["release"]) for e in entries if e["kind"] == "promote"]
    assert promotions == [
        ("dev-westeurope", "staging-westeurope", release),
        ("staging-westeurope", "prod-eastus", release),
        ("staging-westeurope", "prod-westeurope", release),
    ]
    assert all(e["commit"] and e["previous_release"] != release for e in entries if e["kind"] == "promote")

    # again: nothing to promote, nothing recorded
    proc = run(repo, "promote", "prod-westeurope")
    assert proc.returncode == 0 and "nothing to promote: prod-westeurope already runs release" in proc.stdout
    assert len(Ledger(repo / LEDGER_FILE).entries()) == len(entries)

    status = json.loads(run(repo, "promote", "status", "--json").stdout)
    assert [(s["stack"], s["release"], s["next"]) for s in status] == [
        ("dev-westeurope", release, "first stage: edit its release block"),
        ("staging-westeurope", release, "up to date"),
        ("prod-eastus", release, "up to date"),
        ("prod-westeurope", release, "up to date"),
    ]
    human = run(repo, "promote", "status")
    assert human.returncode == 0 and "verified, soaked 2d1h of 48h" in human.stdout, human.stdout


def test_a_failed_verification_blocks_and_the_soak_restarts_after_it(repo: Path):
    new_release_in_dev(repo)
    run(repo, "promote", "record", "dev-westeurope", "--result", "ok", "--at", ago(30))
    run(repo, "promote", "record", "dev-westeurope", "--result", "failed")
    proc = run(repo, "promote", "staging-westeurope")
    assert proc.returncode == 1
    assert "refused (verified): dev-westeurope has its last verification failed" in proc.stdout
    run(repo, "promote", "record", "dev-westeurope", "--result", "ok")
    proc = run(repo, "promote", "staging-westeurope")
    assert proc.returncode == 1 and "has soaked 0m in dev-westeurope" in proc.stdout  # not 30h: it failed since


def test_a_forced_promotion_needs_a_reason_and_records_it(repo: Path):
    release = new_release_in_dev(repo)
    proc = run(repo, "promote", "staging-westeurope", "--force")
    assert proc.returncode == 2 and "--force needs --reason TEXT" in proc.stderr
    proc = run(repo, "promote", "staging-westeurope", "--force", "--reason", "CVE-2026-0001 in the operator")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "forced (soaked)" in proc.stdout
    (entry,) = [e for e in Ledger(repo / LEDGER_FILE).entries() if e["kind"] == "promote"]
    assert entry["forced"] == ["soaked"] and entry["reason"] == "CVE-2026-0001 in the operator"
    assert entry["release"] == release


def test_an_invalid_source_is_refused_even_when_forced(repo: Path):
    new_release_in_dev(repo)
    dev = repo / "Pulumi.dev-westeurope.yaml"
    dev.write_text(dev.read_text().replace("count: 1\n", "count: 1\n        colour: blue\n", 1))
    commit(repo, "break dev")
    proc = run(repo, "promote", "staging-westeurope", "--force", "--reason", "try anyway")
    assert proc.returncode == 1
    assert "refused (invalid): stack dev-westeurope is invalid; fix it first:" in proc.stdout
    assert "Pulumi.dev-westeurope.yaml:" in proc.stdout and "colour" in proc.stdout
    assert "v26.7.0" in (repo / "Pulumi.staging-westeurope.yaml").read_text()


def test_an_invalid_target_is_refused(repo: Path):
    new_release_in_dev(repo)
    staging = repo / "Pulumi.staging-westeurope.yaml"
    staging.write_text(staging.read_text().replace("count: 2", "count: 0"))
    commit(repo, "break staging")
    proc = run(repo, "promote", "staging-westeurope", "--force", "--reason", "try anyway")
    assert proc.returncode == 1 and "refused (invalid): stack staging-westeurope is invalid" in proc.stdout


def test_uncommitted_changes_in_the_target_are_refused(repo: Path):
    new_release_in_dev(repo)
    staging = repo / "Pulumi.staging-westeurope.yaml"
    staging.write_text(staging.read_text() + "# local edit\n")
    proc = run(repo, "promote", "staging-westeurope", "--force", "--reason", "x")
    assert proc.returncode == 1
    assert "refused (uncommitted): Pulumi.staging-westeurope.yaml has uncommitted changes; commit or stash" in (
        proc.stdout
    )


def test_the_first_stage_and_stacks_outside_the_policy(repo: Path):
    proc = run(repo, "promote", "dev-westeurope")
    assert proc.returncode == 1 and "dev-westeurope is the first wave of the first stage" in proc.stdout
    proc = run(repo, "promote", "lab-local")
    assert proc.returncode == 2 and "lab-local is not in" in proc.stderr


def test_apply_without_a_pulumi_cli_says_so_and_prints_the_commands(repo: Path):
    new_release_in_dev(repo)
    proc = run(repo, "promote", "staging-westeurope", "--force", "--reason", "test", "--apply")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--apply: no Pulumi CLI on PATH, so nothing was deployed. Run:" in proc.stdout
    assert "pulumi stack select staging-westeurope" in proc.stdout
    assert not [e for e in Ledger(repo / LEDGER_FILE).entries() if e["kind"] == "deploy"]


def test_record_refuses_a_bad_time_and_an_unknown_stack(repo: Path):
    assert run(repo, "promote", "record", "dev-westeurope", "--result", "ok", "--at", "yesterday").returncode == 2
    assert run(repo, "promote", "record", "qa-westeurope", "--result", "ok").returncode == 2
    assert run(repo, "promote", "record", "dev-westeurope", "--result", "maybe").returncode == 2


def test_moving_the_block_keeps_every_other_byte_and_takes_the_sources_indentation_to_the_target():
    target = (
        "# a comment\nconfig:\n  gpufleet:stage: prod\n  gpufleet:region: eastus\n"
        "  gpufleet:release:   # pinned\n    kubernetes: '1.33'\n\n    # the operator\n    gpu_operator: v26.7.0\n"
        "  # about aks\n  gpufleet:aks: {}\n"
    )
    source = "config:\n    gpufleet:release:\n        kubernetes: '1.34'\n        gpu_operator: v26.7.1\n"
    moved = replace_release_block(target, source)
    assert moved == (
        "# a comment\nconfig:\n  gpufleet:stage: prod\n  gpufleet:region: eastus\n"
        "  gpufleet:release:\n    kubernetes: '1.34'\n    gpu_operator: v26.7.1\n"
        "  # about aks\n  gpufleet:aks: {}\n"
    )


def test_release_hash_ignores_key_order():
    assert release_hash({"a": "1", "b": "2"}) == release_hash({"b": "2", "a": "1"}) != release_hash({"a": "1"})


def test_sources_follow_the_policy():
    policy = load_policy(REPO).policy
    assert policy is not None
    assert default_source(policy, "dev-westeurope") is None
    assert default_source(policy, "staging-westeurope") == "dev-westeurope"
    assert default_source(policy, "prod-eastus") == "staging-westeurope"  # no staging in eastus: the last wave
    assert default_source(policy, "prod-westeurope") == "staging-westeurope"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("stages:\n  - name: dev\n    waves: [[westeurope]]\n    soak: 1w\n", "promotion.yaml:4: stages[0].soak:"),
        (
            "stages:\n  - name: dev\n    waves: [[westeurope, westeurope]]\n",
            "promotion.yaml:3: stages[0].waves[0][1]: region 'westeurope' is in two waves of stage dev",
        ),
        (
            "stages:\n  - name: dev\n    waves: [[westeurope, northeurope]]\n",
            "promotion.yaml:3: stages[0].waves[0][1]: no stack file Pulumi.dev-northeurope.yaml",
        ),
        (
            "stages:\n  - name: prod\n    waves: [[eastus]]\n",
            "stages[0].waves: stack prod-westeurope is in no wave of stage prod",
        ),
        ("stages:\n  - name: dev\n    waves: [[westeurope]]\n    gates: [soak]\n", "stages[0].gates[0]"),
    ],
)
def test_an_invalid_policy_is_reported_at_its_line(repo: Path, policy: str, expected: str):
    (repo / "promotion.yaml").write_text(policy)
    proc = run(repo, "promote", "status")
    assert proc.returncode == 1
    assert expected in proc.stderr


WRITER = """
import sys
from pathlib import Path
from gpufleet.promote import Ledger
ledger = Ledger(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    ledger.append({"time": "2026-11-22T00:00:00Z", "kind": "verify", "stack": sys.argv[2], "release": str(i),
                   "result": "ok", "note": "x" * 2000})
"""


def test_two_writers_appending_at_once_lose_no_line(tmp_path: Path):
    path = tmp_path / LEDGER_FILE
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, "400"], cwd=REPO, stdin=subprocess.DEVNULL)
        for name in ("a", "b")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    entries = Ledger(path).entries()  # every line parses
    assert len(entries) == 800
    for name in ("a", "b"):
        assert [e["release"] for e in entries if e["stack"] == name] == [str(i) for i in range(400)]


def test_a_result_that_would_be_invalid_is_refused_even_when_forced(repo: Path):
    """The block moves as text: an alias to an anchor elsewhere in the source file would dangle in the target."""
    dev = repo / "Pulumi.dev-westeurope.yaml"
    text = dev.read_text().replace("config:\n", 'config:\n  team:kubernetes: &k8s "1.33"\n', 1)
    text = text.replace('    kubernetes: "1.33"\n', "    kubernetes: *k8s\n    # uses team:kubernetes\n", 1)
    dev.write_text(text.replace(*NEW_PINS))
    commit(repo, "dev: kubernetes from an anchor")
    assert run(repo, "validate", "dev-westeurope").returncode == 0
    proc = run(repo, "promote", "staging-westeurope", "--force", "--reason", "try anyway")
    assert proc.returncode == 1
    assert "refused (invalid): staging-westeurope with dev-westeurope's release would be invalid:" in proc.stdout
    assert "k8s" in proc.stdout
    assert "kubernetes: *k8s" not in (repo / "Pulumi.staging-westeurope.yaml").read_text()


def test_decide_is_pure_and_reads_only_the_stack_files_it_is_given(tmp_path: Path):
    """The stack files come in as text (StackFiles.read does the I/O at the edge): here the root does not exist."""
    from gpufleet.promote import StackFiles, decide, load_policy

    policy = load_policy(REPO).policy
    assert policy is not None
    texts = {name: (REPO / f"Pulumi.{name}.yaml").read_text() for name in policy.stacks()}
    files = StackFiles(tmp_path / "nowhere", texts, {"staging-westeurope"})
    now = dt.datetime(2026, 11, 25, tzinfo=dt.UTC)
    decision = decide(files, policy, [], "dev-westeurope", "staging-westeurope", now)
    assert {r.gate for r in decision.refusals} == {"uncommitted", "verified"}
    assert decision.new_text is not None and "gpufleet:release" in decision.new_text
    missing = StackFiles(tmp_path, {**texts, "dev-westeurope": None}, set())
    (refusal,) = decide(missing, policy, [], "dev-westeurope", "staging-westeurope", now).refusals
    assert refusal.gate == "invalid" and "cannot read: No such file or directory" in refusal.message
