"""Can a pod template be scheduled on a node? Taints, tolerations, nodeSelector and required node affinity.

GPU DaemonSets (the NVIDIA device plugin, DCGM exporter, GPU feature discovery...) come from helm charts, and
the node pools they must serve carry taints (``sku=gpu:NoSchedule`` on AKS GPU pools) and labels that other
components put there (``nvidia.com/gpu.present``, NFD's ``feature.node.kubernetes.io/pci-10de.present``). A
DaemonSet that misses one toleration, or whose node affinity asks for a label the pool will never carry, is
silently absent from those nodes: no error anywhere, just no GPUs. This module answers the question the
kube-scheduler answers, offline, from the plain dicts helm renders, and says why not, one short reason per
problem, so a check can print them.

Rules, as in the Kubernetes documentation ("Taints and Tolerations", "Assigning Pods to Nodes"):

* A toleration matches a taint when its effect is empty or equal to the taint's, and: operator ``Exists`` with
  an empty key matches every taint; ``Exists`` with a key matches that key whatever the value; ``Equal`` (the
  default when the operator is missing or empty) matches key and value. Operators are case-sensitive; an
  unknown operator tolerates nothing. An ``Equal`` toleration with an empty key tolerates nothing (the API
  server rejects it: an empty key needs ``Exists``).
* Only ``NoSchedule`` and ``NoExecute`` taints keep a pod off a node; ``PreferNoSchedule`` is a preference and
  never does.
* ``nodeSelector``: every key must be a label of the node, with exactly that value.
* Required node affinity (``requiredDuringSchedulingIgnoredDuringExecution``): the ``nodeSelectorTerms`` are
  ORed, the requirements of one term ANDed. An empty list of terms, and an empty or null term, match no node.
  Operators ``In``, ``NotIn`` (also true when the label is absent), ``Exists``, ``DoesNotExist``, ``Gt`` and
  ``Lt`` (one value; it and the label's value are read as 64-bit decimal integers, and a label that is not one
  does not match). A requirement Kubernetes would refuse (``In``/``NotIn`` without values, ``Exists`` with
  values, ``Gt`` with two values, an unknown operator) makes its term match nothing, as in the scheduler.
  ``matchFields`` supports what Kubernetes supports: ``metadata.name`` with ``In``/``NotIn`` and exactly one
  value, compared with :attr:`NodeShape.name`; any other field makes its term match nothing.

Deliberately ignored, because none of them makes a single pod unschedulable for our purpose: preferred node
affinity, pod affinity and anti-affinity, topology spread constraints, resource requests, ``nodeName``. Nor
does this module add the tolerations the DaemonSet controller gives every DaemonSet pod on its own (for the
``node.kubernetes.io/*`` condition taints such as ``not-ready`` or ``unschedulable``): describe nodes by the
taints their pool is configured with, which those are not.

Pure functions over plain data, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

EFFECTS: tuple[str, ...] = ("NoSchedule", "PreferNoSchedule", "NoExecute")
BLOCKING_EFFECTS: frozenset[str] = frozenset({"NoSchedule", "NoExecute"})

_FORBIDDEN_IN_TAINT = re.compile(r"[=:\s]")
_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_VALUE_OPERATORS = frozenset({"In", "NotIn"})
_NO_VALUE_OPERATORS = frozenset({"Exists", "DoesNotExist"})
_NUMERIC_OPERATORS = frozenset({"Gt", "Lt"})


@dataclass(frozen=True)
class Taint:
    """A node taint, as ``kubectl taint`` and AKS node pools write it: ``key=value:Effect`` or ``key:Effect``."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a taint needs a key")
        for name, text in (("key", self.key), ("value", self.value)):
            if _FORBIDDEN_IN_TAINT.search(text):
                raise ValueError(f"taint {name} {text!r} must not contain '=', ':' or whitespace")
        if self.effect not in EFFECTS:
            raise ValueError(f"unknown taint effect {self.effect!r} (expected one of {', '.join(EFFECTS)})")

    @classmethod
    def parse(cls, text: str) -> Taint:
        """``"sku=gpu:NoSchedule"`` -> ``Taint("sku", "gpu", "NoSchedule")``; ``"key:Effect"`` has an empty value."""
        spec, colon, effect = text.strip().partition(":")
        if not colon or ":" in effect:
            raise ValueError(f"invalid taint {text!r}: expected key=value:Effect or key:Effect")
        key, _, value = spec.partition("=")
        if not key or "=" in value:
            raise ValueError(f"invalid taint {text!r}: expected key=value:Effect or key:Effect")
        if effect not in EFFECTS:
            raise ValueError(
                f"invalid taint {text!r}: unknown effect {effect!r} (expected one of {', '.join(EFFECTS)})"
            )
        try:
            return cls(key, value, effect)
        except ValueError as err:
            raise ValueError(f"invalid taint {text!r}: {err}") from None

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    """A pod's toleration; the defaults are Kubernetes' (a missing operator means ``Equal``)."""

    key: str = ""  # empty + operator Exists tolerates every taint
    operator: str = "Equal"  # "Equal" or "Exists"
    value: str = ""
    effect: str = ""  # empty matches every effect

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Toleration:
        """A Kubernetes Toleration object; missing or null fields take their defaults, ``tolerationSeconds`` is
        ignored. A non-string field (YAML's unquoted ``true``) is a ValueError: the API server refuses it too."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a toleration must be a mapping, got {type(data).__name__} {data!r}")
        fields: dict[str, str] = {}
        for name in ("key", "operator", "value", "effect"):
            raw = data.get(name)
            if raw is not None and not isinstance(raw, str):
                raise ValueError(f"toleration {name} must be a string, got {type(raw).__name__} {raw!r}")
            fields[name] = raw or ""
        return cls(fields["key"], fields["operator"] or "Equal", fields["value"], fields["effect"])

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration matches ``taint``, whether or not that taint would block scheduling."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        if self.operator in ("Equal", ""):
            return bool(self.key) and self.key == taint.key and self.value == taint.value
        return False


@dataclass(frozen=True)
class NodeShape:
    """What the scheduler looks at on a node, for a node pool or host group: its labels and taints."""

    name: str  # e.g. a pool or host-group name; matchFields on metadata.name compare with it
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class Placement:
    """What of a pod template decides where it can run."""

    node_selector: Mapping[str, str]
    # requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms; None when absent
    required_terms: tuple[Mapping[str, Any], ...] | None
    tolerations: tuple[Toleration, ...]

    @classmethod
    def from_pod_spec(cls, spec: Mapping[str, Any] | None) -> Placement:
        """From a Kubernetes PodSpec dict (a DaemonSet's ``spec.template.spec``). Missing or null fields mean
        "none"; a required node affinity without ``nodeSelectorTerms`` has no terms, so it matches no node.
        Malformed values (a list where a mapping belongs, a non-string label value) are a ValueError."""
        spec = _mapping(spec, "spec")
        selector = _mapping(spec.get("nodeSelector"), "nodeSelector")
        for key, value in selector.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"nodeSelector {key!r}: {value!r} must map a string to a string (quote it in YAML)")
        tolerations = tuple(Toleration.from_dict(item) for item in _sequence(spec.get("tolerations"), "tolerations"))
        affinity = _mapping(spec.get("affinity"), "affinity")
        node_affinity = _mapping(affinity.get("nodeAffinity"), "affinity.nodeAffinity")
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        terms: tuple[Mapping[str, Any], ...] | None = None
        if required is not None:
            where = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            raw_terms = _sequence(_mapping(required, where).get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
            terms = tuple(_checked_term(term, f"{where}.nodeSelectorTerms[{i}]") for i, term in enumerate(raw_terms))
        return cls(node_selector=dict(selector), required_terms=terms, tolerations=tolerations)


def untolerated(placement: Placement, node: NodeShape) -> list[Taint]:
    """The node's NoSchedule and NoExecute taints that no toleration of the pod matches, in the node's order."""
    return [
        taint
        for taint in node.taints
        if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in placement.tolerations)
    ]


def why_not(placement: Placement, node: NodeShape) -> list[str]:
    """Why a pod with this placement cannot be scheduled on ``node``: one reason per untolerated taint, per
    failing nodeSelector key, and one for the required node affinity; ``[]`` when it can be."""
    reasons = [f"taint {taint} not tolerated" for taint in untolerated(placement, node)]
    for key, wanted in placement.node_selector.items():
        if key not in node.labels:
            reasons.append(f"nodeSelector {key}={wanted}: node has no such label")
        elif node.labels[key] != wanted:
            reasons.append(f"nodeSelector {key}={wanted}: node has {key}={node.labels[key]}")
    terms = placement.required_terms
    if terms is not None and not any(_term_matches(term, node) for term in terms):
        if terms:
            reasons.append(f"required node affinity: no term matches ({'; '.join(_describe_term(t) for t in terms)})")
        else:
            reasons.append("required node affinity: no nodeSelectorTerms, so no node matches")
    return reasons


# --- required node affinity -----------------------------------------------------------------------------------


def _requirements(term: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    return list(term.get(name) or ())


def _term_matches(term: Mapping[str, Any] | None, node: NodeShape) -> bool:
    if not term:
        return False
    expressions, fields = _requirements(term, "matchExpressions"), _requirements(term, "matchFields")
    if not expressions and not fields:  # "empty or null nodeSelectorTerm matches no objects"
        return False
    return all(_label_requirement_matches(r, node.labels) for r in expressions) and all(
        _field_requirement_matches(r, node.name) for r in fields
    )


def _values(requirement: Mapping[str, Any]) -> list[Any]:
    return list(requirement.get("values") or ())


def _label_requirement_problem(requirement: Mapping[str, Any]) -> str | None:
    """Why Kubernetes would refuse this matchExpressions entry, or None."""
    key, operator, values = requirement.get("key"), requirement.get("operator"), _values(requirement)
    if not key:
        return "no key"
    if operator in _VALUE_OPERATORS:
        return None if values else f"{operator} needs values"
    if operator in _NO_VALUE_OPERATORS:
        return None if not values else f"{operator} takes no values"
    if operator in _NUMERIC_OPERATORS:
        if len(values) != 1:
            return f"{operator} needs exactly one value"
        return None if _int64(values[0]) is not None else f"{operator} needs an integer value"
    return f"unknown operator {operator!r}"


def _label_requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    if _label_requirement_problem(requirement) is not None:
        return False
    key, operator, values = requirement["key"], requirement["operator"], _values(requirement)
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    # Gt / Lt: the label's value, read as an integer, against the single value
    label = _int64(labels[key]) if present else None
    if label is None:
        return False
    bound = _int64(values[0])
    assert bound is not None  # checked by _label_requirement_problem
    return label > bound if operator == "Gt" else label < bound


def _field_requirement_problem(requirement: Mapping[str, Any]) -> str | None:
    """Why this matchFields entry cannot be evaluated (Kubernetes supports metadata.name In/NotIn, one value)."""
    key, operator, values = requirement.get("key"), requirement.get("operator"), _values(requirement)
    if key != "metadata.name":
        return f"unsupported field {key!r}"
    if operator not in _VALUE_OPERATORS:
        return f"operator {operator!r} not supported on fields"
    if len(values) != 1:
        return f"{operator} on a field needs exactly one value"
    return None


def _field_requirement_matches(requirement: Mapping[str, Any], node_name: str) -> bool:
    if _field_requirement_problem(requirement) is not None:
        return False
    (value,) = _values(requirement)
    return (node_name == value) == (requirement["operator"] == "In")


def _int64(text: Any) -> int | None:
    """strconv.ParseInt(text, 10, 64): optional sign, decimal digits, 64-bit range; None otherwise."""
    if not isinstance(text, str) or not _INT64.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _describe_requirement(requirement: Mapping[str, Any], problem: str | None) -> str:
    key, operator, values = requirement.get("key"), requirement.get("operator"), _values(requirement)
    text = f"{key} {operator}"
    if values or operator not in _NO_VALUE_OPERATORS:
        text += f" [{', '.join(str(v) for v in values)}]"
    return f"{text} (invalid: {problem})" if problem else text


def _describe_term(term: Mapping[str, Any] | None) -> str:
    if not term:
        return "empty term"
    parts = [_describe_requirement(r, _label_requirement_problem(r)) for r in _requirements(term, "matchExpressions")]
    parts += [_describe_requirement(r, _field_requirement_problem(r)) for r in _requirements(term, "matchFields")]
    return " and ".join(parts) if parts else "empty term"


# --- reading the pod spec ---------------------------------------------------------------------------------------


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(value).__name__} {value!r}")
    return value


def _sequence(value: Any, where: str) -> Sequence[Any]:
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValueError(f"{where} must be a list, got {type(value).__name__} {value!r}")
    return value


def _checked_term(term: Any, where: str) -> Mapping[str, Any]:
    """A nodeSelectorTerm with the right shape (a null term becomes the empty term, which matches nothing)."""
    term = _mapping(term, where)
    for name in ("matchExpressions", "matchFields"):
        for i, requirement in enumerate(_sequence(term.get(name), f"{where}.{name}")):
            at = f"{where}.{name}[{i}]"
            requirement = _mapping(requirement, at)
            for field in ("key", "operator"):
                if not isinstance(requirement.get(field), str):
                    raise ValueError(f"{at}.{field} must be a string, got {requirement.get(field)!r}")
            for value in _sequence(requirement.get("values"), f"{at}.values"):
                if not isinstance(value, str):
                    raise ValueError(
                        f"{at}.values: {value!r} is a {type(value).__name__}, not a string (quote it in YAML)"
                    )
    return dict(term)
