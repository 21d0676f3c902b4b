"""Hostile or broken input files and arguments get one clear error at the right line (exit 1, or 2 for a bad
option), never a traceback, a hang or a terminal driven by the input: the cases an adversarial review found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.common.yamldoc import MAX_ALIASES, MAX_DEPTH, MAX_FILE_BYTES, read_yaml
from gpufleet.mig.demand import MAX_FLEET_GPUS, load_demand
from gpufleet.spec.load import load_stack, load_stack_text
from tests.conftest import REPO, cli

STACK = (REPO / "Pulumi.dev-westeurope.yaml").read_text()


def errors(text: str) -> list[str]:
    """The diagnostics of stack text named s.yaml, as printed."""
    return [str(d) for d in load_stack_text(text, "s.yaml").diagnostics]


# -- YAML the parser or the converter could not survive -------------------------------------------------------


def test_nesting_deeper_than_the_limit_is_an_error_at_its_line():
    deep = "config:\n  gpufleet:stage: dev\n  gpufleet:region: " + "[" * 400 + "]" * 400 + "\n"
    assert errors(deep) == [f"s.yaml:3: YAML: nested deeper than {MAX_DEPTH} levels"]


def test_nesting_the_parser_survives_but_gpufleet_refuses_is_located_too():
    deep = "config:\n  gpufleet:aks:\n    x: " + "[" * 100 + "]" * 100 + "\n"
    assert errors(deep) == [f"s.yaml:3: YAML: nested deeper than {MAX_DEPTH} levels"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [("9" * 5000, "'99999999999999999999... (5000 characters)'"), ("0x_", "'0x_'"), ("0b_", "'0b_'")],
)
def test_an_integer_python_will_not_read_is_an_error_at_its_line(value: str, shown: str):
    text = f"config:\n  gpufleet:stage: dev\n  gpufleet:region: {value}\n"
    assert errors(text) == [
        f"s.yaml:3: YAML: {shown} is not a readable integer: at most 4300 digits, in decimal or 0x/0o/0b with digits"
    ]


def billion_laughs(levels: int, width: int) -> str:
    lines = ["config:", "  a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + f"\n  gpufleet:stage: *a{levels}\n"


def test_an_alias_bomb_is_refused_without_expanding_it():
    # 9 levels of 9: 387 million values once expanded (the converter took minutes on it)
    (message,) = errors(billion_laughs(9, 9))
    assert message.endswith("YAML: more than 200000 values with aliases expanded")


def test_more_aliases_than_the_limit_are_refused():
    refs = ", ".join(["*a"] * (MAX_ALIASES + 1))
    text = f"config:\n  x: &a [1]\n  gpufleet:region: [{refs}]\n"
    assert errors(text) == [f"s.yaml:3: YAML: more than {MAX_ALIASES} aliases"]


def test_an_alias_inside_its_own_anchor_is_read_as_null_not_followed_for_ever():
    assert "s.yaml:2: region: expected a string: lowercase letters and digits, e.g. 'westeurope' or 'local'" in errors(
        "config:\n  gpufleet:region: &a [1, *a]\n"
    )


def test_a_few_aliases_still_work():
    text = STACK.replace("  gpufleet:stage: dev", "  gpufleet:stage: &stage dev\n  other:tag: *stage")
    assert load_stack_text(text, "Pulumi.dev-westeurope.yaml").ok


def test_a_control_character_is_reported_at_its_line():
    text = "config:\n  gpufleet:stage: dev\n  gpufleet:region: west\x07europe\n"
    assert errors(text) == ["s.yaml:3: YAML: control character U+0007 is not allowed; remove it"]


def test_bytes_that_are_not_utf8_are_reported_at_their_line(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"config:\n  gpufleet:stage: dev\n  gpufleet:region: \xffwest\n")
    assert [str(d) for d in load_stack(path).diagnostics] == [f"{path}:3: not UTF-8 text: byte 0xff cannot be decoded"]


# -- files that are not files ----------------------------------------------------------------------------------


def test_a_fifo_is_refused_at_once(tmp_path: Path):
    fifo = tmp_path / "Pulumi.dev-westeurope.yaml"
    os.mkfifo(fifo)
    _, diags = read_yaml(fifo)  # no writer: reading it would block for ever
    assert [d.message for d in diags] == ["not a regular file (a FIFO, device or directory); give a file"]
    done = cli("validate", str(fifo), timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: not a regular file: {fifo} (a stack is a YAML file)"


def test_dev_zero_as_a_demand_is_refused_at_once():
    done = cli("mig", "pack", "--demand", "/dev/zero", timeout=30)
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "/dev/zero:1: not a regular file (a FIFO, device or directory); give a file",
    )


def test_a_file_over_the_size_limit_is_refused_with_the_limit(tmp_path: Path):
    big = tmp_path / "big.yaml"
    big.write_text("config:\n" + "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    _, diags = read_yaml(big)
    assert [d.message for d in diags] == [
        f"{big.stat().st_size} bytes; an input file holds at most {MAX_FILE_BYTES} bytes (1024 KiB)"
    ]


# -- what reaches the terminal -----------------------------------------------------------------------------


def test_line_numbers_and_brackets_from_input_are_printed_as_they_are(tmp_path: Path):
    path = tmp_path / "Pulumi.dev-westeurope.yaml"
    path.write_text(STACK.replace("gpufleet:region: westeurope", "gpufleet:region: ':100: [red]x[/red]'"))
    done = cli("validate", str(path))
    assert done.returncode == 1, done.stderr
    assert "region: ':100: [red]x[/red]' is not valid" in done.stdout  # not an emoji, not a style, no MarkupError


def test_markup_in_arguments_is_printed_as_it_is():
    done = cli("mig", "check", "A100[/red]", "1g.10gb")
    assert done.returncode == 1
    assert done.stderr.startswith("error: unknown GPU 'A100[/red]'; valid: ")
    done = cli("mig", "check", "A100-SXM4-80GB", ":100:")
    assert done.stdout.startswith("does not fit: ':100:' is not a MIG profile of A100-SXM4-80GB")


def test_escape_sequences_from_input_never_reach_the_terminal(tmp_path: Path):
    path = tmp_path / "Pulumi.dev\x1b[2J-westeurope.yaml"
    # YAML's escapes \e and \a: an OSC sequence that would retitle the terminal, in a key the error names
    path.write_text(STACK.replace("  gpufleet:aks:", '  gpufleet:aks:\n    "\\e]0;owned\\a": 1', 1))
    done = cli("validate", str(path))
    assert done.returncode == 1
    assert "\x1b" not in done.stdout + done.stderr
    assert "Pulumi.dev\\x1b[2J-westeurope.yaml" in done.stdout
    assert "\\x1b]0;owned\\x07" in done.stdout


def test_a_count_of_superscript_two_is_a_usage_error():
    done = cli("mig", "check", "A100-SXM4-80GB", "1g.10gb=²")
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "error: '1g.10gb=²': write PROFILE or PROFILE=COUNT, e.g. 1g.10gb=2",
    )


# -- MIG demands ------------------------------------------------------------------------------------------------


def test_a_demand_beyond_any_fleet_is_refused_with_why(tmp_path: Path):
    demand = tmp_path / "demand.yaml"
    demand.write_text("demand:\n  - gpu: H100-SXM5-80GB\n    profiles: {1g.10gb: 1000000000}\n")
    loaded = load_demand(demand, load_catalog())
    assert [str(d) for d in loaded.diagnostics] == [
        f"{demand}:2: demand[0]: the demand for H100-SXM5-80GB needs at least 142,857,143 GPUs; a demand may need at"
        f" most {MAX_FLEET_GPUS:,} GPUs of one model (the size of the largest fleets): check the counts"
    ]


def test_the_largest_fleet_a_demand_may_need_still_packs(tmp_path: Path):
    demand = tmp_path / "demand.yaml"
    demand.write_text(f"demand:\n  - gpu: H100-SXM5-80GB\n    profiles: {{1g.10gb: {7 * MAX_FLEET_GPUS}}}\n")
    assert load_demand(demand, load_catalog()).ok


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (
            "/nonexistent-gpufleet/x.yaml",
            "error: --output /nonexistent-gpufleet/x.yaml: directory /nonexistent-gpufleet does not exist",
        ),
        ("tests", "error: --output tests: is a directory; name the file to write"),
    ],
)
def test_pack_output_into_a_missing_directory_or_onto_a_directory_is_a_usage_error(output: str, message: str):
    done = cli("mig", "pack", "--demand", "examples/mig-demand.yaml", "-o", output)
    assert (done.returncode, done.stderr.strip()) == (2, message)


# -- found by tests/unit/test_fuzz.py ----------------------------------------------------------------------------


def test_an_impossible_date_is_an_error_at_its_line():
    text = "config:\n  gpufleet:stage: dev\n  gpufleet:region: 2026-13-45\n"
    assert errors(text) == [
        "s.yaml:3: YAML: '2026-13-45' is not a valid date or time (YYYY-MM-DD, month 1-12, a day the month has)"
    ]


def test_a_key_holding_a_nested_mapping_is_an_error_at_its_line():
    text = "config:\n  gpufleet:stage: dev\n  ? {a: {b: 1}}\n  : x\n"
    assert errors(text) == ["s.yaml:3: YAML: a key that holds a mapping or list is not supported; keys are names"]


def test_a_key_holding_a_flat_mapping_is_an_unknown_key():
    text = "demand:\n  - gpu: T4\n    profiles: {1g.5gb: 1}\n    ? {a: 1}\n    : x\n"
    assert any("unknown key '{\"a\": 1}'" in e for e in errors_of_demand(text))


def errors_of_demand(text: str) -> list[str]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "demand.yaml"
        path.write_text(text)
        return [str(d) for d in load_demand(path, load_catalog()).diagnostics]


def test_a_count_of_thousands_of_digits_is_a_usage_error():
    done = cli("mig", "check", "A100-SXM4-80GB", "1g.10gb=" + "9" * 5000)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: '1g.10gb=99999999999999999999999999999999'...: a count of at most 6 digits (one GPU holds at most 7"
        " instances)"
    )


def test_thousands_of_open_brackets_are_refused_before_the_parser_runs(monkeypatch: pytest.MonkeyPatch):
    # ruamel's scanner slows with each open flow collection: 6,000 took 3 s before its recursion gave up (the fuzz
    # test's time limit found it); the depth scan stops at the limit instead
    import gpufleet.common.yamldoc

    def no_parser(_text: str) -> None:
        raise AssertionError("parsed")

    monkeypatch.setattr(gpufleet.common.yamldoc, "parse_yaml", no_parser)
    text = "config:\n  gpufleet:stage: " + "[" * 6000 + "\n"
    assert errors(text) == [f"s.yaml:2: YAML: nested deeper than {MAX_DEPTH} levels"]


@pytest.mark.parametrize("line", ['{"time": ' + "9" * 5000 + "}", "[" * 5000 + "]" * 5000])
def test_a_ledger_line_python_cannot_read_is_a_ledger_error_naming_it(tmp_path: Path, line: str):
    from gpufleet.fleet.promote_ledger import LedgerError, _entry

    with pytest.raises(LedgerError, match=r"^promotion-ledger.jsonl:3: not a ledger entry \(too large or too deeply"):
        _entry("promotion-ledger.jsonl", 3, line)


def test_a_lab_error_is_printed_as_it_is(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    # libvirt's and QEMU's messages carry brackets ("[/x]" crashed rich) and may carry terminal codes
    import gpufleet.cli.lab
    from gpufleet.cli import main
    from gpufleet.lab import LabError

    class Broken:
        def up(self, **_kwargs: object) -> None:
            raise LabError("domain [/lab-0] failed: \x1b[31mno KVM")

    monkeypatch.setattr(gpufleet.cli.lab, "_lab", lambda *_a, **_k: Broken())
    with pytest.raises(SystemExit) as exit_:
        main(["lab", "up", "--root", str(REPO)])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip() == "lab up failed: domain [/lab-0] failed: \\x1b[31mno KVM"


def test_a_forced_promotions_reason_cannot_drive_the_terminal(capsys: pytest.CaptureFixture[str]):
    # --reason is free text kept in the ledger; promote status prints it back
    from types import SimpleNamespace

    from gpufleet.cli.common import out
    from gpufleet.cli.promote import _status_cell

    forced = SimpleNamespace(forced=("order",), source="hotfix-westeurope", reason="\x1b[2Jgone [b]x[/b]")
    row = SimpleNamespace(verified=None, next_from=None, next_state="up to date", wave=1, release="abc", forced=forced)
    out.print(_status_cell(row))
    printed = capsys.readouterr().out
    assert "\x1b" not in printed
    assert "forced from hotfix-westeurope (order): \\x1b[2Jgone [b]x[/b]" in printed
