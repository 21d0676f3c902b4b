"""Read a stack file, validate it completely, and report every error as ``file:line: key.path: message``.

Order of work: YAML (with line numbers, ruamel.yaml round-trip) -> the Pulumi stack-file envelope (``config:``
with namespaced keys) -> structure (:mod:`gpufleet.spec.models`) -> rules (:mod:`gpufleet.spec.rules`). Rules
also run on the parts of a broken file that did parse (each GPU pool, each host group on its own), so one typo
does not hide the other errors of the file: all of them are reported at once.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from pydantic import BaseModel, ValidationError

from gpufleet.catalog import Catalog, load_catalog
from gpufleet.common.diagnostics import Diagnostic, Finding, Path, did_you_mean, format_path
from gpufleet.common.yamldoc import Locator, findings_from_validation, located, plain, read_yaml
from gpufleet.spec import rules
from gpufleet.spec.models import BaremetalHost, GpuPool, HostGroup, Release, Stack, SystemPool, TuningProfile

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
    locator: Locator | None = field(default=None, repr=False, compare=False)
    # config keys whose value is a Pulumi secret (`KEY: {secure: ...}`): the names only, never the ciphertext
    secret_keys: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return self.stack is not None and not self.diagnostics

    def place(self, path: Path, message: str) -> Diagnostic:
        """A finding about this stack (a key path under ``gpufleet:``) at ``file:line``: the line of the deepest key
        of ``path`` the file has (line 1 when its positions are unknown)."""
        if self.locator is None:
            return Diagnostic(self.file, 1, format_path(path), message)
        return located([Finding(path, message)], self.locator, self.file)[0]


def stack_name_from_file(path: FsPath) -> str:
    """``Pulumi.prod-westeurope.yaml`` -> ``prod-westeurope``; other files: their stem."""
    m = STACK_FILE_RE.match(path.name)
    return m["stack"] if m else path.stem


# -- YAML with positions -------------------------------------------------------------------------------------


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


def _mapping_at(raw: Any, *keys: str) -> dict[Any, Any]:
    """The mapping at ``keys`` below ``raw``; empty where one of them is missing or no mapping."""
    for key in keys:
        raw = raw.get(key) if isinstance(raw, dict) else None
    return raw if isinstance(raw, dict) else {}


def _partial_rule_findings(raw: dict[str, Any], context: rules.Context) -> Iterator[Finding]:
    """Rules over the parts of a structurally broken stack that parse on their own."""
    if isinstance(region := raw.get("region"), str):
        yield from rules.check_region(region, "aks" in raw, context)
    if (release := _parsed(Release, raw.get("release"))) is not None:
        yield from rules.check_release(release, context, aks="aks" in raw, baremetal="baremetal" in raw)
    aks = raw.get("aks")
    security = _mapping_at(aks, "cluster", "security")
    if isinstance(security.get("waivers"), dict):
        yield from rules.check_waivers(security["waivers"])
    if isinstance(aks, dict) and isinstance(aks.get("gpu_pools"), list):
        pools = [_parsed(GpuPool, p) for p in aks["gpu_pools"]]
        system = (aks.get("cluster") or {}).get("system_pool") if isinstance(aks.get("cluster"), dict) else None
        # the system pool's fields that parse (a broken one is already reported); None when it is no mapping
        system_pool = _parsed(SystemPool, system or {}) if system is None or isinstance(system, dict) else None
        yield from rules.check_aks_pools(pools, system_pool, context)
    bm = raw.get("baremetal")
    if isinstance(bm, dict) and isinstance(bm.get("host_groups"), list):
        groups = [_parsed(HostGroup, g) for g in bm["host_groups"]]
        profiles: dict[str, TuningProfile] | None = None
        raw_profiles = raw.get("tuning_profiles", {})
        if isinstance(raw_profiles, dict):
            parsed = {k: _parsed(TuningProfile, v) for k, v in raw_profiles.items()}
            if all(isinstance(k, str) and v is not None for k, v in parsed.items()):  # else: reported already
                profiles = {"default": TuningProfile(), **parsed}
        yield from rules.check_host_groups(groups, context, profiles)
        if isinstance(bm.get("hosts"), list):
            hosts = [_parsed(BaremetalHost, h) for h in bm["hosts"]]
            engine = bm.get("engine", "redfish")
            engine = engine if engine in ("redfish", "metal3") else None
            yield from rules.check_baremetal_hosts(hosts, groups, engine, context)


def _read_config(config: Any, locator: Locator, at: Callable[[int, str, str], None]) -> tuple[dict[str, Any], set[str]]:
    """The ``gpufleet:<section>`` values (plain data for the models) and the keys holding a Pulumi secret
    (``KEY: {secure: ...}``, of any namespace); ``at`` is told what is wrong with a key."""
    raw: dict[str, Any] = {}
    secure: set[str] = set()
    for key, value in config.items():
        key_s = str(key)
        line = locator.config_key_line(key)
        namespace, sep, section = key_s.partition(":")
        is_secret = _is_secure(value)
        if is_secret:
            secure.add(key_s)
        if isinstance(value, dict) and "secure" in value and not is_secret:
            at(line, key_s, "a secret is `secure: <ciphertext>` alone, as `pulumi config set --secret` writes it")
        elif not sep:
            at(line, key_s, f"config keys are namespaced: write '{NAMESPACE}:{key_s}'")
        elif namespace == NAMESPACE:
            if section in SECTIONS:
                raw[section] = plain(value)
            elif not is_secret:  # gpufleet:bmc_password: {secure: ...} is a secret the stack refers to
                at(line, section, f"unknown key '{key_s}'; " + did_you_mean(section, SECTIONS))
    return raw, secure


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
                Locator.key_line(top, key) or 1,
                str(key),
                f"unknown top-level key; {did_you_mean(str(key), ENVELOPE_KEYS)}",
            )
    config = top.get("config")
    if not isinstance(config, dict):
        line = Locator.key_line(top, "config") or 1
        at(line, "config", "missing 'config:' mapping with the gpufleet:* keys")
        return LoadedStack(file, name, None, diags)
    locator = Locator(config, first_key=lambda section: f"{NAMESPACE}:{section}")

    raw, secure = _read_config(config, locator, at)
    context = dataclasses.replace(
        context, secure_keys=frozenset(secure), plain_keys=frozenset(str(k) for k in config) - secure
    )
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

    diags = sorted(diags + located(findings, locator, file), key=lambda d: (d.line, d.path))
    return LoadedStack(file, name, stack if not diags else None, diags, locator, frozenset(secure))


def _is_secure(value: Any) -> bool:
    """A Pulumi secret in a stack file: ``{secure: <ciphertext>}`` (the ciphertext's format is the secrets
    provider's: ``v1:<nonce>:<ciphertext>`` for passphrase and service keys, other text for cloud KMS)."""
    return (
        isinstance(value, dict)
        and set(value) == {"secure"}
        and isinstance(value["secure"], str)
        and bool(value["secure"].strip())
    )


def load_stack_text(
    text: str, file: str, *, catalog: Catalog | None = None, today: _dt.date | None = None
) -> LoadedStack:
    """Validate stack-file text; ``file`` is the name used in diagnostics."""
    doc, errors = read_yaml(file, text)
    if errors:
        return LoadedStack(file, stack_name_from_file(FsPath(file)), None, errors)
    return validate_document(doc, file, catalog=catalog, today=today)


def load_stack(path: str | FsPath, *, catalog: Catalog | None = None, today: _dt.date | None = None) -> LoadedStack:
    """Load and validate one stack file."""
    doc, errors = read_yaml(path)
    if errors:
        return LoadedStack(str(path), stack_name_from_file(FsPath(path)), None, errors)
    return validate_document(doc, str(path), catalog=catalog, today=today)


def dump_stack(stack: Stack, secrets: dict[str, str] | None = None) -> str:
    """A stack as Pulumi stack-file YAML (keys under ``gpufleet:``); defaults are left out. ``secrets``: config keys
    and their ``secure:`` ciphertexts, written as they are (the stack's ``{secret: KEY}`` references need them)."""
    from io import StringIO

    from ruamel.yaml import YAML

    data = stack.model_dump(mode="json", exclude_defaults=True)
    config: dict[str, Any] = {f"{NAMESPACE}:{k}": v for k, v in data.items()}
    config.update({key: {"secure": ciphertext} for key, ciphertext in (secrets or {}).items()})
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
