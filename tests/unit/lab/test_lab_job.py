"""The main job's phase table and timing record (what `make lab` prints and `make bench` reads back)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.lab.job import JobResult, Phase, load_record, record


def job(rc: int = 0) -> JobResult:
    phases = [
        Phase("image", 0.0, "cached"),
        Phase("converge (site.yml)", 81.4, "rc=0, changed lab-1=3"),
        Phase("verify", 7.2, "ok"),
    ]
    return JobResult(phases, 88.6, "tcg", rc, [], {"lab-1": 3})


def test_the_table_lists_each_phase_and_the_total_with_the_accelerator() -> None:
    lines = job().table().splitlines()
    assert [line.split()[0] for line in lines] == ["image", "converge", "verify", "total"]
    assert lines[1].endswith("81 s  rc=0, changed lab-1=3")
    assert lines[-1].endswith("89 s  (tcg)")


def test_a_job_without_host_reports_or_with_a_failed_converge_is_not_ok() -> None:
    assert not job().ok  # no host was verified
    assert not job(rc=2).ok


def test_the_record_round_trips_with_the_changed_counts(tmp_path: Path) -> None:
    path = record("lab-run-x", job().to_dict(), tmp_path)
    assert path == tmp_path / "build/timings/lab-run-x.json"
    data = load_record("lab-run-x", tmp_path)
    assert data["changed"] == {"lab-1": 3} and data["total_seconds"] == 88.6 and data["ok"] is False
    assert data["phases"][0] == {"name": "image", "seconds": 0.0, "note": "cached"}
    assert load_record("missing", tmp_path) is None


def test_the_report_reads_the_projects_stack_for_an_inventory_written_elsewhere(tmp_path: Path) -> None:
    """`gpufleet lab run --inventory /elsewhere` (as the lab suite runs `make lab`): the plan comes from the project,
    not from where the inventory lies. The host here is not listening, so it reports itself unreachable."""
    from gpufleet.lab.report import lab_report
    from tests.conftest import REPO

    inventory = tmp_path / "hosts.yml"
    host = {"ansible_port": 1, "ansible_ssh_private_key_file": str(tmp_path / "no-key")}
    group = "lab"  # Pulumi.lab-local.yaml's host group
    inventory.write_text(f"all:\n  children:\n    {group}:\n      hosts:\n        lab-9: {host}\n")
    [report] = lab_report(inventory, "lab-local", REPO)
    assert report.host == "lab-9" and not report.reachable and not report.ok
