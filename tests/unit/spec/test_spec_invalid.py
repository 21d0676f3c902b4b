"""Every file in tests/fixtures/invalid/ breaks one rule (or several, for 'all errors at once').

Each fixture marks the lines where errors must be reported (see tests/markers.py); the diagnostics of the file
must match the markers exactly: same line, same key path, a message containing the fragment, nothing else.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.spec.load import load_stack
from tests import markers
from tests.conftest import FIXTURES, TODAY

INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))


def expectations(path: Path) -> tuple[list[tuple[int, str, str]], dt.date]:
    return markers.expectations(path, TODAY)


def test_there_is_a_fixture_per_rule():
    assert len(INVALID) >= 40
    for path in INVALID:
        assert expectations(path)[0], f"{path.name} marks no expected error"
        assert path.read_text().startswith("# rule: "), f"{path.name} does not say which rule it breaks"


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_fixture_reports_expected_errors(path: Path):
    expected, today = expectations(path)
    result = load_stack(path, today=today)
    assert not result.ok and result.stack is None
    markers.assert_matches(path, expected, result.diagnostics)
    for d in result.diagnostics:
        assert str(d).startswith(f"{path}:{d.line}: ")


def test_cli_exits_1_on_each_invalid_fixture_with_file_line_path():
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "validate", "--json", *map(str, INVALID)],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert len(report) == len(INVALID)
    for path, entry in zip(INVALID, report, strict=True):
        assert entry["ok"] is False, path.name
        assert entry["errors"], path.name
        expected_lines = {line for line, _, _ in expectations(path)[0]}
        for error in entry["errors"]:
            assert set(error) == {"file", "line", "path", "message"}
            assert error["file"] == str(path)
        # the CLI runs with the real date; fixtures pinned to another date may differ in wording, not in place
        assert {e["line"] for e in entry["errors"]} & expected_lines, path.name
