"""`make bench`: performance figures, each against its target. Exits 1 if a figure misses its target.

Each bench_*.py module here has `run() -> list[Figure]`; this runner prints them as one table.
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
    for mod in sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_")):
        print(f"==> {mod}", flush=True)
        figures.extend(importlib.import_module(f"benchmarks.{mod}").run())
    width = max(len(f.name) for f in figures)
    print()
    print(f"{'figure'.ljust(width)}  {'value':>12}  target")
    missed = 0
    for f in figures:
        status = "" if f.target is None else ("ok" if f.met else "MISSED")
        missed += f.target is not None and not f.met
        target = "" if f.target is None else f"< {f.target:g} {f.unit}"
        print(f"{f.name.ljust(width)}  {f.value:>9.3f} {f.unit:<2}  {target} {status}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
