"""Run a playbook with the project's ansible.cfg, stream its progress, keep its log, parse its recap."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.lab.config import lab_dir

RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)"
)


@dataclass(frozen=True)
class TaskRun:
    """A task or notified handler as the play ran it: its time until the next began, and whether it changed a host."""

    name: str
    seconds: float
    changed: bool = False
    handler: bool = False


@dataclass
class PlaybookResult:
    rc: int
    recap: dict[str, dict[str, int]]
    seconds: float
    log: Path
    output: str
    tasks: list[TaskRun] = field(default_factory=list)  # in the order they ran, handlers included

    @property
    def stopped(self) -> str:
        """The block the gpufleet_summary callback ends the output with when a host did not finish the play (one
        line per such host: where it stopped and why); empty when every host finished."""
        recap = self.output.rpartition("PLAY RECAP")[2]
        head = recap.find("\ngpufleet: ")
        if head < 0:
            return ""
        block = []
        for line in recap[head + 1 :].splitlines():
            if block and not line.startswith(("  ", "Re-run ")):
                break
            block.append(line)
        return "\n".join(block)

    def seconds_of(self, word: str, changed_only: bool = False) -> float:
        """Seconds spent in tasks whose name contains ``word`` (case-insensitive), e.g. the reboots.

        ``changed_only`` counts only the tasks that changed a host: a skipped task named "Reboot ..." still takes
        a moment to evaluate its condition, and that is not a reboot."""
        return sum(t.seconds for t in self.tasks if word.lower() in t.name.lower() and (t.changed or not changed_only))


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    recap = {}
    for line in output.splitlines():
        m = RECAP.match(line.strip())
        if m:
            recap[m["host"]] = {k: int(v) for k, v in m.groupdict().items() if k != "host"}
    return recap


def run_playbook(
    playbook: Path,
    inventory: Path,
    extra_vars: dict[str, Any] | None = None,
    check: bool = False,
    limit: str | None = None,
    progress: Callable[[str], None] | None = None,
    repo: Path | None = None,
    strategy: str | None = None,
) -> PlaybookResult:
    """``strategy`` overrides ansible.cfg's (``linear``: Ansible's own, without Mitogen)."""
    if repo is None:  # the project root (its ansible.cfg), also for playbooks under ansible/playbooks/
        from gpufleet.spec.files import find_project_root

        repo = find_project_root(playbook.resolve().parent)
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(repo / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
    }
    if strategy:
        env["ANSIBLE_STRATEGY"] = strategy
    cmd = [str(bin_dir / "ansible-playbook"), "-i", str(inventory), str(playbook)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if check:
        cmd += ["--check", "--diff"]
    if limit:
        cmd += ["--limit", limit]
    logs = lab_dir() / "logs"
    logs.mkdir(exist_ok=True)
    log = logs / f"{time.strftime('%Y%m%d-%H%M%S')}-{playbook.stem}{'-check' if check else ''}.log"
    started = time.monotonic()
    lines: list[str] = []
    tasks: list[TaskRun] = []
    task, handler, changed, task_started = "", False, False, started
    with log.open("w") as f:
        # no stdin: ansible refuses a non-blocking one (e.g. under nohup), and a playbook run never prompts
        proc = subprocess.Popen(
            cmd,
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            lines.append(line)
            header = line.strip().rstrip("*").strip()  # "TASK [name]", "RUNNING HANDLER [name]", "PLAY RECAP"
            if line.startswith(("TASK [", "RUNNING HANDLER [", "PLAY RECAP")):  # a task ends where the next starts
                now = time.monotonic()
                if task:
                    tasks.append(TaskRun(task, now - task_started, changed, handler))
                handler = line.startswith("RUNNING HANDLER [")
                task = header.partition("[")[2].removesuffix("]") if not line.startswith("PLAY RECAP") else ""
                changed, task_started = False, now
            elif line.startswith("changed: ["):
                changed = True
            if progress and line.startswith(("TASK [", "RUNNING HANDLER [", "PLAY [", "fatal:")):
                progress(header)
        rc = proc.wait()
        f.write(_slowest(tasks))
    output = "".join(lines)
    return PlaybookResult(rc, parse_recap(output), time.monotonic() - started, log, output, tasks)


def _slowest(tasks: list[TaskRun], count: int = 15) -> str:
    """The log's last lines: the run's slowest tasks, where a lab run's time went (not part of Ansible's output)."""
    if not tasks:
        return ""
    rows = sorted(tasks, key=lambda t: t.seconds, reverse=True)[:count]
    lines = [f"{t.seconds:8.1f}  {'handler ' if t.handler else ''}{t.name}" for t in rows]
    return f"\n# gpufleet: the {len(rows)} slowest tasks (seconds until the next began)\n" + "\n".join(lines) + "\n"
