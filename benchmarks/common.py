"""Shared helpers for the benchmarks."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    target: float | None = None

    @property
    def met(self) -> bool:
        return self.target is None or self.value < self.target


def time_process(argv: Sequence[str], runs: int = 7) -> list[float]:
    """Wall time of a whole process, `runs` times (the first run warms the file cache and is dropped)."""
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(argv, cwd=REPO, check=True, capture_output=True, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times[1:]


def time_call(fn: Callable[[], object], runs: int = 20) -> float:
    """Median seconds of an in-process call."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
