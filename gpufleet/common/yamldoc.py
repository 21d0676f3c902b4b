"""YAML documents with positions: parse, locate key paths at file:line, and turn pydantic errors into findings.

Shared by every gpufleet input file (stacks, MIG demands...), so all report errors the same way:
``file:line: key.path: message``, with what would be valid.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path as FsPath
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpufleet.common.diagnostics import Diagnostic, Finding, Path, did_you_mean, format_path

# Limits on input documents. A stack or demand file is a few kilobytes; these refuse what would hang or exhaust
# memory (a FIFO, /dev/zero, an alias bomb, nesting that overflows the parser) with a clear error instead.
MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_ALIASES = 100
MAX_VALUES = 200_000


class InputFileError(ValueError):
    """An input file that cannot be read as text: the diagnostic says where and why."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        self.diagnostic = diagnostic
        super().__init__(str(diagnostic))


def read_text_file(path: str | FsPath, limit: int = MAX_FILE_BYTES) -> str:
    """A regular file's UTF-8 text, at most ``limit`` bytes; :class:`InputFileError` otherwise.

    Read by :func:`gpufleet.host.hostfacts.read_bounded` (non-blocking, regular files only, bounded), so a FIFO, a
    device (``/dev/zero``) or a directory is refused at once instead of hanging or reading without end."""
    file = str(path)

    def refuse(message: str, line: int = 1) -> InputFileError:
        return InputFileError(Diagnostic(file, line, "", message))

    from gpufleet.host.hostfacts import NotRegularFile, read_bounded

    try:
        data, size = read_bounded(file, limit)
    except NotRegularFile:
        raise refuse("not a regular file (a FIFO, device or directory); give a file") from None
    except OSError as exc:
        raise refuse(f"cannot read: {exc.strerror}") from None
    if size > limit:
        raise refuse(f"{size} bytes; an input file holds at most {limit} bytes ({limit // 1024} KiB)")
    if len(data) > limit:
        raise refuse(f"more than {limit} bytes; an input file holds at most {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise refuse(f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded", line) from None


def read_yaml(path: str | FsPath | None, text: str | None = None) -> tuple[Any, list[Diagnostic]]:
    """Parse a file (or ``text``, reported as ``path``) with line numbers: (document, []) or (None, [error]).

    Refused with an error at the offending line: files that :func:`read_text_file` refuses, control characters,
    integers Python will not convert (over 4,300 digits, ``0x_``), nesting deeper than ``MAX_DEPTH``, more than
    ``MAX_ALIASES`` aliases or ``MAX_VALUES`` values once aliases are expanded (an alias inside its own anchor
    is null, as ruamel reads it)."""
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    file = str(path)
    if text is None:
        try:
            text = read_text_file(file)
        except InputFileError as exc:
            return None, [exc.diagnostic]
    # ruamel's scanner slows down with each open flow collection (thousands of '[' take seconds before the parser's
    # recursion gives up), so deep flow nesting is found first by the scan, which stops at MAX_DEPTH.
    if text.count("[") + text.count("{") > MAX_DEPTH and (line := _too_deep_line(text)):
        return None, [Diagnostic(file, line, "", f"YAML: nested deeper than {MAX_DEPTH} levels")]
    try:
        doc = parse_yaml(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        return None, [Diagnostic(file, line, "", f"YAML: {problem}")]
    except ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else 1
        what = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        return None, [Diagnostic(file, line, "", f"YAML: control character {what} is not allowed; remove it")]
    except RecursionError:
        line = _too_deep_line(text) or 1
        return None, [Diagnostic(file, line, "", f"YAML: nested deeper than {MAX_DEPTH} levels")]
    except YAMLError as exc:
        return None, [Diagnostic(file, 1, "", f"YAML: {exc}")]
    problem = _too_complex(doc)
    if problem:
        return None, [Diagnostic(file, *problem)]
    return doc, []


def _too_deep_line(text: str) -> int | None:
    """The line where ``text`` first nests deeper than ``MAX_DEPTH``, or None (the scanner is not recursive)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.tokens import (
        BlockEndToken,
        BlockMappingStartToken,
        BlockSequenceStartToken,
        FlowMappingEndToken,
        FlowMappingStartToken,
        FlowSequenceEndToken,
        FlowSequenceStartToken,
    )

    opening = (BlockMappingStartToken, BlockSequenceStartToken, FlowMappingStartToken, FlowSequenceStartToken)
    closing = (BlockEndToken, FlowMappingEndToken, FlowSequenceEndToken)
    depth = 0
    with contextlib.suppress(YAMLError):
        for token in YAML(typ="rt").scan(text):
            if isinstance(token, opening):
                depth += 1
                if depth > MAX_DEPTH:
                    return token.start_mark.line + 1
            elif isinstance(token, closing):
                depth -= 1
    return None


def _too_complex(doc: Any) -> tuple[int, str, str] | None:
    """(line, path, message) when ``doc`` nests deeper than ``MAX_DEPTH``, uses more than
    ``MAX_ALIASES`` aliases or holds more than ``MAX_VALUES`` values with its aliases expanded; else None.

    ruamel gives an alias the same object as its anchor, so aliases are repeated objects and the expanded size is
    computed without expanding (each container's size once)."""
    sizes: dict[int, int] = {}
    aliases = 0

    def line_of(node: Any) -> int:
        try:
            return int(node.lc.line) + 1
        except AttributeError:
            return 1

    class _Stop(Exception):
        def __init__(self, line: int, message: str) -> None:
            self.line, self.message = line, message

    def size(node: Any, depth: int, parent: Any) -> int:
        nonlocal aliases
        if not isinstance(node, dict | list):
            return 1
        key = id(node)
        if key in sizes:
            aliases += 1
            if aliases > MAX_ALIASES:
                raise _Stop(line_of(parent), f"YAML: more than {MAX_ALIASES} aliases")
            return sizes[key]
        if depth > MAX_DEPTH:
            raise _Stop(line_of(node), f"YAML: nested deeper than {MAX_DEPTH} levels")
        items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1 + sum(size(child, depth + 1, node) for child in items)
        if total > MAX_VALUES:
            raise _Stop(line_of(node), f"YAML: more than {MAX_VALUES} values with aliases expanded")
        sizes[key] = total
        return total

    try:
        size(doc, 1, doc)
    except _Stop as stop:
        return stop.line, "", stop.message
    return None


def located(findings: Iterable[Finding], locator: Locator, file: str) -> list[Diagnostic]:
    """Findings placed at file:line, sorted by line."""
    out = []
    for finding in findings:
        line, shown = locator.locate(finding.path)
        out.append(Diagnostic(file=file, line=line, path=format_path(shown), message=finding.message))
    return sorted(out, key=lambda d: (d.line, d.path))


def parse_yaml(text: str) -> Any:
    """Round-trip parse (line numbers kept); an integer Python will not convert is a marked YAML error."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.Constructor = _constructor()
    return yaml.load(text)


@functools.cache
def _constructor() -> type:
    from ruamel.yaml.constructor import ConstructorError, RoundTripConstructor

    def refuse(node: Any, what: str) -> ConstructorError:
        value = str(node.value)
        shown = value if len(value) <= 40 else f"{value[:20]}... ({len(value)} characters)"
        return ConstructorError(None, None, f"{shown!r} is not {what}", node.start_mark)

    class Constructor(RoundTripConstructor):  # type: ignore[misc]
        """ruamel's round-trip constructor, with integers and dates it cannot convert reported at their line."""

        def construct_yaml_int(self, node: Any) -> Any:
            try:
                return super().construct_yaml_int(node)
            except (ValueError, IndexError):
                why = "a readable integer: at most 4300 digits, in decimal or 0x/0o/0b with digits"
                raise refuse(node, why) from None

        def construct_yaml_timestamp(self, node: Any, values: Any = None) -> Any:
            try:
                return super().construct_yaml_timestamp(node, values)
            except (ValueError, OverflowError):
                raise refuse(node, "a valid date or time (YYYY-MM-DD, month 1-12, a day the month has)") from None

        def check_mapping_key(self, node: Any, key_node: Any, mapping: Any, key: Any, value: Any) -> Any:
            try:
                return super().check_mapping_key(node, key_node, mapping, key, value)
            except TypeError:  # a key holding a mapping or list: Python cannot hash it
                why = "a key that holds a mapping or list is not supported; keys are names"
                raise ConstructorError(None, None, why, key_node.start_mark) from None

    Constructor.add_constructor("tag:yaml.org,2002:int", Constructor.construct_yaml_int)
    Constructor.add_constructor("tag:yaml.org,2002:timestamp", Constructor.construct_yaml_timestamp)
    return Constructor


def plain(node: Any) -> Any:
    """ruamel's round-trip nodes -> plain Python values (what pydantic validates)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarbool import ScalarBoolean
    from ruamel.yaml.scalarfloat import ScalarFloat
    from ruamel.yaml.scalarint import ScalarInt

    if isinstance(node, CommentedMap):
        return {_plain_key(plain(k)): plain(v) for k, v in node.items()}
    if isinstance(node, CommentedSeq):
        return [plain(v) for v in node]
    if isinstance(node, ScalarBoolean):
        return bool(node)
    if isinstance(node, bool):
        return node
    if isinstance(node, ScalarInt):
        return int(node)
    if isinstance(node, ScalarFloat):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _plain_key(key: Any) -> Any:
    """A mapping key as a dict key: YAML allows a mapping or a list as a key (``? {a: 1}``), Python does not; such
    a key is kept as its text, which no model accepts, so it is reported as an unknown key."""
    if key is None or isinstance(key, str | int | float | bool):
        return key
    if isinstance(key, Mapping):
        return json.dumps({str(k): v for k, v in key.items()}, default=str)
    return json.dumps(list(key), default=str) if isinstance(key, Iterable) else str(key)


class Locator:
    """Maps key paths to 1-based line numbers of a YAML file read with :func:`parse_yaml`.

    ``root`` is the mapping paths start in; ``first_key`` turns a path's first element into the key written in
    the file (stack files write ``gpufleet:aks`` for the path ``aks...``)."""

    def __init__(self, root: Any, first_key: Callable[[str], str] = str) -> None:
        self.config = root
        self.first_key = first_key

    @staticmethod
    def key_line(mapping: Any, key: Any) -> int | None:
        try:
            return mapping.lc.key(key)[0] + 1
        except (AttributeError, KeyError, TypeError):
            return None

    def config_key_line(self, key: str) -> int:
        return self.key_line(self.config, key) or self._own_line(self.config)

    @staticmethod
    def _own_line(node: Any) -> int:
        try:
            return node.lc.line + 1
        except AttributeError:
            return 1

    def locate(self, path: Path) -> tuple[int, Path]:
        """The line of the deepest key of ``path`` present in the file, and the path as the user wrote it
        (pydantic's union tags and ``[key]`` markers removed)."""
        from ruamel.yaml.comments import CommentedMap, CommentedSeq

        if not path:
            return self._own_line(self.config), ()
        section = self.first_key(str(path[0]))
        line = self.config_key_line(section)
        node = self.config.get(section) if isinstance(self.config, CommentedMap) else None
        shown: list[str | int] = [path[0]]
        rest = list(path[1:])
        while rest:
            part = rest.pop(0)
            if part == "[key]":
                continue
            if isinstance(node, CommentedMap) and part in node:
                line = self.key_line(node, part) or line
                node = node[part]
                shown.append(part)
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
                with contextlib.suppress(AttributeError, KeyError, TypeError):
                    line = node.lc.item(part)[0] + 1
                node = node[part]
                shown.append(part)
            elif rest:
                continue  # a pydantic union tag (e.g. 'operator'): not a key of the file
            else:
                shown.append(part)  # a key the file lacks (missing, or a default a rule talks about)
                break
        return line, tuple(shown)


# -- pydantic errors -> findings -----------------------------------------------------------------------------


def unwrap(annotation: Any) -> list[Any]:
    """The model/container types an annotation may hold (Optional, Annotated and unions unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out.extend(unwrap(arg))
        return out
    return [annotation]


def _is_union_tag(model: type[BaseModel], part: str | int) -> bool:
    """Whether ``part`` is the discriminator value of ``model`` (pydantic puts it in error locations)."""
    return any(
        typing.get_origin(f.annotation) is typing.Literal and part in typing.get_args(f.annotation)
        for f in model.model_fields.values()
    )


def _walk(root: type[BaseModel], loc: Iterable[str | int]) -> tuple[type[BaseModel] | None, Path]:
    """Follow ``loc`` through the model types: the model whose fields are valid at its end (to list valid keys
    after a typo), and ``loc`` without pydantic's union tags (e.g. ``mig.operator.devices`` -> ``mig.devices``)."""
    candidates: list[Any] = [root]
    cleaned: list[str | int] = []
    for part in loc:
        nxt: list[Any] = []
        is_tag = False
        for cand in candidates:
            origin, args = typing.get_origin(cand), typing.get_args(cand)
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                if part in cand.model_fields:
                    nxt.extend(unwrap(cand.model_fields[str(part)].annotation))
                elif _is_union_tag(cand, part):
                    nxt.append(cand)
                    is_tag = True
            elif origin in (list, tuple) and isinstance(part, int):
                nxt.extend(unwrap(args[0]))
            elif origin is dict:
                nxt.extend(unwrap(args[1]))
        if not is_tag:
            cleaned.append(part)
        candidates = nxt or candidates
    models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
    return (models[0] if models else None), tuple(cleaned)


def _expected_choices(ctx: dict[str, Any]) -> list[str]:
    return re.findall(r"'([^']*)'", str(ctx.get("expected", "")))


# pydantic error types -> messages; {got} is ", got <value>" for scalars, other fields come from the error context.
_TEMPLATES = {
    "int_type": "expected a whole number{got}",
    "int_parsing": "expected a whole number{got}",
    "int_from_float": "expected a whole number{got}",
    "float_type": "expected a number{got}",
    "float_parsing": "expected a number{got}",
    "bool_type": "expected true or false{got}",
    "bool_parsing": "expected true or false{got}",
    "string_type": "expected a string{got}",
    "dict_type": "expected a mapping of keys to values{got}",
    "model_type": "expected a mapping of keys to values{got}",
    "model_attributes_type": "expected a mapping of keys to values{got}",
    "list_type": "expected a list{got}",
    "tuple_type": "expected a list{got}",
    "greater_than_equal": "must be at least {ge}{got}",
    "greater_than": "must be more than {gt}{got}",
    "less_than_equal": "must be at most {le}{got}",
    "less_than": "must be less than {lt}{got}",
    "too_short": "needs at least {min_length} item(s)",
    "too_long": "takes at most {max_length} item(s)",
}


def _message(error: ErrorDetails) -> str:
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    got = f", got {value!r}" if not isinstance(value, dict | list) else ""
    if kind == "gpufleet":
        return error["msg"]
    if kind == "missing":
        return f"missing required key {error['loc'][-1]!r}"
    if kind in ("literal_error", "enum"):
        return f"{value!r} is not valid; " + did_you_mean(str(value), _expected_choices(ctx))
    if kind == "union_tag_invalid":
        choices = ", ".join(_expected_choices(ctx))
        return f"{ctx.get('discriminator', 'tag')} {value!r} is not valid; valid: {choices}"
    if kind == "union_tag_not_found":
        return f"missing required key {ctx.get('discriminator', '').strip(chr(39))!r}"
    if kind in _TEMPLATES:
        return _TEMPLATES[kind].format(got=got, **ctx)
    return f"{error['msg']}{got}"


def findings_from_validation(exc: ValidationError, root: type[BaseModel], prefix: Path = ()) -> Iterator[Finding]:
    for error in exc.errors(include_url=False):
        loc = tuple(p for p in error["loc"] if p != "[key]")
        _, clean = _walk(root, loc)
        if error["type"] == "extra_forbidden":
            key = str(loc[-1])
            model, _ = _walk(root, loc[:-1])
            valid = list(model.model_fields) if model else []
            yield Finding((*prefix, *clean), f"unknown key {key!r}; {did_you_mean(key, valid)}")
        else:
            yield Finding((*prefix, *clean), _message(error))


Model = typing.TypeVar("Model", bound=BaseModel)


def read_model(file: str, model: type[Model], shape: str) -> tuple[Model | None, Locator | None, list[Diagnostic]]:
    """An input file (a demand, a fleet...) read and validated as ``model``: the parsed model and the locator of its
    document, or None and every error at ``file:line`` (``shape``: what the file must be, said when its document is
    no mapping)."""
    doc, errors = read_yaml(file)
    if errors:
        return None, None, errors
    if not isinstance(doc, dict):
        return None, None, [Diagnostic(file, 1, "", shape)]
    locator = Locator(doc)
    try:
        return model.model_validate(plain(doc)), locator, []
    except ValidationError as exc:
        return None, locator, located(findings_from_validation(exc, model), locator, file)
