"""Entry point of ``pulumi up`` / ``pulumi preview`` (Pulumi.yaml: ``main: infra/``)."""

import sys
from pathlib import Path

# Pulumi runs this file with infra/ as the working module path: make the repository root importable so the
# program is the package `infra` (the same code the tests import).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.program import main

main()
