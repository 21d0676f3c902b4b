"""Errors users can act on: ``file:line: key.path: message``."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

Path = tuple[str | int, ...]


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def format_path(path: Path) -> str:
    """``('aks', 'gpu_pools', 1, 'vm_size')`` -> ``aks.gpu_pools[1].vm_size``; keys that are not plain names
    are quoted: ``profiles["1g.10gb"]``, ``labels["nvidia.com/mig.config"]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            out += f'["{part}"]'
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True)
class Diagnostic:
    """One validation error, located in a file."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.line}: {where}{self.message}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Finding:
    """A rule violation before it is located in a file: a key path and a message."""

    path: Path
    message: str


class ValidationFailed(Exception):
    """Raised by loaders when a document is invalid; carries every diagnostic of the file."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


def suggest(word: str, choices: Iterable[str], n: int = 1) -> list[str]:
    """The closest valid names to ``word`` (case-insensitive), best first."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    word = word.lower()
    hits = difflib.get_close_matches(word, list(lowered), n=len(lowered), cutoff=0.6)

    def rank(hit: str) -> tuple[float, int]:
        # equally similar names: the one sharing the longer beginning first (MI301 -> MI300X, not MI350X); then
        # difflib's own order (the sort is stable)
        prefix = next((i for i, (a, b) in enumerate(zip(word, hit, strict=False)) if a != b), min(len(word), len(hit)))
        return -difflib.SequenceMatcher(None, word, hit).ratio(), -prefix

    return [lowered[h] for h in sorted(hits, key=rank)[:n]]


def did_you_mean(word: str, choices: Iterable[object], limit: int = 12) -> str:
    """``"did you mean 'x'? valid: a, b, c"`` — for messages that name what would be valid (choices that are not
    text, such as a YAML key read as null or a number, are shown as text)."""
    choices = sorted({str(c) for c in choices})
    hint = suggest(str(word), choices)
    shown = ", ".join(choices[:limit]) + (f", … ({len(choices) - limit} more)" if len(choices) > limit else "")
    if hint:
        return f"did you mean '{hint[0]}'? valid: {shown}"
    return f"valid: {shown}"
