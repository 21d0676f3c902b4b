"""`make bench`: performance figures, each against its target. Exits 1 if a figure misses its target (or a
benchmark cannot run).

Each bench_*.py module here has `run() -> list[Figure]`; this runner prints them as one table.
`python benchmarks/run.py mig topology` runs only those (names without `bench_`); the lab one takes ~15 minutes.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Figure


def main() -> int:
    import benchmarks

    figures: list[Figure] = []
    failed: list[str] = []
    only = set(sys.argv[1:])
    for mod in sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_")):
        if only and mod.removeprefix("bench_") not in only:
            continue
        print(f"==> {mod}", flush=True)
        try:
            figures.extend(importlib.import_module(f"benchmarks.{mod}").run())
        except Exception as exc:  # a benchmark that cannot run here is reported, the others still are
            failed.append(f"{mod}: {type(exc).__name__}: {exc}")
            print(f"   FAILED: {exc}", flush=True)
    width = max((len(f.name) for f in figures), default=len("figure"))
    print()
    print(f"{'figure'.ljust(width)}  {'value':>12}  target")
    missed = 0
    for f in figures:
        status = "" if f.target is None else ("ok" if f.met else "MISSED")
        missed += f.target is not None and not f.met
        target = "" if f.target is None else f"< {f.target:g} {f.unit}"
        print(f"{f.name.ljust(width)}  {f.value:>9.3f} {f.unit:<2}  {target} {status}")
    for line in failed:
        print(f"could not measure {line}")
    return 1 if missed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
