"""The lab's time budget: each step of a lab test run against a table kept in the repository (docs/lab.md).

A *step* is what a lab run spends its time on, named after pytest's node id below ``tests/lab/``: a test of
tests/lab (set-up, call and tear-down), a Molecule scenario (its test's node id, timed by the scenario itself: the
scenarios run in a thread pool beside the other steps), or a shared set-up a fixture times as a step of its own
(``image``, ``hosts boot``). The table, ``tests/lab/budget.yaml``, gives each step its seconds and the lab session
its ``total``: the wall time of the one pytest process, not a sum, since the scenarios overlap the other steps.

Every whole run of tests/lab records its steps (:class:`StepClock`, from tests/lab/conftest.py) in
``build/timings/make-test-lab.json``, failed runs too. ``gpufleet lab budget`` prints the record against the table
(``make test`` ends with it) and ``make bench`` reports each step over its budget as a missed target. A step is
within its budget when it took less than it, as ``make bench`` reads a target.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.common.diagnostics import Diagnostic, ValidationFailed, format_path

BUDGET_FILE = "tests/lab/budget.yaml"  # relative to the project root
RECORD_NAME = "make-test-lab"  # build/timings/make-test-lab.json (gpufleet.lab.job.record)
LAB_TESTS = "tests/lab/"  # a step's id is its pytest node id below this folder
TOTAL = "total"
TOTAL_LABEL = "total (the lab session's wall time)"


def step_id(nodeid: str) -> str:
    """``tests/lab/test_lab.py::TestLab::test_x`` -> ``test_lab.py::TestLab::test_x``."""
    return nodeid.removeprefix(LAB_TESTS)


@dataclass(frozen=True)
class Budget:
    """The budget table: seconds per step, in the file's order, and the lab session's wall time."""

    steps: Mapping[str, float]
    total: float
    file: str = BUDGET_FILE


def load_budget(path: Path, name: str | None = None) -> Budget:
    """The table in ``path`` (called ``name`` in messages, by default the path); :class:`ValidationFailed` with a
    ``file:line: key: message`` per malformed line."""
    from gpufleet.common.yamldoc import Locator, read_yaml

    file = name or str(path)
    doc, diagnostics = read_yaml(path)
    diagnostics = [Diagnostic(file, d.line, d.path, d.message) for d in diagnostics]
    if diagnostics:
        raise ValidationFailed(diagnostics)
    found: list[Diagnostic] = []

    def refuse(line: int | None, key: tuple[str, ...], message: str) -> None:
        found.append(Diagnostic(file, line or 1, format_path(key), message))

    if not isinstance(doc, Mapping):
        raise ValidationFailed([Diagnostic(file, 1, "", f"a mapping with `{TOTAL}:` and `steps:` is expected")])
    for key in doc:
        if key not in (TOTAL, "steps"):
            refuse(Locator.key_line(doc, key), (str(key),), f"unknown key; the table has `{TOTAL}` and `steps`")
    total = _seconds(doc.get(TOTAL), lambda m: refuse(Locator.key_line(doc, TOTAL), (TOTAL,), m))
    steps: dict[str, float] = {}
    raw = doc.get("steps")
    if not isinstance(raw, Mapping) or not raw:
        refuse(Locator.key_line(doc, "steps"), ("steps",), "a mapping of step id -> seconds is expected")
    else:
        for key, value in raw.items():
            line = Locator.key_line(raw, key)
            if not isinstance(key, str) or not key.strip():
                refuse(line, ("steps",), f"{key!r} is not a step id (a pytest node id below {LAB_TESTS}, or a name)")
                continue
            seconds = _seconds(value, lambda m, k=key, n=line: refuse(n, ("steps", k), m))
            if seconds is not None:
                steps[key] = seconds
    if found:
        raise ValidationFailed(sorted(found, key=lambda d: d.line))
    assert total is not None
    return Budget(steps, total, file)


def _seconds(value: Any, refuse: Callable[[str], None]) -> float | None:
    """A budget's seconds: a number above 0 (not a bool, not text)."""
    if value is None:
        refuse("missing: give the budget in seconds, e.g. 120")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        refuse(f"{value!r} is not a number of seconds above 0; give seconds, e.g. 120")
        return None
    return float(value)


@dataclass(frozen=True)
class StepTime:
    """One step of a recorded lab run: its wall time and pytest's outcome (passed, failed, error, skipped)."""

    seconds: float
    outcome: str = "passed"


@dataclass(frozen=True)
class LabRun:
    """A recorded lab run: its steps in the order they ran, the session's wall time and its outcome."""

    steps: Mapping[str, StepTime]
    wall_seconds: float | None
    outcome: str
    recorded: str = ""
    machine: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON (``recorded`` and ``machine`` are added by gpufleet.lab.job.record)."""
        return {
            "outcome": self.outcome,
            "wall_seconds": None if self.wall_seconds is None else round(self.wall_seconds, 1),
            "steps": {k: {"seconds": round(s.seconds, 1), "outcome": s.outcome} for k, s in self.steps.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LabRun:
        """A record as :meth:`to_dict` and ``record`` wrote it; also the older one (``tests``: seconds per test of
        a passing run, ``total_seconds``: their sum, no wall time)."""
        if "steps" in data:
            steps = {
                str(k): StepTime(float(v["seconds"]), str(v.get("outcome", "passed"))) for k, v in data["steps"].items()
            }
            wall = data.get("wall_seconds")
            outcome = str(data.get("outcome", "passed"))
        else:
            steps = {str(k): StepTime(float(v)) for k, v in data.get("tests", {}).items()}
            wall, outcome = None, "passed"
        return cls(
            steps,
            None if wall is None else float(wall),
            outcome,
            str(data.get("recorded", "")),
            str(data.get("machine", "")),
        )


def read_run(path: Path) -> LabRun | None:
    """The lab run recorded in ``path``; None when there is none. :class:`ValidationFailed` when it is unreadable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValidationFailed([Diagnostic(str(path), 1, "", f"cannot read: {exc.strerror}")]) from None
    try:
        return LabRun.from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"not a lab run's record ({type(exc).__name__}: {exc}); the next lab run writes it again"
        raise ValidationFailed([Diagnostic(str(path), 1, "", why)]) from None


@dataclass(frozen=True)
class Row:
    """One line of the table: a step (or the total), its seconds in the run and its budget; None where absent."""

    step: str
    seconds: float | None
    budget: float | None
    outcome: str | None = None

    @property
    def over(self) -> bool:
        return self.seconds is not None and self.budget is not None and not self.seconds < self.budget

    @property
    def status(self) -> str:
        if self.seconds is None:
            return "not run"
        if self.budget is None:
            return "no budget line"
        return f"OVER by {self.seconds - self.budget:.0f} s" if self.over else "ok"

    def to_dict(self) -> dict[str, Any]:
        seconds = None if self.seconds is None else round(self.seconds, 1)
        return {"step": self.step, "seconds": seconds, "budget": self.budget, "outcome": self.outcome,
                "status": self.status, "over": self.over}  # fmt: skip


@dataclass(frozen=True)
class BudgetReport:
    """A lab run against the budget: the budgeted steps in the table's order, then the steps without a budget line,
    then the total (the session's wall time)."""

    rows: list[Row]
    total: Row
    run: LabRun
    budget: Budget

    @property
    def steps_sum(self) -> float:
        """The steps' seconds added up (more than the wall time where scenarios overlap other steps)."""
        return sum(t.seconds for t in self.run.steps.values())

    @property
    def over(self) -> list[str]:
        """The steps over their budget, and ``total`` when the session's wall time was over its budget."""
        return [r.step for r in [*self.rows, self.total] if r.over]

    def table(self) -> str:
        """The table as plain text: step, seconds, budget, status (and the outcome of a step that did not pass)."""
        width = max(len(r.step) for r in [*self.rows, Row(TOTAL_LABEL, None, None)])

        def line(step: str, seconds: str, budget: str, status: str) -> str:
            return f"  {step.ljust(width)}  {seconds:>7}  {budget:>7}  {status}".rstrip()

        lines = [line("step", "seconds", "budget", "status")]
        for r in [*self.rows, self.total]:
            status = r.status + (f" ({r.outcome})" if r.outcome not in (None, "passed") else "")
            lines.append(line(TOTAL_LABEL if r is self.total else r.step, _s(r.seconds), _s(r.budget), status))
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: which steps went over, or that none did."""
        if not self.run.steps:
            return "no lab run recorded yet: a whole run of tests/lab (make test) records one"
        steps = [r.step for r in self.rows if r.over]
        said = [f"{len(steps)} lab step(s) over budget: {', '.join(steps)}"] if steps else []
        if self.total.over:
            said.append(f"the lab session took {_s(self.total.seconds)} s, over its total of {_s(self.budget.total)} s")
        not_run = sum(r.seconds is None for r in self.rows)
        also = f"; {not_run} budgeted step(s) not run" if not_run else ""
        if not said:
            return f"every lab step that ran within its budget ({self.budget.file}){also}"
        return f"OVER BUDGET: {'; '.join(said)} (a timing, not a test failure: {self.budget.file}){also}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_file": self.budget.file,
            "recorded": self.run.recorded,
            "machine": self.run.machine,
            "outcome": self.run.outcome,
            "steps": [r.to_dict() for r in self.rows],
            "total": self.total.to_dict(),
            "steps_sum_seconds": round(self.steps_sum, 1),
            "over": self.over,
        }


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f}"


def compare(budget: Budget, run: LabRun) -> BudgetReport:
    """Each budgeted step against its time in ``run`` (``not run`` where it has none), each of the run's steps that
    has no budget line, and the session's wall time against the total."""
    rows = []
    for step, seconds in budget.steps.items():
        ran = run.steps.get(step)
        rows.append(Row(step, ran.seconds if ran else None, seconds, ran.outcome if ran else None))
    rows += [Row(step, t.seconds, None, t.outcome) for step, t in run.steps.items() if step not in budget.steps]
    total = Row(TOTAL, run.wall_seconds, budget.total, run.outcome if run.steps else None)
    return BudgetReport(rows, total, run, budget)


@dataclass(frozen=True)
class LastRun:
    """The budget against the last recorded lab run: the report, a line saying which run it is, and the record's
    path (None when none was recorded)."""

    report: BudgetReport
    heading: str
    record: Path | None


def last_report(project: Path, record: Path | None = None) -> LastRun:
    """The project's budget against the lab run recorded in ``record`` (by default the last one,
    build/timings/make-test-lab.json). :class:`ValidationFailed` when the table or the record is malformed."""
    path = record or project / "build" / "timings" / f"{RECORD_NAME}.json"
    budget = load_budget(project / BUDGET_FILE, BUDGET_FILE)
    run = read_run(path)
    when = f"recorded {run.recorded} on {run.machine}, {run.outcome}" if run else f"none recorded in {path}"
    return LastRun(
        compare(budget, run or LabRun({}, None, "not run")),
        f"the lab's budget ({budget.file}); last lab run: {when}",
        path if run else None,
    )


@dataclass
class StepClock:
    """A lab session's steps as they run (tests/lab/conftest.py feeds it from pytest's hooks).

    ``report`` adds a test's phases (set-up, call, tear-down); ``shared`` records a set-up that a fixture timed as a
    step of its own, and the next phase reported (the set-up that ran the fixture) is charged without it; ``own``
    gives a step the wall time of its own work, measured where it ran (a Molecule scenario in the thread pool), in
    place of its test's phases (which only wait for that work)."""

    steps: dict[str, StepTime] = field(default_factory=dict)
    _owned: dict[str, float] = field(default_factory=dict, init=False)
    _unclaimed: float = field(default=0.0, init=False)

    def shared(self, name: str, seconds: float, ok: bool) -> None:
        before = self.steps.get(name, StepTime(0.0))
        outcome = before.outcome if ok else "failed"
        self.steps[name] = StepTime(before.seconds + seconds, outcome)
        self._unclaimed += seconds

    def own(self, nodeid: str, seconds: float) -> None:
        self._owned[step_id(nodeid)] = seconds

    def report(self, nodeid: str, when: str, seconds: float, outcome: str) -> None:
        """One phase (``setup``, ``call``, ``teardown``) of a test, with pytest's outcome of that phase."""
        seconds, self._unclaimed = max(0.0, seconds - self._unclaimed), 0.0
        step = step_id(nodeid)
        before = self.steps.get(step, StepTime(0.0))
        if before.outcome in ("failed", "error"):
            outcome = before.outcome  # the first failure stands
        elif outcome == "failed":
            outcome = "failed" if when == "call" else "error"  # as pytest counts a failing set-up or tear-down
        elif outcome == "passed":
            outcome = before.outcome  # passed, or skipped in an earlier phase
        self.steps[step] = StepTime(before.seconds + seconds, outcome)

    def run(self, wall_seconds: float, exitstatus: int) -> LabRun:
        """The session as a record: ``passed`` (pytest's exit 0) or ``failed``."""
        steps = {k: StepTime(self._owned.get(k, t.seconds), t.outcome) for k, t in self.steps.items()}
        return LabRun(steps, wall_seconds, "passed" if exitstatus == 0 else "failed")
