"""The canary_verified promotion gate: a promotion into a stage that lists it needs the target stack's canary hosts
(``gpufleet:baremetal.verify.canaries``) to have passed the verify playbook, DCGM's diagnostic at the target's level
included, in the latest report recorded (``gpufleet promote record --report``) for the release the target runs."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from tests.unit.fleet.test_promote import commit, ledger_lines, new_release_in_dev, promotions, repo, run

__all__ = ["repo"]  # the fixture, from test_promote

STAGING = "staging-westeurope"
# staging-westeurope also has bare-metal hosts, gpu-c1 its canary (stage staging: DCGM level 2 unless it says)
BAREMETAL = """\
  gpufleet:baremetal:
    inventory: inventories/staging-westeurope
    verify:
      canaries: [gpu-c1]
    host_groups:
      - name: hgx
        gpu_model: H100-SXM5-80GB
        gpus_per_host: 8
"""


def with_canary_gate(root: Path) -> dt.datetime:
    """Staging lists canary_verified and has a canary; dev has a new, verified release. Returns when dev's soak ends."""
    policy = root / "promotion.yaml"
    policy.write_text(
        policy.read_text().replace(
            "    soak: 48h\n", "    soak: 48h\n    gates: [earlier_waves, verified, soaked, canary_verified]\n"
        )
    )
    staging = root / f"Pulumi.{STAGING}.yaml"
    staging.write_text(staging.read_text() + BAREMETAL)
    commit(root, "staging: bare-metal hosts with a canary")
    new_release_in_dev(root)
    return dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(hours=25)


def verify_report(root: Path, stack: str = STAGING, result: str = "ok", level: int | None = 2) -> Path:
    """A report as verify.yml writes it (-e gpufleet_verify_report_file): gpu-c1 and gpu-c2."""
    dcgm = None if level is None else {"level": level, "tests": [{"test": "Memory", "result": "Pass", "detail": ""}]}
    hosts = {
        name: {"result": result if name == "gpu-c1" else "ok", "detail": "", "dcgm": dcgm,
               "checks": {"dcgm": {"status": "ok" if result == "ok" else "fail", "detail": ""}}}
        for name in ("gpu-c1", "gpu-c2")
    }  # fmt: skip
    doc = {"stack": stack, "time": "2026-11-27T09:00:00Z", "ok": result == "ok", "hosts": hosts}
    path = root.parent / f"report-{stack}-{result}-{level}.json"
    path.write_text(json.dumps(doc))
    return path


def refusal(proc) -> str:
    return next((line for line in proc.stdout.splitlines() if "refused (canary_verified)" in line), "")


def test_a_promotion_waits_for_the_targets_canaries_to_pass_verify_at_its_dcgm_level(repo: Path):
    later = with_canary_gate(repo)
    proc = run(repo, "promote", STAGING, now=later)
    assert proc.returncode == 1
    assert "has no verify report of its hosts recorded for release" in refusal(proc)
    assert f"gpufleet promote record {STAGING} --report report.json" in refusal(proc)

    # the quick diagnostic is not enough for staging (level 2)
    recorded = run(repo, "promote", "record", STAGING, "--report", str(verify_report(repo, level=1)), "--json")
    assert recorded.returncode == 0, recorded.stderr
    assert json.loads(recorded.stdout)["hosts"]["gpu-c1"] == {"result": "ok", "dcgm_level": 1}
    proc = run(repo, "promote", STAGING, now=later)
    assert proc.returncode == 1
    assert "gpu-c1 ran DCGM's diagnostic at level 1; staging-westeurope requires level 2" in refusal(proc)

    # a canary that failed: recorded as a failed verification (the report's own result)
    assert run(repo, "promote", "record", STAGING, "--report", str(verify_report(repo, result="FAIL"))).returncode == 0
    assert ledger_lines(repo)[-1]["result"] == "failed"
    proc = run(repo, "promote", STAGING, now=later)
    assert proc.returncode == 1 and "gpu-c1 did not pass (FAIL)" in refusal(proc)

    assert run(repo, "promote", "record", STAGING, "--report", str(verify_report(repo))).returncode == 0
    proc = run(repo, "promote", STAGING, now=later)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not refusal(proc)


def test_the_canary_gate_is_forced_like_the_others_and_recorded(repo: Path):
    later = with_canary_gate(repo)
    proc = run(repo, "promote", STAGING, "--force", "--reason", "canary rack in repair", now=later)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "forced (canary_verified)" in proc.stdout
    (entry,) = promotions(repo)
    assert entry["forced"] == ["canary_verified"] and entry["reason"] == "canary rack in repair"


def test_a_stage_with_the_gate_and_a_target_without_canaries_is_refused_saying_where_to_list_them(repo: Path):
    later = with_canary_gate(repo)
    staging = repo / f"Pulumi.{STAGING}.yaml"
    staging.write_text(staging.read_text().replace("    verify:\n      canaries: [gpu-c1]\n", ""))
    commit(repo, "staging: no canary")
    proc = run(repo, "promote", STAGING, now=later)
    assert proc.returncode == 1
    assert (
        "refused (canary_verified): Pulumi.staging-westeurope.yaml names no canary hosts: list them under"
        " gpufleet:baremetal.verify.canaries" in proc.stdout
    )


def test_record_refuses_another_stacks_report_or_a_result_it_contradicts(repo: Path):
    with_canary_gate(repo)
    lines = len(ledger_lines(repo))
    proc = run(repo, "promote", "record", STAGING, "--report", str(verify_report(repo, stack="prod-eastus")))
    assert proc.returncode == 2 and "is a report of stack 'prod-eastus', not of staging-westeurope" in proc.stderr
    failed = verify_report(repo, result="FAIL")
    proc = run(repo, "promote", "record", STAGING, "--result", "ok", "--report", str(failed))
    assert proc.returncode == 2 and "says failed (nothing recorded)" in proc.stderr
    proc = run(repo, "promote", "record", STAGING)
    assert proc.returncode == 2 and "give --result ok|failed, or --report FILE" in proc.stderr
    assert len(ledger_lines(repo)) == lines
