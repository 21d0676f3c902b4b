"""After a play, one line per host that did not finish it: where it stopped and why, in words.

Ansible's own record of a host lost mid-play is a ``fatal: [...]: UNREACHABLE! => {...}`` line somewhere above the
recap, and under Mitogen its message asks the reader to file a bug; a host whose SSH connection dropped or that
rebooted mid-task reads the same. This callback (ansible.cfg enables it beside the default output) ends such a run
with a short block under the recap::

    gpufleet: 1 of 2 host(s) did not finish the play; the others were not held up:
      lab-1  unreachable at task "hugepages : Allocate ...": the connection to the host was lost during the task ...
    Re-run the play once the host answers: each role changes only what is still undone.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: gpufleet_summary
type: aggregate
short_description: One line per host that did not finish the play, with where it stopped and why
description:
  - After the recap, names each host that failed or became unreachable, the task where it stopped and the reason
    in one line (a connection lost mid-task, a refused connection, the task's own message), and says that the
    other hosts went on and that a re-run picks up what is left.
  - Prints nothing when every host finished the play.
requirements:
  - enabled in ansible.cfg (callbacks_enabled)
"""

MAX_REASON = 240
# The controller's words for a connection that went away while a task ran on the host: Mitogen's (as a failed or an
# unreachable task), then ssh's. A reboot, a power-off, a restarted sshd and a dropped network all read the same.
# Mitogen says it three ways, by where the loss met the call: during it ("the respondent Context has disconnected",
# wrapped in "Mitogen was disconnected ..." when the host counts as unreachable), or as the next call was routed to
# the host's interpreter that is gone ("no route to <context id>, my ID is 0").
LOST = re.compile(
    r"Mitogen was disconnected from the remote environment|the respondent Context has disconnected"
    r"|no route to \S+, my ID is \d+|Channel closed by remote end"
    r"|[^\n]*(?:closed by remote host|Connection reset by peer|Broken pipe|Shared connection to \S+ closed)[^\n]*"
)
LOST_TEXT = (
    "the connection to the host was lost during the task (the host rebooted, powered off, or its SSH connection or "
    "network dropped)"
)


def reason(result: dict[str, Any], unreachable: bool) -> tuple[str, bool]:
    """A failed or unreachable task result's message as one line, and whether the host was lost or never reached
    (a re-run once it answers is the way on) rather than a task failing on it."""
    msg = str(result.get("msg") or result.get("module_stderr") or result.get("stderr") or "").strip()
    lost = LOST.search(msg)
    if lost:
        words = lost.group(0).strip().removeprefix("Task failed: ").rstrip(".")
        if words.startswith("Mitogen was disconnected"):
            original = re.search(r"Original error was: ([^\n]*)", msg)
            words = original.group(1).strip().rstrip(".") if original else words
        return _short(f"{LOST_TEXT} [{words}]"), True
    if unreachable:
        # ssh's own words: after Ansible's "Failed to connect ... via ssh:" or Mitogen's "EOF on stream; last 100
        # lines received:", the last line is ssh's reason (connection refused, timed out, permission denied)
        for marker in ("Failed to connect to the host via ssh:", "lines received:"):
            if marker in msg:
                said = [line.strip() for line in msg.split(marker, 1)[1].splitlines() if line.strip()]
                return _short("no SSH connection to the host: " + (said[-1] if said else "no reason given")), True
    lines = [line.strip() for line in msg.splitlines() if line.strip()]
    return _short(lines[0] if lines else "no message"), unreachable


def _task(result: Any) -> str:
    """The task's name as its TASK [...] header shows it ("role : name" for a role's task)."""
    return result._task.get_name()


def _short(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._stopped: dict[str, tuple[str, str, str, bool]] = {}  # host: (kind, task, reason, lost), the last seen

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if not ignore_errors:
            self._stopped[result._host.get_name()] = ("failed", _task(result), *reason(result._result, False))

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._stopped[result._host.get_name()] = ("unreachable", _task(result), *reason(result._result, True))

    def v2_playbook_on_stats(self, stats: Any) -> None:
        hosts = sorted(stats.processed)
        # a host counts once it failed or went unreachable and was not rescued: the recap's own figures
        stopped = [h for h in hosts if h in self._stopped and (stats.failures.get(h) or stats.dark.get(h))]
        if not stopped:
            return
        width = max(len(h) for h in stopped)
        others = len(hosts) - len(stopped)
        head = f"gpufleet: {len(stopped)} of {len(hosts)} host(s) did not finish the play"
        lines = [head + ("; the others were not held up:" if others else ":")]
        for host in stopped:
            kind, task, why, _lost = self._stopped[host]
            lines.append(f'  {host:<{width}}  {kind} at task "{task}": {why}')
        if any(self._stopped[h][3] for h in stopped):
            lines.append("Re-run the play once the host answers: each role changes only what is still undone.")
        self._display.display("\n".join(lines), stderr=False)
