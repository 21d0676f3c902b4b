"""Every shell block in README.md and docs/*.md either runs here, or says why it cannot: the docs cannot rot.

The line before a ```sh block is one of

- ``<!-- runnable: KEY -->``: each line is a command, run in a copy of the repository's files with the project's
  virtualenv on PATH; each must exit 0 (or N where its comment says ``exits N``), and KEY must appear in what the
  block printed;
- ``<!-- runnable -->`` on a transcript: lines starting with ``$ `` are commands, the lines under one are output
  that must appear in what it printed (an excerpt may leave lines out, never change one);
- ``<!-- not runnable: REASON -->``: needs what this machine has not (Azure, a lab VM, a registry), and REASON says
  where it is tested instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import charts as test_charts
from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(sh|bash)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!-- (runnable|not runnable)(?:: (.+?))? -->")
EXITS = re.compile(r"#.*\bexits (\d+)\b")


@dataclass(frozen=True)
class Block:
    where: str  # file:line
    kind: str | None  # runnable, not runnable, or None (unmarked)
    note: str  # the key line, or the reason
    body: str

    def commands(self) -> list[tuple[str, list[str]]]:
        """(command, expected output lines) in order."""
        lines = self.body.splitlines()
        if any(line.startswith("$ ") for line in lines):
            steps: list[tuple[str, list[str]]] = []
            for line in lines:
                if line.startswith("$ "):
                    steps.append((line[2:], []))
                elif steps and line.strip():
                    steps[-1][1].append(line.strip())
            return steps
        return [(line, []) for line in lines if line.strip() and not line.startswith("source .venv/bin/activate")]


def blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for fence in FENCE.finditer(text):
            before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.fullmatch(before.strip())
            line = text[: fence.start()].count("\n") + 1
            found.append(
                Block(
                    f"{doc.relative_to(REPO)}:{line}",
                    mark.group(1) if mark else None,
                    (mark.group(2) or "") if mark else "",
                    fence.group(2),
                )
            )
    return found


RUNNABLE = [b for b in blocks() if b.kind == "runnable"]


def test_every_shell_block_is_runnable_or_says_why_not():
    unmarked = [b.where for b in blocks() if b.kind is None]
    assert not unmarked, f"mark these blocks <!-- runnable: KEY --> or <!-- not runnable: REASON -->: {unmarked}"
    for b in blocks():
        if b.kind == "not runnable":
            assert len(b.note) > 10, f"{b.where}: say why it cannot run and where it is tested"
        elif not any(expected for _, expected in b.commands()):
            assert b.note, f"{b.where}: a runnable block names a line its output must contain"
    assert len(RUNNABLE) >= 5  # the check itself sees the docs' blocks


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's tracked files, committed in a git repository of their own (what a fresh clone has: promotion
    refuses without one), with the project's virtualenv."""
    root = tmp_path_factory.mktemp("docs") / "gpufleet"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, stdin=subprocess.DEVNULL
    ).stdout.decode()
    for name in filter(None, files.split("\0")):
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    identity = ["-c", "user.name=gpufleet docs", "-c", "user.email=docs@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "a fresh clone"]):
        subprocess.run(["git", *args], cwd=root, capture_output=True, check=True, stdin=subprocess.DEVNULL, timeout=120)
    (root / ".venv").symlink_to(Path(sys.executable).parent.parent)
    return root


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_runnable_docs_commands(block: Block, workdir: Path):
    charts_dir = test_charts._charts_dir()
    if "gpufleet render" in block.body and charts_dir is None:
        pytest.skip("no pinned charts here (tests/charts.py says where they are looked for)")
    env = {**os.environ, "PATH": f"{workdir / '.venv/bin'}:{os.environ['PATH']}", "NO_COLOR": "1", "COLUMNS": "200"}
    if charts_dir is not None:
        env["GPUFLEET_CHARTS_DIR"] = str(charts_dir)
    printed = []
    for command, expected in block.commands():
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        output = proc.stdout + proc.stderr
        wanted = int(m.group(1)) if (m := EXITS.search(command)) else 0
        assert proc.returncode == wanted, f"{block.where}: `{command}` exited {proc.returncode}:\n{output[-3000:]}"
        lines = {line.strip() for line in output.splitlines()}
        missing = [line for line in expected if line not in lines]
        assert not missing, f"{block.where}: `{command}` no longer prints {missing}:\n{output[-3000:]}"
        printed.append(output)
    assert block.note in "".join(printed), f"{block.where}: the output has no {block.note!r}"
