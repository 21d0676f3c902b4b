"""Stack promotion: a release block moves from one stack to the next, stage by stage and wave by wave, only after
the previous step proved healthy.

- **Policy** (``promotion.yaml`` at the project root): ordered stages, each with ordered waves of regions, the soak
  time a release must run verified in the stage before it moves on, and the gates a promotion *into* the stage
  must pass. Validated like stack files (``file:line: key.path: message``).
- **What moves**: the ``gpufleet:release`` block, and only it. The target file is edited as text: the lines of its
  release block are replaced by the source's, so comments, key order and everything outside the block stay
  byte-identical; the result is validated before it is written.
- **Order**: a release comes from the previous stage or an earlier wave of the target's stage; any other source
  (a stage the policy does not list, a skipped stage, a later wave) is refused as ``order``.
- **Gates** (refusals say what to do; ``--force`` with a reason overrides them and ``order``, and the ledger records
  it): ``earlier_waves`` (every earlier wave of the target's stage runs the release), ``verified`` (the source has a
  successful verification of the release, and no failed one after it), ``soaked`` (the source's stage soak time
  has passed since the release's verifications there began to pass, counted from when they were written; a failed
  one restarts it), and, where a stage lists it, ``canary_verified`` (the target's canary hosts passed the verify
  playbook, its DCGM diagnostic at the target's level included, in the latest report recorded for the release the
  target runs now), and, where a stage lists it, ``preflight`` (Azure's answer for the target stack's subscription:
  its sizes offered, zones usable, quota at max nodes plus surge; :mod:`gpufleet.azure.preflight`). An invalid source
  or result, or uncommitted changes in either stack, are never forced.
- **Ledger**: :mod:`gpufleet.fleet.promote_ledger` (hash-chained, appended under a lock).

Pure except for the I/O at the edges (:func:`load_policy`, the git helpers, :meth:`StackFiles.read`,
:func:`write_target`, and the ``preflight`` gate's reads of Azure, which :func:`decide` takes as a function).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from gpufleet.azure.cost import CostDelta, cost_delta, stack_cost
from gpufleet.catalog import Catalog
from gpufleet.common.atomic import write_atomic
from gpufleet.common.diagnostics import Diagnostic, Finding
from gpufleet.common.yamldoc import Locator, findings_from_validation, located, plain, read_yaml
from gpufleet.fleet.promote_ledger import LEDGER_FILE, Entry, iso, parse_time
from gpufleet.spec.load import NAMESPACE, LoadedStack, load_stack_text, stack_name_from_file
from gpufleet.spec.models import RegionName, Stack
from gpufleet.spec.models import Stage as StageName
from gpufleet.spec.types import StrictModel, matching

if TYPE_CHECKING:
    from gpufleet.azure.preflight import Preflight

POLICY_FILE = "promotion.yaml"
RELEASE_KEY = f"{NAMESPACE}:release"
Gate = Literal["earlier_waves", "verified", "soaked", "canary_verified", "preflight"]
GATES: tuple[Gate, ...] = ("earlier_waves", "verified", "soaked", "canary_verified", "preflight")
DEFAULT_GATES: tuple[Gate, ...] = ("earlier_waves", "verified", "soaked")  # canary_verified, preflight: opted in
ORDER = "order"  # a source out of the policy's order: not a policy gate (always checked), but forceable like one
FORCEABLE = (*GATES, ORDER)
LEDGER_GATE = "ledger"  # a stack file that disagrees with the ledger: never forceable (gpufleet promote repair)

SoakTime = Annotated[str, matching(r"\d+[mhd]", "a duration in minutes, hours or days, e.g. '30m', '24h', '2d'")]


def is_stack_name(name: str) -> bool:
    """``<stage>-<region>`` as stack files name them (``prod-westeurope``): no path, nothing else."""
    stage, sep, region = name.partition("-")
    try:
        TypeAdapter(StageName).validate_python(stage)
        TypeAdapter(RegionName).validate_python(region)
    except ValidationError:
        return False
    return bool(sep)


def parse_duration(text: str) -> dt.timedelta:
    unit = {"m": "minutes", "h": "hours", "d": "days"}[text[-1]]
    return dt.timedelta(**{unit: int(text[:-1])})


class PolicyStage(StrictModel):
    name: StageName
    waves: list[Annotated[list[RegionName], Field(min_length=1)]] = Field(min_length=1)
    soak: SoakTime = Field("24h", description="how long a release runs verified here before it moves on")
    gates: list[Gate] = Field(default_factory=lambda: list(DEFAULT_GATES), description="what promotions into it need")
    allow_unchecked_preflight: bool = Field(
        False, description="the preflight gate passes when Azure could not be asked (it still refuses a shortfall)"
    )


class Policy(StrictModel):
    stages: list[PolicyStage] = Field(min_length=1)

    def stage(self, name: str) -> PolicyStage | None:
        return next((s for s in self.stages if s.name == name), None)

    def position(self, stack: str) -> tuple[int, int] | None:
        """(stage index, wave index) of a stack ``<stage>-<region>``, or None when the policy does not list it."""
        for i, stage in enumerate(self.stages):
            for j, wave in enumerate(stage.waves):
                if any(f"{stage.name}-{region}" == stack for region in wave):
                    return i, j
        return None

    def stacks(self) -> list[str]:
        """Every stack the policy names, in promotion order."""
        return [f"{s.name}-{region}" for s in self.stages for wave in s.waves for region in wave]


@dataclass
class LoadedPolicy:
    file: str
    policy: Policy | None
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _policy_findings(policy: Policy, root: Path) -> Iterator[Finding]:
    seen_stages: set[str] = set()
    stack_files = {stack_name_from_file(p): p for p in root.glob("Pulumi.*.y*ml") if p.name != "Pulumi.yaml"}
    for i, stage in enumerate(policy.stages):
        if stage.name in seen_stages:
            yield Finding(("stages", i, "name"), f"stage {stage.name!r} is listed twice")
        seen_stages.add(stage.name)
        seen_regions: set[str] = set()
        for j, wave in enumerate(stage.waves):
            for k, region in enumerate(wave):
                path = ("stages", i, "waves", j, k)
                if region in seen_regions:
                    yield Finding(path, f"region {region!r} is in two waves of stage {stage.name}")
                seen_regions.add(region)
                if f"{stage.name}-{region}" not in stack_files:
                    yield Finding(path, f"no stack file Pulumi.{stage.name}-{region}.yaml in {root}")
        for name in sorted(stack_files):
            st, _, region = name.partition("-")
            if st == stage.name and region not in seen_regions:
                yield Finding(
                    ("stages", i, "waves"),
                    f"stack {name} is in no wave of stage {stage.name}: add {region!r} to a wave, so it is promoted",
                )


def load_policy(root: Path) -> LoadedPolicy:
    """``root/promotion.yaml``, validated: the structure, then its stages and regions against the stack files."""
    path = root / POLICY_FILE
    file = str(path)
    if not path.is_file():
        return LoadedPolicy(file, None, [Diagnostic(file, 1, "", f"no promotion policy; create {POLICY_FILE}")])
    doc, errors = read_yaml(file)
    if errors:
        return LoadedPolicy(file, None, errors)
    locator = Locator(doc)
    try:
        policy = Policy.model_validate(plain(doc))
    except ValidationError as exc:
        return LoadedPolicy(file, None, located(findings_from_validation(exc, Policy), locator, file))
    diagnostics = located(_policy_findings(policy, root), locator, file)
    return LoadedPolicy(file, policy if not diagnostics else None, diagnostics)


# -- releases and the stack files' release blocks ---------------------------------------------------------------


def release_hash(release: dict[str, Any]) -> str:
    """A short, stable name of a release block's content (key order does not matter)."""
    return hashlib.sha256(json.dumps(release, sort_keys=True).encode()).hexdigest()[:12]


def _block_span(lines: Sequence[str]) -> tuple[int, int, int]:
    """(first line, end line, indent) of the ``gpufleet:release`` block: its key line and every line after it that
    is indented deeper, or blank/comment lines between them (trailing blank and comment lines stay outside)."""
    key = re.compile(rf"^(\s*){re.escape(RELEASE_KEY)}\s*:")
    for start, line in enumerate(lines):
        m = key.match(line)
        if m:
            indent = len(m.group(1))
            end = start + 1
            last = start + 1
            while end < len(lines):
                text = lines[end]
                stripped = text.strip()
                if stripped and not stripped.startswith("#"):
                    if len(text) - len(text.lstrip()) <= indent:
                        break
                    last = end + 1
                end += 1
            return start, last, indent
    raise ValueError(f"no {RELEASE_KEY} block")


def _child_indent(lines: Sequence[str], start: int, end: int, default: int) -> int:
    for line in lines[start + 1 : end]:
        if line.strip() and not line.strip().startswith("#"):
            return len(line) - len(line.lstrip())
    return default


def _indented(line: str, indent: int) -> str:
    return " " * max(indent, 0) + line.lstrip(" ") if line.strip() else line


def release_block_text(text: str) -> str:
    """The ``gpufleet:release`` block of a stack file's text, its lines as they are: a source of its own for
    :func:`replace_release_block` (the ledger keeps it with a promotion, so one can be completed or undone)."""
    lines = text.splitlines(keepends=True)
    start, end, _ = _block_span(lines)
    return "".join(lines[start:end])


def replace_release_block(target: str, source: str) -> str:
    """``target`` with its release block's lines replaced by ``source``'s, re-indented to the target's style (its
    key's indentation and its entries' indentation)."""
    t_lines, s_lines = target.splitlines(keepends=True), source.splitlines(keepends=True)
    t_start, t_end, t_indent = _block_span(t_lines)
    s_start, s_end, s_indent = _block_span(s_lines)
    t_child = _child_indent(t_lines, t_start, t_end, t_indent + 2)
    s_child = _child_indent(s_lines, s_start, s_end, s_indent + 2)
    block = [_indented(s_lines[s_start], t_indent)]
    for line in s_lines[s_start + 1 : s_end]:
        current = len(line) - len(line.lstrip(" "))
        block.append(_indented(line, t_child + current - s_child))
    if not block[-1].endswith("\n"):
        block[-1] += "\n"
    return "".join(t_lines[:t_start] + block + t_lines[t_end:])


# -- the git repository (the stack files must be in one) -------------------------------------------------------

GIT_TIMEOUT_S = 60


class GitError(RuntimeError):
    """git is missing or failed: promotion refuses rather than skip a check (the message names the command)."""


PROMOTION_NEEDS_GIT = "promotion needs the stack files in a git repository (git init, then commit them)"


def git(root: Path, *args: str, needs: str = PROMOTION_NEEDS_GIT) -> str:
    """``git -C root ARGS``'s output; GitError when git is missing, fails or hangs (``needs`` says, after a failure,
    what needed git)."""
    command = f"git {' '.join(args)}"
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
            timeout=GIT_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise GitError(
            f"git is not installed (or not on PATH): promotion needs it to check the stack files ({command})"
        ) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"'{command}' in {root} could not run: {exc}") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise GitError(f"'{command}' failed in {root}: {why}; {needs}")
    return proc.stdout


def git_commit(root: Path) -> str:
    """HEAD of the git repository holding ``root`` (GitError when there is none)."""
    return git(root, "rev-parse", "HEAD").strip()


def uncommitted(root: Path, files: Sequence[Path]) -> set[Path]:
    """Those of ``files`` that differ from git's HEAD, staged or not, or are untracked (GitError outside a git
    repository, or when git fails)."""
    if not files:
        return set()
    top = Path(git(root, "rev-parse", "--show-toplevel").strip())
    listed = git(root, "status", "--porcelain", "-z", "--untracked-files=all", "--", *map(str, files))
    changed = {(top / entry[3:]).resolve() for entry in listed.split("\0") if len(entry) > 3}
    return {f for f in files if f.resolve() in changed}


def last_change(root: Path, file: Path) -> dt.datetime | None:
    """A committed file's last change: the commit time of the last commit that touched it (None: never committed)."""
    out = git(root, "log", "-1", "--format=%cI", "--", str(file)).strip()
    return parse_time(out) if out else None


@dataclass
class StackFiles:
    """The stack files a promotion looks at, read once (the only I/O of deciding and of status): each stack's text
    (None when it has no file) and whether git has uncommitted changes in it."""

    root: Path
    texts: dict[str, str | None]
    changed: set[str]
    _releases: dict[str, tuple[dict[str, Any] | None, list[Diagnostic]]] = field(default_factory=dict, repr=False)
    _loaded: dict[str, LoadedStack] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, root: Path, names: Sequence[str]) -> StackFiles:
        paths = {name: root / f"Pulumi.{name}.yaml" for name in dict.fromkeys(names)}
        texts = {name: (path.read_text(encoding="utf-8") if path.is_file() else None) for name, path in paths.items()}
        dirty = uncommitted(root, [path for name, path in paths.items() if texts[name] is not None])
        return cls(root, texts, {name for name, path in paths.items() if path in dirty})

    def path(self, name: str) -> Path:
        return self.root / f"Pulumi.{name}.yaml"

    def loaded(self, name: str) -> LoadedStack | None:
        """The stack file validated (parsed once); None when there is no file."""
        text = self.texts.get(name)
        if text is None:
            return None
        if name not in self._loaded:
            self._loaded[name] = load_stack_text(text, str(self.path(name)))
        return self._loaded[name]

    def release(self, name: str) -> tuple[dict[str, Any] | None, list[Diagnostic]]:
        """The stack's release pins, or None with the diagnostics that say why not (parsed once)."""
        if name not in self._releases:
            loaded = self.loaded(name)
            if loaded is None:
                self._releases[name] = (
                    None,
                    [Diagnostic(str(self.path(name)), 1, "", "cannot read: No such file or directory")],
                )
            else:
                ok = loaded.ok and loaded.stack is not None
                self._releases[name] = (
                    (loaded.stack.release.model_dump(), []) if ok else (None, loaded.diagnostics)  # type: ignore[union-attr]
                )
        return self._releases[name]


# -- deciding a promotion --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verification:
    """A release's verification state on a stack: ``result`` of the latest verification; ``time`` is when the
    current run of successful verifications began (the soak starts there: the earliest time one of them is known
    by, see :attr:`Entry.since`), or when the latest one failed."""

    time: dt.datetime
    result: str


def last_verification(entries: Sequence[Entry], stack: str, release: str) -> Verification | None:
    """How ``release`` has fared on ``stack`` (None: never verified)."""
    found = [e for e in entries if e.kind == "verify" and e.stack == stack and e.release == release]
    ordered = sorted(found, key=lambda e: (e.time, e.line))  # by time; of two at the same time, the later line
    if not ordered:
        return None
    if ordered[-1].result != "ok":
        return Verification(ordered[-1].time, ordered[-1].result)
    start = len(ordered) - 1
    while start > 0 and ordered[start - 1].result == "ok":
        start -= 1
    return Verification(min(e.since for e in ordered[start:]), "ok")


def canary_problem(files: StackFiles, entries: Sequence[Entry], target: str) -> str | None:
    """Why ``target``'s canary hosts (``gpufleet:baremetal.verify.canaries``) do not pass the ``canary_verified``
    gate, or None when they do: each is ``ok`` in the latest verify report recorded for the release the target runs
    now (``gpufleet promote record TARGET --report FILE``), with DCGM's diagnostic at the target's level or higher."""
    from gpufleet.fleet.dcgm_diag import diag_level

    loaded = files.loaded(target)
    if loaded is None or loaded.stack is None or not loaded.ok:
        return None  # refused as invalid already
    stack, file = loaded.stack, files.path(target).name
    bm = stack.baremetal
    if bm is None or not bm.verify.canaries:
        return f"{file} names no canary hosts: list them under gpufleet:baremetal.verify.canaries"
    level = diag_level(stack.stage, bm.verify.dcgm_diag_level)
    release = release_hash(stack.release.model_dump())
    reports = [e for e in entries if e.kind == "verify" and e.stack == target and e.release == release and e.hosts]
    todo = (
        f"run the verify playbook on them with -e gpufleet_verify_report_file=report.json, then: gpufleet promote"
        f" record {target} --report report.json"
    )
    if not reports:
        return f"{target} has no verify report of its hosts recorded for release {release} (the one it runs): {todo}"
    latest = max(reports, key=lambda e: (e.time, e.line))
    problems = []
    for name in bm.verify.canaries:
        host = latest.hosts.get(name)
        if host is None:
            problems.append(f"{name} is not in it")
        elif host.get("result") != "ok":
            problems.append(f"{name} did not pass ({host.get('result')})")
        elif (host.get("dcgm_level") or 0) < level:
            ran = f"level {host['dcgm_level']}" if host.get("dcgm_level") else "none"
            problems.append(f"{name} ran DCGM's diagnostic at {ran}; {target} requires level {level}")
    if not problems:
        return None
    return f"canary hosts of {target}, in the verify report of {iso(latest.time)}: {'; '.join(problems)}: {todo}"


def report_hosts(doc: Any, stack: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """From a verify report (verify.yml's ``-e gpufleet_verify_report_file``, JSON read): its result (``ok`` when
    every host passed) and per host what the ledger keeps, ``{result, dcgm_level}``. ValueError saying what is
    wrong when it is no report of ``stack`` (the report names the stack, or its stack file)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("hosts"), dict) or not doc["hosts"]:
        raise ValueError(
            "it is no verify report with hosts (verify.yml -e gpufleet_verify_report_file=PATH writes one)"
        )
    named = str(doc.get("stack") or "")
    name = stack_name_from_file(Path(named)) if named.endswith((".yaml", ".yml")) else named
    if name != stack:
        raise ValueError(f"it is a report of stack {named or '(none)'!r}, not of {stack}")
    hosts: dict[str, dict[str, Any]] = {}
    for host, state in doc["hosts"].items():
        if not isinstance(state, dict) or not isinstance(state.get("result"), str):
            raise ValueError(f"host {host!r} has no result")
        dcgm = state.get("dcgm")
        level = dcgm.get("level") if isinstance(dcgm, dict) else None
        hosts[str(host)] = {"result": state["result"], "dcgm_level": level if isinstance(level, int) else None}
    result = "ok" if doc.get("ok") is True and all(h["result"] == "ok" for h in hosts.values()) else "failed"
    return result, hosts


def order_problem(policy: Policy, source: str, target: str) -> str | None:
    """Why ``source`` is not where the policy's order takes ``target``'s release from, or None when it is: a stack
    of the previous stage, or of an earlier wave of the target's stage."""
    i, j = policy.position(target) or (0, 0)
    src = policy.position(source)
    if src is not None and (src[0] == i - 1 or (src[0] == i and src[1] < j)):
        return None
    stage = policy.stages[i]
    froms = ([f"stage {policy.stages[i - 1].name}"] if i > 0 else []) + (
        [f"an earlier wave of {stage.name}"] if j else []
    )
    allowed = f"a release reaches {target} from {' or '.join(froms)}" if froms else f"nothing is promoted into {target}"
    if src is None:
        why = f"{source} is not a stack of {POLICY_FILE} (stage {source.split('-', 1)[0]!r} is not in it)"
    elif src[0] < i:
        why = f"{source} skips stage {policy.stages[i - 1].name}"
    else:
        why = f"{source} does not come before {target} in {POLICY_FILE}"
    return f"{why}; {allowed}"


def default_source(policy: Policy, target: str) -> str | None:
    """Where a target's release comes from: the previous stage's stack in the same region; else the previous wave
    of the same stage; else the previous stage's last wave. None for the first wave of the first stage."""
    pos = policy.position(target)
    if pos is None:
        return None
    i, j = pos
    region = target.split("-", 1)[1]
    if i > 0:
        previous = policy.stages[i - 1]
        if any(region in wave for wave in previous.waves):
            return f"{previous.name}-{region}"
    if j > 0:
        return f"{policy.stages[i].name}-{policy.stages[i].waves[j - 1][0]}"
    if i > 0:
        previous = policy.stages[i - 1]
        return f"{previous.name}-{previous.waves[-1][0]}"
    return None


def _human(delta: dt.timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    return f"{hours // 24}d{hours % 24}h"


@dataclass
class Refusal:
    gate: str  # one of GATES, ORDER, or "invalid" / "uncommitted" (never forceable)
    message: str

    @property
    def forceable(self) -> bool:
        return self.gate in FORCEABLE


@dataclass
class Decision:
    source: str
    target: str
    release: str  # hash of the release that would move
    previous: str  # the target's release hash now
    pins: dict[str, tuple[str | None, str | None]]  # key -> (target now, after)
    refusals: list[Refusal]
    new_text: str | None  # the target file after the promotion (None when it cannot be built)
    before: Stack | None = None  # the target stack now (None: invalid)
    after: Stack | None = None  # the target stack with the new text (None: invalid, or not built)

    @property
    def changes(self) -> bool:
        return self.release != self.previous

    def cost_delta(self, catalog: Catalog) -> CostDelta | None:
        """What the promotion does to the target's cost, computed from the target stack before and after (not
        assumed: a release block moves alone, but YAML aliases elsewhere in the file may name its anchors). None
        when either side is invalid."""
        if self.before is None or self.after is None:
            return None
        return cost_delta(stack_cost(self.before, catalog), stack_cost(self.after, catalog))

    def blocking(self, force: bool) -> list[Refusal]:
        return [r for r in self.refusals if not (force and r.forceable)]


def target_gates(policy: Policy, target: str) -> list[Gate]:
    """The gates of the target's stage; the default ones for a stack the policy does not list."""
    stage = policy.stage(target.split("-", 1)[0]) if policy.position(target) else None
    return stage.gates if stage else list(DEFAULT_GATES)


PreflightRun = Callable[[LoadedStack], "Preflight"]


def preflight_deployed(loaded: LoadedStack) -> Preflight:
    """The ``preflight`` gate's question: Azure's answer for the target stack, taken as deployed (a promotion changes
    a stack that runs, so its pools' minimum nodes are in the usage already; the upgrade's surge and the growth to
    max nodes are what must fit), cached as ``gpufleet preflight`` caches it."""
    from gpufleet.azure.arm import run_preflight

    return run_preflight(loaded, deployed=True)


def _preflight_refusals(stage: PolicyStage | None, target: str, report: Preflight) -> list[Refusal]:
    """The ``preflight`` gate: a shortfall or an unavailable size or zone refuses with ``gpufleet preflight``'s lines;
    checks Azure could not answer refuse too, unless the stage allows them."""
    refusals = []
    again = f"gpufleet preflight {target} --deployed"
    if report.failed:
        lines = "\n  ".join(str(c) for c in report.failed)
        refusals.append(Refusal("preflight", f"pulumi up of {target} would fail ({again}):\n  {lines}"))
    if report.unchecked and not (stage is not None and stage.allow_unchecked_preflight):
        reasons = "; ".join(dict.fromkeys(c.detail for c in report.unchecked))
        name = stage.name if stage is not None else target.split("-", 1)[0]
        refusals.append(
            Refusal(
                "preflight",
                f"{len(report.unchecked)} preflight check(s) of {target} not made: {reasons}; fix that and run"
                f" {again}, or let stage {name} pass unchecked (allow_unchecked_preflight: true in {POLICY_FILE})",
            )
        )
    return refusals


def _gate_refusals(
    files: StackFiles,
    policy: Policy,
    entries: Sequence[Entry],
    source: str,
    target: str,
    release: str,
    now: dt.datetime,
) -> list[Refusal]:
    """The refusals of the target stage's gates (``earlier_waves``, ``verified``, ``soaked``)."""
    refusals: list[Refusal] = []
    target_pos = policy.position(target)
    gates = target_gates(policy, target)
    if "earlier_waves" in gates and target_pos is not None:
        i, j = target_pos
        stage = policy.stages[i]
        for w, wave in enumerate(stage.waves[:j], 1):
            for region in wave:
                earlier = f"{stage.name}-{region}"
                rel, _ = files.release(earlier)
                if rel is None or release_hash(rel) != release:
                    refusals.append(
                        Refusal(
                            "earlier_waves",
                            f"{stage.name} wave {w} ({earlier}) does not run release {release} yet: promote it"
                            f" first (gpufleet promote {earlier})",
                        )
                    )
    verified = last_verification(entries, source, release)
    if "verified" in gates and (verified is None or verified.result != "ok"):
        state = "no verification" if verified is None else f"its last verification failed ({iso(verified.time)})"
        refusals.append(
            Refusal(
                "verified",
                f"{source} has {state} of release {release}: deploy it there (pulumi up), run the verify playbook,"
                f" then record the outcome: gpufleet promote record {source} --result ok",
            )
        )
    src_stage = policy.stage(source.split("-", 1)[0])
    if "soaked" in gates and src_stage is not None and verified is not None and verified.result == "ok":
        soak = parse_duration(src_stage.soak)
        ran = now - verified.time
        if ran < soak:
            refusals.append(
                Refusal(
                    "soaked",
                    f"release {release} has soaked {_human(ran)} in {source} since its verification; stage"
                    f" {src_stage.name} needs {src_stage.soak}: wait until {iso(verified.time + soak)}",
                )
            )
    if "canary_verified" in gates:
        problem = canary_problem(files, entries, target)
        if problem:
            refusals.append(Refusal("canary_verified", problem))
    return refusals


def decide(
    files: StackFiles,
    policy: Policy,
    entries: Sequence[Entry],
    source: str,
    target: str,
    now: dt.datetime,
    preflight: PreflightRun | None = preflight_deployed,
) -> Decision:
    """Everything ``gpufleet promote`` would do and every gate it would refuse on. Pure: ``files`` holds what it
    reads (:meth:`StackFiles.read` with the policy's stacks), ``preflight`` asks Azure for the ``preflight`` gate
    (None: that gate is not evaluated)."""
    tgt_path = files.path(target)
    refusals: list[Refusal] = []
    src_release, src_diags = files.release(source)
    tgt_release, tgt_diags = files.release(target)
    for name, diags in ((source, src_diags), (target, tgt_diags)):
        if diags:
            lines = "\n  ".join(str(d) for d in diags)
            refusals.append(Refusal("invalid", f"stack {name} is invalid; fix it first:\n  {lines}"))
    if src_release is None or tgt_release is None:
        return Decision(source, target, "", "", {}, refusals, None)

    release, previous = release_hash(src_release), release_hash(tgt_release)
    keys = list(dict.fromkeys([*tgt_release, *src_release]))
    pins = {k: (tgt_release.get(k), src_release.get(k)) for k in keys}
    new_text = replace_release_block(files.texts[target] or "", files.texts[source] or "")
    result = load_stack_text(new_text, str(tgt_path))
    target_loaded = files.loaded(target)
    before = target_loaded.stack if target_loaded is not None else None
    if not result.ok:
        lines = "\n  ".join(str(d) for d in result.diagnostics)
        refusals.append(Refusal("invalid", f"{target} with {source}'s release would be invalid:\n  {lines}"))
        new_text = None
    for name in dict.fromkeys((target, source)):
        if name in files.changed:
            why = "the promotion is the only change to review" if name == target else "the release moved is committed"
            refusals.append(
                Refusal(
                    "uncommitted",
                    f"{files.path(name).name} has uncommitted changes; commit or stash them first, so {why}",
                )
            )
    for mismatch in mismatches(files, policy, entries, list(dict.fromkeys((source, target)))).values():
        refusals.append(Refusal(LEDGER_GATE, mismatch.message()))
    problem = order_problem(policy, source, target)
    if problem:
        refusals.append(Refusal(ORDER, f"{problem}; --force --reason TEXT takes it from {source} anyway (recorded)"))
    refusals += _gate_refusals(files, policy, entries, source, target, release, now)
    if preflight is not None and result.ok and "preflight" in target_gates(policy, target):
        refusals += _preflight_refusals(policy.stage(target.split("-", 1)[0]), target, preflight(result))
    after = result.stack if result.ok else None
    return Decision(source, target, release, previous, pins, refusals, new_text, before, after)


def write_target(path: Path, text: str) -> None:
    """Replace the file crash-safely (a reader, or the file after a crash, has the old or the new text, never part
    of one: :func:`gpufleet.common.atomic.write_atomic`)."""
    write_atomic(path, text)


# -- the ledger against the stack files ---------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """A stack file whose release is not the one the ledger says it holds: a promotion whose intent the ledger has
    but not its outcome (``interrupted``: the process died, or the machine, between the two), or a release changed
    outside ``gpufleet promote`` after the last promotion into the stack. ``expected`` is the release the ledger's
    ``entry`` (that intent, or the last promotion) brings; ``holds`` the file's (None: the file is invalid)."""

    stack: str
    file: str
    holds: str | None
    expected: str
    entry: Entry
    interrupted: bool

    @property
    def previous(self) -> str | None:
        """The release the interrupted promotion replaced."""
        return self.entry.data.get("previous_release")

    def message(self) -> str:
        e = self.entry
        if self.interrupted:
            holds = (
                "the promoted release"
                if self.holds == e.release
                else "the release before"
                if self.holds == self.previous
                else f"release {self.holds or '(invalid)'}, neither the one before nor the promoted one"
            )
            return (
                f"{self.file}: the promotion of release {e.release} from {e.source} into {self.stack} was interrupted"
                f" ({LEDGER_FILE}:{e.line} has its intent, no outcome); the file holds {holds}. Run 'gpufleet promote"
                f" repair --complete {self.stack}' (the file gets release {e.release}) or '--roll-back {self.stack}'"
                f" (it keeps or gets back {self.previous})"
            )
        return (
            f"{self.file} holds release {self.holds}, but the last promotion into {self.stack} ({LEDGER_FILE}:{e.line})"
            f" brought {self.expected}: a change made outside gpufleet promote. Run 'gpufleet promote repair"
            f" --complete {self.stack} --reason TEXT' (the ledger records the file's release) or '--roll-back"
            f" {self.stack}' (the file gets {self.expected} back)"
        )


def mismatches(
    files: StackFiles, policy: Policy, entries: Sequence[Entry], names: Sequence[str] | None = None
) -> dict[str, Mismatch]:
    """The stacks (``names``, default the policy's) whose file disagrees with the ledger. A release edited by hand
    in the first stage is how a release starts: only an interrupted promotion counts there. Pure."""
    pending: dict[str, Entry] = {}
    last: dict[str, Entry] = {}
    for e in entries:
        if e.kind != "promote":
            continue
        if e.result == "started":
            pending[e.stack] = e
            continue
        pending.pop(e.stack, None)
        if e.result == "ok":  # failed: undone, the promotion before it stands
            last[e.stack] = e
    first_stage = {f"{policy.stages[0].name}-{region}" for wave in policy.stages[0].waves for region in wave}
    found = {}
    for name in names if names is not None else policy.stacks():
        if name not in pending and (name not in last or name in first_stage):
            continue
        rel, _ = files.release(name)
        holds = release_hash(rel) if rel is not None else None
        if name in pending:
            entry = pending[name]
            found[name] = Mismatch(name, files.path(name).name, holds, entry.release, entry, interrupted=True)
        elif holds is not None and holds != last[name].release:
            found[name] = Mismatch(name, files.path(name).name, holds, last[name].release, last[name], False)
    return found


# What a repair writes in the ledger's ``note``.
COMPLETED = "completed by gpufleet promote repair"
ROLLED_BACK = "rolled back by gpufleet promote repair"
RECORDED_HAND_EDIT = "recorded by gpufleet promote repair: a release changed outside gpufleet promote"
ROLLED_BACK_HAND_EDIT = "rolled back by gpufleet promote repair: a release changed outside gpufleet promote"


class RepairError(ValueError):
    """A repair that cannot be done as asked (the message says why, and what to do instead)."""


@dataclass(frozen=True)
class RepairStep:
    """What ``promote repair --complete/--roll-back`` does to one stack: the file's new text (None: it stays) and
    the ledger entry that records it (its release, result and note, and the other fields it keeps)."""

    text: str | None
    release: str
    result: Literal["ok", "failed"]
    note: str
    fields: dict[str, Any]


def plan_repair(
    files: StackFiles, problem: Mismatch, action: Literal["complete", "roll-back"], reason: str | None
) -> RepairStep:
    """How to complete or roll back an interrupted promotion, or record or undo a hand-made release. The text is
    validated; RepairError when the ledger lacks what the step needs. Pure."""
    e, current = problem.entry, files.texts[problem.stack] or ""
    keep = {k: e.data[k] for k in ("from", "previous_release", "pins", "forced", "reason", "block") if k in e.data}
    if problem.interrupted:
        want = e.data.get("block") if action == "complete" else e.data.get("previous_block")
        have = e.release if action == "complete" else problem.previous
        text = None if problem.holds == have else replace_release_block(current, str(want))
        done = action == "complete"
        release, result, note, fields = e.release, "ok" if done else "failed", COMPLETED if done else ROLLED_BACK, keep
    elif action == "complete":
        if not (reason and reason.strip()):
            raise RepairError("--complete of a release changed by hand needs --reason TEXT: the ledger records why")
        text, release, result, note = None, str(problem.holds), "ok", RECORDED_HAND_EDIT
        fields = {
            "previous_release": problem.expected,
            "forced": [LEDGER_GATE],
            "reason": reason,
            "block": release_block_text(current),
        }
    else:
        block = e.data.get("block")
        if block is None:
            raise RepairError(
                f"the ledger has no copy of release {problem.expected}'s block ({LEDGER_FILE}:{e.line} was written by"
                f" an older gpufleet): restore it from git (git log -p -- {problem.file}), commit, and run repair again"
            )
        text, release, result = replace_release_block(current, str(block)), str(problem.holds), "failed"
        note, fields = ROLLED_BACK_HAND_EDIT, {"previous_release": problem.expected}
    if text is not None:
        checked = load_stack_text(text, str(files.path(problem.stack)))
        if not checked.ok:
            lines = "\n  ".join(str(d) for d in checked.diagnostics)
            raise RepairError(f"{problem.file} would be invalid; fix it by hand first:\n  {lines}")
    return RepairStep(text, release, result, note, fields)


# -- status ----------------------------------------------------------------------------------------------------


@dataclass
class StackStatus:
    stack: str
    stage: str
    region: str
    wave: int
    release: str | None  # None: invalid stack
    verified: Verification | None
    soaked: str | None  # how long since the successful verification
    soak_needed: str
    next_from: str | None  # the default source
    next_state: str  # "up to date", "ready", "blocked: ...", "first stage", "invalid"
    forced: Entry | None = None  # the promotion that brought the release, when it went past gates
    problem: Mismatch | None = None  # the file disagrees with the ledger (gpufleet promote repair)


def forced_promotion(entries: Sequence[Entry], stack: str, release: str | None) -> Entry | None:
    """The latest promotion of ``release`` into ``stack``, when it was forced (None when it was not, or none)."""
    promoted = [
        e for e in entries if e.kind == "promote" and e.result == "ok" and e.stack == stack and e.release == release
    ]
    return promoted[-1] if promoted and promoted[-1].forced else None


def status(files: StackFiles, policy: Policy, entries: Sequence[Entry], now: dt.datetime) -> list[StackStatus]:
    """Each stack of the policy: its release, verification, soak, what may move next, and whether its release came
    by a forced promotion. Pure (see :func:`decide`): the ``preflight`` gate is not asked (it reads Azure; it runs
    when a promotion is decided)."""
    out = []
    problems = mismatches(files, policy, entries)
    for stage in policy.stages:
        for w, wave in enumerate(stage.waves, 1):
            for region in wave:
                name = f"{stage.name}-{region}"
                rel, _ = files.release(name)
                release = release_hash(rel) if rel is not None else None
                verified = last_verification(entries, name, release) if release else None
                soaked = _human(now - verified.time) if verified and verified.result == "ok" else None
                source = default_source(policy, name)
                if release is None:
                    state = "invalid"
                elif name in problems:
                    why = "interrupted promotion" if problems[name].interrupted else "changed by hand"
                    state = f"blocked (ledger): {why}"
                elif source is None:
                    state = "first stage: edit its release block"
                else:
                    d = decide(files, policy, entries, source, name, now, preflight=None)
                    if d.changes and not d.refusals:
                        state = f"ready: {d.previous} -> {d.release}"
                    elif d.changes:
                        state = f"blocked ({', '.join(dict.fromkeys(r.gate for r in d.refusals))})"
                    else:
                        state = "up to date"
                forced = forced_promotion(entries, name, release)
                out.append(
                    StackStatus(
                        name,
                        stage.name,
                        region,
                        w,
                        release,
                        verified,
                        soaked,
                        stage.soak,
                        source,
                        state,
                        forced,
                        problems.get(name),
                    )
                )
    return out
