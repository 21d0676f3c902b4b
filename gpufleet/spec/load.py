"""Read a stack file, validate it completely, and report every error as ``file:line: key.path: message``.

Order of work: YAML (with line numbers, ruamel.yaml round-trip) -> the Pulumi stack-file envelope (``config:``
with namespaced keys) -> structure (:mod:`gpufleet.spec.models`) -> rules (:mod:`gpufleet.spec.rules`). Rules
also run on the parts of a broken file that did parse (each GPU pool, each host group on its own), so one typo
does not hide the other errors of the file: all of them are reported at once.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import re
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpufleet.catalog import Catalog, load_catalog
from gpufleet.diagnostics import Diagnostic, Finding, Path, did_you_mean, format_path
from gpufleet.spec import rules
from gpufleet.spec.models import GpuPool, HostGroup, Stack, TuningProfile

NAMESPACE = "gpufleet"
SECTIONS = tuple(Stack.model_fields)
# Keys Pulumi itself writes at the top of a stack file.
ENVELOPE_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment")
STACK_FILE_RE = re.compile(r"^Pulumi\.(?P<stack>[^.]+)\.ya?ml$")


@dataclass
class LoadedStack:
    """The result of loading one stack file: a :class:`Stack` when valid, else every diagnostic."""

    file: str
    name: str
    stack: Stack | None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.stack is not None and not self.diagnostics


def stack_name_from_file(path: FsPath) -> str:
    """``Pulumi.prod-westeurope.yaml`` -> ``prod-westeurope``; other files: their stem."""
    m = STACK_FILE_RE.match(path.name)
    return m["stack"] if m else path.stem


# -- YAML with positions -------------------------------------------------------------------------------------


def _parse_yaml(text: str) -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    return yaml.load(text)


def _plain(node: Any) -> Any:
    """ruamel's round-trip nodes -> plain Python values (what pydantic validates)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarbool import ScalarBoolean
    from ruamel.yaml.scalarfloat import ScalarFloat
    from ruamel.yaml.scalarint import ScalarInt

    if isinstance(node, CommentedMap):
        return {_plain(k): _plain(v) for k, v in node.items()}
    if isinstance(node, CommentedSeq):
        return [_plain(v) for v in node]
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


class Locator:
    """Maps key paths under ``config: gpufleet:<section>`` to 1-based line numbers of the stack file."""

    def __init__(self, config: Any) -> None:
        self.config = config

    @staticmethod
    def _key_line(mapping: Any, key: Any) -> int | None:
        try:
            return mapping.lc.key(key)[0] + 1
        except (AttributeError, KeyError, TypeError):
            return None

    def config_key_line(self, key: str) -> int:
        return self._key_line(self.config, key) or self._own_line(self.config)

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
        section = f"{NAMESPACE}:{path[0]}"
        line = self.config_key_line(section)
        node = self.config.get(section) if isinstance(self.config, CommentedMap) else None
        shown: list[str | int] = [path[0]]
        rest = list(path[1:])
        while rest:
            part = rest.pop(0)
            if part == "[key]":
                continue
            if isinstance(node, CommentedMap) and part in node:
                line = self._key_line(node, part) or line
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


def _unwrap(annotation: Any) -> list[Any]:
    """The model/container types an annotation may hold (Optional, Annotated and unions unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out.extend(_unwrap(arg))
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
                    nxt.extend(_unwrap(cand.model_fields[str(part)].annotation))
                elif _is_union_tag(cand, part):
                    nxt.append(cand)
                    is_tag = True
            elif origin in (list, tuple) and isinstance(part, int):
                nxt.extend(_unwrap(args[0]))
            elif origin is dict:
                nxt.extend(_unwrap(args[1]))
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


# -- orchestration -------------------------------------------------------------------------------------------


def _parsed(model: type[BaseModel], raw: Any) -> Any:
    """``raw`` as ``model`` for the rules, or None. Fields with structural errors (already reported) are left
    out once, so the object's other fields are still checked; None if it still does not parse."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        if not isinstance(raw, dict):
            return None
        broken = {e["loc"][0] for e in exc.errors() if e["loc"]}
        required = {n for n, f in model.model_fields.items() if f.is_required()}
        if broken & required:
            return None
        try:
            return model.model_validate({k: v for k, v in raw.items() if k not in broken})
        except ValidationError:
            return None


def _partial_rule_findings(raw: dict[str, Any], context: rules.Context) -> Iterator[Finding]:
    """Rules over the parts of a structurally broken stack that parse on their own."""
    if isinstance(region := raw.get("region"), str):
        yield from rules.check_region(region, "aks" in raw, context)
    aks = raw.get("aks")
    if isinstance(aks, dict) and isinstance(aks.get("gpu_pools"), list):
        pools = [_parsed(GpuPool, p) for p in aks["gpu_pools"]]
        system = (aks.get("cluster") or {}).get("system_pool") if isinstance(aks.get("cluster"), dict) else None
        system_name = system.get("name", "system") if isinstance(system, dict) else "system"
        yield from rules.check_aks_pools(pools, system_name if isinstance(system_name, str) else None, context)
    bm = raw.get("baremetal")
    if isinstance(bm, dict) and isinstance(bm.get("host_groups"), list):
        groups = [_parsed(HostGroup, g) for g in bm["host_groups"]]
        profiles: dict[str, TuningProfile] | None = None
        raw_profiles = raw.get("tuning_profiles", {})
        if isinstance(raw_profiles, dict):
            parsed = {k: _parsed(TuningProfile, v) for k, v in raw_profiles.items()}
            if all(v is not None for v in parsed.values()):
                profiles = {"default": TuningProfile(), **parsed}
        yield from rules.check_host_groups(groups, context, profiles)


def validate_document(
    doc: Any, file: str, *, catalog: Catalog | None = None, today: _dt.date | None = None
) -> LoadedStack:
    """Validate a parsed stack document (ruamel round-trip nodes, or plain dicts without line info)."""
    from ruamel.yaml.comments import CommentedMap

    name = stack_name_from_file(FsPath(file))
    context = rules.Context(catalog=catalog or load_catalog(), today=today or _dt.date.today())
    diags: list[Diagnostic] = []

    def at(line: int, path: str, message: str) -> None:
        diags.append(Diagnostic(file=file, line=line, path=path, message=message))

    if not isinstance(doc, dict):
        at(1, "", "a stack file is a YAML mapping with a 'config:' key (Pulumi stack configuration)")
        return LoadedStack(file, name, None, diags)
    top = doc if isinstance(doc, CommentedMap) else CommentedMap(doc)
    for key in top:
        if key not in ENVELOPE_KEYS:
            at(
                Locator._key_line(top, key) or 1,
                str(key),
                f"unknown top-level key; {did_you_mean(str(key), ENVELOPE_KEYS)}",
            )
    config = top.get("config")
    if not isinstance(config, dict):
        line = Locator._key_line(top, "config") or 1
        at(line, "config", "missing 'config:' mapping with the gpufleet:* keys")
        return LoadedStack(file, name, None, diags)
    locator = Locator(config)

    raw: dict[str, Any] = {}
    for key, value in config.items():
        key_s = str(key)
        line = locator.config_key_line(key)
        namespace, sep, section = key_s.partition(":")
        if not sep:
            at(line, key_s, f"config keys are namespaced: write '{NAMESPACE}:{key_s}'")
        elif namespace == NAMESPACE:
            if section in SECTIONS:
                raw[section] = _plain(value)
            else:
                at(line, section, f"unknown key '{key_s}'; " + did_you_mean(section, SECTIONS))
    # Other namespaces (azure-native:, kubernetes:...) belong to providers; one of them must agree with us.
    location = config.get("azure-native:location")
    if location is not None and "region" in raw and str(location) != raw["region"]:
        at(
            locator.config_key_line("azure-native:location"),
            "azure-native:location",
            f"{location!r} differs from gpufleet:region {raw['region']!r}; remove it or make them equal",
        )

    findings: list[Finding] = []
    stack: Stack | None = None
    try:
        stack = Stack.model_validate(raw)
    except ValidationError as exc:
        findings.extend(findings_from_validation(exc, Stack))
        findings.extend(_partial_rule_findings(raw, context))
    else:
        findings.extend(rules.check_stack(stack, context))
        if STACK_FILE_RE.match(FsPath(file).name) and name != stack.name:
            findings.append(
                Finding(
                    ("stage",),
                    f"the file is stack {name!r} but gpufleet:stage/region say {stack.name!r}; a stack file is"
                    " named Pulumi.<stage>-<region>.yaml",
                )
            )

    for finding in findings:
        line, shown = locator.locate(finding.path)
        at(line, format_path(shown), finding.message)
    diags.sort(key=lambda d: (d.line, d.path))
    return LoadedStack(file, name, stack if not diags else None, diags)


def load_stack_text(
    text: str, file: str, *, catalog: Catalog | None = None, today: _dt.date | None = None
) -> LoadedStack:
    """Validate stack-file text; ``file`` is the name used in diagnostics."""
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        doc = _parse_yaml(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        return LoadedStack(
            file, stack_name_from_file(FsPath(file)), None, [Diagnostic(file, line, "", f"YAML: {problem}")]
        )
    except YAMLError as exc:
        return LoadedStack(file, stack_name_from_file(FsPath(file)), None, [Diagnostic(file, 1, "", f"YAML: {exc}")])
    return validate_document(doc, file, catalog=catalog, today=today)


def load_stack(path: str | FsPath, *, catalog: Catalog | None = None, today: _dt.date | None = None) -> LoadedStack:
    """Load and validate one stack file."""
    path = FsPath(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return LoadedStack(
            str(path),
            stack_name_from_file(path),
            None,
            [Diagnostic(str(path), 1, "", f"cannot read: {exc.strerror}")],
        )
    except UnicodeDecodeError:
        return LoadedStack(
            str(path), stack_name_from_file(path), None, [Diagnostic(str(path), 1, "", "not UTF-8 text")]
        )
    return load_stack_text(text, str(path), catalog=catalog, today=today)


def dump_stack(stack: Stack) -> str:
    """A stack as Pulumi stack-file YAML (keys under ``gpufleet:``); defaults are left out."""
    from io import StringIO

    from ruamel.yaml import YAML

    data = stack.model_dump(mode="json", exclude_defaults=True)
    config = {f"{NAMESPACE}:{k}": v for k, v in data.items()}
    out = StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.dump({"config": config}, out)
    return out.getvalue()


__all__ = [
    "LoadedStack",
    "dump_stack",
    "load_stack",
    "load_stack_text",
    "stack_name_from_file",
    "validate_document",
]
