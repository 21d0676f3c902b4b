"""The Pulumi program evaluated under mocks for the largest example stack (most GPU pools), as a whole process:
Python start, imports (pulumi, the azure-native services used, pulumi_kubernetes) and every registration
(target: under 3 s)."""

from __future__ import annotations

import statistics
import sys

from benchmarks.common import REPO, Figure, time_process

PROGRAM = "import sys; from tests.infra.harness import run_program; run_program(sys.argv[1])"


def largest_example() -> str:
    from gpufleet.spec.files import stack_files
    from gpufleet.spec.load import load_stack, stack_name_from_file

    sizes = {}
    for path in stack_files(REPO):
        stack = load_stack(REPO / path).stack
        if stack is not None and stack.aks is not None:
            sizes[stack_name_from_file(path)] = len(stack.aks.gpu_pools)
    return max(sorted(sizes), key=sizes.__getitem__)


def run() -> list[Figure]:
    stack = largest_example()
    times = time_process([sys.executable, "-c", PROGRAM, stack], runs=5)
    return [
        Figure(f"pulumi program under mocks, {stack}, whole process (median)", statistics.median(times), "s", 3.0),
        Figure(f"pulumi program under mocks, {stack}, whole process (max of 5)", max(times), "s"),
    ]
