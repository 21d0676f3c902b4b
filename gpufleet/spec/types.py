"""The building blocks of gpufleet's input models: a strict base model, errors shown as written, and the constrained
string types (versions, Kubernetes labels and taints, zones, CIDRs, identifiers) the stack and the other input files
share. Structure only; see :mod:`gpufleet.spec.models` for the shapes built from them."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
)
from pydantic_core import PydanticCustomError

# What gpufleet does about a GPU fault, mildest first: the stack's xid_actions and the Xid catalog's
# (gpufleet.fleet.remediation, docs/remediation.md)
Action = Literal["none", "cordon", "gpu-reset", "reboot", "power-cycle"]


class StrictModel(BaseModel):
    """Unknown keys are errors (the loader turns them into 'did you mean' messages)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def invalid(message: str) -> PydanticCustomError:
    """A validation error whose message is shown as written (the loader places it at file:line)."""
    return PydanticCustomError("gpufleet", message)


def _quoted_version(pattern: str, example: str) -> Any:
    """A version string. YAML reads ``1.30`` as the number 1.3: refuse numbers with a message that says why."""
    regex = re.compile(pattern)

    def check(v: Any) -> str:
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise invalid(f"expected a version string like {example!r}")
        if isinstance(v, float):
            raise invalid(f"write the version as a quoted string, e.g. {example!r}: YAML reads {v!r} as a number")
        v = str(v)
        if not regex.fullmatch(v):
            raise invalid(f"{v!r} is not a version like {example!r}")
        return v

    return PlainValidator(check, json_schema_input_type=str)


KubernetesVersion = Annotated[str, _quoted_version(r"1\.\d{1,2}(\.\d{1,3})?", "1.33")]
SemVer = Annotated[str, _quoted_version(r"v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?", "v26.7.0")]
DriverBranch = Annotated[str, _quoted_version(r"\d{3}", "580")]

_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_PREFIX = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*"
LABEL_KEY_RE = re.compile(rf"({_LABEL_PREFIX}/)?{_LABEL_NAME}")
LABEL_VALUE_RE = re.compile(rf"({_LABEL_NAME})?")


def label_value(v: str) -> str:
    if not isinstance(v, str):
        raise invalid("expected a string")
    if len(v) > 63 or not LABEL_VALUE_RE.fullmatch(v):
        raise invalid(
            f"{v!r} is not a Kubernetes label value (at most 63 characters: letters, digits, '-', '_', '.',"
            " beginning and ending with a letter or digit)"
        )
    return v


LabelValue = Annotated[str, PlainValidator(label_value, json_schema_input_type=str)]

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TAINT_RE = re.compile(rf"(?P<key>({_LABEL_PREFIX}/)?{_LABEL_NAME})(=(?P<value>{_LABEL_NAME})?)?:(?P<effect>\w+)")


def _taint(v: Any) -> str:
    if not isinstance(v, str):
        raise invalid("expected a taint string 'key=value:Effect'")
    m = _TAINT_RE.fullmatch(v)
    if not m:
        raise invalid(f"{v!r} is not a taint 'key=value:Effect' (e.g. 'sku=gpu:NoSchedule')")
    if m["effect"] not in TAINT_EFFECTS:
        raise invalid(f"taint effect {m['effect']!r} is not one of {', '.join(TAINT_EFFECTS)}")
    return v


Taint = Annotated[str, PlainValidator(_taint, json_schema_input_type=str)]


def _zone(v: Any) -> str:
    if isinstance(v, bool) or str(v) not in ("1", "2", "3"):
        raise invalid(f"{v!r} is not an Azure availability zone; valid: '1', '2', '3'")
    return str(v)


Zone = Annotated[str, PlainValidator(_zone, json_schema_input_type=str)]


def _percent_or_count(v: Any) -> str:
    text = str(v)
    if isinstance(v, bool) or not re.fullmatch(r"([1-9]\d*|0)%?", text):
        raise invalid(f"{v!r} is not a node count (e.g. 1) or a percentage (e.g. '33%')")
    if text.endswith("%") and int(text[:-1]) > 100:
        raise invalid(f"{v!r} is above 100%")
    return text


PercentOrCount = Annotated[str, PlainValidator(_percent_or_count, json_schema_input_type=str | int)]


def _cidr(v: Any) -> str:
    try:
        return str(ipaddress.ip_network(str(v), strict=True))
    except ValueError as exc:
        raise invalid(f"{v!r} is not a CIDR block: {exc}") from None


Cidr = Annotated[str, PlainValidator(_cidr, json_schema_input_type=str)]
IpAddress = Annotated[
    ipaddress.IPv4Address,
    BeforeValidator(lambda v: str(v) if not isinstance(v, ipaddress.IPv4Address) else v),
    PlainSerializer(str, return_type=str),
]


def matching(pattern: str, what: str) -> Any:
    """A string matching ``pattern``; the error says ``what`` it must be, not the regex."""
    regex = re.compile(pattern)

    def check(v: Any) -> str:
        if not isinstance(v, str):
            raise invalid(f"expected a string: {what}")
        if not regex.fullmatch(v):
            raise invalid(f"{v!r} is not valid: {what}")
        return v

    return PlainValidator(check, json_schema_input_type=str)


Identifier = Annotated[
    str, matching(r"[a-z][a-z0-9_]{0,62}", "lowercase letters, digits and '_', starting with a letter")
]
