"""Waiting for a lab VM's SSH: a boot whose serial console still grows is slow, not stuck (gpufleet.lab.ssh.wait)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.lab import ssh


class Clock:
    """time.monotonic and time.sleep of the ssh module: each sleep advances the clock and runs the VM's step."""

    def __init__(self, step=lambda now: None) -> None:
        self.now = 0.0
        self.step = step

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.step(self.now)


def boot(monkeypatch: pytest.MonkeyPatch, console: Path, prints_until: float, answers_at: float | None) -> Clock:
    """A VM that prints a console line every 20 s until ``prints_until`` and answers SSH at ``answers_at``."""

    def step(now: float) -> None:
        if now <= prints_until and int(now) % 20 == 0:
            with console.open("a") as f:
                f.write(f"[{now:8.1f}] systemd[1]: Starting something...\n")

    clock = Clock(step)
    monkeypatch.setattr(ssh.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(ssh.time, "sleep", clock.sleep)
    monkeypatch.setattr(ssh, "reachable", lambda key, port: answers_at is not None and clock.now >= answers_at)
    return clock


def test_a_boot_slower_than_the_timeout_is_waited_for_while_its_console_grows(monkeypatch, tmp_path: Path):
    console = tmp_path / "serial.log"
    boot(monkeypatch, console, prints_until=700, answers_at=720)
    assert ssh.wait(Path("key"), 22300, 420, console=console) == pytest.approx(720, abs=2)


def test_a_silent_console_ends_the_wait_after_the_timeout_and_says_so(monkeypatch, tmp_path: Path):
    console = tmp_path / "serial.log"
    boot(monkeypatch, console, prints_until=100, answers_at=None)
    with pytest.raises(
        TimeoutError, match=r"no SSH on 127\.0\.0\.1:22300 after 42\d s; its console silent for 3\d\d s"
    ):
        ssh.wait(Path("key"), 22300, 420, console=console)


def test_a_console_that_never_stops_is_given_at_most_four_times_the_timeout(monkeypatch, tmp_path: Path):
    console = tmp_path / "serial.log"
    clock = boot(monkeypatch, console, prints_until=10_000, answers_at=None)
    with pytest.raises(TimeoutError, match=r"no SSH on 127\.0\.0\.1:22300 after 16\d\d s"):
        ssh.wait(Path("key"), 22300, 420, console=console)
    assert 1680 <= clock.now <= 1700


def test_without_a_console_the_timeout_is_the_limit(monkeypatch, tmp_path: Path):
    clock = boot(monkeypatch, tmp_path / "serial.log", prints_until=10_000, answers_at=None)
    with pytest.raises(TimeoutError, match=r"after 42\d s$"):
        ssh.wait(Path("key"), 22300, 420)
    assert clock.now < 430


def test_the_console_tail_of_a_stuck_boot_names_its_last_lines(tmp_path: Path):
    console = tmp_path / "serial.log"
    console.write_text("".join(f"line {i}\n" for i in range(40)))
    assert ssh.console_tail(console, 3) == "line 37\nline 38\nline 39"
    assert ssh.console_tail(tmp_path / "missing.log").startswith("(no console log: ")
