"""Every file in tests/fixtures/invalid/ breaks one rule (or several, for 'all errors at once').

A fixture marks each line where an error must be reported with a trailing comment
``#! <key.path>: <fragment of the message>``; a line may carry several markers. The diagnostics of the file
must match the markers exactly: same line, same key path, a message containing the fragment, nothing else.
An optional first-lines comment ``# today: YYYY-MM-DD`` pins the date the rules see (retirements).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.spec import load_stack
from tests.conftest import FIXTURES, TODAY

INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))
MARK = re.compile(r"#!\s*(?P<path>.*?):\s+(?P<fragment>.+?)\s*(?=#!|$)")


def expectations(path: Path) -> tuple[list[tuple[int, str, str]], dt.date]:
    expected, today = [], TODAY
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if m := re.match(r"# today: (\d{4}-\d{2}-\d{2})", line):
            today = dt.date.fromisoformat(m[1])
        if "#!" in line:
            for m in MARK.finditer(line[line.index("#!") :]):
                expected.append((lineno, m["path"].strip(), m["fragment"]))
    return expected, today


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
    got = [(d.line, d.path, d.message) for d in result.diagnostics]
    unmatched = list(got)
    for line, key_path, fragment in expected:
        hit = next((g for g in unmatched if g[0] == line and g[1] == key_path and fragment in g[2]), None)
        assert hit, f"expected {path.name}:{line}: {key_path}: …{fragment}… — got:\n" + "\n".join(map(str, got))
        unmatched.remove(hit)
    assert not unmatched, f"unexpected extra diagnostics in {path.name}: {unmatched}"
    for d in result.diagnostics:
        assert str(d).startswith(f"{path}:{d.line}: ")


def test_cli_exits_1_on_each_invalid_fixture_with_file_line_path():
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "validate", "--json", *map(str, INVALID)],
        capture_output=True,
        text=True,
        check=False,
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
