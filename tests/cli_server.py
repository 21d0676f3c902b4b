"""``gpufleet ARGS`` in a process of its own, forked from one that has imported gpufleet already (a fork server).

A new Python that imports gpufleet's CLI spends about 0.4 CPU-seconds before the command starts; most commands the
tests run take a tenth of that, so starting ``python -m gpufleet`` for each of the hundreds of command lines they run
was most of their time. Tests that check what a command does (its exit status, output and files, not how Python
starts it: tests/unit/cli/test_cli.py keeps those) run it here instead.

The server (``python -m tests.cli_server``, one per test process) imports every gpufleet module and parses the
packaged catalogs once, without a terminal and without COLUMNS, as a command under a pipe would. For each request it
forks a child that takes the request's working directory, environment (it replaces os.environ, as subprocess's
``env=`` does) and clock, stdin from /dev/null and stdout and stderr to files, runs ``gpufleet.cli.main`` and exits
with its status. Each command still runs in a process of its own, and nothing one leaves behind (a cache, a patched
clock) reaches the next.
"""

from __future__ import annotations

import atexit
import datetime as dt
import importlib
import json
import os
import pkgutil
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _child(request: dict, out: str, err: str) -> None:
    """Run one command line in this (forked) process; never returns."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if request["now"]:
            import gpufleet.fleet.promote_ledger

            now = dt.datetime.fromisoformat(request["now"])
            gpufleet.fleet.promote_ledger.now_utc = lambda: now
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
            os.dup2(os.open(path, flags), fd)
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 (the process ends here)
        from gpufleet.cli import main

        try:
            main(request["argv"])
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
    except BaseException:  # what Python prints for an exception that escapes: a traceback, exit status 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def warm() -> None:
    """What every child starts with: every gpufleet module imported (commands import some when they run) and the
    packaged catalogs parsed (once per process, and the same for every command)."""
    import gpufleet
    from gpufleet.catalog import load_catalog
    from gpufleet.catalog.llm import load_models

    for module in pkgutil.walk_packages(gpufleet.__path__, "gpufleet."):
        if not module.name.endswith(".__main__"):  # that one runs the CLI
            importlib.import_module(module.name)
    load_catalog()
    load_models()


def serve() -> None:
    """Answer each request line on stdin (JSON: argv, cwd, env, now) with one line (JSON: returncode, stdout,
    stderr)."""
    warm()
    with tempfile.TemporaryDirectory(prefix="gpufleet-cli-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        for line in sys.stdin:
            for path in (out, err):
                Path(path).write_bytes(b"")
            pid = os.fork()
            if pid == 0:
                _child(json.loads(line), out, err)
            _, status = os.waitpid(pid, 0)
            answer = {"returncode": os.waitstatus_to_exitcode(status)}
            for name, path in (("stdout", out), ("stderr", err)):
                answer[name] = Path(path).read_bytes().decode(errors="replace")
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


class CliServer:
    """The client: one server process, started on first use, stopped at exit (or killed on a timeout)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_server"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,  # the requests
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: a timeout kills the server and the command
        )
        atexit.register(self.stop)
        return self.proc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        self.proc = None

    def run(
        self, args: list[str], cwd: Path, env: Mapping[str, str], now: dt.datetime | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``gpufleet ARGS`` in ``cwd`` with exactly the environment ``env`` (and ``now`` as the promotion
        ledger's clock); never raising on its exit status."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        request = {"argv": args, "cwd": str(cwd), "env": dict(env), "now": now.isoformat() if now else None}
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        if not select.select([proc.stdout], [], [], timeout)[0]:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            self.proc = None
            raise subprocess.TimeoutExpired(["gpufleet", *args], timeout)
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the gpufleet CLI server ended (exit {proc.wait()}) running gpufleet {args}")
        answer = json.loads(line)
        return subprocess.CompletedProcess(
            ["gpufleet", *args], answer["returncode"], answer["stdout"], answer["stderr"]
        )


SERVER = CliServer()


if __name__ == "__main__":
    serve()
