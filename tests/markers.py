"""Expected errors marked inline in invalid fixture files.

A fixture marks each line where an error must be reported with a trailing comment
``#! <key.path>: <fragment of the message>``; a line may carry several markers. An optional comment line
``# today: YYYY-MM-DD`` pins the date the rules see.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path

from gpufleet.common.diagnostics import Diagnostic

MARK = re.compile(r"#!\s*(?P<path>.*?):\s+(?P<fragment>.+?)\s*(?=#!|$)")


def expectations(path: Path, default_today: dt.date) -> tuple[list[tuple[int, str, str]], dt.date]:
    expected, today = [], default_today
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if m := re.match(r"# today: (\d{4}-\d{2}-\d{2})", line):
            today = dt.date.fromisoformat(m[1])
        if "#!" in line:
            for m in MARK.finditer(line[line.index("#!") :]):
                expected.append((lineno, m["path"].strip(), m["fragment"]))
    return expected, today


def assert_matches(path: Path, expected: Sequence[tuple[int, str, str]], diagnostics: Sequence[Diagnostic]) -> None:
    """The diagnostics are exactly the expected ones: same line and key path, message containing the fragment."""
    got = [(d.line, d.path, d.message) for d in diagnostics]
    unmatched = list(got)
    for line, key_path, fragment in expected:
        hit = next((g for g in unmatched if g[0] == line and g[1] == key_path and fragment in g[2]), None)
        assert hit, f"expected {path.name}:{line}: {key_path}: …{fragment}… — got:\n" + "\n".join(map(str, got))
        unmatched.remove(hit)
    assert not unmatched, f"unexpected extra diagnostics in {path.name}: {unmatched}"
