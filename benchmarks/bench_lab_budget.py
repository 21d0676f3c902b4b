"""The lab's budget: the last recorded lab test run (build/timings/make-test-lab.json, written by every whole run of
tests/lab, failed ones too) against tests/lab/budget.yaml. Each step is a figure with its budget as the target, and
the lab session's wall time one with the total: a step over budget misses its target. Cheap (reads two files, runs
nothing), so the table prints where the lab cannot run: `python benchmarks/run.py lab_budget` prints it alone.
"""

from __future__ import annotations

from benchmarks.common import REPO, Figure


def run() -> list[Figure]:
    from gpufleet.lab.budget import BUDGET_FILE, RECORD_NAME, TOTAL, LabRun, compare, load_budget, read_run

    path = REPO / "build" / "timings" / f"{RECORD_NAME}.json"
    budget = load_budget(REPO / BUDGET_FILE, BUDGET_FILE)
    run = read_run(path)
    report = compare(budget, run or LabRun({}, None, "not run"))
    when = f"recorded {run.recorded} on {run.machine}, {run.outcome}" if run else "none recorded yet"
    print(f"   the lab's budget ({BUDGET_FILE}); last lab run: {when}")
    print(report.table())
    print(f"   {report.summary()}")
    figures = [
        Figure(f"lab step: {row.step}", row.seconds, "s", row.budget) for row in report.rows if row.seconds is not None
    ]
    if report.total.seconds is not None:
        figures.append(Figure(f"lab session, wall time ({TOTAL})", report.total.seconds, "s", budget.total))
    return figures
