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

from gpufleet.fleet.promote import (
    _block_span,
    default_source,
    load_policy,
    order_problem,
    release_hash,
    replace_release_block,
)
from gpufleet.fleet.promote_ledger import LEDGER_FILE, Ledger
from tests.cli_server import SERVER
from tests.conftest import REPO

STACKS = ["dev-westeurope", "staging-westeurope", "prod-eastus", "prod-westeurope", "lab-local"]
# The release dev tries first: the long-term support driver branch instead of the operator's default. Both are in GPU
# Operator v26.7.0's row of the release table (gpufleet/catalog/releases.yaml), so every stack stays valid with either.
OLD_PIN, NEW_PIN = 'driver_branch: "595"', 'driver_branch: "580"'
NEW_PINS = (f"    {OLD_PIN}\n", f"    {NEW_PIN}\n")


def run(
    root: Path, *args: str, now: dt.datetime | None = None, path: str = "/usr/bin:/bin", columns: int = 200
) -> subprocess.CompletedProcess[str]:
    """``gpufleet ARGS --root ROOT`` in its own process (forked by tests/cli_server.py); ``now`` sets its clock."""
    return SERVER.run([*args, "--root", str(root)], cwd=root, env=env(root, path, columns), now=now)


def env(root: Path, path: str = "/usr/bin:/bin", columns: int = 200) -> dict[str, str]:
    return {"PATH": path, "COLUMNS": str(columns), "HOME": str(root), "PYTHONPATH": str(REPO)}


def git(root: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        env=env,
    ).stdout


def commit(root: Path, message: str, hours_ago: float = 0) -> None:
    """Commit everything, dated ``hours_ago`` (author and committer)."""
    when = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message, env=env)


def ago(hours: float) -> str:
    t = dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def ledger_lines(root: Path) -> list[dict]:
    """The ledger's lines as written (not through the Ledger class)."""
    return [json.loads(line) for line in (root / LEDGER_FILE).read_text().splitlines()]


def promotions(root: Path) -> list[dict]:
    """The ledger's completed promotions (each follows its intent, ``result: started``)."""
    return [e for e in ledger_lines(root) if e["kind"] == "promote" and e["result"] == "ok"]


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
    commit(root, "dev: driver branch 580")
    return json.loads(run(root, "promote", "record", "dev-westeurope", "--result", "ok", "--json").stdout)["release"]


def test_a_release_moves_dev_staging_prod_wave_1_then_wave_2(repo: Path):
    t0 = dt.datetime.now(dt.UTC).replace(microsecond=0)

    def hour(h: float) -> dt.datetime:
        return t0 + dt.timedelta(hours=h)

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

    # 25 hours later the release has run verified in dev for its soak
    dry = run(repo, "promote", "staging-westeurope", "--dry-run", now=hour(25))
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "dry run: every gate passes" in dry.stdout and "595" in dry.stdout and "580  changed" in dry.stdout
    assert (repo / "Pulumi.staging-westeurope.yaml").read_text() == originals["staging-westeurope"]

    proc = run(repo, "promote", "staging-westeurope", now=hour(25))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"promoted: Pulumi.staging-westeurope.yaml now pins release {release}" in proc.stdout
    staged = (repo / "Pulumi.staging-westeurope.yaml").read_text()
    assert NEW_PIN in staged
    assert outside_release(staged) == outside_release(originals["staging-westeurope"])  # byte for byte
    commit(repo, "promote to staging")

    # prod wave 2 (westeurope) before wave 1 (eastus): refused, and told what to do
    proc = run(repo, "promote", "prod-westeurope", now=hour(25))
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

    # prod wave 1 comes from staging (the previous stage's last wave): verified there, then 49 hours later
    run(repo, "promote", "record", "staging-westeurope", "--kind", "deploy", "--result", "ok", now=hour(26))
    run(repo, "promote", "record", "staging-westeurope", "--result", "ok", now=hour(26))
    proc = run(repo, "promote", "prod-eastus", now=hour(75))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "staging-westeurope -> prod-eastus" in proc.stdout
    commit(repo, "promote to prod wave 1")

    proc = run(repo, "promote", "prod-westeurope", now=hour(75))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    commit(repo, "promote to prod wave 2")
    for stack in ("staging-westeurope", "prod-eastus", "prod-westeurope"):
        text = (repo / f"Pulumi.{stack}.yaml").read_text()
        assert outside_release(text) == outside_release(originals[stack]), stack
        assert NEW_PIN in text

    entries = ledger_lines(repo)
    assert [(e["from"], e["stack"], e["release"]) for e in promotions(repo)] == [
        ("dev-westeurope", "staging-westeurope", release),
        ("staging-westeurope", "prod-eastus", release),
        ("staging-westeurope", "prod-westeurope", release),
    ]
    assert all(e["commit"] and e["previous_release"] != release for e in entries if e["kind"] == "promote")
    # each promotion's intent (both release blocks) is written before its stack file, its outcome after
    steps = [(e["stack"], e["result"]) for e in entries if e["kind"] == "promote"]
    assert steps == [(e["stack"], r) for e in promotions(repo) for r in ("started", "ok")]
    assert all(NEW_PIN in e["block"] and OLD_PIN in e["previous_block"] for e in entries if e["result"] == "started")

    # again: nothing to promote, nothing recorded
    proc = run(repo, "promote", "prod-westeurope", now=hour(75))
    assert proc.returncode == 0 and "nothing to promote: prod-westeurope already runs release" in proc.stdout
    assert len(ledger_lines(repo)) == len(entries)

    status = json.loads(run(repo, "promote", "status", "--json", now=hour(75)).stdout)
    assert [(s["stack"], s["release"], s["next"]) for s in status] == [
        ("dev-westeurope", release, "first stage: edit its release block"),
        ("staging-westeurope", release, "up to date"),
        ("prod-eastus", release, "up to date"),
        ("prod-westeurope", release, "up to date"),
    ]
    assert not any(s["forced"] for s in status)
    human = run(repo, "promote", "status", now=hour(75))
    assert human.returncode == 0 and "verified, soaked 2d1h of 48h" in human.stdout, human.stdout


def test_a_failed_verification_blocks_and_the_soak_restarts_after_it(repo: Path):
    t0 = dt.datetime.now(dt.UTC).replace(microsecond=0)
    new_release_in_dev(repo)  # verified now
    run(repo, "promote", "record", "dev-westeurope", "--result", "failed", now=t0 + dt.timedelta(hours=30))
    proc = run(repo, "promote", "staging-westeurope", now=t0 + dt.timedelta(hours=30))
    assert proc.returncode == 1
    assert "refused (verified): dev-westeurope has its last verification failed" in proc.stdout
    run(repo, "promote", "record", "dev-westeurope", "--result", "ok", now=t0 + dt.timedelta(hours=31))
    proc = run(repo, "promote", "staging-westeurope", now=t0 + dt.timedelta(hours=40))
    assert proc.returncode == 1 and "has soaked 9h in dev-westeurope" in proc.stdout  # not 40h: it failed since


def test_a_forced_promotion_needs_a_reason_and_records_it(repo: Path):
    release = new_release_in_dev(repo)
    proc = run(repo, "promote", "staging-westeurope", "--force")
    assert proc.returncode == 2 and "--force needs --reason TEXT" in proc.stderr
    proc = run(repo, "promote", "staging-westeurope", "--force", "--reason", "CVE-2026-0001 in the operator")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "forced (soaked)" in proc.stdout
    (entry,) = promotions(repo)
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
    assert OLD_PIN in (repo / "Pulumi.staging-westeurope.yaml").read_text()


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
    assert not [e for e in ledger_lines(repo) if e["kind"] == "deploy"]


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
from gpufleet.fleet.promote_ledger import Ledger
ledger = Ledger(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    ledger.append({"time": "2026-11-22T00:00:00Z", "kind": "verify", "stack": sys.argv[2], "release": str(i),
                   "result": "ok", "note": "x" * 2000})
"""


def test_two_writers_appending_at_once_lose_no_line_and_keep_the_chain(tmp_path: Path):
    path = tmp_path / LEDGER_FILE
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, "150"], cwd=REPO, stdin=subprocess.DEVNULL)
        for name in ("a", "b")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    entries = Ledger(path).entries()  # every line parses, and the hash chain holds
    assert len(entries) == 300
    for name in ("a", "b"):
        assert [e.release for e in entries if e.stack == name] == [str(i) for i in range(150)]


def test_a_result_that_would_be_invalid_is_refused_even_when_forced(repo: Path):
    """The block moves as text: an alias to an anchor elsewhere in the source file would dangle in the target."""
    dev = repo / "Pulumi.dev-westeurope.yaml"
    text = dev.read_text().replace("config:\n", 'config:\n  team:kubernetes: &k8s "1.36"\n', 1)
    text = text.replace('    kubernetes: "1.36"\n', "    kubernetes: *k8s\n    # uses team:kubernetes\n", 1)
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
    from gpufleet.fleet.promote import StackFiles, decide, load_policy

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


# -- promotion integrity (issue 20): each test failed before its fix ---------------------------------------------


def hotfix_stack(repo: Path) -> None:
    """hotfix-westeurope: a copy of prod-westeurope with a new release, in a stage promotion.yaml does not list."""
    text = (repo / "Pulumi.prod-westeurope.yaml").read_text().replace("gpufleet:stage: prod", "gpufleet:stage: hotfix")
    (repo / "Pulumi.hotfix-westeurope.yaml").write_text(text.replace(*NEW_PINS))
    commit(repo, "a hotfix stack")


def test_a_source_out_of_the_policys_order_is_refused_unless_forced_and_status_shows_the_force(repo: Path):
    hotfix_stack(repo)
    assert run(repo, "promote", "record", "hotfix-westeurope", "--result", "ok").returncode == 0
    prod = (repo / "Pulumi.prod-eastus.yaml").read_text()
    proc = run(repo, "promote", "prod-eastus", "--from", "hotfix-westeurope")
    assert proc.returncode == 1, proc.stdout
    assert (
        "refused (order): hotfix-westeurope is not a stack of promotion.yaml (stage 'hotfix' is not in it); a release"
        " reaches prod-eastus from stage staging; --force --reason TEXT takes it from hotfix-westeurope anyway"
        in proc.stdout
    )
    new_release_in_dev(repo)
    proc = run(repo, "promote", "prod-eastus", "--from", "dev-westeurope")
    assert proc.returncode == 1 and "refused (order): dev-westeurope skips stage staging" in proc.stdout
    assert (repo / "Pulumi.prod-eastus.yaml").read_text() == prod

    reason = "CVE-2026-0002 [bold]now[/bold]"
    proc = run(repo, "promote", "prod-eastus", "--from", "hotfix-westeurope", "--force", "--reason", reason)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "forced (order)" in proc.stdout and NEW_PIN in (repo / "Pulumi.prod-eastus.yaml").read_text()
    (entry,) = promotions(repo)
    assert (entry["from"], entry["forced"], entry["reason"]) == ("hotfix-westeurope", ["order"], reason)
    commit(repo, "hotfix to prod-eastus")
    (row,) = [r for r in json.loads(run(repo, "promote", "status", "--json").stdout) if r["stack"] == "prod-eastus"]
    assert row["forced"] == {"time": entry["time"], "from": "hotfix-westeurope", "gates": ["order"], "reason": reason}
    human = run(repo, "promote", "status", columns=400)
    assert f"forced from hotfix-westeurope (order): {reason}" in human.stdout, human.stdout  # markup shown as text


def test_only_the_previous_stage_or_an_earlier_wave_is_in_order():
    policy = load_policy(REPO).policy
    assert policy is not None
    for target in policy.stacks():
        source = default_source(policy, target)
        assert source is None or order_problem(policy, source, target) is None, target
    assert order_problem(policy, "prod-eastus", "prod-westeurope") is None
    assert "prod-westeurope does not come before prod-eastus" in str(
        order_problem(policy, "prod-westeurope", "prod-eastus")
    )
    assert "nothing is promoted into dev-westeurope" in str(
        order_problem(policy, "staging-westeurope", "dev-westeurope")
    )


def test_record_refuses_a_time_in_the_future_or_before_the_stacks_last_commit(repo: Path):
    dev = repo / "Pulumi.dev-westeurope.yaml"
    dev.write_text(dev.read_text().replace(*NEW_PINS))
    commit(repo, "dev: driver branch 580", hours_ago=2)
    proc = run(repo, "promote", "record", "dev-westeurope", "--result", "ok", "--at", ago(-1))
    assert proc.returncode == 2 and "is in the future" in proc.stderr, proc.stderr
    proc = run(repo, "promote", "record", "dev-westeurope", "--result", "ok", "--at", ago(3))
    assert proc.returncode == 2, proc.stderr
    assert "is before Pulumi.dev-westeurope.yaml last changed" in proc.stderr
    assert not (repo / LEDGER_FILE).exists()
    assert run(repo, "promote", "record", "dev-westeurope", "--result", "ok", "--at", ago(1)).returncode == 0


def test_a_backdated_record_does_not_satisfy_the_soak(repo: Path):
    dev = repo / "Pulumi.dev-westeurope.yaml"
    dev.write_text(dev.read_text().replace(*NEW_PINS))
    commit(repo, "dev: driver branch 580", hours_ago=30)
    assert run(repo, "promote", "record", "dev-westeurope", "--result", "ok", "--at", ago(25)).returncode == 0
    proc = run(repo, "promote", "staging-westeurope")
    assert proc.returncode == 1, proc.stdout
    assert "refused (soaked)" in proc.stdout and "has soaked 0m in dev-westeurope" in proc.stdout  # from its writing


def test_an_edited_or_removed_ledger_line_is_refused_naming_the_line(repo: Path):
    new_release_in_dev(repo)
    run(repo, "promote", "record", "dev-westeurope", "--result", "failed")
    run(repo, "promote", "record", "dev-westeurope", "--result", "ok")
    ledger = repo / LEDGER_FILE
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text(lines[0] + lines[1].replace('"result":"failed"', '"result":"ok"') + lines[2])  # failure hidden
    for args in (
        ("promote", "status"),
        ("promote", "staging-westeurope", "--force", "--reason", "x"),
        ("promote", "record", "dev-westeurope", "--result", "ok"),
    ):
        proc = run(repo, *args)
        assert proc.returncode == 1, (args, proc.stdout)
        assert f"{LEDGER_FILE}:2: the entry was changed after it was written" in proc.stderr, args
    ledger.write_text(lines[0] + lines[2])  # failure removed
    proc = run(repo, "promote", "status")
    assert proc.returncode == 1
    assert f"{LEDGER_FILE}:2: the chain breaks here: 'prev' is not the hash of line 1 before it" in proc.stderr
    assert OLD_PIN in (repo / "Pulumi.staging-westeurope.yaml").read_text()
    written = [json.loads(line) for line in lines]
    assert [e["prev"] for e in written] == [None, written[0]["hash"], written[1]["hash"]]


def test_a_ledger_from_before_the_chain_is_anchored_by_its_first_hashed_entry(repo: Path):
    old = {"time": ago(50), "kind": "deploy", "stack": "dev-westeurope", "release": "0" * 12, "result": "ok"}
    (repo / LEDGER_FILE).write_text(json.dumps(old) + "\n" + json.dumps(old | {"kind": "verify"}) + "\n")
    commit(repo, "a ledger without hashes")
    new_release_in_dev(repo)
    assert run(repo, "promote", "status").returncode == 0
    (repo / LEDGER_FILE).write_text((repo / LEDGER_FILE).read_text() + json.dumps(old) + "\n")
    proc = run(repo, "promote", "status")
    assert proc.returncode == 1
    assert f"{LEDGER_FILE}:4: an entry without a hash after the chain began (line 3)" in proc.stderr


def test_a_torn_last_line_is_refused_until_repaired(repo: Path):
    new_release_in_dev(repo)
    ledger = repo / LEDGER_FILE
    whole = ledger.read_text()
    ledger.write_text(whole + '{"time":"2026-11-2')  # a write cut off by a crash
    for args in (("promote", "record", "dev-westeurope", "--result", "ok"), ("promote", "status")):
        proc = run(repo, *args)
        assert proc.returncode == 1, (args, proc.stdout)
        assert (
            f"{LEDGER_FILE}:2: the last line is incomplete (a write was cut off before its end): run 'gpufleet"
            " promote repair'" in proc.stderr
        )
    assert ledger.read_text() == whole + '{"time":"2026-11-2'  # the record did not land on the torn line
    proc = run(repo, "promote", "repair")
    assert proc.returncode == 0 and f"{LEDGER_FILE}:2: the incomplete last line was removed" in proc.stdout
    assert ledger.read_text() == whole
    assert run(repo, "promote", "record", "dev-westeurope", "--result", "ok").returncode == 0
    assert len(ledger_lines(repo)) == 2
    complete = ledger.read_text()
    ledger.write_text(complete[:-1])  # a whole entry that lost only its newline is kept
    proc = run(repo, "promote", "repair", "--json")
    assert json.loads(proc.stdout)["torn_line"]["action"] == "completed" and ledger.read_text() == complete
    assert "nothing to repair" in run(repo, "promote", "repair").stdout


def test_promotions_started_at_once_promote_once(repo: Path):
    new_release_in_dev(repo)
    promote = [sys.executable, "-m", "gpufleet", "promote", "staging-westeurope", "--root", str(repo), "--force"]
    runs = [
        subprocess.Popen(
            [*promote, "--reason", f"race {i}"],
            cwd=repo,
            env=env(repo),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0, 0, 0], outputs
    assert len(promotions(repo)) == 1
    assert sum("promoted:" in o for o in outputs) == 1
    assert sum("nothing to promote" in o for o in outputs) == 3


def test_a_ledger_line_with_a_malformed_time_is_refused_naming_it(repo: Path):
    new_release_in_dev(repo)
    ledger = repo / LEDGER_FILE
    entry = json.loads(ledger.read_text())
    ledger.write_text(json.dumps(entry | {"time": "yesterday"}) + "\n")
    proc = run(repo, "promote", "status")
    assert proc.returncode == 1, proc.stderr
    assert f"{LEDGER_FILE}:1: time: 'yesterday' is not an ISO 8601 time" in proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


def test_from_and_record_take_stack_names_not_paths(repo: Path):
    outside = repo.parent / f"{repo.name}-outside"
    outside.mkdir()
    text = (repo / "Pulumi.dev-westeurope.yaml").read_text().replace(*NEW_PINS)
    (outside / "Pulumi.dev-westeurope.yaml").write_text(text)
    (repo / "Pulumi.x").mkdir()
    sneaky = f"x/../../{outside.name}/Pulumi.dev-westeurope"  # Pulumi.{sneaky}.yaml is the file outside
    assert (repo / f"Pulumi.{sneaky}.yaml").is_file()
    proc = run(repo, "promote", "staging-westeurope", "--from", sneaky, "--force", "--reason", "x")
    assert proc.returncode == 2 and "is not a stack name" in proc.stderr, proc.stdout
    assert OLD_PIN in (repo / "Pulumi.staging-westeurope.yaml").read_text()
    proc = run(repo, "promote", "record", str(outside / "Pulumi.dev-westeurope.yaml"), "--result", "ok")
    assert proc.returncode == 2 and "is not a stack name" in proc.stderr
    assert not (repo / LEDGER_FILE).exists()


def test_promotion_refuses_when_git_is_missing(repo: Path, tmp_path_factory: pytest.TempPathFactory):
    new_release_in_dev(repo)
    no_git = tmp_path_factory.mktemp("empty-path")
    for args in (
        ("promote", "staging-westeurope", "--force", "--reason", "x"),
        ("promote", "record", "dev-westeurope", "--result", "ok"),
        ("promote", "status"),
    ):
        proc = run(repo, *args, path=str(no_git))
        assert proc.returncode == 1, (args, proc.stdout)
        assert "git is not installed (or not on PATH)" in proc.stderr, args
    assert OLD_PIN in (repo / "Pulumi.staging-westeurope.yaml").read_text()
    assert len(ledger_lines(repo)) == 1


def test_promotion_refuses_outside_a_git_repository(tmp_path: Path):
    for name in ["Pulumi.yaml", "promotion.yaml", *(f"Pulumi.{s}.yaml" for s in STACKS)]:
        shutil.copy(REPO / name, tmp_path / name)
    for args in (
        ("promote", "staging-westeurope", "--force", "--reason", "x"),
        ("promote", "record", "dev-westeurope", "--result", "ok"),
    ):
        proc = run(tmp_path, *args)
        assert proc.returncode == 1, (args, proc.stdout)
        assert "failed" in proc.stderr and "not a git repository" in proc.stderr, proc.stderr
    assert not (tmp_path / LEDGER_FILE).exists()


def test_uncommitted_changes_in_the_source_or_a_recorded_stack_are_refused(repo: Path):
    new_release_in_dev(repo)
    dev = repo / "Pulumi.dev-westeurope.yaml"
    dev.write_text(dev.read_text() + "# local edit\n")
    proc = run(repo, "promote", "staging-westeurope", "--force", "--reason", "x")
    assert proc.returncode == 1
    assert "refused (uncommitted): Pulumi.dev-westeurope.yaml has uncommitted changes" in proc.stdout
    proc = run(repo, "promote", "record", "dev-westeurope", "--result", "ok")
    assert proc.returncode == 1 and "Pulumi.dev-westeurope.yaml has uncommitted changes" in proc.stderr
    assert len(ledger_lines(repo)) == 1
