"""An exception no command handles is a bug: the CLI says so in one line and exits 3 (1 and 2 stay for bad input and
usage), never with a bare traceback; ``gpufleet --debug`` adds the traceback for a report."""

from __future__ import annotations

import pytest

import gpufleet.cli.stack
from gpufleet.cli import main
from gpufleet.cli.common import EXIT_INTERNAL
from tests.conftest import REPO
from tests.conftest import gpufleet as run_gpufleet


def broken_loader(*_args, **_kwargs):
    raise KeyError("pools [red]x[/red] :100:")  # markup and emoji codes in a message are printed as they are


@pytest.fixture
def broken_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpufleet.cli.stack, "planned_or_exit", broken_loader)


@pytest.mark.usefixtures("broken_plan")
def test_an_unhandled_exception_is_one_line_and_exit_3(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "dev-westeurope", "--root", str(REPO)])
    assert exit_.value.code == EXIT_INTERNAL == 3
    stderr = capsys.readouterr().err
    assert stderr.splitlines() == [
        "internal error: KeyError: 'pools [red]x[/red] :100:'; please report it with the output of the same command "
        "run as gpufleet --debug ..."
    ]
    assert "Traceback" not in stderr


@pytest.mark.usefixtures("broken_plan")
def test_debug_prints_the_traceback_too(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        main(["--debug", "plan", "dev-westeurope", "--root", str(REPO)])
    assert exit_.value.code == 3
    stderr = capsys.readouterr().err
    assert stderr.startswith("Traceback (most recent call last):")
    assert "in broken_loader" in stderr and stderr.rstrip().splitlines()[-1].startswith("internal error: KeyError")


def test_the_exit_codes_are_in_help_and_bad_input_and_usage_keep_theirs():
    help_text = " ".join(run_gpufleet("--help").stdout.split())
    assert "Exit codes: 0 success, 1 the input is wrong, 2 usage error, 3 internal error" in help_text
    assert run_gpufleet("validate", "tests/fixtures/invalid/many_errors_at_once.yaml").returncode == 1
    assert run_gpufleet("validate", "--no-such-option").returncode == 2
