"""The promotion ledger, ``promotion-ledger.jsonl``: one JSON object per line for every deployment, verification and
promotion, appended and never rewritten, and chained by hashes so that an edited, removed or inserted line shows.

- **Entries** are read into :class:`Entry` (typed; a line that is not one is a :class:`LedgerError` naming
  ``file:line``), so nothing downstream parses a time or looks up a key.
- **The chain**: every entry this version writes carries ``prev``, the hash of the line before it (null on the first
  line), and ``hash``, the SHA-256 of its canonical form (:func:`entry_hash`: ``json.dumps(sort_keys=True,
  separators=(",", ":"))`` of the entry without ``hash``). Lines before the first hashed one (a ledger from before
  the chain) are read as they are and hashed the same way; the first hashed line anchors the chain, and a line
  without a hash after it is a break. Readers and writers refuse a broken chain, naming the line.
- **Writing** (:meth:`Ledger.locked`): an exclusive ``flock`` on the ledger file held while the caller reads the
  ledger, decides and appends, so two runs never decide on the same state (no duplicate promotion); each entry is
  one ``write`` of one line, then ``fsync``; a write that fails half-way is truncated away.
- **A torn last line** (a write cut off before its newline, by a crash or a full disk) is refused by readers and
  writers alike; :meth:`Ledger.repair` (``gpufleet promote repair``) completes it when it is a whole entry that
  fits the chain, and removes it otherwise.

File I/O only here and in :class:`Ledger`; :func:`parse_ledger` and :func:`chain_break` are pure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from gpufleet.common.atomic import fsync_dir, step

LEDGER_FILE = "promotion-ledger.jsonl"
Kind = Literal["deploy", "verify", "promote"]
# started: a promotion's intent, written (and fsync'ed) before the stack file changes; its outcome follows as ok, or as
# failed when it was undone (docs/reliability.md)
Result = Literal["ok", "failed", "started"]
REPAIR_HINT = "run 'gpufleet promote repair'"
RESTORE_HINT = f"restore {LEDGER_FILE} from git (git log -p -- {LEDGER_FILE} shows each change)"


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> dt.datetime:
    """An ISO 8601 time; without a zone it is UTC. ValueError when it is none."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


class LedgerError(ValueError):
    """The ledger cannot be used as it is: a line that is no entry, a broken chain, a torn last line. The message
    names ``file:line`` and what to do."""


def entry_hash(data: dict[str, Any]) -> str:
    """SHA-256 of an entry's canonical form: its JSON with sorted keys and no spaces, without its own ``hash``."""
    body = {k: v for k, v in data.items() if k != "hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _line(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


@dataclass(frozen=True)
class Entry:
    """One ledger line. ``time`` is when it happened (``--at``), ``recorded`` when it was written (None on lines
    from before the chain); ``data`` is the line as written (``from``, ``pins``, ``forced``, ``reason``, ``note``,
    ``commit``, ``prev``, ``hash``...)."""

    line: int
    time: dt.datetime
    kind: Kind
    stack: str
    release: str
    result: Result
    recorded: dt.datetime | None
    data: dict[str, Any] = field(repr=False, compare=False)

    @property
    def since(self) -> dt.datetime:
        """Since when the entry is known: the later of ``time`` and ``recorded`` (a backdated record counts from
        when it was written)."""
        return max(self.time, self.recorded) if self.recorded else self.time

    @property
    def source(self) -> str | None:
        return self.data.get("from")

    @property
    def forced(self) -> tuple[str, ...]:
        return tuple(self.data.get("forced") or ())

    @property
    def reason(self) -> str | None:
        return self.data.get("reason")

    @property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """A verification recorded from a verify report: each host's ``{result, dcgm_level}`` (empty otherwise)."""
        return self.data.get("hosts") or {}


def _field_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a decoded line's fields, or None."""
    for key, allowed in (("kind", get_args(Kind)), ("result", get_args(Result))):
        if data.get(key) not in allowed:
            return f"{key}: {data.get(key)!r} is not one of {', '.join(allowed)}"
    if data["result"] == "started" and data["kind"] != "promote":
        return f"result: 'started' is a promotion's intent, not a {data['kind']}'s outcome"
    for key in ("stack", "release"):
        if not isinstance(data.get(key), str) or not data[key]:
            return f"{key}: expected a non-empty string, got {data.get(key)!r}"
    for key in ("time", "recorded"):
        if key == "time" or data.get(key) is not None:
            try:
                parse_time(data.get(key))  # type: ignore[arg-type]
            except (TypeError, ValueError, AttributeError):
                return f"{key}: {data.get(key)!r} is not an ISO 8601 time, e.g. 2026-11-20T14:00:00Z"
    forced = data.get("forced")
    if forced is not None and not (isinstance(forced, list) and all(isinstance(g, str) for g in forced)):
        return f"forced: expected a list of gate names, got {forced!r}"
    hosts = data.get("hosts")
    if hosts is not None and not (isinstance(hosts, dict) and all(isinstance(h, dict) for h in hosts.values())):
        return f"hosts: expected an object of hosts, got {hosts!r}"
    for key in ("reason", "from", "note", "commit", "prev", "hash", "block", "previous_block"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f"{key}: expected a string, got {data[key]!r}"
    return None


def _entry(path: str, n: int, text: str) -> Entry:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LedgerError(f"{path}:{n}: not JSON ({exc.msg}); {RESTORE_HINT}") from None
    except (ValueError, RecursionError):  # an integer of thousands of digits, nesting past Python's recursion limit
        raise LedgerError(f"{path}:{n}: not a ledger entry (too large or too deeply nested); {RESTORE_HINT}") from None
    if not isinstance(data, dict):
        raise LedgerError(f"{path}:{n}: not a JSON object; {RESTORE_HINT}")
    problem = _field_problem(data)
    if problem:
        raise LedgerError(f"{path}:{n}: {problem}; {RESTORE_HINT}")
    recorded = parse_time(data["recorded"]) if data.get("recorded") is not None else None
    return Entry(
        n, parse_time(data["time"]), data["kind"], data["stack"], data["release"], data["result"], recorded, data
    )


def chain_break(path: str, entries: Sequence[Entry]) -> str | None:
    """Where the hash chain breaks (``file:line: what``), or None when it holds."""
    anchor: int | None = None
    previous: Entry | None = None
    for e in entries:
        own = e.data.get("hash")
        if own is None:
            if anchor is not None:
                return f"{path}:{e.line}: an entry without a hash after the chain began (line {anchor})"
        else:
            if own != entry_hash(e.data):
                return f"{path}:{e.line}: the entry was changed after it was written (its hash does not match it)"
            expected = None if previous is None else previous.data.get("hash") or entry_hash(previous.data)
            if e.data.get("prev") != expected:
                before = "no line" if previous is None else f"line {previous.line}"
                return (
                    f"{path}:{e.line}: the chain breaks here: 'prev' is not the hash of {before} before it (a line was"
                    " changed, removed or inserted)"
                )
            anchor = anchor or e.line
        previous = e
    return None


def parse_ledger(path: str, data: bytes) -> list[Entry]:
    """The ledger's entries, checked: every line an entry, the last line whole, the chain unbroken."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        n = data[: exc.start].count(b"\n") + 1
        raise LedgerError(f"{path}:{n}: not UTF-8 text; {RESTORE_HINT}") from None
    lines = text.split("\n")
    if lines[-1]:
        raise LedgerError(
            f"{path}:{len(lines)}: the last line is incomplete (a write was cut off before its end): {REPAIR_HINT}"
        )
    entries = [_entry(path, n, line) for n, line in enumerate(lines[:-1], 1) if line.strip()]
    broken = chain_break(path, entries)
    if broken:
        raise LedgerError(f"{broken}; {RESTORE_HINT}")
    return entries


def new_entry(
    kind: Kind, stack: str, release: str, result: Result, time: dt.datetime, commit: str, **extra: Any
) -> dict[str, Any]:
    """The fields of an entry to append (the ledger adds ``recorded``, ``prev`` and ``hash``); ``extra`` values
    that are None are left out."""
    entry = {"time": iso(time), "kind": kind, "stack": stack, "release": release, "result": result, "commit": commit}
    return entry | {k: v for k, v in extra.items() if v is not None}


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


class Transaction:
    """The ledger under an exclusive lock: its checked entries, and :meth:`append`."""

    def __init__(self, ledger: Ledger, fd: int, data: bytes) -> None:
        self.ledger, self._fd = ledger, fd
        self.entries = parse_ledger(str(ledger.path), data)
        self._lines = data.count(b"\n")

    def append(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Append one entry (``fields`` from :func:`new_entry`) as one line: ``recorded`` now, ``prev`` the last
        entry's hash, ``hash`` its own; one ``write``, then ``fsync``. A failed write leaves the file as it was."""
        missing = [k for k in ("time", "kind", "stack", "release", "result") if k not in fields]
        if missing:
            raise ValueError(f"ledger entry without {', '.join(missing)}: {fields}")
        last = self.entries[-1] if self.entries else None
        data = dict(fields, recorded=iso(self.ledger.clock()))
        data["prev"] = None if last is None else last.data.get("hash") or entry_hash(last.data)
        data["hash"] = entry_hash(data)
        line = _line(data)
        size = os.fstat(self._fd).st_size
        try:
            step(f"write {self.ledger.path.name} ({fields['kind']} {fields['result']})")
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError(f"short write to {self.ledger.path}: {written} of {len(line)} bytes")
            step(f"fsync {self.ledger.path.name}")
            os.fsync(self._fd)
        except OSError:
            os.ftruncate(self._fd, size)
            raise
        if size == 0:  # a new file: make its directory entry durable too
            fsync_dir(self.ledger.path.parent)
        self._lines += 1
        self.entries.append(_entry(str(self.ledger.path), self._lines, line.decode()[:-1]))
        return data


@dataclass(frozen=True)
class Repair:
    line: int
    action: Literal["completed", "removed"]  # completed: a whole entry that only missed its newline
    text: str


class Ledger:
    """The ledger file. ``clock`` gives the ``recorded`` time of appended entries."""

    def __init__(self, path: Path, clock: Callable[[], dt.datetime] | None = None) -> None:
        self.path = path
        self.clock = clock or now_utc

    @contextlib.contextmanager
    def _fd(self, exclusive: bool) -> Iterator[int]:
        """The ledger file open and locked (created when exclusive, and removed again when it stays empty). After
        the lock is taken, the path must still name the locked file (a ``git checkout`` may have replaced it, or a
        run that created it removed it meanwhile); else lock again."""
        while True:
            fd, created = self._open(exclusive)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                same = _same_file(fd, self.path)
            except BaseException:
                os.close(fd)
                raise
            if same:
                break
            os.close(fd)
        try:
            yield fd
        finally:
            with contextlib.suppress(OSError):
                if created and os.fstat(fd).st_size == 0:
                    os.unlink(self.path)  # nothing was appended: leave no empty ledger behind
            os.close(fd)  # closing releases the lock

    def _open(self, exclusive: bool) -> tuple[int, bool]:
        """(fd, whether this call created the file). Read-only: FileNotFoundError when there is no ledger."""
        if not exclusive:
            return os.open(self.path, os.O_RDONLY), False
        while True:
            with contextlib.suppress(FileExistsError):
                return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644), True
            with contextlib.suppress(FileNotFoundError):  # removed since: create it
                return os.open(self.path, os.O_RDWR | os.O_APPEND), False

    def entries(self) -> list[Entry]:
        """Every entry, checked (:func:`parse_ledger`), under a shared lock; none when there is no ledger yet."""
        try:
            with self._fd(exclusive=False) as fd:
                return parse_ledger(str(self.path), _read_all(fd))
        except FileNotFoundError:
            return []

    @contextlib.contextmanager
    def locked(self) -> Iterator[Transaction]:
        """The ledger under an exclusive lock for a read-decide-append: no other run reads or appends until the
        block ends. LedgerError when the ledger is not sound."""
        with self._fd(exclusive=True) as fd:
            yield Transaction(self, fd, _read_all(fd))

    def append(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Append one entry on its own (see :meth:`Transaction.append`); returns the entry as written."""
        with self.locked() as txn:
            return txn.append(fields)

    def repair(self) -> Repair | None:
        """Mend a torn last line: add its newline when it is a whole entry that fits the chain, remove it otherwise.
        None when the last line is whole. The rest of the ledger must be sound (LedgerError otherwise)."""
        if not self.path.is_file():
            return None
        with self._fd(exclusive=True) as fd:
            data = _read_all(fd)
            if not data or data.endswith(b"\n"):
                return None
            keep = data.rfind(b"\n") + 1
            parse_ledger(str(self.path), data[:keep])
            tail = data[keep:]
            n = data[:keep].count(b"\n") + 1
            try:
                parse_ledger(str(self.path), data + b"\n")
                action: Literal["completed", "removed"] = "completed"
                os.write(fd, b"\n")
            except LedgerError:
                action = "removed"
                os.ftruncate(fd, keep)
            os.fsync(fd)
            return Repair(n, action, tail.decode("utf-8", "replace"))
