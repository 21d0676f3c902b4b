"""The lab's budget (tests/lab/budget.yaml, gpufleet.lab.budget): every lab step has its line and every line a step,
a run is compared and printed step by step with the steps over budget named, a malformed table is refused at its
line, and the steps are timed as the lab's conftest feeds them (shared set-ups, scenarios' own times, outcomes)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.common.diagnostics import ValidationFailed
from gpufleet.lab.budget import (
    BUDGET_FILE,
    LAB_TESTS,
    Budget,
    LabRun,
    StepClock,
    StepTime,
    compare,
    load_budget,
    read_run,
    step_id,
)
from gpufleet.lab.job import record
from tests.conftest import REPO, cli

SAMPLE = REPO / "tests/fixtures/lab-timings/make-test-lab.json"  # a fresh clone's CI run, cold (docs/lab.md shows it)


def collected_lab_steps() -> set[str]:
    """The step ids of the tests `make test` runs in tests/lab, as pytest collects them (parametrized scenarios
    included)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow", "-p", "no:cacheprovider", LAB_TESTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, (
        f"pytest --collect-only {LAB_TESTS} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return {step_id(line.strip()) for line in proc.stdout.splitlines() if line.startswith(LAB_TESTS) and "::" in line}


def shared_lab_steps() -> set[str]:
    """The steps the lab's fixtures time on their own: each ``lab_step("NAME")`` in tests/lab."""
    names = set()
    for path in sorted((REPO / LAB_TESTS).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "lab_step":
                assert node.args and isinstance(node.args[0], ast.Constant), f"{path}: lab_step takes a literal name"
                names.add(node.args[0].value)
    return names


def test_every_lab_step_has_a_budget_line_and_every_budget_line_a_lab_step():
    """A new lab step comes with its budget line; a renamed or removed one takes its line along."""
    budget = load_budget(REPO / BUDGET_FILE, BUDGET_FILE)
    steps = collected_lab_steps() | shared_lab_steps()
    missing, stale = sorted(steps - set(budget.steps)), sorted(set(budget.steps) - steps)
    assert not missing and not stale, (
        f"lab steps without a line in {BUDGET_FILE} (give each its seconds): {missing}; "
        f"lines whose lab step no longer exists (remove or rename them): {stale}"
    )


def test_the_shared_set_ups_and_the_scenarios_are_steps():
    """The fixtures' set-ups are found in the code, and each role's Molecule scenario is a step of its own."""
    from tests.lab import molecule_runner

    assert {"image", "hosts boot"} <= shared_lab_steps()
    scenarios = {s for s in load_budget(REPO / BUDGET_FILE).steps if "test_molecule_scenario[" in s}
    fast = {r for r in molecule_runner.ROLES if not molecule_runner.slow(r)}
    assert scenarios == {f"test_molecule.py::test_molecule_scenario[{role}]" for role in fast}


def report_of(wall: float | None = 90.0):
    budget = Budget({"image": 200, "a": 10, "b": 20, "c": 5}, 100)
    steps = {"image": StepTime(200), "a": StepTime(12.4, "failed"), "b": StepTime(5), "d": StepTime(3)}
    return compare(budget, LabRun(steps, wall, "failed"))


def test_the_table_names_a_step_over_its_budget_and_those_without_a_line_or_a_run():
    report = report_of()
    assert {r.step: r.status for r in report.rows} == {
        "image": "OVER by 0 s",  # at its budget: over, as make bench's `< target` reads it
        "a": "OVER by 2 s",
        "b": "ok",
        "c": "not run",
        "d": "no budget line",
    }
    assert report.over == ["image", "a"]
    lines = report.table().splitlines()
    assert lines[0].split() == ["step", "seconds", "budget", "status"]
    assert lines[2].split() == ["a", "12", "10", "OVER", "by", "2", "s", "(failed)"]  # a slow failure shows
    assert lines[4].split() == ["c", "-", "5", "not", "run"]
    assert lines[-1].split()[-4:] == ["90", "100", "ok", "(failed)"]  # the session's wall time against the total
    assert report.summary().startswith("OVER BUDGET: 2 lab step(s) over budget: image, a (a timing, not a test")
    assert report.summary().endswith("; 1 budgeted step(s) not run")
    assert report.steps_sum == pytest.approx(220.4)


def test_the_session_over_its_total_is_named_too():
    report = report_of(wall=130)
    assert report.over == ["image", "a", "total"]
    assert "the lab session took 130 s, over its total of 100 s" in report.summary()
    assert report.to_dict()["total"] == {
        "step": "total", "seconds": 130, "budget": 100, "outcome": "failed", "status": "OVER by 30 s", "over": True,
    }  # fmt: skip


def test_a_run_within_budget_says_so():
    report = compare(Budget({"a": 10}, 100), LabRun({"a": StepTime(9.9)}, 50, "passed"))
    assert report.over == [] and report.summary() == f"every lab step that ran within its budget ({BUDGET_FILE})"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("total: 1200\nsteps:\n  image: fast\n", ":3: steps.image: 'fast' is not a number of seconds above 0"),
        ("total: 0\nsteps:\n  image: 10\n", ":1: total: 0 is not a number of seconds above 0"),
        ("steps:\n  image: 10\n", ":1: total: missing: give the budget in seconds"),
        ("total: 1200\nstep:\n  image: 10\n", ":2: step: unknown key"),
        ("total: 1200\nsteps:\n  image: 10\n  image: 20\n", ":4: YAML: "),  # a step twice
        (
            "total: 1200\nsteps:\n  image: 10\n  test_molecule.py::test_molecule_scenario[mig]: -5\n",
            ':4: steps["test_molecule.py::test_molecule_scenario[mig]"]: -5 is not a number of seconds',
        ),
        ("total: 1200\nsteps:\n  image: true\n", ":3: steps.image: True is not a number"),
        ("- image\n", ":1: a mapping with `total:` and `steps:` is expected"),
    ],
)
def test_a_malformed_budget_line_is_refused_at_its_file_line_and_key(tmp_path: Path, text: str, expected: str):
    path = tmp_path / "budget.yaml"
    path.write_text(text)
    with pytest.raises(ValidationFailed) as refused:
        load_budget(path, BUDGET_FILE)
    assert f"{BUDGET_FILE}{expected}" in str(refused.value)


def test_the_clock_charges_shared_set_ups_to_their_own_step_and_scenarios_their_own_time():
    clock = StepClock()
    first, scenario = (
        f"{LAB_TESTS}test_accel.py::test_probe",
        f"{LAB_TESTS}test_molecule.py::test_molecule_scenario[mig]",
    )
    clock.shared("image", 200.0, ok=True)  # in the first test's set-up (the session fixture)
    for when, seconds in (("setup", 201.0), ("call", 3.0), ("teardown", 0.5)):
        clock.report(first, when, seconds, "passed")
    clock.own(scenario, 250.0)  # in the thread pool, while the tests ran
    for when, seconds in (("setup", 0.0), ("call", 40.0), ("teardown", 0.0)):
        clock.report(scenario, when, seconds, "passed")  # its test only waited for the scenario
    run = clock.run(1000.0, 0)
    assert run.steps == {
        "image": StepTime(200.0),
        "test_accel.py::test_probe": StepTime(4.5),
        "test_molecule.py::test_molecule_scenario[mig]": StepTime(250.0),
    }
    assert (run.wall_seconds, run.outcome) == (1000.0, "passed")


def test_the_clock_keeps_the_first_failure_of_a_step():
    clock = StepClock()
    clock.shared("hosts boot", 420.0, ok=False)
    clock.report("tests/lab/x.py::A::t1", "setup", 421.0, "failed")  # the fixture failed: pytest's error
    clock.report("tests/lab/x.py::A::t1", "teardown", 1.0, "passed")
    clock.report("tests/lab/x.py::t2", "setup", 0.0, "passed")
    clock.report("tests/lab/x.py::t2", "call", 5.0, "failed")
    clock.report("tests/lab/x.py::t2", "teardown", 1.0, "failed")
    clock.report("tests/lab/x.py::t3", "setup", 0.0, "skipped")
    clock.report("tests/lab/x.py::t3", "teardown", 0.0, "passed")
    run = clock.run(500.0, 1)
    assert {k: (round(t.seconds), t.outcome) for k, t in run.steps.items()} == {
        "hosts boot": (420, "failed"),
        "x.py::A::t1": (2, "error"),
        "x.py::t2": (6, "failed"),
        "x.py::t3": (0, "skipped"),
    }
    assert run.outcome == "failed"


def test_a_recorded_run_reads_back_and_an_older_record_too(tmp_path: Path):
    run = LabRun({"image": StepTime(201.04), "x.py::t": StepTime(3, "failed")}, 1254.04, "failed")
    path = record("make-test-lab", run.to_dict(), tmp_path)
    back = read_run(path)
    assert back is not None and back.recorded and back.machine  # record() adds when and where
    assert back.steps == {"image": StepTime(201.0), "x.py::t": StepTime(3.0, "failed")}
    assert (back.wall_seconds, back.outcome) == (1254.0, "failed")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"tests": {"test_lab.py::TestLab::t": 281.2}, "total_seconds": 1800}))
    assert read_run(old) == LabRun({"test_lab.py::TestLab::t": StepTime(281.2)}, None, "passed")
    assert read_run(tmp_path / "none.json") is None
    (tmp_path / "bad.json").write_text('{"steps": {"a": 3}}')
    with pytest.raises(ValidationFailed, match=r"bad\.json:1: not a lab run's record"):
        read_run(tmp_path / "bad.json")


def test_gpufleet_lab_budget_prints_the_table_names_what_is_over_and_exits_0():
    proc = cli("lab", "budget", "--record", str(SAMPLE), "--root", str(REPO))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["step", "seconds", "budget", "status"]
    assert lines[-2].split()[-6:] == ["1600", "1200", "OVER", "by", "400", "s"]  # the total row
    assert lines[-1].startswith("OVER BUDGET: 7 lab step(s) over budget: image, test_lab.py::TestLab::test_first_")
    # the sample predates the steps added since: they are said to be not run
    sample = read_run(SAMPLE)
    assert sample is not None
    newer = len(set(load_budget(REPO / BUDGET_FILE).steps) - set(sample.steps))
    also = f"; {newer} budgeted step(s) not run" if newer else ""
    assert lines[-1].endswith("the lab session took 1600 s, over its total of 1200 s (a timing, not a test failure: "
                              "tests/lab/budget.yaml)" + also)  # fmt: skip
    data = json.loads(cli("lab", "budget", "--json", "--record", str(SAMPLE), "--root", str(REPO)).stdout)
    assert data["over"][0] == "image" and data["over"][-1] == "total" and len(data["over"]) == 8
    assert data["total"]["status"] == "OVER by 400 s"
    assert set(data["steps"][0]) == {"step", "seconds", "budget", "outcome", "status", "over"}


def test_gpufleet_lab_budget_refuses_a_malformed_table_at_its_line(tmp_path: Path):
    (tmp_path / "tests/lab").mkdir(parents=True)
    (tmp_path / BUDGET_FILE).write_text("total: 1200\nsteps:\n  image: soon\n")
    proc = cli("lab", "budget", "--record", str(SAMPLE), "--root", str(tmp_path))
    assert proc.returncode == 1
    assert f"{BUDGET_FILE}:3: steps.image: 'soon' is not a number of seconds above 0" in proc.stderr
    nothing = cli("lab", "budget", "--root", str(REPO), "--record", str(tmp_path / "none.json"))
    assert nothing.returncode == 0 and "no lab run recorded yet" in nothing.stdout  # the budgets, each "not run"
