"""The stack's GPU charts rendered by a real helm, and where the rendered GPU software would run.

``helm template`` renders the pinned charts with exactly the values the stack installs
(:mod:`gpufleet.gpu_software`, the code the Pulumi program and the Ansible roles use). A values file that every schema
accepts can still deploy nothing, so the rendered objects are then placed on the nodes the stack describes: each AKS
pool (with the labels and taints gpufleet and AKS put on its nodes), the AKS system pool, each bare-metal host group.

Placing GPU software is a fixpoint, because its components label nodes for each other:

- NFD's worker, where it runs on a GPU node, labels it ``feature.node.kubernetes.io/pci-10de.present=true``;
- the GPU Operator (a Deployment; it acts once it runs anywhere) labels nodes with that NFD label
  ``nvidia.com/gpu.present=true``, then adds ``nvidia.com/gpu.deploy.<operand>=true`` for every operand unless the
  node already has that label (gpufleet's ``nvidia.com/gpu.deploy.driver=false`` on AKS-driver pools), and
  ``nvidia.com/gpu.deploy.mig-manager=true`` on MIG-capable GPUs (the operator's ``controllers/state_manager.go``);
- the operands are DaemonSets the operator creates from the ClusterPolicy: node selector
  ``nvidia.com/gpu.deploy.<operand>=true``, tolerations ``spec.daemonsets.tolerations``;
- GPU Feature Discovery, where it runs, labels ``nvidia.com/mig.capable`` and, on nodes whose device-plugin config
  shares GPUs with MPS, ``nvidia.com/mps.capable=true`` (the MPS control daemon selects on it).

The scheduler's part (taints, node selectors, required node affinity) is :mod:`gpufleet.scheduling`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.aks import aks_node_labels
from gpufleet.gpu_software import GPU_OPERATOR_CHART, ChartRelease
from gpufleet.labels import GPU_PRESENT_LABEL, MIG_CONFIG_LABEL
from gpufleet.mig.outputs import DISABLED_CONFIG
from gpufleet.plan import StackPlan
from gpufleet.scheduling import NodeShape, Placement, Taint, why_not

CHARTS_DIR_ENV = "GPUFLEET_CHARTS_DIR"
HELM_SECONDS = 120

NFD_GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."


class ChartError(Exception):
    """The stack's charts cannot be rendered (missing chart, wrong version, helm failed): one line for the user."""


# -- the pinned charts and helm ---------------------------------------------------------------------------------


def charts_dir() -> Path:
    """``$GPUFLEET_CHARTS_DIR``, else ``~/.cache/gpufleet/charts`` (where ``helm pull`` puts them, see docs)."""
    from gpufleet.lab.config import cache_dir

    return Path(os.environ.get(CHARTS_DIR_ENV) or cache_dir() / "charts")


def pull_command(release: ChartRelease, directory: Path) -> str:
    """What a user runs to get the chart: ``helm pull`` from the stack's repository into ``directory``."""
    return f"helm pull {release.chart} --repo {release.repository} --version {release.version} -d {directory}"


def find_chart(release: ChartRelease, directory: Path) -> Path:
    """The chart of ``release`` in ``directory``: ``<chart>-<version>.tgz`` (what ``helm pull`` writes) or an unpacked
    ``<chart>-<version>/`` whose Chart.yaml has that version (the version written with or without its ``v``)."""
    bare = release.version.removeprefix("v")
    names = dict.fromkeys((f"{release.chart}-{release.version}", f"{release.chart}-{bare}", f"{release.chart}-v{bare}"))
    for name in names:
        if (directory / f"{name}.tgz").is_file():
            return directory / f"{name}.tgz"
        unpacked = directory / name
        if unpacked.is_dir():
            found = _chart_yaml_version(unpacked / "Chart.yaml")
            if (found or "").removeprefix("v") != bare:
                raise ChartError(f"{unpacked}/Chart.yaml is version {found!r}, not {release.version}")
            return unpacked
    others = sorted(p.name for p in directory.glob(f"{release.chart}-*")) if directory.is_dir() else []
    have = f" (it has {', '.join(others)})" if others else ""
    raise ChartError(
        f"chart {release.chart} {release.version} is not in {directory}{have}; get it with: "
        f"{pull_command(release, directory)}, or point {CHARTS_DIR_ENV} at a directory that has it"
    )


def _chart_yaml_version(path: Path) -> str | None:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(path.read_text())
    except (OSError, ValueError, YAMLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a Chart.yaml"
        raise ChartError(f"cannot read {path}: {reason}") from None
    return str(data.get("version")) if isinstance(data, dict) else None


def helm_binary() -> str:
    """The helm ``make setup`` installed into the virtualenv, else one on the PATH."""
    beside = Path(sys.executable).parent / "helm"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("helm")
    if found is None:
        raise ChartError("helm is not installed; run `make setup` (it installs a pinned helm into .venv/bin)")
    return found


def kube_version(kubernetes: str) -> str:
    """helm's ``--kube-version`` for a stack's ``release.kubernetes`` (``1.33`` -> ``v1.33.0``)."""
    parts = kubernetes.removeprefix("v").split(".")
    return "v" + ".".join([*parts, "0", "0"][:3])


def helm_template(release: ChartRelease, chart: Path, kubernetes: str, helm: str) -> str:
    """``helm template`` of ``chart`` with the release's values, CRDs included (what a GitOps tool applies)."""
    with tempfile.TemporaryDirectory(prefix="gpufleet-values-") as tmp:
        values = Path(tmp) / "values.json"  # JSON is YAML: helm reads it as a values file
        values.write_text(json.dumps(release.values))
        cmd = [
            helm, "template", release.name, str(chart), "--namespace", release.namespace, "--values", str(values),
            "--kube-version", kube_version(kubernetes), "--include-crds",
        ]  # fmt: skip
        try:
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HELM_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            raise ChartError(f"helm template {release.chart} did not finish in {HELM_SECONDS} s") from None
        except OSError as exc:
            raise ChartError(f"cannot run {helm}: {exc.strerror}") from None
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit status {proc.returncode}"
        raise ChartError(
            f"helm template {release.chart} {release.version} failed: {why} (the chart at {chart} is damaged or not "
            f"the published one: pull it again with {pull_command(release, chart.parent)})"
        )
    return proc.stdout


def parse_objects(text: str) -> list[dict[str, Any]]:
    """The objects of helm's multi-document YAML stream (empty documents dropped). PyYAML's C loader: the CRDs make
    the GPU Operator's output 360 KB, which ruamel's loader takes 0.6 s to read and this 0.04 s."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return [doc for doc in yaml.load_all(text, Loader=loader) if isinstance(doc, dict)]
    except yaml.YAMLError as exc:
        raise ChartError(f"helm's output is not YAML: {exc}") from None


# -- where the rendered software runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A pool or host group as its nodes will look to the scheduler."""

    name: str
    kind: str  # "GPU pool", "system pool", "host group"
    node: NodeShape
    gpu: bool
    mig_capable: bool = False
    driver_by_operator: bool = False  # the GPU Operator's driver daemonset is meant to run here
    mps: bool = False  # the node's device-plugin config shares GPUs with MPS


def stack_targets(plan: StackPlan, chart: str) -> list[Target]:
    """The nodes the stack's GPU software must serve: AKS pools (gpufleet's labels and taints plus AKS's own) and
    the system pool, or bare-metal host groups (the labels the ``chart``'s role sets)."""
    targets: list[Target] = []
    if plan.cluster is not None:
        system = plan.cluster.system_pool
        labels = aks_node_labels(system.name, system.vm_size, mode="system", gpu=False)
        taints = tuple(Taint.parse(t) for t in plan.cluster.system_pool_taints)
        targets.append(Target(system.name, "system pool", NodeShape(system.name, labels, taints), gpu=False))
        for pool in plan.pools:
            labels = {**aks_node_labels(pool.aks_name, pool.vm_size, mode="user", gpu=True), **pool.labels}
            taints = tuple(Taint.parse(t) for t in pool.taints)
            targets.append(
                Target(
                    pool.name,
                    "GPU pool",
                    NodeShape(pool.name, labels, taints),
                    gpu=True,
                    mig_capable=pool.mig_capable,
                    driver_by_operator=pool.driver == "operator",
                    mps=pool.sharing.mode == "mps",
                )
            )
    for group in plan.host_groups:
        labels = {"kubernetes.io/os": "linux", **group.node_labels[chart]}
        targets.append(
            Target(
                group.name,
                "host group",
                NodeShape(group.name, labels),
                gpu=group.gpu_model is not None,
                mig_capable=bool(group.mig_capable),
            )
        )
    return targets


# The GPU Operator's operands: ClusterPolicy spec key, DaemonSet name, the node label the operator sets to deploy it
# (gpu-operator controllers/state_manager.go gpuStateLabels, assets/state-*/*daemonset.yaml).
OPERANDS = (
    ("driver", "nvidia-driver-daemonset", "driver"),
    ("toolkit", "nvidia-container-toolkit-daemonset", "container-toolkit"),
    ("validator", "nvidia-operator-validator", "operator-validator"),
    ("devicePlugin", "nvidia-device-plugin-daemonset", "device-plugin"),
    ("dcgm", "nvidia-dcgm", "dcgm"),
    ("dcgmExporter", "nvidia-dcgm-exporter", "dcgm-exporter"),
    ("gfd", "gpu-feature-discovery", "gpu-feature-discovery"),
    ("migManager", "nvidia-mig-manager", "mig-manager"),
    ("nodeStatusExporter", "nvidia-node-status-exporter", "node-status-exporter"),
)
# the operands whose part in the labelling fixpoint or in not_needed is their own (the others are plain "operand")
OPERAND_ROLES = {"gfd": "gfd", "devicePlugin": "device-plugin", "driver": "driver", "migManager": "mig-manager"}
MPS_CONTROL_DAEMON = "nvidia-device-plugin-mps-control-daemon"
# the operand labels the operator adds to every GPU node (all but the MIG manager's, which needs a MIG-capable GPU)
OPERATOR_STATE_LABELS = tuple(DEPLOY_LABEL_PREFIX + label for _, _, label in OPERANDS if label != "mig-manager")


@dataclass(frozen=True)
class Workload:
    """A rendered (or operator-created) pod template and what it does on the nodes it runs on."""

    chart: str
    kind: str  # DaemonSet or Deployment
    name: str
    placement: Placement
    role: str  # nfd-worker, gfd, operator, device-plugin, mps-control-daemon, driver, mig-manager, controller, ...


def _role(name: str, labels: Mapping[str, str]) -> str:
    component = labels.get("app.kubernetes.io/component") or labels.get("app") or ""
    if name.endswith("node-feature-discovery-worker") or component == "worker":
        return "nfd-worker"
    if "gpu-feature-discovery" in name:
        return "gfd"
    if "mps-control-daemon" in name:
        return "mps-control-daemon"
    if name.endswith("device-plugin") or "nvidia-device-plugin" in name:
        return "device-plugin"
    if component == "gpu-operator":
        return "operator"
    return "controller"


def workloads(chart: str, objects: Iterable[Mapping[str, Any]]) -> list[Workload]:
    """The chart's DaemonSets and Deployments (Helm hooks left out), and the operand DaemonSets the GPU Operator
    creates from a rendered ClusterPolicy."""
    out: list[Workload] = []
    for obj in objects:
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        if kind in ("DaemonSet", "Deployment") and "helm.sh/hook" not in (meta.get("annotations") or {}):
            template = obj["spec"]["template"]
            labels = {**(meta.get("labels") or {}), **((template.get("metadata") or {}).get("labels") or {})}
            placement = Placement.from_pod_spec(template.get("spec") or {})
            out.append(Workload(chart, kind, meta["name"], placement, _role(meta["name"], labels)))
        elif kind == "ClusterPolicy":
            out.extend(_operands(chart, obj["spec"]))
    return out


def _operands(chart: str, spec: Mapping[str, Any]) -> list[Workload]:
    tolerations = (spec.get("daemonsets") or {}).get("tolerations") or []
    out = []
    for key, name, label in OPERANDS:
        if not (spec.get(key) or {}).get("enabled", True):
            continue
        selector = {DEPLOY_LABEL_PREFIX + label: "true"}
        placement = Placement.from_pod_spec({"nodeSelector": selector, "tolerations": tolerations})
        out.append(Workload(chart, "DaemonSet", name, placement, OPERAND_ROLES.get(key, "operand")))
        if key == "devicePlugin":  # the operator's MPS control daemon comes with its device plugin
            mps = Placement.from_pod_spec(
                {"nodeSelector": {**selector, MPS_CAPABLE_LABEL: "true"}, "tolerations": tolerations}
            )
            out.append(Workload(chart, "DaemonSet", MPS_CONTROL_DAEMON, mps, "mps-control-daemon"))
    return out


def _runs(workload: Workload, target: Target, labels: Mapping[str, str]) -> list[str]:
    return why_not(workload.placement, NodeShape(target.name, labels, target.node.taints))


def converge(
    loads: list[Workload], targets: list[Target], *, mig_disabled_default: bool = False
) -> dict[str, dict[str, str]]:
    """The labels each target's nodes end up with once the GPU software has run (see the module docstring)."""
    labels = {t.name: dict(t.node.labels) for t in targets}
    operator_runs = False
    for _ in range(8):  # each pass adds labels only; a handful of passes reach the fixpoint
        before = ({name: dict(node) for name, node in labels.items()}, operator_runs)
        operator_runs = any(not _runs(w, t, labels[t.name]) for w in loads if w.role == "operator" for t in targets)
        for t in targets:
            node = labels[t.name]
            running = {w.role for w in loads if w.kind == "DaemonSet" and not _runs(w, t, node)}
            if t.gpu and "nfd-worker" in running:
                node[NFD_GPU_LABEL] = "true"
            if t.gpu and "gfd" in running:
                node[MIG_CAPABLE_LABEL] = "true" if t.mig_capable else "false"
                if t.mps:
                    node[MPS_CAPABLE_LABEL] = "true"
            if operator_runs and node.get(NFD_GPU_LABEL) == "true":
                node.setdefault(GPU_PRESENT_LABEL, "true")
            if operator_runs and node.get(GPU_PRESENT_LABEL) == "true":
                for key in OPERATOR_STATE_LABELS:
                    node.setdefault(key, "true")
                if node.get(MIG_CAPABLE_LABEL) == "true":
                    node.setdefault(DEPLOY_LABEL_PREFIX + "mig-manager", "true")
                    if mig_disabled_default:
                        node.setdefault(MIG_CONFIG_LABEL, DISABLED_CONFIG)
        if (labels, operator_runs) == before:
            break
    return labels


def not_needed(workload: Workload, target: Target) -> str | None:
    """Why ``workload`` need not run on GPU target ``target``, or None when it must."""
    if workload.role == "driver" and not target.driver_by_operator:
        return "the driver is installed by AKS or the host roles here, not by the operator"
    if workload.role == "mig-manager" and not target.mig_capable:
        return "its GPUs have no MIG"
    if workload.role == "mps-control-daemon" and not target.mps:
        return "its GPUs are not shared with MPS"
    return None


@dataclass(frozen=True)
class Miss:
    target: str
    why: str
    intended: bool  # the workload is not meant to run there (e.g. the operator's driver on an AKS-driver pool)


@dataclass(frozen=True)
class Coverage:
    chart: str
    kind: str
    name: str
    runs_on: tuple[str, ...]
    misses: tuple[Miss, ...]

    @property
    def problems(self) -> list[str]:
        """What is wrong: a GPU DaemonSet missing a target it must serve, a Deployment with nowhere to run."""
        out = [f"{self.kind} {self.name} would not run on {m.target}: {m.why}" for m in self.misses if not m.intended]
        if self.kind == "Deployment" and not self.runs_on:
            out.append(f"Deployment {self.name} fits no pool or host group")
        return out


def coverage(loads: list[Workload], targets: list[Target], labels: Mapping[str, Mapping[str, str]]) -> list[Coverage]:
    """For each workload, the targets it runs on and, for DaemonSets, the GPU targets it does not run on, and why."""
    out = []
    for w in loads:
        runs_on, misses = [], []
        for t in targets:
            reasons = _runs(w, t, labels[t.name])
            if not reasons:
                runs_on.append(t.name)
            elif w.kind == "DaemonSet" and t.gpu:
                reason = not_needed(w, t)
                misses.append(Miss(t.name, reason or "; ".join(reasons), intended=reason is not None))
        out.append(Coverage(w.chart, w.kind, w.name, tuple(runs_on), tuple(misses)))
    return out


# -- the render -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedChart:
    release: ChartRelease
    manifest: str  # helm's output, as a GitOps tool would apply it
    objects: list[dict[str, Any]]

    @property
    def file(self) -> str:
        return f"{self.release.chart}.yaml"

    def kinds(self) -> dict[str, int]:
        return dict(sorted(Counter(str(o.get("kind")) for o in self.objects).items()))


@dataclass(frozen=True)
class Render:
    stack: str
    charts: list[RenderedChart]
    targets: list[Target]
    labels: dict[str, dict[str, str]]  # the targets' labels once the GPU software has run
    coverage: list[Coverage] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [p for c in self.coverage for p in c.problems]

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: ``{stack, charts:[{name, version, file, objects}], daemonsets:[{chart, name, runs_on,
        misses:[{target, why, intended}]}], deployments:[{chart, name, runs_on}], nodes:[...]}``."""
        return {
            "stack": self.stack,
            "charts": [
                {"name": c.release.chart, "version": c.release.version, "file": c.file, "objects": c.kinds()}
                for c in self.charts
            ],
            "daemonsets": [
                {
                    "chart": c.chart,
                    "name": c.name,
                    "runs_on": list(c.runs_on),
                    "misses": [{"target": m.target, "why": m.why, "intended": m.intended} for m in c.misses],
                }
                for c in self.coverage
                if c.kind == "DaemonSet"
            ],
            "deployments": [
                {"chart": c.chart, "name": c.name, "runs_on": list(c.runs_on)}
                for c in self.coverage
                if c.kind == "Deployment"
            ],
            "nodes": self.nodes(),
        }

    def nodes(self) -> list[dict[str, Any]]:
        """The labels and taints gpufleet and the platform put on each target's nodes (before the software runs)."""
        return [
            {
                "target": t.name,
                "kind": t.kind,
                "labels": dict(sorted(t.node.labels.items())),
                "taints": [str(x) for x in t.node.taints],
            }
            for t in self.targets
        ]


def releases(plan: StackPlan, baremetal_chart: str = GPU_OPERATOR_CHART) -> list[ChartRelease]:
    """What the stack installs: the AKS cluster's release, or the bare-metal cluster's (kubernetes.yml's chart)."""
    if plan.cluster is not None:
        return [plan.cluster.gpu_software]
    if plan.baremetal is not None and any(g.gpu_model for g in plan.host_groups):
        return [plan.baremetal.releases[baremetal_chart]]
    return []


def render(
    plan: StackPlan,
    *,
    directory: Path | None = None,
    baremetal_chart: str = GPU_OPERATOR_CHART,
    progress: Callable[[str], None] | None = None,
) -> Render:
    """Render the stack's charts with helm and place their workloads on the stack's targets."""
    directory = directory or charts_dir()
    wanted = releases(plan, baremetal_chart)
    helm = helm_binary() if wanted else ""
    rendered = []
    for release in wanted:
        chart = find_chart(release, directory)
        if progress is not None:
            progress(f"helm template {release.chart} {release.version} ({chart})")
        manifest = helm_template(release, chart, plan.release["kubernetes"], helm)
        rendered.append(RenderedChart(release, manifest, parse_objects(manifest)))
    chart_name = wanted[0].chart if wanted else baremetal_chart
    targets = stack_targets(plan, chart_name)
    loads = [w for c in rendered for w in workloads(c.release.chart, c.objects)]
    mig_default = any(
        (o.get("spec") or {}).get("migManager", {}).get("config", {}).get("default") == DISABLED_CONFIG
        for c in rendered
        for o in c.objects
        if o.get("kind") == "ClusterPolicy"
    )
    labels = converge(loads, targets, mig_disabled_default=mig_default)
    return Render(plan.stack, rendered, targets, labels, coverage(loads, targets, labels))


def write(result: Render, out: Path) -> list[Path]:
    """Write one YAML per chart, ``nodes.yaml`` and ``summary.json`` into ``out`` (created; its parent must exist),
    all at once: the files are written beside it first, so a failure leaves no partial directory."""
    from gpufleet.mig.outputs import dump_yaml

    parent = out.resolve().parent
    if not parent.is_dir():
        raise ChartError(f"cannot write to {out}: directory {parent} does not exist")
    if out.exists() and not out.is_dir():
        raise ChartError(f"cannot write to {out}: it is not a directory")
    files = {c.file: c.manifest for c in result.charts}
    files["nodes.yaml"] = dump_yaml({"nodes": result.nodes()})
    files["summary.json"] = json.dumps(result.to_dict(), indent=2) + "\n"
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=parent))
    except OSError as exc:
        raise ChartError(f"cannot write to {out}: {exc.strerror}") from None
    try:
        for name, text in files.items():
            (staging / name).write_text(text)
        if not out.exists():
            staging.rename(out)
        else:
            for name in files:
                os.replace(staging / name, out / name)
    except OSError as exc:
        raise ChartError(f"cannot write to {out}: {exc.strerror}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / name for name in files]


def chart_values_keys(chart: Path) -> set[str]:
    """Every key path of a chart's values.yaml and of its subcharts' (under their aliases), as dotted paths; an empty
    mapping in the chart (``data: {}``) takes keys of the user's choosing and is written ``path.*``."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")

    def walk(node: Any, prefix: str) -> Iterable[str]:
        for key, value in node.items():
            path = f"{prefix}{key}"
            yield path
            if isinstance(value, dict):
                yield from walk(value, path + ".") if value else [path + ".*"]

    def load(directory_or_tgz: Path) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        if directory_or_tgz.is_dir():
            values = yaml.load((directory_or_tgz / "values.yaml").read_text()) or {}
            chart_yaml = yaml.load((directory_or_tgz / "Chart.yaml").read_text()) or {}
            aliases = {d["name"]: d.get("alias") or d["name"] for d in chart_yaml.get("dependencies") or []}
            subs = []
            for sub in sorted((directory_or_tgz / "charts").glob("*")):
                meta = yaml.load((sub / "Chart.yaml").read_text()) if sub.is_dir() else _tgz_member(sub, "Chart.yaml")
                sub_values = load(sub)[0] if sub.is_dir() else _tgz_member(sub, "values.yaml")
                subs.append((aliases.get(meta["name"], meta["name"]), sub_values or {}))
            return values, subs
        return _tgz_member(directory_or_tgz, "values.yaml") or {}, []

    def _tgz_member(path: Path, member: str) -> Any:
        with tarfile.open(path) as tar:
            for info in tar.getmembers():
                parts = info.name.split("/")
                if len(parts) == 2 and parts[1] == member:
                    handle = tar.extractfile(info)
                    return yaml.load(handle.read().decode()) if handle else None
        return None

    values, subs = load(chart)
    keys = set(walk(values, ""))
    for name, sub_values in subs:
        keys.add(name)
        keys |= set(walk(sub_values, f"{name}."))
    return keys
