"""The lab's budget: the last recorded lab test run (build/timings/make-test-lab.json, written by every whole run of
tests/lab, failed ones too) against tests/lab/budget.yaml. Each step is a figure with its budget as the target, and
the lab session's wall time one with the total: a step over budget misses its target. Cheap (reads two files, runs
nothing), so the table prints where the lab cannot run: `python benchmarks/run.py lab_budget` prints it alone.
"""

from __future__ import annotations

from benchmarks.common import REPO, Figure


def run() -> list[Figure]:
    from gpufleet.lab.budget import TOTAL, last_report

    last = last_report(REPO)
    report = last.report
    print(f"   {last.heading}")
    print(report.table())
    print(f"   {report.summary()}")
    figures = [
        Figure(f"lab step: {row.step}", row.seconds, "s", row.budget) for row in report.rows if row.seconds is not None
    ]
    if report.total.seconds is not None:
        figures.append(Figure(f"lab session, wall time ({TOTAL})", report.total.seconds, "s", report.budget.total))
    return figures
