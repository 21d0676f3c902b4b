"""``make fuzz``: the fuzz test (tests/unit/test_fuzz.py) with fresh random seeds, a batch of seeds per pytest run.

Prints the seeds before it starts and each batch's result as it ends; a failing input is printed by the test with its
seed, kind and index and the command that replays it (``GPUFLEET_FUZZ_SEED=N python -m pytest tests/unit/test_fuzz.py
-k TEST``). A seed that finds a defect belongs in the test's REGRESSION_CASES once the defect is fixed.

Usage: python scripts/fuzz.py [SEEDS] [--workers N] [--batch N] [--seeds A,B,...]
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The fuzz test with fresh random seeds.")
    parser.add_argument("seeds", nargs="?", type=int, default=10, help="how many fresh seeds (default 10)")
    parser.add_argument("--seeds", dest="given", help="these seeds instead (comma-separated), e.g. to replay a run")
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1), help="pytest-xdist workers")
    parser.add_argument("--batch", type=int, default=10, help="seeds per pytest run (default 10)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.batch < 1 or args.workers < 1:
        parser.error("SEEDS, --batch and --workers must be at least 1")
    seeds = (
        [int(s) for s in args.given.split(",")] if args.given else [secrets.randbelow(10**9) for _ in range(args.seeds)]
    )
    print(f"fuzz: {len(seeds)} seed(s): {', '.join(map(str, seeds))}", flush=True)
    failed: list[list[int]] = []
    started = time.monotonic()
    for first in range(0, len(seeds), args.batch):
        batch = seeds[first : first + args.batch]
        t0 = time.monotonic()
        pytest = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(args.workers), "--dist", "load"]
        proc = subprocess.run(
            [sys.executable, *pytest, "tests/unit/test_fuzz.py", "-k", "never_escape"],
            cwd=REPO,
            env={**os.environ, "GPUFLEET_FUZZ_SEEDS": ",".join(map(str, batch))},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        took = time.monotonic() - t0
        where = f"seeds {first + 1}-{first + len(batch)} of {len(seeds)}"
        if proc.returncode == 0:
            print(f"{where}: ok ({took:.0f} s)", flush=True)
            continue
        failed.append(batch)
        print(f"{where}: FAILED ({took:.0f} s): {', '.join(map(str, batch))}", flush=True)
        print("\n".join(line for line in proc.stdout.splitlines() if line.startswith(("E ", "FAILED", "ERROR"))))
    total = time.monotonic() - started
    if failed:
        print(f"fuzz: failures in {len(failed)} batch(es) of {len(seeds)} seeds ({total / 60:.1f} min)")
        return 1
    print(f"fuzz: {len(seeds)} seed(s), no failure ({total / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
